package frames_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/frames"
)

func (w *world) with(id string) frames.ContinueWith {
	return frames.ContinueWith{Mint: frames.ContinueMint{FrameID: id, SegmentID: id + "-seg", SummaryID: id + "-sum"}}
}

// add adds a handle of tokens bytes*4 (estimate) with role and priority.
func (w *world) add(frame, id string, role frames.Role, prio compaction.Priority, tokens int) {
	w.t.Helper()
	content := strings.Repeat("abcd", tokens)
	w.must(&frames.AddContextHandle{Header: w.hdr(), FrameID: frame, Handle: frames.ContextHandle{
		ID: id, Kind: "text", Role: role, Priority: prio, Content: content, Tokens: int64(tokens)}})
}

func pushWindow(w *world, id, parent string, total, window int64) {
	w.t.Helper()
	w.must(&frames.PushFrame{Header: w.hdr(), FrameID: id, ParentID: parent, Goal: "goal " + id,
		Budget: budget.TokenBudget{Total: total}, ContextWindow: window})
}

func handleIDs(f *frames.Frame) []string {
	var out []string
	for _, h := range f.Handles {
		out = append(out, h.ID)
	}
	return out
}

func TestContextWindowInheritsAndPressure(t *testing.T) {
	w := newWorld(t)
	pushWindow(w, "root", "", 100_000, 10_000)
	w.push("child", "root", 1_000)
	pushWindow(w, "own", "root", 1_000, 500)
	assert.Equal(t, int64(10_000), w.s.Frame("child").ContextWindow, "0 inherits the parent's")
	assert.Equal(t, int64(500), w.s.Frame("own").ContextWindow)

	w2 := newWorld(t)
	w2.push("plain", "", 1_000)
	f := w2.s.Frame("plain")
	assert.Zero(t, f.ContextWindow, "a root with none keeps none")
	assert.Equal(t, frames.DefaultContextWindow, frames.Window(w2.cfg, f), "and reads the default")
	w2.add("plain", "h1", frames.RoleUser, compaction.Medium, 50_000)
	assert.Equal(t, frames.Pressure{Tokens: 50_000, Window: 200_000, Permille: 250}, frames.PressureOf(w2.cfg, f))

	_, err := w.do(&frames.PushFrame{Header: w.hdr(), FrameID: "neg", Budget: budget.TokenBudget{Total: 1}, ContextWindow: -1})
	assert.ErrorIs(t, err, budget.ErrNegativeAmount)
}

// chainWorld: root (window 1000) with a child "a" holding a conversation.
func chainWorld(t *testing.T) *world {
	w := newWorld(t)
	pushWindow(w, "root", "", 100_000, 1_000)
	w.push("a", "root", 10_000)
	w.add("a", "sys", frames.RoleSystem, compaction.Critical, 20)
	for i := 0; i < 8; i++ {
		w.add("a", fmt.Sprintf("u%d", i), frames.RoleUser, compaction.Medium, 40)
		w.add("a", fmt.Sprintf("r%d", i), frames.RoleAssistant, compaction.Medium, 40)
	}
	w.must(&frames.RecordUsage{Header: w.hdr(), FrameID: "a", Cost: budget.Cost{InputTokens: 300, OutputTokens: 100, Turns: 3, SpendMicros: 9}})
	return w
}

func TestContinueFrameCarriesAndLinks(t *testing.T) {
	w := chainWorld(t)
	rootBefore := w.s.Frame("root").Clone()
	a := w.s.Frame("a").Clone()
	// A tool call whose result is the most recent: carried together; one still in doubt.
	w.must(&frames.StartToolCall{Header: w.hdr(), FrameID: "a", CallID: "c1", Name: "grep"})
	w.must(&frames.FinishToolCall{Header: w.hdr(), FrameID: "a", CallID: "c1",
		CallHandle:   frames.ContextHandle{ID: "c1-call", Kind: frames.ToolCallKind, Role: frames.RoleAssistant, Priority: compaction.Medium, Content: "grep(x)", Tokens: 30},
		ResultHandle: frames.ContextHandle{ID: "c1-out", Kind: frames.ToolResultKind, Role: frames.RoleTool, Priority: compaction.Medium, Content: "found /src/main.go:42", Tokens: 30}})
	w.must(&frames.StartToolCall{Header: w.hdr(), FrameID: "a", CallID: "c2", Name: "deploy"})
	before := w.s.Frame("a").ContextTokens

	evs := w.must(&frames.ContinueFrame{Header: w.hdr(), FrameID: "a", ResumeCeiling: 200, With: w.with("b")})
	pop := evs[0].(*frames.FramePopped)
	assert.Equal(t, frames.StatusContinued, pop.Status)
	assert.Equal(t, "b", pop.ContinuedTo)
	assert.Equal(t, a.Budget.Total, pop.Released, "the allocation moves: handed back, taken again by the push")
	assert.Zero(t, pop.ChargedTokens, "and nothing rolled up")
	assert.True(t, pop.ChargedCost.IsZero())
	require.NotNil(t, pop.Final)
	assert.Equal(t, "b", pop.Final.ContinuedTo)
	assert.Equal(t, "a", pop.Final.ChainRoot)
	push := evs[1].(*frames.FramePushed)
	assert.Equal(t, "a", push.ContinuedFrom)
	assert.Equal(t, "a", push.ChainRoot)
	assert.Equal(t, "root", push.ParentID, "a sibling")

	b := w.s.Frame("b")
	require.NotNil(t, b)
	assert.Nil(t, w.s.Frame("a"), "the continued link left the projection")
	assert.Equal(t, a.Depth, b.Depth)
	assert.Equal(t, a.Budget.Total, b.Budget.Total)
	assert.Equal(t, a.Budget.Used, b.Budget.Used, "continuing never resets tokens")
	assert.Equal(t, a.Cost, b.Cost, "nor turns or spend")
	root := w.s.Frame("root")
	assert.Equal(t, rootBefore.Budget.SubcallAllocation, root.Budget.SubcallAllocation, "the allocation is not doubled")
	assert.Equal(t, rootBefore.Cost, root.Cost, "nothing rolled up into the parent")
	assert.Equal(t, frames.StatusWaiting, root.Status)

	ids := handleIDs(b)
	require.GreaterOrEqual(t, len(ids), 4)
	assert.Equal(t, []string{"b-seg", "b-sum", "sys"}, ids[:3], "segment, summary, the critical handle")
	// 200 tokens of trailing: the tool call pair (60), r7 (40), u7 (40): starts at a user's.
	assert.Equal(t, []string{"u7", "r7", "c1-call", "c1-out"}, ids[3:])
	seg := b.Handle("b-seg")
	assert.Equal(t, compaction.Critical, seg.Priority)
	assert.Equal(t, frames.RoleSystem, seg.Role)
	assert.Contains(t, seg.Content, "continued from frame a at "+fmt.Sprint(before)+" tokens")
	assert.Contains(t, seg.Content, "SearchChain")
	sum := b.Handle("b-sum")
	assert.True(t, strings.HasPrefix(sum.Content, frames.SummaryFraming), "framed as state, not instructions")
	// The in-doubt call moved: in doubt on b, not abandoned anywhere the projection lists.
	require.Len(t, b.InDoubt(), 1)
	assert.Equal(t, "c2", b.InDoubt()[0].ID)
	var pending []string
	for _, p := range w.s.Pending() {
		pending = append(pending, string(p.Kind)+":"+p.FrameID+":"+p.ToolCallID)
	}
	assert.Equal(t, []string{"waiting_for_subcall:root:", "tool_in_doubt:b:c2"}, pending, "named once, where it can still finish")
	assert.Equal(t, []string{"c2"}, pop.Abandoned, "the old link's record shows it handed over")

	// The chain.
	head, err := w.s.ChainHead("a")
	require.NoError(t, err)
	assert.Equal(t, "b", head)
	links, rootID, err := w.s.ChainLinks("b")
	require.NoError(t, err)
	assert.Equal(t, "a", rootID)
	require.Len(t, links, 2)
	assert.Equal(t, frames.StatusContinued, links[0].Status)
	assert.Equal(t, before, links[0].Tokens)
	assert.Equal(t, "b", links[0].To)
	assert.Equal(t, frames.StatusActive, links[1].Status)

	// The in-doubt call can still be finished on b; replay rebuilds the same state.
	w.must(&frames.FinishToolCall{Header: w.hdr(), FrameID: "b", CallID: "c2",
		CallHandle:   frames.ContextHandle{ID: "c2-call", Kind: frames.ToolCallKind, Priority: compaction.Medium, Content: "deploy()", Tokens: 3},
		ResultHandle: frames.ContextHandle{ID: "c2-out", Kind: frames.ToolResultKind, Priority: compaction.Medium, Content: "ok", Tokens: 1}})
	assert.Equal(t, w.s.Clone(), w.replay().Clone())

	// A second continuation extends the chain; the head is found from any link.
	w.add("b", "more", frames.RoleUser, compaction.Medium, 10)
	_, err = w.do(&frames.ContinueFrame{Header: w.hdr(), FrameID: "b", ResumeCeiling: 50, Summary: frames.NoSummary, With: w.with("c")})
	require.NoError(t, err)
	for _, id := range []string{"a", "b", "c"} {
		h, err := w.s.ChainHead(id)
		require.NoError(t, err)
		assert.Equal(t, "c", h, id)
	}
	assert.Nil(t, w.s.Frame("c").Handle("c-sum"), "Summary none: no summary")
}

func TestContinuedFrameRefusesMutations(t *testing.T) {
	w := chainWorld(t)
	w.must(&frames.ContinueFrame{Header: w.hdr(), FrameID: "a", ResumeCeiling: 100, With: w.with("b")})
	cmds := map[string]frames.Command{
		"add":      &frames.AddContextHandle{Header: w.hdr(), FrameID: "a", Handle: frames.ContextHandle{ID: "x", Kind: "text", Priority: compaction.Low}},
		"usage":    &frames.RecordUsage{Header: w.hdr(), FrameID: "a", Cost: budget.Cost{Turns: 1}, Mint: w.mint()},
		"pop":      &frames.PopFrame{Header: w.hdr(), FrameID: "a", Status: frames.StatusCompleted},
		"continue": &frames.ContinueFrame{Header: w.hdr(), FrameID: "a", With: w.with("z")},
		"push":     &frames.PushFrame{Header: w.hdr(), FrameID: "kid", ParentID: "a", Budget: budget.TokenBudget{Total: 1}},
		"resume":   &frames.ResumeFrame{Header: w.hdr(), FrameID: "a", TokenID: "t"},
		"suspend":  &frames.SuspendFrame{Header: w.hdr(), FrameID: "a", Reason: frames.SuspendApproval, Mint: w.mint()},
	}
	for name, cmd := range cmds {
		t.Run(name, func(t *testing.T) {
			v := w.s.Version
			_, err := w.do(cmd)
			require.ErrorIs(t, err, frames.ErrFrameContinued)
			var ce *frames.ContinuedError
			require.True(t, errors.As(err, &ce))
			assert.Equal(t, "b", ce.Head, "the error names the head")
			assert.Equal(t, v, w.s.Version, "nothing written")
		})
	}
	_, err := frames.PlanCompaction(w.cfg, w.s, w.hdr(), frames.CompactionQuery{FrameID: "a", Target: 10, Strategy: frames.StrategySpec{Kind: "priority_based"}})
	assert.ErrorIs(t, err, frames.ErrFrameContinued)
}

func TestContinueFrameBadInputs(t *testing.T) {
	w := chainWorld(t)
	w.push("kid", "a", 100)
	_, err := w.do(&frames.ContinueFrame{Header: w.hdr(), FrameID: "a", With: w.with("b")})
	assert.ErrorIs(t, err, frames.ErrLiveChildren, "a frame with live children")
	w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "kid", Status: frames.StatusCompleted})

	_, err = w.do(&frames.ContinueFrame{Header: w.hdr(), FrameID: "nope", With: w.with("b")})
	assert.ErrorIs(t, err, frames.ErrFrameNotFound)
	_, err = w.do(&frames.ContinueFrame{Header: w.hdr(), FrameID: "a", With: frames.ContinueWith{}})
	assert.ErrorIs(t, err, frames.ErrInvalidID, "ids not minted")
	_, err = w.do(&frames.ContinueFrame{Header: w.hdr(), FrameID: "a", ResumeCeiling: -1, With: w.with("b")})
	assert.ErrorIs(t, err, budget.ErrNegativeAmount)
	_, err = w.do(&frames.ContinueFrame{Header: w.hdr(), FrameID: "a", With: w.with("root")})
	assert.ErrorIs(t, err, frames.ErrDuplicateID, "an id in use")

	// A suspended frame is resumed first (its token and limit would be lost).
	w.must(&frames.SuspendFrame{Header: w.hdr(), FrameID: "a", Reason: frames.SuspendApproval, Mint: w.mint()})
	_, err = w.do(&frames.ContinueFrame{Header: w.hdr(), FrameID: "a", With: w.with("b")})
	assert.ErrorIs(t, err, frames.ErrFrameSuspended)
}

func TestRefusalRule(t *testing.T) {
	t.Run("CheckFreed", func(t *testing.T) {
		for _, c := range []struct {
			prev          []int64
			freed, window int64
			ok            bool
		}{
			{nil, 50, 1000, true},
			{nil, 49, 1000, false}, // under 5%
			{nil, 0, 1000, false},
			{[]int64{300}, 200, 1000, true},
			{[]int64{300, 200}, 200, 1000, false}, // twice in a row no more
			{[]int64{300, 200}, 201, 1000, true},
			{[]int64{200, 300}, 100, 1000, true}, // the one before grew
			{nil, 1, 0, true},                    // no window: only the trend
		} {
			err := frames.CheckFreed(c.prev, c.freed, c.window)
			if c.ok {
				assert.NoError(t, err, "%+v", c)
			} else {
				assert.ErrorIs(t, err, frames.ErrIneffective, "%+v", c)
			}
		}
	})
	t.Run("continuation frees too little", func(t *testing.T) {
		w := newWorld(t)
		pushWindow(w, "a", "", 10_000, 100_000)
		w.add("a", "u", frames.RoleUser, compaction.Medium, 100)
		v := w.s.Version
		_, err := w.do(&frames.ContinueFrame{Header: w.hdr(), FrameID: "a", With: w.with("b")})
		require.ErrorIs(t, err, frames.ErrIneffective)
		assert.Contains(t, err.Error(), "less than 5%")
		assert.Equal(t, v, w.s.Version)
	})
	t.Run("compaction with a window", func(t *testing.T) {
		w := newWorld(t)
		pushWindow(w, "a", "", 10_000, 1_000)
		for i := 0; i < 20; i++ {
			w.add("a", fmt.Sprint("h", i), frames.RoleUser, compaction.Low, 10)
		}
		compact := func(ids ...string) error {
			_, err := w.do(&frames.CompactContext{Header: w.hdr(), FrameID: "a", Strategy: "priority_based", Removed: ids})
			return err
		}
		require.NoError(t, compact("h0", "h1", "h2", "h3", "h4", "h5"))                      // 60
		require.NoError(t, compact("h6", "h7", "h8", "h9", "h10"))                           // 50: no more than before, once
		assert.ErrorIs(t, compact("h11", "h12", "h13", "h14", "h15"), frames.ErrIneffective) // 50 again: twice in a row
		assert.ErrorIs(t, compact("h11"), frames.ErrIneffective, "under 5%")
		require.NoError(t, compact("h11", "h12", "h13", "h14", "h15", "h16"), "more than the attempt before")
		assert.Equal(t, []int64{50, 60}, w.s.Frame("a").Freed)
		assert.Equal(t, w.s.Clone(), w.replay().Clone())
	})
	t.Run("compaction without a window is not held to it", func(t *testing.T) {
		w := newWorld(t)
		w.push("a", "", 10_000)
		w.add("a", "h", frames.RoleUser, compaction.Low, 1)
		_, err := w.do(&frames.CompactContext{Header: w.hdr(), FrameID: "a", Strategy: "priority_based", Removed: []string{"h"}})
		require.NoError(t, err)
	})
}

func TestAutomaticContinuation(t *testing.T) {
	w := newWorld(t)
	w.cfg.ContinueAt = 900
	w.cfg.ResumeCeiling = 300
	pushWindow(w, "a", "", 100_000, 1_000)
	with := w.with("b")
	add := func(id string, tokens int, cw *frames.ContinueWith) []frames.Event {
		return w.must(&frames.AddContextHandle{Header: w.hdr(), FrameID: "a", Handle: frames.ContextHandle{
			ID: id, Kind: "text", Role: frames.RoleUser, Priority: compaction.Medium, Content: strings.Repeat("x", tokens*4), Tokens: int64(tokens)}, Continue: cw})
	}
	for i := 0; i < 8; i++ {
		require.Len(t, add(fmt.Sprint("h", i), 100, &with), 1, "under the threshold")
	}
	evs := add("h8", 100, &with) // 900 of 1000
	require.Greater(t, len(evs), 3)
	assert.IsType(t, &frames.HandleAdded{}, evs[0])
	assert.Equal(t, "a", evs[0].EventMeta().Frame, "the handle lands on the old link first")
	pop := evs[1].(*frames.FramePopped)
	assert.Equal(t, "b", pop.ContinuedTo)
	b := w.s.Frame("b")
	require.NotNil(t, b)
	assert.NotNil(t, b.Handle("h8"), "the handle that crossed the threshold is carried")
	assert.Less(t, frames.PressureOf(w.cfg, b).Permille, int64(900))

	// Off without Continue (the shell sends it only when configured), and when refused.
	w2 := newWorld(t)
	w2.cfg.ContinueAt = 500
	pushWindow(w2, "a", "", 100_000, 1_000)
	w2.must(&frames.AddContextHandle{Header: w2.hdr(), FrameID: "a", Handle: frames.ContextHandle{ID: "crit", Kind: "text",
		Priority: compaction.Critical, Content: "c", Tokens: 600}, Continue: &with})
	assert.NotNil(t, w2.s.Frame("a"), "a continuation that frees nothing (all critical) is skipped")
	assert.Contains(t, frames.AutoContinueSkipped(w2.cfg, w2.s, "a", with), "less than 5%")
	assert.Empty(t, frames.AutoContinueSkipped(w.cfg, w.s, "b", with), "under the threshold")
}

func TestResumeChain(t *testing.T) {
	w := chainWorld(t)
	w.must(&frames.ContinueFrame{Header: w.hdr(), FrameID: "a", ResumeCeiling: 100, With: w.with("b")})
	resume := func(chain string, head *frames.Frame, b budget.TokenBudget, id string) ([]frames.Event, error) {
		return w.do(&frames.ResumeChain{Header: w.hdr(), ChainID: chain, Head: head, Message: "API key fixed. Retry.", MessageID: id + "-msg",
			Budget: b, With: w.with(id)})
	}
	_, err := resume("a", nil, budget.TokenBudget{}, "c")
	assert.ErrorIs(t, err, frames.ErrChainRunning, "a running chain is refused")
	_, err = resume("nope", nil, budget.TokenBudget{}, "c")
	assert.ErrorIs(t, err, frames.ErrFrameNotFound)

	bHead := w.s.Frame("b").Clone()
	w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "b", Status: frames.StatusFailed})
	bHead.Status, bHead.CompletedAt = frames.StatusFailed, w.now
	rootAlloc := w.s.Frame("root").Budget.SubcallAllocation
	evs, err := resume("a", bHead, budget.TokenBudget{}, "c")
	require.NoError(t, err)
	push := evs[0].(*frames.FramePushed)
	assert.Equal(t, "b", push.ContinuedFrom)
	assert.Equal(t, "root", push.ParentID, "a sibling while the parent is live")
	c := w.s.Frame("c")
	assert.Equal(t, rootAlloc+bHead.Budget.Total, w.s.Frame("root").Budget.SubcallAllocation, "allocated anew")
	last := c.Handles[len(c.Handles)-1]
	assert.Equal(t, frames.RoleUser, last.Role)
	assert.Equal(t, "API key fixed. Retry.", last.Content)
	links, _, err := w.s.ChainLinks("a")
	require.NoError(t, err)
	require.Len(t, links, 3)
	assert.Equal(t, frames.StatusFailed, links[1].Status)
	assert.Equal(t, "c", links[1].To)

	// The parent finished: a new root, which needs a budget.
	w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "c", Status: frames.StatusCompleted})
	cHead := c.Clone()
	cHead.Status = frames.StatusCompleted
	w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "root", Status: frames.StatusCompleted})
	_, err = resume("b", cHead, budget.TokenBudget{}, "d")
	require.ErrorIs(t, err, frames.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "needs a budget")
	_, err = resume("b", cHead, budget.TokenBudget{Total: 5_000}, "d")
	require.NoError(t, err)
	d := w.s.Frame("d")
	assert.Empty(t, d.ParentID)
	assert.Equal(t, int64(5_000), d.Budget.Total)
	assert.Equal(t, w.s.Clone(), w.replay().Clone())

	// A frame in no chain resumes as a new chain's root.
	w.push("solo", "", 100)
	solo := w.s.Frame("solo").Clone()
	w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "solo", Status: frames.StatusCancelled})
	solo.Status = frames.StatusCancelled
	_, err = resume("solo", solo, budget.TokenBudget{Total: 100}, "solo2")
	require.NoError(t, err)
	h, err := w.s.ChainHead("solo")
	require.NoError(t, err)
	assert.Equal(t, "solo2", h)
	assert.Equal(t, w.s.Clone(), w.replay().Clone())
}

func TestChainCycleIsAnErrorNotAHang(t *testing.T) {
	s := frames.NewState("s", 0)
	s.Chains = map[string]*frames.Chain{"a": {Root: "a", Head: "c", Links: []frames.ChainLink{
		{ID: "a", To: "b"}, {ID: "b", To: "a"}, {ID: "c"}}}}
	s.LinkRoots = map[string]string{"a": "a", "b": "a", "c": "a"}
	_, _, err := s.ChainLinks("b")
	assert.ErrorIs(t, err, frames.ErrChainCorrupt)
	s.Chains["a"].Links[1].To = "zz"
	_, _, err = s.ChainLinks("b")
	assert.ErrorIs(t, err, frames.ErrChainCorrupt, "a dangling pointer")
	s.LinkRoots["x"] = "gone"
	_, err = s.ChainHead("x")
	assert.ErrorIs(t, err, frames.ErrChainCorrupt)
}

// BenchmarkDecideContinue: deciding (planning) and applying a continuation
// of a frame of 10,000 handles of ~200 tokens, in the core alone.
func BenchmarkDecideContinue(b *testing.B) {
	s := frames.NewState("bench", 0)
	cfg := frames.DefaultConfig()
	now := int64(1)
	apply := func(cmd frames.Command) []frames.Event {
		evs, err := frames.Decide(cfg, s, cmd)
		require.NoError(b, err)
		for _, e := range evs {
			require.NoError(b, frames.Apply(s, e))
		}
		return evs
	}
	hdr := func() frames.Header { now++; return frames.Header{Now: now} }
	apply(&frames.PushFrame{Header: hdr(), FrameID: "f", Budget: budget.TokenBudget{Total: 1 << 30}, ContextWindow: 4_000_000})
	for i := 0; i < 10_000; i++ {
		role := frames.RoleAssistant
		if i%5 == 0 {
			role = frames.RoleUser
		}
		content := fmt.Sprintf("Observation %d: the build of service-%d took %d s; logs in /var/log/build/%d.log. ", i, i%37, i%9, i) + strings.Repeat("Nothing changed since the previous run. ", 18)
		apply(&frames.AddContextHandle{Header: hdr(), FrameID: "f", Handle: frames.ContextHandle{ID: fmt.Sprint("h", i), Kind: "text", Role: role,
			Priority: compaction.Medium, Content: content, Tokens: int64(len(content) / 4)}})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := fmt.Sprint("c", i)
		evs, err := frames.Decide(cfg, s, &frames.ContinueFrame{Header: hdr(), FrameID: "f",
			With: frames.ContinueWith{Mint: frames.ContinueMint{FrameID: id, SegmentID: id + "s", SummaryID: id + "m"}}})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(len(evs)), "events")
	}
}

// The README's bounds of a continuation: with no ResumeCeiling the default
// (16,000 tokens) bounds what trails; the summary takes at most a quarter of
// the ceiling; a link's summary in its chain is at most
// MaxLinkSummaryBytes.
func TestContinuationBounds(t *testing.T) {
	w := newWorld(t)
	pushWindow(w, "a", "", 1_000_000, 200_000)
	goal := strings.Repeat("a goal that goes on and on ", 100)
	w.must(&frames.UpdateFrame{Header: w.hdr(), FrameID: "a", Goal: &goal, Mint: w.mint()})
	for i := 0; i < 400; i++ {
		role := frames.RoleUser
		if i%2 == 1 {
			role = frames.RoleAssistant
		}
		w.add("a", fmt.Sprintf("h%03d", i), role, compaction.Medium, 400) // 160,000 tokens in all
	}
	evs := w.must(&frames.ContinueFrame{Header: w.hdr(), FrameID: "a", With: w.with("b")})
	var trailing, summary int64
	for _, ev := range evs {
		if e, ok := ev.(*frames.HandleAdded); ok {
			switch {
			case e.Handle.ID == "b-sum":
				summary = e.Handle.Tokens
			case strings.HasPrefix(e.Handle.ID, "h"):
				trailing += e.Handle.Tokens
			}
		}
	}
	assert.Equal(t, int64(frames.DefaultResumeCeiling), int64(16_000))
	assert.LessOrEqual(t, trailing, int64(frames.DefaultResumeCeiling), "the trailing handles fit the default ceiling")
	assert.Greater(t, trailing, int64(frames.DefaultResumeCeiling)-800, "and fill it to within two handles")
	assert.Positive(t, summary)
	assert.LessOrEqual(t, summary, int64(frames.DefaultResumeCeiling)/4, "a summary takes at most a quarter of the ceiling")
	links, _, err := w.s.ChainLinks("b")
	require.NoError(t, err)
	require.Len(t, links, 2)
	assert.LessOrEqual(t, len(links[0].Summary), frames.MaxLinkSummaryBytes)
	assert.Contains(t, links[0].Summary, "a goal that goes on")
	assert.Contains(t, links[0].Summary, "…; continued at", "the long goal is cut, marked")
}

// A head whose records a recorded retention removes is not resumed: a
// resume between a removal's record and its deletion would name a link
// whose history is going (HeadEnd comes from the store's index). A head in
// no chain is what the state cannot bury itself.
func TestResumeChainOfARemovedHead(t *testing.T) {
	w := chainWorld(t)
	w.push("x", "root", 1_000)
	w.add("x", "x1", frames.RoleUser, compaction.Medium, 10)
	xHead := w.s.Frame("x").Clone()
	w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "x", Status: frames.StatusCompleted})
	xHead.Status, xHead.CompletedAt = frames.StatusCompleted, w.now
	end := w.s.Version // x's frame.popped
	w.must(&frames.ApplyRetention{Header: w.hdr(), Through: end, Hash: strings.Repeat("ab", 32), Runs: 1, Why: "test"})
	before := w.s.Version
	resume := func(headEnd int64) error {
		_, err := w.do(&frames.ResumeChain{Header: w.hdr(), ChainID: "x", Head: xHead, HeadEnd: headEnd, Message: "again", MessageID: "m",
			With: w.with("c")})
		return err
	}
	err := resume(end)
	require.ErrorIs(t, err, frames.ErrFrameNotFound)
	assert.Contains(t, err.Error(), "which retention removes")
	assert.Equal(t, before, w.s.Version, "nothing written")
	require.NoError(t, resume(end+1), "a head that ends after the cut resumes")
}
