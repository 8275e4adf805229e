package frames_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/frames"
)

func TestPlanRetention(t *testing.T) {
	// Ten runs of ten records each (versions 10k+1..10k+10), finished at
	// times 100, 200, ... 1000; a live root's records are interleaved.
	var runs []frames.Run
	for k := range 10 {
		runs = append(runs, frames.Run{Frame: string(rune('a' + k)), First: int64(10*k + 1), Last: int64(10*k + 10), FinishedAt: int64(100 * (k + 1))})
	}
	in := func(p frames.RetentionPolicy) frames.RetentionInput {
		return frames.RetentionInput{Policy: p, Now: 1000, Head: 105, Runs: runs}
	}
	for _, c := range []struct {
		name     string
		in       frames.RetentionInput
		through  int64
		removed  int
		keptRuns int
	}{
		{"keep the last 3, no age", in(frames.RetentionPolicy{KeepLastN: 3, OnCompletion: frames.CompletionDelete}), 70, 7, 3},
		{"keep the last 3, and what finished within 450", in(frames.RetentionPolicy{KeepLastN: 3, OlderThan: 450, OnCompletion: frames.CompletionArchive}), 50, 5, 5},
		// The last run finished at Now: not more than 0 ago, so it stays.
		{"keep none", in(frames.RetentionPolicy{OnCompletion: frames.CompletionDelete}), 90, 9, 1},
		{"keep none, a moment later", func() frames.RetentionInput {
			i := in(frames.RetentionPolicy{OnCompletion: frames.CompletionDelete})
			i.Now++
			return i
		}(), 105, 10, 0},
		{"keep everything", in(frames.RetentionPolicy{KeepLastN: 3, OnCompletion: frames.CompletionKeep}), 0, 0, 0},
		{"a link of a live chain holds the rest (run d of chain a)", func() frames.RetentionInput {
			i := in(frames.RetentionPolicy{KeepLastN: 1, OnCompletion: frames.CompletionDelete})
			i.Runs = append([]frames.Run(nil), runs...)
			i.Runs[3].Chains = []string{"d", "a"}
			i.LiveChains = map[string]bool{"a": true}
			return i
		}(), 0, 0, 3}, // a (the chain's root), d and the last
		{"a live chain's root holds the rest (run c is chain c's root)", func() frames.RetentionInput {
			i := in(frames.RetentionPolicy{KeepLastN: 1, OnCompletion: frames.CompletionDelete})
			i.LiveChains = map[string]bool{"c": true}
			return i
		}(), 20, 2, 2},
		{"a finished chain goes like any run", func() frames.RetentionInput {
			i := in(frames.RetentionPolicy{KeepLastN: 1, OnCompletion: frames.CompletionDelete})
			i.Runs = append([]frames.Run(nil), runs...)
			i.Runs[3].Chains = []string{"d", "a"}
			i.LiveChains = map[string]bool{"z": true}
			return i
		}(), 90, 9, 1},
		{"the idempotency horizon holds more", func() frames.RetentionInput {
			i := in(frames.RetentionPolicy{KeepLastN: 1, OnCompletion: frames.CompletionDelete})
			i.KeepFrom = 35
			return i
		}(), 34, 3, 1},
		{"a change of the scope's state within older_than holds the rest", func() frames.RetentionInput {
			i := in(frames.RetentionPolicy{KeepLastN: 1, OnCompletion: frames.CompletionDelete})
			i.StateFrom = 35
			return i
		}(), 34, 3, 1},
		{"limited by the snapshot, never inside a run", func() frames.RetentionInput {
			i := in(frames.RetentionPolicy{KeepLastN: 1, OnCompletion: frames.CompletionDelete})
			i.Limit = 45 // inside run e (41..50): the cut backs off to 40
			return i
		}(), 40, 4, 1},
		{"already removed past the cut", func() frames.RetentionInput {
			i := in(frames.RetentionPolicy{KeepLastN: 3, OnCompletion: frames.CompletionDelete})
			i.Base = 80
			return i
		}(), 0, 0, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := frames.PlanRetention(c.in)
			require.NoError(t, err)
			assert.Equal(t, c.through, p.Through)
			assert.Len(t, p.Removed, c.removed)
			assert.Equal(t, c.keptRuns, p.Kept)
			for _, r := range p.Removed {
				assert.LessOrEqual(t, r.Last, p.Through, "a removed run lies wholly in the prefix")
			}
		})
	}
	for _, bad := range []frames.RetentionPolicy{{KeepLastN: -1, OnCompletion: frames.CompletionDelete}, {OlderThan: -1, OnCompletion: frames.CompletionDelete}, {OnCompletion: "shred"}} {
		_, err := frames.PlanRetention(in(bad))
		assert.ErrorIs(t, err, frames.ErrInvalidArgument, "%+v", bad)
	}
}

func TestRunsOf(t *testing.T) {
	runs := frames.RunsOf([]frames.FinishedFrame{
		{Frame: "g", Parent: "c", First: 3, Last: 5, FinishedAt: 1}, // under c, which finished: part of c's run
		{Frame: "c", Parent: "r", First: 2, Last: 6, FinishedAt: 2}, // under the live root r: a run
		{Frame: "x", First: 7, Last: 9, FinishedAt: 3},              // a root: a run
	})
	assert.Equal(t, []frames.Run{{Frame: "c", First: 2, Last: 6, FinishedAt: 2, Chains: []string{"g", "c"}},
		{Frame: "x", First: 7, Last: 9, FinishedAt: 3, Chains: []string{"x"}}}, runs, "each run names the frames in it")
}

// ApplyRetention records the removal; what it may name is checked.
func TestApplyRetention(t *testing.T) {
	w := newWorld(t)
	w.push("r", "", 100)
	w.push("c", "r", 10)
	w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "c", Status: frames.StatusCompleted})
	hash := strings.Repeat("ab", 32)
	for _, bad := range []*frames.ApplyRetention{
		{Through: 0, Hash: hash}, {Through: 4, Hash: hash}, {Through: 2, Hash: "xyz"}, {Through: 2, Hash: strings.Repeat("AB", 32)},
		{Through: 2, Hash: hash, Runs: -1},
	} {
		bad.Header = w.hdr()
		_, err := w.do(bad)
		assert.Error(t, err, "%+v", bad)
	}
	w.must(&frames.ApplyRetention{Header: w.hdr(), Through: 2, Hash: hash, Runs: 1, Why: "test"})
	assert.Equal(t, int64(2), w.s.RemovedThrough)
	_, err := w.do(&frames.ApplyRetention{Header: w.hdr(), Through: 2, Hash: hash})
	assert.ErrorIs(t, err, frames.ErrInvalidArgument, "not again")
	assert.Equal(t, w.s.Clone(), w.replay().Clone())
}

// The cut never falls inside a request: a continuation pops a frame (a
// run) and pushes its next link in one append, and a cut between them
// would remove the request's index entry with half its records (found by
// the crash storm).
func TestPlanRetentionNeverSplitsARequest(t *testing.T) {
	in := frames.RetentionInput{Policy: frames.RetentionPolicy{KeepLastN: 0, OnCompletion: frames.CompletionArchive}, Now: 100, Head: 20,
		Runs: []frames.Run{{Frame: "a", First: 1, Last: 5}, {Frame: "b", First: 6, Last: 9}}, KeepFrom: 6, Limit: 15}
	plan, err := frames.PlanRetention(in)
	require.NoError(t, err)
	require.Equal(t, int64(5), plan.Through, "without Within the cut is right after a's pop")
	in.Within = map[int64]int64{6: 5, 7: 5, 8: 5} // a's pop at 5 and the next link's push and handles: one request
	plan, err = frames.PlanRetention(in)
	require.NoError(t, err)
	require.Equal(t, int64(0), plan.Through, "the cut backs off out of the request, and then out of a's run")
	require.Empty(t, plan.Removed)
	in.Within = map[int64]int64{3: 2, 4: 2} // a request inside a's run, away from the cut: no change
	plan, err = frames.PlanRetention(in)
	require.NoError(t, err)
	require.Equal(t, int64(5), plan.Through)
}

// A link deep in a finished run pins the run: a chain resumed as a new
// root after its parent finished has its earlier links under that parent.
func TestRunsOfCarriesTheChainsInside(t *testing.T) {
	finished := []frames.FinishedFrame{
		{Frame: "a", Parent: "p", First: 2, Last: 5, ChainRoot: "a"}, // continued to b
		{Frame: "b", Parent: "p", First: 5, Last: 8, ChainRoot: "a"}, // finished; resumed later as a root
		{Frame: "p", First: 1, Last: 9},
		{Frame: "q", First: 10, Last: 11},
	}
	runs := frames.RunsOf(finished)
	require.Len(t, runs, 2)
	assert.Equal(t, "p", runs[0].Frame)
	assert.Subset(t, runs[0].Chains, []string{"a", "b", "p"})
	in := frames.RetentionInput{Policy: frames.RetentionPolicy{OnCompletion: frames.CompletionDelete}, Now: 1000, Head: 12, Runs: runs,
		LiveChains: map[string]bool{"a": true}}
	plan, err := frames.PlanRetention(in)
	require.NoError(t, err)
	assert.Zero(t, plan.Through, "the run holding a live chain's links stays, and all after it")
	in.LiveChains = nil
	plan, err = frames.PlanRetention(in)
	require.NoError(t, err)
	assert.Equal(t, int64(12), plan.Through, "everything, through the head")
}
