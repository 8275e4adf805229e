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
	scope := messages.Mutation{Scope: "pack"}
	root, err := n.client.PushFrame(ctx, &messages.PushFrame{Mutation: scope, Goal: "answer the question", Budget: budget.TokenBudget{Total: 1 << 30}})
	if err != nil {
		return res, err
	}
	for i := range handles {
		// ~800 bytes: ~200 tokens under the default bytes/4 counter.
		content := fmt.Sprintf("fact %d: ", i) + strings.Repeat("lorem ipsum dolor sit amet ", 29)
		_, err := n.client.AddContextHandle(ctx, &messages.AddContextHandle{Mutation: scope, FrameID: root.FrameID,
			Priority: prios[i%len(prios)], Content: content})
		if err != nil {
			return res, err
		}
	}
	req := &messages.AssembleContextPack{Scope: scope.Scope, FrameID: root.FrameID, BudgetTokens: assembleBudget}
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
