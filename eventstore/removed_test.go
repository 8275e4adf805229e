package eventstore_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/internal/verify"
)

func removedThrough(t *testing.T, s *eventstore.BoltStore, prefix string, exact bool) uint64 {
	t.Helper()
	v, err := s.RemovedThrough(context.Background(), prefix, exact)
	require.NoError(t, err)
	return v
}

// seqAt is the global sequence of a stream's record at version.
func seqAt(t *testing.T, s *eventstore.BoltStore, stream string, version int64) uint64 {
	t.Helper()
	recs := records(t, s, stream)
	for _, r := range recs {
		if r.Version == version {
			return r.Seq
		}
	}
	t.Fatalf("stream %s has no version %d", stream, version)
	return 0
}

// RemovePrefixes in transactions of a few records (interrupted once, then
// finished) records each stream's removal and the highest over all; the
// values survive reopening, and the file verifies.
func TestBoltRemovedThroughBatched(t *testing.T) {
	for _, m := range boltModes {
		t.Run(m.name, func(t *testing.T) {
			ctx := t.Context()
			path := tempPath(t)
			s := openAt(t, path, m.opts)
			const streams, n = 8, 6
			for i := range n {
				for j := range streams {
					appendN(t, s, fmt.Sprintf("s%d", j), i, 1)
				}
			}
			cuts := map[string]int64{}
			want := map[string]uint64{}
			var hi uint64
			for j := range streams {
				name := fmt.Sprintf("s%d", j)
				require.NoError(t, s.SaveSnapshot(ctx, name, eventstore.Snapshot{Version: n, Format: 1, Data: []byte("s")}))
				cuts[name] = int64(1 + j%n)
				want[name] = seqAt(t, s, name, cuts[name])
				hi = max(hi, want[name])
			}
			stopped := errors.New("interrupted")
			eventstore.InterruptRemovals(3, stopped)
			_, _, err := s.RemovePrefixes(ctx, cuts)
			eventstore.InterruptRemovals(0, nil)
			require.ErrorIs(t, err, stopped)
			for name, seq := range want {
				assert.Equal(t, seq, removedThrough(t, s, name, true), "recorded in the first transaction: %s", name)
			}
			_, errs, err := s.RemovePrefixes(ctx, cuts)
			require.NoError(t, err)
			require.Empty(t, errs)
			check := func(s *eventstore.BoltStore) {
				for name, seq := range want {
					assert.Equal(t, seq, removedThrough(t, s, name, true), name)
					assert.Equal(t, seq, removedThrough(t, s, name, false), name)
				}
				assert.Equal(t, hi, removedThrough(t, s, "", false))
				assert.Equal(t, hi, removedThrough(t, s, "s", false))
				assert.Zero(t, removedThrough(t, s, "t", false))
			}
			check(s)
			require.NoError(t, s.Verify(ctx, nil))
			require.NoError(t, s.Close())
			problems, _, err := verify.CheckPages(path)
			require.NoError(t, err)
			assert.Empty(t, problems)
			check(openAt(t, path, m.opts))
		})
	}
}

// editFile changes a closed data file with bbolt directly.
func editFile(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(fn))
	require.NoError(t, db.Close())
}

// Removals this code did not record — a file of an earlier release, or
// one an earlier release removed from since — are overstated safely: the
// sequence before the stream's first remaining record, bbolt's last
// sequence when none remains; a stale global value is not trusted.
func TestBoltRemovedThroughUnrecorded(t *testing.T) {
	ctx := t.Context()
	path := tempPath(t)
	s := openAt(t, path, &eventstore.Options{JournalOff: true})
	for i := range 5 {
		for _, name := range []string{"a", "b", "c"} {
			appendN(t, s, name, i, 1)
		}
	}
	for _, name := range []string{"a", "b", "c"} {
		require.NoError(t, s.SaveSnapshot(ctx, name, eventstore.Snapshot{Version: 5, Format: 1, Data: []byte("s")}))
	}
	_, err := s.RemovePrefix(ctx, "a", 2)
	require.NoError(t, err)
	_, err = s.RemovePrefix(ctx, "b", 5) // everything
	require.NoError(t, err)
	// Appended round-robin: version v of the i-th stream has sequence 3(v-1)+i+1.
	seq := func(i int, v uint64) uint64 { return 3*(v-1) + uint64(i) + 1 }
	a2, a3, c1, c2 := seq(0, 2), seq(0, 3), seq(2, 1), seq(2, 2)
	require.NoError(t, s.Close())

	// As the previous release left it: no record of how far removal reached.
	editFile(t, path, func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket([]byte("removed")); err != nil {
			return err
		}
		return tx.Bucket(eventstore.BucketMeta).Delete([]byte("removedthrough"))
	})
	s = openAt(t, path, &eventstore.Options{JournalOff: true})
	last, err := s.LastSeq(ctx)
	require.NoError(t, err)
	assert.Equal(t, a3-1, removedThrough(t, s, "a", true), "overstated: before a's first remaining record")
	assert.GreaterOrEqual(t, a3-1, a2)
	assert.Equal(t, last, removedThrough(t, s, "b", true), "nothing remains: bbolt's last sequence")
	assert.Equal(t, last, removedThrough(t, s, "", false))
	assert.Equal(t, a3-1, removedThrough(t, s, "a", false))
	assert.Zero(t, removedThrough(t, s, "c", true))

	// A new removal records itself; the unrecorded one stays overstated.
	_, err = s.RemovePrefix(ctx, "c", 1)
	require.NoError(t, err)
	assert.Equal(t, c1, removedThrough(t, s, "c", true))
	assert.Equal(t, last, removedThrough(t, s, "", false))
	require.NoError(t, s.Close())

	// An earlier release moved a's base since (its entry names the old
	// base), and removed records (meta's count moved): neither stale value
	// is trusted.
	editFile(t, path, func(tx *bolt.Tx) error {
		rb := tx.Bucket([]byte("removed"))
		v := append([]byte(nil), rb.Get([]byte("c"))...)
		binary.BigEndian.PutUint64(v[8:], 0) // another base version
		if err := rb.Put([]byte("c"), v); err != nil {
			return err
		}
		meta := tx.Bucket(eventstore.BucketMeta)
		mv := append([]byte(nil), meta.Get([]byte("removedthrough"))...)
		binary.BigEndian.PutUint64(mv, 1) // an understatement, were it trusted
		binary.BigEndian.PutUint64(mv[8:], 999)
		return meta.Put([]byte("removedthrough"), mv)
	})
	s = openAt(t, path, &eventstore.Options{JournalOff: true})
	assert.Equal(t, c2-1, removedThrough(t, s, "c", true), "a stale entry: before c's first remaining record")
	assert.Equal(t, last, removedThrough(t, s, "", false), "a stale global value: the bases are walked")
}

// The previous release's fixture (v4) has a stream whose history was
// removed before removals were recorded: it is overstated as the sequence
// before its first remaining record, and a new removal is exact; both
// survive reopening.
func TestRemovedThroughV4Fixture(t *testing.T) {
	ctx := t.Context()
	src := filepath.Join("..", "internal", "upgrade", "testdata", "v4", "data")
	dir := t.TempDir()
	path := filepath.Join(dir, "stateindex.db")
	copyFile(t, filepath.Join(src, "stateindex.db"), path)
	require.NoError(t, os.MkdirAll(eventstore.JournalDir(path), 0o700))
	entries, err := os.ReadDir(eventstore.JournalDir(filepath.Join(src, "stateindex.db")))
	require.NoError(t, err)
	for _, e := range entries {
		copyFile(t, filepath.Join(eventstore.JournalDir(filepath.Join(src, "stateindex.db")), e.Name()), filepath.Join(eventstore.JournalDir(path), e.Name()))
	}
	s, err := eventstore.Open(path, nil)
	require.NoError(t, err)
	base, err := s.StreamBase(ctx, "theta")
	require.NoError(t, err)
	require.Equal(t, int64(15), base.Version, "the fixture removed theta's first 15 records")
	recs := records(t, s, "theta")
	require.NotEmpty(t, recs)
	first := recs[0]
	assert.Equal(t, first.Seq-1, removedThrough(t, s, "theta", true))
	assert.GreaterOrEqual(t, first.Seq-1, uint64(15), "15 records were removed: the last has sequence 15 or more")
	assert.Equal(t, first.Seq-1, removedThrough(t, s, "", false))
	assert.Equal(t, first.Seq-1, removedThrough(t, s, "th", false))

	// A new removal of theta is exact.
	head := recs[len(recs)-1]
	require.NoError(t, s.SaveSnapshot(ctx, "theta", eventstore.Snapshot{Version: head.Version, Format: 1, Data: []byte("s")}))
	_, err = s.RemovePrefix(ctx, "theta", recs[2].Version)
	require.NoError(t, err)
	assert.Equal(t, recs[2].Seq, removedThrough(t, s, "theta", true))
	assert.Equal(t, max(recs[2].Seq, first.Seq-1), removedThrough(t, s, "", false))
	require.NoError(t, s.Verify(ctx, nil))
	require.NoError(t, s.Close())

	r := openAt(t, path, nil)
	assert.Equal(t, recs[2].Seq, removedThrough(t, r, "theta", true))
	assert.Equal(t, max(recs[2].Seq, first.Seq-1), removedThrough(t, r, "", false))
}
