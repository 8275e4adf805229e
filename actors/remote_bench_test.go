package actors_test

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/actors/wire"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/messages"
)

// BenchmarkRemote measures round trips across processes on 127.0.0.1: this
// process is the client, a child process (this test binary, see TestMain)
// serves a StateIndex on a memory store, so no fsync is measured.
//
//   - op=echo: a trivial remote actor answering a small wire message, the
//     floor of Proto.Actor remoting with the wire envelope;
//   - op=get: Client.GetStack of a 3-frame stack (a read);
//   - op=add: Client.AddContextHandle of ~100 bytes (a write: decide,
//     append to the memory store, apply, reply).
//
// Each caller uses its own scope. Reported: round trips per second
// (rt/s) and the median latency (p50-µs).
func BenchmarkRemote(b *testing.B) {
	p := newRemotePair(b, "STATEINDEX_TEST_CPUPROFILE="+os.Getenv("STATEINDEX_BENCH_CHILD_PROFILE"))
	c := p.c
	scopes := make([]string, 16)
	frameOf := map[string]string{}
	for i := range scopes {
		scopes[i] = fmt.Sprintf("bench-%d", i)
		var parent string
		for d := 0; d < 3; d++ {
			f, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(scopes[i]), ParentID: parent, Goal: "benchmark", Budget: budget.TokenBudget{Total: 1 << 30 >> d}})
			require.NoError(b, err)
			parent = f.FrameID
		}
		frameOf[scopes[i]] = parent
	}
	echoMsg, err := wire.Encode(&messages.GetStack{Header: messages.Header{Scope: "echo"}}, 0)
	require.NoError(b, err)
	echo := actor.NewPID(p.addr, "echo")
	ops := map[string]func(scope string) error{
		"echo": func(string) error {
			_, err := p.cliSys.Root.RequestFuture(echo, echoMsg, 10*time.Second).Result()
			return err
		},
		"get": func(scope string) error {
			_, err := c.GetStack(ctx, &messages.GetStack{Header: messages.Header{Scope: scope}})
			return err
		},
		"add": func(scope string) error {
			_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut(scope), FrameID: frameOf[scope],
				Priority: compaction.Low, Content: "an observation of about a hundred bytes, as an agent would add after a tool call"})
			return err
		},
	}
	// Writes go to fresh scopes each round, far from the handles-per-frame
	// limit.
	round := 0
	freshScopes := func(b *testing.B) []string {
		round++
		out := make([]string, 16)
		for i := range out {
			out[i] = fmt.Sprintf("bench-%d-%d", round, i)
			f, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(out[i]), Goal: "benchmark", Budget: budget.TokenBudget{Total: 1 << 30}})
			require.NoError(b, err)
			frameOf[out[i]] = f.FrameID
		}
		return out
	}
	for _, op := range []string{"echo", "get", "add"} {
		for _, callers := range []int{1, 16} {
			b.Run(fmt.Sprintf("op=%s/callers=%d", op, callers), func(b *testing.B) {
				use := scopes
				if op == "add" {
					use = freshScopes(b)
				}
				measureRemote(b, callers, func(w int) error { return ops[op](use[w]) })
			})
		}
	}
}

// measureRemote runs do from callers goroutines (do(w): caller w's call)
// b.N times in all and reports round trips per second (rt/s) and the
// median latency (p50-µs).
func measureRemote(b *testing.B, callers int, do func(w int) error) {
	lat := make([][]time.Duration, callers)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := 0; w < callers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				if err := do(w); err != nil {
					b.Error(err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "rt/s")
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
	}
}

// BenchmarkRemoteTLS measures what TLS costs a remote round trip: three
// servers (child processes, memory stores) — plaintext, TLS (the server's
// certificate), mutual TLS — each with a caller of its own kind here, and
// the same operations as BenchmarkRemote: op=echo (a trivial remote actor)
// and op=get (Client.GetStack), at 1 and 16 callers. The three kinds take
// turns within each cell, each round starting with the next kind, and the
// cells repeat in rounds (STATEINDEX_BENCH_ROUNDS, default 3), so that a
// machine whose load drifts affects them alike; compare the kinds within a
// round. The secret is not
// measured apart: it travels once per connection, not per message.
//
// It starts two more remoting systems in this process, which the race
// detector reports (gRPC's global logger): it does not run under -race.
func BenchmarkRemoteTLS(b *testing.B) {
	if raceEnabled {
		b.Skip("starts several remoting systems in one process (see remoteClientSystem)")
	}
	p := newPKI(b)
	server, client := p.spec(p.server), p.spec(p.client)
	mServer, mClient := server, client
	mServer.ClientAuth, mClient.ClientAuth = "require", "require"
	type kind struct {
		name string
		c    *actors.Client
		sys  *actor.ActorSystem
		echo *actor.PID
	}
	var kinds []kind
	for _, k := range []struct {
		name           string
		server, caller *secSpec
	}{{"plain", nil, nil}, {"tls", &server, &client}, {"mtls", &mServer, &mClient}} {
		_, addr := startSecureServer(b, "server "+k.name, k.server)
		sys := remoteClientSystem(b)
		if k.caller != nil {
			sys = quietSystem()
			r, err := actors.StartRemote(sys, actors.RemoteConfig("127.0.0.1", 0, actors.WithSecurity(k.caller.security(b, quiet()))))
			require.NoError(b, err)
			b.Cleanup(func() { sys.Shutdown(); r.Shutdown(false) })
		}
		kinds = append(kinds, kind{name: k.name, c: actors.NewClient(sys.Root, actors.RemotePID(addr), 10*time.Second), sys: sys, echo: actor.NewPID(addr, "echo")})
	}
	scopes := make([]string, 16)
	for i := range scopes {
		scopes[i] = fmt.Sprintf("bench-%d", i)
		for _, k := range kinds {
			var parent string
			for d := 0; d < 3; d++ {
				f, err := k.c.PushFrame(ctx, &messages.PushFrame{Header: mut(scopes[i]), ParentID: parent, Goal: "benchmark", Budget: budget.TokenBudget{Total: 1 << 30 >> d}})
				require.NoError(b, err)
				parent = f.FrameID
			}
		}
	}
	echoMsg, err := wire.Encode(&messages.GetStack{Header: messages.Header{Scope: "echo"}}, 0)
	require.NoError(b, err)
	rounds := 3
	if n, err := strconv.Atoi(os.Getenv("STATEINDEX_BENCH_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	for round := 1; round <= rounds; round++ {
		for _, op := range []string{"echo", "get"} {
			for _, callers := range []int{1, 16} {
				// Each round starts with another kind, so that each takes
				// each place in the turn equally often (rounds a multiple
				// of three).
				for i := range kinds {
					k := kinds[(i+round-1)%len(kinds)]
					b.Run(fmt.Sprintf("round=%d/op=%s/callers=%d/sec=%s", round, op, callers, k.name), func(b *testing.B) {
						measureRemote(b, callers, func(w int) error {
							if op == "echo" {
								_, err := k.sys.Root.RequestFuture(k.echo, echoMsg, 10*time.Second).Result()
								return err
							}
							_, err := k.c.GetStack(ctx, &messages.GetStack{Header: messages.Header{Scope: scopes[w]}})
							return err
						})
					})
				}
			}
		}
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
