package eventstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	bolt "go.etcd.io/bbolt"
)

// Removing history.
//
// RemovePrefix removes the records 1..through of a stream: the retention
// of bounded history (and destroy) in the store. It is a prefix operation,
// so the hash chain stays verifiable: the stream's base — the version and
// hash of the last removed record — is kept in the "bases" bucket, and the
// chain of what remains starts from it (the record after the base names
// its hash as its predecessor). The caller records why in the stream
// itself (an event naming the version and hash), so that verify proves
// nothing else was removed.
//
// Removal is idempotent and crash-safe: the first transaction sets the base
// (from then on readers see the stream from base+1, whatever is still
// stored below it) and removes a first batch; later transactions remove the
// rest. A crash in between leaves records below the base that no reader
// sees and the next RemovePrefix of the stream removes.

// ErrSnapshotBehind is returned by RemovePrefix when the stream has no
// snapshot at or after the version to remove through: the projection could
// no longer be rebuilt.
var ErrSnapshotBehind = errors.New("eventstore: no snapshot covers the history to remove")

// removeBatch bounds the records one removal transaction deletes.
var removeBatch int64 = 20_000

// removeInterrupt, if set (tests), runs after each removal transaction; an
// error from it stops the removal there, as a crash would.
var removeInterrupt func() error

var (
	bucketBases   = []byte("bases")
	keyRemovedSeq = []byte("removedseq")
)

// Base is where a stream's stored history begins: the version and hash of
// the last record removed from its front (zero: nothing was removed).
type Base struct {
	Version int64
	Hash    Hash
}

func appendBase(b []byte, base Base) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(base.Version))
	return append(b, base.Hash[:]...)
}

func decodeBase(stream string, v []byte) (Base, error) {
	if len(v) != 8+len(Hash{}) {
		return Base{}, corrupt(stream, 0, fmt.Sprintf("the stream's base is %d bytes", len(v)))
	}
	b := Base{Version: int64(binary.BigEndian.Uint64(v))}
	copy(b.Hash[:], v[8:])
	if b.Version < 1 {
		return Base{}, corrupt(stream, 0, fmt.Sprintf("the stream's base is version %d", b.Version))
	}
	return b, nil
}

func (s *boltSource) base() (Base, error) {
	if s.bases == nil {
		return Base{}, nil
	}
	v := s.bases.Get(s.key)
	if v == nil {
		return Base{}, nil
	}
	return decodeBase(s.stream, v)
}

func (l *layeredSource) base() (Base, error) { return l.src.base() }

func readRemovedSeq(meta *bolt.Bucket) uint64 {
	if v := meta.Get(keyRemovedSeq); len(v) == 8 {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

// RemoveOption changes what RemovePrefix keeps.
type RemoveOption func(*removeOptions)

type removeOptions struct {
	keepRequests      bool
	keepRequestsSince int64
}

// KeepRequestsSince keeps, as tombstones, the index entries of the
// requests wholly in the removed prefix whose first record's server time
// (unix ns) is at or after since: a destroy keeps the request ids within
// the idempotency horizon, so that none is applied again. Lookup still
// finds such a request, with a span at or below the stream's base (its
// records are gone); History answers it as gone (frames.RequestRecord.Gone).
// Tombstones an earlier removal kept are kept too; a removal without this
// option drops them.
func KeepRequestsSince(since int64) RemoveOption {
	return func(o *removeOptions) { o.keepRequests, o.keepRequestsSince = true, since }
}

func (o removeOptions) keeps(k []byte, sp Span, base Base, through int64, at func(int64) int64) bool {
	if !o.keepRequests || len(k) == 0 || k[0] != 'r' || sp.Last > through {
		return false
	}
	return sp.First <= base.Version || at(sp.First) >= o.keepRequestsSince
}

// RemoveResult says what RemovePrefix did.
type RemoveResult struct {
	Base    Base  // the stream's base afterwards
	Removed int64 // records deleted by this call
}

// StreamBase returns the stream's base (zero if nothing was removed).
func (s *BoltStore) StreamBase(ctx context.Context, stream string) (Base, error) {
	if err := checkStream(stream); err != nil {
		return Base{}, err
	}
	var b Base
	err := s.view(func(tx *bolt.Tx) error {
		bk, err := openBuckets(tx)
		if err != nil {
			return err
		}
		b, err = newBoltSource(bk, stream).base()
		return err
	})
	return b, err
}

// RemovePrefix removes the stream's records 1..through (see the top of this
// file). through must not pass the stream's head, and a snapshot at or
// after through must exist (ErrSnapshotBehind). A through at or below the
// current base only finishes an interrupted removal.
func (s *BoltStore) RemovePrefix(ctx context.Context, stream string, through int64, opts ...RemoveOption) (RemoveResult, error) {
	var res RemoveResult
	var o removeOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := checkStream(stream); err != nil {
		return res, err
	}
	if through < 1 {
		return res, fmt.Errorf("%w: remove through version %d", ErrInvalidSnapshotVersion, through)
	}
	if s.failed.Load() != nil {
		return res, ErrWritesDisabled
	}
	// The records through the cut must be in bbolt (immutable there): wait
	// for the applier only if some of them are still only in the journal.
	if over := s.over.stream(stream); len(over) > 0 && over[0].version <= through {
		if err := s.Flush(ctx); err != nil {
			return res, err
		}
	}
	first := true
	for {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		var st removeStep
		err := s.update(func(tx *bolt.Tx) error {
			bk, err := openBuckets(tx)
			if err != nil {
				return err
			}
			before := readRemovedSeq(bk.meta)
			if st, err = removeIn(bk, stream, through, first, o, removeBatch); err != nil {
				return err
			}
			return noteRemovedThrough(tx, bk, before, st.seq)
		})
		if st.base != nil {
			res.Base = *st.base
		}
		if err != nil {
			return res, err
		}
		first = false
		res.Removed += st.n
		if st.done {
			return res, nil
		}
		if removeInterrupt != nil {
			if err := removeInterrupt(); err != nil {
				return res, err
			}
		}
	}
}

// removeStep is what one transaction did to one stream.
type removeStep struct {
	base *Base  // the stream's base after it
	n    int64  // records deleted
	done bool   // nothing left at or below the base
	seq  uint64 // the global sequence of the new base's record (0: the base did not move)
}

// removeIn does one transaction's share of a removal: the first sets the
// base (after checking the cut against the head and the snapshot) and
// drops the index entries only removed records named; each deletes up to
// budget records at or below the base.
func removeIn(bk *buckets, stream string, through int64, first bool, o removeOptions, budget int64) (removeStep, error) {
	var st removeStep
	src := newBoltSource(bk, stream)
	base, err := src.base()
	if err != nil {
		return st, err
	}
	st.base = &base
	if first && through > base.Version {
		head, _, ok, err := src.head()
		if err != nil {
			return st, err
		}
		if !ok || through > head {
			return st, fmt.Errorf("%w: remove through %d, the stream's head is %d", ErrInvalidSnapshotVersion, through, head)
		}
		sv, ok := bk.snaps.Get(src.key), false
		if sv != nil {
			var f snapshotFields
			if parseSnapshot(sv, &f) == nil && f.version >= through {
				ok = true
			}
		}
		if !ok {
			return st, fmt.Errorf("%w: stream %q, through %d", ErrSnapshotBehind, stream, through)
		}
		raw, ok, err := src.get(through)
		if err != nil {
			return st, err
		}
		if !ok {
			return st, corrupt(stream, through, "record is missing")
		}
		var rf recordFields
		if err := parseRecord(raw, &rf); err != nil {
			return st, recordDecodeError(stream, through, err)
		}
		old := base
		base = Base{Version: through, Hash: Hash(sha256.Sum256(raw))}
		if err := bk.bases.Put(src.key, appendBase(nil, base)); err != nil {
			return st, err
		}
		if err := putRemoved(bk.meta.Tx(), src.key, rf.seq, through); err != nil {
			return st, err
		}
		st.seq = rf.seq
		at := func(v int64) int64 {
			raw, ok, err := src.get(v)
			var f recordFields
			if err != nil || !ok || parseRecord(raw, &f) != nil {
				return 0
			}
			return metaAt(f.data)
		}
		if err := dropIndexPrefix(bk, stream, through, func(k []byte, sp Span) bool { return o.keeps(k, sp, old, through, at) }); err != nil {
			return st, err
		}
		st.base = &base
	}
	if src.b == nil {
		st.done = true
		return st, nil
	}
	// Delete up to budget records at or below the base.
	var k8 [8]byte
	c := src.b.Cursor()
	for k, v := c.First(); k != nil && st.n < budget; k, v = c.First() {
		if len(k) != 8 || int64(binary.BigEndian.Uint64(k)) > base.Version {
			break
		}
		var f recordFields
		if err := parseRecord(v, &f); err != nil {
			return st, recordDecodeError(stream, int64(binary.BigEndian.Uint64(k)), err)
		}
		if err := bk.seq.Delete(u64key(&k8, f.seq)); err != nil {
			return st, err
		}
		if err := c.Delete(); err != nil {
			return st, err
		}
		st.n++
	}
	if st.n > 0 {
		if err := bk.meta.Put(keyRemovedSeq, binary.BigEndian.AppendUint64(nil, readRemovedSeq(bk.meta)+uint64(st.n))); err != nil {
			return st, err
		}
	}
	st.done = st.n < budget
	return st, nil
}

// RemovePrefixes is RemovePrefix for several streams at once (a retention
// pass): their first steps share one transaction, and the deletions share
// transactions of at most removeBatch records, so a pass over many scopes
// costs one synced commit, not one per scope. cuts maps each stream to its
// through. It stops at the first error, naming the stream; what earlier
// transactions did stays done (every removal is recorded first, and the
// next pass finishes it).
//
// A stream whose cut is refused before anything is written (beyond its
// head, or no snapshot covers it) is left out, its error in errs; the
// others go on.
func (s *BoltStore) RemovePrefixes(ctx context.Context, cuts map[string]int64) (out map[string]RemoveResult, errs map[string]error, err error) {
	out, errs = make(map[string]RemoveResult, len(cuts)), map[string]error{}
	streams := make([]string, 0, len(cuts))
	flush := false
	for stream, through := range cuts {
		if err := checkStream(stream); err != nil {
			return out, errs, err
		}
		if through < 1 {
			return out, errs, fmt.Errorf("%w: remove through version %d", ErrInvalidSnapshotVersion, through)
		}
		if over := s.over.stream(stream); len(over) > 0 && over[0].version <= through {
			flush = true
		}
		streams = append(streams, stream)
	}
	sort.Strings(streams)
	if s.failed.Load() != nil {
		return out, errs, ErrWritesDisabled
	}
	if flush {
		if err := s.Flush(ctx); err != nil {
			return out, errs, err
		}
	}
	pending := streams
	first := true
	for len(pending) > 0 {
		if err := ctx.Err(); err != nil {
			return out, errs, err
		}
		var next []string
		refused := map[string]error{}
		err := s.update(func(tx *bolt.Tx) error {
			bk, err := openBuckets(tx)
			if err != nil {
				return err
			}
			next = next[:0]
			budget := removeBatch
			before, hi := readRemovedSeq(bk.meta), uint64(0)
			for i, stream := range pending {
				if budget <= 0 && !first {
					next = append(next, pending[i:]...)
					break
				}
				st, err := removeIn(bk, stream, cuts[stream], first, removeOptions{}, max(budget, 0))
				if err != nil && first && (errors.Is(err, ErrSnapshotBehind) || errors.Is(err, ErrInvalidSnapshotVersion)) {
					refused[stream] = err // refused before it wrote anything
					continue
				}
				if err != nil {
					return fmt.Errorf("stream %q: %w", stream, err)
				}
				r := out[stream]
				if st.base != nil {
					r.Base = *st.base
				}
				r.Removed += st.n
				out[stream] = r
				budget -= st.n
				hi = max(hi, st.seq)
				if !st.done {
					next = append(next, stream)
				}
			}
			return noteRemovedThrough(tx, bk, before, hi)
		})
		if err != nil {
			return out, errs, err
		}
		for stream, e := range refused {
			errs[stream] = e
			delete(out, stream)
		}
		first = false
		pending = next
		if len(pending) > 0 && removeInterrupt != nil {
			if err := removeInterrupt(); err != nil {
				return out, errs, err
			}
		}
	}
	return out, errs, nil
}

// dropIndexPrefix removes the index entries of the removed prefix: every
// entry whose records all lie in it, and every request entry that starts in
// it (a request cut in two can no longer be answered from the log), except
// the tombstones keep names. A frame whose first records were removed
// keeps its entry.
func dropIndexPrefix(bk *buckets, stream string, through int64, keep func(k []byte, sp Span) bool) error {
	ib := bk.index.Bucket([]byte(stream))
	if ib == nil {
		return nil
	}
	var drop [][]byte
	if err := ib.ForEach(func(k, v []byte) error {
		sp, err := decodeSpan(stream, v)
		if err != nil {
			return err
		}
		if (sp.Last <= through || (len(k) > 0 && k[0] == 'r' && sp.First <= through)) && !keep(k, sp) {
			drop = append(drop, append([]byte(nil), k...))
		}
		return nil
	}); err != nil {
		return err
	}
	for _, k := range drop {
		if err := ib.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// belowBase reports whether a snapshot request describes a version the
// stream's removed history passed: such a snapshot could never be used (the
// events after it are gone), and is not stored — the one in place, at or
// after the base, stays.
func belowBase(bk *buckets, r *request) (bool, error) {
	v := bk.bases.Get([]byte(r.stream))
	if v == nil {
		return false, nil
	}
	base, err := decodeBase(r.stream, v)
	return err == nil && r.snapVersion < base.Version, err
}
