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
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// conversation pushes a root with a window and a child "task" holding n
// user/assistant turns of 40 tokens (estimate: 160 bytes) each.
func conversation(t *testing.T, e *env, scope string, window int64, n int) (root, task string) {
	t.Helper()
	h := messages.Header{Scope: scope}
	r, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "run", Budget: budget.TokenBudget{Total: 100_000}, ContextWindow: window})
	require.NoError(t, err)
	c, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: h, ParentID: r.FrameID, Goal: "task", Budget: budget.TokenBudget{Total: 10_000}})
	require.NoError(t, err)
	_, err = e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, FrameID: c.FrameID, HandleID: "sys", Role: "system",
		Priority: compaction.Critical, Content: "You deploy build 4711 to /srv/app."})
	require.NoError(t, err)
	for i := 0; i < n; i++ {
		for _, role := range []string{"user", "assistant"} {
			_, err := e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, FrameID: c.FrameID, HandleID: fmt.Sprintf("%s%d", role[:1], i),
				Role: role, Priority: compaction.Medium, Content: fmt.Sprintf("turn %d of %s: ", i, role) + strings.Repeat("x", 160-len(fmt.Sprintf("turn %d of %s: ", i, role)))})
			require.NoError(t, err)
		}
	}
	_, err = e.c.RecordUsage(ctx, &messages.RecordUsage{Header: h, FrameID: c.FrameID, Cost: budget.Cost{InputTokens: 500, Turns: 4, SpendMicros: 12}})
	require.NoError(t, err)
	return r.FrameID, c.FrameID
}

func TestContinueFrameEndToEnd(t *testing.T) {
	e := newEnv(t)
	const scope = "cont"
	h := messages.Header{Scope: scope}
	root, task := conversation(t, e, scope, 2_000, 10)

	add, err := e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, FrameID: task, Role: "user", Priority: compaction.Medium, Content: "one more"})
	require.NoError(t, err)
	require.NotNil(t, add.Pressure, "a context change reports pressure")
	assert.Equal(t, int64(2_000), add.Pressure.Window, "inherited from the root")
	assert.Equal(t, add.Pressure.Tokens*1000/2000, add.Pressure.Permille)
	assert.Nil(t, add.Continued, "automatic continuation is off by default")

	req := &messages.ContinueFrame{Header: messages.Header{Scope: scope, RequestID: "continue-1"}, FrameID: task, ResumeCeiling: 200}
	got, err := e.c.ContinueFrame(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, task, got.From)
	assert.NotEqual(t, task, got.FrameID)
	assert.Greater(t, got.TokensBefore, got.TokensAfter)
	assert.NotEmpty(t, got.SummaryID)
	assert.Equal(t, 1+5, got.Carried, "the critical handle, two whole turns from a user's and the last message")
	require.NotNil(t, got.Pressure)
	assert.Equal(t, got.TokensAfter, got.Pressure.Tokens, "the new link's pressure")
	again, err := e.c.ContinueFrame(ctx, req)
	require.NoError(t, err, "a repeat is answered from the log")
	assert.Equal(t, got.FrameID, again.FrameID)
	assert.Equal(t, got.TokensAfter, again.TokensAfter)

	// Mutations naming the continued link fail with frame_continued and the head.
	v := e.version(scope)
	_, err = e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, FrameID: task, Content: "late"})
	require.ErrorIs(t, err, actors.ErrFrameContinued)
	var me *messages.Error
	require.True(t, errorsAs(err, &me))
	assert.Equal(t, got.FrameID, me.Head)
	_, err = e.c.CompactContext(ctx, &messages.CompactContext{Header: h, FrameID: task, TargetTokens: 10, Strategy: messages.Strategy{Kind: "priority_based"}})
	require.ErrorIs(t, err, actors.ErrFrameContinued)
	_, err = e.c.PopFrame(ctx, &messages.PopFrame{Header: h, FrameID: task, Status: frames.StatusCompleted})
	require.ErrorIs(t, err, actors.ErrFrameContinued)
	assert.Equal(t, v, e.version(scope), "nothing written")

	// Reads accept any link and name the head.
	for _, id := range []string{task, got.FrameID} {
		f, err := e.c.GetFrame(ctx, &messages.GetFrame{Header: h, FrameID: id, WithHandles: true})
		require.NoError(t, err, id)
		assert.Equal(t, got.FrameID, f.ChainHead)
		st, err := e.c.GetStack(ctx, &messages.GetStack{Header: h, FrameID: id})
		require.NoError(t, err)
		assert.Equal(t, got.FrameID, st.ChainHead)
		assert.Equal(t, root, st.Frames[0].ID)
		p, err := e.c.AssembleContextPack(ctx, &messages.AssembleContextPack{Header: h, FrameID: id, BudgetTokens: 4000})
		require.NoError(t, err)
		assert.Equal(t, got.FrameID, p.ChainHead)
	}
	old, err := e.c.GetFrame(ctx, &messages.GetFrame{Header: h, FrameID: task})
	require.NoError(t, err)
	assert.Equal(t, frames.StatusContinued, old.Frame.Status)
	assert.Equal(t, got.FrameID, old.Frame.ContinuedTo)
	head, err := e.c.GetFrame(ctx, &messages.GetFrame{Header: h, FrameID: got.FrameID, WithHandles: true})
	require.NoError(t, err)
	assert.Equal(t, old.Frame.Cost, head.Frame.Cost, "the cost goes on")
	assert.Equal(t, int64(500), head.Frame.Budget.Used)
	assert.Equal(t, task, head.Frame.ContinuedFrom)

	chain, err := e.c.GetChain(ctx, &messages.GetChain{Header: h, FrameID: task})
	require.NoError(t, err)
	assert.Equal(t, task, chain.Root)
	assert.Equal(t, got.FrameID, chain.Head)
	require.Len(t, chain.Links, 2)
	assert.Equal(t, frames.StatusContinued, chain.Links[0].Status)
	assert.Equal(t, got.TokensBefore, chain.Links[0].Tokens)
	assert.Equal(t, frames.StatusActive, chain.Links[1].Status)

	// All of it survives a restart (replay, and the snapshot).
	e.restart()
	after, err := e.c.GetChain(ctx, &messages.GetChain{Header: h, FrameID: got.FrameID})
	require.NoError(t, err)
	assert.Equal(t, chain.Links, after.Links)
	_, err = e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, FrameID: task, Content: "late"})
	require.ErrorIs(t, err, actors.ErrFrameContinued)
}

func TestChainBadInputs(t *testing.T) {
	e := newEnv(t)
	h := messages.Header{Scope: "bad"}
	_, task := conversation(t, e, "bad", 2_000, 10)
	_, err := e.c.ContinueFrame(ctx, &messages.ContinueFrame{Header: h, FrameID: "nope"})
	require.ErrorIs(t, err, actors.ErrFrameNotFound)
	_, err = e.c.GetChain(ctx, &messages.GetChain{Header: h, FrameID: "nope"})
	require.ErrorIs(t, err, actors.ErrFrameNotFound)
	_, err = e.c.GetChain(ctx, &messages.GetChain{Header: messages.Header{Scope: "other"}, FrameID: task})
	require.ErrorIs(t, err, actors.ErrFrameNotFound, "a chain id of another scope is not found")
	_, err = e.c.ResumeChain(ctx, &messages.ResumeChain{Header: messages.Header{Scope: "other"}, ChainID: task, Message: "go"})
	require.ErrorIs(t, err, actors.ErrFrameNotFound)
	_, err = e.c.ResumeChain(ctx, &messages.ResumeChain{Header: h, ChainID: task, Message: "go"})
	require.ErrorIs(t, err, actors.ErrChainRunning, "a running chain is refused")
	_, err = e.c.ContinueFrame(ctx, &messages.ContinueFrame{Header: h, FrameID: task, ResumeCeiling: 100_000})
	require.ErrorIs(t, err, actors.ErrCompactionRefused, "carrying everything frees nothing")
	one, err := e.c.GetChain(ctx, &messages.GetChain{Header: h, FrameID: task})
	require.NoError(t, err)
	assert.Equal(t, task, one.Head, "a frame in no chain is a chain of one")
	require.Len(t, one.Links, 1)
}

func TestAutomaticContinuationEndToEnd(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) { c.Frames.ContinueAt = 900; c.Frames.ResumeCeiling = 300 })
	const scope = "auto"
	h := messages.Header{Scope: scope}
	_, task := conversation(t, e, scope, 2_000, 0)
	var last *messages.AddContextHandleReply
	for i := 0; i < 60 && (last == nil || last.Continued == nil); i++ {
		var err error
		last, err = e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, FrameID: task, Role: "user", Priority: compaction.Medium,
			Content: strings.Repeat("y", 160)})
		require.NoError(t, err)
		if last.Continued == nil {
			assert.Less(t, last.Pressure.Permille, int64(900))
		}
	}
	require.NotNil(t, last.Continued, "the write that reached 90% continued the frame")
	assert.Equal(t, task, last.Continued.From)
	require.NotNil(t, last.Pressure)
	assert.Less(t, last.Pressure.Permille, int64(900), "the new link's pressure")
	chain, err := e.c.GetChain(ctx, &messages.GetChain{Header: h, FrameID: task})
	require.NoError(t, err)
	assert.Equal(t, last.Continued.To, chain.Head)

	// A frame whose context is all critical cannot be continued usefully: skipped, and said why.
	r, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "pinned", Budget: budget.TokenBudget{Total: 1_000}, ContextWindow: 100})
	require.NoError(t, err)
	pin, err := e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, FrameID: r.FrameID, Priority: compaction.Critical, Content: strings.Repeat("z", 400)})
	require.NoError(t, err, "the write itself is applied")
	assert.Nil(t, pin.Continued)
	assert.Contains(t, pin.ContinueSkipped, "frees too little")
}

func TestResumeChainEndToEnd(t *testing.T) {
	e := newEnv(t)
	const scope = "resume"
	h := messages.Header{Scope: scope}
	root, task := conversation(t, e, scope, 2_000, 10)
	cont, err := e.c.ContinueFrame(ctx, &messages.ContinueFrame{Header: h, FrameID: task, ResumeCeiling: 200})
	require.NoError(t, err)
	_, err = e.c.PopFrame(ctx, &messages.PopFrame{Header: h, FrameID: cont.FrameID, Status: frames.StatusFailed})
	require.NoError(t, err)

	req := &messages.ResumeChain{Header: messages.Header{Scope: scope, RequestID: "resume-1"}, ChainID: task, Message: "API key fixed. Retry the deploy."}
	got, err := e.c.ResumeChain(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, cont.FrameID, got.From, "resolved to the head from the root")
	assert.Equal(t, root, got.ParentID, "a sibling while the parent is live")
	assert.Equal(t, task, got.Root)
	require.NotNil(t, got.Pressure)
	again, err := e.c.ResumeChain(ctx, req)
	require.NoError(t, err, "idempotent by request id")
	assert.Equal(t, got.FrameID, again.FrameID)

	f, err := e.c.GetFrame(ctx, &messages.GetFrame{Header: h, FrameID: got.FrameID, WithHandles: true})
	require.NoError(t, err)
	msg := f.Frame.Handles[len(f.Frame.Handles)-1]
	assert.Equal(t, frames.RoleUser, msg.Role)
	assert.Equal(t, "API key fixed. Retry the deploy.", msg.Content)
	assert.Equal(t, compaction.Critical, f.Frame.Handles[0].Priority, "the segment")
	assert.Contains(t, f.Frame.Handles[0].Content, "resumed")
	chain, err := e.c.GetChain(ctx, &messages.GetChain{Header: h, FrameID: task})
	require.NoError(t, err)
	require.Len(t, chain.Links, 3)
	assert.Equal(t, frames.StatusFailed, chain.Links[1].Status)

	// The parent finished: a new root, which needs a budget.
	_, err = e.c.PopFrame(ctx, &messages.PopFrame{Header: h, FrameID: got.FrameID, Status: frames.StatusCompleted})
	require.NoError(t, err)
	_, err = e.c.PopFrame(ctx, &messages.PopFrame{Header: h, FrameID: root, Status: frames.StatusCompleted})
	require.NoError(t, err)
	_, err = e.c.ResumeChain(ctx, &messages.ResumeChain{Header: h, ChainID: task, Message: "again"})
	require.ErrorIs(t, err, actors.ErrInvalidArgument)
	require.ErrorContains(t, err, "needs a budget")
	nr, err := e.c.ResumeChain(ctx, &messages.ResumeChain{Header: h, ChainID: cont.FrameID, Message: "again", Budget: budget.TokenBudget{Total: 3_000}})
	require.NoError(t, err)
	assert.Empty(t, nr.ParentID)
	e.restart()
	chain, err = e.c.GetChain(ctx, &messages.GetChain{Header: h, FrameID: task})
	require.NoError(t, err)
	assert.Equal(t, nr.FrameID, chain.Head)
	require.Len(t, chain.Links, 4)
}

// Chains come back from a snapshot as from replay.
func TestChainSurvivesSnapshot(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) { c.SnapshotEvery = 1 })
	const scope = "snap"
	h := messages.Header{Scope: scope}
	_, task := conversation(t, e, scope, 2_000, 10)
	cont, err := e.c.ContinueFrame(ctx, &messages.ContinueFrame{Header: h, FrameID: task, ResumeCeiling: 200})
	require.NoError(t, err)
	_, err = e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, FrameID: cont.FrameID, Priority: compaction.Low, Content: "after"})
	require.NoError(t, err)
	before, err := e.c.GetChain(ctx, &messages.GetChain{Header: h, FrameID: task})
	require.NoError(t, err)
	e.restart()
	st := mustLoad(t, e, scope)
	require.NotEmpty(t, st.Chains, "the snapshot (or the replay after it) holds the chain")
	after, err := e.c.GetChain(ctx, &messages.GetChain{Header: h, FrameID: cont.FrameID})
	require.NoError(t, err)
	assert.Equal(t, before, after)
	_, err = e.c.RecordUsage(ctx, &messages.RecordUsage{Header: h, FrameID: task, Cost: budget.Cost{Turns: 1}})
	require.ErrorIs(t, err, actors.ErrFrameContinued)
}
