package actors_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
			p, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut("bench"), Goal: "answer the question", Budget: budget.TokenBudget{Total: 1 << 30}})
			require.NoError(b, err)
			prios := []compaction.Priority{compaction.High, compaction.Medium, compaction.Medium, compaction.Low, compaction.Background}
			for i := 0; i < n; i++ {
				content := benchContent(i) // ~800 bytes, ~200 tokens
				_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut("bench"), FrameID: p.FrameID, Priority: prios[i%len(prios)], Content: content})
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

// benchContent is ~800 bytes of agent-like notes: sentences, a few exact
// facts (numbers, ids, paths), mostly prose.
func benchContent(i int) string {
	return fmt.Sprintf("Observation %d: the build of service-%d took %d.%d s on runner ci-%d. ", i, i%37, i%9+1, i%10, i%4) +
		"The cache was warm and most of the time went into linking the final binary. " +
		fmt.Sprintf("Logs for this run are kept in /var/log/build/%d.log for a week. ", i) +
		"Nothing in the dependency graph changed since the previous run, so the difference comes from the runner itself. " +
		"A second run on the same runner was about as slow, which rules out a cold disk. " +
		"The team suspects the new virtualization layer, but nobody has measured it yet. " +
		"Until then the slow runners stay in the pool, with a note on the dashboard. " +
		strings.Repeat("More details follow in the attached report. ", 3)
}

// BenchmarkDurable: N scopes written concurrently through the Client, each
// write an AddContextHandle of ~1 KiB fsynced before its reply.
func BenchmarkDurable(b *testing.B) {
	benchDurable(b, func(b *testing.B) (eventstore.Store, string) {
		store, err := eventstore.Open(b.TempDir()+"/bench.db", &eventstore.Options{NoSync: benchNoSync})
		require.NoError(b, err)
		return store, ""
	})
}

// BenchmarkDurablePostgres is BenchmarkDurable on the PostgreSQL store
// (STATEINDEX_PG_URL; a fresh schema per size), fenced as `serve --store`
// runs it: the same requests, each acknowledged after its commit.
func BenchmarkDurablePostgres(b *testing.B) {
	base := os.Getenv("STATEINDEX_PG_URL")
	if base == "" {
		b.Skip("STATEINDEX_PG_URL is not set: no PostgreSQL to measure (.ci/postgres.sh start sets one up)")
	}
	benchDurable(b, func(b *testing.B) (eventstore.Store, string) {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, base)
		require.NoError(b, err)
		defer conn.Close(ctx)
		schema := fmt.Sprintf("bench_%d", time.Now().UnixNano())
		_, err = conn.Exec(ctx, "CREATE SCHEMA "+schema)
		require.NoError(b, err)
		b.Cleanup(func() {
			c, err := pgx.Connect(context.Background(), base)
			if err == nil {
				_, _ = c.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
				_ = c.Close(context.Background())
			}
		})
		u, err := url.Parse(base)
		require.NoError(b, err)
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		store, err := eventstore.OpenPostgres(ctx, u.String(), nil)
		require.NoError(b, err)
		return store, actors.OwnerName("bench")
	})
}

func benchDurable(b *testing.B, open func(b *testing.B) (eventstore.Store, string)) {
	for _, n := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("scopes=%d", n), func(b *testing.B) {
			store, owner := open(b)
			defer store.Close()
			sys := quietSystem()
			defer sys.Shutdown()
			cfg := testConfig(newFakeClock())
			cfg.Shards = benchShards
			cfg.Owner = owner
			srv, err := actors.Start(sys, store, cfg)
			require.NoError(b, err)
			defer srv.Stop()
			c := srv.Client()
			roots := make([]string, n)
			for i := range roots {
				p, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(fmt.Sprintf("d%d", i)), Goal: "g", Budget: budget.TokenBudget{Total: 1 << 40}})
				require.NoError(b, err)
				roots[i] = p.FrameID
			}
			content := strings.Repeat("x", 1000)
			var next atomic.Int64
			b.ResetTimer()
			var wg sync.WaitGroup
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					scope := fmt.Sprintf("d%d", i)
					for next.Add(1) <= int64(b.N) {
						if _, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut(scope), FrameID: roots[i], Priority: compaction.Low, Content: content}); err != nil {
							b.Error(err)
							return
						}
					}
				}(i)
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
	}
}

var benchShards = actors.DefaultConfig().Shards

// BenchmarkDurableNoSync is BenchmarkDurable's CPU ceiling: the same work
// with fsync off (not durable; for profiling the actor path only).
func BenchmarkDurableNoSync(b *testing.B) {
	benchNoSync = true
	defer func() { benchNoSync = false }()
	BenchmarkDurable(b)
}

var benchNoSync bool
