package actors_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/messages"
	"github.com/stateindex/stateindex/tokenizer"
)

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
