// Command remote is an agent actor in one process that keeps its memory in
// a StateIndex running in another, over Proto.Actor remoting (or a
// Proto.Actor cluster of StateIndex members).
//
// Terminal 1:
//
//	go run ./cmd/stateindex serve --data ./data/remote --listen 127.0.0.1:7400
//
// Terminal 2:
//
//	go run ./examples/remote --server 127.0.0.1:7400
//
// The agent's Started handler calls ResumeActor; then it pushes a frame and
// a subframe with budgets, adds context, journals a tool call, records
// usage, assembles a context pack and pops both frames. Every step's request
// id is derived from the run number, so a run that is killed midway and
// started again with the same --run replays the finished steps from the
// log (no new writes) and continues; a new --run adds a new task.
//
// With --cluster NAME --peers HOST:PORT,... instead of --server, the agent
// joins that cluster as a client and reaches each scope at its home member;
// the code using the Client does not change.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

func main() {
	server := flag.String("server", "127.0.0.1:7400", "the StateIndex's --listen address")
	clusterName := flag.String("cluster", "", "join this StateIndex cluster as a client instead of using --server")
	peers := flag.String("peers", "", "with --cluster: the storage members, HOST:PORT,...")
	listen := flag.String("listen", "127.0.0.1:0", "this process's remoting address, where replies arrive (port 0: any free port)")
	scope := flag.String("scope", "remote-agent", "the agent's scope")
	runN := flag.Int("run", 1, "run number: the same number replays that run's steps, a new one adds a task")
	timeout := flag.Duration("timeout", 5*time.Second, "deadline of each request")
	flag.Parse()
	if err := run(*server, *clusterName, *peers, *listen, *scope, *runN, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "remote agent:", err)
		if errors.Is(err, actors.ErrUnavailable) {
			fmt.Fprintln(os.Stderr, "is the StateIndex running? go run ./cmd/stateindex serve --data ./data/remote --listen", *server)
		}
		os.Exit(1)
	}
}

func run(server, clusterName, peers, listen, scope string, runN int, timeout time.Duration) error {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	var si *actors.Client
	if clusterName != "" {
		cc := actors.ClusterConfig{Name: clusterName, Members: strings.Split(peers, ","), RequestTimeout: timeout, Logger: quiet}
		node, err := actors.JoinCluster(sys, cc, listen)
		if err != nil {
			return err
		}
		defer node.Stop()
		si = node.Client()
		fmt.Printf("agent at %s, StateIndex cluster %q; scope %s lives on %s\n", node.Address(), clusterName, scope, node.Home(scope))
	} else {
		host, port, err := splitListen(listen)
		if err != nil {
			return err
		}
		r, err := actors.StartRemote(sys, actors.RemoteConfig(host, port))
		if err != nil {
			return err
		}
		defer r.Shutdown(false)
		defer sys.Shutdown()
		// The same Client API as in-process; requests travel as wire messages.
		si = actors.NewClient(sys.Root, actors.RemotePID(server), timeout)
		fmt.Printf("agent at %s, StateIndex at %s\n", sys.Address(), server)
	}

	done := make(chan error, 1)
	sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return &agent{si: si, scope: scope, run: runN, done: done}
	}))
	return <-done
}

// agent is the Proto.Actor actor doing the work.
type agent struct {
	si    *actors.Client
	scope string
	run   int
	step  int
	done  chan<- error
}

type work struct{}

func (a *agent) Receive(c actor.Context) {
	switch c.Message().(type) {
	case *actor.Started:
		st, err := a.si.ResumeActor(context.Background(), &messages.ResumeActor{Header: messages.Header{Scope: a.scope, RequestID: a.id("resume")}})
		if err != nil {
			a.done <- err
			return
		}
		if st.Version == 0 {
			fmt.Println("resume: fresh scope, nothing to recover")
		} else {
			fmt.Printf("resume: scope at version %d, %d live frame(s), %d pending item(s), recovered in %d µs\n",
				st.Version, st.Recovery.FramesRecovered, st.Recovery.PendingWorkItems, st.Recovery.RecoveryMicros)
		}
		c.Send(c.Self(), work{})
	case work:
		a.done <- a.task(context.Background())
	}
}

// id is the request id of this run's next step: stable across restarts of
// the same run, so a repeated step is answered from the log.
func (a *agent) id(name string) string {
	a.step++
	return fmt.Sprintf("run%d-%02d-%s", a.run, a.step, name)
}

func (a *agent) mut(name string) messages.Header {
	return messages.Header{Scope: a.scope, RequestID: a.id(name)}
}

func (a *agent) task(ctx context.Context) error {
	root, err := a.si.PushFrame(ctx, &messages.PushFrame{Header: a.mut("push-root"), Goal: fmt.Sprintf("task %d: compare two databases", a.run),
		Budget: budget.TokenBudget{Total: 8000}})
	if err != nil {
		return err
	}
	fmt.Printf("pushed root frame %s (scope version %d)\n", short(root.FrameID), root.Version)
	sub, err := a.si.PushFrame(ctx, &messages.PushFrame{Header: a.mut("push-sub"), ParentID: root.FrameID, Goal: "read the benchmarks",
		Budget: budget.TokenBudget{Total: 3000}})
	if err != nil {
		return err
	}
	fmt.Printf("pushed subframe %s with 3000 of the root's tokens\n", short(sub.FrameID))
	if _, err := a.si.AddContextHandle(ctx, &messages.AddContextHandle{Header: a.mut("context"), FrameID: sub.FrameID,
		Priority: compaction.Critical, Content: "The user needs durability first, then latency."}); err != nil {
		return err
	}
	call, err := a.si.StartToolCall(ctx, &messages.StartToolCall{Header: a.mut("tool-start"), FrameID: sub.FrameID, Name: "fetch", Input: []byte(`{"url":"docs/BENCHMARKS.md"}`)})
	if err != nil {
		return err
	}
	if _, err := a.si.FinishToolCall(ctx, &messages.FinishToolCall{Header: a.mut("tool-finish"), FrameID: sub.FrameID, CallID: call.CallID,
		Output: "bbolt with group commit: 17k durable appends/s at 64 writers"}); err != nil {
		return err
	}
	if _, err := a.si.RecordUsage(ctx, &messages.RecordUsage{Header: a.mut("usage"), FrameID: sub.FrameID,
		Cost: budget.Cost{InputTokens: 1200, OutputTokens: 300, Turns: 1}}); err != nil {
		return err
	}
	pack, err := a.si.AssembleContextPack(ctx, &messages.AssembleContextPack{Header: messages.Header{Scope: a.scope}, FrameID: sub.FrameID, BudgetTokens: 1000})
	if err != nil {
		return err
	}
	fmt.Printf("context pack: %d of %d tokens, %d segment(s), %d breadcrumb(s)\n",
		pack.TokenSummary.Used, pack.TokenSummary.Budget, len(pack.Segments), len(pack.Breadcrumbs))
	popped, err := a.si.PopFrame(ctx, &messages.PopFrame{Header: a.mut("pop-sub"), FrameID: sub.FrameID, Status: frames.StatusCompleted})
	if err != nil {
		return err
	}
	fmt.Printf("popped the subframe: %d tokens back to the root, %d charged\n", popped.Released, popped.ChargedTokens)
	done, err := a.si.PopFrame(ctx, &messages.PopFrame{Header: a.mut("pop-root"), FrameID: root.FrameID, Status: frames.StatusCompleted})
	if err != nil {
		return err
	}
	fmt.Printf("task %d done; scope at version %d\n", a.run, done.Version)
	return nil
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

func splitListen(addr string) (string, int, error) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return "", 0, fmt.Errorf("--listen %q is not host:port", addr)
	}
	var port int
	if _, err := fmt.Sscanf(addr[i+1:], "%d", &port); err != nil {
		return "", 0, fmt.Errorf("--listen %q: bad port", addr)
	}
	return addr[:i], port, nil
}
