package crashtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// The spend ledger beside the storm (issue 14: kills between a child's
// finish and its parent's settlement lose nothing and double nothing). A
// parent scope (LedgerParent) holds a root frame with a spend max
// (LedgerMax); LedgerWorkers workers each, again and again, reserve spend
// on it for a root in one of their child scopes (ReserveSpend with For),
// push that root with the token, record usage on it within its ceiling and
// pop it. The server's own outbox settles each finished child in the
// parent's scope (SettleSpend) and acknowledges it in the child's
// (AckSettlement). Every request goes through the side file, as the
// storm's do (the requests in flight at a kill are resent with their ids
// by the next child before anything else).
//
// When a reservation is refused (spend_unavailable: the parent's root
// has nothing left), the worker that saw it waits for the outbox to
// deliver every settlement (Server.DrainOutbox, with the other workers
// held), pops the parent's root and pushes a new one: a settlement never
// arrives after its reserving frame finished, so every charge lands on the
// frame that reserved it.
//
// After a restart the workload recovers from the server, as an agent
// would: the parent's live root (GetLedger), each child scope's live root
// (finished within what its ceiling leaves, and popped), and the parent's
// reservations that no child scope bound (released: their work never
// started).

// The ledger's scopes and sizes.
const (
	LedgerParent      = "crash-ledger-p"
	LedgerChildPrefix = "crash-ledger-c-"
	// LedgerChildScopes are the child scopes, shared out among the
	// workers: a worker's children go to its own scopes, one at a time,
	// so that a scope holds many bindings, delivered and not.
	LedgerChildScopes = 8
	LedgerWorkers     = 2
	// LedgerMax is the spend max (micros) of each parent root; a child
	// reserves LedgerEstimateMin to LedgerEstimateMin+LedgerEstimateSpan,
	// so that a root serves a dozen children or so and reservations are
	// refused now and then.
	LedgerMax          = 24_000
	LedgerEstimateMin  = 400
	LedgerEstimateSpan = 2_600
	// LedgerPause is a worker's pause between two children.
	LedgerPause = 2 * time.Millisecond
	// LedgerDrainTimeout bounds a wait for the outbox (a rotation's, the
	// checker's).
	LedgerDrainTimeout = time.Minute
)

// LedgerChild is the name of child scope i.
func LedgerChild(i int) string { return fmt.Sprintf("%s%02d", LedgerChildPrefix, i) }

func ledgerHeader(scope string) messages.Header { return messages.Header{Scope: scope} }

// ledgerRun is the child process's ledger workload.
type ledgerRun struct {
	w   *Storm
	srv *actors.Server
	// mu is held shared by a child from its reservation to its pop, and
	// exclusively by a rotation of the parent's root.
	mu   sync.RWMutex
	root string // the parent's live root
}

// do sends req with the side-file protocol; one the server turned away
// without applying it (overloaded) is sent again under a new id.
func (l *ledgerRun) do(ctx context.Context, req messages.MutatingRequest) (messages.Reply, error) {
	for {
		r, err := l.w.send(ctx, req)
		var me *messages.Error
		if err == nil || !errors.As(err, &me) || me.Code != messages.CodeOverloaded || ctx.Err() != nil {
			return r, err
		}
		req.Mut().RequestID = ""
		time.Sleep(LedgerPause)
	}
}

func (l *ledgerRun) ledger(ctx context.Context, scope string) (*messages.GetLedgerReply, error) {
	r, err := l.w.C.GetLedger(ctx, &messages.GetLedger{Header: ledgerHeader(scope)})
	if err != nil {
		return nil, fmt.Errorf("GetLedger(%q): %w", scope, err)
	}
	return r, nil
}

// recover picks the workload up where the last process left it.
func (l *ledgerRun) recover(ctx context.Context, rng *rand.Rand) error {
	p, err := l.ledger(ctx, LedgerParent)
	if err != nil {
		return err
	}
	var roots []frames.LedgerRow
	for _, row := range p.Frames {
		if !row.Finished && row.Parent == "" {
			roots = append(roots, row)
		}
	}
	switch len(roots) {
	case 0:
		if err := l.pushRoot(ctx); err != nil {
			return err
		}
	case 1:
		l.root = roots[0].Frame
	default:
		return fmt.Errorf("ledger: scope %q has %d live roots, want at most 1: %+v", LedgerParent, len(roots), roots)
	}
	bound := map[string]bool{}
	for i := range LedgerChildScopes {
		c, err := l.ledger(ctx, LedgerChild(i))
		if err != nil {
			return err
		}
		for _, b := range c.Bindings {
			bound[b.Reservation] = true
		}
		for _, row := range c.Frames {
			if !row.Finished {
				if err := l.finish(ctx, rng, LedgerChild(i), row.Frame, row.Max-row.Actual); err != nil {
					return err
				}
			}
		}
	}
	for _, row := range roots {
		for _, r := range row.Reservations {
			if r.Returned || bound[r.ID] {
				continue
			}
			if _, err := l.do(ctx, &messages.ReleaseReservation{Header: ledgerHeader(LedgerParent), ReservationID: r.ID}); err != nil {
				return fmt.Errorf("ledger: releasing the unbound reservation %s: %w", r.ID, err)
			}
		}
	}
	return nil
}

// pushRoot pushes a new root in the parent's scope.
func (l *ledgerRun) pushRoot(ctx context.Context) error {
	r, err := l.do(ctx, &messages.PushFrame{Header: ledgerHeader(LedgerParent), Goal: "delegate work to other scopes",
		Budget: budget.TokenBudget{Total: 1_000_000}, Limits: budget.Limits{SpendMicros: LedgerMax}})
	if err != nil {
		return fmt.Errorf("ledger: pushing the parent's root: %w", err)
	}
	l.root = r.(*messages.PushFrameReply).FrameID
	return nil
}

// worker runs children on its own child scopes (wi, wi+LedgerWorkers,
// ...), n of them (n < 0: until ctx ends).
func (l *ledgerRun) worker(ctx context.Context, rng *rand.Rand, wi, n int) error {
	for i := 0; n < 0 || i < n; i++ {
		if ctx.Err() != nil {
			return nil
		}
		child := LedgerChild(wi + LedgerWorkers*rng.IntN(LedgerChildScopes/LedgerWorkers))
		if err := l.child(ctx, rng, child); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		time.Sleep(LedgerPause)
	}
	return nil
}

// child runs one child: reserve, push, spend, pop.
func (l *ledgerRun) child(ctx context.Context, rng *rand.Rand, child string) error {
	l.mu.RLock()
	root := l.root
	est := int64(LedgerEstimateMin + rng.IntN(LedgerEstimateSpan))
	r, err := l.do(ctx, &messages.ReserveSpend{Header: ledgerHeader(LedgerParent), FrameID: root, For: child, Estimate: &est})
	if err != nil {
		l.mu.RUnlock()
		var me *messages.Error
		if errors.As(err, &me) && me.Code == messages.CodeSpendUnavailable {
			return l.rotate(ctx, root)
		}
		return fmt.Errorf("ledger: reserving for %q: %w", child, err)
	}
	defer l.mu.RUnlock()
	res := r.(*messages.ReserveSpendReply)
	pr, err := l.do(ctx, &messages.PushFrame{Header: ledgerHeader(child), Goal: "delegated work",
		Budget: budget.TokenBudget{Total: 100_000}, Reservation: res.Token})
	if err != nil {
		return fmt.Errorf("ledger: pushing %q's root with reservation %s: %w", child, res.ReservationID, err)
	}
	return l.finish(ctx, rng, child, pr.(*messages.PushFrameReply).FrameID, res.Ceiling)
}

// finish records usage on child's root frame, room at most in all (its
// ceiling less what it spent: the parent's max is never overrun), in one
// to three records, and pops it.
func (l *ledgerRun) finish(ctx context.Context, rng *rand.Rand, child, frame string, room int64) error {
	spend := int64(0)
	if room > 0 {
		spend = rng.Int64N(room + 1)
		if rng.IntN(4) == 0 {
			spend = room // to the last micro
		}
	}
	for k := 1 + rng.IntN(3); k > 0; k-- {
		part := spend
		if k > 1 {
			part = rng.Int64N(spend + 1)
		}
		spend -= part
		if _, err := l.do(ctx, &messages.RecordUsage{Header: ledgerHeader(child), FrameID: frame,
			Cost: budget.Cost{InputTokens: int64(1 + rng.IntN(200)), OutputTokens: int64(rng.IntN(100)), Turns: 1, SpendMicros: part}}); err != nil {
			return fmt.Errorf("ledger: usage of %q's root %s: %w", child, frame, err)
		}
	}
	if _, err := l.do(ctx, &messages.PopFrame{Header: ledgerHeader(child), FrameID: frame, Status: frames.StatusCompleted}); err != nil {
		return fmt.Errorf("ledger: popping %q's root %s: %w", child, frame, err)
	}
	return nil
}

// rotate replaces the parent's root old (nothing left to reserve): once
// every settlement is delivered, with no child under way, it pops old and
// pushes a new root.
func (l *ledgerRun) rotate(ctx context.Context, old string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.root != old {
		return nil // another worker did
	}
	dctx, cancel := context.WithTimeout(ctx, LedgerDrainTimeout)
	defer cancel()
	if err := l.srv.DrainOutbox(dctx); err != nil {
		return fmt.Errorf("ledger: draining the outbox before replacing the parent's root: %w", err)
	}
	if _, err := l.do(ctx, &messages.PopFrame{Header: ledgerHeader(LedgerParent), FrameID: old, Status: frames.StatusCompleted}); err != nil {
		return fmt.Errorf("ledger: popping the parent's root %s: %w", old, err)
	}
	return l.pushRoot(ctx)
}

// The request ids of the outbox's deliveries (actors/outbox.go): a hash
// of the binding and what it reports, the same for a delivery repeated.
const (
	settleRequest  = "settle-"  // SettleSpend, in the reserving scope
	settledRequest = "settled-" // AckSettlement, in the work's scope
)

// outboxRequest reports whether id is one the outbox sent.
func outboxRequest(id string) bool {
	return strings.HasPrefix(id, settleRequest) || strings.HasPrefix(id, settledRequest)
}

// checkOutboxGroup checks the events of one of the outbox's requests: a
// SettleSpend's spend.settled (and, were the charge to overrun the
// reserving frame, its suspension), an AckSettlement's spend.delivered.
func checkOutboxGroup(g *group, fail func(string, ...any)) {
	where := fmt.Sprintf("outbox request %s (scope %q versions %d..%d)", g.id, g.scope, g.first, g.last)
	for i, e := range g.events {
		ok := false
		switch e.(type) {
		case *frames.SpendSettled:
			ok = strings.HasPrefix(g.id, settleRequest)
		case *frames.FrameSuspended:
			_, ok = g.events[max(i-1, 0)].(*frames.SpendSettled)
			ok = ok && i > 0 && strings.HasPrefix(g.id, settleRequest)
		case *frames.SpendDelivered:
			ok = strings.HasPrefix(g.id, settledRequest)
		}
		if !ok {
			fail("%s wrote %s at its event %d", where, e.EventType(), i+1)
			return
		}
	}
}
