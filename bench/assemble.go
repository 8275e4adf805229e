package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/messages"
)

// AssembleResult is AssembleContextPack through the actor for a frame of
// Handles handles of about 200 tokens each.
type AssembleResult struct {
	Handles      int    `json:"handles"`
	BudgetTokens int64  `json:"budget_tokens"`
	Pack         Figure `json:"pack"`
	// UsedTokens and Segments describe the pack returned.
	UsedTokens int64 `json:"used_tokens"`
	Segments   int   `json:"segments"`
}

// assembleBudget is the pack budget of the scenario.
const assembleBudget = 8000

// assemble adds handles to one frame of one scope (setup on a NoSync file:
// a pack reads the cached state, never the disk), then times sequential
// AssembleContextPack requests, at most reps of them and at most maxDur.
func assemble(ctx context.Context, o *Options, handles, reps int, maxDur time.Duration) (AssembleResult, error) {
	res := AssembleResult{Handles: handles, BudgetTokens: assembleBudget}
	dir, err := scratch(o.Dir, fmt.Sprintf("assemble-%d", handles))
	if err != nil {
		return res, err
	}
	defer o.cleanup(dir)
	n, err := start(dbPath(dir, "assemble"), true, config(o.Shards))
	if err != nil {
		return res, err
	}
	defer func() { err = errs(err, n.stop()) }()
	o.progress("assemble: adding %d handles of ~200 tokens", handles)
	scope := messages.Header{Scope: "pack"}
	root, err := n.client.PushFrame(ctx, &messages.PushFrame{Header: scope, Goal: "answer the question", Budget: budget.TokenBudget{Total: 1 << 30}})
	if err != nil {
		return res, err
	}
	for i := range handles {
		// ~800 bytes: ~200 tokens under the default bytes/4 counter.
		content := noteContent(i)
		_, err := n.client.AddContextHandle(ctx, &messages.AddContextHandle{Header: scope, FrameID: root.FrameID,
			Priority: prios[i%len(prios)], Content: content})
		if err != nil {
			return res, err
		}
	}
	req := &messages.AssembleContextPack{Header: messages.Header{Scope: scope.Scope}, FrameID: root.FrameID, BudgetTokens: assembleBudget}
	check := func() error {
		p, err := n.client.AssembleContextPack(ctx, req)
		if err != nil {
			return err
		}
		if p.TokenSummary.Used > assembleBudget {
			return fmt.Errorf("bench: pack of %d tokens over its budget of %d", p.TokenSummary.Used, assembleBudget)
		}
		res.UsedTokens, res.Segments = p.TokenSummary.Used, len(p.Segments)
		return nil
	}
	for range min(reps/10+1, 20) { // warm up
		if err := check(); err != nil {
			return res, err
		}
	}
	o.progress("assemble: %d handles, timing up to %d packs", handles, reps)
	lat := make(Latencies, 0, reps)
	begin := time.Now()
	for len(lat) < reps && time.Since(begin) < maxDur {
		if err := lat.Time(check); err != nil {
			return res, err
		}
	}
	res.Pack = Summarize(lat, time.Since(begin))
	return res, nil
}

// noteContent is ~800 bytes of agent-like notes: sentences, a few exact
// facts (numbers, ids, paths), mostly prose — what the extractive summary
// of the Moderate level works on. (A handle that is one 800-byte sentence
// with no full stop is its worst case: see docs/BENCHMARKS.md.)
func noteContent(i int) string {
	return fmt.Sprintf("Observation %d: the build of service-%d took %d.%d s on runner ci-%d. ", i, i%37, i%9+1, i%10, i%4) +
		"The cache was warm and most of the time went into linking the final binary. " +
		fmt.Sprintf("Logs for this run are kept in /var/log/build/%d.log for a week. ", i) +
		"Nothing in the dependency graph changed since the previous run, so the difference comes from the runner itself. " +
		"A second run on the same runner was about as slow, which rules out a cold disk. " +
		"The team suspects the new virtualization layer, but nobody has measured it yet. " +
		"Until then the slow runners stay in the pool, with a note on the dashboard. " +
		strings.Repeat("More details follow in the attached report. ", 3)
}
