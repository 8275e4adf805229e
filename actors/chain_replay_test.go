package actors_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/messages"
)

// A frame continued before any usage was recorded carries a zero cost on:
// its event omits it (omitempty drops a pointer to a zero budget.Cost),
// and the log must still replay. Found by the crash storm: the scope was
// store_failed after a restart.
func TestContinuationWithoutCostReplays(t *testing.T) {
	e := newEnv(t)
	h := messages.Header{Scope: "z"}
	r, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "g", Budget: budget.TokenBudget{Total: 1000}, ContextWindow: 1000})
	require.NoError(t, err)
	for i := 0; i < 8; i++ {
		_, err := e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, FrameID: r.FrameID, Role: "user", Priority: compaction.Low, Content: strings.Repeat("x", 400)})
		require.NoError(t, err)
	}
	_, err = e.c.ContinueFrame(ctx, &messages.ContinueFrame{Header: h, FrameID: r.FrameID, ResumeCeiling: 100})
	require.NoError(t, err)
	e.restart()
	chain, err := e.c.GetChain(ctx, &messages.GetChain{Header: h, FrameID: r.FrameID})
	require.NoError(t, err, "the log replays")
	require.Len(t, chain.Links, 2)
	head, err := e.c.GetFrame(ctx, &messages.GetFrame{Header: h, FrameID: chain.Head})
	require.NoError(t, err)
	require.True(t, head.Frame.Cost.IsZero())
	require.Equal(t, r.FrameID, head.Frame.ContinuedFrom)
}
