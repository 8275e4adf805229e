package eventstore

import (
	"os"

	bolt "go.etcd.io/bbolt"
)

// SetCommitHook installs f to run inside every later commit's transaction,
// after its writes; an error from f fails the commit. nil removes it.
func SetCommitHook(s *BoltStore, f func() error) {
	if f == nil {
		s.commitHook.Store(nil)
		return
	}
	s.commitHook.Store(&f)
}

// SetApplyHook installs f to run inside every later bbolt transaction of
// the journal's applier; an error from f fails it. nil removes it.
func SetApplyHook(s *BoltStore, f func() error) {
	if f == nil {
		s.applyHook.Store(nil)
		return
	}
	s.applyHook.Store(&f)
}

// SetJournalFault makes the journal's operations ("write", "sync",
// "prepare") fail with what f returns for them. nil removes it. Set it
// before the store is used.
func SetJournalFault(s *BoltStore, f func(op string) error) { s.j.fault = f }

// QueueLen is the number of requests waiting for the committer.
func QueueLen(s *BoltStore) int { return len(s.queue) }

// Bucket names, for tests that damage a file on purpose.
var (
	BucketMeta      = bucketMeta
	BucketStreams   = bucketStreams
	BucketHeads     = bucketHeads
	BucketSeq       = bucketSeq
	BucketSnapshots = bucketSnapshots
	KeyFormat       = keyFormat
)

// Record envelope offsets.
const (
	RecOffVersionField = 3 // the envelope version's value byte
	RecOffPrev         = recOffPrev
)

// FirstFrame and LastFrame return the byte range of a segment's first and
// last valid frame.
func FirstFrame(data []byte) (start, end int) {
	fr := segFrames(data)
	return fr[0][0], fr[0][1]
}

// The end is that of the frame's checksummed bytes (its zero padding
// after them is not part of it).
func LastFrame(data []byte) (start, end int) {
	fr := segFrames(data)
	return fr[len(fr)-1][0], fr[len(fr)-1][1]
}

func segFrames(data []byte) [][2]int {
	h, err := decodeSegHeader(data)
	if err != nil {
		panic(err)
	}
	var out [][2]int
	off := int64(segHeaderSize)
	for {
		payload, _, _, size, ok := frameAt(data, off, h.gen)
		if !ok {
			return out
		}
		out = append(out, [2]int{int(off), int(off) + frameHeaderSize + len(payload)})
		off += size
	}
}

// DamageNewestMeta flips a byte inside the meta record of the data file's
// meta page with the higher txid (bbolt then opens the other one).
func DamageNewestMeta(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	b0 := make([]byte, 4096)
	if _, err := f.ReadAt(b0, 0); err != nil {
		return err
	}
	tx0, ps, err := metaPage(b0, 0)
	if err != nil {
		return err
	}
	b1 := make([]byte, 4096)
	if _, err := f.ReadAt(b1, int64(ps)); err != nil {
		return err
	}
	tx1, _, err := metaPage(b1, 1)
	if err != nil {
		return err
	}
	off := int64(metaPageHeader + 20)
	if tx1 > tx0 {
		off += int64(ps)
	}
	b := []byte{0}
	if _, err := f.ReadAt(b, off); err != nil {
		return err
	}
	b[0] ^= 0xff
	_, err = f.WriteAt(b, off)
	return err
}

// ResetSegment rewrites a segment as freshly prepared: a header of
// generation gen recording that bbolt covered `covered`, zeros after it.
func ResetSegment(path string, gen, covered uint64) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	b := make([]byte, st.Size())
	copy(b, encodeSegHeader(segHeader{gen: gen, covered: covered, size: uint64(st.Size())}))
	return os.WriteFile(path, b, 0o600)
}

// SegmentHeaderSize is where a segment's first frame starts.
const SegmentHeaderSize = segHeaderSize

// NoHeadCache makes the journal's committer look every head up in the
// overlay or bbolt. Call it before the first append.
func NoHeadCache(s *BoltStore) { s.headLimit = 0 }

// CopyDataFile writes the data file as of one committed bbolt transaction
// (what a crash at that moment would leave of it) to dst.
func CopyDataFile(s *BoltStore, dst string) error {
	return s.view(func(tx *bolt.Tx) error { return tx.CopyFile(dst, 0o600) })
}

// InterruptRemovals makes RemovePrefix delete at most batch records per
// transaction and stop with err after the first (nil restores it).
func InterruptRemovals(batch int64, err error) {
	if err == nil {
		removeBatch, removeInterrupt = 20_000, nil
		return
	}
	removeBatch, removeInterrupt = batch, func() error { return err }
}

// AppendIndexSeq encodes the index's sequence as the meta bucket keeps it.
var AppendIndexSeq = appendIndexSeq
