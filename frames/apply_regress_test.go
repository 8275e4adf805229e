package frames_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/frames"
)

// Regression tests for what FuzzApply found: events Decide never makes,
// which Apply used to accept into a state that breaks an invariant (a
// corrupt or forged log would have replayed without an error). Apply now
// refuses each with ErrInconsistentEvent and leaves the state unchanged.
func TestApplyRefusesEventsFoundByFuzzing(t *testing.T) {
	m := func(frame string) frames.Meta { return frames.Meta{Scope: "fuzz", Frame: frame, At: 5, RequestID: "q"} }
	base := func(t *testing.T) *frames.State {
		s := frames.NewState("fuzz", 0)
		require.NoError(t, frames.Apply(s, &frames.FramePushed{Meta: m("root"), Goal: "g",
			Budget: budget.TokenBudget{Total: 1000, MaxSubframeDepth: 1}}))
		require.NoError(t, frames.Apply(s, &frames.FramePushed{Meta: m("child"), ParentID: "root", Goal: "g", Depth: 1,
			Budget: budget.TokenBudget{Total: 10, MaxSubframeDepth: 1}}))
		require.NoError(t, frames.CheckInvariants(s))
		return s
	}
	for _, tc := range []struct {
		name string
		ev   frames.Event
	}{
		{"pushed with a subcall allocation and no children (d37304d0ca937174)", &frames.FramePushed{Meta: m("f1"), Goal: "g",
			Budget: budget.TokenBudget{Total: 432, SubcallAllocation: 288}}},
		{"pushed with tokens already used", &frames.FramePushed{Meta: m("f1"), Goal: "g",
			Budget: budget.TokenBudget{Total: 432, Used: 5}}},
		{"pushed deeper than the parent allows", &frames.FramePushed{Meta: m("f1"), ParentID: "child", Goal: "g", Depth: 2,
			Budget: budget.TokenBudget{Total: 1}}},
		{"usage that records spawns (fa96eeca1668a0fc)", &frames.UsageRecorded{Meta: m("child"),
			Cost: budget.Cost{InputTokens: 432, Spawns: 432}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base(t)
			before := s.Clone()
			err := frames.Apply(s, tc.ev)
			require.ErrorIs(t, err, frames.ErrInconsistentEvent)
			assert.Equal(t, before, s.Clone(), "state unchanged")
			require.NoError(t, frames.CheckInvariants(s))
		})
	}
}
