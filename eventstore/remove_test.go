package eventstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
)

// The whole-file Verify accepts a file with history removed, and catches a
// base that does not match the record after it; an interrupted removal
// (base set, records left below it) reads and verifies clean, and the next
// RemovePrefix finishes it.
func TestRemovePrefixVerifiesAndResumes(t *testing.T) {
	ctx := context.Background()
	path := tempPath(t)
	s := openAt(t, path, &eventstore.Options{NoSync: true, JournalOff: true})
	appendFrames(t, s, "a", 0, 30)
	appendFrames(t, s, "b", 0, 4)
	require.NoError(t, s.SaveSnapshot(ctx, "a", eventstore.Snapshot{Version: 30, Format: 1, Data: []byte("x")}))
	res, err := s.RemovePrefix(ctx, "a", 12)
	require.NoError(t, err)
	require.Equal(t, int64(12), res.Removed)
	require.NoError(t, s.Verify(ctx, nil))
	appendFrames(t, s, "a", 30, 3)
	require.NoError(t, s.Verify(ctx, nil))
	require.NoError(t, s.Close())

	// An interrupted removal: the base moved to 20, records 16..20 still
	// stored below it.
	s = openAt(t, path, &eventstore.Options{NoSync: true, JournalOff: true})
	crash := errors.New("crash")
	eventstore.InterruptRemovals(3, crash)
	_, err = s.RemovePrefix(ctx, "a", 20)
	eventstore.InterruptRemovals(0, nil)
	require.ErrorIs(t, err, crash)
	recs := records(t, s, "a")
	require.Equal(t, int64(21), recs[0].Version, "nothing at or below the base is read")
	require.NoError(t, s.Verify(ctx, nil))
	res, err = s.RemovePrefix(ctx, "a", 20)
	require.NoError(t, err)
	require.Equal(t, int64(5), res.Removed, "the leftovers are removed")
	require.NoError(t, s.Verify(ctx, nil))
	require.NoError(t, s.Close())

	// A base whose hash is not the predecessor of the record after it.
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("bases")).Put([]byte("a"), append(versionKey(20), make([]byte, 32)...))
	})
	s = openAt(t, path, &eventstore.Options{NoSync: true, JournalOff: true})
	defer s.Close()
	var streams []string
	err = s.Verify(ctx, func(stream string, err error) { streams = append(streams, stream) })
	require.ErrorIs(t, err, eventstore.ErrCorrupt)
	require.Contains(t, streams, "a")
	require.Error(t, s.ReadStream(ctx, "a", 1, func(eventstore.Record) error { return nil }), "the chain check catches it on read too")
}

// RemovePrefixes removes several streams' prefixes in shared transactions,
// with the same outcome as one RemovePrefix each; a stream whose cut is
// refused (no snapshot covers it) is left whole and named, the others go on.
func TestRemovePrefixesBatches(t *testing.T) {
	ctx := context.Background()
	path := tempPath(t)
	s := openAt(t, path, &eventstore.Options{NoSync: true, JournalOff: true})
	defer s.Close()
	for _, st := range []string{"a", "b", "c"} {
		appendFrames(t, s, st, 0, 30)
		if st != "c" {
			require.NoError(t, s.SaveSnapshot(ctx, st, eventstore.Snapshot{Version: 30, Format: 1, Data: []byte("x")}))
		}
	}
	txs := 0
	eventstore.SetRemovalBatches(7, func() { txs++ }) // small transactions: the deletions span several
	defer eventstore.SetRemovalBatches(0, nil)
	res, errs, err := s.RemovePrefixes(ctx, map[string]int64{"a": 12, "b": 20, "c": 5})
	require.NoError(t, err)
	require.Len(t, errs, 1)
	require.ErrorIs(t, errs["c"], eventstore.ErrSnapshotBehind)
	assert.Equal(t, int64(12), res["a"].Removed)
	assert.Equal(t, int64(20), res["b"].Removed)
	assert.Equal(t, int64(20), res["b"].Base.Version)
	for st, want := range map[string]int64{"a": 13, "b": 21, "c": 1} {
		recs := records(t, s, st)
		require.Equal(t, want, recs[0].Version, st)
	}
	assert.Equal(t, 4, txs, "32 records in transactions of 7: five, the four between them interruptible")
	require.NoError(t, s.Verify(ctx, nil))
}

// A request whose records straddle the cut leaves the index (it can no
// longer be answered from the log); Verify takes that for what it is, not
// for a missing entry.
func TestVerifyAfterCutThroughARequest(t *testing.T) {
	ctx := context.Background()
	s := openAt(t, tempPath(t), nil)
	defer s.Close()
	for i := range 30 {
		e, err := eventstore.EncodeFrameEvent(&frames.ResultAdded{Meta: frames.Meta{Scope: "b", Frame: fmt.Sprintf("f%d", i/5), At: 1,
			RequestID: fmt.Sprintf("r%d", i/3), RequestHash: []byte{1}}, Result: frames.ResultRef{ID: "x"}})
		require.NoError(t, err)
		_, err = s.Append(ctx, "b", int64(i), []eventstore.Event{e})
		require.NoError(t, err)
	}
	require.NoError(t, s.SaveSnapshot(ctx, "b", eventstore.Snapshot{Version: 30, Format: 1, Data: []byte("x")}))
	_, err := s.RemovePrefix(ctx, "b", 20) // r6 spans versions 19..21
	require.NoError(t, err)
	_, ok, err := s.Lookup(ctx, "b", eventstore.RequestKey("r6"))
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, s.Verify(ctx, func(stream string, err error) { t.Errorf("%s: %v", stream, err) }))
}
