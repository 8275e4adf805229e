package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/frames"
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
