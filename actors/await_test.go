package actors_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

type awaited struct {
	r   *messages.AwaitFrameReply
	err error
}

// awaitAsync sends an await (Wait from a 20 s context) and returns where
// its answer arrives.
func awaitAsync(c *actors.Client, scope, frame string) <-chan awaited {
	ch := make(chan awaited, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		r, err := c.AwaitFrame(ctx, &messages.AwaitFrame{Header: messages.Header{Scope: scope}, FrameID: frame})
		ch <- awaited{r, err}
	}()
	return ch
}

// parked waits until the server holds n parked awaits (a counter the
// shards publish after each message: polled, not slept on).
func parked(t *testing.T, srv *actors.Server, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return srv.ParkedAwaits() == n }, 10*time.Second, time.Millisecond,
		"parked awaits: %d, want %d", srv.ParkedAwaits(), n)
}

func answer(t *testing.T, ch <-chan awaited) awaited {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(15 * time.Second):
		require.FailNow(t, "the await was not answered")
	}
	return awaited{}
}

func pushRoot(t *testing.T, c *actors.Client, scope, goal string) string {
	t.Helper()
	r, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(scope), Goal: goal, Budget: budget.TokenBudget{Total: 10_000}})
	require.NoError(t, err)
	return r.FrameID
}

func TestAwaitFrameOfAnEndedFrameAnswersAtOnce(t *testing.T) {
	e := newEnv(t)
	id := pushRoot(t, e.c, "done", "write the report")
	_, err := e.c.AddResult(ctx, &messages.AddResult{Header: mut("done"), FrameID: id, Kind: "file", Ref: "report.md", Summary: "the report"})
	require.NoError(t, err)
	_, err = e.c.RecordUsage(ctx, &messages.RecordUsage{Header: mut("done"), FrameID: id, Cost: budget.Cost{InputTokens: 700, OutputTokens: 50, Turns: 2, SpendMicros: 30}})
	require.NoError(t, err)
	_, err = e.c.PopFrame(ctx, &messages.PopFrame{Header: mut("done"), FrameID: id, Status: frames.StatusCompleted})
	require.NoError(t, err)

	start := time.Now()
	r, err := e.c.AwaitFrame(ctx, &messages.AwaitFrame{Header: messages.Header{Scope: "done"}, FrameID: id, Wait: time.Minute})
	require.NoError(t, err)
	assert.Less(t, time.Since(start), 5*time.Second, "an ended frame is not waited on")
	assert.Equal(t, id, r.FrameID)
	assert.Equal(t, id, r.Head)
	assert.True(t, r.Terminal)
	assert.False(t, r.TimedOut)
	assert.Equal(t, frames.StatusCompleted, r.Status)
	require.Len(t, r.Results, 1)
	assert.Equal(t, "report.md", r.Results[0].Ref)
	assert.Equal(t, int64(700), r.Cost.InputTokens)
	assert.Equal(t, int64(30), r.Cost.SpendMicros)
	assert.Equal(t, e.clock.Now().UnixNano(), r.FinishedAt)
	assert.Contains(t, r.Summary, "write the report")
	assert.Zero(t, e.srv.ParkedAwaits())
}

// TestAwaitFrameWakesWhenTheFrameEnds: a parked await is answered by the
// write that ends its frame, however it ends.
func TestAwaitFrameWakesWhenTheFrameEnds(t *testing.T) {
	for _, tc := range []struct {
		name    string
		status  frames.Status
		cascade bool // the frame is a child, cancelled by its parent's pop
	}{
		{"completed", frames.StatusCompleted, false},
		{"failed", frames.StatusFailed, false},
		{"cancelled", frames.StatusCancelled, false},
		{"cancelled by a cascade", frames.StatusCancelled, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			const scope = "wake"
			root := pushRoot(t, e.c, scope, "run")
			id := root
			if tc.cascade {
				child, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: mut(scope), ParentID: root, Goal: "sub", Budget: budget.TokenBudget{Total: 100}})
				require.NoError(t, err)
				id = child.FrameID
			}
			ch := awaitAsync(e.c, scope, id)
			parked(t, e.srv, 1)
			// The scope goes on serving while the wait is parked.
			_, err := e.c.AddResult(ctx, &messages.AddResult{Header: mut(scope), FrameID: id, Kind: "k", Ref: "r"})
			require.NoError(t, err)
			select {
			case a := <-ch:
				require.FailNow(t, "answered before its frame ended", "%+v", a)
			default:
			}
			_, err = e.c.PopFrame(ctx, &messages.PopFrame{Header: mut(scope), FrameID: root, Status: tc.status, Cascade: tc.cascade})
			require.NoError(t, err)
			a := answer(t, ch)
			require.NoError(t, a.err)
			assert.True(t, a.r.Terminal)
			assert.False(t, a.r.TimedOut)
			assert.Equal(t, tc.status, a.r.Status)
			assert.Equal(t, id, a.r.Head)
			require.Len(t, a.r.Results, 1)
			assert.Equal(t, "r", a.r.Results[0].Ref)
			parked(t, e.srv, 0)
		})
	}
}

// TestAwaitFrameFollowsAContinuationChain: waiting on a link answers with
// the chain's last link once it ends, not when the awaited link is
// continued.
func TestAwaitFrameFollowsAContinuationChain(t *testing.T) {
	e := newEnv(t)
	const scope = "chain"
	h := messages.Header{Scope: scope}
	_, task := conversation(t, e, scope, 2_000, 6)
	ch := awaitAsync(e.c, scope, task)
	parked(t, e.srv, 1)

	c1, err := e.c.ContinueFrame(ctx, &messages.ContinueFrame{Header: h, FrameID: task, ResumeCeiling: 200})
	require.NoError(t, err)
	for i := 0; i < 12; i++ { // enough context for the next continuation to free
		_, err := e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, FrameID: c1.FrameID, Role: "user", Priority: compaction.Medium, Content: strings.Repeat("y", 160)})
		require.NoError(t, err)
	}
	c2, err := e.c.ContinueFrame(ctx, &messages.ContinueFrame{Header: h, FrameID: c1.FrameID, ResumeCeiling: 200})
	require.NoError(t, err)
	// Still parked, now on the head c2 (the continuations ended links, not the chain).
	_, err = e.c.GetFrame(ctx, &messages.GetFrame{Header: h, FrameID: c2.FrameID})
	require.NoError(t, err)
	select {
	case a := <-ch:
		require.FailNow(t, "answered when its link was continued", "%+v", a)
	default:
	}
	assert.Equal(t, 1, e.srv.ParkedAwaits())

	_, err = e.c.AddResult(ctx, &messages.AddResult{Header: h, FrameID: c2.FrameID, Kind: "answer", Ref: "42"})
	require.NoError(t, err)
	_, err = e.c.PopFrame(ctx, &messages.PopFrame{Header: h, FrameID: c2.FrameID, Status: frames.StatusCompleted})
	require.NoError(t, err)
	a := answer(t, ch)
	require.NoError(t, a.err)
	assert.Equal(t, task, a.r.FrameID)
	assert.Equal(t, c2.FrameID, a.r.Head)
	assert.True(t, a.r.Terminal)
	assert.Equal(t, frames.StatusCompleted, a.r.Status)
	require.Len(t, a.r.Results, 1)
	assert.Equal(t, "42", a.r.Results[0].Ref)

	// Any link, awaited after the chain ended, answers at once with the same.
	for _, link := range []string{task, c1.FrameID, c2.FrameID} {
		r, err := e.c.AwaitFrame(ctx, &messages.AwaitFrame{Header: h, FrameID: link})
		require.NoError(t, err, link)
		assert.Equal(t, c2.FrameID, r.Head, link)
		assert.Equal(t, frames.StatusCompleted, r.Status, link)
		require.Len(t, r.Results, 1, link)
		assert.Equal(t, "42", r.Results[0].Ref, link)
	}
}

func TestAwaitFrameTimesOut(t *testing.T) {
	e := newEnv(t)
	id := pushRoot(t, e.c, "slow", "never ends")
	h := messages.Header{Scope: "slow"}

	// Wait 0 through the wire protocol (Do): the state now.
	raw, err := e.c.Do(ctx, &messages.AwaitFrame{Header: h, FrameID: id})
	require.NoError(t, err)
	r := raw.(*messages.AwaitFrameReply)
	assert.True(t, r.TimedOut)
	assert.False(t, r.Terminal)
	assert.Equal(t, frames.StatusActive, r.Status)

	// An explicit Wait.
	start := time.Now()
	r, err = e.c.AwaitFrame(ctx, &messages.AwaitFrame{Header: h, FrameID: id, Wait: 30 * time.Millisecond})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), 30*time.Millisecond)
	assert.True(t, r.TimedOut)
	assert.Equal(t, id, r.Head)
	assert.Equal(t, frames.StatusActive, r.Status)

	// Wait 0 from the Client: until shortly before the context's deadline,
	// answered (not ErrTimeout).
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	r, err = e.c.AwaitFrame(cctx, &messages.AwaitFrame{Header: h, FrameID: id})
	require.NoError(t, err)
	assert.True(t, r.TimedOut)
	assert.NoError(t, cctx.Err(), "the reply came before the deadline")
	parked(t, e.srv, 0)

	// A huge Wait sent raw is cut to frames.MaxAwaitWait: parked (not
	// overflowed into a deadline in the past), answered by the frame's end.
	ch := make(chan awaited, 1)
	go func() {
		raw, err := e.c.Do(ctx, &messages.AwaitFrame{Header: h, FrameID: id, Wait: 1<<63 - 1})
		r, _ := raw.(*messages.AwaitFrameReply)
		ch <- awaited{r, err}
	}()
	parked(t, e.srv, 1)
	_, err = e.c.PopFrame(ctx, &messages.PopFrame{Header: mut("slow"), FrameID: id, Status: frames.StatusCompleted})
	require.NoError(t, err)
	a := answer(t, ch)
	require.NoError(t, a.err)
	assert.True(t, a.r.Terminal)
}

// TestAwaitFrameManyWaiters: many waits on one frame are answered by its
// end; waits of another scope of the same shard stay parked.
func TestAwaitFrameManyWaiters(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) { c.Shards = 1 })
	a := pushRoot(t, e.c, "scope-a", "a")
	b := pushRoot(t, e.c, "scope-b", "b")
	const n = 200
	var as, bs []<-chan awaited
	for i := 0; i < n; i++ {
		as = append(as, awaitAsync(e.c, "scope-a", a))
		bs = append(bs, awaitAsync(e.c, "scope-b", b))
	}
	parked(t, e.srv, 2*n)
	_, err := e.c.PopFrame(ctx, &messages.PopFrame{Header: mut("scope-a"), FrameID: a, Status: frames.StatusCompleted})
	require.NoError(t, err)
	for _, ch := range as {
		got := answer(t, ch)
		require.NoError(t, got.err)
		assert.Equal(t, frames.StatusCompleted, got.r.Status)
	}
	parked(t, e.srv, n)
	for _, ch := range bs {
		select {
		case got := <-ch:
			require.FailNow(t, "a wait of another scope was answered", "%+v", got)
		default:
		}
	}
	_, err = e.c.PopFrame(ctx, &messages.PopFrame{Header: mut("scope-b"), FrameID: b, Status: frames.StatusFailed})
	require.NoError(t, err)
	for _, ch := range bs {
		got := answer(t, ch)
		require.NoError(t, got.err)
		assert.Equal(t, frames.StatusFailed, got.r.Status)
	}
	parked(t, e.srv, 0)
}

// TestAwaitFrameSurvivesEviction: a scope evicted from the cache keeps its
// waits.
func TestAwaitFrameSurvivesEviction(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) { c.Shards, c.CacheScopes = 1, 1 })
	id := pushRoot(t, e.c, "evicted", "x")
	ch := awaitAsync(e.c, "evicted", id)
	parked(t, e.srv, 1)
	for i := 0; i < 3; i++ {
		pushRoot(t, e.c, fmt.Sprintf("other-%d", i), "y") // a cache of one scope: "evicted" leaves it
	}
	_, err := e.c.PopFrame(ctx, &messages.PopFrame{Header: mut("evicted"), FrameID: id, Status: frames.StatusCompleted})
	require.NoError(t, err)
	a := answer(t, ch)
	require.NoError(t, a.err)
	assert.Equal(t, frames.StatusCompleted, a.r.Status)
}

// TestAwaitFrameOfADestroyedScope: not found, as an await sent afterwards.
func TestAwaitFrameOfADestroyedScope(t *testing.T) {
	e := newEnv(t)
	id := pushRoot(t, e.c, "doomed", "x")
	ch := awaitAsync(e.c, "doomed", id)
	parked(t, e.srv, 1)
	_, err := e.c.DestroyScope(ctx, &messages.DestroyScope{Header: mut("doomed"), Force: true})
	require.NoError(t, err)
	a := answer(t, ch)
	assert.ErrorIs(t, a.err, actors.ErrFrameNotFound)
	_, err = e.c.AwaitFrame(ctx, &messages.AwaitFrame{Header: messages.Header{Scope: "doomed"}, FrameID: id})
	assert.ErrorIs(t, err, actors.ErrFrameNotFound)
	parked(t, e.srv, 0)
}

// TestAwaitFrameBounded: parked waits beyond MaxWaiters are refused
// overloaded; writes go on.
func TestAwaitFrameBounded(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) { c.Shards, c.MaxWaiters, c.MaxPending = 1, 2, 4 })
	id := pushRoot(t, e.c, "busy", "x")
	ch1, ch2 := awaitAsync(e.c, "busy", id), awaitAsync(e.c, "busy", id)
	parked(t, e.srv, 2)
	_, err := e.c.AwaitFrame(ctx, &messages.AwaitFrame{Header: messages.Header{Scope: "busy"}, FrameID: id})
	assert.ErrorIs(t, err, actors.ErrOverloaded)
	for i := 0; i < 10; i++ { // parked waits are not pending work: MaxPending 4 admits these
		_, err := e.c.AddResult(ctx, &messages.AddResult{Header: mut("busy"), FrameID: id, Kind: "k", Ref: fmt.Sprint(i)})
		require.NoError(t, err)
	}
	_, err = e.c.PopFrame(ctx, &messages.PopFrame{Header: mut("busy"), FrameID: id, Status: frames.StatusCompleted})
	require.NoError(t, err)
	for _, ch := range []<-chan awaited{ch1, ch2} {
		a := answer(t, ch)
		require.NoError(t, a.err)
		assert.Len(t, a.r.Results, 10)
	}
}

// TestAwaitFrameAcrossARestart: a restart loses no answer that a retried
// await would not give. The stopping server answers its parked waits
// unavailable; the same await sent to the restarted server (same bolt
// file) waits again and gets the end; after another restart an ended
// frame answers at once, from the log.
func TestAwaitFrameAcrossARestart(t *testing.T) {
	e := newEnv(t)
	id := pushRoot(t, e.c, "restart", "survive")
	_, err := e.c.AddResult(ctx, &messages.AddResult{Header: mut("restart"), FrameID: id, Kind: "k", Ref: "kept"})
	require.NoError(t, err)
	ch := awaitAsync(e.c, "restart", id)
	parked(t, e.srv, 1)
	e.stop()
	a := answer(t, ch)
	require.ErrorIs(t, a.err, actors.ErrUnavailable)

	e.start()
	ch = awaitAsync(e.c, "restart", id) // the retry
	parked(t, e.srv, 1)
	_, err = e.c.PopFrame(ctx, &messages.PopFrame{Header: mut("restart"), FrameID: id, Status: frames.StatusCompleted})
	require.NoError(t, err)
	a = answer(t, ch)
	require.NoError(t, a.err)
	assert.Equal(t, frames.StatusCompleted, a.r.Status)
	require.Len(t, a.r.Results, 1)

	e.restart()
	r, err := e.c.AwaitFrame(ctx, &messages.AwaitFrame{Header: messages.Header{Scope: "restart"}, FrameID: id, Wait: time.Minute})
	require.NoError(t, err)
	assert.True(t, r.Terminal)
	assert.Equal(t, a.r.Results, r.Results, "the answer from the log is the answer the wake gave")
	assert.Equal(t, a.r.FinishedAt, r.FinishedAt)
	assert.Zero(t, e.srv.ParkedAwaits())
}

// TestRemoteAwaitFrame: over remoting, a wait times out, is woken by its
// frame's end, and an unknown frame is not found.
func TestRemoteAwaitFrame(t *testing.T) {
	p := newRemotePair(t)
	c := p.c
	h := messages.Header{Scope: "remote-await"}
	id := pushRoot(t, c, "remote-await", "far away")
	r, err := c.AwaitFrame(ctx, &messages.AwaitFrame{Header: h, FrameID: id, Wait: 30 * time.Millisecond})
	require.NoError(t, err)
	assert.True(t, r.TimedOut)
	assert.Equal(t, frames.StatusActive, r.Status)

	ch := awaitAsync(c, "remote-await", id)
	_, err = c.AddResult(ctx, &messages.AddResult{Header: mut("remote-await"), FrameID: id, Kind: "k", Ref: "over the wire"})
	require.NoError(t, err)
	_, err = c.PopFrame(ctx, &messages.PopFrame{Header: mut("remote-await"), FrameID: id, Status: frames.StatusCompleted})
	require.NoError(t, err)
	a := answer(t, ch)
	require.NoError(t, a.err)
	assert.True(t, a.r.Terminal)
	require.Len(t, a.r.Results, 1)
	assert.Equal(t, "over the wire", a.r.Results[0].Ref)

	_, err = c.AwaitFrame(ctx, &messages.AwaitFrame{Header: h, FrameID: "nope"})
	assert.ErrorIs(t, err, actors.ErrFrameNotFound)
}

// TestAwaitFrameWakesUnderATightCache: with a cache over its byte bound
// after every write (scopes are evicted as soon as they may be), the wait
// is answered when its frame ends: the shard wakes waits from the write's
// own state, not from the cache.
func TestAwaitFrameWakesUnderATightCache(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) { c.Shards, c.CacheBytes = 1, 1 })
	id := pushRoot(t, e.c, "tight", "x")
	ch := awaitAsync(e.c, "tight", id)
	parked(t, e.srv, 1)
	_, err := e.c.PopFrame(ctx, &messages.PopFrame{Header: mut("tight"), FrameID: id, Status: frames.StatusFailed})
	require.NoError(t, err)
	a := answer(t, ch)
	require.NoError(t, a.err)
	assert.True(t, a.r.Terminal)
	assert.Equal(t, frames.StatusFailed, a.r.Status)
	parked(t, e.srv, 0)
}
