package eventstore

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// What the PostgreSQL store adds beside the log: commit signals across
// servers, tables, removal, signed checkpoints, fencing and shared keys.

// advance reports last to the watchers if it is beyond what they were
// told: a store that learns of commits from several sources (its own
// committer, other servers' notifications, polling) reports each
// sequence once, in order.
func (w *watchers) advance(last uint64) {
	w.call.Lock()
	defer w.call.Unlock()
	if last <= w.last {
		return
	}
	w.last = last
	w.mu.Lock()
	fns := make([]func(uint64), 0, len(w.fns))
	for _, fn := range w.fns {
		fns = append(fns, fn)
	}
	w.mu.Unlock()
	for _, fn := range fns {
		fn(last)
	}
}

// WatchCommits implements CommitWatcher. fn sees this store's commits at
// once (on the committer's goroutine, after the commit's appends were
// answered) and other servers' commits as their notifications arrive (on
// the listener's goroutine); each sequence is reported once, in order.
func (s *PostgresStore) WatchCommits(fn func(lastSeq uint64)) (stop func()) {
	return s.watch.add(fn)
}

// listen keeps a connection that LISTENs on the store's channel, and
// reconnects when it is lost.
func (s *PostgresStore) listen(ctx context.Context) {
	defer close(s.listenDone)
	wait := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := s.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		s.opts.Logger.Warn("eventstore: postgres: the connection listening for other servers' commits was lost; reconnecting",
			"db", s.where, "retry_in", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Second)
	}
}

func (s *PostgresStore) listenOnce(ctx context.Context) error {
	cfg := s.cfg.Copy()
	cfg.OnNotification = func(_ *pgconn.PgConn, n *pgconn.Notification) {
		if seq, err := strconv.ParseUint(n.Payload, 10, 64); err == nil {
			s.watch.advance(seq)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, s.opts.ConnectTimeout)
	conn, err := pgx.ConnectConfig(cctx, cfg)
	cancel()
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.chname}.Sanitize()); err != nil {
		return err
	}
	for {
		// Catch up with what was committed while no notification could
		// arrive (before LISTEN, or one lost).
		var last int64
		if err := conn.QueryRow(ctx, `SELECT last_seq FROM si_meta WHERE id = 1`).Scan(&last); err != nil {
			return err
		}
		s.watch.advance(uint64(last))
		wctx, cancel := context.WithTimeout(ctx, s.opts.PollInterval)
		err := conn.PgConn().WaitForNotification(wctx)
		timedOut := wctx.Err() != nil
		cancel()
		if err != nil && !(timedOut && ctx.Err() == nil) {
			return err
		}
	}
}

// ---- Tables ----

// TableWrite implements Tables: one transaction, durable like an append.
// Only each key's last op matters, so the ops become one delete and one
// upsert.
func (s *PostgresStore) TableWrite(ctx context.Context, table string, ops []TableOp) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := checkTableOps(table, ops); err != nil {
		return err
	}
	if len(ops) == 0 {
		return nil
	}
	last := make(map[string]int, len(ops))
	for i, op := range ops {
		last[string(op.Key)] = i
	}
	var dels, keys, vals [][]byte
	for i, op := range ops {
		if last[string(op.Key)] != i {
			continue
		}
		if op.Delete {
			dels = append(dels, op.Key)
			continue
		}
		v := op.Value
		if v == nil {
			v = []byte{} // NOT NULL: an empty value is a value
		}
		keys = append(keys, op.Key)
		vals = append(vals, v)
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	// Writes to one table take its lock first: two writes touching the
	// same keys in different orders would otherwise deadlock.
	b.Queue(`SELECT pg_advisory_xact_lock(1935764851, hashtext($1))`, table)
	if len(dels) > 0 {
		b.Queue(`DELETE FROM si_tables WHERE tbl = $1 AND key = ANY($2::bytea[])`, table, dels)
	}
	if len(keys) > 0 {
		b.Queue(`INSERT INTO si_tables (tbl, key, value) SELECT $1, k, v FROM unnest($2::bytea[], $3::bytea[]) AS u(k, v)
ON CONFLICT (tbl, key) DO UPDATE SET value = excluded.value`, table, keys, vals)
	}
	b.Queue("COMMIT")
	wctx, cancel := s.writeCtx(ctx)
	defer cancel()
	conn, err := s.pool.Acquire(wctx)
	if err != nil {
		return &pgCommitError{cause: s.dbErr(wctx, "table write to "+table, err)}
	}
	defer conn.Release()
	if err := conn.SendBatch(wctx, b).Close(); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) { // refused: rolled back
			s.rollback(conn)
			return &pgCommitError{cause: s.dbErr(wctx, "table write to "+table, err)}
		}
		_ = conn.Conn().Close(context.Background())
		return &pgCommitError{unknown: true, cause: s.dbErr(wctx, "table write to "+table, err)}
	}
	return nil
}

// TableGet implements Tables.
func (s *PostgresStore) TableGet(ctx context.Context, table string, key []byte) ([]byte, bool, error) {
	if err := s.check(ctx); err != nil {
		return nil, false, err
	}
	if err := checkTable(table); err != nil {
		return nil, false, err
	}
	if len(key) == 0 {
		return nil, false, nil
	}
	var v []byte
	err := s.pool.QueryRow(ctx, `SELECT value FROM si_tables WHERE tbl = $1 AND key = $2`, table, key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, s.dbErr(ctx, "table read", err)
	}
	if v == nil {
		v = []byte{}
	}
	return v, true, nil
}

// TableScan implements Tables: chunks of keys read in one read-only
// snapshot; fn runs inside that transaction.
func (s *PostgresStore) TableScan(ctx context.Context, table string, prefix, from []byte, reverse bool, fn func(k, v []byte) (bool, error)) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := checkTable(table); err != nil {
		return err
	}
	// The range: keys >= lo (inclusive), < hi (exclusive, nil: none),
	// <= top (inclusive, nil: none).
	lo := prefix
	if lo == nil {
		lo = []byte{}
	}
	hi := prefixEnd(prefix)
	var top []byte
	if from != nil {
		if reverse {
			top = from
		} else if bytes.Compare(from, lo) > 0 {
			lo = from
		}
	}
	var stop error
	errStop := errors.New("stop")
	err := s.readOnly(ctx, func(tx pgx.Tx) error {
		var after []byte // the last key handed out
		for {
			var (
				where []string
				args  = []any{table}
			)
			arg := func(v any) string { args = append(args, v); return "$" + strconv.Itoa(len(args)) }
			where = append(where, "key >= "+arg(lo))
			if hi != nil {
				where = append(where, "key < "+arg(hi))
			}
			if top != nil {
				where = append(where, "key <= "+arg(top))
			}
			order := "key"
			if after != nil {
				if reverse {
					where = append(where, "key < "+arg(after))
				} else {
					where = append(where, "key > "+arg(after))
				}
			}
			if reverse {
				order = "key DESC"
			}
			rows, err := tx.Query(ctx, `SELECT key, value FROM si_tables WHERE tbl = $1 AND `+strings.Join(where, " AND ")+
				` ORDER BY `+order+` LIMIT `+strconv.Itoa(chunkRecords), args...)
			if err != nil {
				return err
			}
			n := 0
			for rows.Next() {
				var k, v []byte
				if err := rows.Scan(&k, &v); err != nil {
					rows.Close()
					return err
				}
				n++
				after = k
				more, err := fn(k, v)
				if err != nil {
					rows.Close()
					stop = err
					return errStop
				}
				if !more {
					rows.Close()
					return errStop
				}
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			if n < chunkRecords {
				return nil
			}
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	})
	if errors.Is(err, errStop) {
		return stop
	}
	return s.dbErr(ctx, "table scan", err)
}

// ---- Removal ----

// StreamBase implements Store.
func (s *PostgresStore) StreamBase(ctx context.Context, stream string) (Base, error) {
	if err := checkStream(stream); err != nil {
		return Base{}, err
	}
	if err := s.check(ctx); err != nil {
		return Base{}, err
	}
	var (
		v int64
		h []byte
	)
	err := s.pool.QueryRow(ctx, `SELECT base_version, base_hash FROM si_streams WHERE stream = $1`, stream).Scan(&v, &h)
	if errors.Is(err, pgx.ErrNoRows) {
		return Base{}, nil
	}
	if err != nil {
		return Base{}, s.dbErr(ctx, "read the base of "+quoteString(stream), err)
	}
	return pgBase(stream, v, h)
}

func pgBase(stream string, v int64, h []byte) (Base, error) {
	if v == 0 {
		return Base{}, nil
	}
	if v < 1 || len(h) != len(Hash{}) {
		return Base{}, corrupt(stream, 0, fmt.Sprintf("the stream's base (version %d, %d-byte hash) is malformed", v, len(h)))
	}
	b := Base{Version: v}
	copy(b.Hash[:], h)
	return b, nil
}

// refusal reports whether err is the store's own verdict (bad input,
// damage, a refused removal) rather than a database failure.
func refusal(err error) bool {
	for _, e := range []error{ErrCorrupt, ErrUnsupportedFormat, ErrSnapshotBehind, ErrInvalidSnapshotVersion, ErrClosed} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// RemovePrefix implements Store: one transaction that checks the cut,
// moves the stream's base, drops the index entries only removed records
// named (keeping the tombstones KeepRequestsSince asks for) and deletes
// the records.
func (s *PostgresStore) RemovePrefix(ctx context.Context, stream string, through int64, opts ...RemoveOption) (RemoveResult, error) {
	var o removeOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := checkStream(stream); err != nil {
		return RemoveResult{}, err
	}
	if through < 1 {
		return RemoveResult{}, fmt.Errorf("%w: remove through version %d", ErrInvalidSnapshotVersion, through)
	}
	if err := s.check(ctx); err != nil {
		return RemoveResult{}, err
	}
	var res RemoveResult
	wctx, cancel := s.writeCtx(ctx)
	defer cancel()
	err := pgx.BeginTxFunc(wctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		var err error
		res, err = pgRemoveIn(wctx, tx, stream, through, o)
		return err
	})
	if err != nil {
		if refusal(err) {
			return RemoveResult{}, err
		}
		return RemoveResult{}, s.dbErr(ctx, "remove from "+quoteString(stream), err)
	}
	return res, nil
}

// RemovePrefixes is RemovePrefix for several streams (a retention pass),
// in transactions of up to 64 streams taken in name order. A stream whose
// cut is refused (beyond its head, or no snapshot covers it) is left out,
// its error in errs; any other error stops the pass (what earlier
// transactions removed stays removed).
func (s *PostgresStore) RemovePrefixes(ctx context.Context, cuts map[string]int64) (out map[string]RemoveResult, errs map[string]error, err error) {
	out, errs = make(map[string]RemoveResult, len(cuts)), map[string]error{}
	streams := make([]string, 0, len(cuts))
	for stream, through := range cuts {
		if err := checkStream(stream); err != nil {
			return out, errs, err
		}
		if through < 1 {
			return out, errs, fmt.Errorf("%w: remove through version %d", ErrInvalidSnapshotVersion, through)
		}
		streams = append(streams, stream)
	}
	slices.Sort(streams)
	for len(streams) > 0 {
		if err := s.check(ctx); err != nil {
			return out, errs, err
		}
		part := streams[:min(64, len(streams))]
		streams = streams[len(part):]
		done := map[string]RemoveResult{}
		refused := map[string]error{}
		wctx, cancel := s.writeCtx(ctx)
		err := pgx.BeginTxFunc(wctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
			for _, stream := range part {
				res, err := pgRemoveIn(wctx, tx, stream, cuts[stream], removeOptions{})
				if errors.Is(err, ErrSnapshotBehind) || errors.Is(err, ErrInvalidSnapshotVersion) {
					refused[stream] = err // refused before it wrote anything
					continue
				}
				if err != nil {
					return fmt.Errorf("stream %q: %w", stream, err)
				}
				done[stream] = res
			}
			return nil
		})
		cancel()
		if err != nil {
			if refusal(err) {
				return out, errs, err
			}
			return out, errs, s.dbErr(ctx, "remove", err)
		}
		for k, v := range done {
			out[k] = v
		}
		for k, v := range refused {
			errs[k] = v
		}
	}
	return out, errs, nil
}

// pgRemoveIn removes stream's records through a version within tx. Every
// check comes before the first write.
func pgRemoveIn(ctx context.Context, tx pgx.Tx, stream string, through int64, o removeOptions) (RemoveResult, error) {
	var (
		res      RemoveResult
		head     int64
		bv       int64
		bh       []byte
		snapshot []byte
	)
	err := tx.QueryRow(ctx, `SELECT version, base_version, base_hash FROM si_streams WHERE stream = $1 AND version > 0 FOR UPDATE`, stream).
		Scan(&head, &bv, &bh)
	if errors.Is(err, pgx.ErrNoRows) {
		return res, fmt.Errorf("%w: remove through %d, the stream %q does not exist", ErrInvalidSnapshotVersion, through, stream)
	}
	if err != nil {
		return res, err
	}
	old, err := pgBase(stream, bv, bh)
	if err != nil {
		return res, err
	}
	if through <= old.Version {
		res.Base = old
		return res, nil
	}
	if through > head {
		return res, fmt.Errorf("%w: remove through %d, the stream's head is %d", ErrInvalidSnapshotVersion, through, head)
	}
	err = tx.QueryRow(ctx, `SELECT snapshot FROM si_snapshots WHERE stream = $1`, stream).Scan(&snapshot)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return res, err
	}
	var sf snapshotFields
	if snapshot == nil || parseSnapshot(snapshot, &sf) != nil || sf.version < through {
		return res, fmt.Errorf("%w: stream %q, through %d", ErrSnapshotBehind, stream, through)
	}
	var (
		seq int64
		raw []byte
	)
	err = tx.QueryRow(ctx, `SELECT seq, record FROM si_events WHERE stream = $1 AND version = $2`, stream, through).Scan(&seq, &raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return res, corrupt(stream, through, "record is missing")
	}
	if err != nil {
		return res, err
	}
	var rf recordFields
	if err := parseRecord(raw, &rf); err != nil {
		return res, recordDecodeError(stream, through, err)
	}
	base := Base{Version: through, Hash: sha256.Sum256(raw)}

	// The index: what only removed records named goes, but tombstones.
	type entry struct {
		key []byte
		sp  Span
	}
	var cands []entry
	rows, _ := tx.Query(ctx, `SELECT key, first_version, last_version FROM si_index WHERE stream = $1 AND first_version <= $2`, stream, through)
	for rows.Next() {
		var e entry
		if err := rows.Scan(&e.key, &e.sp.First, &e.sp.Last); err != nil {
			rows.Close()
			return res, err
		}
		if e.sp.Last <= through || (len(e.key) > 0 && e.key[0] == 'r') {
			cands = append(cands, e)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return res, err
	}
	var need []int64 // versions whose server time decides a tombstone
	for _, e := range cands {
		if o.keepRequests && e.key[0] == 'r' && e.sp.Last <= through && e.sp.First > old.Version {
			need = append(need, e.sp.First)
		}
	}
	times := map[int64]int64{}
	if len(need) > 0 {
		rows, _ := tx.Query(ctx, `SELECT version, record FROM si_events WHERE stream = $1 AND version = ANY($2::bigint[])`, stream, need)
		for rows.Next() {
			var v int64
			var r []byte
			if err := rows.Scan(&v, &r); err != nil {
				rows.Close()
				return res, err
			}
			var f recordFields
			if parseRecord(r, &f) == nil {
				times[v] = metaAt(f.data)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return res, err
		}
	}
	at := func(v int64) int64 { return times[v] }
	var drop [][]byte
	for _, e := range cands {
		if !o.keeps(e.key, e.sp, old, through, at) {
			drop = append(drop, e.key)
		}
	}
	if len(drop) > 0 {
		if _, err := tx.Exec(ctx, `DELETE FROM si_index WHERE stream = $1 AND key = ANY($2::bytea[])`, stream, drop); err != nil {
			return res, err
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE si_streams SET base_version = $2, base_hash = $3, removed_seq = greatest(removed_seq, $4)
WHERE stream = $1`, stream, base.Version, base.Hash[:], seq); err != nil {
		return res, err
	}
	tag, err := tx.Exec(ctx, `DELETE FROM si_events WHERE stream = $1 AND version <= $2`, stream, through)
	if err != nil {
		return res, err
	}
	res.Base, res.Removed = base, tag.RowsAffected()
	return res, nil
}

// RemovedThrough implements RemovalReporter from each stream's recorded
// removal (every removal in this store is recorded: no overstatement).
func (s *PostgresStore) RemovedThrough(ctx context.Context, prefix string, exact bool) (uint64, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	var hi int64
	var err error
	switch {
	case exact && prefix == "":
		return 0, nil
	case exact:
		err = s.pool.QueryRow(ctx, `SELECT coalesce(max(removed_seq), 0) FROM si_streams WHERE stream = $1`, prefix).Scan(&hi)
	case prefix == "":
		err = s.pool.QueryRow(ctx, `SELECT coalesce(max(removed_seq), 0) FROM si_streams WHERE removed_seq > 0`).Scan(&hi)
	default:
		err = s.pool.QueryRow(ctx, `SELECT coalesce(max(removed_seq), 0) FROM si_streams WHERE removed_seq > 0 AND starts_with(stream, $1)`, prefix).Scan(&hi)
	}
	if err != nil {
		return 0, s.dbErr(ctx, "read removals", err)
	}
	return uint64(hi), nil
}

// ---- Signed checkpoints ----

// SignCheckpoint implements Checkpointer: in one transaction it reads the
// stored record (its row locked against removal), checks that the chain
// vouches for its hash, signs it and stores the checkpoint durably.
func (s *PostgresStore) SignCheckpoint(ctx context.Context, stream string, version int64, reason CheckpointReason, key ed25519.PrivateKey) (Checkpoint, error) {
	if err := checkStream(stream); err != nil {
		return Checkpoint{}, err
	}
	if len(key) != ed25519.PrivateKeySize {
		return Checkpoint{}, fmt.Errorf("%w: signing key is %d bytes, want %d", ErrInvalidOptions, len(key), ed25519.PrivateKeySize)
	}
	if reason != CheckpointSnapshot && reason != CheckpointRunFinished {
		return Checkpoint{}, fmt.Errorf("eventstore: unknown checkpoint reason %d", reason)
	}
	if err := s.check(ctx); err != nil {
		return Checkpoint{}, err
	}
	cp := Checkpoint{Stream: stream, Version: version, Reason: reason}
	ctx, cancel := s.writeCtx(ctx)
	defer cancel()
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		var (
			head     int64
			headHash []byte
		)
		err := tx.QueryRow(ctx, `SELECT version, head FROM si_streams WHERE stream = $1 AND version > 0 FOR SHARE`, stream).Scan(&head, &headHash)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if version < 1 || version > head {
			return fmt.Errorf("%w: checkpoint at version %d, stream %q is at version %d", ErrInvalidSnapshotVersion, version, stream, head)
		}
		if len(headHash) != len(Hash{}) {
			return corrupt(stream, 0, fmt.Sprintf("the stream's head hash is %d bytes", len(headHash)))
		}
		recs := map[int64][]byte{}
		rows, _ := tx.Query(ctx, `SELECT version, record FROM si_events WHERE stream = $1 AND version IN ($2, $3)`, stream, version, version+1)
		for rows.Next() {
			var v int64
			var raw []byte
			if err := rows.Scan(&v, &raw); err != nil {
				rows.Close()
				return err
			}
			recs[v] = raw
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		raw, ok := recs[version]
		if !ok {
			return corrupt(stream, version, "record is missing")
		}
		cp.Head = sha256.Sum256(raw)
		var vouched Hash
		copy(vouched[:], headHash)
		if version < head {
			var f recordFields
			next, ok := recs[version+1]
			if !ok || parseRecord(next, &f) != nil {
				return corrupt(stream, version+1, "record is missing or undecodable")
			}
			vouched = f.prev
		}
		if vouched != cp.Head {
			return corrupt(stream, version, "its hash does not match what the chain records; refusing to sign it")
		}
		cp.Sign(key)
		_, err = tx.Exec(ctx, `INSERT INTO si_checkpoints (stream, version, checkpoint) VALUES ($1, $2, $3)
ON CONFLICT (stream, version) DO UPDATE SET checkpoint = excluded.checkpoint`, stream, version, encodeCheckpoint(&cp))
		return err
	})
	if err != nil {
		if refusal(err) {
			return Checkpoint{}, err
		}
		return Checkpoint{}, s.dbErr(ctx, "sign a checkpoint of "+quoteString(stream), err)
	}
	return cp, nil
}

// Checkpoints implements Checkpointer. Each stored checkpoint's checksum
// covers its stream and version (as BoltStore's key), so a row moved to
// another stream or version is damage.
func (s *PostgresStore) Checkpoints(ctx context.Context, stream string, fn func(Checkpoint) error) error {
	if stream != "" {
		if err := checkStream(stream); err != nil {
			return err
		}
	}
	if err := s.check(ctx); err != nil {
		return err
	}
	var out []Checkpoint
	var damaged []error
	q, args := `SELECT stream, version, checkpoint FROM si_checkpoints ORDER BY stream, version`, []any(nil)
	if stream != "" {
		q, args = `SELECT stream, version, checkpoint FROM si_checkpoints WHERE stream = $1 ORDER BY version`, []any{stream}
	}
	rows, _ := s.pool.Query(ctx, q, args...)
	for rows.Next() {
		var (
			name string
			v    int64
			raw  []byte
		)
		if err := rows.Scan(&name, &v, &raw); err != nil {
			rows.Close()
			return s.dbErr(ctx, "read checkpoints", err)
		}
		cp, err := decodeCheckpoint(checkpointKey(name, v), raw)
		if err != nil {
			if len(damaged) < maxCheckpointProblems {
				damaged = append(damaged, err)
			}
			continue
		}
		out = append(out, cp)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return s.dbErr(ctx, "read checkpoints", err)
	}
	for _, cp := range out {
		if err := fn(cp); err != nil {
			return err
		}
	}
	return errors.Join(damaged...)
}

// ---- Fencing and shared keys ----

// AcquireOwner implements Fencer: one durable upsert that takes the next
// epoch. It waits for commits in flight that checked the stream's current
// fence (they hold its owner row locked), so every append it deposes
// either committed before it returns or fails.
func (s *PostgresStore) AcquireOwner(ctx context.Context, stream, owner string) (Fence, error) {
	if err := checkStream(stream); err != nil {
		return Fence{}, err
	}
	if err := CheckOwner(owner); err != nil { // the rule every Fencer applies
		return Fence{}, err
	}
	if err := s.check(ctx); err != nil {
		return Fence{}, err
	}
	var epoch int64
	ctx, cancel := s.writeCtx(ctx)
	defer cancel()
	err := s.pool.QueryRow(ctx, `INSERT INTO si_owners (stream, owner, epoch) VALUES ($1, $2, 1)
ON CONFLICT (stream) DO UPDATE SET owner = excluded.owner, epoch = si_owners.epoch + 1 RETURNING epoch`, stream, owner).Scan(&epoch)
	if err != nil {
		return Fence{}, s.dbErr(ctx, "acquire the owner of "+quoteString(stream), err)
	}
	return Fence{Owner: owner, Epoch: uint64(epoch)}, nil
}

// Owner implements Fencer.
func (s *PostgresStore) Owner(ctx context.Context, stream string) (Fence, error) {
	if err := checkStream(stream); err != nil {
		return Fence{}, err
	}
	if err := s.check(ctx); err != nil {
		return Fence{}, err
	}
	var f Fence
	var epoch int64
	err := s.pool.QueryRow(ctx, `SELECT owner, epoch FROM si_owners WHERE stream = $1`, stream).Scan(&f.Owner, &epoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return Fence{}, nil
	}
	if err != nil {
		return Fence{}, s.dbErr(ctx, "read the owner of "+quoteString(stream), err)
	}
	f.Epoch = uint64(epoch)
	return f, nil
}

// SharedKey implements KeyKeeper: the stored key, or generate()'s bytes
// stored first (INSERT … ON CONFLICT DO NOTHING, then a read: of two
// servers racing, the second waits for the first's commit and reads its
// key).
func (s *PostgresStore) SharedKey(ctx context.Context, name string, generate func() ([]byte, error)) ([]byte, error) {
	if err := checkKeyName(name); err != nil {
		return nil, err
	}
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	read := func() ([]byte, bool, error) {
		var k []byte
		err := s.pool.QueryRow(ctx, `SELECT key FROM si_keys WHERE name = $1`, name).Scan(&k)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, false, nil
		}
		return k, err == nil, s.dbErr(ctx, "read shared key "+name, err)
	}
	if k, ok, err := read(); err != nil || ok {
		return k, err
	}
	k, err := generate()
	if err != nil {
		return nil, fmt.Errorf("eventstore: generate shared key %s: %w", name, err)
	}
	if err := checkSharedKey(name, k); err != nil { // the same bounds as every KeyKeeper
		return nil, err
	}
	wctx, cancel := s.writeCtx(ctx)
	defer cancel()
	if _, err := s.pool.Exec(wctx, `INSERT INTO si_keys (name, key) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`, name, k); err != nil {
		return nil, s.dbErr(ctx, "store shared key "+name, err)
	}
	k, ok, err := read()
	if err == nil && !ok {
		err = fmt.Errorf("eventstore: postgres %s: shared key %s vanished after it was stored", s.where, name)
	}
	return k, err
}
