package actors_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/messages"
)

// A handle carries its role into the log, the frame and the pack; a tool
// call's handles are the assistant's and the tool's; an unknown role is
// refused and changes nothing; a handle without one reads as unknown.
func TestHandleRoles(t *testing.T) {
	e := newEnv(t)
	const scope = "roles"
	h := messages.Header{Scope: scope}
	p, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "chat"})
	require.NoError(t, err)
	for _, r := range []string{"system", "user", "assistant", ""} {
		_, err := e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, FrameID: p.FrameID, HandleID: "h-" + r, Role: r, Priority: compaction.Medium, Content: "said by " + r})
		require.NoError(t, err)
	}
	call, err := e.c.StartToolCall(ctx, &messages.StartToolCall{Header: h, FrameID: p.FrameID, Name: "grep"})
	require.NoError(t, err)
	_, err = e.c.FinishToolCall(ctx, &messages.FinishToolCall{Header: h, FrameID: p.FrameID, CallID: call.CallID, Output: "3 matches"})
	require.NoError(t, err)

	before := e.version(scope)
	for _, bad := range []string{"User", "developer", "tool\x00"} {
		_, err := e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, FrameID: p.FrameID, Role: bad, Priority: compaction.Medium, Content: "x"})
		require.ErrorIs(t, err, actors.ErrInvalidArgument, bad)
		require.ErrorContains(t, err, "handle role")
	}
	require.Equal(t, before, e.version(scope), "a refused role writes nothing")

	e.restart() // roles come back from the log
	f, err := e.c.GetFrame(ctx, &messages.GetFrame{Header: h, FrameID: p.FrameID, WithHandles: true})
	require.NoError(t, err)
	roles := map[string]string{}
	for _, hd := range f.Frame.Handles {
		roles[hd.ID] = string(hd.Role)
		if hd.Kind == "tool_call" || hd.Kind == "tool_result" {
			roles[hd.Kind] = string(hd.Role)
		}
	}
	require.Equal(t, "system", roles["h-system"])
	require.Equal(t, "user", roles["h-user"])
	require.Equal(t, "assistant", roles["h-assistant"])
	require.Equal(t, "", roles["h-"], "no role reads as unknown")
	require.Equal(t, "assistant", roles["tool_call"])
	require.Equal(t, "tool", roles["tool_result"])

	pack, err := e.c.AssembleContextPack(ctx, &messages.AssembleContextPack{Header: h, FrameID: p.FrameID, BudgetTokens: 4000})
	require.NoError(t, err)
	got := map[string]string{}
	for _, s := range pack.Segments {
		got[s.HandleID] = s.Role
	}
	require.Equal(t, "user", got["h-user"])
	require.Equal(t, "system", got["h-system"])
}
