package actors_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/messages"
)

// TestSubscriptionDeliveryBench measures subscriptions while
// BenchmarkDurable's workload runs (64 scopes writing ~1 KiB
// AddContextHandle requests, fsynced, on a bolt file): delivery latency
// from the commit (the store's CommitWatcher signal that made the event
// durable) to the handler, p50 and p99; events/s delivered to each of 1
// and 16 subscribers; and the workload's throughput with 0, 1 and 16
// subscribers. Rounds alternate the three settings; figures are medians.
// It is a measurement, not a check: run it with
//
//	STATEINDEX_SUB_BENCH=1 go test -count=1 -run TestSubscriptionDeliveryBench -v ./actors
func TestSubscriptionDeliveryBench(t *testing.T) {
	if os.Getenv("STATEINDEX_SUB_BENCH") == "" {
		t.Skip("a measurement: STATEINDEX_SUB_BENCH=1")
	}
	const rounds, writes, scopes = 7, 4000, 64
	type figures struct{ opsPerSec, p50, p99, evPerSec []float64 }
	res := map[int]*figures{0: {}, 1: {}, 16: {}}
	for r := range rounds {
		for _, subs := range []int{0, 1, 16} {
			ops, p50, p99, evs := subBenchRound(t, subs, writes, scopes)
			f := res[subs]
			f.opsPerSec = append(f.opsPerSec, ops)
			if subs > 0 {
				f.p50, f.p99, f.evPerSec = append(f.p50, p50), append(f.p99, p99), append(f.evPerSec, evs)
			}
			t.Logf("round %d, %2d subscribers: workload %.0f writes/s; delivery p50 %.2f ms, p99 %.2f ms; %.0f events/s per subscriber",
				r+1, subs, ops, p50, p99, evs)
		}
	}
	for _, subs := range []int{0, 1, 16} {
		f := res[subs]
		if subs == 0 {
			t.Logf("median of %d rounds, no subscriber: workload %.0f writes/s", rounds, median(f.opsPerSec))
			continue
		}
		t.Logf("median of %d rounds, %d subscriber(s): workload %.0f writes/s; delivery p50 %.2f ms, p99 %.2f ms; %.0f events/s per subscriber",
			rounds, subs, median(f.opsPerSec), median(f.p50), median(f.p99), median(f.evPerSec))
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	sort.Float64s(s)
	return s[len(s)/2]
}

// subBenchRound runs the workload once with subs subscribers (from now, all
// events) and returns the workload's writes/s, the delivery latency p50
// and p99 (ms) over every subscriber's events, and the events/s each
// subscriber received (its events over the time from the first write to
// its last delivery).
func subBenchRound(t *testing.T, subs, writes, scopes int) (ops, p50, p99, evPerSec float64) {
	dir := t.TempDir()
	store, err := eventstore.Open(dir+"/bench.db", nil)
	require.NoError(t, err)
	defer store.Close()
	sys := quietSystem()
	defer sys.Shutdown()
	cfg := testConfig(newFakeClock())
	cfg.Clock = time.Now
	srv, err := actors.Start(sys, store, cfg)
	require.NoError(t, err)
	defer srv.Stop()
	c := srv.Client()
	roots := make([]string, scopes)
	for i := range roots {
		p, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(fmt.Sprintf("d%d", i)), Goal: "g", Budget: budget.TokenBudget{Total: 1 << 40}})
		require.NoError(t, err)
		roots[i] = p.FrameID
	}
	// When each sequence became durable: the commit signal's times.
	type commit struct {
		seq uint64
		at  time.Time
	}
	var cmu sync.Mutex
	var commits []commit
	stop := store.WatchCommits(func(seq uint64) {
		now := time.Now()
		cmu.Lock()
		commits = append(commits, commit{seq, now})
		cmu.Unlock()
	})
	defer stop()
	committedAt := func(seq uint64) time.Time {
		cmu.Lock()
		defer cmu.Unlock()
		i := sort.Search(len(commits), func(i int) bool { return commits[i].seq >= seq })
		if i == len(commits) {
			return time.Time{}
		}
		return commits[i].at
	}

	type recv struct {
		seqs []uint64
		at   []time.Time
		done chan struct{}
		last uint64
	}
	start0, err := store.LastSeq(ctx)
	require.NoError(t, err)
	want := start0 + uint64(writes)
	var receivers []*recv
	var running []*actors.Subscription
	for range subs {
		rc := &recv{seqs: make([]uint64, 0, writes), at: make([]time.Time, 0, writes), done: make(chan struct{})}
		receivers = append(receivers, rc)
		sub, err := c.Subscribe(ctx, actors.SubscribeOptions{FromNow: true, Handler: func(_ context.Context, ev messages.SubscribedEvent) error {
			rc.seqs = append(rc.seqs, ev.Seq)
			rc.at = append(rc.at, time.Now())
			if ev.Seq >= want {
				close(rc.done)
			}
			return nil
		}})
		require.NoError(t, err)
		running = append(running, sub)
	}
	content := strings.Repeat("x", 1000)
	var next atomic.Int64
	begin := time.Now()
	var wg sync.WaitGroup
	for i := range scopes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			scope := fmt.Sprintf("d%d", i)
			for next.Add(1) <= int64(writes) {
				_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut(scope), FrameID: roots[i], Priority: compaction.Low, Content: content})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	ops = float64(writes) / time.Since(begin).Seconds()
	if subs == 0 {
		return ops, 0, 0, 0
	}
	var lat []float64
	var rates []float64
	for _, rc := range receivers {
		select {
		case <-rc.done:
		case <-time.After(60 * time.Second):
			t.Fatalf("a subscriber received %d of %d events", len(rc.seqs), writes)
		}
		for i, s := range rc.seqs {
			if at := committedAt(s); !at.IsZero() {
				lat = append(lat, float64(rc.at[i].Sub(at).Microseconds())/1000)
			}
		}
		rates = append(rates, float64(len(rc.seqs))/rc.at[len(rc.at)-1].Sub(begin).Seconds())
	}
	for _, s := range running {
		require.NoError(t, s.Close())
	}
	sort.Float64s(lat)
	return ops, lat[len(lat)/2], lat[len(lat)*99/100], median(rates)
}
