// Command agent is an agent actor that keeps its memory in a StateIndex.
//
// Its Started handler calls ResumeActor and prints what a previous run left:
// the frame stack and the pending work (frames waiting on subcalls, tool
// calls in doubt, suspended frames). Then it works through a fixed plan —
// a root frame with a budget, one subframe per research topic, context
// handles, a journalled tool call, usage, a context pack — and suspends
// for approval. Run it again with --approve to resume and finish.
//
// Every step carries a request id derived from the plan, so a run after a
// crash replays the plan: the steps already done return their original
// replies without writing anything, and the run continues where the last
// one stopped. Kill it at any moment (or use --crash-after N) and run it
// again.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

const scope = "agent:report-writer"

var topics = []string{"durability", "latency", "compaction"}

func main() {
	dir := flag.String("data", "./data/agent-example", "data directory of the example's StateIndex")
	approve := flag.Bool("approve", false, "approve the report: resume the suspended frame and finish")
	crashAfter := flag.Int("crash-after", 0, "exit abruptly (as a kill would) after this many StateIndex writes; 0: never")
	flag.Parse()
	if err := run(*dir, *approve, *crashAfter); err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
}

func run(dir string, approve bool, crashAfter int) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	store, err := eventstore.Open(filepath.Join(dir, "stateindex.db"), nil)
	if err != nil {
		return err
	}
	defer store.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	defer sys.Shutdown()
	cfg := actors.DefaultConfig()
	cfg.TokenKey = exampleKey // a real deployment keeps its key secret and stable (stateindex serve does)
	cfg.Logger = quiet
	srv, err := actors.Start(sys, store, cfg)
	if err != nil {
		return err
	}
	defer srv.Stop()

	done := make(chan error, 1)
	agent := &agent{si: srv.Client(), approve: approve, crashAfter: crashAfter, done: done}
	sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return agent }))
	return <-done
}

var exampleKey = []byte("example key: not a secret, 32+ bytes long")

// agent is the Proto.Actor actor doing the work.
type agent struct {
	si         *actors.Client
	approve    bool
	crashAfter int
	writes     int
	resumedAt  int64 // scope version when this run started
	done       chan<- error
}

type work struct{}

func (a *agent) Receive(c actor.Context) {
	switch c.Message().(type) {
	case *actor.Started:
		// Recovery first: what did a previous run leave behind?
		st, err := a.si.ResumeActor(context.Background(), &messages.ResumeActor{Header: messages.Header{Scope: scope}})
		if err != nil {
			a.done <- err
			return
		}
		report(st)
		a.resumedAt = st.Version
		c.Send(c.Self(), work{})
	case work:
		a.done <- a.plan(context.Background())
	}
}

func report(st *messages.ActorResumeState) {
	if st.Version == 0 {
		fmt.Println("resume: fresh scope, nothing to recover")
		return
	}
	fmt.Printf("resume: scope at version %d, %d live frame(s), %d pending item(s), recovered in %d µs (%d events replayed)\n",
		st.Version, st.Recovery.FramesRecovered, st.Recovery.PendingWorkItems, st.Recovery.RecoveryMicros, st.Recovery.EventsReplayed)
	for _, f := range st.FrameStack {
		fmt.Printf("  stack: %s %-9s %q tokens %d/%d\n", f.ID[:8], f.Status, f.Goal, f.Budget.Used, f.Budget.Total)
	}
	for _, p := range st.PendingWork {
		fmt.Printf("  pending: %s — %s\n", p.Kind, p.Description)
	}
}

// m builds the mutation header of a plan step: its request id is the step's
// name, so a replayed step is answered from the log instead of redone.
func (a *agent) m(step string) messages.Header {
	return messages.Header{Scope: scope, RequestID: step}
}

// wrote reports a step and simulates a kill when asked to. A step whose
// reply is from before this run was answered from the log: already done.
func (a *agent) wrote(version int64, what string) {
	if version <= a.resumedAt {
		fmt.Printf("  already done: %s\n", what)
		return
	}
	a.writes++
	fmt.Printf("  ok: %s\n", what)
	if a.crashAfter > 0 && a.writes >= a.crashAfter {
		fmt.Println("  *** simulated crash ***")
		os.Exit(137)
	}
}

func (a *agent) plan(ctx context.Context) error {
	si := a.si
	root, err := si.PushFrame(ctx, &messages.PushFrame{Header: a.m("root/push"), Goal: "write a report on StateIndex",
		Budget: budget.TokenBudget{Total: 8000, MaxSubframeDepth: 3}, Limits: budget.Limits{Turns: 20, SpendMicros: 500_000}})
	if err != nil {
		return err
	}
	a.wrote(root.Version, "root frame "+root.FrameID[:8])
	sys, err := si.AddContextHandle(ctx, &messages.AddContextHandle{Header: a.m("root/system"), FrameID: root.FrameID,
		Kind: "system", Priority: compaction.Critical, Content: "You write short, exact technical reports."})
	if err != nil {
		return err
	}
	a.wrote(sys.Version, "system prompt (critical)")

	for _, topic := range topics {
		if err := a.research(ctx, root.FrameID, topic); err != nil {
			return err
		}
	}

	pack, err := si.AssembleContextPack(ctx, &messages.AssembleContextPack{Header: messages.Header{Scope: scope}, FrameID: root.FrameID, BudgetTokens: 600, Role: "writer"})
	if err != nil {
		return err
	}
	fmt.Printf("  pack: %d segments, %d/%d tokens, compaction %s, %d dropped\n", len(pack.Segments),
		pack.TokenSummary.Used, pack.TokenSummary.Budget, pack.TokenSummary.CompactionLevel, len(pack.Dropped))

	// Ask a human. Repeating the request id returns the very same token, so
	// a crash right after suspending loses nothing.
	tok, err := si.SuspendFrame(ctx, &messages.SuspendFrame{Header: a.m("root/suspend-approval"), FrameID: root.FrameID,
		Reason: frames.SuspendApproval, Note: "publish the report?"})
	if err != nil {
		return err
	}
	a.wrote(tok.Version, "suspended for approval, token "+tok.TokenID[:8])
	if !a.approve {
		fmt.Println("waiting for approval: run again with --approve")
		return nil
	}
	res, err := si.ResumeFrame(ctx, &messages.ResumeFrame{Header: a.m("root/resume-approved"), Token: tok.Token})
	if err != nil {
		return err
	}
	a.wrote(res.Version, "approved and resumed")
	out, err := si.AddResult(ctx, &messages.AddResult{Header: a.m("root/result"), FrameID: root.FrameID,
		Kind: "file", Ref: "reports/stateindex.md", Summary: "three findings"})
	if err != nil {
		return err
	}
	a.wrote(out.Version, "result recorded")
	pop, err := si.PopFrame(ctx, &messages.PopFrame{Header: a.m("root/pop"), FrameID: root.FrameID, Status: frames.StatusCompleted})
	if err != nil {
		return err
	}
	a.wrote(pop.Version, fmt.Sprintf("root completed (version %d)", pop.Version))
	fmt.Println("done: the report is finished")
	return nil
}

// research runs one subframe: push with a budget, gather context through a
// journalled tool call, record usage, pop (returning unused tokens).
func (a *agent) research(ctx context.Context, parent, topic string) error {
	si := a.si
	step := func(s string) messages.Header { return a.m("research/" + topic + "/" + s) }
	sub, err := si.PushFrame(ctx, &messages.PushFrame{Header: step("push"), ParentID: parent, Goal: "research " + topic,
		Budget: budget.TokenBudget{Total: 1500}})
	if err != nil {
		return err
	}
	a.wrote(sub.Version, "subframe "+topic)
	call, err := si.StartToolCall(ctx, &messages.StartToolCall{Header: step("tool-start"), FrameID: sub.FrameID,
		Name: "search", Input: []byte(`{"q":"` + topic + `"}`)})
	if err != nil {
		return err
	}
	a.wrote(call.Version, "tool call journalled before dispatch")
	// The search itself happens here, outside StateIndex. If we crash now,
	// the next ResumeActor reports this call as in doubt.
	output := fmt.Sprintf("%s: measured at %s; see docs/%s.md (3 sources)", topic, time.Duration(len(topic))*time.Millisecond, topic)
	fin, err := si.FinishToolCall(ctx, &messages.FinishToolCall{Header: step("tool-finish"), FrameID: sub.FrameID,
		CallID: call.CallID, Output: output, Priority: compaction.High})
	if err != nil {
		return err
	}
	a.wrote(fin.Version, "tool result recorded")
	note, err := si.AddContextHandle(ctx, &messages.AddContextHandle{Header: step("note"), FrameID: sub.FrameID,
		Priority: compaction.Low, Content: "background reading on " + topic})
	if err != nil {
		return err
	}
	a.wrote(note.Version, "note added")
	use, err := si.RecordUsage(ctx, &messages.RecordUsage{Header: step("usage"), FrameID: sub.FrameID,
		Cost: budget.Cost{InputTokens: 700, OutputTokens: 300, Turns: 1, SpendMicros: 12_000}})
	if err != nil {
		return err
	}
	a.wrote(use.Version, "usage recorded")
	pop, err := si.PopFrame(ctx, &messages.PopFrame{Header: step("pop"), FrameID: sub.FrameID, Status: frames.StatusCompleted})
	if err != nil {
		return err
	}
	a.wrote(pop.Version, fmt.Sprintf("subframe %s completed: used %d of %d", topic, pop.ChargedTokens, pop.Released))
	// The finding travels up to the parent's context for its next pack.
	up, err := si.AddContextHandle(ctx, &messages.AddContextHandle{Header: step("finding"), FrameID: parent,
		Kind: "finding", Priority: compaction.High, Content: output})
	if err != nil {
		return err
	}
	a.wrote(up.Version, "finding added to the report frame")
	return nil
}
