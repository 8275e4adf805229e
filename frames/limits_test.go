package frames_test

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/frames"
)

// Every descendant counts against every ancestor's spawn limit: a root
// limited to one spawn has no grandchildren. A push over an ancestor's limit
// is refused, as one over the parent's own limit always was (spawns are
// refused before they happen; nothing is suspended).
func TestSpawnLimitCountsEveryDescendant(t *testing.T) {
	for _, tc := range []struct {
		name      string
		limit     int64
		allowed   []string // pushed in order: id/parent pairs
		refused   [2]string
		limitedBy string
	}{
		{"root limited to one has no grandchildren", 1, []string{"c", "r"}, [2]string{"g", "c"}, "r"},
		{"root limited to two: one grandchild, no great-grandchild", 2, []string{"c", "r", "g", "c"}, [2]string{"gg", "g"}, "r"},
		{"siblings' subtrees add up", 3, []string{"a", "r", "b", "r", "a1", "a"}, [2]string{"b1", "b"}, "r"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.must(&frames.PushFrame{Header: w.hdr(), FrameID: "r", Goal: "g", Budget: budget.TokenBudget{Total: 100},
				Limits: budget.Limits{Spawns: tc.limit}})
			for i := 0; i < len(tc.allowed); i += 2 {
				w.push(tc.allowed[i], tc.allowed[i+1], 0)
			}
			assert.Equal(t, tc.limit, w.s.Frame("r").Cost.Spawns, "the root counts every descendant")
			before := w.s.Clone()
			_, err := w.do(&frames.PushFrame{Header: w.hdr(), FrameID: tc.refused[0], ParentID: tc.refused[1], Goal: "g"})
			var v *budget.Violation
			require.ErrorAs(t, err, &v)
			assert.Equal(t, budget.SpawnsExceeded, v.Code)
			assert.Equal(t, tc.limit, v.Max)
			assert.Equal(t, tc.limit+1, v.Current)
			assert.Contains(t, err.Error(), `"`+tc.limitedBy+`"`, "the error names the ancestor whose limit holds")
			assert.Equal(t, before, w.s.Clone(), "a refused push changes nothing")
			assert.Equal(t, w.s.Clone(), w.replay())
		})
	}
}

// A frame's duration is its own: a child's recorded duration is never added
// to its parent's, so a parent's duration limit is not crossed by children.
func TestDurationIsEachFramesOwn(t *testing.T) {
	w := newWorld(t)
	w.must(&frames.PushFrame{Header: w.hdr(), FrameID: "r", Goal: "g", Budget: budget.TokenBudget{Total: 100},
		Limits: budget.Limits{DurationMillis: 1_000}})
	w.must(&frames.RecordUsage{Header: w.hdr(), FrameID: "r", Cost: budget.Cost{DurationMillis: 600}, Mint: w.mint()})
	for _, c := range []string{"a", "b"} {
		w.push(c, "r", 10)
		w.must(&frames.RecordUsage{Header: w.hdr(), FrameID: c, Cost: budget.Cost{DurationMillis: 900, Turns: 1}, Mint: w.mint()})
		evs := w.must(&frames.PopFrame{Header: w.hdr(), FrameID: c, Status: frames.StatusCompleted, Mint: w.mint()})
		require.Len(t, evs, 1, "no suspension of the parent")
		assert.Zero(t, evs[0].(*frames.FramePopped).ChargedCost.DurationMillis)
	}
	r := w.s.Frame("r")
	assert.Equal(t, int64(600), r.Cost.DurationMillis)
	assert.Equal(t, int64(2), r.Cost.Turns, "turns do roll up")
	assert.Equal(t, frames.StatusActive, r.Status)
}

// Lowering a limit below what the frame already consumed suspends it at
// once, with reason limit and the limit's code, current value and max.
func TestLoweringALimitBelowTheCostSuspends(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits budget.Limits
		code   budget.LimitCode
		cur    int64
	}{
		{"tokens", budget.Limits{Tokens: 50}, budget.TokensExceeded, 80},
		{"turns", budget.Limits{Turns: 1}, budget.TurnsExceeded, 2},
		{"spawns", budget.Limits{Spawns: 1}, budget.SpawnsExceeded, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.push("r", "", 1000)
			w.push("a", "r", 0)
			w.push("b", "a", 0)
			w.must(&frames.RecordUsage{Header: w.hdr(), FrameID: "r", Cost: budget.Cost{InputTokens: 80, Turns: 2}, Mint: w.mint()})
			m := w.mint()
			evs := w.must(&frames.UpdateFrame{Header: w.hdr(), FrameID: "r", Limits: &tc.limits, Mint: m})
			require.Len(t, evs, 2)
			r := w.s.Frame("r")
			require.Equal(t, frames.StatusSuspended, r.Status)
			assert.Equal(t, frames.SuspendLimit, r.Suspension.Reason)
			assert.Equal(t, m.TokenID, r.Suspension.TokenID)
			assert.Equal(t, &budget.Violation{Code: tc.code, Current: tc.cur, Max: r.Limits.Check(r.Cost).Max}, r.Suspension.Limit)
			assert.Equal(t, tc.limits, r.Limits)
			assert.Equal(t, w.s.Clone(), w.replay())
		})
	}

	t.Run("a limit still above the cost suspends nothing", func(t *testing.T) {
		w := newWorld(t)
		w.push("r", "", 100)
		w.must(&frames.RecordUsage{Header: w.hdr(), FrameID: "r", Cost: budget.Cost{InputTokens: 80}, Mint: w.mint()})
		evs := w.must(&frames.UpdateFrame{Header: w.hdr(), FrameID: "r", Limits: &budget.Limits{Tokens: 80}, Mint: w.mint()})
		assert.Len(t, evs, 1)
		assert.Equal(t, frames.StatusActive, w.s.Frame("r").Status)
	})
	t.Run("lowering with no token minted is refused whole", func(t *testing.T) {
		w := newWorld(t)
		w.push("r", "", 100)
		w.must(&frames.RecordUsage{Header: w.hdr(), FrameID: "r", Cost: budget.Cost{InputTokens: 80}, Mint: w.mint()})
		_, err := w.do(&frames.UpdateFrame{Header: w.hdr(), FrameID: "r", Limits: &budget.Limits{Tokens: 10}})
		assert.ErrorIs(t, err, frames.ErrInvalidID)
		assert.Equal(t, budget.Limits{}, w.s.Frame("r").Limits)
	})
	t.Run("an already suspended frame keeps its suspension", func(t *testing.T) {
		w := newWorld(t)
		w.push("r", "", 100)
		w.must(&frames.RecordUsage{Header: w.hdr(), FrameID: "r", Cost: budget.Cost{InputTokens: 80}, Mint: w.mint()})
		m := w.mint()
		w.must(&frames.SuspendFrame{Header: w.hdr(), FrameID: "r", Reason: frames.SuspendApproval, Mint: m})
		evs := w.must(&frames.UpdateFrame{Header: w.hdr(), FrameID: "r", Limits: &budget.Limits{Tokens: 10}, Mint: w.mint()})
		assert.Len(t, evs, 1)
		assert.Equal(t, m.TokenID, w.s.Frame("r").Suspension.TokenID)
	})
}

// Popping a frame with tool calls still open records each as abandoned: the
// frame.popped event lists them, the state marks them, and Pending reports
// them ever after.
func TestPopRecordsAbandonedToolCalls(t *testing.T) {
	w := newWorld(t)
	w.push("r", "", 100)
	w.push("c", "r", 10)
	w.push("g", "c", 5)
	w.must(&frames.StartToolCall{Header: w.hdr(), FrameID: "c", CallID: "call-open", Name: "search"})
	w.must(&frames.StartToolCall{Header: w.hdr(), FrameID: "c", CallID: "call-done", Name: "fetch"})
	w.must(&frames.StartToolCall{Header: w.hdr(), FrameID: "g", CallID: "call-deep", Name: "write"})
	w.must(&frames.FinishToolCall{Header: w.hdr(), FrameID: "c", CallID: "call-done",
		CallHandle:   frames.ContextHandle{ID: "hc", Priority: compaction.Medium, Content: "x", Tokens: 1},
		ResultHandle: frames.ContextHandle{ID: "hr", Priority: compaction.Medium, Content: "y", Tokens: 1}})

	evs := w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "c", Status: frames.StatusFailed, Cascade: true, Mint: w.mint()})
	require.Len(t, evs, 2)
	assert.Equal(t, []string{"call-deep"}, evs[0].(*frames.FramePopped).Abandoned)
	assert.Equal(t, []string{"call-open"}, evs[1].(*frames.FramePopped).Abandoned)

	assert.Nil(t, w.s.Frame("c"), "a finished frame leaves the projection")
	require.Len(t, w.s.Abandoned, 2, "its abandoned calls stay")
	assert.Equal(t, "g", w.s.Abandoned[0].FrameID)
	assert.Equal(t, "call-open", w.s.Abandoned[1].Call.ID)
	assert.Equal(t, frames.StatusFailed, w.s.Abandoned[1].Status)
	assert.True(t, w.s.Abandoned[1].Call.Abandoned)
	assert.Empty(t, w.s.Pending()[0].ToolCallID == "call-done")

	var abandoned []string
	for _, p := range w.s.Pending() {
		if p.Kind == frames.PendingToolAbandoned {
			abandoned = append(abandoned, p.FrameID+"/"+p.ToolCallID)
			assert.Contains(t, p.Description, "abandoned")
		}
	}
	assert.Equal(t, []string{"g/call-deep", "c/call-open"}, abandoned, "the order their frames finished in")
	assert.Equal(t, w.s.Clone(), w.replay())

	// An old frame.popped (no Abandoned field, no Final record) still
	// applies: the state marks the open calls all the same.
	s := frames.NewState("agent-1", 0)
	for _, e := range w.log {
		if p, ok := e.(*frames.FramePopped); ok {
			cp := *p
			cp.Abandoned, cp.Final = nil, nil
			e = &cp
		}
		require.NoError(t, frames.Apply(s, e))
	}
	assert.Equal(t, w.s.Clone(), s)

	// A frame.popped that names other calls than the open ones is refused.
	s = frames.NewState("agent-1", 0)
	for _, e := range w.log[:len(w.log)-2] {
		require.NoError(t, frames.Apply(s, e))
	}
	forged := *evs[0].(*frames.FramePopped)
	forged.Abandoned = []string{"call-other"}
	assert.ErrorIs(t, frames.Apply(s, &forged), frames.ErrInconsistentEvent)
}

// A frame can always be ended: a child whose settlement would overflow its
// parent's counters is popped (or cancelled by a cascade) with the parent's
// counters clamped at the largest int64 and the event marked Saturated.
func TestSettlementThatWouldOverflowSaturates(t *testing.T) {
	const huge = math.MaxInt64 - 10
	for _, tc := range []struct {
		name    string
		parent  budget.Cost // recorded on the parent first
		child   budget.Cost
		cascade bool // pop the parent with cascade instead of the child
	}{
		{"tokens", budget.Cost{InputTokens: 100}, budget.Cost{InputTokens: huge}, false},
		{"output tokens and turns", budget.Cost{OutputTokens: 20, Turns: 20}, budget.Cost{OutputTokens: huge, Turns: huge}, false},
		{"spend", budget.Cost{SpendMicros: 20}, budget.Cost{SpendMicros: huge}, false},
		{"cascade through a grandchild", budget.Cost{InputTokens: 100}, budget.Cost{InputTokens: huge}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.push("top", "", math.MaxInt64)
			w.push("r", "top", math.MaxInt64)
			w.push("c", "r", 10)
			w.must(&frames.RecordUsage{Header: w.hdr(), FrameID: "r", Cost: tc.parent, Mint: w.mint()})
			w.must(&frames.RecordUsage{Header: w.hdr(), FrameID: "c", Cost: tc.child, Mint: w.mint()})
			pop := &frames.PopFrame{Header: w.hdr(), FrameID: "c", Status: frames.StatusCompleted, Mint: w.mint()}
			if tc.cascade {
				pop = &frames.PopFrame{Header: w.hdr(), FrameID: "r", Status: frames.StatusCancelled, Cascade: true, Mint: w.mint()}
			}
			evs := w.must(pop)
			p := evs[0].(*frames.FramePopped)
			assert.True(t, p.Saturated, "the clamped settlement is recorded")
			assert.Equal(t, tc.child, p.ChargedCost, "the event keeps what the child really used")
			r := w.s.Frame("r")
			if tc.cascade { // r finished too: its record is in its pop
				require.Nil(t, r)
				fin := evs[1].(*frames.FramePopped).Final
				r = &frames.Frame{Cost: fin.Cost, Budget: fin.Budget}
			}
			sum, clamped := tc.parent.PlusSaturating(tc.child)
			require.True(t, clamped)
			sum.Spawns = 1 // its one child
			assert.Equal(t, sum, r.Cost)
			tokens, _ := tc.child.Tokens()
			want, _ := budget.AddSaturating(func() int64 { n, _ := tc.parent.Tokens(); return n }(), tokens)
			assert.Equal(t, want, r.Budget.Used)
			assert.Equal(t, w.s.Clone(), w.replay())

			// The whole tree can still be ended.
			if !tc.cascade {
				w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "r", Status: frames.StatusCompleted, Mint: w.mint()})
			}
			w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "top", Status: frames.StatusCompleted, Mint: w.mint()})
			assert.Empty(t, w.s.LiveFrames())
			assert.Equal(t, w.s.Clone(), w.replay())
		})
	}

	t.Run("a saturated pop must say so", func(t *testing.T) {
		w := newWorld(t)
		w.push("r", "", math.MaxInt64)
		w.push("c", "r", 10)
		w.must(&frames.RecordUsage{Header: w.hdr(), FrameID: "r", Cost: budget.Cost{InputTokens: 100}, Mint: w.mint()})
		w.must(&frames.RecordUsage{Header: w.hdr(), FrameID: "c", Cost: budget.Cost{InputTokens: huge}, Mint: w.mint()})
		evs := w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "c", Status: frames.StatusCompleted, Mint: w.mint()})
		s := frames.NewState("agent-1", 0)
		for _, e := range w.log[:len(w.log)-len(evs)] {
			require.NoError(t, frames.Apply(s, e))
		}
		quiet := *evs[0].(*frames.FramePopped)
		quiet.Saturated = false
		assert.ErrorIs(t, frames.Apply(s, &quiet), frames.ErrInconsistentEvent)
	})
}

// A suspended frame is live; starting a tool call on it is refused with a
// message that says it is suspended, under the same frame_not_live code.
func TestStartToolCallOnASuspendedFrame(t *testing.T) {
	w := newWorld(t)
	w.push("r", "", 100)
	w.must(&frames.SuspendFrame{Header: w.hdr(), FrameID: "r", Reason: frames.SuspendApproval, Mint: w.mint()})
	_, err := w.do(&frames.StartToolCall{Header: w.hdr(), FrameID: "r", CallID: "call", Name: "search"})
	require.ErrorIs(t, err, frames.ErrFrameSuspended)
	assert.ErrorIs(t, err, frames.ErrFrameNotLive, "same error class (and wire code) as before")
	assert.Contains(t, err.Error(), "suspended")
	assert.False(t, strings.Contains(err.Error(), "not live"), "%v", err)
}
