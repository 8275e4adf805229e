package actors_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/messages"
)

// batchStore holds the first Append after armed until released, counts
// the Appends and their events, and fails the next Append once told to.
type batchStore struct {
	eventstore.Store
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
	fail    atomic.Bool
	appends atomic.Int64
	events  atomic.Int64
}

var errInjected = errors.New("injected append failure")

func (g *batchStore) Append(ctx context.Context, stream string, expected int64, evs []eventstore.Event) (eventstore.AppendResult, error) {
	if g.armed.CompareAndSwap(true, false) {
		g.entered <- struct{}{}
		<-g.release
	} else if g.fail.CompareAndSwap(true, false) {
		return eventstore.AppendResult{}, errInjected
	}
	g.appends.Add(1)
	g.events.Add(int64(len(evs)))
	return g.Store.Append(ctx, stream, expected, evs)
}

func startBatchStore(t *testing.T) (*batchStore, *actors.Server, *actors.Client) {
	t.Helper()
	gs := &batchStore{Store: eventstore.NewMemory(), entered: make(chan struct{}), release: make(chan struct{})}
	sys := quietSystem()
	t.Cleanup(sys.Shutdown)
	srv, err := actors.Start(sys, gs, testConfig(newFakeClock()))
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	return gs, srv, srv.Client()
}

// holdScope starts a write of scope and holds its append; then n requests
// (from send, each on its own goroutine) wait behind it. It returns once
// all n are held by the shard, with a function that releases the append
// and waits for the n replies.
func holdScope(t *testing.T, gs *batchStore, srv *actors.Server, c *actors.Client, scope, frame string, n int, send func(i int) error) func() []error {
	t.Helper()
	gs.armed.Store(true)
	first := make(chan error, 1)
	go func() {
		_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut(scope), FrameID: frame, Priority: compaction.Low, Content: "first"})
		first <- err
	}()
	<-gs.entered // the first write's append is in flight: the scope is busy
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = send(i) })
	}
	// The busy scope counts once, each held request once.
	require.Eventually(t, func() bool { return actors.Pending(srv) == int64(n+1) }, 10*time.Second, time.Millisecond)
	return func() []error {
		close(gs.release)
		require.NoError(t, <-first)
		wg.Wait()
		return errs
	}
}

// The requests that wait for a busy scope are decided one after another
// and appended together: n writes, one append; each reply is what it
// would have been alone (versions in request order, reads between them
// see the writes before them), and the scope's state is the same as after
// the writes one by one.
func TestWaitingWritesShareAnAppend(t *testing.T) {
	gs, srv, c := startBatchStore(t)
	root := push(t, c, "s", "", 0)
	before := gs.appends.Load()

	const n = 32
	versions := make([]int64, n)
	release := holdScope(t, gs, srv, c, "s", root, n, func(i int) error {
		r, err := c.RecordUsage(ctx, &messages.RecordUsage{Header: mut("s"), FrameID: root, Cost: budget.Cost{Turns: 1, InputTokens: int64(i)}})
		if err == nil {
			versions[i] = r.Version
		}
		return err
	})
	for _, err := range release() {
		require.NoError(t, err)
	}
	assert.Equal(t, before+2, gs.appends.Load(), "the first write, then the %d that waited, in one append", n)
	seen := map[int64]bool{}
	for _, v := range versions {
		assert.False(t, seen[v], "version %d answered twice", v)
		seen[v] = true
		assert.Greater(t, v, int64(2))
	}
	st, err := c.GetStack(ctx, &messages.GetStack{Header: messages.Header{Scope: "s"}})
	require.NoError(t, err)
	assert.Equal(t, int64(2+n), st.Version)
	f, err := c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: "s"}, FrameID: root})
	require.NoError(t, err)
	assert.Equal(t, int64(n), f.Frame.Cost.Turns)
	assert.Equal(t, int64(n*(n-1)/2), f.Frame.Cost.InputTokens)
}

// A refusal decided between the writes of a batch sees the writes before
// it: the spend a batch reserved is not granted twice.
func TestBatchDecidesAfterTheWritesBeforeIt(t *testing.T) {
	gs, srv, c := startBatchStore(t)
	p := pushLimited(t, c, "s", "", 1000, "")
	const n = 16 // 16 × 100 asked, 1000 there
	granted := make([]int64, n)
	release := holdScope(t, gs, srv, c, "s", p, n, func(i int) error {
		r, err := c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut("s"), FrameID: p, Estimate: spend(100)})
		if err == nil {
			granted[i] = r.Amount
		}
		return err
	})
	refused := 0
	for _, err := range release() {
		if err != nil {
			require.ErrorIs(t, err, actors.ErrSpendUnavailable)
			refused++
		}
	}
	var sum int64
	for _, g := range granted {
		sum += g
	}
	assert.Equal(t, int64(1000), sum, "exactly the limit granted")
	assert.Equal(t, n-10, refused)
	assert.Equal(t, int64(1000), ledgerRow(t, c, "s", p).Outstanding)
}

// A batch whose append fails wrote nothing: every write in it fails with
// the store's error, the reads decided between them are answered again
// from the store's state (not from the writes that failed), and the
// scope goes on from what is durable.
func TestFailedBatchWritesNothing(t *testing.T) {
	gs, srv, c := startBatchStore(t)
	root := push(t, c, "s", "", 0)
	const n = 12
	reads := make([]int64, n)
	release := holdScope(t, gs, srv, c, "s", root, n, func(i int) error {
		if i%3 == 2 {
			r, err := c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: "s"}, FrameID: root})
			if err == nil {
				reads[i] = r.Frame.Cost.Turns
			}
			return err
		}
		_, err := c.RecordUsage(ctx, &messages.RecordUsage{Header: mut("s"), FrameID: root, Cost: budget.Cost{Turns: 1}})
		return err
	})
	gs.fail.Store(true) // the first write's append succeeds; the batch's fails
	errs := release()
	failed := 0
	for i, err := range errs {
		if i%3 == 2 {
			require.NoError(t, err, "a read is answered")
			assert.Zero(t, reads[i], "no read sees a write that failed")
			continue
		}
		// A write either failed with the batch or (decided after a read
		// that ended the batch) went in a later one.
		if err != nil {
			assert.Contains(t, err.Error(), errInjected.Error())
			failed++
		}
	}
	assert.Positive(t, failed)
	f, err := c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: "s"}, FrameID: root})
	require.NoError(t, err)
	assert.Equal(t, int64(n-n/3-failed), f.Frame.Cost.Turns, "what was acknowledged, and only that")
	st, err := c.GetStack(ctx, &messages.GetStack{Header: messages.Header{Scope: "s"}})
	require.NoError(t, err)
	assert.Equal(t, int64(2+n-n/3-failed), st.Version)
}
