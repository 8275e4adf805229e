package eventstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

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
		done := false
		var n int64
		err := s.update(func(tx *bolt.Tx) error {
			bk, err := openBuckets(tx)
			if err != nil {
				return err
			}
			src := newBoltSource(bk, stream)
			base, err := src.base()
			if err != nil {
				return err
			}
			res.Base = base
			if first && through > base.Version {
				head, _, ok, err := src.head()
				if err != nil {
					return err
				}
				if !ok || through > head {
					return fmt.Errorf("%w: remove through %d, the stream's head is %d", ErrInvalidSnapshotVersion, through, head)
				}
				sv, ok := bk.snaps.Get(src.key), false
				if sv != nil {
					var f snapshotFields
					if parseSnapshot(sv, &f) == nil && f.version >= through {
						ok = true
					}
				}
				if !ok {
					return fmt.Errorf("%w: stream %q, through %d", ErrSnapshotBehind, stream, through)
				}
				raw, ok, err := src.get(through)
				if err != nil {
					return err
				}
				if !ok {
					return corrupt(stream, through, "record is missing")
				}
				old := base
				base = Base{Version: through, Hash: Hash(sha256.Sum256(raw))}
				if err := bk.bases.Put(src.key, appendBase(nil, base)); err != nil {
					return err
				}
				at := func(v int64) int64 {
					raw, ok, err := src.get(v)
					var f recordFields
					if err != nil || !ok || parseRecord(raw, &f) != nil {
						return 0
					}
					return metaAt(f.data)
				}
				if err := dropIndexPrefix(bk, stream, through, func(k []byte, sp Span) bool { return o.keeps(k, sp, old, through, at) }); err != nil {
					return err
				}
				res.Base = base
			}
			if src.b == nil {
				done = true
				return nil
			}
			// Delete up to removeBatch records at or below the base.
			var k8 [8]byte
			c := src.b.Cursor()
			for k, v := c.First(); k != nil && n < removeBatch; k, v = c.First() {
				if len(k) != 8 || int64(binary.BigEndian.Uint64(k)) > base.Version {
					break
				}
				var f recordFields
				if err := parseRecord(v, &f); err != nil {
					return recordDecodeError(stream, int64(binary.BigEndian.Uint64(k)), err)
				}
				if err := bk.seq.Delete(u64key(&k8, f.seq)); err != nil {
					return err
				}
				if err := c.Delete(); err != nil {
					return err
				}
				n++
			}
			if n > 0 {
				if err := bk.meta.Put(keyRemovedSeq, binary.BigEndian.AppendUint64(nil, readRemovedSeq(bk.meta)+uint64(n))); err != nil {
					return err
				}
			}
			done = n < removeBatch
			return nil
		})
		if err != nil {
			return res, err
		}
		first = false
		res.Removed += n
		if done {
			return res, nil
		}
		if removeInterrupt != nil {
			if err := removeInterrupt(); err != nil {
				return res, err
			}
		}
	}
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
