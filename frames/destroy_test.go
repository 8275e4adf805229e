package frames_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/frames"
)

const headHash = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// busyWorld is a scope with a finished run, and a live root with a live
// child suspended (an unused token) and a tool call in doubt.
func busyWorld(t *testing.T) *world {
	w := newWorld(t)
	w.push("done", "", 100)
	w.must(&frames.StartToolCall{Header: w.hdr(), FrameID: "done", CallID: "left-open", Name: "fetch"})
	w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "done", Status: frames.StatusCompleted})
	w.push("root", "", 1000)
	w.push("kid", "root", 100)
	w.must(&frames.StartToolCall{Header: w.hdr(), FrameID: "kid", CallID: "in-doubt", Name: "search"})
	w.must(&frames.SuspendFrame{Header: w.hdr(), FrameID: "kid", Reason: frames.SuspendApproval, Mint: w.mint()})
	return w
}

func TestDestroyScope(t *testing.T) {
	cases := []struct {
		name      string
		world     func(t *testing.T) *world
		force     bool
		hash      string
		wantErr   error
		errHas    string
		cancelled []string
		calls     []string
		tokens    int64
	}{
		{name: "live work refused without force", world: busyWorld, hash: headHash, wantErr: frames.ErrLiveChildren,
			errHas: "2 live frame(s), 1 unused suspension token(s) and 1 tool call(s) in doubt"},
		{name: "force cancels the live frames", world: busyWorld, force: true, hash: headHash,
			cancelled: []string{"root", "kid"}, calls: []string{"in-doubt", "left-open"}, tokens: 1},
		{name: "nothing live needs no force", world: func(t *testing.T) *world {
			w := newWorld(t)
			w.push("a", "", 10)
			w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "a", Status: frames.StatusFailed})
			return w
		}, hash: headHash},
		{name: "an empty scope", world: newWorld},
		{name: "a hash for an empty scope", world: newWorld, hash: headHash, wantErr: frames.ErrInvalidArgument},
		{name: "a bad hash", world: busyWorld, force: true, hash: strings.ToUpper(headHash), wantErr: frames.ErrInvalidArgument},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := c.world(t)
			before := w.s.Version
			evs, err := w.do(&frames.DestroyScope{Header: w.hdr(), Force: c.force, Hash: c.hash, Why: "test"})
			if c.wantErr != nil {
				require.ErrorIs(t, err, c.wantErr)
				assert.Contains(t, err.Error(), c.errHas)
				assert.Equal(t, before, w.s.Version)
				return
			}
			require.NoError(t, err)
			require.Len(t, evs, 1, "one event: the first record of what the store keeps")
			d := evs[0].(*frames.ScopeDestroyed)
			assert.Equal(t, before, d.Through)
			assert.Equal(t, c.cancelled, d.Cancelled)
			var calls []string
			for _, a := range d.Abandoned {
				calls = append(calls, a.Call.ID)
				assert.True(t, a.Call.Abandoned)
			}
			assert.Equal(t, c.calls, calls)
			assert.Equal(t, c.tokens, d.Tokens)

			// The scope starts over empty; the version counts on.
			assert.Equal(t, before+1, w.s.Version)
			assert.Empty(t, w.s.Frames)
			assert.Empty(t, w.s.Tokens)
			assert.Empty(t, w.s.Abandoned)
			assert.Empty(t, w.s.Pending())
			assert.Zero(t, w.s.Finished)
			assert.Equal(t, before, w.s.RemovedThrough)
			for _, id := range []string{"done", "root", "kid"} {
				_, err := w.do(&frames.PopFrame{Header: w.hdr(), FrameID: id, Status: frames.StatusCompleted})
				assert.ErrorIs(t, err, frames.ErrFrameNotFound, id)
			}
			// Used again: an old frame id is free, the push works.
			w.push("root", "", 50)
			assert.Equal(t, before+2, w.s.Version)
			assert.True(t, reflect.DeepEqual(w.s.Clone(), w.replay().Clone()), "replay equals the live fold")
		})
	}
}

// A request id committed before a destroy is never applied again: refused
// as expired (its reply is gone), a reuse too; ids after it work as usual.
func TestDestroyKeepsRequestIDs(t *testing.T) {
	w := busyWorld(t)
	old := frames.Header{RequestID: "req-1", RequestHash: []byte{1}, Now: w.now + 100}
	rec, dup, err := w.s.CheckRequest(old.RequestID, old.RequestHash, old.Now)
	require.NoError(t, err)
	require.True(t, dup, "before the destroy: answered")
	assert.False(t, rec.Gone)

	w.must(&frames.DestroyScope{Header: w.hdr(), Force: true, Hash: headHash})
	for _, hash := range [][]byte{{1}, {9}} {
		_, dup, err = w.s.CheckRequest(old.RequestID, hash, old.Now)
		require.ErrorIs(t, err, frames.ErrRequestExpired)
		assert.Contains(t, err.Error(), "applied before the scope was destroyed; its reply is gone")
		assert.False(t, dup)
	}
	h := w.hdr()
	w.must(&frames.PushFrame{Header: h, FrameID: "new", Goal: "g"})
	_, dup, err = w.s.CheckRequest(h.RequestID, h.RequestHash, h.Now)
	require.NoError(t, err)
	assert.True(t, dup)
}

// Replay refuses a scope.destroyed that does not match the state it
// follows: the live frames it names, its force, its version.
func TestDestroyedReplayChecks(t *testing.T) {
	good := func() (*world, *frames.ScopeDestroyed) {
		w := busyWorld(t)
		evs, err := frames.Decide(w.cfg, w.s, &frames.DestroyScope{Header: w.hdr(), Force: true, Hash: headHash})
		require.NoError(t, err)
		return w, evs[0].(*frames.ScopeDestroyed)
	}
	cases := []struct {
		name string
		edit func(*frames.ScopeDestroyed)
	}{
		{"not forced", func(e *frames.ScopeDestroyed) { e.Forced = false }},
		{"a frame missing", func(e *frames.ScopeDestroyed) { e.Cancelled = e.Cancelled[:1] }},
		{"another frame", func(e *frames.ScopeDestroyed) { e.Cancelled[1] = "other" }},
		{"a call missing", func(e *frames.ScopeDestroyed) { e.Abandoned = nil }},
		{"tokens", func(e *frames.ScopeDestroyed) { e.Tokens = 0 }},
		{"through", func(e *frames.ScopeDestroyed) { e.Through-- }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, e := good()
			c.edit(e)
			before := w.s.Clone()
			require.ErrorIs(t, frames.Apply(w.s, e), frames.ErrInconsistentEvent)
			assert.True(t, reflect.DeepEqual(before, w.s.Clone()), "a refused event changes nothing")
		})
	}
}
