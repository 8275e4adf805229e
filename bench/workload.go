package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/messages"
)

// rootBudget is large enough for every child a scenario pushes.
const rootBudget = 1 << 40

var prios = []compaction.Priority{compaction.High, compaction.Medium, compaction.Medium, compaction.Low, compaction.Background}

// text returns about n bytes of prose starting with tag: what a context
// handle or a checkpoint carries.
func text(tag string, n int) string {
	const filler = "the agent read the file, compared the figures and wrote down what it found. "
	var b strings.Builder
	b.Grow(n + len(filler))
	b.WriteString(tag)
	b.WriteString(": ")
	for b.Len() < n {
		b.WriteString(filler)
	}
	return b.String()[:max(n, len(tag))]
}

// agent is one scope driven by a benchmark worker. Its methods are not
// safe for concurrent use: one goroutine per agent.
type agent struct {
	c     *actors.Client
	scope string
	root  string
	child string
	k     int
	size  int
}

func (a *agent) mut() messages.Header { return messages.Header{Scope: a.scope} }

// begin pushes the scope's root frame.
func (a *agent) begin(ctx context.Context) error {
	r, err := a.c.PushFrame(ctx, &messages.PushFrame{Header: a.mut(), Goal: "run the benchmark task " + a.scope,
		Budget: budget.TokenBudget{Total: rootBudget}})
	if err != nil {
		return fmt.Errorf("push root of %s: %w", a.scope, err)
	}
	a.root = r.FrameID
	return nil
}

// durableOp is one operation of the durable workload: every fourth a
// PushFrame of a child of the root carrying about size bytes of inputs,
// the others an AddContextHandle of about size bytes to the newest child.
// Each appends exactly one event.
func (a *agent) durableOp(ctx context.Context) error {
	k := a.k
	a.k++
	if k%4 == 0 || a.child == "" {
		r, err := a.c.PushFrame(ctx, &messages.PushFrame{Header: a.mut(), ParentID: a.root,
			Goal: "step " + strconv.Itoa(k) + " of " + a.scope, Inputs: []byte(text("inputs "+strconv.Itoa(k), a.size-64)),
			Budget: budget.TokenBudget{Total: 1000}})
		if err != nil {
			return fmt.Errorf("push in %s: %w", a.scope, err)
		}
		a.child = r.FrameID
		return nil
	}
	_, err := a.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: a.mut(), FrameID: a.child,
		Priority: prios[k%len(prios)], Content: text("fact "+strconv.Itoa(k), a.size)})
	if err != nil {
		return fmt.Errorf("add handle in %s: %w", a.scope, err)
	}
	return nil
}

// checkpoint is one durable checkpoint of about size bytes: an
// AddContextHandle to the thread's root frame.
func (a *agent) checkpoint(ctx context.Context) error {
	k := a.k
	a.k++
	_, err := a.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: a.mut(), FrameID: a.root,
		Priority: prios[k%len(prios)], Content: text("checkpoint "+strconv.Itoa(k), a.size)})
	if err != nil {
		return fmt.Errorf("checkpoint in %s: %w", a.scope, err)
	}
	return nil
}
