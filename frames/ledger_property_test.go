package frames_test

import (
	"fmt"
	"reflect"
	"sort"
	"testing"

	"pgregory.net/rapid"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/frames"
)

// committed is what frame f has committed of its spend limit at now: its
// actual spend (its settled children's included) and what its unexpired
// reservations hold (the ledger's Outstanding).
func committed(s *frames.State, f *frames.Frame, now int64) int64 {
	var held int64
	for _, r := range s.Reservations {
		if r.Frame == f.ID && !r.Expired(s.Scope, now) {
			held += r.Held()
		}
	}
	n, _ := budget.AddSaturating(f.Cost.SpendMicros, held)
	return n
}

// ledgerSafety is the promise of the spend ledger, checked after every step
// of a random run.
//
// For every live frame F with a spend limit M, the test keeps excess(F):
// how far past M the promise lets F be. At every moment
//
//	actual(F) + outstanding(F) ≤ M + excess(F)
//
// where outstanding counts only unexpired reservations. excess(F) starts at
// 0 and grows only by a step that is one of:
//
//   - F's own usage report that crossed M + excess(F) (by at most the
//     report's spend); F must then be suspended (spend_exceeded), and the
//     agents of the run never report usage on a suspended frame (nor
//     resume one): one report per crossing;
//   - the pop of a child C of F bound to an unexpired reservation of F: by
//     at most what C spent past what the reservation held, and that must
//     be at most excess(C), C's own allowance (C's limit is at most the
//     reservation's amount): C's one crossing report, and its children's;
//
// A reservation bound to a live child here never runs out (its lease ends
// nothing: the pop settles it), so no late charge of an expired lease can
// take F past its max.
//
// Nothing else may take a frame past M + excess: a grant never does (after
// a granted ReserveSpend, actual + outstanding ≤ M), nor a renewal, a
// release, a push, or time passing. Together: a frame's actual spend stays
// within its max plus at most one usage report per frame under it that
// crossed (its own, and each child's, recursively). That is the promise "actual ≤
// max plus at most one report per child": a report is accepted whole (the
// money is spent), the one that crosses stops its frame, and a child's
// settlement past its reservation is that child's crossing report.
//
// The run's policy for requests without an estimate is cap: allow holds
// nothing and gives the work the whole available spend as its ceiling, by
// design outside this promise.
type ledgerSafety struct {
	excess map[string]int64
	// seen counts what the runs exercised, for the log.
	seen map[string]int
}

// check updates the allowances and checks the promise after a step: cmd
// (nil: only the clock moved) decided evs, taking the state from before
// to after, at now1.
func (l *ledgerSafety) check(t *rapid.T, before, after *frames.State, now1 int64, cmd frames.Command, evs []frames.Event) {
	permitted := map[string]int64{}
	own := ""
	if u, ok := cmd.(*frames.RecordUsage); ok && len(evs) > 0 {
		own = u.FrameID
		permitted[own] += u.Cost.SpendMicros
	}
	for _, e := range evs {
		p, ok := e.(*frames.FramePopped)
		if !ok {
			continue
		}
		c := before.Frames[p.Frame]
		if c == nil || c.ParentID == "" || p.Final == nil {
			continue
		}
		spent := p.Final.Cost.SpendMicros
		r := before.Reservations[c.Reservation]
		if r == nil || r.Child != c.ID {
			if spent > 0 {
				t.Fatalf("child %q of %q spent %d without a reservation", c.ID, c.ParentID, spent)
			}
			continue
		}
		if r.Expired(before.Scope, now1) || r.Returned {
			t.Fatalf("reservation %q of %q ran out while its child %q was live", r.ID, c.ParentID, c.ID)
		}
		over := max(0, spent-r.Held())
		if allowed := l.excess[c.ID] + permitted[c.ID]; over > allowed {
			t.Fatalf("child %q spent %d, %d past its reservation %q's %d, more than its allowance %d", c.ID, spent, over, r.ID, r.Held(), allowed)
		}
		if over > 0 {
			l.seen["child overrun"]++
		}
		permitted[c.ParentID] += over
	}
	ids := make([]string, 0, len(after.Frames))
	for id := range after.Frames {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		f := after.Frames[id]
		m := f.Limits.SpendMicros
		if !f.Status.Live() || m == 0 {
			continue
		}
		c := committed(after, f, now1)
		if r, ok := cmd.(*frames.ReserveSpend); ok && len(evs) > 0 && r.FrameID == id && c > m {
			t.Fatalf("a grant took %q to %d committed, past its max %d", id, c, m)
		}
		need := c - m - l.excess[id]
		if need <= 0 {
			continue
		}
		if need > permitted[id] {
			t.Fatalf("%T took %q to %d committed (actual %d): %d past its max %d and allowance %d, the step permits %d",
				cmd, id, c, f.Cost.SpendMicros, c-m, m, l.excess[id], permitted[id])
		}
		if id == own {
			if f.Status != frames.StatusSuspended {
				t.Fatalf("%q's own report took it to %d committed past its max %d, and it is not suspended", id, c, m)
			}
			l.seen["own crossing"]++
		}
		l.excess[id] += need
	}
}

// genLedgerStep draws a step of obedient agents: children are pushed only
// with a reservation of their parent, usage is never reported on a
// suspended frame, and nothing is resumed.
func genLedgerStep(t *rapid.T, s *frames.State, hdr frames.Header, n int) frames.Command {
	var live, running []string // live frames; those not suspended
	for _, f := range s.LiveFrames() {
		live = append(live, f.ID)
		if f.Status != frames.StatusSuspended {
			running = append(running, f.ID)
		}
	}
	sort.Strings(live)
	sort.Strings(running)
	var open []string // open reservations for a child here, not bound, their owner able to take a child
	for id, r := range s.Reservations {
		if f := s.Frames[r.Frame]; f != nil && !r.Returned && r.Child == "" && r.For == s.Scope &&
			(f.Status == frames.StatusActive || f.Status == frames.StatusWaiting) {
			open = append(open, id)
		}
	}
	sort.Strings(open)
	var rids []string
	for id := range s.Reservations {
		rids = append(rids, id)
	}
	sort.Strings(rids)
	mint := frames.Mint{TokenID: fmt.Sprintf("t%d", n), ExpiresAt: hdr.Now + 1_000_000}
	pick := func(ids []string, label string) (string, bool) {
		if len(ids) == 0 {
			return "", false
		}
		return rapid.SampledFrom(ids).Draw(t, label), true
	}
	lease := func() int64 { // short ones run out within the run, long ones do not
		if rapid.Bool().Draw(t, "short") {
			return hdr.Now + rapid.Int64Range(1, 400).Draw(t, "lease")
		}
		return hdr.Now + rapid.Int64Range(10_000, 100_000).Draw(t, "lease")
	}

	switch rapid.IntRange(0, 9).Draw(t, "op") {
	case 0: // a root, most often with a spend limit
		return &frames.PushFrame{Header: hdr, FrameID: fmt.Sprintf("f%d", n), Goal: "g", Budget: budget.TokenBudget{Total: 1_000},
			Limits: budget.Limits{SpendMicros: rapid.SampledFrom([]int64{0, 100, 300, 1_000}).Draw(t, "max")}}
	case 1, 2:
		if id, ok := pick(running, "reserver"); ok {
			c := &frames.ReserveSpend{Header: hdr, FrameID: id, ReservationID: fmt.Sprintf("rv%d", n), Partial: rapid.Bool().Draw(t, "partial"),
				ExpiresAt: lease()}
			if rapid.IntRange(0, 4).Draw(t, "estimated") > 0 {
				c.Estimate, c.HasEstimate = rapid.Int64Range(1, 400).Draw(t, "estimate"), true
			}
			return c
		}
	case 3, 4:
		if id, ok := pick(open, "bind"); ok {
			r := s.Reservations[id]
			cl := frames.ClaimsOf(s.Scope, r)
			return &frames.PushFrame{Header: hdr, FrameID: fmt.Sprintf("f%d", n), ParentID: r.Frame, Goal: "g",
				Limits: budget.Limits{SpendMicros: rapid.SampledFrom([]int64{0, 0, 20, 1_000}).Draw(t, "own")}, Reservation: &cl, ReservationToken: "tk"}
		}
	case 5, 6:
		if id, ok := pick(running, "spender"); ok {
			return &frames.RecordUsage{Header: hdr, FrameID: id, Cost: budget.Cost{SpendMicros: rapid.Int64Range(0, 250).Draw(t, "spend"), Turns: 1}, Mint: mint}
		}
	case 7:
		if id, ok := pick(live, "pop"); ok {
			return &frames.PopFrame{Header: hdr, FrameID: id, Status: frames.StatusCompleted, Cascade: rapid.IntRange(0, 3).Draw(t, "cascade") == 0, Mint: mint}
		}
	case 8:
		if id, ok := pick(rids, "rv"); ok {
			if rapid.Bool().Draw(t, "renew") {
				return &frames.RenewReservation{Header: hdr, ReservationID: id, ExpiresAt: lease()}
			}
			return &frames.ReleaseReservation{Header: hdr, ReservationID: id}
		}
	}
	return nil // the clock moves on, nothing else happens
}

// Random runs of the ledger's operations keep its promise (ledgerSafety)
// after every step, its invariants after every event, and replay to the
// same state.
func TestPropertyLedgerSafety(t *testing.T) {
	seen := map[string]int{}
	rapid.Check(t, func(t *rapid.T) {
		cfg := frames.DefaultConfig()
		cfg.Unestimated, cfg.UnestimatedCap = frames.EstimateCap, rapid.Int64Range(1, 100).Draw(t, "cap")
		s := frames.NewState("prop", 0)
		l := &ledgerSafety{excess: map[string]int64{}, seen: seen}
		var log []frames.Event
		now := int64(1)
		steps := rapid.IntRange(1, 100).Draw(t, "steps")
		for i := 0; i < steps; i++ {
			now += rapid.Int64Range(1, 30).Draw(t, "tick")
			if rapid.IntRange(0, 9).Draw(t, "jump") == 0 {
				now += rapid.Int64Range(0, 500).Draw(t, "jumpby")
			}
			hdr := frames.Header{RequestID: fmt.Sprintf("q%d", i), RequestHash: []byte{byte(i)}, Now: now}
			cmd := genLedgerStep(t, s, hdr, i)
			before := s.Clone()
			var evs []frames.Event
			if cmd != nil {
				var err error
				evs, err = frames.Decide(cfg, s, cmd)
				if !reflect.DeepEqual(before, s.Clone()) {
					t.Fatalf("Decide(%T) changed the state", cmd)
				}
				if err != nil {
					evs = nil
				}
				for _, e := range evs {
					if err := frames.Apply(s, e); err != nil {
						t.Fatalf("decided %s does not apply: %v", e.EventType(), err)
					}
					if err := frames.CheckInvariants(s); err != nil {
						t.Fatalf("after %s: %v", e.EventType(), err)
					}
					l.seen[e.EventType()]++
				}
				log = append(log, evs...)
			}
			l.check(t, before, s, now, cmd, evs)
			for _, row := range frames.Ledger(s, "", now) {
				if f := s.Frames[row.Frame]; f != nil && row.Outstanding != committed(s, f, now)-f.Cost.SpendMicros {
					t.Fatalf("the ledger row of %q reads %d outstanding", row.Frame, row.Outstanding)
				}
			}
		}
		r := frames.NewState("prop", 0)
		for _, e := range log {
			if err := frames.Apply(r, e); err != nil {
				t.Fatalf("replay: %v", err)
			}
		}
		if !reflect.DeepEqual(r.Clone(), s.Clone()) {
			t.Fatalf("replay differs from live state")
		}
	})
	t.Logf("exercised: %v", seen)
}
