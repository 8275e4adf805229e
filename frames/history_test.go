package frames_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/frames"
)

// keepAll folds the world's log keeping finished frames: the whole history.
func (w *world) keepAll() *frames.State {
	s := frames.NewState(w.s.Scope, w.s.Horizon)
	s.KeepFinished = true
	for _, e := range w.log {
		require.NoError(w.t, frames.Apply(s, e))
		require.NoError(w.t, frames.CheckInvariants(s))
	}
	return s
}

// own returns the events whose metadata names frame, with their versions.
func (w *world) own(frame string) []frames.Versioned {
	var out []frames.Versioned
	for i, e := range w.log {
		if e.EventMeta().Frame == frame {
			out = append(out, frames.Versioned{Version: int64(i + 1), Event: e})
		}
	}
	return out
}

// A finished frame leaves the projection; its own events and the record its
// pop carries rebuild it exactly as a fold that keeps finished frames has it.
func TestFinishedFramesLeaveTheProjection(t *testing.T) {
	w := newWorld(t)
	w.push("r", "", 10_000)
	w.push("c", "r", 4_000)
	w.must(&frames.UpdateFrame{Header: w.hdr(), FrameID: "c", Goal: ptr("a new goal"), SetInputs: true, Inputs: []byte{0x91, 0x01}})
	for _, id := range []string{"h1", "h2", "h3"} {
		w.must(&frames.AddContextHandle{Header: w.hdr(), FrameID: "c", Handle: frames.ContextHandle{ID: id, Kind: "text", Priority: compaction.Low, Content: "content " + id, Tokens: 5}})
	}
	w.must(&frames.StartToolCall{Header: w.hdr(), FrameID: "c", CallID: "t1", Name: "search"})
	w.must(&frames.FinishToolCall{Header: w.hdr(), FrameID: "c", CallID: "t1",
		CallHandle:   frames.ContextHandle{ID: "tc", Priority: compaction.Medium, Content: "q", Tokens: 1},
		ResultHandle: frames.ContextHandle{ID: "tr", Priority: compaction.Medium, Content: "a", Tokens: 2}})
	w.must(&frames.StartToolCall{Header: w.hdr(), FrameID: "c", CallID: "t2", Name: "write"})
	w.must(&frames.CompactContext{Header: w.hdr(), FrameID: "c", Strategy: "x", Removed: []string{"h1", "h2"},
		Summary: &frames.ContextHandle{ID: "s1", Kind: "summary", Priority: compaction.Low, Content: "h1+h2", Tokens: 3, Covers: []string{"h1", "h2"}}})
	w.must(&frames.AddResult{Header: w.hdr(), FrameID: "c", Result: frames.ResultRef{ID: "res", Kind: "doc", Ref: "s3://x"}})
	w.push("g", "c", 1_000)
	w.must(&frames.RecordUsage{Header: w.hdr(), FrameID: "g", Cost: budget.Cost{InputTokens: 300, Turns: 1, SpendMicros: 9}})
	w.must(&frames.RecordUsage{Header: w.hdr(), FrameID: "c", Cost: budget.Cost{OutputTokens: 100}})
	w.must(&frames.SuspendFrame{Header: w.hdr(), FrameID: "c", Reason: frames.SuspendApproval, Mint: w.mint()})
	w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "c", Status: frames.StatusCompleted, Cascade: true})

	require.Nil(t, w.s.Frame("c"))
	require.Nil(t, w.s.Frame("g"))
	assert.Equal(t, []string{"r"}, w.s.Order)
	assert.Empty(t, w.s.Tokens, "the token of a frame that finished suspended goes with it")
	assert.Equal(t, int64(1), w.s.Frame("r").Kids, "r had one child")
	assert.Equal(t, int64(2), w.s.Frame("r").Cost.Spawns, "and two descendants")
	assert.Equal(t, int64(2), w.s.Finished)

	all := w.keepAll()
	for _, id := range []string{"c", "g"} {
		got, ok, err := frames.RebuildFinished(w.own(id))
		require.NoError(t, err, id)
		require.True(t, ok, id)
		want := all.Frame(id).Clone()
		want.Children = nil
		assert.Equal(t, want, got.Clone(), id)
	}
	c, _, _ := frames.RebuildFinished(w.own("c"))
	assert.Equal(t, "a new goal", c.Goal)
	assert.Equal(t, []byte{0x91, 0x01}, c.Inputs)
	assert.Len(t, c.Handles, 4) // h3, tc, tr, s1
	assert.True(t, c.ToolCall("t2").Abandoned)
	assert.Equal(t, int64(300), c.Cost.InputTokens, "g's usage rolled up")
	assert.Equal(t, int64(400), c.Budget.Used)

	// Reads and rules see finished frames through the history.
	_, err := frames.LookupFrame(w.cfg, w.s, "c")
	var fe *frames.FinishedError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, frames.StatusCompleted, fe.Status)
	assert.ErrorIs(t, err, frames.ErrFrameNotLive)
	_, err = frames.LookupFrame(w.cfg, w.s, "nope")
	assert.ErrorIs(t, err, frames.ErrFrameNotFound)
	_, err = w.do(&frames.PushFrame{Header: w.hdr(), FrameID: "c", Goal: "again"})
	assert.ErrorIs(t, err, frames.ErrDuplicateID, "a finished frame's id is not reused")
	_, err = w.do(&frames.PushFrame{Header: w.hdr(), FrameID: "x", ParentID: "c", Goal: "under a finished parent"})
	assert.ErrorIs(t, err, frames.ErrParentNotLive)
	_, err = w.do(&frames.AddContextHandle{Header: w.hdr(), FrameID: "g", Handle: frames.ContextHandle{ID: "late", Priority: compaction.Low}})
	assert.ErrorIs(t, err, frames.ErrFrameNotLive)

	// An old pop without a record cannot be rebuilt from the frame alone.
	own := w.own("g")
	old := *own[len(own)-1].Event.(*frames.FramePopped)
	old.Final = nil
	own[len(own)-1].Event = &old
	_, ok, err := frames.RebuildFinished(own)
	require.NoError(t, err)
	assert.False(t, ok)

	// A record that disagrees with the fold is refused on replay.
	s := frames.NewState(w.s.Scope, 0)
	var forged bool
	var applyErr error
	for _, e := range w.log {
		if p, ok := e.(*frames.FramePopped); ok && p.Frame == "c" {
			cp := *p
			fin := *p.Final
			fin.Cost.SpendMicros++
			cp.Final, forged = &fin, true
			e = &cp
		}
		if applyErr = frames.Apply(s, e); applyErr != nil {
			break
		}
	}
	require.True(t, forged)
	assert.ErrorIs(t, applyErr, frames.ErrInconsistentEvent)
}

func ptr[T any](v T) *T { return &v }
