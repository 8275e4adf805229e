package actors_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

func mut(scope string) messages.Header { return messages.Header{Scope: scope} }

func push(t *testing.T, c *actors.Client, scope, parent string, total int64) string {
	t.Helper()
	r, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(scope), ParentID: parent, Goal: "goal under " + parent, Budget: budget.TokenBudget{Total: total}})
	require.NoError(t, err)
	return r.FrameID
}

func addHandle(t *testing.T, c *actors.Client, scope, frame string, p compaction.Priority, content string) string {
	t.Helper()
	r, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut(scope), FrameID: frame, Priority: p, Content: content})
	require.NoError(t, err)
	return r.HandleID
}

// The addendum's Budget Propagation Example, through the protocol.
func TestBudgetPropagationThroughProtocol(t *testing.T) {
	e := newEnv(t)
	c := e.c
	root := push(t, c, "s", "", 8000)
	_, err := c.UpdateFrame(ctx, &messages.UpdateFrame{Header: mut("s"), FrameID: root, ReserveDelta: 500})
	require.NoError(t, err)
	_, err = c.UpdateFrame(ctx, &messages.UpdateFrame{Header: mut("s"), FrameID: root, ReserveDelta: 200})
	require.NoError(t, err)
	child := push(t, c, "s", root, 3000)
	_, err = c.RecordUsage(ctx, &messages.RecordUsage{Header: mut("s"), FrameID: root, Cost: budget.Cost{InputTokens: 2000}})
	require.NoError(t, err)

	g, err := c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: "s"}, FrameID: root})
	require.NoError(t, err)
	assert.Equal(t, int64(2300), g.Frame.Budget.Available(), "available for evidence")

	_, err = c.RecordUsage(ctx, &messages.RecordUsage{Header: mut("s"), FrameID: child, Cost: budget.Cost{InputTokens: 2000, OutputTokens: 500}})
	require.NoError(t, err)
	pop, err := c.PopFrame(ctx, &messages.PopFrame{Header: mut("s"), FrameID: child, Status: frames.StatusCompleted})
	require.NoError(t, err)
	assert.Equal(t, int64(3000), pop.Released)
	assert.Equal(t, int64(2500), pop.ChargedTokens)

	g, err = c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: "s"}, FrameID: root})
	require.NoError(t, err)
	assert.Equal(t, int64(2800), g.Frame.Budget.Available(), "the child's unused 500 came back")
	assert.Equal(t, frames.StatusActive, g.Frame.Status)
}

func TestOperationsHappyPath(t *testing.T) {
	e := newEnv(t)
	c := e.c
	const s = "agent:happy"
	p, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(s), Goal: "write the report", Inputs: []byte(`{"topic":"x"}`),
		Budget: budget.TokenBudget{Total: 10_000, MaxSubframeDepth: 4}, Limits: budget.Limits{Turns: 5}})
	require.NoError(t, err)
	root := p.FrameID
	assert.Len(t, root, 32)
	assert.Equal(t, int64(1), p.Version)
	child := push(t, c, s, root, 2000)

	// Top of stack is the child: requests that name no frame go there.
	h, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut(s), Priority: compaction.High, Content: "the sky is blue"})
	require.NoError(t, err)
	assert.Equal(t, child, h.FrameID)
	assert.Equal(t, int64(4), h.Tokens, "chars/4 rounded up")

	named, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut(s), FrameID: child, HandleID: "my-handle", Kind: "doc", Priority: compaction.Low, Content: "low"})
	require.NoError(t, err)
	assert.Equal(t, "my-handle", named.HandleID)

	res, err := c.AddResult(ctx, &messages.AddResult{Header: mut(s), FrameID: child, Kind: "file", Ref: "/out/report.md"})
	require.NoError(t, err)
	assert.NotEmpty(t, res.ResultID)

	st, err := c.StartToolCall(ctx, &messages.StartToolCall{Header: mut(s), FrameID: child, Name: "search", Input: []byte(`"blue sky"`)})
	require.NoError(t, err)
	fin, err := c.FinishToolCall(ctx, &messages.FinishToolCall{Header: mut(s), FrameID: child, CallID: st.CallID, Output: "3 results"})
	require.NoError(t, err)
	assert.NotEqual(t, fin.CallHandleID, fin.ResultHandleID)

	gf, err := c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: s}, FrameID: child, WithHandles: true})
	require.NoError(t, err)
	require.Len(t, gf.Frame.Handles, 4)
	assert.Equal(t, `search("blue sky")`, gf.Frame.Handles[2].Content)
	assert.Equal(t, st.CallID, gf.Frame.Handles[3].Group)

	u, err := c.RecordUsage(ctx, &messages.RecordUsage{Header: mut(s), FrameID: child, Cost: budget.Cost{InputTokens: 100, OutputTokens: 50, Turns: 1}})
	require.NoError(t, err)
	assert.Nil(t, u.Suspension)

	pack, err := c.AssembleContextPack(ctx, &messages.AssembleContextPack{Header: messages.Header{Scope: s}, BudgetTokens: 1000, Role: "researcher"})
	require.NoError(t, err)
	assert.Equal(t, child, pack.Metadata.FrameID)
	assert.Len(t, pack.Breadcrumbs, 2)
	assert.Len(t, pack.Segments, 4)
	assert.Contains(t, pack.BriefContext, "researcher")
	assert.Equal(t, compaction.LevelNone, pack.TokenSummary.CompactionLevel)
	assert.LessOrEqual(t, pack.TokenSummary.Used, int64(1000))

	stack, err := c.GetStack(ctx, &messages.GetStack{Header: messages.Header{Scope: s}})
	require.NoError(t, err)
	require.Len(t, stack.Frames, 2)
	assert.Equal(t, root, stack.Frames[0].ID)

	tok, err := c.SuspendFrame(ctx, &messages.SuspendFrame{Header: mut(s), FrameID: child, Reason: frames.SuspendApproval, Note: "ok to publish?"})
	require.NoError(t, err)
	assert.NotEmpty(t, tok.Token)
	assert.Equal(t, child, tok.FrameID)
	assert.Equal(t, e.clock.Now().Add(7*24*time.Hour).UnixNano(), tok.ExpiresAt)

	rs, err := c.ResumeFrame(ctx, &messages.ResumeFrame{Header: mut(s), Token: tok.Token})
	require.NoError(t, err)
	assert.Equal(t, child, rs.FrameID)

	comp, err := c.CompactContext(ctx, &messages.CompactContext{Header: mut(s), FrameID: child, TargetTokens: 6, Strategy: messages.Strategy{Kind: messages.StrategyPriorityBased}})
	require.NoError(t, err)
	assert.Contains(t, comp.Removed, "my-handle", "the Low handle goes first")
	assert.LessOrEqual(t, comp.FinalTokens, comp.OriginalTokens)

	pop, err := c.PopFrame(ctx, &messages.PopFrame{Header: mut(s), Status: frames.StatusCompleted})
	require.NoError(t, err)
	assert.Equal(t, child, pop.FrameID, "pop with no frame pops the top")
	_, err = c.PopFrame(ctx, &messages.PopFrame{Header: mut(s), FrameID: root, Status: frames.StatusCompleted})
	require.NoError(t, err)
	_, err = c.AssembleContextPack(ctx, &messages.AssembleContextPack{Header: messages.Header{Scope: s}, BudgetTokens: 1000})
	assert.ErrorIs(t, err, actors.ErrNoActiveFrame)
}

func TestUsageOverLimitSuspendsWithToken(t *testing.T) {
	e := newEnv(t)
	c := e.c
	p, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut("s"), Goal: "g", Limits: budget.Limits{SpendMicros: 1_000_000}})
	require.NoError(t, err)
	u, err := c.RecordUsage(ctx, &messages.RecordUsage{Header: mut("s"), Cost: budget.Cost{SpendMicros: 1_050_000}})
	require.NoError(t, err, "crossing a limit does not fail the request")
	require.NotNil(t, u.Suspension)
	assert.Equal(t, frames.SuspendLimit, u.Suspension.Reason)
	assert.Equal(t, &budget.Violation{Code: budget.SpendExceeded, Current: 1_050_000, Max: 1_000_000}, u.Suspension.Limit)

	g, err := c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: "s"}, FrameID: p.FrameID})
	require.NoError(t, err)
	assert.Equal(t, frames.StatusSuspended, g.Frame.Status)
	assert.Equal(t, int64(1_050_000), g.Frame.Cost.SpendMicros)

	// Raise the limit, then resume with the token the usage reply carried.
	_, err = c.UpdateFrame(ctx, &messages.UpdateFrame{Header: mut("s"), FrameID: p.FrameID, Limits: &budget.Limits{SpendMicros: 2_000_000}})
	require.NoError(t, err)
	_, err = c.ResumeFrame(ctx, &messages.ResumeFrame{Header: mut("s"), Token: u.Suspension.Token})
	require.NoError(t, err)
}

func TestRequestIDIdempotence(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) { c.Shards = 1; c.CacheScopes = 1 })
	c := e.c
	req := &messages.PushFrame{Header: messages.Header{Scope: "s", RequestID: "push-1"}, Goal: "g", Budget: budget.TokenBudget{Total: 100}}
	first, err := c.PushFrame(ctx, req)
	require.NoError(t, err)
	v := e.version("s")

	again, err := c.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: "s", RequestID: "push-1"}, Goal: "g", Budget: budget.TokenBudget{Total: 100}})
	require.NoError(t, err)
	assert.Equal(t, first, again, "the original reply")
	assert.Equal(t, v, e.version("s"), "nothing appended")

	_, err = c.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: "s", RequestID: "push-1"}, Goal: "other"})
	assert.ErrorIs(t, err, actors.ErrRequestIDReused)

	// Evict the scope (cache of one scope), then repeat.
	push(t, c, "other-scope", "", 1)
	again, err = c.PushFrame(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, first, again)

	// Suspension: the repeat carries the same signed token.
	sreq := &messages.SuspendFrame{Header: messages.Header{Scope: "s", RequestID: "susp-1"}, FrameID: first.FrameID, Reason: frames.SuspendApproval}
	tok, err := c.SuspendFrame(ctx, sreq)
	require.NoError(t, err)

	e.restart()
	c = e.c
	v = e.version("s")
	tok2, err := c.SuspendFrame(ctx, sreq)
	require.NoError(t, err)
	assert.Equal(t, tok, tok2, "after a restart too")
	again, err = c.PushFrame(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, first, again)
	assert.Equal(t, v, e.version("s"))
}

func TestVersionGuard(t *testing.T) {
	e := newEnv(t)
	push(t, e.c, "s", "", 10)
	stale := int64(0)
	_, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: "s", IfVersion: &stale}, Goal: "g"})
	var me *messages.Error
	require.ErrorAs(t, err, &me)
	assert.Equal(t, messages.CodeVersionConflict, me.Code)
	assert.Equal(t, int64(1), me.Version)
	ok := int64(1)
	_, err = e.c.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: "s", IfVersion: &ok}, Goal: "g"})
	require.NoError(t, err)
}

func TestResumeActorAfterRestart(t *testing.T) {
	e := newEnv(t)
	c := e.c
	empty, err := c.ResumeActor(ctx, &messages.ResumeActor{Header: messages.Header{Scope: "fresh"}})
	require.NoError(t, err)
	assert.Nil(t, empty.CurrentFrame)
	assert.Equal(t, int64(0), e.version("fresh"), "an empty scope writes nothing")

	root := push(t, c, "s", "", 1000)
	child := push(t, c, "s", root, 100)
	st, err := c.StartToolCall(ctx, &messages.StartToolCall{Header: mut("s"), FrameID: child, Name: "charge_card"})
	require.NoError(t, err)
	other := push(t, c, "s", root, 100)
	_, err = c.SuspendFrame(ctx, &messages.SuspendFrame{Header: mut("s"), FrameID: other, Reason: frames.SuspendApproval})
	require.NoError(t, err)

	before, err := c.ResumeActor(ctx, &messages.ResumeActor{Header: messages.Header{Scope: "s"}})
	require.NoError(t, err)
	e.restart()
	after, err := e.c.ResumeActor(ctx, &messages.ResumeActor{Header: messages.Header{Scope: "s"}})
	require.NoError(t, err)

	assert.Equal(t, before.CurrentFrame, after.CurrentFrame)
	assert.Equal(t, before.FrameStack, after.FrameStack)
	assert.Equal(t, before.PendingWork, after.PendingWork)
	require.NotNil(t, after.CurrentFrame)
	assert.Equal(t, child, after.CurrentFrame.ID)
	kinds := map[frames.PendingKind]string{}
	for _, p := range after.PendingWork {
		kinds[p.Kind] = p.FrameID + "/" + p.ToolCallID
	}
	assert.Equal(t, root+"/", kinds[frames.PendingWaitingForSubcall])
	assert.Equal(t, child+"/"+st.CallID, kinds[frames.PendingToolInDoubt])
	assert.Equal(t, other+"/", kinds[frames.PendingSuspended])
	assert.Equal(t, 3, after.Recovery.FramesRecovered)
	assert.Equal(t, 3, after.Recovery.PendingWorkItems)
	assert.True(t, after.Recovery.EventsReplayed > 0)
	assert.Equal(t, e.seq(), after.Recovery.LastEventSeq)
	assert.Equal(t, before.Version+1, after.Version, "actor.resumed appended")
}

func TestLRUEvictionKeepsState(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) { c.Shards = 1; c.CacheScopes = 2; c.SnapshotEvery = 3 })
	c := e.c
	scopes := []string{"a", "b", "c", "d"}
	for _, s := range scopes {
		r := push(t, c, s, "", 500)
		for i := 0; i < 5; i++ {
			addHandle(t, c, s, r, compaction.Medium, fmt.Sprintf("%s fact %d", s, i))
		}
	}
	read := func(s string) *messages.GetFrameReply {
		g, err := c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: s}, WithHandles: true})
		require.NoError(t, err)
		return g
	}
	warm := read("d")
	first := read("a") // evicted by b, c, d: rebuilt from snapshot + tail
	for _, s := range scopes {
		read(s)
	}
	assert.Equal(t, first, read("a"))
	assert.Equal(t, warm, read("d"))
	e.restart()
	assert.Equal(t, first, e.readFrame("a"))
}

func (e *env) readFrame(scope string) *messages.GetFrameReply {
	g, err := e.c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: scope}, WithHandles: true})
	require.NoError(e.t, err)
	return g
}

func TestClientDeadline(t *testing.T) {
	e := newEnv(t)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err := e.c.PushFrame(cctx, &messages.PushFrame{Header: mut("s")})
	assert.ErrorIs(t, err, actors.ErrTimeout)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, int64(0), e.version("s"))
}

func TestErrorsAreTyped(t *testing.T) {
	e := newEnv(t)
	_, err := e.c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: "s"}, FrameID: "nope"})
	var me *messages.Error
	require.True(t, errors.As(err, &me))
	assert.Equal(t, messages.CodeFrameNotFound, me.Code)
	assert.True(t, errors.Is(err, actors.ErrFrameNotFound))
	assert.False(t, errors.Is(err, actors.ErrTokenUsed))
	assert.True(t, strings.HasPrefix(err.Error(), "stateindex: frame_not_found"))
}

// CompactContext records frame.compacted with what it removed and the
// summary it added; the removed content is still in the log.
func TestCompactionKeepsRemovedContentInTheLog(t *testing.T) {
	e := newEnv(t)
	c := e.c
	root := push(t, c, "s", "", 100_000)
	var ids []string
	for i := 0; i < 20; i++ {
		ids = append(ids, addHandle(t, c, "s", root, compaction.Medium, fmt.Sprintf("Step %d wrote /tmp/out-%d.json with 42 rows. Then it rested.", i, i)))
	}
	r, err := c.CompactContext(ctx, &messages.CompactContext{Header: mut("s"), FrameID: root, TargetTokens: 150,
		Strategy: messages.Strategy{Kind: messages.StrategySummarizeOldest, KeepRecent: 5}})
	require.NoError(t, err)
	require.NotEmpty(t, r.SummaryID)
	assert.Equal(t, ids[:15], r.Removed, "the 15 oldest were summarized")
	assert.Less(t, r.FinalTokens, r.OriginalTokens)

	g := e.readFrame("s")
	sum := g.Frame.Handle(r.SummaryID)
	require.NotNil(t, sum)
	assert.Equal(t, ids[:15], sum.Covers)
	assert.Contains(t, sum.Content, "/tmp/out-14.json with 42 rows", "exact facts survive verbatim")
	assert.Nil(t, g.Frame.Handle(ids[0]))

	// The log still holds the removed handle's content and the compaction.
	var found, compacted bool
	require.NoError(t, e.store.ReadStream(ctx, "s", 1, func(rec eventstore.Record) error {
		ev, err := eventstore.DecodeFrameEvent(rec)
		require.NoError(t, err)
		switch x := ev.(type) {
		case *frames.HandleAdded:
			found = found || (x.Handle.ID == ids[0] && strings.Contains(x.Handle.Content, "/tmp/out-0.json"))
		case *frames.FrameCompacted:
			compacted = assert.Equal(t, ids[:15], x.Removed) && x.Summary != nil && x.Summary.ID == r.SummaryID
		}
		return nil
	}))
	assert.True(t, found, "removed content readable from the log")
	assert.True(t, compacted)
}

func TestRouterAndClientRefuseNonRequests(t *testing.T) {
	e := newEnv(t)
	res, err := e.sys.Root.RequestFuture(e.srv.PID(), "hello", 5*time.Second).Result()
	require.NoError(t, err, "answered, not left to time out")
	r, ok := res.(messages.Reply)
	require.True(t, ok)
	assert.ErrorIs(t, r.Failure(), actors.ErrBadRequest)

	var nilPush *messages.PushFrame
	res, err = e.sys.Root.RequestFuture(e.srv.PID(), nilPush, 5*time.Second).Result()
	require.NoError(t, err)
	assert.ErrorIs(t, res.(messages.Reply).Failure(), actors.ErrBadRequest)

	_, err = e.c.PushFrame(ctx, nil)
	assert.ErrorIs(t, err, actors.ErrInvalidArgument)
}
