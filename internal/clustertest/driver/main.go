// Command driver is the client side of the multi-process cluster test
// (package clustertest): a storage member of the cluster whose Client
// drives scopes homed on the other members, and reports every request's
// outcome as one JSON line on standard output.
//
// Each scope runs one request at a time: a root PushFrame, then
// AddContextHandle calls with deterministic request and handle ids. A
// request is repeated — the same request, hence the same request id — until
// it is acknowledged: after "unavailable" (not applied) and after "unknown"
// (outcome unknown), so an operation is never skipped and never applied
// twice. A line "stop" on standard input makes the workers finish their
// current requests and the driver leave the cluster.
package main

import (
	"bufio"
	"bytes"
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
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/messages"
)

// Op is one request's outcome, as printed.
type Op struct {
	Ev      string `json:"ev"` // "op"
	Scope   string `json:"scope"`
	Home    string `json:"home"`
	Req     string `json:"req"`
	Kind    string `json:"kind"`   // "push" or "handle"
	Handle  string `json:"handle"` // the handle id (kind handle)
	Frame   string `json:"frame"`  // the root frame id, once known
	Attempt int    `json:"attempt"`
	T0      int64  `json:"t0"`  // unix ns, sent
	T1      int64  `json:"t1"`  // unix ns, answered
	Res     string `json:"res"` // ok, unavailable, unknown, error
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
	data := flag.String("data", "", "data directory of this member")
	listen := flag.String("listen", "", "this member's address")
	name := flag.String("cluster", "clustertest", "cluster name")
	peers := flag.String("peers", "", "all storage members, comma-separated")
	nScopes := flag.Int("scopes", 100, "scopes to drive (homed on the other members)")
	workers := flag.Int("workers", 10, "concurrent callers")
	timeout := flag.Duration("timeout", 5*time.Second, "each request's deadline")
	health := flag.Duration("health-interval", 300*time.Millisecond, "health poll interval")
	flag.Parse()

	logger := slog.New(slog.NewJSONHandler(os.Stdout, nil))
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	store, err := eventstore.Open(*data+"/stateindex.db", &eventstore.Options{OpenTimeout: 2 * time.Second})
	if err != nil {
		return err
	}
	defer store.Close()
	cfg := actors.DefaultConfig()
	cfg.TokenKey = bytes.Repeat([]byte("k"), 32)
	cfg.Logger = quiet
	members := strings.Split(*peers, ",")
	cc := actors.ClusterConfig{Name: *name, Members: members, HealthInterval: *health, RequestTimeout: *timeout, Logger: logger}
	node, err := actors.StartMember(sys, store, cfg, cc, *listen)
	if err != nil {
		return err
	}
	defer node.Stop()

	// Scopes homed on the other members.
	var scopes []string
	for i := 0; len(scopes) < *nScopes; i++ {
		s := fmt.Sprintf("agent-%d", i)
		if node.Home(s) != *listen {
			scopes = append(scopes, s)
		}
	}
	// Wait until every member is up and answers.
	c := node.Client()
	ready := time.Now().Add(30 * time.Second)
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
	homes := map[string]string{}
	for _, s := range scopes {
		homes[s] = node.Home(s)
	}
	// A member refuses a scope whose home it is not: ask another member
	// for scopes[0] directly, by its PID.
	for _, m := range members {
		if m != homes[scopes[0]] && m != *listen {
			direct := actors.NewClient(sys.Root, actors.RemotePID(m), *timeout)
			_, err := direct.GetStack(context.Background(), &messages.GetStack{Header: messages.Header{Scope: scopes[0]}})
			emit(map[string]any{"ev": "misroute", "scope": scopes[0], "to": m, "badRequest": errors.Is(err, actors.ErrBadRequest), "err": fmt.Sprint(err)})
			break
		}
	}
	emit(map[string]any{"ev": "ready", "homes": homes, "live": node.Live()})

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
			if err := work(c, mine, homes, *timeout, &stopping); err != nil {
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
	name, home string
	frame      string
	n          int // operations acknowledged
	push       *messages.PushFrame
	handle     *messages.AddContextHandle
	attempt    int
	notBefore  time.Time
}

// work drives its scopes round robin, one request per scope at a time,
// until stopping is set and every scope's current request is acknowledged.
// A scope whose request was refused as unavailable waits retryPause before
// its next attempt, so that a member that is down is not hammered.
func work(c *actors.Client, names []string, homes map[string]string, timeout time.Duration, stopping *atomic.Bool) error {
	const retryPause = 100 * time.Millisecond
	var ss []*scope
	for _, n := range names {
		ss = append(ss, &scope{name: n, home: homes[n]})
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
			res, err := step(c, s, timeout)
			if err != nil {
				return err
			}
			sent = true
			if res == "unavailable" {
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
func step(c *actors.Client, s *scope, timeout time.Duration) (string, error) {
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
	op := Op{Ev: "op", Scope: s.name, Home: s.home, Attempt: s.attempt, Frame: s.frame}
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
	switch {
	case err == nil:
		op.Res = "ok"
		s.push, s.handle = nil, nil
		s.n++
	case errors.Is(err, actors.ErrUnavailable):
		op.Res, op.Err = "unavailable", err.Error()
	case errors.Is(err, actors.ErrTimeout):
		op.Res, op.Err = "unknown", err.Error()
	default:
		op.Res, op.Err = "error", err.Error()
	}
	emit(op)
	if op.Res == "error" {
		return op.Res, fmt.Errorf("%s %s: %w", op.Kind, op.Req, err)
	}
	return op.Res, nil
}
