package storetest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/eventstore"
)

// The conformance test of eventstore.RemovalReporter; a store that does
// not implement it skips it.

// testRemovedThrough: RemovedThrough names the global sequence of the last
// removed record, per stream (exact), under a prefix, and over all; a
// removal that moves nothing changes nothing.
func testRemovedThrough(t *testing.T, open Opener) {
	s := newStore(t, open)
	rr, ok := s.(eventstore.RemovalReporter)
	if !ok {
		t.Skipf("%T does not implement eventstore.RemovalReporter", s)
	}
	ctx := t.Context()
	through := func(prefix string, exact bool) uint64 {
		t.Helper()
		v, err := rr.RemovedThrough(ctx, prefix, exact)
		require.NoError(t, err)
		return v
	}
	assert.Zero(t, through("", false), "nothing removed")
	assert.Zero(t, through("a", true))

	// Interleave the streams so that their sequences differ from their
	// versions.
	seqOf := map[string][]uint64{}
	for i := range 6 {
		for _, name := range []string{"a", "ab", "b"} {
			res := mustAppend(t, s, name, int64(i), ev("x", name))
			seqOf[name] = append(seqOf[name], res.LastSeq)
		}
	}
	snap := func(stream string, v int64) {
		require.NoError(t, s.SaveSnapshot(ctx, stream, eventstore.Snapshot{Version: v, Format: 1, Data: []byte("s")}))
	}
	snap("a", 6)
	snap("ab", 6)
	snap("b", 6)

	_, err := s.RemovePrefix(ctx, "a", 3)
	require.NoError(t, err)
	a3 := seqOf["a"][2]
	cases := []struct {
		prefix string
		exact  bool
		want   uint64
	}{
		{"a", true, a3},
		{"a", false, a3},
		{"", false, a3},
		{"ab", true, 0},
		{"ab", false, 0},
		{"b", false, 0},
		{"", true, 0},
		{"c", false, 0},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, through(tc.prefix, tc.exact), "prefix %q exact %v", tc.prefix, tc.exact)
	}

	_, err = s.RemovePrefix(ctx, "ab", 4)
	require.NoError(t, err)
	abCut := seqOf["ab"][3]
	require.Greater(t, abCut, a3, "the test needs ab's cut after a's")
	assert.Equal(t, a3, through("a", true), "another stream's removal")
	assert.Equal(t, abCut, through("ab", true))
	assert.Equal(t, abCut, through("a", false), "the highest under the prefix")
	assert.Equal(t, abCut, through("", false))
	assert.Zero(t, through("b", false))

	_, err = s.RemovePrefix(ctx, "a", 2) // below the base: moves nothing
	require.NoError(t, err)
	assert.Equal(t, a3, through("a", true))

	_, err = s.RemovePrefix(ctx, "b", 6) // everything
	require.NoError(t, err)
	b6 := seqOf["b"][5]
	assert.Equal(t, b6, through("b", true))
	assert.Equal(t, b6, through("", false))
	assert.Equal(t, abCut, through("a", false))

	// A reader of the stream from above the value misses nothing: the
	// records left start right after it... or later.
	recs := readStream(t, s, "a", 1)
	require.NotEmpty(t, recs)
	assert.Greater(t, recs[0].Seq, through("a", true))

	require.NoError(t, s.Close())
	_, err = rr.RemovedThrough(ctx, "", false)
	require.ErrorIs(t, err, eventstore.ErrClosed)
}
