package frames_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/frames"
)

// For any frame and budget, AssemblePack either returns a pack within the
// budget holding every Critical handle, or — only when the Critical content
// alone exceeds the budget — critical_exceeds_budget with a Needed that
// succeeds. It never changes the state.
func TestPropertyAssemblePackNeededSucceeds(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		w := newWorld(t)
		parent := ""
		for d, n := 0, rapid.IntRange(1, 6).Draw(rt, "depth"); d < n; d++ {
			id := fmt.Sprintf("f%d", d)
			w.must(&frames.PushFrame{Header: w.hdr(), FrameID: id, ParentID: parent,
				Goal: strings.Repeat("goal words ", rapid.IntRange(0, 350).Draw(rt, "goal")), Budget: budget.TokenBudget{Total: 1 << 30}})
			parent = id
		}
		var critical int64
		var critIDs []string
		for i, n := 0, rapid.IntRange(0, 12).Draw(rt, "handles"); i < n; i++ {
			prio := compaction.Priority(rapid.IntRange(1, 5).Draw(rt, "prio"))
			content := strings.Repeat("abcd", rapid.IntRange(1, 400).Draw(rt, "size"))
			id := fmt.Sprintf("h%d", i)
			w.must(&frames.AddContextHandle{Header: w.hdr(), FrameID: parent, Handle: frames.ContextHandle{
				ID: id, Kind: "text", Priority: prio, Content: content, Tokens: int64(len(content) / 4), LightTokens: int64(len(content) / 4)}})
			if prio == compaction.Critical {
				critical += int64(len(content) / 4)
				critIDs = append(critIDs, id)
			}
		}
		q := frames.PackQuery{Budget: rapid.Int64Range(frames.MinPackBudget, 3000).Draw(rt, "budget"),
			Role: strings.Repeat("role ", rapid.IntRange(0, 800).Draw(rt, "role"))}
		var buf frames.PackBuffers
		before := w.s.Clone()
		p, err := frames.AssemblePack(w.cfg, w.s, q, &buf)
		require.True(t, reflect.DeepEqual(before, w.s.Clone()), "AssemblePack changed the state")
		if err != nil {
			var coe *compaction.CriticalOverflowError
			require.True(t, errors.As(err, &coe), "%v", err)
			require.Greater(t, critical, q.Budget, "refused although the Critical content fits")
			require.GreaterOrEqual(t, coe.Needed, critical)
			q.Budget = coe.Needed
			p, err = frames.AssemblePack(w.cfg, w.s, q, &buf)
			require.NoError(t, err, "Needed %d does not succeed", coe.Needed)
		}
		c := compaction.EstimateCounter{}
		used := c.Count(p.Brief)
		for _, b := range p.Breadcrumbs {
			used += c.Count(b.Text)
		}
		in := map[string]bool{}
		for _, s := range p.Segments {
			used += c.Count(s.Content)
			in[s.ID] = true
		}
		require.Equal(t, used, p.Used)
		require.LessOrEqual(t, used, q.Budget)
		for _, id := range critIDs {
			require.True(t, in[id], "critical %s left out", id)
		}
	})
}

func TestAssemblePackRefusals(t *testing.T) {
	w := newWorld(t)
	w.push("r", "", 1000)
	cases := []struct {
		name string
		q    frames.PackQuery
		want error
	}{
		{"budget under the minimum", frames.PackQuery{FrameID: "r", Budget: frames.MinPackBudget - 1}, frames.ErrBudgetTooSmall},
		{"role with NUL", frames.PackQuery{FrameID: "r", Budget: 1000, Role: "a\x00"}, frames.ErrInvalidArgument},
		{"role not UTF-8", frames.PackQuery{FrameID: "r", Budget: 1000, Role: "\xc3"}, frames.ErrInvalidArgument},
		{"role too large", frames.PackQuery{FrameID: "r", Budget: 1000, Role: strings.Repeat("x", 5000)}, frames.ErrTooLarge},
		{"bad level", frames.PackQuery{FrameID: "r", Budget: 1000, MinLevel: 9}, frames.ErrInvalidArgument},
		{"unknown include", frames.PackQuery{FrameID: "r", Budget: 1000, Include: []string{"nope"}}, frames.ErrHandleNotFound},
		{"unknown frame", frames.PackQuery{FrameID: "x", Budget: 1000}, frames.ErrFrameNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := frames.AssemblePack(w.cfg, w.s, tc.q, nil)
			assert.ErrorIs(t, err, tc.want)
		})
	}
}

// A compaction that finds nothing to remove is an event: Apply accepts it
// and changes nothing but the version and the request window.
func TestNoOpCompactionIsRecorded(t *testing.T) {
	w := newWorld(t)
	w.push("r", "", 1000)
	w.must(&frames.AddContextHandle{Header: w.hdr(), FrameID: "r", Handle: frames.ContextHandle{ID: "h", Kind: "text", Priority: compaction.Low, Content: "x", Tokens: 1}})
	hdr := w.hdr()
	cmd, err := frames.PlanCompaction(w.cfg, w.s, hdr, frames.CompactionQuery{Target: 100, SummaryID: "sum"})
	require.NoError(t, err)
	assert.Empty(t, cmd.Removed)
	assert.Nil(t, cmd.Summary)
	handles := w.s.Frame("r").Clone().Handles
	evs := w.must(cmd)
	require.Len(t, evs, 1)
	assert.Equal(t, handles, w.s.Frame("r").Clone().Handles)
	rec, ok, err := w.s.Request(hdr.RequestID)
	require.NoError(t, err)
	require.True(t, ok, "the request id is remembered")
	assert.Equal(t, w.s.Version, rec.LastVersion)
	assert.True(t, reflect.DeepEqual(w.s.Clone(), w.replay().Clone()))
}
