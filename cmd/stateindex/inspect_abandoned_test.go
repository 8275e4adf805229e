package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/internal/views"
	"github.com/stateindex/stateindex/messages"
)

// A frame popped with a tool call still open shows the call as abandoned.
func TestInspectListsAbandonedToolCalls(t *testing.T) {
	dir := t.TempDir()
	withServer(t, dir, func(c *actors.Client, ctx context.Context) {
		m := messages.Header{Scope: "agent-8"}
		root, err := c.PushFrame(ctx, &messages.PushFrame{Header: m, Goal: "plan", Budget: budget.TokenBudget{Total: 100}})
		require.NoError(t, err)
		child, err := c.PushFrame(ctx, &messages.PushFrame{Header: m, ParentID: root.FrameID, Goal: "pay", Budget: budget.TokenBudget{Total: 10}})
		require.NoError(t, err)
		_, err = c.StartToolCall(ctx, &messages.StartToolCall{Header: m, FrameID: child.FrameID, CallID: "call-pay-1", Name: "charge_card"})
		require.NoError(t, err)
		_, err = c.PopFrame(ctx, &messages.PopFrame{Header: m, FrameID: child.FrameID, Status: frames.StatusFailed})
		require.NoError(t, err)
	})
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"inspect", "--data", dir}, &out, &errb), errb.String())
	assert.Regexp(t, `└─ \w+ failed .*1 tool call\(s\) abandoned: charge_card call-pay-1  "pay"`, out.String())
	assert.Contains(t, out.String(), "pending 1", "the abandoned call is pending work")
}

// On a store servers share, inspect names the owner and epoch that
// recorded each tool call in doubt or abandoned (DESIGN §13).
func TestInspectNamesTheOwnerOfACallInDoubt(t *testing.T) {
	store := eventstore.NewMemory()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	defer sys.Shutdown()
	cfg := actors.DefaultConfig()
	cfg.TokenKey, cfg.Logger, cfg.Owner = bytes.Repeat([]byte{7}, 32), quiet, "member-a#1"
	srv, err := actors.Start(sys, store, cfg)
	require.NoError(t, err)
	ctx := context.Background()
	c, m := srv.Client(), messages.Header{Scope: "agent-9"}
	root, err := c.PushFrame(ctx, &messages.PushFrame{Header: m, Goal: "plan", Budget: budget.TokenBudget{Total: 100}})
	require.NoError(t, err)
	child, err := c.PushFrame(ctx, &messages.PushFrame{Header: m, ParentID: root.FrameID, Goal: "pay", Budget: budget.TokenBudget{Total: 10}})
	require.NoError(t, err)
	_, err = c.StartToolCall(ctx, &messages.StartToolCall{Header: m, FrameID: root.FrameID, CallID: "call-fetch", Name: "fetch"})
	require.NoError(t, err)
	_, err = c.StartToolCall(ctx, &messages.StartToolCall{Header: m, FrameID: child.FrameID, CallID: "call-pay-1", Name: "charge_card"})
	require.NoError(t, err)
	_, err = c.PopFrame(ctx, &messages.PopFrame{Header: m, FrameID: child.FrameID, Status: frames.StatusFailed})
	require.NoError(t, err)
	srv.Stop()

	st, err := eventstore.LoadAll(ctx, store, "agent-9", 0)
	require.NoError(t, err)
	var out bytes.Buffer
	printScope(&out, views.TreeFromState(st))
	assert.Contains(t, out.String(), "1 tool call(s) in doubt: fetch call-fetch by member-a#1 epoch 1")
	assert.Contains(t, out.String(), "1 tool call(s) abandoned: charge_card call-pay-1 by member-a#1 epoch 1")
}
