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

// chain pushes a root and depth-1 children under it, each with a long goal,
// and returns the deepest frame.
func chain(t *testing.T, c *actors.Client, scope string, depth int) string {
	t.Helper()
	parent := ""
	for i := 0; i < depth; i++ {
		r, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(scope), ParentID: parent,
			Goal: fmt.Sprintf("level %d: ", i) + strings.Repeat("investigate the failure ", 160), Budget: budget.TokenBudget{Total: 1 << 20}})
		require.NoError(t, err)
		parent = r.FrameID
	}
	return parent
}

// Only Critical content must fit a pack's budget: the brief and breadcrumbs
// yield to it (cut, then dropped), and a long role no longer makes a frame
// with no handles refuse every budget under the role's size.
func TestPackBriefAndBreadcrumbsYieldToCriticalContent(t *testing.T) {
	e := newEnv(t)
	c := e.c
	counter := compaction.EstimateCounter{}
	cases := []struct {
		name     string
		depth    int
		critical []int64 // tokens of each Critical handle ("abcd" repeated: no whitespace to trim)
		role     string
		budget   int64
	}{
		{"critical just under the budget, deep ancestry", 6, []int64{950}, "", 1000},
		{"critical equal to the budget", 3, []int64{600}, "", 600},
		{"several critical handles and a long role", 4, []int64{300, 300, 350}, strings.Repeat("reviewer ", 400), 1000},
		{"no handles, long role, minimum budget", 1, nil, strings.Repeat("r", 4000), actors.MinPackBudget},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			scope := fmt.Sprintf("yield-%d", i)
			frame := chain(t, c, scope, tc.depth)
			var ids []string
			for _, n := range tc.critical {
				ids = append(ids, addHandle(t, c, scope, frame, compaction.Critical, strings.Repeat("abcd", int(n))))
			}
			addHandle(t, c, scope, frame, compaction.Medium, strings.Repeat("medium context ", 100))
			pack, err := c.AssembleContextPack(ctx, &messages.AssembleContextPack{Header: messages.Header{Scope: scope}, FrameID: frame, BudgetTokens: tc.budget, Role: tc.role})
			require.NoError(t, err, "the Critical content alone fits")
			assert.LessOrEqual(t, recount(counter, pack), tc.budget)
			assert.Equal(t, recount(counter, pack), pack.TokenSummary.Used)
			in := map[string]bool{}
			for _, s := range pack.Segments {
				in[s.HandleID] = true
			}
			for _, id := range ids {
				assert.True(t, in[id], "critical handle %s in the pack", id)
			}
		})
	}
}

// critical_exceeds_budget names a budget that succeeds: asking again with
// Needed gives a pack, Needed covers the Critical tokens and is at least
// the minimum pack budget; and any budget that holds the Critical content
// succeeds too.
func TestPackCriticalOverflowNeededSucceeds(t *testing.T) {
	e := newEnv(t)
	c := e.c
	counter := compaction.EstimateCounter{}
	cases := []struct {
		name     string
		depth    int
		critical []int64
		toolCall bool // a Critical tool call and result too
		role     string
		budget   int64
	}{
		{"one large critical handle, deep ancestry", 6, []int64{3000}, false, "", 600},
		{"critical just over the budget", 2, []int64{1001}, false, "", 1000},
		{"critical tool call and handles, long role", 3, []int64{400, 400}, true, strings.Repeat("planner ", 450), 900},
		{"many small critical handles", 5, []int64{100, 100, 100, 100, 100, 100, 100, 100}, false, "", 700},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			scope := fmt.Sprintf("needed-%d", i)
			frame := chain(t, c, scope, tc.depth)
			var critTokens int64
			var ids []string
			for _, n := range tc.critical {
				ids = append(ids, addHandle(t, c, scope, frame, compaction.Critical, strings.Repeat("abcd", int(n))))
				critTokens += n
			}
			if tc.toolCall {
				st, err := c.StartToolCall(ctx, &messages.StartToolCall{Header: mut(scope), FrameID: frame, Name: "lookup"})
				require.NoError(t, err)
				fin, err := c.FinishToolCall(ctx, &messages.FinishToolCall{Header: mut(scope), FrameID: frame, CallID: st.CallID,
					Call: strings.Repeat("wxyz", 50), Output: strings.Repeat("efgh", 250), Priority: compaction.Critical})
				require.NoError(t, err)
				ids = append(ids, fin.CallHandleID, fin.ResultHandleID)
				critTokens += 300
			}
			addHandle(t, c, scope, frame, compaction.High, strings.Repeat("high context ", 200))
			_, err := c.AssembleContextPack(ctx, &messages.AssembleContextPack{Header: messages.Header{Scope: scope}, FrameID: frame, BudgetTokens: tc.budget, Role: tc.role})
			var me *messages.Error
			require.ErrorAs(t, err, &me)
			require.Equal(t, messages.CodeCriticalExceedsBudget, me.Code)
			assert.GreaterOrEqual(t, me.Needed, critTokens, "Needed covers the Critical content")
			assert.GreaterOrEqual(t, me.Needed, int64(actors.MinPackBudget))
			assert.Greater(t, me.Needed, tc.budget)

			for _, b := range []int64{me.Needed, max(critTokens, actors.MinPackBudget)} {
				pack, err := c.AssembleContextPack(ctx, &messages.AssembleContextPack{Header: messages.Header{Scope: scope}, FrameID: frame, BudgetTokens: b, Role: tc.role})
				require.NoError(t, err, "budget %d (Needed %d, critical %d)", b, me.Needed, critTokens)
				assert.LessOrEqual(t, recount(counter, pack), b)
				in := map[string]bool{}
				for _, s := range pack.Segments {
					in[s.HandleID] = true
				}
				for _, id := range ids {
					assert.True(t, in[id], "critical handle %s in the pack at budget %d", id, b)
				}
			}
		})
	}
}

// A tool call and its result are one unit in a pack: excluding either half
// leaves both out, including either half brings both in, and including one
// half while excluding the other is refused.
func TestPackToolCallHalvesTravelTogether(t *testing.T) {
	e := newEnv(t)
	c := e.c
	scope := "halves"
	frame := push(t, c, scope, "", 1<<20)
	for i := 0; i < 40; i++ {
		addHandle(t, c, scope, frame, compaction.Medium, fmt.Sprintf("note %d: ", i)+strings.Repeat("filler text ", 40))
	}
	st, err := c.StartToolCall(ctx, &messages.StartToolCall{Header: mut(scope), FrameID: frame, Name: "search"})
	require.NoError(t, err)
	fin, err := c.FinishToolCall(ctx, &messages.FinishToolCall{Header: mut(scope), FrameID: frame, CallID: st.CallID,
		Output: "found it", Priority: compaction.Low})
	require.NoError(t, err)
	call, result := fin.CallHandleID, fin.ResultHandleID
	segments := func(budget int64, include, exclude []string) map[string]bool {
		t.Helper()
		pack, err := c.AssembleContextPack(ctx, &messages.AssembleContextPack{Header: messages.Header{Scope: scope}, FrameID: frame, BudgetTokens: budget,
			IncludeHandles: include, ExcludeHandles: exclude})
		require.NoError(t, err)
		in := map[string]bool{}
		for _, s := range pack.Segments {
			in[s.HandleID] = true
		}
		return in
	}
	require.True(t, segments(100_000, nil, nil)[call], "the call is packed when nothing is excluded")

	for _, half := range []string{call, result} {
		in := segments(100_000, nil, []string{half})
		assert.False(t, in[call], "excluding %s leaves the call out", half)
		assert.False(t, in[result], "excluding %s leaves the result out", half)

		// Under a budget that makes compaction drop Low units, an included
		// half keeps the whole unit.
		in = segments(1000, []string{half}, nil)
		assert.True(t, in[call] && in[result], "including %s brings in both halves", half)
	}
	_, err = c.AssembleContextPack(ctx, &messages.AssembleContextPack{Header: messages.Header{Scope: scope}, FrameID: frame, BudgetTokens: 100_000,
		IncludeHandles: []string{call}, ExcludeHandles: []string{result}})
	assert.ErrorIs(t, err, actors.ErrInvalidArgument)
}

// Every string of a pack request meets the text rules of every other
// request: the role refuses NUL and invalid UTF-8, handle ids must be ids.
func TestPackRequestTextRules(t *testing.T) {
	e := newEnv(t)
	c := e.c
	frame := push(t, c, "text", "", 1<<20)
	for name, req := range map[string]*messages.AssembleContextPack{
		"role with NUL":          {Role: "rev\x00iewer"},
		"role not UTF-8":         {Role: "rev\xffiewer"},
		"excluded id with space": {ExcludeHandles: []string{"a b"}},
		"included id with NUL":   {IncludeHandles: []string{"a\x00"}},
	} {
		t.Run(name, func(t *testing.T) {
			req.Scope, req.FrameID, req.BudgetTokens = "text", frame, 1000
			_, err := c.AssembleContextPack(ctx, req)
			assert.ErrorIs(t, err, actors.ErrInvalidArgument)
		})
	}
}

// A compaction that removes nothing still records its request id: a resend
// after more context was added answers the original reply and removes
// nothing, also after a restart; the id with another request is refused.
func TestNoOpCompactionRecordsItsRequestID(t *testing.T) {
	e := newEnv(t)
	c := e.c
	scope := "noop"
	frame := push(t, c, scope, "", 1<<20)
	addHandle(t, c, scope, frame, compaction.Medium, "a small note")
	req := &messages.CompactContext{Header: messages.Header{Scope: scope, RequestID: "compact-once"}, FrameID: frame, TargetTokens: 1000,
		Strategy: messages.Strategy{Kind: messages.StrategyPriorityBased}}
	before := e.version(scope)
	first, err := c.CompactContext(ctx, req)
	require.NoError(t, err)
	assert.Zero(t, first.ItemsRemoved)
	assert.Empty(t, first.SummaryID)
	assert.Equal(t, before+1, e.version(scope), "the no-op compaction is recorded")
	assert.Equal(t, before+1, first.Version)

	for i := 0; i < 30; i++ {
		addHandle(t, c, scope, frame, compaction.Low, fmt.Sprintf("later note %d: ", i)+strings.Repeat("more context ", 20))
	}
	handles := len(e.readFrame(scope).Frame.Handles)
	for _, restart := range []bool{false, true} {
		if restart {
			e.restart()
			c = e.c
		}
		v := e.version(scope)
		again, err := c.CompactContext(ctx, req)
		require.NoError(t, err)
		require.NotNil(t, again.Pressure)
		assert.Equal(t, e.readFrame(scope).Frame.ContextTokens, again.Pressure.Tokens, "pressure is the frame's as it stands")
		orig := *first
		orig.Pressure = again.Pressure
		assert.Equal(t, &orig, again, "a resend answers the original reply (restart %v)", restart)
		assert.Equal(t, v, e.version(scope), "and appends nothing")
		assert.Len(t, e.readFrame(scope).Frame.Handles, handles, "and removes nothing")
	}
	other := *req
	other.TargetTokens = 10
	_, err = c.CompactContext(ctx, &other)
	assert.ErrorIs(t, err, actors.ErrRequestIDReused)
	assert.Len(t, e.readFrame(scope).Frame.Handles, handles)
}

// The protocol's strategy kinds are the core's: the shell passes them through.
func TestStrategyKindsAreTheCores(t *testing.T) {
	assert.Equal(t, frames.StrategyPriorityBased, messages.StrategyPriorityBased)
	assert.Equal(t, frames.StrategySummarizeOldest, messages.StrategySummarizeOldest)
	assert.Equal(t, frames.StrategyTruncateAt, messages.StrategyTruncateAt)
	assert.Equal(t, frames.StrategyCustom, messages.StrategyCustom)
}
