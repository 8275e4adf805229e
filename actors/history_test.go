package actors_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// runChild pushes a child of root with two handles, a tool call and usage,
// and pops it; it returns the child's id.
func runChild(t *testing.T, c *actors.Client, scope, root string, i int) string {
	t.Helper()
	h := messages.Header{Scope: scope}
	p, err := c.PushFrame(ctx, &messages.PushFrame{Header: h, ParentID: root, Goal: fmt.Sprintf("subtask %d", i), Budget: budget.TokenBudget{Total: 1000}})
	require.NoError(t, err)
	for j := range 2 {
		_, err = c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, FrameID: p.FrameID, Priority: compaction.Medium,
			Content: fmt.Sprintf("fact %d of %d: %s", j, i, strings.Repeat("x", 300))})
		require.NoError(t, err)
	}
	_, err = c.StartToolCall(ctx, &messages.StartToolCall{Header: h, FrameID: p.FrameID, CallID: fmt.Sprintf("call-%d", i), Name: "search"})
	require.NoError(t, err)
	_, err = c.RecordUsage(ctx, &messages.RecordUsage{Header: h, FrameID: p.FrameID, Cost: budget.Cost{InputTokens: 100, Turns: 1}})
	require.NoError(t, err)
	_, err = c.PopFrame(ctx, &messages.PopFrame{Header: h, FrameID: p.FrameID, Status: frames.StatusCompleted})
	require.NoError(t, err)
	return p.FrameID
}

// Finished frames leave the projection and its snapshots, and every read
// still answers for them from the log, before and after a restart.
func TestFinishedFramesAnswerFromTheLog(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) { c.SnapshotEvery = 20 })
	const scope = "history"
	h := messages.Header{Scope: scope}
	root, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "chat", Budget: budget.TokenBudget{Total: 100_000}})
	require.NoError(t, err)
	var kids []string
	for i := range 30 {
		kids = append(kids, runChild(t, e.c, scope, root.FrameID, i))
	}
	want := map[string]*frames.Frame{}
	all, err := eventstore.LoadAll(ctx, e.store, scope, 0)
	require.NoError(t, err)
	for _, id := range kids {
		f := all.Frame(id).Clone()
		f.Children = nil
		want[id] = f
	}

	check := func(when string) {
		for _, id := range []string{kids[0], kids[17], kids[29]} {
			got, err := e.c.GetFrame(ctx, &messages.GetFrame{Header: h, FrameID: id, WithHandles: true})
			require.NoError(t, err, when)
			assert.Equal(t, want[id], got.Frame.Clone(), "%s: frame %s", when, id)
			assert.Len(t, got.Frame.Handles, 2, when)
			assert.True(t, got.Frame.ToolCalls[0].Abandoned, when)

			bare, err := e.c.GetFrame(ctx, &messages.GetFrame{Header: h, FrameID: id})
			require.NoError(t, err)
			assert.Empty(t, bare.Frame.Handles)

			pack, err := e.c.AssembleContextPack(ctx, &messages.AssembleContextPack{Header: h, FrameID: id, BudgetTokens: 4000})
			require.NoError(t, err, "%s: a pack of a finished frame", when)
			assert.Len(t, pack.Segments, 2, when)
			assert.Len(t, pack.Breadcrumbs, 2, "%s: the root and the frame", when)

			stack, err := e.c.GetStack(ctx, &messages.GetStack{Header: h, FrameID: id})
			require.NoError(t, err, when)
			require.Len(t, stack.Frames, 2, when)
			assert.Equal(t, root.FrameID, stack.Frames[0].ID)
			assert.Equal(t, id, stack.Frames[1].ID)
			assert.Equal(t, frames.StatusCompleted, stack.Frames[1].Status)
		}
		// Rules refuse finished frames as before.
		_, err := e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, FrameID: kids[3], Content: "late"})
		assert.ErrorIs(t, err, actors.ErrFrameNotLive, when)
		_, err = e.c.PushFrame(ctx, &messages.PushFrame{Header: h, ParentID: kids[3], Goal: "under a finished frame"})
		assert.ErrorIs(t, err, actors.ErrFrameNotLive, when)
		_, err = e.c.GetFrame(ctx, &messages.GetFrame{Header: h, FrameID: "never-was"})
		assert.ErrorIs(t, err, actors.ErrFrameNotFound, when)
		// The live projection: the root with counts, the abandoned calls.
		rs, err := e.c.ResumeActor(ctx, &messages.ResumeActor{Header: h})
		require.NoError(t, err)
		require.Len(t, rs.LiveFrames, 1, when)
		assert.Empty(t, rs.LiveFrames[0].Children, when)
		assert.Len(t, rs.PendingWork, 30, "%s: every abandoned call is still reported", when)
	}
	check("served")

	e.restart() // the server's Stop waits for its snapshots
	// The snapshot holds the live root and the abandoned calls, not the
	// thirty finished frames and their handles.
	snap, ok, err := e.store.LoadSnapshot(ctx, scope)
	require.NoError(t, err)
	require.True(t, ok)
	st, ok, err := eventstore.DecodeState(scope, snap)
	require.NoError(t, err)
	require.True(t, ok)
	assert.LessOrEqual(t, len(st.Frames), 2, "the root and at most the child live when it was taken")
	assert.Positive(t, st.Finished)
	assert.Less(t, len(snap.Data), 30*600, "no handle content of finished frames")

	check("after a restart")
}

// A request id is answered from the store's index: a resend long after,
// after a restart and however many requests came between, gets the
// original reply and writes nothing.
func TestRequestIDsAnsweredFromTheIndex(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) { c.SnapshotEvery = 10 })
	const scope = "resends"
	h := messages.Header{Scope: scope, RequestID: "push-root-1"}
	first, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "root", Budget: budget.TokenBudget{Total: 10_000}})
	require.NoError(t, err)
	for i := range 40 {
		runChild(t, e.c, scope, first.FrameID, i)
	}
	e.restart()
	v := e.version(scope)
	again, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "root", Budget: budget.TokenBudget{Total: 10_000}})
	require.NoError(t, err)
	assert.Equal(t, first.FrameID, again.FrameID)
	assert.Equal(t, first.Version, again.Version)
	assert.Equal(t, v, e.version(scope), "nothing appended")
	_, err = e.c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "another root"})
	assert.ErrorIs(t, err, actors.ErrRequestIDReused)
}
