package storetest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/eventstore"
)

// The conformance tests of eventstore.CommitWatcher; a store that does not
// implement it skips them.

func watcherOf(t *testing.T, open Opener) (eventstore.Store, eventstore.CommitWatcher) {
	t.Helper()
	s := newStore(t, open)
	w, ok := s.(eventstore.CommitWatcher)
	if !ok {
		t.Skipf("%T does not implement eventstore.CommitWatcher", s)
	}
	return s, w
}

// waitSeq receives from ch until a sequence of at least want arrives.
func waitSeq(t *testing.T, ch <-chan uint64, want uint64) uint64 {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case got := <-ch:
			if got >= want {
				return got
			}
		case <-timeout:
			t.Fatalf("no commit notification reached sequence %d", want)
		}
	}
}

// testWatchEveryCommit: sequential appends are each reported with their
// last sequence, in order, once; a conflicting append and a snapshot
// report nothing.
func testWatchEveryCommit(t *testing.T, open Opener) {
	s, w := watcherOf(t, open)
	ctx := t.Context()
	ch := make(chan uint64, 1024)
	stop := w.WatchCommits(func(last uint64) { ch <- last })
	defer stop()
	var want []uint64
	for i := range 20 {
		res := mustAppend(t, s, fmt.Sprintf("s%d", i%3), eventstore.Any, ev("x", "1"), ev("y", "2"))
		want = append(want, res.LastSeq)
		if i == 10 {
			_, err := s.Append(ctx, "s0", 0, []eventstore.Event{ev("x", "c")})
			require.ErrorIs(t, err, eventstore.ErrConflict)
			require.NoError(t, s.SaveSnapshot(ctx, "s0", eventstore.Snapshot{Version: 1, Format: 1, Data: []byte("s")}))
		}
	}
	var got []uint64
	for len(got) < len(want) {
		select {
		case v := <-ch:
			got = append(got, v)
		case <-time.After(10 * time.Second):
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	assert.Equal(t, want, got, "one notification per commit, in order, with its last sequence")
}

// testWatchReadable: with concurrent appenders, a ReadAll started after a
// notification (signalled through a channel) sees every record through
// the notified sequence; notifications never go back.
func testWatchReadable(t *testing.T, open Opener) {
	s, w := watcherOf(t, open)
	ctx := t.Context()
	ch := make(chan uint64, 1<<16)
	var back atomic.Bool
	var prev atomic.Uint64
	stop := w.WatchCommits(func(last uint64) {
		if last < prev.Load() {
			back.Store(true)
		}
		prev.Store(last)
		select {
		case ch <- last:
		default:
		}
	})
	defer stop()
	const writers, appends = 4, 40
	var wg sync.WaitGroup
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range appends {
				_, err := s.Append(ctx, fmt.Sprintf("w%d", i), int64(j), []eventstore.Event{ev("x", "v")})
				assert.NoError(t, err)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	checked := 0
	for total := uint64(writers * appends); ; {
		var last uint64
		select {
		case last = <-ch:
		case <-done:
			last = waitSeq(t, ch, total)
		}
		recs := readAll(t, s, 1)
		require.GreaterOrEqual(t, uint64(len(recs)), last, "a notification of %d came before the records were readable", last)
		for i, r := range recs {
			require.Equal(t, uint64(i+1), r.Seq)
		}
		checked++
		if last == total {
			break
		}
	}
	assert.False(t, back.Load(), "notifications went back in sequence")
	assert.Positive(t, checked)
}

// testWatchStop: after stop returns fn is never called again (even with
// appends racing the stop); stop is idempotent; other watchers go on.
func testWatchStop(t *testing.T, open Opener) {
	s, w := watcherOf(t, open)
	ctx := t.Context()
	var calls, late atomic.Int64
	var stopped atomic.Bool
	stop := w.WatchCommits(func(uint64) {
		if stopped.Load() {
			late.Add(1)
		}
		calls.Add(1)
	})
	other := make(chan uint64, 1024)
	stopOther := w.WatchCommits(func(last uint64) { other <- last })
	defer stopOther()

	mustAppend(t, s, "a", eventstore.NoStream, ev("x", "1"))
	waitSeq(t, other, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 50 {
			_, err := s.Append(ctx, "b", int64(i), []eventstore.Event{ev("x", "v")})
			assert.NoError(t, err)
		}
	}()
	stop()
	stopped.Store(true)
	stop()
	wg.Wait()
	res := mustAppend(t, s, "a", 1, ev("x", "2"))
	waitSeq(t, other, res.LastSeq)
	assert.Zero(t, late.Load(), "fn was called after stop returned")
	assert.Positive(t, calls.Load())
}
