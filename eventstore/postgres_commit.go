package eventstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The PostgreSQL store's committer (see the top of postgres.go).

// pgRequest is one append waiting for the committer. The caller fills it
// and waits on done (or set cb); the committer fills res and err and
// answers exactly once.
type pgRequest struct {
	ctx      context.Context
	stream   string
	expected int64
	fence    *Fence // nil: not checked
	buf      []byte
	ends     []int

	res   AppendResult
	err   error
	wrote bool // part of the transaction being committed
	done  chan struct{}
	cb    func(AppendResult, error)
}

func (r *pgRequest) answer() {
	if r.cb != nil {
		r.cb(r.res, r.err)
		return
	}
	close(r.done)
}

// pgCommitError is the error of an append whose group commit failed.
type pgCommitError struct {
	cause   error
	unknown bool // the COMMIT may have happened
}

func (e *pgCommitError) Error() string {
	if e.unknown {
		return "eventstore: commit failed: the connection was lost while the commit was in flight and the outcome could not be read back, " +
			"so whether these events were written is unknown (read the stream before retrying; a request id makes a retry safe): " + e.cause.Error()
	}
	return "eventstore: commit failed before anything was written (a retry is safe): " + e.cause.Error()
}

// Is makes an unknown outcome match ErrCommitFailed, and a known failure
// ErrTransient (nothing was written).
func (e *pgCommitError) Is(target error) bool {
	if e.unknown {
		return target == ErrCommitFailed
	}
	return target == ErrTransient
}

func (e *pgCommitError) Unwrap() error { return e.cause }

// Append implements Store. It returns once the events are committed with
// synchronous_commit=on (their WAL flushed), or with the reason they were
// not. The context is honoured until the committer takes the append into
// a transaction; after that Append reports the commit's real outcome.
// If ctx carries a fence (WithFence), the stream's owner is checked in
// the same transaction: a mismatch is a *FencedError and writes nothing.
func (s *PostgresStore) Append(ctx context.Context, stream string, expected int64, events []Event) (AppendResult, error) {
	r, err := s.newAppend(ctx, stream, expected, events)
	if err != nil {
		return AppendResult{}, err
	}
	r.done = make(chan struct{})
	if err := s.enqueue(ctx, r); err != nil {
		return AppendResult{}, err
	}
	<-r.done
	return r.res, r.err
}

// AppendAsync implements AsyncAppender: done is called once with what
// Append would return, on the committer's goroutine after the commit (it
// must be quick and must not call the store), or on the caller's if the
// append is refused before it is queued.
func (s *PostgresStore) AppendAsync(ctx context.Context, stream string, expected int64, events []Event, done func(AppendResult, error)) {
	r, err := s.newAppend(ctx, stream, expected, events)
	if err != nil {
		done(AppendResult{}, err)
		return
	}
	r.cb = done
	if err := s.enqueue(ctx, r); err != nil {
		done(AppendResult{}, err)
	}
}

func (s *PostgresStore) newAppend(ctx context.Context, stream string, expected int64, events []Event) (*pgRequest, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	r := &pgRequest{ctx: ctx, stream: stream, expected: expected}
	var err error
	if r.buf, r.ends, err = encodeAppend(nil, nil, stream, expected, events, &s.opts.Limits); err != nil {
		return nil, err
	}
	if f, ok := FenceFrom(ctx); ok {
		r.fence = &f
	}
	return r, nil
}

func (s *PostgresStore) enqueue(ctx context.Context, r *pgRequest) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	select {
	case s.queue <- r:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run is the committer goroutine: it blocks for the first pending append,
// takes every other one already pending (no timer: a lone writer never
// waits) and commits them in one transaction.
func (s *PostgresStore) run() {
	defer close(s.done)
	var carry *pgRequest
	for {
		first := carry
		carry = nil
		if first == nil {
			r, ok := <-s.queue
			if !ok {
				return
			}
			first = r
		}
		batch := []*pgRequest{first}
		size := len(first.buf)
	drain:
		for len(batch) < s.opts.MaxBatch && size < s.opts.MaxCommitBytes {
			select {
			case r, ok := <-s.queue:
				if !ok {
					break drain
				}
				if size+len(r.buf) > s.opts.MaxCommitBytes {
					carry = r
					break drain
				}
				batch = append(batch, r)
				size += len(r.buf)
			default:
				break drain
			}
		}
		s.commit(batch)
	}
}

// commit writes a batch in one transaction and answers every append.
func (s *PostgresStore) commit(batch []*pgRequest) {
	live := make([]*pgRequest, 0, len(batch))
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.err = err // canceled before its writes: it wrote nothing
			continue
		}
		live = append(live, r)
	}
	var last uint64
	if len(live) > 0 {
		last = s.commitLive(live)
	}
	for _, r := range batch {
		r.answer()
	}
	if last > 0 {
		s.watch.advance(last) // committed: readable by every statement begun from now
	}
}

// pgHead is a stream's head as the batch moves it.
type pgHead struct {
	version int64
	head    Hash
	created bool  // its row was inserted by this transaction
	err     error // damaged: appends to it are refused
	dirty   bool
}

const (
	sqlLockStreams = `INSERT INTO si_streams (stream, version, head)
SELECT s, 0, '\x'::bytea FROM unnest($1::text[]) AS s ORDER BY s COLLATE "C"
ON CONFLICT (stream) DO UPDATE SET version = si_streams.version WHERE false`
	sqlReadStreams = `SELECT s.stream, s.version, s.head, s.base_version,
	(SELECT max(e.version) FROM si_events e WHERE e.stream = s.stream)
FROM si_streams s WHERE s.stream = ANY($1::text[])`
	// The owner rows of fenced streams are locked like the stream rows
	// (a missing one is created with the zero fence, never owned), so
	// that AcquireOwner waits for this commit, even of a stream never
	// owned.
	sqlLockOwners = `INSERT INTO si_owners (stream, owner, epoch)
SELECT s, '', 0 FROM unnest($1::text[]) AS s ORDER BY s COLLATE "C"
ON CONFLICT (stream) DO UPDATE SET epoch = si_owners.epoch WHERE false`
	sqlReadOwners  = `SELECT stream, owner, epoch FROM si_owners WHERE stream = ANY($1::text[])`
	sqlLockCounter = `SELECT last_seq FROM si_meta WHERE id = 1 FOR UPDATE`
	sqlInsertEvent = `INSERT INTO si_events (seq, stream, version, record)
SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bytea[])`
	sqlMoveHeads = `UPDATE si_streams AS s SET version = u.version, head = u.head
FROM unnest($1::text[], $2::bigint[], $3::bytea[]) AS u(stream, version, head) WHERE s.stream = u.stream`
	sqlDropEmpty  = `DELETE FROM si_streams WHERE stream = ANY($1::text[]) AND version = 0`
	sqlSetCounter = `UPDATE si_meta SET last_seq = $1 WHERE id = 1`
	sqlNotify     = `SELECT pg_notify($1, $2)`
)

// commitLive runs the transaction of a batch's live appends and fills in
// their outcomes; it returns the last sequence committed (0: none).
func (s *PostgresStore) commitLive(live []*pgRequest) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.CommitTimeout)
	defer cancel()
	failAll := func(err error) {
		for _, r := range live {
			if r.err == nil {
				r.err, r.res = err, AppendResult{}
			}
		}
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		failAll(&pgCommitError{cause: s.dbErr(ctx, "no connection for a commit", err)})
		return 0
	}
	released := false
	release := func() {
		if !released {
			released = true
			conn.Release()
		}
	}
	defer release()

	var names, fenced []string
	for _, r := range live {
		names = append(names, r.stream)
		if r.fence != nil {
			fenced = append(fenced, r.stream)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	slices.Sort(fenced)
	fenced = slices.Compact(fenced)

	// Round trip 1: lock the streams (creating missing rows), read their
	// heads and owners, lock the counter.
	heads, owners, lastSeq, err := s.lockBatch(ctx, conn, names, fenced)
	if err != nil {
		s.rollback(conn)
		failAll(&pgCommitError{cause: s.dbErr(ctx, "group commit", err)})
		return 0
	}

	// Decide every append before any write.
	var (
		seqs, versions []int64
		streams        []string
		records        [][]byte
		idx            = overlayIndex{}
	)
	startSeq, seq := lastSeq, lastSeq
	var firstRaw []byte
	for _, r := range live {
		st := heads[r.stream]
		if st == nil {
			r.err = corrupt(r.stream, 0, "the stream's row vanished while locked")
			continue
		}
		if st.err != nil {
			r.err = st.err
			continue
		}
		if r.fence != nil {
			if cur := owners[r.stream]; cur != *r.fence {
				r.err = &FencedError{Stream: r.stream, Held: *r.fence, Current: cur}
				continue
			}
		}
		if r.expected != Any && r.expected != st.version {
			r.err = &ConflictError{Stream: r.stream, Expected: r.expected, Actual: st.version}
			continue
		}
		n := int64(len(r.ends))
		if st.version > math.MaxInt64-n || seq > math.MaxInt64-uint64(n) {
			r.err = fmt.Errorf("eventstore: stream %q: version or sequence would overflow", r.stream)
			continue
		}
		res := AppendResult{FirstVersion: st.version + 1, FirstSeq: seq + 1}
		start := 0
		for _, end := range r.ends {
			rec := r.buf[start:end:end]
			start = end
			st.version++
			seq++
			patchRecord(rec, seq, st.version, &st.head)
			st.head = sha256.Sum256(rec)
			if firstRaw == nil {
				firstRaw = rec
			}
			seqs = append(seqs, int64(seq))
			streams = append(streams, r.stream)
			versions = append(versions, st.version)
			records = append(records, rec)
			idx.add(&jrec{stream: r.stream, version: st.version, raw: rec})
		}
		st.dirty = true
		res.LastVersion, res.LastSeq, res.Head = st.version, seq, st.head
		r.res, r.wrote = res, true
	}
	if seq == startSeq { // every append refused: nothing to write
		s.rollback(conn)
		return 0
	}

	// Round trip 2: write, notify, commit.
	b := &pgx.Batch{}
	b.Queue(sqlInsertEvent, seqs, streams, versions, records)
	var hn []string
	var hv []int64
	var hh [][]byte
	var empty []string
	for _, name := range names {
		st := heads[name]
		switch {
		case st != nil && st.dirty:
			hn = append(hn, name)
			hv = append(hv, st.version)
			hh = append(hh, bytes.Clone(st.head[:]))
		case st != nil && st.created:
			empty = append(empty, name)
		}
	}
	b.Queue(sqlMoveHeads, hn, hv, hh)
	if len(empty) > 0 {
		b.Queue(sqlDropEmpty, empty)
	}
	var (
		is            []string
		ik            [][]byte
		ifirst, ilast []int64
	)
	for stream, m := range idx {
		for k, sp := range m {
			is = append(is, stream)
			ik = append(ik, []byte(k))
			ifirst = append(ifirst, sp.First)
			ilast = append(ilast, sp.Last)
		}
	}
	if len(ik) > 0 {
		b.Queue(sqlUpsertIndex, is, ik, ifirst, ilast)
	}
	b.Queue(sqlSetCounter, int64(seq))
	b.Queue(sqlNotify, s.chname, strconv.FormatUint(seq, 10))
	b.Queue("COMMIT")

	failWrote := func(err error) {
		for _, r := range live {
			if r.wrote {
				r.err, r.res, r.wrote = err, AppendResult{}, false
			}
		}
	}
	err = s.callHook("before-commit")
	if err == nil {
		err = sendAll(ctx, conn, b)
		if err == nil {
			err = s.callHook("after-commit")
		}
	}
	if err == nil {
		return seq
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) { // the server refused: the transaction rolled back
		s.rollback(conn)
		failWrote(&pgCommitError{cause: s.dbErr(ctx, "group commit", err)})
		return 0
	}
	// The connection was lost with the COMMIT perhaps in flight: close it
	// (the server then ends the transaction, if it still has it) and read
	// the outcome back on a new one.
	_ = conn.Conn().Close(context.Background())
	release()
	committed, rerr := s.resolve(int64(startSeq+1), firstRaw)
	switch {
	case rerr != nil:
		failWrote(&pgCommitError{unknown: true, cause: fmt.Errorf("%w; reading the outcome back: %w", s.dbErr(ctx, "group commit", err), rerr)})
		return 0
	case !committed:
		failWrote(&pgCommitError{cause: fmt.Errorf("%w (read back: not committed)", s.dbErr(ctx, "group commit", err))})
		return 0
	}
	return seq
}

// lockBatch runs the first round trip of a group commit.
func (s *PostgresStore) lockBatch(ctx context.Context, conn *pgxpool.Conn, names, fenced []string) (map[string]*pgHead, map[string]Fence, uint64, error) {
	b := &pgx.Batch{}
	b.Queue(`BEGIN ISOLATION LEVEL READ COMMITTED`)
	b.Queue(sqlLockStreams, names)
	heads := make(map[string]*pgHead, len(names))
	b.Queue(sqlReadStreams, names).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var (
				name       string
				version    int64
				head       []byte
				base       int64
				lastRecord *int64
			)
			if err := rows.Scan(&name, &version, &head, &base, &lastRecord); err != nil {
				return err
			}
			heads[name] = streamHead(name, version, head, base, lastRecord)
		}
		return rows.Err()
	})
	owners := make(map[string]Fence, len(fenced))
	if len(fenced) > 0 {
		b.Queue(sqlLockOwners, fenced)
		b.Queue(sqlReadOwners, fenced).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var (
					name, owner string
					epoch       int64
				)
				if err := rows.Scan(&name, &owner, &epoch); err != nil {
					return err
				}
				owners[name] = Fence{Owner: owner, Epoch: uint64(epoch)}
			}
			return rows.Err()
		})
	}
	var last int64
	b.Queue(sqlLockCounter).QueryRow(func(row pgx.Row) error { return row.Scan(&last) })
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, nil, 0, err
	}
	if last < 0 {
		return nil, nil, 0, corrupt("", 0, fmt.Sprintf("the last sequence is %d", last))
	}
	return heads, owners, uint64(last), nil
}

// streamHead checks a locked stream row against its records: a stream
// whose metadata disagrees with them (a dropped tail, say) is refused, as
// appending would bury the damage.
func streamHead(name string, version int64, head []byte, base int64, lastRecord *int64) *pgHead {
	st := &pgHead{version: version}
	last := int64(0)
	if lastRecord != nil {
		last = *lastRecord
	}
	if version == 0 {
		st.created = true
		if last != 0 {
			st.err = corrupt(name, 0, fmt.Sprintf("records up to version %d exist but the stream has no metadata; refusing to append", last))
		}
		return st
	}
	if len(head) != len(Hash{}) {
		st.err = corrupt(name, 0, fmt.Sprintf("the stream's head hash is %d bytes", len(head)))
		return st
	}
	copy(st.head[:], head)
	if last < version {
		last = max(last, base)
	}
	if last != version {
		st.err = corrupt(name, 0, fmt.Sprintf(
			"stream metadata says the head is version %d but the last record is version %d; refusing to append", version, last))
	}
	return st
}

// sendAll sends a batch and reads every result, returning the first error.
func sendAll(ctx context.Context, conn *pgxpool.Conn, b *pgx.Batch) error {
	return conn.SendBatch(ctx, b).Close()
}

// rollback ends a transaction left open on conn; a connection it cannot
// clean is closed (the pool then drops it).
func (s *PostgresStore) rollback(conn *pgxpool.Conn) {
	if conn.Conn().IsClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.CommitTimeout)
	defer cancel()
	if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
		_ = conn.Conn().Close(ctx)
	}
}

// resolve finds out, on a new connection, whether the transaction that
// took sequences from first on committed: it waits for the counter row
// (held by that transaction until it ends, if the server still runs it),
// then looks for the transaction's first record at its sequence.
func (s *PostgresStore) resolve(first int64, raw []byte) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.ResolveTimeout)
	defer cancel()
	if err := s.callHook("resolve"); err != nil {
		return false, err
	}
	var committed bool
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		var last int64
		if err := tx.QueryRow(ctx, `SELECT last_seq FROM si_meta WHERE id = 1 FOR SHARE`).Scan(&last); err != nil {
			return err
		}
		var got []byte
		err := tx.QueryRow(ctx, `SELECT record FROM si_events WHERE seq = $1`, first).Scan(&got)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		committed = bytes.Equal(got, raw)
		return nil
	})
	return committed, err
}
