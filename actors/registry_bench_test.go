package actors

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/budget"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// TestRegistryQueryCost measures ListFrames' index queries on a bolt file
// holding N frames (STATEINDEX_REGISTRY_BENCH: a comma-separated list of
// sizes, e.g. 10000,1000000; skipped without it). The rows are written
// straight into the index table through the follower's batch (regBatch:
// the same keys and values as the follower writes; no log behind them),
// 20,000 rows per TableWrite. It prints each query's p50 and p99 over 200
// runs: their cost must not grow with the number of frames.
//
//	STATEINDEX_REGISTRY_BENCH=10000,1000000 go test -run TestRegistryQueryCost -v -timeout 60m ./actors/
func TestRegistryQueryCost(t *testing.T) {
	env := os.Getenv("STATEINDEX_REGISTRY_BENCH")
	if env == "" {
		t.Skip("set STATEINDEX_REGISTRY_BENCH=10000,1000000 to run")
	}
	var sizes []int
	for _, s := range splitComma(env) {
		n, err := strconv.Atoi(s)
		require.NoError(t, err)
		sizes = append(sizes, n)
	}
	for _, n := range sizes {
		benchRegistrySize(t, n)
	}
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

// benchRows is frame i of the synthetic registry: 100 frames per scope
// (a root and 99 children), one frame a millisecond, statuses in a fixed
// mix (1 in 50 failed, 1 in 10 live).
func benchRow(i int) frames.RegistryRow {
	scope := fmt.Sprintf("tenant-%d.agent-%d", i/100_000, i/100)
	r := frames.RegistryRow{Scope: scope, FrameID: fmt.Sprintf("f%08d", i), Goal: fmt.Sprintf("task %d", i),
		Status: frames.StatusCompleted, CreatedAt: int64(1_700_000_000_000_000_000) + int64(i)*int64(time.Millisecond),
		PushVersion: int64(i%100)*4 + 1, EndVersion: int64(i%100)*4 + 3}
	r.FinishedAt = r.CreatedAt + int64(time.Second)
	if i%100 != 0 {
		r.ParentID = fmt.Sprintf("f%08d", i-i%100)
		r.Depth = 1
	}
	switch {
	case i%100 == 0:
		r.Status, r.FinishedAt, r.EndVersion, r.LiveKids = frames.StatusWaiting, 0, 0, 9
	case i%50 == 1:
		r.Status = frames.StatusFailed
	case i%10 == 5:
		r.Status, r.FinishedAt, r.EndVersion = frames.StatusActive, 0, 0
	}
	return r
}

func benchRegistrySize(t *testing.T, n int) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "registry.db")
	st, err := eventstore.Open(path, &eventstore.Options{NoSync: true})
	require.NoError(t, err)
	defer st.Close()
	start := time.Now()
	const per = 20_000
	for lo := 0; lo < n; lo += per {
		b := newRegBatch(ctx, st)
		for i := lo; i < min(lo+per, n); i++ {
			r := benchRow(i)
			k := string(rowKey(r.Scope, r.FrameID))
			b.orig[k], b.cur[k] = nil, &r // new rows: nothing to read back
			b.order = append(b.order, k)
		}
		ops, err := b.ops()
		require.NoError(t, err)
		ops = append(ops, positionOp(uint64(min(lo+per, n))))
		require.NoError(t, st.TableWrite(ctx, registryTable, ops))
	}
	fi, err := os.Stat(path)
	require.NoError(t, err)
	t.Logf("%d frames: index written in %s, file %d MiB", n, time.Since(start).Round(time.Millisecond), fi.Size()>>20)

	mid := benchRow(n / 2)
	deep := &messages.ListFrames{Limit: 100}
	{ // a cursor half-way down the listing
		s := appendSuffix(nil, mid.CreatedAt, mid.Scope, mid.FrameID)
		deep.Cursor = encodeCursor(s)
	}
	queries := []struct {
		name string
		req  *messages.ListFrames
	}{
		{"newest 100", &messages.ListFrames{}},
		{"newest 1000", &messages.ListFrames{Limit: 1000}},
		{"a page half-way down (cursor)", deep},
		{"status failed", &messages.ListFrames{Statuses: []string{"failed"}}},
		{"status active or waiting", &messages.ListFrames{Statuses: []string{"active", "waiting"}}},
		{"one scope", &messages.ListFrames{InScope: mid.Scope}},
		{"children of a parent", &messages.ListFrames{InScope: mid.Scope, ParentID: mid.ParentID}},
		{"scope prefix (a tenant)", &messages.ListFrames{ScopePrefix: "tenant-0.agent-1"}},
		{"scope prefix (every tenant)", &messages.ListFrames{ScopePrefix: "tenant-"}},
		{"goal prefix (selective)", &messages.ListFrames{GoalPrefix: fmt.Sprintf("task %d", n/2)}},
		{"goal prefix (broad)", &messages.ListFrames{GoalPrefix: "task 1"}},
		{"finished in a window (no index)", &messages.ListFrames{FinishedAfter: mid.FinishedAt, FinishedBefore: mid.FinishedAt + int64(10*time.Second)}},
		{"created in a 10 s window", &messages.ListFrames{CreatedAfter: mid.CreatedAt, CreatedBefore: mid.CreatedAt + int64(10*time.Second)}},
	}
	for _, q := range queries {
		cq, e := compileList(q.req)
		require.Nil(t, e)
		var lat []time.Duration
		var got int
		for i := 0; i < 200; i++ {
			t0 := time.Now()
			r, err := answerList(ctx, st, cq, uint64(n))
			lat = append(lat, time.Since(t0))
			require.NoError(t, err)
			got = len(r.Frames)
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		t.Logf("%8d frames  %-32s %4d entries  p50 %8s  p99 %8s", n, q.name, got,
			lat[len(lat)/2].Round(time.Microsecond), lat[len(lat)*99/100].Round(time.Microsecond))
	}
}

// TestRegistryWriteCost measures what keeping the registry costs the
// durable write path: 16 writers append (fsynced, the default journal)
// on a bolt file with the registry on and off, in alternating rounds
// (STATEINDEX_REGISTRY_WRITE_BENCH=rounds; skipped without it); it prints
// each round's writes/s and the medians.
//
//	STATEINDEX_REGISTRY_WRITE_BENCH=5 go test -run TestRegistryWriteCost -v ./actors/
func TestRegistryWriteCost(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("STATEINDEX_REGISTRY_WRITE_BENCH"))
	if rounds <= 0 {
		t.Skip("set STATEINDEX_REGISTRY_WRITE_BENCH=5 to run")
	}
	const writers, each = 16, 150
	run := func(off bool) float64 {
		st, err := eventstore.Open(filepath.Join(t.TempDir(), "w.db"), nil)
		require.NoError(t, err)
		defer st.Close()
		sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog() }))
		defer sys.Shutdown()
		cfg := DefaultConfig()
		cfg.TokenKey, cfg.Logger, cfg.RegistryOff = make([]byte, 32), quietLog(), off
		if d, err := time.ParseDuration(os.Getenv("STATEINDEX_REGISTRY_INTERVAL")); err == nil {
			cfg.RegistryInterval = d
		}
		srv, err := Start(sys, st, cfg)
		require.NoError(t, err)
		defer srv.Stop()
		c := srv.Client()
		ctx := context.Background()
		var wg sync.WaitGroup
		start := time.Now()
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				scope := fmt.Sprintf("w-%d", w)
				root, err := c.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: scope}, Goal: "root", Budget: budget.TokenBudget{Total: 1 << 40}})
				if !assert.NoError(t, err) {
					return
				}
				for i := 0; i < each; i++ {
					kid, err := c.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: scope}, ParentID: root.FrameID, Goal: "step", Budget: budget.TokenBudget{Total: 10}})
					if !assert.NoError(t, err) {
						return
					}
					_, err = c.PopFrame(ctx, &messages.PopFrame{Header: messages.Header{Scope: scope}, FrameID: kid.FrameID, Status: frames.StatusCompleted})
					if !assert.NoError(t, err) {
						return
					}
				}
			}()
		}
		wg.Wait()
		return float64(writers*(1+2*each)) / time.Since(start).Seconds()
	}
	var on, off []float64
	for r := 0; r < rounds; r++ {
		off = append(off, run(true))
		on = append(on, run(false))
		t.Logf("round %d: registry off %.0f writes/s, on %.0f writes/s", r+1, off[r], on[r])
	}
	med := func(v []float64) float64 { s := append([]float64(nil), v...); sort.Float64s(s); return s[len(s)/2] }
	t.Logf("median over %d rounds: registry off %.0f writes/s, on %.0f writes/s (%+.1f%%)", rounds, med(off), med(on), 100*(med(on)/med(off)-1))
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
