package eventstore

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
)

// Verify checks the whole database in one read-only snapshot, as
// BoltStore.Verify checks a file: every stream's hash chain against its
// row, that each record sits at the sequence it carries and within the
// last sequence, that no record lacks its stream, the index against the
// records, the snapshots and the checkpoints' checksums. It calls report
// (which may be nil) for each problem; stream is "" for problems outside
// a stream. It returns nil for a sound database, an error matching
// ErrCorrupt if problems were found, or the error that stopped the walk.
//
// It holds one REPEATABLE READ transaction for its whole run (which keeps
// the server from vacuuming what it may still read): run it when the
// store is quiet.
func (s *PostgresStore) Verify(ctx context.Context, report func(stream string, err error)) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	type problem struct {
		stream string
		err    error
	}
	var problems []problem
	truncated := false
	add := func(stream string, err error) {
		if len(problems) < maxVerifyProblems {
			problems = append(problems, problem{stream, err})
		} else {
			truncated = true
		}
	}
	err := s.readOnly(ctx, func(tx pgx.Tx) error {
		var last int64
		if err := tx.QueryRow(ctx, `SELECT last_seq FROM si_meta WHERE id = 1`).Scan(&last); err != nil {
			return err
		}
		rows, _ := tx.Query(ctx, `SELECT stream FROM si_streams WHERE version > 0 UNION SELECT DISTINCT stream FROM si_events`)
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		sort.Strings(names)
		known := make(map[string]bool, len(names))
		var records int64
		streamProblems := false
		for _, name := range names {
			known[name] = true
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := checkStream(name); err != nil {
				add(name, &CorruptionError{Stream: name, Reason: "invalid stream name stored", Err: err})
				streamProblems = true
				continue
			}
			n, err := verifyPgStream(ctx, tx, name, uint64(last))
			records += n
			if err != nil {
				var ce *CorruptionError
				if !errors.As(err, &ce) && !errors.Is(err, ErrUnsupportedFormat) {
					return err
				}
				add(name, err)
				streamProblems = true
			}
		}
		rows, _ = tx.Query(ctx, `SELECT DISTINCT stream FROM si_index`)
		indexed, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, name := range indexed {
			if !known[name] {
				add(name, corrupt(name, 0, "the index holds entries of a stream the database does not have"))
			}
		}
		var count, maxSeq int64
		if err := tx.QueryRow(ctx, `SELECT count(*), coalesce(max(seq), 0) FROM si_events`).Scan(&count, &maxSeq); err != nil {
			return err
		}
		if maxSeq > last {
			add("", corrupt("", 0, fmt.Sprintf("a record has sequence %d, beyond the last sequence %d", maxSeq, last)))
		}
		if !streamProblems && count != records {
			add("", corrupt("", 0, fmt.Sprintf("the streams' chains hold %d records but si_events %d", records, count)))
		}

		// Snapshots: decodable, checksummed, within their stream.
		rows, _ = tx.Query(ctx, `SELECT n.stream, n.snapshot, coalesce(s.version, 0) FROM si_snapshots n LEFT JOIN si_streams s ON s.stream = n.stream`)
		var (
			name string
			raw  []byte
			head int64
		)
		if _, err := pgx.ForEachRow(rows, []any{&name, &raw, &head}, func() error {
			snap, err := decodeSnapshot(name, raw)
			switch {
			case err != nil:
				add(name, err)
			case snap.Version > head:
				add(name, corrupt(name, 0, fmt.Sprintf("snapshot covers version %d but the stream's head is %d", snap.Version, head)))
			}
			return nil
		}); err != nil {
			return err
		}

		// Checkpoints: their checksums cover stream and version.
		var version int64
		rows, _ = tx.Query(ctx, `SELECT stream, version, checkpoint FROM si_checkpoints ORDER BY stream, version`)
		_, err = pgx.ForEachRow(rows, []any{&name, &version, &raw}, func() error {
			if _, err := decodeCheckpoint(checkpointKey(name, version), raw); err != nil {
				add(name, err)
			}
			return nil
		})
		return err
	})
	if err != nil {
		return s.dbErr(ctx, "verify", err)
	}
	if report != nil {
		for _, p := range problems {
			report(p.stream, p.err)
		}
	}
	if len(problems) == 0 {
		return nil
	}
	more := ""
	if truncated {
		more = " (stopped counting)"
	}
	return fmt.Errorf("%w: postgres %s: %d problem(s) found%s", ErrCorrupt, s.where, len(problems), more)
}

// verifyPgStream walks one stream's chain, checking each record's
// sequence column, then its index; it returns the records it counted.
func verifyPgStream(ctx context.Context, tx pgx.Tx, name string, last uint64) (int64, error) {
	cr := newChainReader(name, 1)
	var cur *pgChunk
	cr.visit = func(version int64, seq uint64) error {
		col, ok := cur.seqOf(version)
		switch {
		case !ok || col != seq:
			return corrupt(name, version, fmt.Sprintf("the record says sequence %d but is stored at sequence %d", seq, col))
		case seq > last:
			return corrupt(name, version, fmt.Sprintf("its sequence %d is beyond the last sequence %d", seq, last))
		}
		return nil
	}
	want := overlayIndex{}
	var base Base
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		var prime int64
		if !cr.primed && cr.next > 1 {
			prime = cr.next - 1
		}
		ch, err := loadChunk(ctx, tx, name, prime, cr.next, chunkRecords, chunkBytes)
		if err != nil {
			return n, err
		}
		cur = ch
		if base, err = ch.base(); err != nil {
			return n, err
		}
		from := max(cr.next, base.Version+1)
		_, end, err := cr.readChunk(ch, nil, false, chunkRecords, chunkBytes)
		if err != nil {
			return n, err
		}
		for i := range ch.recs {
			if r := &ch.recs[i]; r.version >= from && r.version < cr.next {
				want.add(&jrec{stream: name, version: r.version, raw: r.raw})
				n++
			}
		}
		if end {
			break
		}
	}
	// The index against the records (the rules of verifyIndex).
	w := want[name]
	rows, _ := tx.Query(ctx, `SELECT key, first_version, last_version FROM si_index WHERE stream = $1`, name)
	var (
		key []byte
		got Span
	)
	seen := 0
	var bad error
	if _, err := pgx.ForEachRow(rows, []any{&key, &got.First, &got.Last}, func() error {
		if bad != nil {
			return nil
		}
		exp, ok := w[string(key)]
		if !ok && len(key) > 0 && key[0] == 'r' && got.Last <= base.Version {
			return nil // a request id a destroy kept as a tombstone
		}
		if ok && key[0] == 'f' && got.First <= base.Version && got.Last == exp.Last {
			exp.First = got.First // a frame whose first records were removed keeps its entry
		}
		switch {
		case !ok:
			bad = corrupt(name, got.First, "the index names "+quoteBytes(key)+", which no record names")
		case exp != got:
			bad = corrupt(name, got.First, fmt.Sprintf("index entry %s says versions %d..%d, the records say %d..%d",
				quoteBytes(key), got.First, got.Last, exp.First, exp.Last))
		}
		seen++
		return nil
	}); err != nil {
		return n, err
	}
	if bad != nil {
		return n, bad
	}
	if seen != len(w) {
		rows, _ := tx.Query(ctx, `SELECT key FROM si_index WHERE stream = $1`, name)
		keys, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
		if err != nil {
			return n, err
		}
		have := make(map[string]bool, len(keys))
		for _, k := range keys {
			have[string(k)] = true
		}
		for k, sp := range w {
			if !have[k] && !indexMayLack(k, sp, base) {
				return n, corrupt(name, sp.First, "the index is missing "+quoteString(k))
			}
		}
	}
	return n, nil
}
