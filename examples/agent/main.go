// Command agent is an agent actor that keeps its memory in a StateIndex.
//
// Its Started handler calls ResumeActor and prints what a previous run left:
// the frame stack and the pending work (frames waiting on subcalls, tool
// calls in doubt, suspended frames). Then it works through a fixed plan —
// a root frame with a budget, one subframe per research topic, context
// handles, a journalled tool call, usage, a context pack — and suspends
// for approval. Run it again with --approve to resume and finish.
//
// Its working state — a run counter, the plan, a flag per topic done, the
// last five lines of its log, what it waits for — is the scope's key-value
// state (a StateHandle), printed at every start: it survives a kill as the
// frames do.
//
// Every step carries a request id derived from the plan, so a run after a
// crash replays the plan: the steps already done return their original
// replies without writing anything, and the run continues where the last
// one stopped. Kill it at any moment (or use --crash-after N) and run it
// again.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
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
	server := flag.String("server", "", "use a running `stateindex serve --listen HOST:PORT` over remoting instead of an in-process StateIndex on --data")
	flag.Parse()
	var err error
	if *server != "" {
		err = runRemote(*server, *approve, *crashAfter)
	} else {
		err = run(*dir, *approve, *crashAfter)
	}
	if err != nil {
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

// runRemote runs the agent against a running server (its metrics, its
// inspector and its data are the server's).
func runRemote(addr string, approve bool, crashAfter int) error {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	defer sys.Shutdown()
	r, err := actors.StartRemote(sys, actors.RemoteConfig("127.0.0.1", 0))
	if err != nil {
		return err
	}
	defer r.Shutdown(false)
	done := make(chan error, 1)
	agent := &agent{si: actors.NewClient(sys.Root, actors.RemotePID(addr), 10*time.Second), approve: approve, crashAfter: crashAfter, done: done}
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
	// st is the agent's working state. Only this actor uses it: a handle
	// belongs to one goroutine.
	st *actors.StateHandle
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
		a.st = a.si.State(scope)
		if err := a.startRun(context.Background()); err != nil {
			a.done <- err
			return
		}
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

// startRun counts this run in the working state and prints the state. The
// first read loads it; the counter is written only if no other run changed
// it since (IfUnchanged), else read again.
func (a *agent) startRun(ctx context.Context) error {
	for {
		runs, _, err := actors.GetJSON[int](ctx, a.st, "runs")
		if err != nil {
			return err
		}
		_ = actors.SetJSON(a.st, "runs", runs+1)
		if has, _ := a.st.Has(ctx, "plan"); !has { // loaded: reads answer from the view
			_ = actors.SetJSON(a.st, "plan", topics)
		}
		err = a.st.Flush(ctx, actors.IfUnchanged())
		if errors.Is(err, actors.ErrStateConflict) {
			a.st.Discard()
			continue
		}
		if err != nil {
			return err
		}
		break
	}
	runs, _, _ := actors.GetJSON[int](ctx, a.st, "runs")
	plan, _, _ := actors.GetJSON[[]string](ctx, a.st, "plan")
	done, _ := a.st.Keys(ctx, "done/")
	waiting, _, _ := actors.GetJSON[string](ctx, a.st, "waiting")
	log, _, _ := actors.GetJSON[[]string](ctx, a.st, "log") // a list reads as an array
	for i := range done {
		done[i] = strings.TrimPrefix(done[i], "done/")
	}
	if waiting == "" {
		waiting = "nothing"
	}
	fmt.Printf("state: run %d; topics done %d/%d %v; waiting for %s\n", runs, len(done), len(plan), done, waiting)
	for _, l := range log {
		fmt.Println("  log:", l)
	}
	return nil
}

// remember flushes the working state's changes of a step, named by the
// step: replayed after a crash, it is answered from the log.
func (a *agent) remember(ctx context.Context, step, what string) error {
	if err := a.st.Flush(ctx, actors.WithRequestID(step+"/state")); err != nil {
		return err
	}
	a.wrote(a.st.Version(), "state: "+what)
	return nil
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
	_ = actors.SetJSON(a.st, "waiting", "approval")
	_ = actors.PushJSON(a.st, "log", "asked for approval", 5)
	if err := a.remember(ctx, "root/suspend-approval", "waiting for approval"); err != nil {
		return err
	}
	if !a.approve {
		fmt.Println("waiting for approval: run again with --approve")
		return nil
	}
	res, err := si.ResumeFrame(ctx, &messages.ResumeFrame{Header: a.m("root/resume-approved"), Token: tok.Token})
	if err != nil {
		return err
	}
	a.wrote(res.Version, "approved and resumed")
	a.st.Delete("waiting")
	_ = actors.PushJSON(a.st, "log", "approved", 5)
	if err := a.remember(ctx, "root/resume-approved", "approved"); err != nil {
		return err
	}
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
	// The working state: the topic is done, and the log keeps its last 5
	// lines. Both apply together, or neither.
	_ = actors.SetJSON(a.st, "done/"+topic, true)
	_ = actors.PushJSON(a.st, "log", "researched "+topic, 5)
	return a.remember(ctx, "research/"+topic, topic+" done")
}
