package actors_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// spawned is what the test knows of one child it ran on a reservation.
type spawned struct {
	res       string // reservation id
	amount    int64  // granted (the child's ceiling)
	scope     string // the child's scope (the parent's, or another)
	frame     string
	spent     int64 // what its usage reports added up to
	last      int64 // its last report
	suspended bool  // a report came back with spend_exceeded
}

// heldBy is what frame's unexpired reservations hold in s at now.
func heldBy(s *frames.State, frame string, now int64) int64 {
	var n int64
	for _, r := range s.Reservations {
		if r.Frame == frame && !r.Expired(s.Scope, now) {
			n += r.Held()
		}
	}
	return n
}

// finals is the set of frame's reservations that recorded their work's
// final spend.
func finals(s *frames.State, frame string) map[string]bool {
	out := map[string]bool{}
	for id, r := range s.Reservations {
		if r.Frame == frame && r.Final {
			out[id] = true
		}
	}
	return out
}

// Many spawners against one parent: 64 goroutines each reserve (exact and
// Partial estimates) on one frame with a spend max, push a child with the
// token (a child in the parent's scope, or a root in another scope), report
// usage on it (some past its ceiling: suspended with spend_exceeded, after
// which it reports nothing more) and pop it; the outbox delivers the
// cross-scope settlements. The parent scope's log, folded event by event,
// shows that
//
//	(a) actual + what unexpired reservations hold ≤ max after every event,
//	    but for the overshoot of children already settled (each at most
//	    its last report: the one that crossed its ceiling);
//	(c) every grant was at most max − actual − held at its grant;
//	(b) at the end actual ≤ max + those overshoots and equals exactly what
//	    the children spent, each charged once.
//
// At the end one child takes what is left and overshoots it: its pop
// takes the parent past its max (bounded by that one report) and suspends
// it.
func TestReservationManySpawnersOneParent(t *testing.T) {
	e := newEnv(t)
	const (
		workers  = 64
		rounds   = 8
		maxSpend = 1_000_000
		parent   = "ledger-parent"
	)
	pr, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: mut(parent), Goal: "spawner", Budget: budget.TokenBudget{Total: 1 << 30},
		Limits: budget.Limits{SpendMicros: maxSpend}})
	require.NoError(t, err)
	p := pr.FrameID

	var (
		mu       sync.Mutex
		children []*spawned
		refused  int // spend_unavailable
		partial  int // granted less than asked
		stopped  int // the parent was suspended
		released int
	)
	worker := func(w int) error {
		rng := rand.New(rand.NewPCG(uint64(w), 14))
		for round := range rounds {
			cross := rng.IntN(3) == 0
			scope, forScope := parent, ""
			if cross {
				scope = fmt.Sprintf("ledger-kid-%d", w%4)
				forScope = scope
			}
			usePartial := rng.IntN(2) == 0
			est := 1_000 + rng.Int64N(9_000)
			if usePartial {
				est = 20_000 + rng.Int64N(40_000)
			}
			res, err := e.c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut(parent), FrameID: p, For: forScope, Estimate: spend(est), Partial: usePartial})
			if errors.Is(err, actors.ErrSpendUnavailable) {
				mu.Lock()
				refused++
				mu.Unlock()
				if usePartial {
					continue
				}
				// Refused whole: take what is available instead.
				usePartial = true
				res, err = e.c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut(parent), FrameID: p, For: forScope, Estimate: spend(est), Partial: true})
			}
			switch {
			case errors.Is(err, actors.ErrSpendUnavailable):
				mu.Lock()
				refused++
				mu.Unlock()
				continue
			case errors.Is(err, actors.ErrFrameNotLive): // the parent was suspended by a charge
				mu.Lock()
				stopped++
				mu.Unlock()
				return nil
			case err != nil:
				return fmt.Errorf("worker %d round %d: reserve: %w", w, round, err)
			}
			if res.Amount > est || res.Amount <= 0 || (!usePartial && res.Amount != est) || res.Ceiling != res.Amount {
				return fmt.Errorf("worker %d: asked %d (partial %v), granted %d with ceiling %d", w, est, usePartial, res.Amount, res.Ceiling)
			}
			if res.Amount < est {
				mu.Lock()
				partial++
				mu.Unlock()
			}
			parentID := p
			if cross {
				parentID = ""
			}
			ch, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: mut(scope), ParentID: parentID, Goal: "child", Budget: budget.TokenBudget{Total: 1},
				Reservation: res.Token})
			if errors.Is(err, actors.ErrFrameNotLive) && !cross { // the parent was suspended meanwhile
				if _, err := e.c.ReleaseReservation(ctx, &messages.ReleaseReservation{Header: mut(parent), ReservationID: res.ReservationID}); err != nil {
					return fmt.Errorf("worker %d: release: %w", w, err)
				}
				mu.Lock()
				released++
				mu.Unlock()
				continue
			}
			if err != nil {
				return fmt.Errorf("worker %d: push in %s: %w", w, scope, err)
			}
			c := &spawned{res: res.ReservationID, amount: res.Amount, scope: scope, frame: ch.FrameID}
			// What the child spends: mostly less than its reservation; one
			// in four past it, by less than its last report.
			target := rng.Int64N(res.Amount/2 + 1)
			if rng.IntN(4) == 0 {
				target = res.Amount + 1 + rng.Int64N(2_000)
			}
			reports := 1 + rng.IntN(3)
			for i := 0; i < reports && c.spent < target && !c.suspended; i++ {
				n := (target - c.spent) / int64(reports-i)
				if i == reports-1 || n == 0 {
					n = target - c.spent
				}
				u, err := e.c.RecordUsage(ctx, &messages.RecordUsage{Header: mut(scope), FrameID: ch.FrameID, Cost: budget.Cost{SpendMicros: n}})
				if err != nil {
					return fmt.Errorf("worker %d: usage: %w", w, err)
				}
				c.spent += n
				c.last = n
				if u.Suspension != nil {
					if u.Suspension.Limit == nil || u.Suspension.Limit.Code != budget.SpendExceeded {
						return fmt.Errorf("worker %d: suspended by %+v", w, u.Suspension)
					}
					c.suspended = true
				}
				if (c.spent > c.amount) != c.suspended {
					return fmt.Errorf("worker %d: spent %d of a ceiling of %d, suspended %v", w, c.spent, c.amount, c.suspended)
				}
			}
			if _, err := e.c.PopFrame(ctx, &messages.PopFrame{Header: mut(scope), FrameID: ch.FrameID, Status: frames.StatusCompleted}); err != nil {
				return fmt.Errorf("worker %d: pop: %w", w, err)
			}
			mu.Lock()
			children = append(children, c)
			mu.Unlock()
		}
		return nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			if err := worker(w); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	require.False(t, t.Failed())
	drain(t, e.srv)

	// The end: the last of the parent's spend goes to one child, which
	// overshoots it by one report; its pop takes the parent past its max,
	// which suspends it: nothing more is granted.
	if row := ledgerRow(t, e.c, parent, p); row.Status != frames.StatusSuspended && row.Max-row.Actual-row.Outstanding > 0 {
		avail := row.Max - row.Actual - row.Outstanding
		res, err := e.c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut(parent), FrameID: p, Estimate: spend(maxSpend), Partial: true})
		require.NoError(t, err)
		require.Equal(t, avail, res.Amount, "Partial grants what is available")
		ch := pushLimited(t, e.c, parent, p, 0, res.Token)
		c := &spawned{res: res.ReservationID, amount: res.Amount, scope: parent, frame: ch, spent: avail + 500, last: avail + 500}
		u, err := e.c.RecordUsage(ctx, &messages.RecordUsage{Header: mut(parent), FrameID: ch, Cost: budget.Cost{SpendMicros: c.spent}})
		require.NoError(t, err)
		require.NotNil(t, u.Suspension, "past its ceiling")
		c.suspended = true
		popped, err := e.c.PopFrame(ctx, &messages.PopFrame{Header: mut(parent), FrameID: ch, Status: frames.StatusCompleted})
		require.NoError(t, err)
		require.NotNil(t, popped.ParentSuspension, "the charge took the parent past its max")
		assert.Equal(t, budget.SpendExceeded, popped.ParentSuspension.Limit.Code)
		children = append(children, c)
	} else {
		t.Logf("the parent has nothing left (%+v): no last child", row)
	}
	_, err = e.c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut(parent), FrameID: p, Estimate: spend(1), Partial: true})
	require.Error(t, err, "a suspended parent, or one with nothing available, grants nothing")

	byRes := map[string]*spawned{}
	var total, overshoot int64
	crossCount, over := 0, 0
	for _, c := range children {
		byRes[c.res] = c
		total += c.spent
		if c.spent > c.amount {
			over++
			overshoot += c.spent - c.amount
			assert.LessOrEqual(t, c.spent-c.amount, c.last, "a child overshoots by at most its last report")
		}
		if c.scope != parent {
			crossCount++
		}
	}
	t.Logf("%d children (%d in other scopes, %d over their ceiling), %d refused, %d partial grants, %d released, %d stopped by a suspended parent; actual %d of %d",
		len(children), crossCount, over, refused, partial, released, stopped, total, maxSpend)
	require.NotEmpty(t, children)
	assert.Positive(t, refused+partial, "the spawners contended for the parent's spend")

	// (b) the books: the parent's actual is what its children spent.
	row := ledgerRow(t, e.c, parent, p)
	assert.Equal(t, total, row.Actual, "every child's spend charged exactly once")
	assert.Zero(t, row.Outstanding, "every reservation settled or released")
	assert.LessOrEqual(t, row.Actual, int64(maxSpend)+overshoot)

	// (a), (c): fold the parent scope's log event by event.
	st := frames.NewState(parent, 0)
	var allowance int64 // the overshoot of the children settled so far
	grants, events := 0, 0
	settled := map[string]bool{}
	charged := map[string]int64{} // by the spend.settled of cross-scope children
	require.NoError(t, e.store.ReadStream(ctx, parent, 1, func(r eventstore.Record) error {
		ev, err := eventstore.DecodeFrameEvent(r)
		if err != nil {
			return err
		}
		at := ev.EventMeta().At
		if g, ok := ev.(*frames.SpendReserved); ok && g.Reservation.Frame == p {
			f := st.Frames[p]
			avail := int64(maxSpend) - f.Cost.SpendMicros - heldBy(st, p, at)
			if !assert.LessOrEqual(t, g.Reservation.Amount, avail, "grant %d at version %d: amount over max − actual − held", grants, r.Version) {
				return errors.New("stop")
			}
			assert.Positive(t, g.Reservation.Amount)
			grants++
		}
		if s, ok := ev.(*frames.SpendSettled); ok {
			charged[s.ID] += s.Charged
		}
		before := finals(st, p)
		if err := frames.Apply(st, ev); err != nil {
			return fmt.Errorf("version %d: %w", r.Version, err)
		}
		events++
		for id := range finals(st, p) {
			if before[id] {
				continue
			}
			rv := st.Reservations[id]
			c := byRes[id]
			if !assert.NotNil(t, c, "reservation %q settled for a child the test did not run", id) {
				return errors.New("stop")
			}
			assert.Equal(t, c.spent, rv.Settled, "reservation %q settled what its child spent", id)
			settled[id] = true
			if rv.Settled > rv.Amount {
				allowance += rv.Settled - rv.Amount
			}
		}
		f := st.Frames[p]
		if !assert.LessOrEqual(t, f.Cost.SpendMicros+heldBy(st, p, at), int64(maxSpend)+allowance,
			"version %d (%s): actual %d + held %d over max %d + overshoot so far %d", r.Version, ev.EventType(), f.Cost.SpendMicros, heldBy(st, p, at), maxSpend, allowance) {
			return errors.New("stop")
		}
		if err := frames.CheckInvariants(st); err != nil {
			return fmt.Errorf("version %d: %w", r.Version, err)
		}
		return nil
	}))
	assert.Equal(t, overshoot, allowance, "the log's overshoot is the children's")
	assert.Len(t, settled, len(children), "every child's reservation settled")
	for _, c := range children {
		if c.scope != parent {
			assert.Equal(t, c.spent, charged[c.res], "cross-scope reservation %q charged its child's spend once", c.res)
		} else {
			assert.Zero(t, charged[c.res], "a child here is charged by its pop")
		}
	}
	assert.Equal(t, total, st.Frames[p].Cost.SpendMicros, "the fold agrees with the ledger")
	assert.Zero(t, st.Frames[p].Outstanding)
	t.Logf("%d events folded, %d grants", events, grants)
}
