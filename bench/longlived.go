package bench

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// The long-lived-agent scenario (issue 11): agents that start and finish
// runs for ever, on a durable store, with retention keeping the last
// keep_last_n runs of each scope (D = 0) and an idempotency horizon shorter
// than the scenario — against the same scenario without retention. With
// retention the data directory stops growing; the question is what the
// passes cost the agents.

const (
	// LongLivedKeepLastN and LongLivedHorizon are the scenario's policy.
	LongLivedKeepLastN = 10
	LongLivedHorizon   = 2 * time.Second
	// longLivedSkew is the scenario's clock-skew allowance.
	longLivedSkew = 100 * time.Millisecond
	// longLivedInterval is the time between retention passes.
	longLivedInterval = time.Second
	// longLivedEventsPerRun is what one run appends: push a root, push a
	// child, two handles, usage, pop the child, pop the root.
	longLivedEventsPerRun = 7
)

// LongLivedRun is one run of the scenario, with or without retention.
type LongLivedRun struct {
	Retention bool    `json:"retention"`
	Events    int64   `json:"events"`
	Seconds   float64 `json:"seconds"`
	OpsPerSec float64 `json:"events_per_sec"`
	// DirQuarterBytes is the data directory (data file plus journal) when a
	// quarter of the events were written, DirEndBytes at the end.
	DirQuarterBytes int64   `json:"dir_quarter_bytes"`
	DirEndBytes     int64   `json:"dir_end_bytes"`
	Growth          float64 `json:"end_over_quarter"`
	JournalBytes    int64   `json:"journal_bytes"`
	// RecordsRemoved is what retention removed in all (the scopes' bases).
	RecordsRemoved int64 `json:"records_removed,omitempty"`
}

// LongLivedResult is the scenario: alternating pairs (with, without).
type LongLivedResult struct {
	Scopes    int            `json:"scopes"`
	KeepLastN int            `json:"keep_last_n"`
	HorizonMs int64          `json:"idempotency_horizon_ms"`
	Runs      []LongLivedRun `json:"runs"`
	// Medians over the pairs: the directory's growth with retention, and
	// throughput with retention ÷ without.
	Growth          float64 `json:"median_growth_with_retention"`
	ThroughputRatio float64 `json:"median_throughput_with_over_without"`
}

// longLived runs pairs of the scenario (with retention first in even
// pairs, second in odd ones), events events each over scopes scopes.
func longLived(ctx context.Context, o *Options, scopes, events, pairs int) (LongLivedResult, error) {
	res := LongLivedResult{Scopes: scopes, KeepLastN: LongLivedKeepLastN, HorizonMs: LongLivedHorizon.Milliseconds()}
	var growth, ratio []float64
	for p := 0; p < pairs; p++ {
		var with, without LongLivedRun
		for _, ret := range []bool{p%2 == 0, p%2 != 0} {
			o.progress("long-lived: pair %d of %d, retention %v, %d events over %d scopes", p+1, pairs, ret, events, scopes)
			r, err := longLivedRun(ctx, o, scopes, events, ret)
			if err != nil {
				return res, err
			}
			res.Runs = append(res.Runs, r)
			if ret {
				with = r
			} else {
				without = r
			}
		}
		growth = append(growth, with.Growth)
		ratio = append(ratio, Ratio(with.OpsPerSec, without.OpsPerSec))
	}
	res.Growth, res.ThroughputRatio = median(growth), median(ratio)
	return res, nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// dirBytes is the size of every file under dir.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

func longLivedRun(ctx context.Context, o *Options, scopes, events int, retention bool) (LongLivedRun, error) {
	r := LongLivedRun{Retention: retention}
	dir, err := scratch(o.Dir, "long-lived-"+strconv.FormatBool(retention))
	if err != nil {
		return r, err
	}
	defer o.cleanup(dir)
	cfg := config(o.Shards)
	cfg.RequestHorizon, cfg.ClockSkew = LongLivedHorizon, longLivedSkew
	n, err := startWith(dbPath(dir, "longlived"), nil, cfg) // durable, journal on: as users run it
	if err != nil {
		return r, err
	}
	if retention {
		err = n.srv.StartRetention(actors.RetentionConfig{Interval: longLivedInterval,
			Policy: func(string) (frames.RetentionPolicy, string, bool) {
				return frames.RetentionPolicy{KeepLastN: LongLivedKeepLastN, OnCompletion: frames.CompletionDelete}, "", true
			}})
		if err != nil {
			return r, errs(err, n.stop())
		}
	}
	var written atomic.Int64
	quarter := int64(events / 4)
	var quarterOnce sync.Once
	runs := events / longLivedEventsPerRun
	perScope := (runs + scopes - 1) / scopes
	start := time.Now()
	var wg sync.WaitGroup
	errc := make(chan error, scopes)
	for i := range scopes {
		a := &agent{c: n.client, scope: fmt.Sprintf("agent-%03d", i), size: 512}
		wg.Go(func() {
			for k := 0; k < perScope; k++ {
				if err := a.oneRun(ctx, k); err != nil {
					errc <- err
					return
				}
				if written.Add(longLivedEventsPerRun) >= quarter {
					quarterOnce.Do(func() { r.DirQuarterBytes = dirBytes(dir) })
				}
			}
		})
	}
	wg.Wait()
	r.Seconds = time.Since(start).Seconds()
	select {
	case err := <-errc:
		return r, errs(err, n.stop())
	default:
	}
	r.Events = written.Load()
	r.OpsPerSec = float64(r.Events) / r.Seconds
	r.DirEndBytes = dirBytes(dir)
	if js, ok := n.store.(journaled); ok {
		r.JournalBytes = js.JournalStats().MaxBytes
	}
	r.Growth = Ratio(float64(r.DirEndBytes), float64(r.DirQuarterBytes))
	for i := range scopes {
		b, err := n.store.StreamBase(ctx, fmt.Sprintf("agent-%03d", i))
		if err != nil {
			return r, errs(err, n.stop())
		}
		r.RecordsRemoved += b.Version
	}
	return r, n.stop()
}

// oneRun is one run of a long-lived agent: a root with one child that
// gathers two handles and usage; both finish.
func (a *agent) oneRun(ctx context.Context, k int) error {
	h := a.mut()
	root, err := a.c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "task " + strconv.Itoa(k), Budget: budget.TokenBudget{Total: 100_000}})
	if err != nil {
		return fmt.Errorf("long-lived run %d of %s: %w", k, a.scope, err)
	}
	child, err := a.c.PushFrame(ctx, &messages.PushFrame{Header: h, ParentID: root.FrameID, Goal: "step", Budget: budget.TokenBudget{Total: 10_000}})
	if err == nil {
		for j := range 2 {
			if _, err = a.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, FrameID: child.FrameID, Priority: compaction.Medium,
				Content: text("fact "+strconv.Itoa(j)+" of run "+strconv.Itoa(k), a.size)}); err != nil {
				break
			}
		}
	}
	if err == nil {
		_, err = a.c.RecordUsage(ctx, &messages.RecordUsage{Header: h, FrameID: child.FrameID, Cost: budget.Cost{InputTokens: 800, OutputTokens: 200, Turns: 1}})
	}
	if err == nil {
		_, err = a.c.PopFrame(ctx, &messages.PopFrame{Header: h, FrameID: child.FrameID, Status: frames.StatusCompleted})
	}
	if err == nil {
		_, err = a.c.PopFrame(ctx, &messages.PopFrame{Header: h, FrameID: root.FrameID, Status: frames.StatusCompleted})
	}
	if err != nil {
		return fmt.Errorf("long-lived run %d of %s: %w", k, a.scope, err)
	}
	return nil
}
