package frames_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/frames"
)

// counterWorld: two live frames with handles (one a tool call's pair), and
// a finished frame whose handles no longer count.
func counterWorld(t *testing.T) *world {
	w := newWorld(t)
	w.push("root", "", 100_000)
	w.push("done", "root", 1000)
	w.addHandle("done", "gone", "finished")
	w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "done", Status: frames.StatusCompleted})
	w.push("child", "root", 10_000)
	w.addHandle("root", "r1", "alpha")
	w.addHandle("root", "r2", "beta")
	w.addHandle("child", "c1", "gamma")
	return w
}

func allCounts() []frames.HandleCount {
	return []frames.HandleCount{
		{Frame: "root", Handle: "r1", Tokens: 7, Light: 6},
		{Frame: "root", Handle: "r2", Tokens: 11, Light: 11},
		{Frame: "child", Handle: "c1", Tokens: 5},
	}
}

func TestChangeCounterRecountsEveryLiveHandle(t *testing.T) {
	w := counterWorld(t)
	assert.Equal(t, frames.EstimateCounterName, w.s.CounterOf(), `"" reads as the estimate`)
	evs := w.must(&frames.ChangeCounter{Header: w.hdr(), To: "o200k_base", Counts: allCounts()})
	require.Len(t, evs, 1)
	e := evs[0].(*frames.CounterChanged)
	assert.Equal(t, frames.TypeCounterChanged, e.EventType())
	assert.Equal(t, frames.EstimateCounterName, e.From)
	assert.Equal(t, "o200k_base", e.To)
	assert.Equal(t, "o200k_base", w.s.Counter)
	root, child := w.s.Frame("root"), w.s.Frame("child")
	assert.Equal(t, int64(18), root.ContextTokens)
	assert.Equal(t, int64(5), child.ContextTokens)
	assert.Equal(t, int64(7), root.Handle("r1").Tokens)
	assert.Equal(t, int64(6), root.Handle("r1").LightTokens)
	assert.Equal(t, w.s.Clone(), w.replay().Clone(), "replay folds to the same state")

	// Back to the estimate: "estimate" is its alias.
	w.must(&frames.ChangeCounter{Header: w.hdr(), To: "estimate", Counts: allCounts()})
	assert.Equal(t, frames.EstimateCounterName, w.s.CounterOf())
}

func TestChangeCounterRefusesIncompleteCounts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		to     string
		counts func([]frames.HandleCount) []frames.HandleCount
		want   string
	}{
		{"a live handle without a count", "o200k_base", func(c []frames.HandleCount) []frames.HandleCount { return c[:2] },
			`live handle "c1" of frame "child" has no count`},
		{"a handle counted twice", "o200k_base", func(c []frames.HandleCount) []frames.HandleCount { return append(c, c[0]) },
			`handle "r1" of frame "root" counted twice`},
		{"a handle of a finished frame", "o200k_base", func(c []frames.HandleCount) []frames.HandleCount {
			return append(c, frames.HandleCount{Frame: "done", Handle: "gone"})
		}, `handle "gone" of frame "done" is not a live handle`},
		{"an unknown handle", "o200k_base", func(c []frames.HandleCount) []frames.HandleCount {
			return append(c, frames.HandleCount{Frame: "root", Handle: "nope"})
		}, `handle "nope" of frame "root" is not a live handle`},
		{"a negative count", "o200k_base", func(c []frames.HandleCount) []frames.HandleCount { c[1].Tokens = -1; return c },
			`negative count`},
		{"the counter it has", "estimate_bytes_div_4", func(c []frames.HandleCount) []frames.HandleCount { return c },
			`already counted under "estimate_bytes_div_4"`},
		{"an unprintable name", "o200k base", func(c []frames.HandleCount) []frames.HandleCount { return c }, `counter name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := counterWorld(t)
			before := w.s.Clone()
			_, err := w.do(&frames.ChangeCounter{Header: w.hdr(), To: tc.to, Counts: tc.counts(allCounts())})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Equal(t, before, w.s.Clone(), "nothing changed")
		})
	}
}

func TestCounterChangedIsCheckedOnReplay(t *testing.T) {
	w := counterWorld(t)
	ev := &frames.CounterChanged{Meta: frames.Meta{Scope: w.s.Scope, At: 5000}, From: "o200k_base", To: "cl100k_base", Counts: allCounts()}
	require.ErrorIs(t, frames.Apply(w.s.Clone(), ev), frames.ErrInconsistentEvent, "from a counter the scope is not under")
	ev.From, ev.Counts = "", allCounts()[:1]
	require.ErrorIs(t, frames.Apply(w.s.Clone(), ev), frames.ErrInconsistentEvent, "missing counts")
	typ, err := frames.NewEvent(frames.TypeCounterChanged)
	require.NoError(t, err)
	assert.IsType(t, &frames.CounterChanged{}, typ)
}

func TestHandlesAddedAfterAChangeKeepTheirCounts(t *testing.T) {
	w := counterWorld(t)
	w.must(&frames.ChangeCounter{Header: w.hdr(), To: "o200k_base", Counts: allCounts()})
	w.must(&frames.AddContextHandle{Header: w.hdr(), FrameID: "child", Handle: frames.ContextHandle{ID: "c2", Kind: "text",
		Priority: compaction.Low, Content: "delta", Tokens: 3}})
	assert.Equal(t, int64(8), w.s.Frame("child").ContextTokens)
	assert.Len(t, w.s.LiveHandles(), 4)
	assert.True(t, w.s.HasLiveHandles())
}
