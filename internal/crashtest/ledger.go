package crashtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/eventstore"
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

// EnvLedgerKill names the stage of a settlement (LedgerStages) at which
// the child kills itself, once its storm is under way.
const EnvLedgerKill = "STATEINDEX_CRASH_LEDGER_KILL"

// The stages between a child root's finish and its parent's settlement at
// which the child can kill itself (killStore: right after the commit,
// before anything else happens — the reply, the outbox's next step).
const (
	// StageLedgerPopped: a child root's pop is committed, its binding
	// pending; nothing is delivered (the commit has not even kicked the
	// outbox: the next process finds the work through the outbox table).
	StageLedgerPopped = "popped"
	// StageLedgerSettled: the parent's spend.settled is committed; the
	// SettleSpend is not answered, the child's AckSettlement not sent.
	StageLedgerSettled = "settled"
)

// LedgerStages are the kill points of a settlement.
var LedgerStages = []string{StageLedgerPopped, StageLedgerSettled}

// ledgerKillLine starts the line the child prints before it kills itself
// at a ledger stage: "ledger-kill STAGE SCOPE".
const ledgerKillLine = "ledger-kill"

// ledgerStage is the stage an append of events to stream reaches once it
// is committed ("" for none).
func ledgerStage(stream string, events []eventstore.Event) string {
	want, stage := "", ""
	switch {
	case strings.HasPrefix(stream, LedgerChildPrefix):
		want, stage = frames.TypeFramePopped, StageLedgerPopped // only roots bound to the parent live there
	case stream == LedgerParent:
		want, stage = frames.TypeSpendSettled, StageLedgerSettled
	default:
		return ""
	}
	for _, e := range events {
		if e.Type == want {
			return stage
		}
	}
	return ""
}

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
			_, afterSettled := g.events[max(i-1, 0)].(*frames.SpendSettled)
			ok = i > 0 && afterSettled && strings.HasPrefix(g.id, settleRequest)
		case *frames.SpendDelivered:
			ok = strings.HasPrefix(g.id, settledRequest)
		}
		if !ok {
			fail("%s wrote %s at its event %d", where, e.EventType(), i+1)
			return
		}
	}
}

// LedgerStats is what the spend-ledger check found after a kill.
type LedgerStats struct {
	// Reservations are the parent's reservations for the child scopes;
	// Unbound those no child root was pushed with (released after a
	// restart, or in flight at the kill).
	Reservations, Unbound int
	// Children are the child roots bound to them: Settled finished and
	// settled exactly once (the parent charged exactly their final spend,
	// the binding acknowledged it), Live still live (nothing settled).
	Children, Settled, Live int
	// ParentRoots are the parent's roots; Charged the spend settled on
	// them in all (each root's actual spend is the sum of its children's
	// settlements); Events the parent's events after each of which every
	// live root's actual + outstanding was checked against its max; Peak
	// the highest actual + outstanding seen.
	ParentRoots  int
	Charged      int64
	Events, Peak int64
	// Repeats are spend.settled events of a reservation settled before
	// (an outbox request the request horizon forgot, applied again):
	// they charged nothing.
	Repeats int
	// AckedPops are the acknowledged pops of child roots, each found
	// settled; InFlightPops those the kill left unanswered (each either
	// settled whole or not popped at all: so is one whose resend was
	// refused as past the request horizon).
	AckedPops, InFlightPops int
	// At the kill, before the checker's server delivered the outbox:
	// finished children whose settlement had not reached the parent
	// (Undelivered) and those settled in the parent and not acknowledged
	// in the child (Unacked); Drained the deliveries that server made.
	Undelivered, Unacked int
	Drained              int64
	// Lost and Doubled settlements: the check fails unless both are 0.
	Lost, Doubled int
}

func (s LedgerStats) String() string {
	return fmt.Sprintf("%d reservations (%d never bound), %d children (%d live): %d settled exactly once, %d lost, %d doubled "+
		"(%d acknowledged pops checked, %d pops in flight at the kills: whole or absent); %d parent roots charged %d micros in all, "+
		"actual + outstanding within the max after each of %d parent events (peak %d of %d); %d settlements repeated charging nothing; "+
		"at the kill %d undelivered and %d settled but unacknowledged, %d delivered by the checker's server",
		s.Reservations, s.Unbound, s.Children, s.Live, s.Settled, s.Lost, s.Doubled, s.AckedPops, s.InFlightPops,
		s.ParentRoots, s.Charged, s.Events, s.Peak, LedgerMax, s.Repeats, s.Undelivered, s.Unacked, s.Drained)
}

// ledgerReservation is what the parent's log says of one reservation
// (its state forgets returned ones past KeepReturned; the log does not).
type ledgerReservation struct {
	owner, forScope string
	charged         int64 // Σ spend.settled Charged
	settles         int   // spend.settled events
	final           bool  // a final settlement arrived
}

// ledgerFold follows the parent scope's log event by event (Check's
// replay calls apply after each event is applied to st).
type ledgerFold struct {
	res       map[string]*ledgerReservation
	roots     map[string]bool  // every root the parent pushed
	live      map[string]bool  // its live roots
	chargedTo map[string]int64 // Σ Charged by the frame charged
	events    int64
	peak      int64
	errs      []string
}

func newLedgerFold() *ledgerFold {
	return &ledgerFold{res: map[string]*ledgerReservation{}, roots: map[string]bool{}, live: map[string]bool{}, chargedTo: map[string]int64{}}
}

func (lf *ledgerFold) fail(format string, args ...any) {
	if len(lf.errs) < 20 {
		lf.errs = append(lf.errs, fmt.Sprintf(format, args...))
	}
}

// apply follows ev, at version, just applied to st (the parent's state):
// every live root's actual spend plus what its reservations hold stays
// within its max.
func (lf *ledgerFold) apply(st *frames.State, ev frames.Event, version int64) {
	switch e := ev.(type) {
	case *frames.FramePushed:
		if e.ParentID == "" {
			lf.roots[e.Frame], lf.live[e.Frame] = true, true
		}
	case *frames.FramePopped:
		delete(lf.live, e.Frame)
	case *frames.SpendReserved:
		lf.res[e.Reservation.ID] = &ledgerReservation{owner: e.Reservation.Frame, forScope: e.Reservation.For}
	case *frames.SpendSettled:
		r := lf.res[e.ID]
		if r == nil {
			lf.fail("PHANTOM: version %d: a settlement of reservation %s, which the parent never granted", version, e.ID)
			r = &ledgerReservation{owner: e.Owner, forScope: e.From}
			lf.res[e.ID] = r
		}
		r.charged += e.Charged
		r.settles++
		r.final = r.final || e.Final
		if e.Charged > 0 {
			if e.ChargedTo != r.owner || e.Routed != "" {
				lf.fail("LATE: version %d: the settlement of %s charged %d to %q (routed %q), not to its reserving root %q",
					version, e.ID, e.Charged, e.ChargedTo, e.Routed, r.owner)
			}
			lf.chargedTo[e.ChargedTo] += e.Charged
		}
	}
	lf.events++
	for id := range lf.live {
		f := st.Frames[id]
		if f == nil || f.Limits.SpendMicros == 0 {
			continue
		}
		used := f.Cost.SpendMicros + f.Outstanding
		lf.peak = max(lf.peak, used)
		if used > f.Limits.SpendMicros {
			lf.fail("OVERBOOKED: after version %d (%s) root %q has spent %d and holds %d, past its max %d",
				version, ev.EventType(), id, f.Cost.SpendMicros, f.Outstanding, f.Limits.SpendMicros)
		}
	}
}

// checkLedger checks the spend ledger after a kill, from Check's replay
// of every scope (replayed, with the parent's log followed by lf):
//
//   - at the kill, every finished child root is in one of three states:
//     its settlement not in the parent (nothing charged, nothing
//     acknowledged), in the parent and not acknowledged (charged exactly
//     its final spend once), or delivered; a live root has nothing
//     settled;
//   - then a server on the file delivers the outbox (DrainOutbox, found
//     through the outbox table as after any restart), and every finished
//     child root is settled exactly once: its binding reported its final
//     spend, the parent's settlements of its reservation charged exactly
//     that in all, to the root that reserved it, and the binding has it
//     acknowledged (Delivered == Reported, DeliveredFinal);
//   - each parent root's actual spend is exactly the sum of its children's
//     settlements, and, after every event of the parent's log, its actual
//     spend plus what it holds is within its max;
//   - every pop the side file acknowledged is of a root settled so; one
//     in flight at a kill is settled whole or was not popped.
func checkLedger(ctx context.Context, store *eventstore.BoltStore, side *Side, replayed map[string]*frames.State, lf *ledgerFold) (LedgerStats, error) {
	var st LedgerStats
	var children []string
	for name := range replayed {
		if strings.HasPrefix(name, LedgerChildPrefix) {
			children = append(children, name)
		}
	}
	sort.Strings(children)
	parent := replayed[LedgerParent]
	if parent == nil && len(children) == 0 {
		return st, nil
	}
	var errs []string
	fail := func(lost, doubled bool, format string, args ...any) {
		if lost {
			st.Lost++
		}
		if doubled {
			st.Doubled++
		}
		if len(errs) < 20 {
			errs = append(errs, fmt.Sprintf(format, args...))
		}
	}
	// At the kill.
	classify(parent, replayed, children, lf, true, &st, fail)
	pre := st
	if len(errs) > 0 || len(lf.errs) > 0 {
		return st, fmt.Errorf("spend ledger at the kill:\n  %s", strings.Join(append(lf.errs, errs...), "\n  "))
	}

	// Deliver, as the next process would.
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys := quietSystem(quiet)
	defer sys.Shutdown()
	cfg := Config(quiet)
	cfg.RegistryOff = true
	srv, err := actors.Start(sys, store, cfg)
	if err != nil {
		return st, err
	}
	dctx, cancel := context.WithTimeout(ctx, LedgerDrainTimeout)
	err = srv.DrainOutbox(dctx)
	cancel()
	drained := srv.OutboxStats().Delivered
	srv.Stop()
	if err != nil {
		return st, fmt.Errorf("LOST: the outbox did not drain: %w", err)
	}
	for _, name := range append([]string{LedgerParent}, children...) {
		s := replayed[name]
		if s == nil {
			continue
		}
		err := store.ReadStream(ctx, name, s.Version+1, func(r eventstore.Record) error {
			ev, err := eventstore.DecodeFrameEvent(r)
			if err != nil {
				return err
			}
			if err := frames.Apply(s, ev); err != nil {
				return fmt.Errorf("stream %q version %d: %w", name, r.Version, err)
			}
			if name == LedgerParent {
				lf.apply(s, ev, r.Version)
			}
			return nil
		})
		if err != nil {
			return st, err
		}
	}

	// Delivered.
	st = LedgerStats{}
	roots := classify(parent, replayed, children, lf, false, &st, fail)
	st.Undelivered, st.Unacked, st.Drained = pre.Undelivered, pre.Unacked, drained
	var total int64
	for id := range lf.roots {
		st.ParentRoots++
		f := parent.Frames[id]
		switch {
		case f == nil:
			fail(true, false, "LOST: the parent's root %q is not in its replay", id)
		case f.Cost.SpendMicros != lf.chargedTo[id]:
			fail(f.Cost.SpendMicros < lf.chargedTo[id], f.Cost.SpendMicros > lf.chargedTo[id],
				"the parent's root %q has spent %d, its children's settlements charged it %d", id, f.Cost.SpendMicros, lf.chargedTo[id])
		}
		total += lf.chargedTo[id]
	}
	if total != st.Charged {
		fail(total < st.Charged, total > st.Charged, "the parent's roots were charged %d in all, their settled children spent %d", total, st.Charged)
	}
	for _, id := range side.order {
		r := side.ByID[id]
		if r.Op != "PopFrame" || !strings.HasPrefix(r.Scope, LedgerChildPrefix) {
			continue
		}
		req, err := r.Request()
		if err != nil {
			return st, fmt.Errorf("side file: %w", err)
		}
		frame := req.(*messages.PopFrame).FrameID
		b, settled := roots[r.Scope+"/"+frame]
		switch {
		case r.Acked && !settled:
			fail(true, false, "LOST: the acknowledged pop %s of %q's root %s is not settled (binding: %+v)", id, r.Scope, frame, b)
		case r.Acked:
			st.AckedPops++
		case r.Refused == "":
			st.InFlightPops++ // unanswered at this kill: settled whole (classify) or not popped
		}
	}
	st.Events, st.Peak = lf.events, lf.peak
	errs = append(lf.errs, errs...)
	if len(errs) > 0 {
		return st, fmt.Errorf("spend ledger after the outbox drained:\n  %s", strings.Join(errs, "\n  "))
	}
	return st, nil
}

// classify checks every binding of the child scopes against the parent's
// settlements (atKill: before the outbox is drained, when a finished
// child may be undelivered or unacknowledged) and returns the bindings of
// the roots settled and delivered, by "scope/root". The settlements are
// the log's (lf); the parent's state, where it still keeps the
// reservation, must say the same.
func classify(parent *frames.State, replayed map[string]*frames.State, children []string, lf *ledgerFold, atKill bool, st *LedgerStats,
	fail func(lost, doubled bool, format string, args ...any)) map[string]frames.Binding {
	settled := map[string]frames.Binding{}
	bound := map[string]bool{}
	for _, name := range children {
		cs := replayed[name]
		ids := make([]string, 0, len(cs.Bindings))
		for id := range cs.Bindings {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			b := *cs.Bindings[id]
			bound[id] = true
			st.Children++
			where := fmt.Sprintf("%q's root %s (reservation %s)", name, b.Root, id)
			r, root := lf.res[id], cs.Frames[b.Root]
			switch {
			case b.Scope != LedgerParent || r == nil:
				fail(true, false, "LOST: %s is bound to a reservation of %q the parent never granted", where, b.Scope)
				continue
			case r.forScope != name:
				fail(false, false, "%s: the reservation is for %q", where, r.forScope)
				continue
			case root == nil:
				fail(true, false, "LOST: %s is not in its scope's replay", where)
				continue
			case root.Status.Live():
				st.Live++
				if b.Final || r.charged != 0 || r.settles != 0 {
					fail(false, r.charged != 0, "EARLY: %s is live, yet its binding is final (%v) or the parent settled it (%d settlements, charged %d)",
						where, b.Final, r.settles, r.charged)
				}
				continue
			case !b.Final || b.Reported != root.Cost.SpendMicros:
				fail(true, false, "LOST: %s finished having spent %d, its binding reports %d (final: %v)", where, root.Cost.SpendMicros, b.Reported, b.Final)
				continue
			}
			st.Repeats += max(r.settles-1, 0)
			acked := b.Delivered == b.Reported && b.DeliveredFinal
			var pr *frames.Reservation
			if parent != nil {
				pr = parent.Reservations[id]
			}
			switch {
			case r.charged > b.Reported:
				fail(false, true, "DOUBLED: %s spent %d, the parent was charged %d for it (%d settlements)", where, b.Reported, r.charged, r.settles)
			case pr != nil && (pr.Settled != r.charged || pr.Final != r.final):
				fail(pr.Settled < r.charged, pr.Settled > r.charged, "%s: the parent's state has %d settled (final: %v), its log's settlements charged %d (final: %v)",
					where, pr.Settled, pr.Final, r.charged, r.final)
			case b.Delivered > b.Reported || (b.Delivered > 0 || b.DeliveredFinal) && !r.final:
				fail(true, false, "LOST: %s: the binding has %d acknowledged (final: %v), the parent settled %d (final: %v)",
					where, b.Delivered, b.DeliveredFinal, r.charged, r.final)
			case !r.final && r.charged == 0 && atKill:
				st.Undelivered++
			case !r.final:
				fail(true, false, "LOST: %s spent %d, the parent was charged %d and has no final settlement (%d settlements)", where, b.Reported, r.charged, r.settles)
			case r.charged < b.Reported:
				fail(true, false, "LOST: %s spent %d, the parent was charged %d for it", where, b.Reported, r.charged)
			case !acked && atKill:
				st.Unacked++
			case !acked:
				fail(true, false, "LOST: %s is settled in the parent, and the binding has %d of %d acknowledged (final: %v) after the outbox drained",
					where, b.Delivered, b.Reported, b.DeliveredFinal)
			default:
				st.Settled++
				st.Charged += b.Reported
				settled[name+"/"+b.Root] = b
			}
		}
	}
	for id, r := range lf.res {
		if !strings.HasPrefix(r.forScope, LedgerChildPrefix) {
			continue
		}
		st.Reservations++
		if !bound[id] {
			st.Unbound++
			if r.charged != 0 || r.settles != 0 {
				fail(false, true, "PHANTOM: reservation %s for %q was bound by no root, yet settled %d times (charged %d)", id, r.forScope, r.settles, r.charged)
			}
		}
	}
	return settled
}
