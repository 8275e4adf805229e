package actors_test

import (
	"sort"
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

// BenchmarkAssembleCounter is BenchmarkAssemble's 1,000-handle case under
// each server counter: the estimate, o200k_base (handles counted when added;
// only the brief, breadcrumbs and summaries are counted at assembly), and
// each again with three calibration samples recorded (the pack then fits an
// effective budget).
func BenchmarkAssembleCounter(b *testing.B) {
	const n, budgetTokens = 1000, 8000
	for _, tc := range []struct {
		name       string
		counter    string
		calibrated bool
	}{
		{"estimate", tokenizer.Estimate, false},
		{"o200k_base", tokenizer.O200kBase, false},
		{"estimate/calibrated", tokenizer.Estimate, true},
		{"o200k_base/calibrated", tokenizer.O200kBase, true},
	} {
		b.Run("handles=1000/counter="+tc.name, func(b *testing.B) {
			sys := quietSystem()
			defer sys.Shutdown()
			cfg := testConfig(newFakeClock())
			cfg.Counter, cfg.CounterName = tokenizer.MustNew(tc.counter), tc.counter
			srv, err := actors.Start(sys, eventstore.NewMemory(), cfg)
			require.NoError(b, err)
			defer srv.Stop()
			c := srv.Client()
			p, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut("bench"), Goal: "answer the question", Budget: budget.TokenBudget{Total: 1 << 30}})
			require.NoError(b, err)
			prios := []compaction.Priority{compaction.High, compaction.Medium, compaction.Medium, compaction.Low, compaction.Background}
			for i := 0; i < n; i++ {
				_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut("bench"), FrameID: p.FrameID, Priority: prios[i%len(prios)], Content: benchContent(i)})
				require.NoError(b, err)
			}
			if tc.calibrated {
				for _, ratio := range []int64{1100, 1150, 1120} { // provider/pack ×1000
					_, err := c.RecordUsage(ctx, &messages.RecordUsage{Header: mut("bench"), FrameID: p.FrameID, Cost: budget.Cost{Turns: 1},
						Calibration: &messages.Calibration{PackTokens: 7000, ProviderInputTokens: 7 * ratio, Counter: tc.counter}})
					require.NoError(b, err)
				}
			}
			req := &messages.AssembleContextPack{Header: messages.Header{Scope: "bench"}, FrameID: p.FrameID, BudgetTokens: budgetTokens}
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				pack, err := c.AssembleContextPack(ctx, req)
				lat = append(lat, time.Since(start))
				if err != nil || (pack.TokenSummary.Calibration != nil) != tc.calibrated || pack.TokenSummary.Used > budgetTokens {
					b.Fatalf("assemble: %v %+v", err, pack.TokenSummary)
				}
			}
			b.StopTimer()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}
