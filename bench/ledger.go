package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// The spend-ledger scenario (issue 14): agents that spawn agents in other
// scopes against one parent frame's spend limit, on a durable store. Each
// spawner loops: ReserveSpend on the parent's root for its own child scope
// (Partial: what is left when less than the estimate is), push the child
// scope's root with the reservation token, record the child's spend (at
// most what was granted), pop it; the server's outbox settles the spend in
// the parent's scope. The parent's limit is smaller than what the
// spawners would spend together, so the last reservations are refused and
// the limit is reached. Measured: ReserveSpend alone (every spawner
// reserving back to back), whole spawn cycles, and the settlement's
// latency across scopes — from the child's pop acknowledged to the
// parent's spend.settled delivered to a subscriber of the parent's scope.
// Checked afterwards, from the parent's log: actual + outstanding never
// exceeded the limit after any event, and the parent was charged exactly
// what the children spent.

const (
	// ledgerEstimate is what each spawn reserves (micro-units).
	ledgerEstimate = 1000
	// ledgerReserveOnly is how many reservations each spawner makes in the
	// reserve-only phase (at scale 1).
	ledgerReserveOnly = 40
)

// LedgerResult is the scenario at one number of concurrent spawners.
type LedgerResult struct {
	Spawners int `json:"spawners"`
	// Reserve is ReserveSpend back to back by every spawner on one parent
	// frame (nothing else running): the reservations' rate.
	Reserve Figure `json:"reserve"`
	// SpawnReserve is the ReserveSpend calls of the spawn cycles (granted
	// or refused), Spawn the whole cycles, both over the phase's wall time.
	SpawnReserve Figure `json:"spawn_reserve"`
	Spawn        Figure `json:"spawn"`
	// Settle is pop acknowledged → spend.settled seen by a subscriber of
	// the parent's scope, per settled child.
	Settle Figure `json:"settle"`
	// Children is the spawns that ran; Refused the reservations refused
	// (spend_unavailable: the parent's limit reached, which ends a spawner).
	Children int `json:"children"`
	Refused  int `json:"refused"`
	// MaxMicros is the parent's spend limit; ActualMicros its actual spend
	// at the end; ChildrenMicros what the children spent together.
	MaxMicros      int64 `json:"max_micros"`
	ActualMicros   int64 `json:"actual_micros"`
	ChildrenMicros int64 `json:"children_micros"`
	// PeakMicros is the largest actual + outstanding of the parent after
	// any event of its log (EventsChecked of them); Exceeded says it went
	// past MaxMicros.
	PeakMicros    int64 `json:"peak_micros"`
	EventsChecked int   `json:"events_checked"`
	Exceeded      bool  `json:"exceeded"`
}

// ledger runs the scenario with spawners concurrent spawners and a limit
// that lets about cycles children spend.
func ledger(ctx context.Context, o *Options, spawners, cycles int) (LedgerResult, error) {
	res := LedgerResult{Spawners: spawners}
	dir, err := scratch(o.Dir, fmt.Sprintf("ledger-%d", spawners))
	if err != nil {
		return res, err
	}
	defer o.cleanup(dir)
	n, err := start(dbPath(dir, "ledger"), false, config(o.Shards))
	if err != nil {
		return res, err
	}
	defer n.stop()
	c := n.client

	// Reserve only: a parent with no spend limit, every spawner reserving
	// back to back.
	per := o.scale(ledgerReserveOnly, 2)
	o.progress("ledger: %d spawners, %d ReserveSpend each on one frame", spawners, per)
	ro, err := c.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: "ledger-reserve"}, Goal: "reserve", Budget: budget.TokenBudget{Total: 1000}})
	if err != nil {
		return res, err
	}
	counts := make([]int, spawners)
	for i := range counts {
		counts[i] = per
	}
	ph, err := timedWriters(counts, func(i, j int) error {
		_, err := c.ReserveSpend(ctx, &messages.ReserveSpend{Header: messages.Header{Scope: "ledger-reserve"}, FrameID: ro.FrameID,
			For: fmt.Sprintf("ledger-r-%02d", i), Estimate: ptr(int64(ledgerEstimate))})
		return err
	})
	if err != nil {
		return res, fmt.Errorf("reserve: %w", err)
	}
	res.Reserve = ph.figure()

	// Spawn cycles until the limit is reached: children spend 50–100% of
	// the estimate (75% on average), and the parent may spend about cycles
	// of them; a spawner ends at its first refusal.
	cycles = max(cycles, spawners)
	res.MaxMicros = int64(cycles) * ledgerEstimate * 3 / 4
	const parent = "ledger-parent"
	root, err := c.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: parent}, Goal: "spawn agents",
		Budget: budget.TokenBudget{Total: 1000}, Limits: budget.Limits{SpendMicros: res.MaxMicros}})
	if err != nil {
		return res, err
	}
	w := newSettleWatch()
	sub, err := c.Subscribe(ctx, actors.SubscribeOptions{Filter: messages.EventFilter{Scope: parent, Kinds: []string{frames.TypeSpendSettled}},
		FromNow: true, Handler: func(_ context.Context, ev messages.SubscribedEvent) error {
			e, err := ev.Decode()
			if err != nil {
				return err
			}
			if s, ok := e.(*frames.SpendSettled); ok && s.Final {
				w.settled(s.ID)
			}
			return nil
		}})
	if err != nil {
		return res, err
	}
	defer sub.Close()

	o.progress("ledger: %d spawners, about %d spawn cycles against a limit of %d µ$", spawners, cycles, res.MaxMicros)
	var (
		reserveLat    = make([]Latencies, spawners)
		spawnLat      = make([]Latencies, spawners)
		refused       atomic.Int64
		children      atomic.Int64
		childrenSpent atomic.Int64
	)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, spawners)
	for i := range spawners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			scope := fmt.Sprintf("ledger-child-%02d", i)
			for j := 0; ; j++ {
				t0 := time.Now()
				var r *messages.ReserveSpendReply
				err := reserveLat[i].Time(func() (err error) {
					r, err = c.ReserveSpend(ctx, &messages.ReserveSpend{Header: messages.Header{Scope: parent}, FrameID: root.FrameID,
						For: scope, Estimate: ptr(int64(ledgerEstimate)), Partial: true})
					return err
				})
				if errors.Is(err, actors.ErrSpendUnavailable) {
					refused.Add(1)
					return
				}
				if err != nil {
					errs[i] = fmt.Errorf("reserve: %w", err)
					return
				}
				spent := min(r.Amount, ledgerEstimate/2+int64((i*7919+j*104729)%(ledgerEstimate/2+1)))
				if errs[i] = spawnChild(ctx, c, scope, r.Token, spent); errs[i] != nil {
					return
				}
				w.popped(r.ReservationID)
				spawnLat[i] = append(spawnLat[i], time.Since(t0))
				children.Add(1)
				childrenSpent.Add(spent)
			}
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	res.SpawnReserve = Summarize(Merge(reserveLat), wall)
	res.Spawn = Summarize(Merge(spawnLat), wall)
	res.Children, res.Refused, res.ChildrenMicros = int(children.Load()), int(refused.Load()), childrenSpent.Load()

	if err := n.srv.DrainOutbox(ctx); err != nil {
		return res, fmt.Errorf("drain the outbox: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	lat, err := w.wait(wctx, res.Children, sub)
	if err != nil {
		return res, err
	}
	res.Settle = Summarize(lat, 0) // latencies, not a rate
	res.PeakMicros, res.ActualMicros, res.EventsChecked, err = ledgerPeak(ctx, n.store, parent, root.FrameID)
	res.Exceeded = res.PeakMicros > res.MaxMicros
	return res, err
}

// spawnChild runs one child: its scope's root pushed with the reservation
// token, its spend recorded, popped.
func spawnChild(ctx context.Context, c *actors.Client, scope, token string, spent int64) error {
	p, err := c.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: scope}, Goal: "child agent",
		Budget: budget.TokenBudget{Total: 1000}, Reservation: token})
	if err != nil {
		return fmt.Errorf("push the child: %w", err)
	}
	if _, err := c.RecordUsage(ctx, &messages.RecordUsage{Header: messages.Header{Scope: scope}, FrameID: p.FrameID,
		Cost: budget.Cost{SpendMicros: spent}}); err != nil {
		return fmt.Errorf("the child's usage: %w", err)
	}
	if _, err := c.PopFrame(ctx, &messages.PopFrame{Header: messages.Header{Scope: scope}, FrameID: p.FrameID, Status: frames.StatusCompleted}); err != nil {
		return fmt.Errorf("pop the child: %w", err)
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// settleWatch pairs each child's pop acknowledgement with its
// settlement's delivery, in whichever order the two arrive.
type settleWatch struct {
	mu   sync.Mutex
	pops map[string]time.Time
	seen map[string]time.Time
	lat  Latencies
	more chan struct{}
}

func newSettleWatch() *settleWatch {
	return &settleWatch{pops: map[string]time.Time{}, seen: map[string]time.Time{}, more: make(chan struct{}, 1)}
}

func (w *settleWatch) popped(id string)  { w.mark(id, w.pops, w.seen) }
func (w *settleWatch) settled(id string) { w.mark(id, w.seen, w.pops) }

// mark records id's time in mine; once other has it too, the latency is
// seen − popped (0 when the settlement was delivered before the pop's
// reply reached its caller).
func (w *settleWatch) mark(id string, mine, other map[string]time.Time) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, dup := mine[id]; dup {
		return
	}
	mine[id] = now
	if _, ok := other[id]; !ok {
		return
	}
	w.lat = append(w.lat, max(0, w.seen[id].Sub(w.pops[id])))
	select {
	case w.more <- struct{}{}:
	default:
	}
}

// wait returns the latencies once n children were paired.
func (w *settleWatch) wait(ctx context.Context, n int, sub *actors.Subscription) (Latencies, error) {
	for {
		w.mu.Lock()
		got := len(w.lat)
		lat := append(Latencies(nil), w.lat...)
		w.mu.Unlock()
		if got >= n {
			return lat, nil
		}
		select {
		case <-w.more:
		case <-sub.Done():
			return nil, fmt.Errorf("ledger: the parent's subscriber stopped: %w", sub.Err())
		case <-ctx.Done():
			return nil, fmt.Errorf("ledger: %d of %d settlements seen by the subscriber: %w", got, n, ctx.Err())
		}
	}
}

// ledgerPeak folds the parent scope's log and returns the largest actual +
// outstanding of frame after any event, its actual spend at the end, and
// how many events it checked.
func ledgerPeak(ctx context.Context, store eventstore.Store, scope, frame string) (peak, actual int64, events int, err error) {
	st := frames.NewState(scope, 0)
	err = store.ReadStream(ctx, scope, 1, func(r eventstore.Record) error {
		ev, err := eventstore.DecodeFrameEvent(r)
		if err != nil {
			return err
		}
		if err := frames.Apply(st, ev); err != nil {
			return fmt.Errorf("%s v%d: %w", scope, r.Version, err)
		}
		events++
		if f := st.Frames[frame]; f != nil {
			actual = f.Cost.SpendMicros
			peak = max(peak, f.Cost.SpendMicros+f.Outstanding)
		}
		return nil
	})
	return peak, actual, events, err
}
