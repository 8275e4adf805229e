package actors_test

import (
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

// Every bad input of DESIGN §6 through the actor: a specific error, and the
// store unchanged (global sequence and the scope's version).
func TestBadInputsThroughActor(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) { c.Frames.MaxDepth = 3 })
	c := e.c
	const s = "bad"
	root := push(t, c, s, "", 1000)
	addHandle(t, c, s, root, compaction.Critical, strings.Repeat("critical! ", 300)) // ~750 tokens
	child := push(t, c, s, root, 100)
	d2 := push(t, c, s, child, 10)
	d3 := push(t, c, s, d2, 1)
	d3b := push(t, c, s, d2, 0)
	otherRoot := push(t, c, "other-scope", "", 10)

	tok, err := c.SuspendFrame(ctx, &messages.SuspendFrame{Mutation: mut(s), FrameID: d3, Reason: frames.SuspendApproval, TTLMillis: 60_000})
	require.NoError(t, err)
	_, err = c.ResumeFrame(ctx, &messages.ResumeFrame{Mutation: mut(s), Token: tok.Token})
	require.NoError(t, err)
	live, err := c.SuspendFrame(ctx, &messages.SuspendFrame{Mutation: mut(s), FrameID: d3, Reason: frames.SuspendApproval, TTLMillis: 60_000})
	require.NoError(t, err)
	otherTok, err := c.SuspendFrame(ctx, &messages.SuspendFrame{Mutation: mut("other-scope"), FrameID: otherRoot, Reason: frames.SuspendApproval})
	require.NoError(t, err)

	// A token signed by another server for this very frame.
	e2 := newEnv(t, func(c *actors.Config) { c.TokenKey = []byte("another server's key, 32+ bytes!!") })
	var foreign string
	{
		r := push(t, e2.c, s, "", 1)
		ft, err := e2.c.SuspendFrame(ctx, &messages.SuspendFrame{Mutation: mut(s), FrameID: r, Reason: frames.SuspendApproval})
		require.NoError(t, err)
		foreign = ft.Token
	}
	payload, _, _ := strings.Cut(live.Token, ".")

	_, err = c.PushFrame(ctx, &messages.PushFrame{Mutation: messages.Mutation{Scope: s, RequestID: "reused"}, Goal: "a"})
	require.NoError(t, err)
	stale := int64(1)
	huge := int64(1) << 62

	cases := []struct {
		name string
		call func() error
		want *messages.Error
	}{
		{"invalid scope", func() error { _, err := c.GetStack(ctx, &messages.GetStack{Scope: "no spaces"}); return err }, actors.ErrInvalidScope},
		{"scope with NUL", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Mutation: mut("a\x00b"), Goal: "g"})
			return err
		}, actors.ErrInvalidScope},
		{"scope too long", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Mutation: mut(strings.Repeat("s", 129)), Goal: "g"})
			return err
		}, actors.ErrInvalidScope},
		{"unknown frame", func() error {
			_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Mutation: mut(s), FrameID: "ghost", Priority: compaction.Low})
			return err
		}, actors.ErrFrameNotFound},
		{"frame of another scope", func() error {
			_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Mutation: mut(s), FrameID: otherRoot, Priority: compaction.Low})
			return err
		}, actors.ErrFrameNotFound},
		{"read frame of another scope", func() error {
			_, err := c.GetFrame(ctx, &messages.GetFrame{Scope: s, FrameID: otherRoot})
			return err
		}, actors.ErrFrameNotFound},
		{"push beyond max depth", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Mutation: mut(s), ParentID: d3b, Goal: "g"})
			return err
		}, actors.ErrMaxDepthExceeded},
		{"parent cannot allocate", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Mutation: mut(s), ParentID: root, Goal: "g", Budget: budget.TokenBudget{Total: 901}})
			return err
		}, actors.ErrInsufficientTokens},
		{"pack budget under 500", func() error {
			_, err := c.AssembleContextPack(ctx, &messages.AssembleContextPack{Scope: s, FrameID: root, BudgetTokens: 499})
			return err
		}, actors.ErrBudgetTooSmall},
		{"critical content over budget", func() error {
			_, err := c.AssembleContextPack(ctx, &messages.AssembleContextPack{Scope: s, FrameID: root, BudgetTokens: 600})
			return err
		}, actors.ErrCriticalExceedsBudget},
		{"negative usage", func() error {
			_, err := c.RecordUsage(ctx, &messages.RecordUsage{Mutation: mut(s), FrameID: root, Cost: budget.Cost{Turns: -1}})
			return err
		}, actors.ErrInvalidArgument},
		{"overflowing usage", func() error {
			_, err := c.RecordUsage(ctx, &messages.RecordUsage{Mutation: mut(s), FrameID: root, Cost: budget.Cost{InputTokens: huge, OutputTokens: huge}})
			return err
		}, actors.ErrInvalidArgument},
		{"negative budget", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Mutation: mut(s), Goal: "g", Budget: budget.TokenBudget{Total: -5}})
			return err
		}, actors.ErrInvalidArgument},
		{"overflowing reservation", func() error {
			_, err := c.UpdateFrame(ctx, &messages.UpdateFrame{Mutation: mut(s), FrameID: root, ReserveDelta: -1 << 63})
			return err
		}, actors.ErrInvalidArgument},
		{"oversized goal", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Mutation: mut(s), Goal: strings.Repeat("g", 5000)})
			return err
		}, actors.ErrTooLarge},
		{"oversized inputs", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Mutation: mut(s), Goal: "g", Inputs: make([]byte, 65<<10)})
			return err
		}, actors.ErrTooLarge},
		{"oversized content", func() error {
			_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Mutation: mut(s), FrameID: root, Priority: compaction.Low, Content: strings.Repeat("x", 257<<10)})
			return err
		}, actors.ErrTooLarge},
		{"forged token", func() error {
			_, err := c.ResumeFrame(ctx, &messages.ResumeFrame{Mutation: mut(s), Token: payload + ".AAAA"})
			return err
		}, actors.ErrTokenInvalid},
		{"token of another server", func() error {
			_, err := c.ResumeFrame(ctx, &messages.ResumeFrame{Mutation: mut(s), Token: foreign})
			return err
		}, actors.ErrTokenInvalid},
		{"token of another scope", func() error {
			_, err := c.ResumeFrame(ctx, &messages.ResumeFrame{Mutation: mut(s), Token: otherTok.Token})
			return err
		}, actors.ErrTokenInvalid},
		{"truncated token", func() error {
			_, err := c.ResumeFrame(ctx, &messages.ResumeFrame{Mutation: mut(s), Token: live.Token[:len(live.Token)-3]})
			return err
		}, actors.ErrTokenInvalid},
		{"garbage token", func() error {
			_, err := c.ResumeFrame(ctx, &messages.ResumeFrame{Mutation: mut(s), Token: "\x00\xff not a token"})
			return err
		}, actors.ErrTokenInvalid},
		{"already used token", func() error {
			_, err := c.ResumeFrame(ctx, &messages.ResumeFrame{Mutation: mut(s), Token: tok.Token})
			return err
		}, actors.ErrTokenUsed},
		{"expired token", func() error {
			e.clock.Advance(2 * time.Minute)
			defer e.clock.Advance(-2 * time.Minute)
			_, err := c.ResumeFrame(ctx, &messages.ResumeFrame{Mutation: mut(s), Token: live.Token})
			return err
		}, actors.ErrTokenExpired},
		{"resume a frame that is not suspended", func() error {
			_, err := c.ResumeFrame(ctx, &messages.ResumeFrame{Mutation: mut(s), Token: tok.Token})
			return err
		}, actors.ErrTokenUsed},
		{"pop with live children", func() error {
			_, err := c.PopFrame(ctx, &messages.PopFrame{Mutation: mut(s), FrameID: child, Status: frames.StatusCompleted})
			return err
		}, actors.ErrLiveChildren},
		{"reused request id", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Mutation: messages.Mutation{Scope: s, RequestID: "reused"}, Goal: "b"})
			return err
		}, actors.ErrRequestIDReused},
		{"version conflict", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Mutation: messages.Mutation{Scope: s, IfVersion: &stale}, Goal: "g"})
			return err
		}, actors.ErrVersionConflict},
		{"bad priority", func() error {
			_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Mutation: mut(s), FrameID: root, Priority: 9})
			return err
		}, actors.ErrInvalidArgument},
		{"unknown strategy", func() error {
			_, err := c.CompactContext(ctx, &messages.CompactContext{Mutation: mut(s), FrameID: root, Strategy: messages.Strategy{Kind: "magic"}})
			return err
		}, actors.ErrInvalidArgument},
		{"include unknown handle", func() error {
			_, err := c.AssembleContextPack(ctx, &messages.AssembleContextPack{Scope: s, FrameID: root, BudgetTokens: 5000, IncludeHandles: []string{"nope"}})
			return err
		}, actors.ErrHandleNotFound},
		{"request id with NUL", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Mutation: messages.Mutation{Scope: s, RequestID: "a\x00"}, Goal: "g"})
			return err
		}, actors.ErrInvalidArgument},
		{"invalid utf-8 content", func() error {
			_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Mutation: mut(s), FrameID: root, Priority: compaction.Low, Content: "\xc3\x28"})
			return err
		}, actors.ErrInvalidArgument},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			seq, v := e.seq(), e.version(s)
			err := tc.call()
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.want, "got %v", err)
			assert.Equal(t, seq, e.seq(), "global sequence unchanged")
			assert.Equal(t, v, e.version(s), "stream version unchanged")
		})
	}

	// The critical-overflow error names the tokens needed.
	_, err = c.AssembleContextPack(ctx, &messages.AssembleContextPack{Scope: s, FrameID: root, BudgetTokens: 600})
	var me *messages.Error
	require.ErrorAs(t, err, &me)
	assert.Greater(t, me.Needed, int64(750))
	assert.Contains(t, me.Message, "needs")
	ok, err := c.AssembleContextPack(ctx, &messages.AssembleContextPack{Scope: s, FrameID: root, BudgetTokens: me.Needed})
	require.NoError(t, err, "the budget it named is enough")
	assert.LessOrEqual(t, ok.TokenSummary.Used, me.Needed)
}
