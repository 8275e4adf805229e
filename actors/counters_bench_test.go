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
	"github.com/stateindex/stateindex/tokenizer"
)

// BenchmarkAssembleCounter: AssembleContextPack through the actor for a
// frame of 1,000 handles (~200 tokens each), budget 8,000, under the
// estimate and under o200k_base: the handles were counted once when added,
// so only the text the pack generates is counted at assembly.
func BenchmarkAssembleCounter(b *testing.B) {
	for _, name := range []string{tokenizer.Estimate, tokenizer.O200kBase} {
		b.Run("counter="+name, func(b *testing.B) {
			sys := quietSystem()
			defer sys.Shutdown()
			cfg := testConfig(newFakeClock())
			ct := tokenizer.MustNew(name)
			cfg.Counter, cfg.CounterName = ct, ct.Name()
			srv, err := actors.Start(sys, eventstore.NewMemory(), cfg)
			require.NoError(b, err)
			defer srv.Stop()
			c := srv.Client()
			p, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut("bench"), Goal: "answer the question", Budget: budget.TokenBudget{Total: 1 << 30}})
			require.NoError(b, err)
			prios := []compaction.Priority{compaction.High, compaction.Medium, compaction.Medium, compaction.Low, compaction.Background}
			for i := 0; i < 1000; i++ {
				_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut("bench"), FrameID: p.FrameID, Priority: prios[i%len(prios)], Content: benchContent(i)})
				require.NoError(b, err)
			}
			req := &messages.AssembleContextPack{Header: messages.Header{Scope: "bench"}, FrameID: p.FrameID, BudgetTokens: 8000}
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				pack, err := c.AssembleContextPack(ctx, req)
				lat = append(lat, time.Since(start))
				if err != nil || pack.TokenSummary.Used > 8000 || pack.Metadata.Counter != name {
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

// BenchmarkAddHandleCounter: AddContextHandle of a handle of the given
// size under the estimate (counted inline) and o200k_base (counted by a
// job off the shard's goroutine), end to end through the actor.
func BenchmarkAddHandleCounter(b *testing.B) {
	for _, name := range []string{tokenizer.Estimate, tokenizer.O200kBase} {
		for _, kib := range []int{1, 256} {
			b.Run(fmt.Sprintf("counter=%s/kib=%d", name, kib), func(b *testing.B) {
				sys := quietSystem()
				defer sys.Shutdown()
				cfg := testConfig(newFakeClock())
				cfg.Frames.MaxContentBytes = 1 << 20
				ct := tokenizer.MustNew(name)
				cfg.Counter, cfg.CounterName = ct, ct.Name()
				srv, err := actors.Start(sys, eventstore.NewMemory(), cfg)
				require.NoError(b, err)
				defer srv.Stop()
				c := srv.Client()
				p, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut("bench"), Goal: "g", Budget: budget.TokenBudget{Total: 1 << 40}})
				require.NoError(b, err)
				var sb strings.Builder
				for i := 0; sb.Len() < kib<<10; i++ {
					sb.WriteString(benchContent(i))
				}
				content := sb.String()[:kib<<10]
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut("bench"), FrameID: p.FrameID, Priority: compaction.Low,
						Content: fmt.Sprintf("%d %s", i, content)})
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
