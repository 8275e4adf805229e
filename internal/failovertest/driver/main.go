// Command driver is the client side of the failover test (package
// failovertest): a client node of a shared-store cluster whose Client
// drives many scopes, and reports every request's outcome as one JSON line
// on standard output.
//
// Each scope runs one request at a time: a root PushFrame, then
// AddContextHandle calls with deterministic request and handle ids. A
// request is repeated — the same request, hence the same request id —
// until it is acknowledged, whatever the failure (not applied, or outcome
// unknown), so an operation is never skipped and never applied twice. A
// line "stop" on standard input makes the workers finish their current
// requests and the driver leave the cluster.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/messages"
)

// Op is one request's outcome, as printed.
type Op struct {
	Ev      string `json:"ev"` // "op"
	Scope   string `json:"scope"`
	Owner   string `json:"owner"` // the member the Client placed it on when sent
	Req     string `json:"req"`
	Kind    string `json:"kind"`   // "push" or "handle"
	Handle  string `json:"handle"` // the handle id (kind handle)
	Frame   string `json:"frame"`  // the root frame id, once known
	Attempt int    `json:"attempt"`
	T0      int64  `json:"t0"`  // unix ns, sent
	T1      int64  `json:"t1"`  // unix ns, answered
	Res     string `json:"res"` // ok, unavailable, unknown, moved, conflict, overloaded, error
	Err     string `json:"err,omitempty"`
}

var out = struct {
	sync.Mutex
	enc *json.Encoder
}{enc: json.NewEncoder(os.Stdout)}

func emit(v any) {
	out.Lock()
	defer out.Unlock()
	_ = out.enc.Encode(v)
}

func main() {
	if err := run(); err != nil {
		emit(map[string]string{"ev": "fatal", "err": err.Error()})
		os.Exit(1)
	}
}

func run() error {
	listen := flag.String("listen", "127.0.0.1:0", "this client's reply address")
	name := flag.String("cluster", "failover", "cluster name")
	peers := flag.String("peers", "", "the storage members to poll, comma-separated")
	expect := flag.Int("expect", 3, "members to see up before starting")
	nScopes := flag.Int("scopes", 120, "scopes to drive")
	prefix := flag.String("prefix", "agent", "scope name prefix")
	workers := flag.Int("workers", 0, "concurrent callers, each driving its share of the scopes round robin (0: one per scope, so that a scope's wait holds up no other)")
	timeout := flag.Duration("timeout", 5*time.Second, "each request's deadline")
	health := flag.Duration("health-interval", 300*time.Millisecond, "health poll interval")
	flag.Parse()

	logger := slog.New(slog.NewJSONHandler(os.Stdout, nil))
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	cc := actors.ClusterConfig{Name: *name, Members: strings.Split(*peers, ","), HealthInterval: *health, RequestTimeout: *timeout,
		Logger: logger, SharedStore: true}
	node, err := actors.JoinCluster(sys, cc, *listen)
	if err != nil {
		return err
	}
	defer node.Stop()

	var scopes []string
	for i := 0; i < *nScopes; i++ {
		scopes = append(scopes, fmt.Sprintf("%s-%d", *prefix, i))
	}
	c := node.Client()
	ready := time.Now().Add(30 * time.Second)
	for len(node.Live()) < *expect {
		if time.Now().After(ready) {
			return fmt.Errorf("only %v up after 30 s", node.Live())
		}
		<-time.After(20 * time.Millisecond) // a bounded readiness poll
	}
	for _, s := range scopes {
		for {
			_, err := c.GetStack(context.Background(), &messages.GetStack{Header: messages.Header{Scope: s}})
			if err == nil || errors.Is(err, actors.ErrNoActiveFrame) {
				break
			}
			if time.Now().After(ready) {
				return fmt.Errorf("scope %s not served within 30 s: %v (live: %v)", s, err, node.Live())
			}
			<-time.After(50 * time.Millisecond) // a bounded readiness poll
		}
	}
	emit(map[string]any{"ev": "ready", "live": node.Live()})

	var stopping atomic.Bool
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == "stop" {
				break
			}
		}
		stopping.Store(true)
	}()

	if *workers <= 0 || *workers > len(scopes) {
		*workers = len(scopes)
	}
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := 0; w < *workers; w++ {
		var mine []string
		for i := w; i < len(scopes); i += *workers {
			mine = append(mine, scopes[i])
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := work(c, node, mine, *timeout, &stopping); err != nil {
				failed.Add(1)
				emit(map[string]string{"ev": "worker-failed", "err": err.Error()})
			}
		}()
	}
	wg.Wait()
	emit(map[string]any{"ev": "done", "failed": failed.Load()})
	return nil
}

// scope is one scope's progress: the request in flight until it is
// acknowledged.
type scope struct {
	name      string
	frame     string
	n         int // operations acknowledged
	push      *messages.PushFrame
	handle    *messages.AddContextHandle
	attempt   int
	notBefore time.Time
}

// work drives its scopes round robin, one request per scope at a time,
// until stopping is set and every scope's current request is acknowledged.
// A scope whose request failed waits retryPause before its next attempt.
func work(c *actors.Client, node *actors.ClusterNode, names []string, timeout time.Duration, stopping *atomic.Bool) error {
	const retryPause = 100 * time.Millisecond
	var ss []*scope
	for _, n := range names {
		ss = append(ss, &scope{name: n})
	}
	var giveUp time.Time
	for {
		open, sent := false, false
		var next time.Time
		for _, s := range ss {
			if stopping.Load() && s.push == nil && s.handle == nil {
				continue // settled
			}
			open = true
			if now := time.Now(); now.Before(s.notBefore) {
				if next.IsZero() || s.notBefore.Before(next) {
					next = s.notBefore
				}
				continue
			}
			res, err := step(c, node, s, timeout)
			if err != nil {
				return err
			}
			sent = true
			if res != "ok" {
				s.notBefore = time.Now().Add(retryPause)
			}
		}
		if !open {
			return nil
		}
		if stopping.Load() {
			if giveUp.IsZero() {
				giveUp = time.Now().Add(30 * time.Second)
			} else if time.Now().After(giveUp) {
				return errors.New("requests still unacknowledged 30 s after stop")
			}
		}
		if !sent {
			<-time.After(time.Until(next)) // pacing the load, not waiting for an actor
		}
	}
}

// step sends s's current request (making the next one if none is open)
// and returns its result.
func step(c *actors.Client, node *actors.ClusterNode, s *scope, timeout time.Duration) (string, error) {
	if s.push == nil && s.handle == nil {
		s.attempt = 0
		if s.frame == "" {
			s.push = &messages.PushFrame{Header: messages.Header{Scope: s.name, RequestID: fmt.Sprintf("%s-op%d", s.name, s.n)},
				Goal: "serve " + s.name, Budget: budget.TokenBudget{Total: 1 << 40}}
		} else {
			s.handle = &messages.AddContextHandle{Header: messages.Header{Scope: s.name, RequestID: fmt.Sprintf("%s-op%d", s.name, s.n)},
				FrameID: s.frame, HandleID: fmt.Sprintf("h%d", s.n), Priority: compaction.Medium,
				Content: fmt.Sprintf("fact %d of %s", s.n, s.name)}
		}
	}
	s.attempt++
	op := Op{Ev: "op", Scope: s.name, Owner: node.Home(s.name), Attempt: s.attempt, Frame: s.frame}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	op.T0 = time.Now().UnixNano()
	var err error
	if s.push != nil {
		op.Kind, op.Req = "push", s.push.RequestID
		var r *messages.PushFrameReply
		if r, err = c.PushFrame(ctx, s.push); err == nil {
			s.frame, op.Frame = r.FrameID, r.FrameID
		}
	} else {
		op.Kind, op.Req, op.Handle = "handle", s.handle.RequestID, s.handle.HandleID
		var r *messages.AddContextHandleReply
		if r, err = c.AddContextHandle(ctx, s.handle); err == nil && r.HandleID != s.handle.HandleID {
			err = fmt.Errorf("reply names handle %q, want %q", r.HandleID, s.handle.HandleID)
		}
	}
	op.T1 = time.Now().UnixNano()
	op.Res = classify(err)
	if err != nil {
		op.Err = err.Error()
	} else {
		s.push, s.handle = nil, nil
		s.n++
	}
	emit(op)
	if op.Res == "error" {
		return op.Res, fmt.Errorf("%s %s: %w", op.Kind, op.Req, err)
	}
	return op.Res, nil
}

// classify names a request's outcome; every one but "error" is retried
// with the same request.
func classify(err error) string {
	var e *messages.Error
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, actors.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, actors.ErrTimeout):
		return "unknown"
	case errors.Is(err, actors.ErrOverloaded):
		return "overloaded"
	case errors.Is(err, actors.ErrVersionConflict):
		return "conflict" // a stale activation's write, refused: nothing applied
	case errors.As(err, &e) && e.Code == "scope_moved":
		return "moved" // its owner was deposed: nothing applied
	}
	return "error"
}
