package eventstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
)

func indexEvent(t *testing.T, scope, frame, request string) eventstore.Event {
	t.Helper()
	e, err := eventstore.EncodeFrameEvent(&frames.ResultAdded{Meta: frames.Meta{Scope: scope, Frame: frame, At: 1, RequestID: request},
		Result: frames.ResultRef{ID: "x"}})
	require.NoError(t, err)
	return e
}

func span(t *testing.T, s eventstore.Store, stream, key string) (eventstore.Span, bool) {
	t.Helper()
	sp, ok, err := s.Lookup(context.Background(), stream, key)
	require.NoError(t, err)
	return sp, ok
}

// appendFrames appends n records to stream: record i is about frame
// "f<i%3>" for request "r<i/2>".
func appendFrames(t *testing.T, s eventstore.Store, stream string, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		_, err := s.Append(context.Background(), stream, int64(i), []eventstore.Event{indexEvent(t, stream, fmt.Sprintf("f%d", i%3), fmt.Sprintf("r%d", i/2))})
		require.NoError(t, err)
	}
}

func wantSpans(t *testing.T, s eventstore.Store, stream string, n int) {
	t.Helper()
	for f := 0; f < 3 && f < n; f++ {
		sp, ok := span(t, s, stream, eventstore.FrameKey(fmt.Sprintf("f%d", f)))
		require.True(t, ok, "frame f%d", f)
		last := n - 1 - (n-1-f)%3
		require.Equal(t, eventstore.Span{First: int64(f + 1), Last: int64(last + 1)}, sp, "frame f%d", f)
	}
	for r := 0; r <= (n-1)/2; r++ {
		sp, ok := span(t, s, stream, eventstore.RequestKey(fmt.Sprintf("r%d", r)))
		require.True(t, ok, "request r%d", r)
		require.Equal(t, eventstore.Span{First: int64(2*r + 1), Last: int64(min(2*r+2, n))}, sp, "request r%d", r)
	}
}

// The index of records only in the journal (overlay), of records partly in
// bbolt and partly in the overlay, and after a replay at Open.
func TestIndexAcrossJournalAndBbolt(t *testing.T) {
	path := tempPath(t)
	s := openAt(t, path, held)
	appendFrames(t, s, "s", 0, 7)
	wantSpans(t, s, "s", 7) // all in the overlay
	crashed := copyStore(t, path)
	require.NoError(t, s.Close())

	s = openAt(t, crashed, held) // replayed into bbolt
	wantSpans(t, s, "s", 7)
	appendFrames(t, s, "s", 7, 4) // f0..f2 and r3..r5 now span bbolt and the overlay
	wantSpans(t, s, "s", 11)
	require.NoError(t, s.Flush(context.Background()))
	wantSpans(t, s, "s", 11)
	require.NoError(t, s.Close())

	s = openAt(t, crashed, &eventstore.Options{NoSync: true, JournalOff: true})
	appendFrames(t, s, "s", 11, 2)
	wantSpans(t, s, "s", 13)
	require.NoError(t, s.Close())
}

// A file an earlier build wrote has no index: Open builds it from the
// records; one an earlier build appended to after a later one indexed it
// is caught up from the last sequence the index covered.
func TestIndexCatchesUpOnOpen(t *testing.T) {
	path := tempPath(t)
	s := openAt(t, path, &eventstore.Options{NoSync: true, JournalOff: true})
	appendFrames(t, s, "a", 0, 9)
	appendFrames(t, s, "b", 0, 5)
	require.NoError(t, s.Close())

	// As an earlier build left it: no index bucket, no index sequence.
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket([]byte("index")); err != nil {
			return err
		}
		return tx.Bucket([]byte("meta")).Delete([]byte("indexseq"))
	})
	s = openAt(t, path, &eventstore.Options{NoSync: true, JournalOff: true})
	wantSpans(t, s, "a", 9)
	wantSpans(t, s, "b", 5)
	require.NoError(t, s.Close())

	// An earlier build appended records 10..12 of "a" without indexing
	// them: simulate by rewinding the index sequence and dropping their
	// entries' growth (the index then ends at the 9th record).
	s = openAt(t, path, &eventstore.Options{NoSync: true, JournalOff: true})
	appendFrames(t, s, "a", 9, 3)
	require.NoError(t, s.Close())
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		if err := tx.Bucket([]byte("index")).DeleteBucket([]byte("a")); err != nil {
			return err
		}
		// The index covered sequences 1..5 only (records 1..5 of "a").
		return tx.Bucket([]byte("meta")).Put([]byte("indexseq"), eventstore.AppendIndexSeq(nil, 5))
	})
	s = openAt(t, path, &eventstore.Options{NoSync: true, JournalOff: true})
	defer s.Close()
	sp, ok := span(t, s, "a", eventstore.FrameKey("f0"))
	require.True(t, ok)
	// Records 1..5 of "a" were dropped from the index with the bucket and
	// not re-indexed (the index said it covered them): f0's span starts at
	// the first record after sequence 5 that names it.
	require.Equal(t, eventstore.Span{First: 7, Last: 10}, sp)
	wantSpans(t, s, "b", 5)
}

// Verify recomputes every stream's index from its records: a changed,
// missing or stray entry, and the index of a stream that does not exist,
// are reported with the stream.
func TestVerifyChecksTheIndex(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(tx *bolt.Tx) error
		stream string
	}{
		{"changed span", func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("index")).Bucket([]byte("a")).Put([]byte("ff1"), []byte{2, 6})
		}, "a"},
		{"missing entry", func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("index")).Bucket([]byte("a")).Delete([]byte("rr0"))
		}, "a"},
		{"stray entry", func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("index")).Bucket([]byte("b")).Put([]byte("fnobody"), []byte{1, 1})
		}, "b"},
		{"stream the file does not have", func(tx *bolt.Tx) error {
			_, err := tx.Bucket([]byte("index")).CreateBucket([]byte("ghost"))
			return err
		}, "ghost"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := tempPath(t)
			s := openAt(t, path, &eventstore.Options{NoSync: true, JournalOff: true})
			appendFrames(t, s, "a", 0, 6)
			appendFrames(t, s, "b", 0, 2)
			require.NoError(t, s.Verify(context.Background(), nil))
			require.NoError(t, s.Close())
			rawUpdate(t, path, c.damage)
			s = openAt(t, path, &eventstore.Options{NoSync: true, JournalOff: true})
			defer s.Close()
			var streams []string
			err := s.Verify(context.Background(), func(stream string, err error) { streams = append(streams, stream) })
			require.ErrorIs(t, err, eventstore.ErrCorrupt)
			require.Equal(t, []string{c.stream}, streams)
		})
	}
}
