package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/actors/wire"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/messages"
)

// The remote scenario: a StateIndex served by a child process on
// 127.0.0.1 (this program re-executed with RemoteChildEnv set; see
// ServeRemoteChild) over a memory store, so that no fsync is measured, and
// a Client in this process. It compares GetStack of a 3-frame stack with a
// trivial remote echo (an actor in the child that answers each wire message
// with itself) at remoteCallers concurrent callers, in alternating rounds.

// RemoteChildEnv, set to 1 in a program's environment, makes a program that
// calls ServeRemoteChild first thing (the stateindex command, this
// package's tests) the server of the remote scenario.
const RemoteChildEnv = "STATEINDEX_BENCH_REMOTE_CHILD"

// remoteCallers is how many callers send at once, each on its own scope.
const remoteCallers = 16

// remoteRounds is how many measured rounds each operation gets.
const remoteRounds = 3

// remoteEchoName is the child's echo actor.
const remoteEchoName = "bench-echo"

// RemoteResult compares remote GetStack with a trivial remote echo on the
// same connection, measured in alternating rounds.
type RemoteResult struct {
	Callers int `json:"callers"`
	// Frames is the depth of the stack GetStack returns.
	Frames   int    `json:"frames"`
	Echo     Figure `json:"echo"`
	GetStack Figure `json:"get_stack"`
	// GetStackOverEcho is GetStack's ops/s ÷ echo's.
	GetStackOverEcho float64 `json:"get_stack_over_echo"`
}

// IsRemoteChild reports whether this process was started as the remote
// scenario's server.
func IsRemoteChild() bool { return os.Getenv(RemoteChildEnv) == "1" }

// ServeRemoteChild serves a StateIndex on a memory store and an echo actor
// on 127.0.0.1 (a free port), prints "listening HOST:PORT" on out, and
// returns when in ends (the parent closes it); it returns the process's
// exit code.
func ServeRemoteChild(in io.Reader, out io.Writer) int {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	if _, err := actors.StartRemote(sys, actors.RemoteConfig("127.0.0.1", 0)); err != nil {
		fmt.Fprintln(out, "error:", err)
		return 1
	}
	srv, err := actors.Start(sys, eventstore.NewMemory(), config(0))
	if err != nil {
		fmt.Fprintln(out, "error:", err)
		return 1
	}
	if _, err := srv.Expose(nil); err != nil {
		fmt.Fprintln(out, "error:", err)
		return 1
	}
	if _, err := sys.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
		if m, ok := c.Message().(*wire.Message); ok {
			c.Respond(m)
		}
	}), remoteEchoName); err != nil {
		fmt.Fprintln(out, "error:", err)
		return 1
	}
	fmt.Fprintln(out, "listening", sys.Address())
	_, _ = io.Copy(io.Discard, in)
	srv.Stop()
	return 0
}

// remoteChild is the running server process.
type remoteChild struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	addr  string
	done  chan error
}

// startRemoteChild runs exe as the remote scenario's server and waits (up
// to 30 s) for its address.
func startRemoteChild(ctx context.Context, exe string) (*remoteChild, error) {
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), RemoteChildEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the server process %s: %w", exe, err)
	}
	c := &remoteChild{cmd: cmd, stdin: stdin, done: make(chan error, 1)}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		first := true
		for sc.Scan() {
			if first {
				lines <- sc.Text()
				first = false
			}
		}
		if first {
			close(lines)
		}
		c.done <- cmd.Wait()
	}()
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	select {
	case line, ok := <-lines:
		if addr, found := strings.CutPrefix(line, "listening "); ok && found {
			c.addr = addr
			return c, nil
		}
		c.kill()
		return nil, fmt.Errorf("the server process %s did not start: %q", exe, line)
	case <-timer.C:
		c.kill()
		return nil, fmt.Errorf("the server process %s printed no address within 30 s", exe)
	case <-ctx.Done():
		c.kill()
		return nil, ctx.Err()
	}
}

// stop ends the child: end of input, then SIGKILL after 5 s.
func (c *remoteChild) stop() error {
	_ = c.stdin.Close()
	select {
	case err := <-c.done:
		return err
	case <-time.After(5 * time.Second):
		c.kill()
		return errors.New("the server process did not stop within 5 s of its input closing: killed")
	}
}

func (c *remoteChild) kill() {
	_ = c.cmd.Process.Kill()
	_ = c.stdin.Close()
}

// remote runs the remote scenario: each round runs echo then GetStack for
// round long.
func remote(ctx context.Context, o *Options, round time.Duration) (res RemoteResult, err error) {
	exe := o.Executable
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return res, err
		}
	}
	child, err := startRemoteChild(ctx, exe)
	if err != nil {
		return res, err
	}
	defer func() {
		if serr := child.stop(); err == nil && serr != nil {
			err = serr
		}
	}()
	sys, err := clientSystem()
	if err != nil {
		return res, err
	}
	client := actors.NewClient(sys.Root, actors.RemotePID(child.addr), 10*time.Second)

	res = RemoteResult{Callers: remoteCallers, Frames: 3}
	scopes := make([]string, remoteCallers)
	for i := range scopes {
		scopes[i] = fmt.Sprintf("remote-%d", i)
		parent := ""
		for d := 0; d < res.Frames; d++ {
			f, err := client.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: scopes[i]}, ParentID: parent, Goal: "benchmark",
				Budget: budget.TokenBudget{Total: 1 << 30 >> d}})
			if err != nil {
				return res, fmt.Errorf("setup: %w", err)
			}
			parent = f.FrameID
		}
	}
	echoMsg, err := wire.Encode(&messages.GetStack{Header: messages.Header{Scope: "echo"}}, 0)
	if err != nil {
		return res, err
	}
	echo := actor.NewPID(child.addr, remoteEchoName)
	ops := map[string]func(scope string) error{
		"echo": func(string) error {
			r, err := sys.Root.RequestFuture(echo, echoMsg, 10*time.Second).Result()
			if err == nil {
				if _, ok := r.(*wire.Message); !ok {
					err = fmt.Errorf("echo answered %T", r)
				}
			}
			return err
		},
		"get": func(scope string) error {
			r, err := client.GetStack(ctx, &messages.GetStack{Header: messages.Header{Scope: scope}})
			if err == nil && len(r.Frames) != res.Frames {
				err = fmt.Errorf("GetStack returned %d frames, want %d", len(r.Frames), res.Frames)
			}
			return err
		},
	}
	// A short warm-up of each (connections, pools, the child's caches).
	for _, op := range []string{"echo", "get"} {
		if _, _, err := runCallers(ctx, scopes, min(round/4, 500*time.Millisecond), ops[op]); err != nil {
			return res, fmt.Errorf("warm-up %s: %w", op, err)
		}
	}
	var lat = map[string]Latencies{}
	var wall = map[string]time.Duration{}
	for r := 0; r < remoteRounds; r++ {
		for _, op := range []string{"echo", "get"} {
			o.progress("remote: round %d/%d, %s, %d callers", r+1, remoteRounds, op, remoteCallers)
			l, d, err := runCallers(ctx, scopes, round, ops[op])
			if err != nil {
				return res, fmt.Errorf("%s: %w", op, err)
			}
			lat[op] = append(lat[op], l...)
			wall[op] += d
		}
	}
	res.Echo = Summarize(lat["echo"], wall["echo"])
	res.GetStack = Summarize(lat["get"], wall["get"])
	res.GetStackOverEcho = Ratio(res.GetStack.OpsPerSec, res.Echo.OpsPerSec)
	return res, nil
}

var clientSys struct {
	once sync.Once
	sys  *actor.ActorSystem
	err  error
}

// clientSystem is the process's one remoting actor system for the remote
// scenario, started on first use and kept: Proto.Actor's remote.Start sets
// gRPC's global logger, which races with the goroutines a shut-down remote
// leaves behind for a while, so a process must not start a second one.
func clientSystem() (*actor.ActorSystem, error) {
	clientSys.once.Do(func() {
		clientSys.sys = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
		_, clientSys.err = actors.StartRemote(clientSys.sys, actors.RemoteConfig("127.0.0.1", 0))
	})
	return clientSys.sys, clientSys.err
}

// runCallers runs do on every scope at once, each caller in a loop, until
// d has passed; it returns every latency and the wall time.
func runCallers(ctx context.Context, scopes []string, d time.Duration, do func(scope string) error) (Latencies, time.Duration, error) {
	parts := make([]Latencies, len(scopes))
	errs := make([]error, len(scopes))
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for i := range scopes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				if err := parts[i].Time(func() error { return do(scopes[i]) }); err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return nil, 0, err
	}
	return Merge(parts), wall, ctx.Err()
}
