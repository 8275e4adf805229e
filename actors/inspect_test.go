package actors_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// GetScope reports what ResumeActor reports — live frames, the top of the
// stack, pending work with in-doubt and abandoned tool calls — and writes
// nothing; its pages of live frames cover every live frame once.
func TestGetScopeReportsWithoutRecording(t *testing.T) {
	e := newEnv(t)
	h := messages.Header{Scope: "insp"}
	empty, err := e.c.GetScope(ctx, &messages.GetScope{Header: h})
	require.NoError(t, err)
	assert.Zero(t, empty.Version, "an unknown scope reads as version 0")
	assert.Empty(t, empty.Frames)

	root, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "plan", Budget: budget.TokenBudget{Total: 1000}})
	require.NoError(t, err)
	kid, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: h, ParentID: root.FrameID, Goal: "pay", Budget: budget.TokenBudget{Total: 100}})
	require.NoError(t, err)
	_, err = e.c.StartToolCall(ctx, &messages.StartToolCall{Header: h, FrameID: kid.FrameID, CallID: "c-abandoned", Name: "charge"})
	require.NoError(t, err)
	_, err = e.c.PopFrame(ctx, &messages.PopFrame{Header: h, FrameID: kid.FrameID, Status: frames.StatusFailed})
	require.NoError(t, err)
	kid2, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: h, ParentID: root.FrameID, Goal: "book", Budget: budget.TokenBudget{Total: 200}})
	require.NoError(t, err)
	_, err = e.c.StartToolCall(ctx, &messages.StartToolCall{Header: h, FrameID: kid2.FrameID, CallID: "c-doubt", Name: "book_flight"})
	require.NoError(t, err)
	_, err = e.c.SuspendFrame(ctx, &messages.SuspendFrame{Header: h, FrameID: kid2.FrameID, Reason: frames.SuspendApproval})
	require.NoError(t, err)

	before := mustLoad(t, e, "insp").Version
	g, err := e.c.GetScope(ctx, &messages.GetScope{Header: h})
	require.NoError(t, err)
	assert.Equal(t, before, g.Version)
	assert.Equal(t, before, mustLoad(t, e, "insp").Version, "GetScope appends nothing")
	require.Len(t, g.Frames, 2)
	assert.Equal(t, 2, g.Live)
	assert.EqualValues(t, 1, g.Finished)
	assert.Equal(t, root.FrameID, g.Frames[0].ID)
	assert.Equal(t, kid2.FrameID, g.Frames[1].ID)
	assert.Equal(t, "", g.Top, "the root waits, its child is suspended: no frame is active")
	require.NotNil(t, g.Frames[1].Suspension)
	assert.Equal(t, frames.SuspendApproval, g.Frames[1].Suspension.Reason)
	require.Len(t, g.Frames[1].InDoubt, 1)
	assert.Equal(t, "c-doubt", g.Frames[1].InDoubt[0].ID)
	require.Len(t, g.Abandoned, 1)
	assert.Equal(t, "c-abandoned", g.Abandoned[0].Call.ID)
	assert.Equal(t, kid.FrameID, g.Abandoned[0].FrameID)

	// The same pending work as ResumeActor's (which records a resume).
	rs, err := e.c.ResumeActor(ctx, &messages.ResumeActor{Header: h})
	require.NoError(t, err)
	assert.Equal(t, rs.PendingWork, g.Pending)
	assert.Equal(t, len(rs.PendingWork), g.PendingTotal)

	// Pages of one frame.
	var ids []string
	var after int64
	for {
		p, err := e.c.GetScope(ctx, &messages.GetScope{Header: h, After: after, Limit: 1})
		require.NoError(t, err)
		for _, f := range p.Frames {
			ids = append(ids, f.ID)
		}
		if p.Next == 0 {
			break
		}
		after = p.Next
	}
	assert.Equal(t, []string{root.FrameID, kid2.FrameID}, ids)

	for _, bad := range []*messages.GetScope{{Header: h, Limit: -1}, {Header: h, Limit: messages.MaxScopeFrames + 1}, {Header: h, After: -1}} {
		_, err := e.c.GetScope(ctx, bad)
		assert.True(t, errors.Is(err, actors.ErrInvalidArgument), "%+v: %v", bad, err)
	}
}

// ReadScope pages a scope's events newest first, each with its checkpoint
// reason, filters by frame and reason, refuses bad input and writes nothing.
func TestReadScopePagesNewestFirst(t *testing.T) {
	e := newEnv(t)
	h := messages.Header{Scope: "hist"}
	root, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "chat", Budget: budget.TokenBudget{Total: 1000}})
	require.NoError(t, err)
	for i := 0; i < 5; i++ {
		hh := h
		if i%2 == 0 {
			hh.Reason = frames.ReasonAssistantTurnCommitted
		}
		_, err = e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: hh, FrameID: root.FrameID, Priority: compaction.Medium, Content: "msg"})
		require.NoError(t, err)
	}
	version := mustLoad(t, e, "hist").Version
	require.EqualValues(t, 6, version)

	var versions []int64
	before := int64(0)
	for {
		p, err := e.c.ReadScope(ctx, &messages.ReadScope{Header: h, Before: before, Limit: 4})
		require.NoError(t, err)
		for _, ev := range p.Events {
			versions = append(versions, ev.Version)
			_, err := ev.Decode()
			require.NoError(t, err)
		}
		if p.Next == 0 {
			break
		}
		before = p.Next
	}
	assert.Equal(t, []int64{6, 5, 4, 3, 2, 1}, versions)

	um, err := e.c.ReadScope(ctx, &messages.ReadScope{Header: h, Reasons: []frames.Reason{frames.ReasonAssistantTurnCommitted}})
	require.NoError(t, err)
	require.Len(t, um.Events, 3)
	for _, ev := range um.Events {
		d, err := ev.Decode()
		require.NoError(t, err)
		assert.Equal(t, frames.ReasonAssistantTurnCommitted, d.EventMeta().Reason)
		assert.Equal(t, frames.TypeHandleAdded, ev.Type)
	}
	fr, err := e.c.ReadScope(ctx, &messages.ReadScope{Header: h, FrameID: "nope"})
	require.NoError(t, err)
	assert.Empty(t, fr.Events)

	for _, bad := range []*messages.ReadScope{{Header: h, Limit: -1}, {Header: h, Limit: messages.MaxScopeEvents + 1},
		{Header: h, Before: -3}, {Header: h, Reasons: []frames.Reason{99}}, {Header: h, FrameID: "has space"}} {
		_, err := e.c.ReadScope(ctx, bad)
		assert.True(t, errors.Is(err, actors.ErrInvalidArgument), "%+v: %v", bad, err)
	}
	assert.Equal(t, version, mustLoad(t, e, "hist").Version, "ReadScope appends nothing")
}
