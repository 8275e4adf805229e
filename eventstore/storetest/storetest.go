// Package storetest is the conformance suite every eventstore.Store backend
// must pass, the way testing/fstest serves io/fs. A backend's test calls Run
// with a function that opens an empty store with default limits.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
)

// Opener returns a new, empty store with default limits. The suite closes it.
type Opener func(t *testing.T) eventstore.Store

// GoldenHead is the head hash of stream "golden" after appending
// goldenEvents to an empty store: every backend must encode and chain
// records identically, so that a log moved between backends verifies.
const GoldenHead = "21c04a03e71bf7abc75f34c19f4d9d14b32e8aaad37d23d479eed1311f7358b1"

var goldenEvents = []eventstore.Event{
	{Type: "frame.pushed", Data: []byte(`{"id":"f1"}`)},
	{Type: "frame.updated", Data: nil},
	{Type: "frame.popped", Data: []byte{0, 1, 2, 3, 255}},
}

// Run runs the whole suite.
func Run(t *testing.T, open Opener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, open Opener)
	}{
		{"VersionsAndSequences", testVersionsAndSequences},
		{"HashChain", testHashChain},
		{"Golden", testGolden},
		{"ExpectedVersion", testExpectedVersion},
		{"AtomicAppend", testAtomicAppend},
		{"ReadStreamFrom", testReadStreamFrom},
		{"ReadAllFrom", testReadAllFrom},
		{"CallbackError", testCallbackError},
		{"CallbackMayCallStore", testCallbackMayCallStore},
		{"LongStream", testLongStream},
		{"StreamAndStreams", testStreamAndStreams},
		{"Snapshots", testSnapshots},
		{"BadInput", testBadInput},
		{"EmptyAndBinaryData", testEmptyAndBinaryData},
		{"CanceledContext", testCanceledContext},
		{"RaceOneStreamSameVersion", testRaceOneStreamSameVersion},
		{"RaceOneStreamRetry", testRaceOneStreamRetry},
		{"ConcurrentStreams", testConcurrentStreams},
		{"Closed", testClosed},
		{"Index", testIndex},
		{"RemovePrefix", testRemovePrefix},
		{"TablesOps", testTablesOps},
		{"TablesBadInput", testTablesBadInput},
		{"TablesScan", testTablesScan},
		{"TablesClosed", testTablesClosed},
		{"WatchEveryCommit", testWatchEveryCommit},
		{"WatchReadable", testWatchReadable},
		{"WatchStop", testWatchStop},
		{"RemovedThrough", testRemovedThrough},
		{"Fence", testFence},
		{"SharedKey", testSharedKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, open) })
	}
}

func newStore(t *testing.T, open Opener) eventstore.Store {
	t.Helper()
	s := open(t)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func ev(typ, data string) eventstore.Event {
	return eventstore.Event{Type: typ, Data: []byte(data)}
}

func readStream(t *testing.T, s eventstore.Store, stream string, from int64) []eventstore.Record {
	t.Helper()
	var out []eventstore.Record
	require.NoError(t, s.ReadStream(t.Context(), stream, from, func(r eventstore.Record) error {
		out = append(out, r)
		return nil
	}))
	return out
}

func readAll(t *testing.T, s eventstore.Store, from uint64) []eventstore.Record {
	t.Helper()
	var out []eventstore.Record
	require.NoError(t, s.ReadAll(t.Context(), from, func(r eventstore.Record) error {
		out = append(out, r)
		return nil
	}))
	return out
}

func mustAppend(t *testing.T, s eventstore.Store, stream string, expected int64, events ...eventstore.Event) eventstore.AppendResult {
	t.Helper()
	res, err := s.Append(t.Context(), stream, expected, events)
	require.NoError(t, err)
	return res
}

// state is everything observable about a store, to prove a failed call
// changed nothing.
type state struct {
	lastSeq uint64
	streams []eventstore.StreamInfo
	all     []eventstore.Record
}

func snapshotState(t *testing.T, s eventstore.Store) state {
	t.Helper()
	var st state
	var err error
	st.lastSeq, err = s.LastSeq(t.Context())
	require.NoError(t, err)
	require.NoError(t, s.Streams(t.Context(), func(i eventstore.StreamInfo) error {
		st.streams = append(st.streams, i)
		return nil
	}))
	st.all = readAll(t, s, 1)
	return st
}

func verifyAll(t *testing.T, s eventstore.Store) {
	t.Helper()
	require.NoError(t, s.Streams(t.Context(), func(i eventstore.StreamInfo) error {
		return s.VerifyStream(t.Context(), i.Stream)
	}))
}

func testVersionsAndSequences(t *testing.T, open Opener) {
	s := newStore(t, open)
	r1 := mustAppend(t, s, "a", eventstore.NoStream, ev("t1", "a1"), ev("t2", "a2"))
	assert.Equal(t, int64(1), r1.FirstVersion)
	assert.Equal(t, int64(2), r1.LastVersion)
	assert.Equal(t, uint64(1), r1.FirstSeq)
	assert.Equal(t, uint64(2), r1.LastSeq)

	r2 := mustAppend(t, s, "b", eventstore.NoStream, ev("t1", "b1"))
	assert.Equal(t, int64(1), r2.FirstVersion)
	assert.Equal(t, int64(1), r2.LastVersion)
	assert.Equal(t, uint64(3), r2.FirstSeq)
	assert.Equal(t, uint64(3), r2.LastSeq)

	r3 := mustAppend(t, s, "a", 2, ev("t3", "a3"))
	assert.Equal(t, int64(3), r3.FirstVersion)
	assert.Equal(t, uint64(4), r3.FirstSeq)

	a := readStream(t, s, "a", 1)
	require.Len(t, a, 3)
	for i, r := range a {
		assert.Equal(t, "a", r.Stream)
		assert.Equal(t, int64(i+1), r.Version)
		assert.Equal(t, fmt.Sprintf("a%d", i+1), string(r.Data))
	}
	assert.Equal(t, []uint64{1, 2, 4}, []uint64{a[0].Seq, a[1].Seq, a[2].Seq})
	assert.Equal(t, []string{"t1", "t2", "t3"}, []string{a[0].Type, a[1].Type, a[2].Type})

	all := readAll(t, s, 0)
	require.Len(t, all, 4)
	wantStreams := []string{"a", "a", "b", "a"}
	for i, r := range all {
		assert.Equal(t, uint64(i+1), r.Seq)
		assert.Equal(t, wantStreams[i], r.Stream)
	}
	assert.Equal(t, a[2], all[3], "ReadAll and ReadStream return the same record")

	last, err := s.LastSeq(t.Context())
	require.NoError(t, err)
	assert.Equal(t, uint64(4), last)

	info, err := s.Stream(t.Context(), "a")
	require.NoError(t, err)
	assert.Equal(t, eventstore.StreamInfo{Stream: "a", Version: 3, Head: r3.Head}, info)
	verifyAll(t, s)
}

func testHashChain(t *testing.T, open Opener) {
	s := newStore(t, open)
	var heads []eventstore.Hash
	for i := range 5 {
		res := mustAppend(t, s, "chain", int64(i), ev("t", fmt.Sprint(i)))
		heads = append(heads, res.Head)
	}
	recs := readStream(t, s, "chain", 1)
	require.Len(t, recs, 5)
	var prev eventstore.Hash
	seen := map[eventstore.Hash]bool{}
	for i, r := range recs {
		assert.Equal(t, prev, r.PrevHash, "version %d links to its predecessor", r.Version)
		assert.Equal(t, heads[i], r.Hash, "the append's head is the record's hash")
		assert.False(t, seen[r.Hash], "hashes are distinct")
		seen[r.Hash] = true
		prev = r.Hash
	}
	// Identical content at another position hashes differently: the hash
	// covers the position.
	mustAppend(t, s, "chain2", eventstore.NoStream, ev("t", "0"))
	other := readStream(t, s, "chain2", 1)
	require.Len(t, other, 1)
	assert.NotEqual(t, recs[0].Hash, other[0].Hash)
	require.NoError(t, s.VerifyStream(t.Context(), "chain"))
	require.NoError(t, s.VerifyStream(t.Context(), "missing"), "a missing stream verifies")
}

func testGolden(t *testing.T, open Opener) {
	s := newStore(t, open)
	res := mustAppend(t, s, "golden", eventstore.NoStream, goldenEvents...)
	assert.Equal(t, GoldenHead, fmt.Sprintf("%x", res.Head[:]),
		"record encoding or hashing changed: that breaks every existing chain")
}

func testExpectedVersion(t *testing.T, open Opener) {
	tests := []struct {
		name     string
		setup    int // events already in the stream
		expected int64
		ok       bool
	}{
		{"NoStreamOnNew", 0, eventstore.NoStream, true},
		{"AnyOnNew", 0, eventstore.Any, true},
		{"ExactOnNew", 0, 1, false},
		{"NoStreamOnExisting", 2, eventstore.NoStream, false},
		{"Exact", 2, 2, true},
		{"Stale", 2, 1, false},
		{"Future", 2, 5, false},
		{"AnyOnExisting", 2, eventstore.Any, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, open)
			for i := range tt.setup {
				mustAppend(t, s, "s", int64(i), ev("setup", ""))
			}
			mustAppend(t, s, "other", eventstore.NoStream, ev("x", ""))
			before := snapshotState(t, s)

			res, err := s.Append(t.Context(), "s", tt.expected, []eventstore.Event{ev("new", "n")})
			if tt.ok {
				require.NoError(t, err)
				assert.Equal(t, int64(tt.setup+1), res.FirstVersion)
				assert.Equal(t, before.lastSeq+1, res.FirstSeq)
				return
			}
			require.ErrorIs(t, err, eventstore.ErrConflict)
			var ce *eventstore.ConflictError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, "s", ce.Stream)
			assert.Equal(t, tt.expected, ce.Expected)
			assert.Equal(t, int64(tt.setup), ce.Actual)
			assert.Contains(t, err.Error(), "eventstore: ")
			assert.Equal(t, eventstore.AppendResult{}, res)
			assert.Equal(t, before, snapshotState(t, s), "a conflict writes nothing")
		})
	}
}

func testAtomicAppend(t *testing.T, open Opener) {
	big := make([]byte, eventstore.DefaultMaxRecordBytes)
	tests := []struct {
		name   string
		events []eventstore.Event
		want   error
	}{
		{"EmptyTypeLast", []eventstore.Event{ev("ok", "1"), ev("ok", "2"), ev("", "3")}, eventstore.ErrEmptyEventType},
		{"OversizedMiddle", []eventstore.Event{ev("ok", "1"), {Type: "big", Data: big}, ev("ok", "3")}, eventstore.ErrRecordTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, open)
			mustAppend(t, s, "s", eventstore.NoStream, ev("first", ""))
			before := snapshotState(t, s)
			_, err := s.Append(t.Context(), "s", 1, tt.events)
			require.ErrorIs(t, err, tt.want)
			assert.Equal(t, before, snapshotState(t, s), "a failing append writes none of its events")
			mustAppend(t, s, "s", 1, ev("after", ""))
		})
	}
}

func seed(t *testing.T, s eventstore.Store, stream string, n int) {
	t.Helper()
	for i := range n {
		mustAppend(t, s, stream, int64(i), ev("t", fmt.Sprintf("%s-%d", stream, i+1)))
	}
}

func versions(recs []eventstore.Record) []int64 {
	out := []int64{}
	for _, r := range recs {
		out = append(out, r.Version)
	}
	return out
}

func testReadStreamFrom(t *testing.T, open Opener) {
	s := newStore(t, open)
	seed(t, s, "s", 5)
	tests := []struct {
		from int64
		want []int64
	}{
		{-3, []int64{1, 2, 3, 4, 5}},
		{0, []int64{1, 2, 3, 4, 5}},
		{1, []int64{1, 2, 3, 4, 5}},
		{3, []int64{3, 4, 5}},
		{5, []int64{5}},
		{6, []int64{}},
		{100, []int64{}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint("from=", tt.from), func(t *testing.T) {
			assert.Equal(t, tt.want, versions(readStream(t, s, "s", tt.from)))
		})
	}
	assert.Empty(t, readStream(t, s, "missing", 1), "a missing stream has no records and no error")
}

func testReadAllFrom(t *testing.T, open Opener) {
	s := newStore(t, open)
	assert.Empty(t, readAll(t, s, 0), "an empty store")
	seed(t, s, "a", 3)
	seed(t, s, "b", 3)
	tests := []struct {
		from uint64
		want int // records returned, ending at seq 6
	}{
		{0, 6}, {1, 6}, {4, 3}, {6, 1}, {7, 0}, {1000, 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint("from=", tt.from), func(t *testing.T) {
			recs := readAll(t, s, tt.from)
			require.Len(t, recs, tt.want)
			for i, r := range recs {
				assert.Equal(t, uint64(6-tt.want+i+1), r.Seq)
			}
		})
	}
}

func testCallbackError(t *testing.T, open Opener) {
	s := newStore(t, open)
	seed(t, s, "s", 5)
	stop := errors.New("stop here")
	calls := 0
	err := s.ReadStream(t.Context(), "s", 1, func(r eventstore.Record) error {
		calls++
		if r.Version == 2 {
			return stop
		}
		return nil
	})
	require.ErrorIs(t, err, stop)
	assert.Equal(t, 2, calls)

	calls = 0
	err = s.ReadAll(t.Context(), 1, func(eventstore.Record) error { calls++; return stop })
	require.ErrorIs(t, err, stop)
	assert.Equal(t, 1, calls)

	err = s.Streams(t.Context(), func(eventstore.StreamInfo) error { return stop })
	require.ErrorIs(t, err, stop)
}

// Callbacks run outside transactions and locks: a projection may append
// from inside a read without deadlocking.
func testCallbackMayCallStore(t *testing.T, open Opener) {
	s := newStore(t, open)
	seed(t, s, "src", 3)
	err := s.ReadStream(t.Context(), "src", 1, func(r eventstore.Record) error {
		_, err := s.Append(t.Context(), "dst", r.Version-1, []eventstore.Event{{Type: r.Type, Data: r.Data}})
		return err
	})
	require.NoError(t, err)
	err = s.ReadAll(t.Context(), 1, func(r eventstore.Record) error {
		if r.Stream != "src" {
			return nil
		}
		_, err := s.Append(t.Context(), "dst2", eventstore.Any, []eventstore.Event{{Type: r.Type}})
		return err
	})
	require.NoError(t, err)
	assert.Len(t, readStream(t, s, "dst", 1), 3)
	assert.Len(t, readStream(t, s, "dst2", 1), 3)
}

// A stream longer than any read chunk reads and verifies whole.
func testLongStream(t *testing.T, open Opener) {
	s := newStore(t, open)
	const n = 1500
	events := make([]eventstore.Event, 100)
	for i := 0; i < n; i += len(events) {
		for j := range events {
			events[j] = ev("t", fmt.Sprint(i+j+1))
		}
		mustAppend(t, s, "long", int64(i), events...)
	}
	recs := readStream(t, s, "long", 1)
	require.Len(t, recs, n)
	for i, r := range recs {
		require.Equal(t, int64(i+1), r.Version)
		require.Equal(t, fmt.Sprint(i+1), string(r.Data))
		if i > 0 {
			require.Equal(t, recs[i-1].Hash, r.PrevHash)
		}
	}
	assert.Len(t, readStream(t, s, "long", 777), n-776)
	assert.Len(t, readAll(t, s, 2), n-1)
	require.NoError(t, s.VerifyStream(t.Context(), "long"))
}

func testStreamAndStreams(t *testing.T, open Opener) {
	s := newStore(t, open)
	info, err := s.Stream(t.Context(), "nope")
	require.NoError(t, err)
	assert.Equal(t, eventstore.StreamInfo{Stream: "nope"}, info)

	var none []eventstore.StreamInfo
	require.NoError(t, s.Streams(t.Context(), func(i eventstore.StreamInfo) error { none = append(none, i); return nil }))
	assert.Empty(t, none)

	names := []string{"zeta", "alpha", "mid", "Alpha", "alpha.1"}
	heads := map[string]eventstore.Hash{}
	lengths := map[string]int64{}
	for i, name := range names {
		var res eventstore.AppendResult
		for j := 0; j <= i; j++ {
			res = mustAppend(t, s, name, int64(j), ev("t", ""))
		}
		heads[name] = res.Head
		lengths[name] = int64(i + 1)
	}
	var got []eventstore.StreamInfo
	require.NoError(t, s.Streams(t.Context(), func(i eventstore.StreamInfo) error { got = append(got, i); return nil }))
	require.Len(t, got, len(names))
	var gotNames []string
	for _, i := range got {
		gotNames = append(gotNames, i.Stream)
		assert.Equal(t, heads[i.Stream], i.Head)
		assert.Equal(t, lengths[i.Stream], i.Version)
		one, err := s.Stream(t.Context(), i.Stream)
		require.NoError(t, err)
		assert.Equal(t, i, one)
	}
	assert.Equal(t, []string{"Alpha", "alpha", "alpha.1", "mid", "zeta"}, gotNames, "byte order of names")
}

func testSnapshots(t *testing.T, open Opener) {
	s := newStore(t, open)
	_, ok, err := s.LoadSnapshot(t.Context(), "s")
	require.NoError(t, err)
	assert.False(t, ok)

	require.ErrorIs(t, s.SaveSnapshot(t.Context(), "s", eventstore.Snapshot{Version: 1, Data: []byte("x")}),
		eventstore.ErrInvalidSnapshotVersion, "no stream yet")
	seed(t, s, "s", 4)

	bad := []struct {
		name    string
		version int64
	}{{"Zero", 0}, {"Negative", -1}, {"BeyondHead", 5}}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			err := s.SaveSnapshot(t.Context(), "s", eventstore.Snapshot{Version: tt.version, Format: 1})
			require.ErrorIs(t, err, eventstore.ErrInvalidSnapshotVersion)
			_, ok, err := s.LoadSnapshot(t.Context(), "s")
			require.NoError(t, err)
			assert.False(t, ok, "a refused snapshot is not stored")
		})
	}

	first := eventstore.Snapshot{Version: 2, Format: 7, Data: []byte("state@2")}
	require.NoError(t, s.SaveSnapshot(t.Context(), "s", first))
	got, ok, err := s.LoadSnapshot(t.Context(), "s")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, first, got)

	second := eventstore.Snapshot{Version: 4, Format: 8, Data: []byte("state@4")}
	require.NoError(t, s.SaveSnapshot(t.Context(), "s", second))
	got, ok, err = s.LoadSnapshot(t.Context(), "s")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, second, got, "a later snapshot replaces the earlier one")

	got.Data[0] = 'X' // the caller owns what it loaded
	again, _, err := s.LoadSnapshot(t.Context(), "s")
	require.NoError(t, err)
	assert.Equal(t, second, again)

	empty := eventstore.Snapshot{Version: 1, Format: 0}
	require.NoError(t, s.SaveSnapshot(t.Context(), "s", empty))
	got, ok, err = s.LoadSnapshot(t.Context(), "s")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, int64(1), got.Version)
	assert.Empty(t, got.Data)

	_, ok, err = s.LoadSnapshot(t.Context(), "other")
	require.NoError(t, err)
	assert.False(t, ok, "snapshots are per stream")

	huge := eventstore.Snapshot{Version: 1, Data: make([]byte, eventstore.DefaultMaxSnapshotBytes)}
	require.ErrorIs(t, s.SaveSnapshot(t.Context(), "s", huge), eventstore.ErrSnapshotTooLarge)
	assert.Equal(t, int64(4), readStream(t, s, "s", 1)[3].Version, "snapshots do not touch the stream")
}

func testBadInput(t *testing.T, open Opener) {
	s := newStore(t, open)
	seed(t, s, "s", 2)
	ctx := t.Context()
	oneMiB := make([]byte, 1<<20)
	tooMany := make([]eventstore.Event, eventstore.DefaultMaxAppendBytes/(1<<20)+1)
	for i := range tooMany {
		tooMany[i] = eventstore.Event{Type: "t", Data: oneMiB}
	}
	appendCase := func(stream string, expected int64, events ...eventstore.Event) func() error {
		return func() error { _, err := s.Append(ctx, stream, expected, events); return err }
	}
	readStreamCase := func(stream string) func() error {
		return func() error { return s.ReadStream(ctx, stream, 1, func(eventstore.Record) error { return nil }) }
	}
	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"EmptyStream", appendCase("", eventstore.Any, ev("t", "")), eventstore.ErrEmptyStream},
		{"StreamTooLong", appendCase(strings.Repeat("x", eventstore.MaxStreamBytes+1), eventstore.Any, ev("t", "")), eventstore.ErrInvalidStream},
		{"StreamInvalidUTF8", appendCase("bad\xff", eventstore.Any, ev("t", "")), eventstore.ErrInvalidStream},
		{"StreamNUL", appendCase("a\x00b", eventstore.Any, ev("t", "")), eventstore.ErrInvalidStream},
		{"NoEvents", appendCase("s", 2), eventstore.ErrNoEvents},
		{"EmptyEventsSlice", func() error { _, err := s.Append(ctx, "s", 2, []eventstore.Event{}); return err }, eventstore.ErrNoEvents},
		{"EmptyType", appendCase("s", 2, ev("", "x")), eventstore.ErrEmptyEventType},
		{"TypeTooLong", appendCase("s", 2, ev(strings.Repeat("t", eventstore.MaxEventTypeBytes+1), "")), eventstore.ErrInvalidEventType},
		{"TypeInvalidUTF8", appendCase("s", 2, ev("\xfe", "")), eventstore.ErrInvalidEventType},
		{"ExpectedBelowAny", appendCase("s", -2, ev("t", "")), eventstore.ErrInvalidExpectedVersion},
		{"RecordTooLarge", appendCase("s", 2, eventstore.Event{Type: "t", Data: make([]byte, eventstore.DefaultMaxRecordBytes)}), eventstore.ErrRecordTooLarge},
		{"AppendTooLarge", appendCase("s", 2, tooMany...), eventstore.ErrAppendTooLarge},
		{"FutureVersion", appendCase("s", 7, ev("t", "")), eventstore.ErrConflict},
		{"FutureVersionNewStream", appendCase("new", 3, ev("t", "")), eventstore.ErrConflict},
		{"ReadStreamEmptyName", readStreamCase(""), eventstore.ErrEmptyStream},
		{"ReadStreamInvalidName", readStreamCase("a\x00"), eventstore.ErrInvalidStream},
		{"StreamEmptyName", func() error { _, err := s.Stream(ctx, ""); return err }, eventstore.ErrEmptyStream},
		{"VerifyEmptyName", func() error { return s.VerifyStream(ctx, "") }, eventstore.ErrEmptyStream},
		{"LoadSnapshotEmptyName", func() error { _, _, err := s.LoadSnapshot(ctx, ""); return err }, eventstore.ErrEmptyStream},
		{"SaveSnapshotEmptyName", func() error {
			return s.SaveSnapshot(ctx, "", eventstore.Snapshot{Version: 1})
		}, eventstore.ErrEmptyStream},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := snapshotState(t, s)
			err := tt.call()
			require.ErrorIs(t, err, tt.want)
			assert.True(t, strings.HasPrefix(err.Error(), "eventstore: "), "message %q names the package", err)
			assert.Equal(t, before, snapshotState(t, s), "bad input changes nothing")
			_, ok, lerr := s.LoadSnapshot(ctx, "s")
			require.NoError(t, lerr)
			assert.False(t, ok)
		})
	}
	// Limits are inclusive: the largest record that fits is accepted.
	overhead := 200 // generous bound on the envelope of stream "s", type "t"
	res := mustAppend(t, s, "s", 2, eventstore.Event{Type: "t", Data: make([]byte, eventstore.DefaultMaxRecordBytes-overhead)})
	assert.Equal(t, int64(3), res.LastVersion)
}

func testEmptyAndBinaryData(t *testing.T, open Opener) {
	s := newStore(t, open)
	bin := []byte{0, 0xc1, 0xff, 0x80, 0x00}
	long := bytes.Repeat([]byte{0xab}, 70000) // crosses the 16-bit length boundary
	mustAppend(t, s, "s", eventstore.NoStream,
		eventstore.Event{Type: "nil"},
		eventstore.Event{Type: "empty", Data: []byte{}},
		eventstore.Event{Type: "bin", Data: bin},
		eventstore.Event{Type: "long", Data: long},
		eventstore.Event{Type: "ünïcode ✓", Data: []byte("x")},
	)
	recs := readStream(t, s, "s", 1)
	require.Len(t, recs, 5)
	assert.Empty(t, recs[0].Data)
	assert.Empty(t, recs[1].Data)
	assert.Equal(t, bin, recs[2].Data)
	assert.Equal(t, long, recs[3].Data)
	assert.Equal(t, "ünïcode ✓", recs[4].Type)

	recs[2].Data[0] = 9 // the caller owns returned data
	assert.Equal(t, bin, readStream(t, s, "s", 3)[0].Data)

	// The store copies input too: changing the slice after Append changes nothing.
	data := []byte("orig")
	mustAppend(t, s, "s", 5, eventstore.Event{Type: "t", Data: data})
	copy(data, "XXXX")
	assert.Equal(t, "orig", string(readStream(t, s, "s", 6)[0].Data))
	require.NoError(t, s.VerifyStream(t.Context(), "s"))
}

func testCanceledContext(t *testing.T, open Opener) {
	s := newStore(t, open)
	seed(t, s, "s", 1)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	before := snapshotState(t, s)
	_, err := s.Append(ctx, "s", 1, []eventstore.Event{ev("t", "")})
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, s.SaveSnapshot(ctx, "s", eventstore.Snapshot{Version: 1}), context.Canceled)
	require.ErrorIs(t, s.ReadStream(ctx, "s", 1, func(eventstore.Record) error { return nil }), context.Canceled)
	require.ErrorIs(t, s.ReadAll(ctx, 1, func(eventstore.Record) error { return nil }), context.Canceled)
	assert.Equal(t, before, snapshotState(t, s))
}

const racers = 16

// Racers append to one stream at the same expected version, round after
// round: exactly one wins each version, the others conflict and write
// nothing.
func testRaceOneStreamSameVersion(t *testing.T, open Opener) {
	s := newStore(t, open)
	const rounds = 25
	winners := make([]int, rounds)
	for round := range rounds {
		start := make(chan struct{})
		errs := make([]error, racers)
		var wg sync.WaitGroup
		for g := range racers {
			wg.Go(func() {
				<-start
				_, errs[g] = s.Append(context.Background(), "race", int64(round),
					[]eventstore.Event{ev("won", fmt.Sprintf("%d/%d", round, g))})
			})
		}
		close(start)
		wg.Wait()
		wins := 0
		for g, err := range errs {
			if err == nil {
				wins++
				winners[round] = g
				continue
			}
			var ce *eventstore.ConflictError
			require.ErrorAs(t, err, &ce, "racer %d", g)
			assert.Equal(t, int64(round), ce.Expected)
			assert.Equal(t, int64(round+1), ce.Actual)
		}
		require.Equal(t, 1, wins, "round %d", round)
	}
	recs := readStream(t, s, "race", 1)
	require.Len(t, recs, rounds)
	for round, r := range recs {
		assert.Equal(t, fmt.Sprintf("%d/%d", round, winners[round]), string(r.Data))
	}
	last, err := s.LastSeq(t.Context())
	require.NoError(t, err)
	assert.Equal(t, uint64(rounds), last, "losers consumed no sequence numbers")
	require.NoError(t, s.VerifyStream(t.Context(), "race"))
}

// Racers each append their own events to one stream with read-and-retry:
// nothing is lost, nothing duplicated, each racer's events keep their order.
func testRaceOneStreamRetry(t *testing.T, open Opener) {
	s := newStore(t, open)
	const each = 10
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for g := range racers {
		wg.Go(func() {
			ctx := context.Background()
			for i := 0; i < each; {
				info, err := s.Stream(ctx, "shared")
				if err != nil {
					errs[g] = err
					return
				}
				_, err = s.Append(ctx, "shared", info.Version, []eventstore.Event{ev("t", fmt.Sprintf("%d/%d", g, i))})
				switch {
				case err == nil:
					i++
				case errors.Is(err, eventstore.ErrConflict):
				default:
					errs[g] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	recs := readStream(t, s, "shared", 1)
	require.Len(t, recs, racers*each)
	next := make([]int, racers)
	for _, r := range recs {
		var g, i int
		_, err := fmt.Sscanf(string(r.Data), "%d/%d", &g, &i)
		require.NoError(t, err)
		require.Equal(t, next[g], i, "racer %d's events in order, none lost or duplicated", g)
		next[g]++
	}
	require.NoError(t, s.VerifyStream(t.Context(), "shared"))
}

// Writers on different streams never conflict; the global sequence stays
// dense and every stream stays contiguous.
func testConcurrentStreams(t *testing.T, open Opener) {
	s := newStore(t, open)
	const writers, each = 16, 20
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			stream := fmt.Sprintf("w%02d", g)
			for i := range each {
				if _, err := s.Append(context.Background(), stream, int64(i), []eventstore.Event{ev("t", fmt.Sprint(i+1))}); err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	all := readAll(t, s, 1)
	require.Len(t, all, writers*each)
	next := map[string]int64{}
	for i, r := range all {
		require.Equal(t, uint64(i+1), r.Seq)
		next[r.Stream]++
		require.Equal(t, next[r.Stream], r.Version)
		require.Equal(t, fmt.Sprint(r.Version), string(r.Data))
	}
	last, err := s.LastSeq(t.Context())
	require.NoError(t, err)
	assert.Equal(t, uint64(writers*each), last)
	verifyAll(t, s)
}

func testClosed(t *testing.T, open Opener) {
	s := open(t)
	seed(t, s, "s", 1)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")
	ctx := t.Context()
	nop := func(eventstore.Record) error { return nil }
	calls := map[string]func() error{
		"Append":       func() error { _, err := s.Append(ctx, "s", 1, []eventstore.Event{ev("t", "")}); return err },
		"ReadStream":   func() error { return s.ReadStream(ctx, "s", 1, nop) },
		"ReadAll":      func() error { return s.ReadAll(ctx, 1, nop) },
		"Stream":       func() error { _, err := s.Stream(ctx, "s"); return err },
		"Streams":      func() error { return s.Streams(ctx, func(eventstore.StreamInfo) error { return nil }) },
		"LastSeq":      func() error { _, err := s.LastSeq(ctx); return err },
		"SaveSnapshot": func() error { return s.SaveSnapshot(ctx, "s", eventstore.Snapshot{Version: 1}) },
		"LoadSnapshot": func() error { _, _, err := s.LoadSnapshot(ctx, "s"); return err },
		"VerifyStream": func() error { return s.VerifyStream(ctx, "s") },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			require.ErrorIs(t, call(), eventstore.ErrClosed)
		})
	}
}

// frameEvent encodes a domain event about frame for request.
func frameEvent(t *testing.T, scope, frame, request string) eventstore.Event {
	t.Helper()
	e, err := eventstore.EncodeFrameEvent(&frames.ResultAdded{Meta: frames.Meta{Scope: scope, Frame: frame, At: 1, RequestID: request,
		RequestHash: []byte{1, 2}}, Result: frames.ResultRef{ID: "x"}})
	require.NoError(t, err)
	return e
}

// testIndex: every record of the frames codec is indexed by the frame and
// the request it names, at once and per stream; other payloads name none.
func testIndex(t *testing.T, open Opener) {
	ctx := context.Background()
	s := newStore(t, open)
	lookup := func(stream, key string) (eventstore.Span, bool) {
		t.Helper()
		sp, ok, err := s.Lookup(ctx, stream, key)
		require.NoError(t, err)
		return sp, ok
	}
	mustAppend(t, s, "a", eventstore.NoStream, frameEvent(t, "a", "f1", "r1"), frameEvent(t, "a", "f2", "r1"))
	mustAppend(t, s, "a", 2, ev("opaque", "not msgpack"), frameEvent(t, "a", "f1", ""))
	mustAppend(t, s, "b", eventstore.NoStream, frameEvent(t, "b", "f1", "r9"))
	mustAppend(t, s, "a", 4, frameEvent(t, "a", "", "r2"))

	for _, c := range []struct {
		stream, key string
		want        eventstore.Span
		ok          bool
	}{
		{"a", eventstore.FrameKey("f1"), eventstore.Span{First: 1, Last: 4}, true},
		{"a", eventstore.FrameKey("f2"), eventstore.Span{First: 2, Last: 2}, true},
		{"a", eventstore.RequestKey("r1"), eventstore.Span{First: 1, Last: 2}, true},
		{"a", eventstore.RequestKey("r2"), eventstore.Span{First: 5, Last: 5}, true},
		{"a", eventstore.RequestKey("r9"), eventstore.Span{}, false}, // another stream's
		{"b", eventstore.FrameKey("f1"), eventstore.Span{First: 1, Last: 1}, true},
		{"b", eventstore.FrameKey("f2"), eventstore.Span{}, false},
		{"c", eventstore.FrameKey("f1"), eventstore.Span{}, false}, // no such stream
		{"a", eventstore.FrameKey(""), eventstore.Span{}, false},
	} {
		sp, ok := lookup(c.stream, c.key)
		assert.Equal(t, c.ok, ok, "%s %q", c.stream, c.key)
		assert.Equal(t, c.want, sp, "%s %q", c.stream, c.key)
	}
	_, _, err := s.Lookup(ctx, "", eventstore.FrameKey("f1"))
	assert.ErrorIs(t, err, eventstore.ErrEmptyStream)
	_, _, err = s.Lookup(ctx, strings.Repeat("s", eventstore.MaxStreamBytes+1), eventstore.FrameKey("f1"))
	assert.ErrorIs(t, err, eventstore.ErrInvalidStream)
}

// testRemovePrefix: removing a stream's first records leaves a stream that
// reads, verifies and appends on from its base; what only the removed
// records named leaves the index; nothing else changes.
func testRemovePrefix(t *testing.T, open Opener) {
	ctx := context.Background()
	s := newStore(t, open)
	for i := range 10 {
		mustAppend(t, s, "a", int64(i), frameEvent(t, "a", fmt.Sprintf("f%d", i/4), fmt.Sprintf("r%d", i/2)))
	}
	mustAppend(t, s, "b", eventstore.NoStream, ev("x", "b1"))
	before := readStream(t, s, "a", 1)
	require.NoError(t, s.SaveSnapshot(ctx, "a", eventstore.Snapshot{Version: 6, Format: 1, Data: []byte("s")}))

	_, err := s.RemovePrefix(ctx, "a", 7)
	require.ErrorIs(t, err, eventstore.ErrSnapshotBehind, "the projection could no longer be rebuilt")
	_, err = s.RemovePrefix(ctx, "a", 0)
	require.Error(t, err)
	_, err = s.RemovePrefix(ctx, "", 1)
	require.ErrorIs(t, err, eventstore.ErrEmptyStream)
	assert.Equal(t, before, readStream(t, s, "a", 1), "a refused removal changes nothing")

	res, err := s.RemovePrefix(ctx, "a", 5)
	require.NoError(t, err)
	assert.Equal(t, int64(5), res.Removed)
	assert.Equal(t, eventstore.Base{Version: 5, Hash: before[4].Hash}, res.Base)
	assert.Equal(t, before[5:], readStream(t, s, "a", 1), "reads start after the base")
	assert.Equal(t, before[5:], readStream(t, s, "a", 3))
	assert.Equal(t, before[7:], readStream(t, s, "a", 8))
	require.NoError(t, s.VerifyStream(ctx, "a"))
	info, err := s.Stream(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, int64(10), info.Version, "the version keeps counting")

	// The index: f0 (versions 1..4) and r0..r2 (1..6: r2 straddles) are gone;
	// f1 (5..8) straddles the base and keeps its entry; the rest stays.
	for key, want := range map[string]bool{
		eventstore.FrameKey("f0"): false, eventstore.RequestKey("r0"): false, eventstore.RequestKey("r2"): false,
		eventstore.FrameKey("f1"): true, eventstore.FrameKey("f2"): true, eventstore.RequestKey("r3"): true,
	} {
		_, ok, err := s.Lookup(ctx, "a", key)
		require.NoError(t, err)
		assert.Equal(t, want, ok, key)
	}

	// The global order skips what was removed.
	var got []string
	require.NoError(t, s.ReadAll(ctx, 0, func(r eventstore.Record) error {
		got = append(got, fmt.Sprintf("%s/%d", r.Stream, r.Version))
		return nil
	}))
	assert.Equal(t, []string{"a/6", "a/7", "a/8", "a/9", "a/10", "b/1"}, got)

	// Appends continue the chain from the head; a second removal at or
	// below the base changes nothing.
	r11 := mustAppend(t, s, "a", 10, frameEvent(t, "a", "f9", "r9"))
	res, err = s.RemovePrefix(ctx, "a", 3)
	require.NoError(t, err)
	assert.Equal(t, int64(0), res.Removed)
	require.NoError(t, s.SaveSnapshot(ctx, "a", eventstore.Snapshot{Version: 11, Format: 1, Data: []byte("s")}))
	res, err = s.RemovePrefix(ctx, "a", 11) // everything
	require.NoError(t, err)
	assert.Equal(t, int64(6), res.Removed)
	assert.Equal(t, r11.Head, res.Base.Hash)
	assert.Empty(t, readStream(t, s, "a", 1))
	require.NoError(t, s.VerifyStream(ctx, "a"))
	mustAppend(t, s, "a", 11, ev("x", "after"))
	recs := readStream(t, s, "a", 1)
	require.Len(t, recs, 1)
	assert.Equal(t, r11.Head, recs[0].PrevHash, "the chain goes on from the base")
	require.NoError(t, s.VerifyStream(ctx, "a"))
	_, err = s.RemovePrefix(ctx, "a", 13)
	require.Error(t, err, "beyond the head")
}
