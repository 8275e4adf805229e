package frames

import (
	"fmt"
	"sort"
)

// Retention: bounded history, decided here, carried out by the shell.
//
// A run is a finished root frame, or a finished subtree under a live frame
// (a chat agent's root never finishes): a frame that finished while its
// parent is live or that has no parent. The policy (the seed's retention
// block) keeps the last KeepLastN runs of a scope always, and lets the
// others go once they finished more than OlderThan ago. Removal is a
// prefix of the scope's log (its hash chain stays verifiable from the
// removed part's last hash), so what is removed is everything before the
// first record that must stay: the first record of the oldest kept run, of
// the oldest request within the idempotency horizon, or anything the
// caller must keep (KeepFrom). Live frames, unused tokens and abandoned
// calls are in the projection, which a snapshot at or after the cut holds.
//
// Scope state (kv.go) is in the projection too: a key's current value (or
// list) is in every snapshot, so no cut ever loses one, however old the
// write that set it. Its changes (state.changed, state.expired) are its
// history, which StateHistory reads from the log: a change of a frame's
// state lies inside its frame's run and goes with it; a change of the
// scope's own state belongs to no run, and is kept while it is younger
// than OlderThan (StateFrom) — as a run that finished then would be — and
// removed once older, with the prefix around it. KeepLastN counts runs
// only: a scope that keeps state and no frames keeps OlderThan of its
// state history (and its idempotency horizon, and whatever its latest
// snapshot does not cover).

// Completion is what retention does with a finished run (on_completion).
type Completion string

// Completions.
const (
	CompletionKeep    Completion = "keep"
	CompletionDelete  Completion = "delete"
	CompletionArchive Completion = "archive"
)

// RetentionPolicy is a scope's retention block.
type RetentionPolicy struct {
	KeepLastN    int
	OlderThan    int64 // ns
	OnCompletion Completion
}

// Validate checks the policy's values.
func (p RetentionPolicy) Validate() error {
	switch {
	case p.KeepLastN < 0:
		return invalid("keep_last_n %d is negative", p.KeepLastN)
	case p.OlderThan < 0:
		return invalid("older_than %d is negative", p.OlderThan)
	}
	switch p.OnCompletion {
	case CompletionKeep, CompletionDelete, CompletionArchive:
		return nil
	}
	return invalid("on_completion %q (want keep, delete or archive)", p.OnCompletion)
}

// Run is one finished run of a scope: its first record (its frame.pushed)
// and last (its frame.popped) and when it finished (server time).
type Run struct {
	Frame      string
	First      int64
	Last       int64
	FinishedAt int64
	// Chains are the keys a live chain would pin the run by: the chain
	// roots its frames' records name and the ids of its frames (a frame
	// that finished in no chain is the root of the chain a resume makes
	// of it). A run holding a link of a chain whose head is live is kept.
	Chains []string
}

// RetentionInput is what a retention pass knows of a scope.
type RetentionInput struct {
	Policy RetentionPolicy
	Now    int64
	// Base is the version history was already removed through; Head the
	// scope's version.
	Base, Head int64
	// Runs are the finished runs after Base, in the order they finished.
	Runs []Run
	// KeepFrom is the first version that must stay for other reasons (the
	// oldest request within the idempotency horizon); 0 when none.
	KeepFrom int64
	// LiveChains are the roots of the chains whose head is live: their
	// links are kept whatever the policy says (a live link depends on
	// them), and so is everything after the first of them.
	LiveChains map[string]bool
	// Limit, when > 0, is the furthest the cut may go (the version of the
	// scope's latest snapshot: what it is rebuilt from once the records
	// before it are gone). The cut never splits a run: it stops before
	// one that would straddle it.
	Limit int64
	// Within maps each version that is not the first of its request's
	// records to the first: the cut never falls inside a request (a
	// continuation pops a frame and pushes its next link in one append;
	// cutting between them would remove the request's index entry with
	// half its records).
	Within map[int64]int64
	// StateFrom is the first change of the scope's state made at or after
	// Policy.StateHorizon(Now) (0: none): it stays, with everything after
	// it.
	StateFrom int64
}

// StateHorizon is the server time (unix ns) from which a scope's state
// changes are kept at now: they are kept for OlderThan, as runs are.
func (p RetentionPolicy) StateHorizon(now int64) int64 { return now - p.OlderThan }

// RetentionPlan says what a pass removes: the records through Through (0:
// nothing), which runs that ends, and why.
type RetentionPlan struct {
	Through int64
	Removed []Run
	Kept    int
	Why     string
}

// PlanRetention decides a retention pass.
func PlanRetention(in RetentionInput) (RetentionPlan, error) {
	if err := in.Policy.Validate(); err != nil {
		return RetentionPlan{}, err
	}
	if in.Policy.OnCompletion == CompletionKeep || in.Head <= in.Base {
		return RetentionPlan{}, nil
	}
	runs := append([]Run(nil), in.Runs...)
	sort.SliceStable(runs, func(a, b int) bool { return runs[a].Last < runs[b].Last })
	keep := in.Head + 1 // the first version that must stay
	if in.KeepFrom > 0 {
		keep = min(keep, in.KeepFrom)
	}
	if in.StateFrom > 0 {
		keep = min(keep, in.StateFrom)
	}
	kept := 0
	for i, r := range runs {
		newest := len(runs) - i
		pinned := in.LiveChains[r.Frame]
		for _, k := range r.Chains {
			pinned = pinned || in.LiveChains[k]
		}
		if pinned || newest <= in.Policy.KeepLastN || in.Now-r.FinishedAt <= in.Policy.OlderThan {
			keep = min(keep, r.First)
			kept++
		}
	}
	through := keep - 1
	if in.Limit > 0 && through > in.Limit {
		through = in.Limit
		for moved := true; moved; { // back off until no run straddles the cut
			moved = false
			for _, r := range runs {
				if r.First <= through && through < r.Last {
					through, moved = r.First-1, true
				}
			}
		}
	}
	for moved := true; moved; { // back off out of a request, and then out of a run
		moved = false
		if start, ok := in.Within[through+1]; ok && start <= through {
			through, moved = start-1, true
			for _, r := range runs {
				if r.First <= through && through < r.Last {
					through = r.First - 1
				}
			}
		}
	}
	if through <= in.Base {
		return RetentionPlan{Kept: kept}, nil
	}
	plan := RetentionPlan{Through: through, Kept: kept}
	for _, r := range runs {
		if r.Last <= through {
			plan.Removed = append(plan.Removed, r)
		}
	}
	plan.Why = fmt.Sprintf("keep_last_n=%d older_than=%s on_completion=%s: %d run(s) removed, %d kept",
		in.Policy.KeepLastN, span(in.Policy.OlderThan), in.Policy.OnCompletion, len(plan.Removed), kept)
	return plan, nil
}

// FinishedFrame is a frame.popped of a scope's log: the frame, its parent,
// its span (frame.pushed to frame.popped) and when it finished.
type FinishedFrame struct {
	Frame, Parent string
	First, Last   int64
	FinishedAt    int64
	ChainRoot     string // the chain it is a link of, as its record says
}

// RunsOf picks the runs out of the finished frames of a log (in finish
// order): a finished frame is a run when it has no parent or its parent
// did not finish.
//
// A run's Chains are the chain keys of every frame in it (see Run.Chains):
// a link of a live chain can sit deep in a finished run (a resume whose
// parent had finished makes the new link a root; the links before it stay
// under that parent).
func RunsOf(finished []FinishedFrame) []Run {
	parent := make(map[string]string, len(finished))
	for _, f := range finished {
		parent[f.Frame] = f.Parent
	}
	runOf := func(id string) string { // the run a finished frame is in
		for seen := 0; seen <= len(parent); seen++ {
			p, ok := parent[id]
			if !ok || p == "" {
				return id
			}
			if _, done := parent[p]; !done {
				return id
			}
			id = p
		}
		return id // a cycle in corrupted records: the frame stands alone
	}
	keys := map[string][]string{}
	for _, f := range finished {
		r := runOf(f.Frame)
		keys[r] = append(keys[r], f.Frame)
		if f.ChainRoot != "" && f.ChainRoot != f.Frame {
			keys[r] = append(keys[r], f.ChainRoot)
		}
	}
	var runs []Run
	for _, f := range finished {
		if _, done := parent[f.Parent]; f.Parent == "" || !done {
			runs = append(runs, Run{Frame: f.Frame, First: f.First, Last: f.Last, FinishedAt: f.FinishedAt, Chains: keys[f.Frame]})
		}
	}
	return runs
}
