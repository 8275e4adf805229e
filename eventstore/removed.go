package eventstore

import (
	"bytes"
	"context"
	"encoding/binary"

	bolt "go.etcd.io/bbolt"
)

// How far removal reached (RemovalReporter).
//
// Layout (both optional, additive: readers that do not know them ignore
// them):
//
//	removed  <stream>          -> [uint64 BE global sequence of the last removed record]
//	                              [uint64 BE the base version it belongs to]
//	meta     "removedthrough"  -> [uint64 BE the highest of them over the file]
//	                              [uint64 BE meta "removedseq" when it was written]
//
// RemovePrefix writes the stream's entry in the transaction that moves its
// base. An entry whose base version is not the stream's base, or a base
// with no entry, is a removal this code did not record (a file of an
// earlier release, or one an earlier release removed from since): it is
// overstated safely as the sequence before the stream's first remaining
// record, or bbolt's last sequence when none remains. The global value is
// trusted only while "removedseq" (the count of removed records, kept by
// every release) still matches: otherwise RemovedThrough("") walks the
// bases, and the next removal writes it again.

var (
	bucketRemoved     = []byte("removed")
	keyRemovedThrough = []byte("removedthrough")
)

var _ RemovalReporter = (*BoltStore)(nil)

// putRemoved records that the stream's removal through base version
// reached global sequence seq.
func putRemoved(tx *bolt.Tx, key []byte, seq uint64, base int64) error {
	b, err := tx.CreateBucketIfNotExists(bucketRemoved)
	if err != nil {
		return err
	}
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 16), seq)
	return b.Put(key, binary.BigEndian.AppendUint64(v, uint64(base)))
}

// noteRemovedThrough keeps meta's global value after a removal
// transaction: hi is the highest sequence the transaction removed through,
// countBefore meta's "removedseq" when it began.
func noteRemovedThrough(tx *bolt.Tx, bk *buckets, countBefore, hi uint64) error {
	stored, count, ok := readRemovedThrough(bk.meta)
	if !ok || count != countBefore {
		all, err := scanRemoved(tx, bk, nil, 0)
		if err != nil {
			return err
		}
		stored = all
	}
	hi = max(hi, stored)
	now := readRemovedSeq(bk.meta)
	if ok && hi == stored && count == now {
		return nil
	}
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 16), hi)
	return bk.meta.Put(keyRemovedThrough, binary.BigEndian.AppendUint64(v, now))
}

func readRemovedThrough(meta *bolt.Bucket) (seq, count uint64, ok bool) {
	v := meta.Get(keyRemovedThrough)
	if len(v) != 16 {
		return 0, 0, false
	}
	return binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(v[8:]), true
}

// streamRemoved is how far removal reached in one stream (0: none), given
// its base value; lastSeq is bbolt's last sequence.
func streamRemoved(tx *bolt.Tx, bk *buckets, name, baseValue []byte, lastSeq uint64) (uint64, error) {
	base, err := decodeBase(string(name), baseValue)
	if err != nil {
		return 0, err
	}
	if rb := tx.Bucket(bucketRemoved); rb != nil {
		if v := rb.Get(name); len(v) == 16 && int64(binary.BigEndian.Uint64(v[8:])) == base.Version {
			return binary.BigEndian.Uint64(v), nil
		}
	}
	// Not recorded: the sequence before the first record after the base.
	// (The records through the base were in bbolt when they were removed,
	// so bbolt's last sequence bounds them when none follows yet.)
	if sb := bk.streams.Bucket(name); sb != nil {
		var k8 [8]byte
		if k, v := sb.Cursor().Seek(u64key(&k8, uint64(base.Version)+1)); k != nil && v != nil {
			var f recordFields
			if err := parseRecord(v, &f); err != nil {
				return 0, recordDecodeError(string(name), int64(binary.BigEndian.Uint64(k)), err)
			}
			if f.seq > 0 {
				return f.seq - 1, nil
			}
		}
	}
	return lastSeq, nil
}

// scanRemoved is the highest removal over the streams whose names start
// with prefix (all of them when prefix is empty), at least hi.
func scanRemoved(tx *bolt.Tx, bk *buckets, prefix []byte, hi uint64) (uint64, error) {
	lastSeq, err := readLastSeq(bk.meta)
	if err != nil {
		return 0, err
	}
	c := bk.bases.Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		seq, err := streamRemoved(tx, bk, k, v, lastSeq)
		if err != nil {
			return 0, err
		}
		hi = max(hi, seq)
	}
	return hi, nil
}

// RemovedThrough implements RemovalReporter: one lookup for a stream
// (exact), a cursor over the streams with removed history under a prefix,
// and meta's global value for "" (a walk of every stream with removed
// history when an earlier release removed since it was written).
func (s *BoltStore) RemovedThrough(ctx context.Context, prefix string, exact bool) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var hi uint64
	err := s.view(func(tx *bolt.Tx) error {
		bk, err := openBuckets(tx)
		if err != nil {
			return err
		}
		switch {
		case exact:
			v := bk.bases.Get([]byte(prefix))
			if v == nil || prefix == "" {
				return nil
			}
			lastSeq, err := readLastSeq(bk.meta)
			if err != nil {
				return err
			}
			hi, err = streamRemoved(tx, bk, []byte(prefix), v, lastSeq)
			return err
		case prefix == "":
			if seq, count, ok := readRemovedThrough(bk.meta); ok && count == readRemovedSeq(bk.meta) {
				hi = seq
				return nil
			}
			if k, _ := bk.bases.Cursor().First(); k == nil {
				return nil // nothing was ever removed
			}
			fallthrough
		default:
			hi, err = scanRemoved(tx, bk, []byte(prefix), 0)
			return err
		}
	})
	return hi, err
}
