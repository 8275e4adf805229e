package actors_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/messages"
)

// recount counts a pack as emitted, under the counter it was built with.
func recount(c compaction.Counter, p *messages.ContextPack) int64 {
	n := c.Count(p.BriefContext)
	for _, b := range p.Breadcrumbs {
		n += c.Count(b.Text)
	}
	for _, s := range p.Segments {
		n += c.Count(s.Content)
	}
	return n
}

// Every pack returned, recounted, fits its budget and says so truthfully;
// Critical content is always in it; a tool call never travels without its
// result.
func TestPropertyPacksNeverExceedBudget(t *testing.T) {
	sys := quietSystem()
	defer sys.Shutdown()
	cfg := testConfig(newFakeClock())
	srv, err := actors.Start(sys, eventstore.NewMemory(), cfg)
	require.NoError(t, err)
	defer srv.Stop()
	c := srv.Client()
	counter := compaction.EstimateCounter{}
	var n atomic.Int64

	rapid.Check(t, func(rt *rapid.T) {
		scope := fmt.Sprintf("prop-%d", n.Add(1))
		p, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(scope), Goal: rapid.StringMatching(`[a-zA-Z0-9 .é中]{0,300}`).Draw(rt, "goal"), Budget: budget.TokenBudget{Total: 1 << 20}})
		if err != nil {
			rt.Fatalf("push: %v", err)
		}
		frame := p.FrameID
		if rapid.Bool().Draw(rt, "nest") {
			q, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(scope), ParentID: frame, Goal: strings.Repeat("sub ", rapid.IntRange(0, 100).Draw(rt, "subgoal"))})
			if err != nil {
				rt.Fatalf("push child: %v", err)
			}
			frame = q.FrameID
		}
		critical := map[string]bool{}
		var ids []string
		for i, k := 0, rapid.IntRange(0, 40).Draw(rt, "handles"); i < k; i++ {
			prio := compaction.Priority(rapid.IntRange(1, 5).Draw(rt, "prio"))
			size := rapid.IntRange(0, 3000).Draw(rt, "size")
			content := strings.Repeat("word ", size/5) + fmt.Sprintf(" id-%d path/to/file%d.go  \n\n  tail", i, i)
			if rapid.IntRange(0, 5).Draw(rt, "tool") == 0 {
				st, err := c.StartToolCall(ctx, &messages.StartToolCall{Header: mut(scope), FrameID: frame, Name: "tool"})
				if err != nil {
					rt.Fatalf("start tool: %v", err)
				}
				if _, err := c.FinishToolCall(ctx, &messages.FinishToolCall{Header: mut(scope), FrameID: frame, CallID: st.CallID, Output: content, Priority: prio}); err != nil {
					rt.Fatalf("finish tool: %v", err)
				}
				continue
			}
			h, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut(scope), FrameID: frame, Priority: prio, Content: content})
			if err != nil {
				rt.Fatalf("add: %v", err)
			}
			ids = append(ids, h.HandleID)
			if prio == compaction.Critical {
				critical[h.HandleID] = true
			}
		}
		req := &messages.AssembleContextPack{Header: messages.Header{Scope: scope}, FrameID: frame, BudgetTokens: rapid.Int64Range(500, 6000).Draw(rt, "budget"),
			MinCompaction: compaction.Level(rapid.IntRange(0, 4).Draw(rt, "minlevel"))}
		if len(ids) > 0 && rapid.Bool().Draw(rt, "hints") {
			req.IncludeHandles = []string{rapid.SampledFrom(ids).Draw(rt, "include")}
			if x := rapid.SampledFrom(ids).Draw(rt, "exclude"); x != req.IncludeHandles[0] && !critical[x] {
				req.ExcludeHandles = []string{x}
			}
		}
		pack, err := c.AssembleContextPack(ctx, req)
		if err != nil {
			var me *messages.Error
			if !errorsAs(err, &me) || me.Code != messages.CodeCriticalExceedsBudget || me.Needed <= req.BudgetTokens {
				rt.Fatalf("assemble: %v", err)
			}
			return
		}
		got := recount(counter, pack)
		if got > req.BudgetTokens || got != pack.TokenSummary.Used {
			rt.Fatalf("pack recounts to %d, says %d, budget %d", got, pack.TokenSummary.Used, req.BudgetTokens)
		}
		if pack.TokenSummary.Remaining != req.BudgetTokens-got {
			rt.Fatalf("remaining %d", pack.TokenSummary.Remaining)
		}
		in := map[string]bool{}
		groups := map[string]int{}
		for _, s := range pack.Segments {
			in[s.HandleID] = true
			if s.Group != "" {
				groups[s.Group]++
			}
		}
		for id := range critical {
			if !in[id] {
				rt.Fatalf("critical handle %s left out", id)
			}
		}
		for g, k := range groups {
			if k != 2 {
				rt.Fatalf("tool call %s split: %d of 2 in pack", g, k)
			}
		}
	})
}
