package actors_test

import (
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

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
				do := ops[op]
				use := scopes
				if op == "add" {
					use = freshScopes(b)
				}
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
							if err := do(use[w]); err != nil {
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
			})
		}
	}
}
