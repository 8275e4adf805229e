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

// summarize_oldest counts each handle that left the context once: the
// summary's handles as summarized, none of them again as removed.
func TestCompactionCountsEachHandleOnce(t *testing.T) {
	for _, tc := range []struct {
		name                string
		strategy            messages.Strategy
		removed, summarized int
	}{
		{"summarize oldest", messages.Strategy{Kind: messages.StrategySummarizeOldest, KeepRecent: 4}, 0, 8},
		{"truncate", messages.Strategy{Kind: messages.StrategyTruncateAt, MessageCount: 4}, 8, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			root := push(t, e.c, "s", "", 100_000)
			for i := 0; i < 12; i++ {
				addHandle(t, e.c, "s", root, compaction.Medium, fmt.Sprintf("Step %d wrote /tmp/out-%d.json with 42 rows.", i, i))
			}
			req := &messages.CompactContext{Header: mut("s"), FrameID: root, TargetTokens: 200, Strategy: tc.strategy}
			req.RequestID = "compact-1"
			r, err := e.c.CompactContext(ctx, req)
			require.NoError(t, err)
			assert.Len(t, r.Removed, 8)
			assert.Equal(t, tc.removed, r.ItemsRemoved)
			assert.Equal(t, tc.summarized, r.ItemsSummarized)
			assert.Equal(t, len(r.Removed), r.ItemsRemoved+r.ItemsSummarized)

			// The reply rebuilt for a repeated request id says the same.
			again, err := e.c.CompactContext(ctx, req)
			require.NoError(t, err)
			assert.Equal(t, r, again)
		})
	}
}

// Lowering a limit below the frame's cost suspends it at once; the reply
// carries the token, which resumes it.
func TestUpdateFrameLoweringALimitSuspends(t *testing.T) {
	e := newEnv(t)
	root := push(t, e.c, "s", "", 1000)
	_, err := e.c.RecordUsage(ctx, &messages.RecordUsage{Header: mut("s"), FrameID: root, Cost: budget.Cost{InputTokens: 80, Turns: 3}})
	require.NoError(t, err)

	r, err := e.c.UpdateFrame(ctx, &messages.UpdateFrame{Header: mut("s"), FrameID: root, Limits: &budget.Limits{Turns: 2}})
	require.NoError(t, err)
	require.NotNil(t, r.Suspension, "suspended at once")
	assert.Equal(t, frames.SuspendLimit, r.Suspension.Reason)
	assert.Equal(t, &budget.Violation{Code: budget.TurnsExceeded, Current: 3, Max: 2}, r.Suspension.Limit)
	assert.Equal(t, root, r.Suspension.FrameID)

	g, err := e.c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: "s"}, FrameID: root})
	require.NoError(t, err)
	assert.Equal(t, frames.StatusSuspended, g.Frame.Status)

	_, err = e.c.ResumeFrame(ctx, &messages.ResumeFrame{Header: mut("s"), Token: r.Suspension.Token})
	require.NoError(t, err)

	r, err = e.c.UpdateFrame(ctx, &messages.UpdateFrame{Header: mut("s"), FrameID: root, Limits: &budget.Limits{Turns: 10}})
	require.NoError(t, err)
	assert.Nil(t, r.Suspension, "a limit above the cost suspends nothing")
}

// A root limited to one spawn has no grandchildren.
func TestSpawnLimitCoversGrandchildren(t *testing.T) {
	e := newEnv(t)
	r, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: mut("s"), Goal: "root", Budget: budget.TokenBudget{Total: 100},
		Limits: budget.Limits{Spawns: 1}})
	require.NoError(t, err)
	child := push(t, e.c, "s", r.FrameID, 10)
	_, err = e.c.PushFrame(ctx, &messages.PushFrame{Header: mut("s"), ParentID: child, Goal: "grandchild"})
	require.ErrorIs(t, err, actors.ErrLimitExceeded)
	assert.Contains(t, err.Error(), string(budget.SpawnsExceeded))
}

// Tool calls open when their frame is popped are abandoned, and ResumeActor
// reports them, also after a restart.
func TestPoppedFramesOpenToolCallsAreReported(t *testing.T) {
	e := newEnv(t)
	root := push(t, e.c, "s", "", 100)
	child := push(t, e.c, "s", root, 10)
	sc, err := e.c.StartToolCall(ctx, &messages.StartToolCall{Header: mut("s"), FrameID: child, Name: "send_email"})
	require.NoError(t, err)
	_, err = e.c.PopFrame(ctx, &messages.PopFrame{Header: mut("s"), FrameID: child, Status: frames.StatusFailed})
	require.NoError(t, err)

	for _, restart := range []bool{false, true} {
		if restart {
			e.restart()
		}
		st, err := e.c.ResumeActor(ctx, &messages.ResumeActor{Header: messages.Header{Scope: "s"}})
		require.NoError(t, err)
		var found []frames.PendingWork
		for _, p := range st.PendingWork {
			if p.Kind == frames.PendingToolAbandoned {
				found = append(found, p)
			}
		}
		require.Len(t, found, 1, "restart %v", restart)
		assert.Equal(t, child, found[0].FrameID)
		assert.Equal(t, sc.CallID, found[0].ToolCallID)
		assert.Contains(t, found[0].Description, "send_email")
	}
}

// StartToolCall on a suspended frame: frame_not_live, saying "suspended".
func TestStartToolCallOnSuspendedFrameSaysSuspended(t *testing.T) {
	e := newEnv(t)
	root := push(t, e.c, "s", "", 100)
	_, err := e.c.SuspendFrame(ctx, &messages.SuspendFrame{Header: mut("s"), FrameID: root, Reason: frames.SuspendApproval})
	require.NoError(t, err)
	_, err = e.c.StartToolCall(ctx, &messages.StartToolCall{Header: mut("s"), FrameID: root, Name: "search"})
	require.ErrorIs(t, err, actors.ErrFrameNotLive)
	assert.Contains(t, err.Error(), "suspended")
	assert.False(t, strings.Contains(err.Error(), "not live"), "%v", err)
}

// A token is accepted in one spelling only: changing the bits of the last
// base64 character that the encoding does not carry makes it invalid.
func TestSuspensionTokenHasOneSpelling(t *testing.T) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	e := newEnv(t)
	root := push(t, e.c, "s", "", 100)
	tok, err := e.c.SuspendFrame(ctx, &messages.SuspendFrame{Header: mut("s"), FrameID: root, Reason: frames.SuspendApproval})
	require.NoError(t, err)

	respell := func(s string) string {
		last := strings.IndexByte(alphabet, s[len(s)-1])
		require.GreaterOrEqual(t, last, 0)
		return s[:len(s)-1] + string(alphabet[last^1]) // flips a bit past the data
	}
	payload, mac, ok := strings.Cut(tok.Token, ".")
	require.True(t, ok)
	require.NotZero(t, len(mac)%4, "the 32-byte MAC leaves spare bits in its last character")
	variants := map[string]string{"mac": payload + "." + respell(mac),
		"line break": payload[:4] + "\n" + payload[4:] + "." + mac, "carriage return": payload + "." + mac[:3] + "\r" + mac[3:]}
	if len(payload)%4 != 0 {
		variants["payload"] = respell(payload) + "." + mac
	}
	for name, v := range variants {
		t.Run(name, func(t *testing.T) {
			require.NotEqual(t, tok.Token, v)
			_, err := e.c.ResumeFrame(ctx, &messages.ResumeFrame{Header: mut("s"), Token: v})
			assert.ErrorIs(t, err, actors.ErrTokenInvalid)
		})
	}
	_, err = e.c.ResumeFrame(ctx, &messages.ResumeFrame{Header: mut("s"), Token: tok.Token})
	require.NoError(t, err, "the token as issued still resumes")
}
