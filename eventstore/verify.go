package eventstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	bolt "go.etcd.io/bbolt"
)

// maxVerifyProblems bounds what Verify collects from a badly damaged file.
const maxVerifyProblems = 1000

// Verify checks the whole data file in one read transaction: every stream's
// hash chain against its metadata, that the global index maps the
// sequences 1..LastSeq one to one onto the records, every snapshot, and —
// if all of that is sound — bbolt's own page structure. It calls report (which may be nil) for each
// problem, after the transaction has ended; stream is "" for problems
// outside a stream. It returns nil for a sound file, an error matching
// ErrCorrupt if problems were found, or the error that stopped the walk
// (a canceled ctx, ErrClosed).
//
// Verify holds one read transaction for its whole run: a commit that must
// grow the file waits for it. Run it when the store is quiet, or size
// Options.InitialMmapSize generously.
func (s *BoltStore) Verify(ctx context.Context, report func(stream string, err error)) error {
	type problem struct {
		stream string
		err    error
	}
	// Journaled records bbolt does not cover yet are written to it first,
	// so the one transaction below sees every acknowledged record.
	if err := s.Flush(ctx); err != nil && !errors.Is(err, ErrWritesDisabled) {
		return err
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
	err := s.view(func(tx *bolt.Tx) error {
		bk, err := openBuckets(tx)
		if err != nil {
			add("", err)
			return nil
		}
		lastSeq, err := readLastSeq(bk.meta)
		if err != nil {
			add("", err)
		}

		// Every stream named by metadata or by a records bucket.
		names := map[string]struct{}{}
		if err := bk.heads.ForEach(func(k, _ []byte) error {
			names[string(k)] = struct{}{}
			return nil
		}); err != nil {
			return err
		}
		if err := bk.streams.ForEach(func(k, v []byte) error {
			if v != nil {
				add("", corrupt("", 0, "the streams bucket holds a plain value under "+quoteString(k)))
				return nil
			}
			names[string(k)] = struct{}{}
			return nil
		}); err != nil {
			return err
		}
		sorted := make([]string, 0, len(names))
		for name := range names {
			sorted = append(sorted, name)
		}
		sort.Strings(sorted)

		var records uint64
		streamProblems := false
		var k8 [8]byte
		for _, name := range sorted {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := checkStream(name); err != nil {
				add(name, &CorruptionError{Stream: name, Reason: "invalid stream name stored", Err: err})
				streamProblems = true
				continue
			}
			cr := newChainReader(name, 1)
			cr.visit = func(version int64, seq uint64) error {
				v := bk.seq.Get(u64key(&k8, seq))
				switch {
				case v == nil:
					return corrupt(name, version, fmt.Sprintf("the global index has no entry for its sequence %d", seq))
				case len(v) < 8 || int64(binary.BigEndian.Uint64(v[:8])) != version || string(v[8:]) != name:
					return corrupt(name, version, fmt.Sprintf("global index entry %d points to another record", seq))
				case seq > lastSeq:
					return corrupt(name, version, fmt.Sprintf("its sequence %d is beyond the last sequence %d", seq, lastSeq))
				}
				return nil
			}
			if err := recovered(name, func() error { return verifyChain(ctx, &cr, newBoltSource(bk, name)) }); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				add(name, err)
				streamProblems = true
			}
			src := newBoltSource(bk, name)
			base, err := src.base()
			if err != nil {
				add(name, err)
				streamProblems = true
				continue
			}
			records += uint64(cr.next - 1 - min(base.Version, cr.next-1))
			if src.b != nil && base.Version > 0 { // left below the base by an interrupted removal
				c := src.b.Cursor()
				for k, _ := c.First(); k != nil && len(k) == 8 && int64(binary.BigEndian.Uint64(k)) <= base.Version; k, _ = c.Next() {
					records++
				}
			}
			if err := recovered(name, func() error { return verifyIndex(bk, name) }); err != nil {
				add(name, err)
				streamProblems = true
			}
		}
		if err := bk.index.ForEach(func(k, _ []byte) error {
			if _, ok := names[string(k)]; !ok {
				add(string(k), corrupt(string(k), 0, "the index holds entries of a stream the file does not have"))
			}
			return nil
		}); err != nil {
			return err
		}

		// The global index: keys 1..lastSeq, without gaps unless history
		// was removed — then the entries and the removed ones add up.
		removed := readRemovedSeq(bk.meta)
		var entries, prev uint64
		c := bk.seq.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if len(k) != 8 {
				add("", corrupt("", 0, "malformed global index key "+quoteBytes(k)))
				break
			}
			seq := binary.BigEndian.Uint64(k)
			if removed == 0 && seq != prev+1 {
				add("", corrupt("", 0, fmt.Sprintf("global index is missing sequence %d", prev+1)))
				break
			}
			if seq > lastSeq {
				add("", corrupt("", 0, fmt.Sprintf("global index has sequence %d beyond the last sequence %d", seq, lastSeq)))
				break
			}
			prev = seq
			entries++
		}
		if entries+removed != lastSeq {
			add("", corrupt("", 0, fmt.Sprintf("global index holds %d entries and %d were removed, but the last sequence is %d", entries, removed, lastSeq)))
		}
		if !streamProblems && records != entries {
			add("", corrupt("", 0, fmt.Sprintf("streams hold %d records but the global index %d entries", records, entries)))
		}

		// Snapshots: decodable, checksummed, within their stream.
		if err := bk.snaps.ForEach(func(k, v []byte) error {
			name := string(k)
			if v == nil {
				add(name, corrupt(name, 0, "snapshots bucket holds a bucket"))
				return nil
			}
			snap, err := decodeSnapshot(name, v)
			if err != nil {
				add(name, err)
				return nil
			}
			head, _, _, err := newBoltSource(bk, name).head()
			if err == nil && snap.Version > head {
				add(name, corrupt(name, 0, fmt.Sprintf("snapshot covers version %d but the stream's head is %d", snap.Version, head)))
			}
			return nil
		}); err != nil {
			return err
		}

		// bbolt's page-level consistency, only on a file whose records all
		// read cleanly: tx.Check runs in a goroutine of its own, where a
		// fault in a damaged page's memory map would crash the process
		// instead of becoming a panic we can recover.
		if len(problems) == 0 {
			for err := range tx.Check() {
				add("", &CorruptionError{Reason: "inconsistent page structure", Err: err})
			}
		}
		return nil
	})
	if err != nil {
		var ce *CorruptionError
		if !errors.As(err, &ce) {
			return err // closed, canceled
		}
		add("", err)
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
	return fmt.Errorf("%w: %s: %d problem(s) found%s", ErrCorrupt, s.path, len(problems), more)
}

// recovered runs fn, turning a panic of the storage engine while reading
// stream's pages into a *CorruptionError, so that Verify goes on with the
// other streams.
func recovered(stream string, fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &CorruptionError{Stream: stream, Reason: "the storage engine failed while reading the stream's pages", Err: fmt.Errorf("panic: %v", p)}
		}
	}()
	return fn()
}

// verifyIndex recomputes a stream's index from its records and compares it
// with the stored one, entry by entry.
func verifyIndex(bk *buckets, name string) error {
	base, err := newBoltSource(bk, name).base()
	if err != nil {
		return err
	}
	want := overlayIndex{}
	if sb := bk.streams.Bucket([]byte(name)); sb != nil {
		c := sb.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if len(k) == 8 && v != nil && int64(binary.BigEndian.Uint64(k)) > base.Version {
				want.add(&jrec{stream: name, version: int64(binary.BigEndian.Uint64(k)), raw: v})
			}
		}
	}
	w := want[name]
	seen := 0
	if ib := bk.index.Bucket([]byte(name)); ib != nil {
		c := ib.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			got, err := decodeSpan(name, v)
			if err != nil {
				return corrupt(name, 0, "index entry "+quoteBytes(k)+" is undecodable")
			}
			exp, ok := w[string(k)]
			if !ok && len(k) > 0 && k[0] == 'r' && got.Last <= base.Version {
				continue // a request id a destroy kept as a tombstone (KeepRequestsSince)
			}
			if ok && k[0] == 'f' && got.First <= base.Version && got.Last == exp.Last {
				exp.First = got.First // a frame whose first records were removed keeps its entry
			}
			switch {
			case !ok:
				return corrupt(name, got.First, "the index names "+quoteBytes(k)+", which no record names")
			case exp != got:
				return corrupt(name, got.First, fmt.Sprintf("index entry %s says versions %d..%d, the records say %d..%d",
					quoteBytes(k), got.First, got.Last, exp.First, exp.Last))
			}
			seen++
		}
	}
	if seen != len(w) {
		for k, sp := range w {
			if ib := bk.index.Bucket([]byte(name)); (ib == nil || ib.Get([]byte(k)) == nil) && !indexMayLack(k, sp, base) {
				return corrupt(name, sp.First, "the index is missing "+quoteString(k))
			}
		}
	}
	return nil
}

// indexMayLack reports whether a stream's index may lack key although its
// records from the base on name it (spanning sp): RemovePrefix drops a
// request whose records straddle the cut (it can no longer be answered
// from the log), and that request's first remaining record is the one
// right after the base.
func indexMayLack(key string, sp Span, base Base) bool {
	return base.Version > 0 && len(key) > 0 && key[0] == 'r' && sp.First == base.Version+1
}
