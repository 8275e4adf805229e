package actors_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/messages"
)

// BenchmarkAssemble: AssembleContextPack through the actor for a frame of N
// handles of ~200 tokens each, budget 8,000 tokens. Reports the median.
func BenchmarkAssemble(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("handles=%d", n), func(b *testing.B) {
			sys := quietSystem()
			defer sys.Shutdown()
			cfg := testConfig(newFakeClock())
			srv, err := actors.Start(sys, eventstore.NewMemory(), cfg)
			require.NoError(b, err)
			defer srv.Stop()
			c := srv.Client()
			p, err := c.PushFrame(ctx, &messages.PushFrame{Mutation: mut("bench"), Goal: "answer the question", Budget: budget.TokenBudget{Total: 1 << 30}})
			require.NoError(b, err)
			prios := []compaction.Priority{compaction.High, compaction.Medium, compaction.Medium, compaction.Low, compaction.Background}
			for i := 0; i < n; i++ {
				content := fmt.Sprintf("fact %d: ", i) + strings.Repeat("lorem ipsum dolor sit amet ", 29) // ~800 bytes, ~200 tokens
				_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Mutation: mut("bench"), FrameID: p.FrameID, Priority: prios[i%len(prios)], Content: content})
				require.NoError(b, err)
			}
			req := &messages.AssembleContextPack{Scope: "bench", FrameID: p.FrameID, BudgetTokens: 8000}
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				pack, err := c.AssembleContextPack(ctx, req)
				lat = append(lat, time.Since(start))
				if err != nil || pack.TokenSummary.Used > 8000 {
					b.Fatalf("assemble: %v", err)
				}
			}
			b.StopTimer()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}
