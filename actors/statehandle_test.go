package actors_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/messages"
)

// countingState is a StateClient in front of a real server that counts
// the handle's requests, and can shrink, refuse or lose them.
type countingState struct {
	actors.StateClient
	changes, ranges, histories int
	ids                        []string // each ChangeState's request id, as sent
	limits                     []int    // each RangeState's page size, as asked
	// pageCap > 0: a RangeState asking for more is refused too_large, as a
	// remote page over the message cap is.
	pageCap int
	// pageSize > 0 serves pages of this size whatever the handle asks.
	pageSize int
	// beforeRange runs before the n-th RangeState (1-based).
	beforeRange func(n int)
	// loseReplies: this many ChangeStates are applied, but answer
	// ErrTimeout, as a reply lost on the way would.
	loseReplies int
}

func (c *countingState) ChangeState(ctx context.Context, req *messages.ChangeState) (*messages.ChangeStateReply, error) {
	c.changes++
	r, err := c.StateClient.ChangeState(ctx, req)
	c.ids = append(c.ids, req.RequestID)
	if err == nil && c.loseReplies > 0 {
		c.loseReplies--
		return nil, fmt.Errorf("%w: %w", actors.ErrTimeout, context.DeadlineExceeded)
	}
	return r, err
}

func (c *countingState) RangeState(ctx context.Context, req *messages.RangeState) (*messages.RangeStateReply, error) {
	c.ranges++
	c.limits = append(c.limits, req.Limit)
	if c.beforeRange != nil {
		c.beforeRange(c.ranges)
	}
	if c.pageCap > 0 && req.Limit > c.pageCap {
		return nil, messages.Errorf(messages.CodeTooLarge, "reply RangeStateReply is over the limit of a remote message")
	}
	if c.pageSize > 0 {
		r := *req
		r.Limit = c.pageSize
		req = &r
	}
	return c.StateClient.RangeState(ctx, req)
}

func (c *countingState) StateHistory(ctx context.Context, req *messages.StateHistory) (*messages.StateHistoryReply, error) {
	c.histories++
	return c.StateClient.StateHistory(ctx, req)
}

func changeStateOf(t *testing.T, e *env, scope string, ops ...messages.StateOp) int64 {
	t.Helper()
	r, err := e.c.ChangeState(ctx, &messages.ChangeState{Header: mut(scope), Ops: ops})
	require.NoError(t, err)
	return r.Version
}

// serverState reads keys straight from the server (nil: absent).
func serverState(t *testing.T, e *env, scope string, keys ...string) map[string]*messages.GetStateReply {
	t.Helper()
	out := map[string]*messages.GetStateReply{}
	for _, k := range keys {
		g, err := e.c.GetState(ctx, &messages.GetState{Header: messages.Header{Scope: scope}, Keys: []string{k}})
		require.NoError(t, err)
		if len(g.Entries) == 1 {
			out[k] = g
		}
	}
	return out
}

func items(ss ...string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

// The first read loads the level with one RangeState; every read after it
// answers from the view.
func TestStateHandleLoadsOnce(t *testing.T) {
	e := newEnv(t)
	s := "lazy"
	changeStateOf(t, e, s, messages.StateOp{Kind: "set", Key: "a", Value: []byte("1")},
		messages.StateOp{Kind: "push", Key: "l", Value: []byte("x")}, messages.StateOp{Kind: "set", Key: "n", Value: []byte("42")})
	cs := &countingState{StateClient: e.c}
	h := actors.NewStateHandle(cs, s, "")
	assert.False(t, h.Loaded())
	assert.Zero(t, cs.ranges, "a handle reads nothing until asked")

	v, ok, err := h.Get(ctx, "a")
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, []byte("1"), v)
	assert.True(t, h.Loaded())
	assert.Equal(t, 1, cs.ranges)

	has, err := h.Has(ctx, "missing")
	require.NoError(t, err)
	assert.False(t, has)
	keys, err := h.Keys(ctx, "")
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "l", "n"}, keys)
	l, ok, err := h.List(ctx, "l")
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, items("x"), l)
	n, ok, err := actors.GetJSON[int](ctx, h, "n")
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, 42, n)
	size, err := h.Size(ctx)
	require.NoError(t, err)
	assert.Equal(t, 3, size)
	es, err := h.Entries(ctx, "")
	require.NoError(t, err)
	require.Len(t, es, 3)
	assert.NotZero(t, es[0].Version)
	require.NoError(t, h.Load(ctx))
	assert.Equal(t, 1, cs.ranges, "one load for every read")

	_, _, err = h.Get(ctx, "l")
	assert.ErrorIs(t, err, actors.ErrInvalidArgument, "a list is read with List")
	_, _, err = h.List(ctx, "a")
	assert.ErrorIs(t, err, actors.ErrInvalidArgument, "a value is read with Get")
	v[0] = 'X'
	v, _, _ = h.Get(ctx, "a")
	assert.Equal(t, []byte("1"), v, "what Get returns is the caller's")

	require.NoError(t, h.Reload(ctx))
	assert.Equal(t, 2, cs.ranges, "Reload reads again")
}

// Changes without a read are one ChangeState and no RangeState; Dirty and
// Loaded follow the handle through its life.
func TestStateHandleWriteOnlyFlush(t *testing.T) {
	e := newEnv(t)
	s := "writer"
	changeStateOf(t, e, s, messages.StateOp{Kind: "set", Key: "gone", Value: []byte("old")})
	cs := &countingState{StateClient: e.c}
	h := actors.NewStateHandle(cs, s, "")
	assert.False(t, h.Dirty())

	h.Set("plan", []byte("v1"))
	for _, m := range []string{"a", "b", "c"} {
		h.Push("msgs", []byte(m), 2)
	}
	h.Delete("gone")
	assert.True(t, h.Dirty())
	assert.False(t, h.Loaded())
	assert.Equal(t, 5, h.Pending())

	require.NoError(t, h.Flush(ctx))
	assert.Equal(t, 1, cs.changes)
	assert.Zero(t, cs.ranges, "a write-only flush reads nothing")
	assert.False(t, h.Dirty())
	assert.False(t, h.Loaded())
	require.NoError(t, h.Flush(ctx))
	assert.Equal(t, 1, cs.changes, "nothing pending: nothing sent")

	got := serverState(t, e, s, "plan", "msgs", "gone")
	require.Contains(t, got, "plan")
	assert.Equal(t, []byte("v1"), got["plan"].Entries[0].Value)
	require.Contains(t, got, "msgs")
	assert.Equal(t, items("b", "c"), got["msgs"].Entries[0].Items, "pushed with keep 2")
	assert.NotContains(t, got, "gone")

	// Loaded: a change shows in the view at once, at version 0, and takes
	// the flush's version.
	require.NoError(t, h.Load(ctx))
	assert.True(t, h.Loaded())
	assert.False(t, h.Dirty())
	h.Push("msgs", []byte("d"), 2)
	h.Set("plan", []byte("v2"))
	assert.True(t, h.Dirty())
	l, _, err := h.List(ctx, "msgs")
	require.NoError(t, err)
	assert.Equal(t, items("c", "d"), l, "the view applies keep")
	es, err := h.Entries(ctx, "plan")
	require.NoError(t, err)
	require.Len(t, es, 1)
	assert.Equal(t, []byte("v2"), es[0].Value)
	assert.Zero(t, es[0].Version, "not flushed yet")
	require.NoError(t, h.Flush(ctx))
	assert.False(t, h.Dirty())
	es, err = h.Entries(ctx, "")
	require.NoError(t, err)
	for _, en := range es {
		assert.Equal(t, e.version(s), en.Version, "%s: the flush's version", en.Key)
	}
	assert.Equal(t, 1, cs.ranges)
	assert.Equal(t, items("c", "d"), serverState(t, e, s, "msgs")["msgs"].Entries[0].Items)

	// Clear, then Discard: the handle is as new.
	h.Clear()
	size, err := h.Size(ctx)
	require.NoError(t, err)
	assert.Zero(t, size)
	h.Discard()
	assert.False(t, h.Dirty())
	assert.False(t, h.Loaded())
	size, err = h.Size(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2, size, "the clear was discarded, never sent")
}

// A conditional Flush that meets another writer's change applies nothing
// and keeps its changes pending; so does one refused for its size.
func TestStateHandleFlushAllOrNothing(t *testing.T) {
	e := newEnv(t)
	s := "racers"
	changeStateOf(t, e, s, messages.StateOp{Kind: "set", Key: "count", Value: []byte("0")})
	h1, h2 := e.c.State(s), e.c.State(s)
	require.NoError(t, h1.Load(ctx))
	require.NoError(t, h2.Load(ctx))

	require.NoError(t, actors.SetJSON(h2, "count", 2))
	require.NoError(t, h2.Flush(ctx, actors.IfUnchanged()))
	after := e.version(s)

	require.NoError(t, actors.SetJSON(h1, "count", 1))
	require.NoError(t, actors.SetJSON(h1, "other", "x"))
	err := h1.Flush(ctx, actors.IfUnchanged())
	require.ErrorIs(t, err, actors.ErrStateConflict)
	assert.Contains(t, err.Error(), `"count"`)
	assert.Equal(t, after, e.version(s), "nothing written")
	got := serverState(t, e, s, "count", "other")
	assert.Equal(t, []byte("2"), got["count"].Entries[0].Value)
	assert.NotContains(t, got, "other", "all or nothing")
	assert.True(t, h1.Dirty())
	assert.Equal(t, 2, h1.Pending(), "the changes stay pending")
	n, _, err := actors.GetJSON[int](ctx, h1, "count")
	require.NoError(t, err)
	assert.Equal(t, 1, n, "the view still shows them")

	// A key absent when read and created since conflicts too.
	h3 := e.c.State(s)
	require.NoError(t, h3.Load(ctx))
	require.NoError(t, h2.Load(ctx))
	h2.Set("fresh", []byte("2"))
	require.NoError(t, h2.Flush(ctx))
	h3.Set("fresh", []byte("3"))
	require.ErrorIs(t, h3.Flush(ctx, actors.IfUnchanged()), actors.ErrStateConflict)

	// The usual loop: discard, read again, redo.
	h1.Discard()
	n, _, err = actors.GetJSON[int](ctx, h1, "count")
	require.NoError(t, err)
	require.NoError(t, actors.SetJSON(h1, "count", n+1))
	require.NoError(t, actors.SetJSON(h1, "count", n+2), "a key written twice is conditioned once")
	h1.ClearPrefix("tmp/")
	h1.Set("tmp/a", []byte("a"))
	require.NoError(t, h1.Flush(ctx, actors.IfUnchanged()))
	assert.Equal(t, []byte("4"), serverState(t, e, s, "count")["count"].Entries[0].Value)

	// Refused for its size: nothing of it applies.
	h1.Set("small", []byte("s"))
	h1.Set("big", make([]byte, 513<<10))
	err = h1.Flush(ctx)
	require.ErrorIs(t, err, actors.ErrStateTooLarge)
	assert.Contains(t, err.Error(), `"big"`)
	assert.NotContains(t, serverState(t, e, s, "small"), "small")
	assert.Equal(t, 2, h1.Pending())
	h1.Discard()

	// IfUnchanged needs something read.
	h4 := e.c.State(s)
	h4.Set("count", []byte("9"))
	require.ErrorIs(t, h4.Flush(ctx, actors.IfUnchanged()), actors.ErrInvalidArgument)
	assert.True(t, h4.Dirty())
	assert.False(t, h4.Loaded(), "refused before anything was read or sent")
}

type note struct {
	Text string `json:"text" msgpack:"text"`
	N    int    `json:"n" msgpack:"n"`
}

// Values and lists round-trip through JSON and msgpack, in the view before
// a flush and read back from the server after it.
func TestStateHandleTyped(t *testing.T) {
	e := newEnv(t)
	s := "typed"
	h := e.c.State(s)
	require.NoError(t, h.Load(ctx))
	require.NoError(t, actors.SetJSON(h, "j", note{"json", 1}))
	require.NoError(t, actors.SetMsgpack(h, "m", note{"msgpack", 2}))
	for i := range 3 {
		require.NoError(t, actors.PushJSON(h, "jl", note{"j", i}, 2))
		require.NoError(t, actors.PushMsgpack(h, "ml", note{"m", i}, 2))
	}
	require.NoError(t, actors.SetJSON(h, "n/1", note{"one", 1}))
	require.NoError(t, actors.SetJSON(h, "n/2", note{"two", 2}))
	require.Error(t, actors.SetJSON(h, "bad", func() {}), "an encoding error")
	assert.Equal(t, 10, h.Pending(), "the value that did not encode is not recorded")

	check := func(h *actors.StateHandle) {
		t.Helper()
		j, ok, err := actors.GetJSON[note](ctx, h, "j")
		require.NoError(t, err)
		assert.True(t, ok)
		assert.Equal(t, note{"json", 1}, j)
		m, ok, err := actors.GetMsgpack[note](ctx, h, "m")
		require.NoError(t, err)
		assert.True(t, ok)
		assert.Equal(t, note{"msgpack", 2}, m)
		jl, _, err := actors.GetJSON[[]note](ctx, h, "jl")
		require.NoError(t, err)
		assert.Equal(t, []note{{"j", 1}, {"j", 2}}, jl, "a list is an array of its last items")
		ml, _, err := actors.GetMsgpack[[]note](ctx, h, "ml")
		require.NoError(t, err)
		assert.Equal(t, []note{{"m", 1}, {"m", 2}}, ml)
		vs, err := actors.ValuesJSON[note](ctx, h, "n/")
		require.NoError(t, err)
		assert.Equal(t, []note{{"one", 1}, {"two", 2}}, vs)
		_, ok, err = actors.GetJSON[note](ctx, h, "absent")
		require.NoError(t, err)
		assert.False(t, ok)
		_, _, err = actors.GetJSON[int](ctx, h, "j")
		require.Error(t, err)
		assert.Contains(t, err.Error(), `state key "j"`)
		_, err = actors.ValuesMsgpack[note](ctx, h, "n/")
		require.Error(t, err, "JSON is not msgpack")
	}
	check(h)
	require.NoError(t, h.Flush(ctx))
	check(h)
	check(e.c.State(s))
	e.restart()
	check(e.c.State(s))
}

// A level larger than one page loads page by page, at one version; a page
// too large to travel is asked again smaller.
func TestStateHandlePages(t *testing.T) {
	e := newEnv(t)
	s := "big"
	w := e.c.State(s)
	var want []string
	for i := range 1500 {
		k := fmt.Sprintf("k%05d", i)
		want = append(want, k)
		w.Set(k, []byte{byte(i)})
		if w.Pending() == 1000 {
			require.NoError(t, w.Flush(ctx))
		}
	}
	require.NoError(t, w.Flush(ctx))

	cs := &countingState{StateClient: e.c}
	h := actors.NewStateHandle(cs, s, "")
	keys, err := h.Keys(ctx, "")
	require.NoError(t, err)
	assert.Equal(t, want, keys)
	assert.Equal(t, 2, cs.ranges, "1,500 keys: two pages of at most 1,000")
	v, _, err := h.Get(ctx, "k01499")
	require.NoError(t, err)
	assert.Equal(t, []byte{byte(1499 % 256)}, v)

	small := &countingState{StateClient: e.c, pageCap: 100}
	h = actors.NewStateHandle(small, s, "")
	size, err := h.Size(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1500, size)
	assert.Equal(t, []int{1000, 500, 250, 125, 62}, small.limits[:5], "halved until a page travels")
	assert.Equal(t, 4+(1500+61)/62, small.ranges)
	require.NoError(t, h.Reload(ctx))
	assert.Equal(t, 62, small.limits[len(small.limits)-1], "the smaller page is kept")
}

// A load that sees the scope move between its pages reads again; one that
// never sees it still fails rather than show a torn view.
func TestStateHandleLoadIsConsistent(t *testing.T) {
	e := newEnv(t)
	s := "moving"
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		changeStateOf(t, e, s, messages.StateOp{Kind: "set", Key: k, Value: []byte(k)})
	}
	cs := &countingState{StateClient: e.c, pageSize: 2}
	cs.beforeRange = func(n int) {
		if n == 2 { // between the first load's pages: "a" moves on, "z" appears
			changeStateOf(t, e, s, messages.StateOp{Kind: "set", Key: "a", Value: []byte("A")}, messages.StateOp{Kind: "set", Key: "z", Value: []byte("z")})
		}
	}
	h := actors.NewStateHandle(cs, s, "")
	keys, err := h.Keys(ctx, "")
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b", "c", "d", "e", "z"}, keys)
	v, _, err := h.Get(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, []byte("A"), v)
	assert.Equal(t, 2+3, cs.ranges, "the torn first read, then three pages")

	always := &countingState{StateClient: e.c, pageSize: 2}
	always.beforeRange = func(n int) {
		if n%3 == 2 {
			changeStateOf(t, e, s, messages.StateOp{Kind: "set", Key: "a", Value: []byte(fmt.Sprint(n))})
		}
	}
	h = actors.NewStateHandle(always, s, "")
	_, err = h.Size(ctx)
	require.ErrorIs(t, err, actors.ErrVersionConflict)
	assert.False(t, h.Loaded())
}

// A Flush whose reply was lost is sent again with its request id before
// anything else, so it applies once.
func TestStateHandleOutcomeUnknown(t *testing.T) {
	e := newEnv(t)
	s := "lossy"
	cs := &countingState{StateClient: e.c, loseReplies: 1}
	h := actors.NewStateHandle(cs, s, "")
	h.Push("log", []byte("a"), 3)
	err := h.Flush(ctx)
	require.ErrorIs(t, err, actors.ErrTimeout)
	assert.True(t, h.Dirty())
	h.Push("log", []byte("b"), 3)
	require.NoError(t, h.Flush(ctx))
	assert.False(t, h.Dirty())
	require.Len(t, cs.ids, 3, "the lost request again, then the change made since")
	assert.Equal(t, cs.ids[0], cs.ids[1])
	assert.NotEqual(t, cs.ids[0], cs.ids[2])
	assert.Equal(t, items("a", "b"), serverState(t, e, s, "log")["log"].Entries[0].Items, "applied once")

	// A read after a lost reply sends it again before loading, so the view
	// holds it once.
	cs.loseReplies = 1
	h.Push("log", []byte("c"), 3)
	require.ErrorIs(t, h.Flush(ctx), actors.ErrTimeout)
	l, _, err := h.List(ctx, "log")
	require.NoError(t, err)
	assert.Equal(t, items("a", "b", "c"), l)
	assert.False(t, h.Dirty())
	assert.Equal(t, cs.ids[3], cs.ids[4])

	// A refusal is no doubt: its changes stay pending, and the next Flush
	// is a new request.
	h.Touch("absent")
	require.ErrorIs(t, h.Flush(ctx), actors.ErrStateKeyNotFound)
	h.Discard()
	h.Set("k", []byte("v"))
	require.NoError(t, h.Flush(ctx))
	assert.NotEqual(t, cs.ids[len(cs.ids)-2], cs.ids[len(cs.ids)-1])
}

// A Flush replayed under its request id is answered from the log; the
// handle that replays it does not apply it to its view a second time.
func TestStateHandleReplayedFlush(t *testing.T) {
	e := newEnv(t)
	s := "replay"
	first := e.c.State(s)
	first.Push("log", []byte("step 1"), 0)
	require.NoError(t, first.Flush(ctx, actors.WithRequestID("step-1/state")))
	v := e.version(s)

	again := e.c.State(s) // a run after a crash: reads, then replays step 1
	require.NoError(t, again.Load(ctx))
	again.Push("log", []byte("step 1"), 0)
	require.NoError(t, again.Flush(ctx, actors.WithRequestID("step-1/state")))
	assert.Equal(t, v, e.version(s), "nothing written twice")
	assert.Equal(t, v, first.Version())
	assert.Equal(t, v, again.Version(), "a replay's version is the original's")
	l, _, err := again.List(ctx, "log")
	require.NoError(t, err)
	assert.Equal(t, items("step 1"), l, "nor shown twice")

	// The handle that flushed it, replaying it, does not show it twice either.
	first.Push("log", []byte("step 1"), 0)
	require.NoError(t, first.Flush(ctx, actors.WithRequestID("step-1/state")))
	require.NoError(t, first.Load(ctx))
	first.Push("log", []byte("step 2"), 0)
	require.NoError(t, first.Flush(ctx, actors.WithRequestID("step-2/state")))
	first.Push("log", []byte("step 2"), 0)
	require.NoError(t, first.Flush(ctx, actors.WithRequestID("step-2/state")))
	l, _, err = first.List(ctx, "log")
	require.NoError(t, err)
	assert.Equal(t, items("step 1", "step 2"), l)

	// The same id with other changes is refused, and stays pending.
	again.Push("log", []byte("step 2"), 0)
	require.ErrorIs(t, again.Flush(ctx, actors.WithRequestID("step-1/state")), actors.ErrRequestIDReused)
	assert.True(t, again.Dirty())
}

// History walks a key's changes newest first, across pages.
func TestStateHandleHistory(t *testing.T) {
	e := newEnv(t)
	s := "hist"
	cs := &countingState{StateClient: e.c}
	h := actors.NewStateHandle(cs, s, "")
	for i := range 130 {
		h.Set("plan", []byte(fmt.Sprint(i)))
		require.NoError(t, h.Flush(ctx))
	}
	h.Delete("plan")
	require.NoError(t, h.Flush(ctx))

	var got []string
	for c, err := range h.History(ctx, "plan") {
		require.NoError(t, err)
		got = append(got, c.Kind+":"+string(c.Entry.Value))
	}
	require.Len(t, got, 131)
	assert.Equal(t, []string{"delete:", "set:129", "set:128"}, got[:3])
	assert.Equal(t, "set:0", got[130])
	assert.Equal(t, 2, cs.histories, "pages of 100")

	for c, err := range h.History(ctx, "plan") {
		require.NoError(t, err)
		assert.Equal(t, "delete", c.Kind)
		break
	}
	assert.Equal(t, 3, cs.histories, "stopping early reads no further page")

	for _, err := range h.History(ctx, "bad\x00key") {
		assert.ErrorIs(t, err, actors.ErrInvalidArgument)
	}
}

// A frame's state is its own level, and ends with the frame.
func TestStateHandleFrameLevel(t *testing.T) {
	e := newEnv(t)
	s := "framed"
	f := push(t, e.c, s, "", 1000)
	fh := e.c.FrameState(s, f)
	assert.Equal(t, f, fh.FrameID())
	require.NoError(t, actors.SetJSON(fh, "draft", "first lines"))
	require.NoError(t, fh.Flush(ctx))

	sh := e.c.State(s)
	has, err := sh.Has(ctx, "draft")
	require.NoError(t, err)
	assert.False(t, has, "the scope's level does not hold the frame's keys")
	d, ok, err := actors.GetJSON[string](ctx, e.c.FrameState(s, f), "draft")
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, "first lines", d)

	pop(t, e.c, s, f)
	require.ErrorIs(t, fh.Reload(ctx), actors.ErrFrameNotLive)
	fh.Set("draft", []byte("late"))
	require.ErrorIs(t, fh.Flush(ctx), actors.ErrFrameNotLive)
}

// TTL options: fixed, sliding (pushed back by Touch), removed; a bad one
// is refused by Flush, which sends nothing.
func TestStateHandleTTL(t *testing.T) {
	e := newEnv(t)
	s := "ttl"
	cs := &countingState{StateClient: e.c}
	h := actors.NewStateHandle(cs, s, "")
	h.Set("fixed", []byte("f"), actors.WithTTL(time.Second))
	h.Set("sliding", []byte("s"), actors.WithSlidingTTL(time.Second))
	h.Set("kept", []byte("k"), actors.WithTTL(time.Second))
	h.Touch("kept", actors.WithoutTTL())
	require.NoError(t, h.Flush(ctx))

	e.clock.Advance(600 * time.Millisecond)
	h.Touch("sliding")
	h.Touch("fixed") // a fixed TTL is kept, not pushed back
	require.NoError(t, h.Flush(ctx))
	e.clock.Advance(600 * time.Millisecond)
	keys, err := e.c.State(s).Keys(ctx, "")
	require.NoError(t, err)
	assert.Equal(t, []string{"kept", "sliding"}, keys)
	e.clock.Advance(time.Second)
	keys, err = e.c.State(s).Keys(ctx, "")
	require.NoError(t, err)
	assert.Equal(t, []string{"kept"}, keys)

	n := cs.changes
	h.Set("k", []byte("v"), actors.WithTTL(-time.Second))
	err = h.Flush(ctx)
	require.ErrorIs(t, err, actors.ErrInvalidArgument)
	assert.True(t, strings.Contains(err.Error(), "TTL"), err)
	assert.Equal(t, n, cs.changes, "nothing sent")
	h.Discard()
	require.NoError(t, h.Flush(ctx), "Discard drops the bad option with its change")
}

// The README's scope state lines, runnable.
func ExampleStateHandle() {
	dir, _ := os.MkdirTemp("", "stateindex-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	cfg := actors.DefaultConfig()
	cfg.TokenKey = []byte("a secret key of at least 32 bytes!")
	cfg.Logger = quietSystem().Logger()
	store, _ := eventstore.Open(filepath.Join(dir, "stateindex.db"), nil)
	defer store.Close()
	srv, _ := actors.Start(actor.NewActorSystem(), store, cfg)
	defer srv.Stop()
	si := srv.Client()
	type Message struct{ Role, Text string }

	st := si.State("agent-1")                                       // reads nothing yet
	_ = actors.SetJSON(st, "plan", []string{"research", "write"})   // recorded, not sent
	_ = actors.PushJSON(st, "messages", Message{"user", "hi"}, 50)  // a list that keeps its last 50
	err := st.Flush(ctx)                                            // one ChangeState, all or none, no read
	msgs, ok, err := actors.GetJSON[[]Message](ctx, st, "messages") // the first read loads the state

	fmt.Println(msgs, ok, err, st.Loaded(), st.Dirty())
	// Output:
	// [{user hi}] true <nil> true false
}
