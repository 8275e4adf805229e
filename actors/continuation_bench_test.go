package actors_test

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/messages"
)

// BenchmarkContinueFrame: a ContinueFrame through the actor of a frame of
// 10,000 handles of ~200 tokens (benchContent; every fifth a user's), on
// a bolt file with the journal (the default) fsynced (sync=true) or not.
// Each iteration continues its own scope, built beforehand with fsync off
// and loaded (a GetFrame) before the timer runs: the figure is the
// continuation alone — planning (the carried run under the default 16,000
// token ceiling, the extractive summary of the other ~9,900 handles), one
// append of ~85 events, and applying them. Run with -benchtime=Nx (each
// iteration builds a 10k-handle scope first).
func BenchmarkContinueFrame(b *testing.B) {
	const handles = 10_000
	for _, durable := range []bool{true, false} {
		b.Run(fmt.Sprintf("handles=%d/sync=%v", handles, durable), func(b *testing.B) {
			path := b.TempDir() + "/bench.db"
			start := func(noSync bool) (*eventstore.BoltStore, *actors.Server, func()) {
				store, err := eventstore.Open(path, &eventstore.Options{NoSync: noSync})
				require.NoError(b, err)
				sys := quietSystem()
				cfg := testConfig(newFakeClock())
				cfg.Shards = benchShards
				srv, err := actors.Start(sys, store, cfg)
				require.NoError(b, err)
				return store, srv, func() { srv.Stop(); sys.Shutdown(); _ = store.Close() }
			}
			_, srv, stop := start(true)
			c := srv.Client()
			frames := make([]string, b.N)
			var wg sync.WaitGroup
			errs := make(chan error, b.N)
			sem := make(chan struct{}, 4)
			for i := 0; i < b.N; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					sem <- struct{}{}
					defer func() { <-sem }()
					scope := fmt.Sprintf("bench-%d", i)
					p, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(scope), Goal: "a long task", Budget: budget.TokenBudget{Total: 1 << 30},
						ContextWindow: 4_000_000})
					if err != nil {
						errs <- err
						return
					}
					frames[i] = p.FrameID
					for j := 0; j < handles; j++ {
						role := "assistant"
						if j%5 == 0 {
							role = "user"
						}
						if _, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut(scope), FrameID: p.FrameID, Role: role,
							Priority: compaction.Medium, Content: benchContent(j)}); err != nil {
							errs <- err
							return
						}
					}
				}(i)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(b, err)
			}
			stop()
			_, srv, stop = start(!durable)
			defer stop()
			c = srv.Client()
			for i := range frames {
				_, err := c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: fmt.Sprintf("bench-%d", i)}, FrameID: frames[i]})
				require.NoError(b, err)
			}
			lat := make([]time.Duration, 0, b.N)
			var carried int
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				r, err := c.ContinueFrame(ctx, &messages.ContinueFrame{Header: mut(fmt.Sprintf("bench-%d", i)), FrameID: frames[i]})
				lat = append(lat, time.Since(t0))
				if err != nil {
					b.Fatalf("continue: %v", err)
				}
				carried = r.Carried
			}
			b.StopTimer()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "max-µs")
			b.ReportMetric(float64(carried), "carried")
		})
	}
}
