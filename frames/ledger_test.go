package frames_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/frames"
)

// The spend ledger's pure rules (ledger.go), driven through Decide and
// Apply by the world of frames_test.go: every Apply is followed by
// CheckInvariants (checkLedgerInvariants among them).

// testLease is the lease the tests' reservations get: far longer than the
// world's clock moves (10 ns a request) unless a test moves it on.
const testLease = int64(1_000_000)

// limitedRoot pushes a root frame with spend limit max (0: none).
func (w *world) limitedRoot(id string, max int64) {
	w.t.Helper()
	w.must(&frames.PushFrame{Header: w.hdr(), FrameID: id, Goal: "goal " + id, Budget: budget.TokenBudget{Total: 10_000},
		Limits: budget.Limits{SpendMicros: max}})
}

// reserveCmd is a ReserveSpend of est on frame for a child here, with
// testLease from its header's time.
func (w *world) reserveCmd(frame, id string, est int64) *frames.ReserveSpend {
	h := w.hdr()
	return &frames.ReserveSpend{Header: h, FrameID: frame, ReservationID: id, Estimate: est, HasEstimate: true, ExpiresAt: h.Now + testLease}
}

// reserve grants est on frame (for scope "for", "" for a child here) and
// returns the reservation as the state keeps it.
func (w *world) reserve(frame, id, forScope string, est int64) *frames.Reservation {
	w.t.Helper()
	c := w.reserveCmd(frame, id, est)
	c.For = forScope
	w.must(c)
	r := w.s.Reservations[id]
	require.NotNil(w.t, r, id)
	return r
}

// claims is what the token of reservation id of w's scope says.
func (w *world) claims(id string) *frames.ReservationClaims {
	w.t.Helper()
	r := w.s.Reservations[id]
	require.NotNil(w.t, r, id)
	cl := frames.ClaimsOf(w.s.Scope, r)
	return &cl
}

// pushWith pushes frame id (a child of parent, or a root when parent is
// "") with a reservation's claims and its own spend limit.
func (w *world) pushWith(id, parent string, cl *frames.ReservationClaims, limit int64) []frames.Event {
	w.t.Helper()
	return w.must(w.pushWithCmd(id, parent, cl, limit))
}

func (w *world) pushWithCmd(id, parent string, cl *frames.ReservationClaims, limit int64) *frames.PushFrame {
	total := int64(10_000)
	if parent != "" {
		total = 100
	}
	return &frames.PushFrame{Header: w.hdr(), FrameID: id, ParentID: parent, Goal: "goal " + id, Budget: budget.TokenBudget{Total: total},
		Limits: budget.Limits{SpendMicros: limit}, Reservation: cl, ReservationToken: "token-of-" + cl.ID}
}

// spend records n micro-units of spend on frame (a token minted, in case
// it crosses a limit).
func (w *world) spend(frame string, n int64) []frames.Event {
	w.t.Helper()
	return w.must(&frames.RecordUsage{Header: w.hdr(), FrameID: frame, Cost: budget.Cost{SpendMicros: n}, Mint: w.mint()})
}

func (w *world) popFrame(frame string) []frames.Event {
	w.t.Helper()
	return w.must(&frames.PopFrame{Header: w.hdr(), FrameID: frame, Status: frames.StatusCompleted, Mint: w.mint()})
}

// refused checks that Decide refuses cmd with an error matching want,
// returns no events, and leaves the state as it was.
func (w *world) refused(cmd frames.Command, want error) error {
	w.t.Helper()
	before := w.s.Clone()
	evs, err := frames.Decide(w.cfg, w.s, cmd)
	require.Error(w.t, err)
	assert.ErrorIs(w.t, err, want)
	assert.Nil(w.t, evs, "a refused command decides no events")
	assert.Equal(w.t, before, w.s.Clone(), "a refused command changes nothing")
	return err
}

// available is what frame can still grant at the world's time.
func (w *world) available(frame string) int64 {
	w.t.Helper()
	f := w.s.Frame(frame)
	require.NotNil(w.t, f, frame)
	a, _ := w.s.Available(f, w.now)
	return a
}

// row is frame's ledger row at the world's time.
func (w *world) row(frame string) frames.LedgerRow {
	w.t.Helper()
	for _, r := range frames.Ledger(w.s, frame, w.now) {
		if r.Frame == frame {
			return r
		}
	}
	w.t.Fatalf("no ledger row for %q", frame)
	return frames.LedgerRow{}
}

// otherWorld is a second scope ("other") whose clock follows w's.
func otherWorld(t *testing.T, w *world, scope string) *world {
	o := newWorld(t)
	o.setState(frames.NewState(scope, 0))
	o.now = w.now
	return o
}

func eventTypes(evs []frames.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.EventType())
	}
	return out
}

// The grant rule: a reservation is granted against the frame's max −
// actual − outstanding; more is refused (or, with Partial, what is
// available is granted); a frame without a spend limit grants any amount;
// a request without an estimate gets the configuration's policy.
func TestReserveSpendGrantRule(t *testing.T) {
	type grant struct {
		amount, ceiling int64
		policy          frames.EstimatePolicy
	}
	for _, tc := range []struct {
		name                string
		max, actual, held   int64 // the frame's spend limit, its own spend, and what a reservation it made first holds
		policy              frames.EstimatePolicy
		cap                 int64
		est                 int64
		noEstimate, partial bool
		want                *grant
		err                 error
		unavailable         *frames.SpendUnavailableError // with err ErrSpendUnavailable
	}{
		{name: "within what is available", max: 100, actual: 20, held: 30, est: 40, want: &grant{40, 40, ""}},
		{name: "exactly what is available", max: 100, actual: 20, held: 30, est: 50, want: &grant{50, 50, ""}},
		{name: "one more than available", max: 100, actual: 20, held: 30, est: 51, err: frames.ErrSpendUnavailable,
			unavailable: &frames.SpendUnavailableError{Frame: "r", Requested: 51, Available: 50, Max: 100, Actual: 20, Outstanding: 30}},
		{name: "partial grants what is available", max: 100, actual: 20, held: 30, est: 80, partial: true, want: &grant{50, 50, ""}},
		{name: "partial grants an estimate that fits as asked", max: 100, actual: 20, held: 30, est: 10, partial: true, want: &grant{10, 10, ""}},
		{name: "nothing available refuses, partial or not", max: 100, actual: 60, held: 40, est: 1, partial: true, err: frames.ErrSpendUnavailable,
			unavailable: &frames.SpendUnavailableError{Frame: "r", Requested: 1, Available: 0, Max: 100, Actual: 60, Outstanding: 40}},
		{name: "actual at its max leaves nothing", max: 100, actual: 100, est: 1, err: frames.ErrSpendUnavailable,
			unavailable: &frames.SpendUnavailableError{Frame: "r", Requested: 1, Available: 0, Max: 100, Actual: 100}},
		{name: "no spend limit grants any amount", actual: 500, held: 30, est: 1_000_000_000_000, want: &grant{1_000_000_000_000, 1_000_000_000_000, ""}},
		{name: "no spend limit grants the largest amount", est: math.MaxInt64, want: &grant{math.MaxInt64, math.MaxInt64, ""}},
		{name: "no estimate under deny (the default)", max: 100, noEstimate: true, err: frames.ErrEstimateRequired},
		{name: "no estimate under deny, named", max: 100, policy: frames.EstimateDeny, noEstimate: true, err: frames.ErrEstimateRequired},
		{name: "no estimate under deny, no spend limit", policy: frames.EstimateDeny, noEstimate: true, err: frames.ErrEstimateRequired},
		{name: "cap reserves the cap", max: 100, actual: 20, held: 30, policy: frames.EstimateCap, cap: 25, noEstimate: true, want: &grant{25, 25, frames.EstimateCap}},
		{name: "cap over what is available is refused", max: 100, actual: 20, held: 70, policy: frames.EstimateCap, cap: 25, noEstimate: true,
			err: frames.ErrSpendUnavailable, unavailable: &frames.SpendUnavailableError{Frame: "r", Requested: 25, Available: 10, Max: 100, Actual: 20, Outstanding: 70}},
		{name: "cap, partial", max: 100, actual: 20, held: 70, policy: frames.EstimateCap, cap: 25, noEstimate: true, partial: true, want: &grant{10, 10, frames.EstimateCap}},
		{name: "an estimate under cap is an estimate", max: 100, policy: frames.EstimateCap, cap: 25, est: 60, want: &grant{60, 60, ""}},
		{name: "allow holds nothing, its ceiling what is available", max: 100, actual: 20, held: 30, policy: frames.EstimateAllow, noEstimate: true,
			want: &grant{0, 50, frames.EstimateAllow}},
		{name: "allow without a spend limit: no ceiling", actual: 20, policy: frames.EstimateAllow, noEstimate: true, want: &grant{0, 0, frames.EstimateAllow}},
		{name: "allow with nothing available is refused", max: 100, actual: 60, held: 40, policy: frames.EstimateAllow, noEstimate: true,
			err: frames.ErrSpendUnavailable, unavailable: &frames.SpendUnavailableError{Frame: "r", Requested: 0, Available: 0, Max: 100, Actual: 60, Outstanding: 40}},
		{name: "an estimate under allow is an estimate", max: 100, policy: frames.EstimateAllow, est: 60, want: &grant{60, 60, ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.cfg.Unestimated, w.cfg.UnestimatedCap = tc.policy, tc.cap
			require.NoError(t, w.cfg.Validate())
			w.limitedRoot("r", tc.max)
			if tc.actual > 0 {
				w.spend("r", tc.actual)
			}
			if tc.held > 0 {
				w.reserve("r", "first", "", tc.held)
			}
			require.Equal(t, frames.StatusActive, w.s.Frame("r").Status)
			c := w.reserveCmd("r", "res", tc.est)
			c.HasEstimate, c.Partial = !tc.noEstimate, tc.partial
			if tc.err != nil {
				err := w.refused(c, tc.err)
				if tc.unavailable != nil {
					var u *frames.SpendUnavailableError
					require.ErrorAs(t, err, &u)
					assert.Equal(t, tc.unavailable, u)
				}
				return
			}
			evs := w.must(c)
			require.Equal(t, []string{frames.TypeSpendReserved}, eventTypes(evs))
			got := evs[0].(*frames.SpendReserved).Reservation
			assert.Equal(t, "r", evs[0].EventMeta().Frame)
			assert.Equal(t, grant{got.Amount, got.Ceiling, got.Policy}, *tc.want)
			wantEst := tc.est
			if tc.noEstimate {
				wantEst = -1
			}
			assert.Equal(t, wantEst, got.Estimate)
			assert.Equal(t, w.s.Scope, got.For, "For \"\" is a child here")
			assert.Equal(t, c.Now, got.At)
			assert.Equal(t, c.ExpiresAt, got.ExpiresAt)
			f := w.s.Frame("r")
			assert.Equal(t, tc.held+tc.want.amount, f.Outstanding)
			if tc.max > 0 {
				assert.LessOrEqual(t, f.Cost.SpendMicros+f.Outstanding, tc.max, "grants never exceed max − actual − outstanding")
				assert.Equal(t, tc.max-tc.actual-tc.held-tc.want.amount, w.available("r"))
			}
			assert.Equal(t, w.s.Clone(), w.replay())
		})
	}
}

// What a frame's reservations hold is set aside: its own usage that takes
// its actual spend and what its unexpired reservations hold past its max
// suspends it (spend_exceeded), as usage past the max does. (Before, only
// the actual spend was checked: a frame that reserved 80 of 100 could
// spend 100 of its own unsuspended, and its child's 80 then took it to
// 180.)
func TestOwnUsageCountsWhatTheFrameReserved(t *testing.T) {
	for _, tc := range []struct {
		name      string
		reserve   int64
		close     string // "expire" or "release" the reservation first
		report    int64
		suspended bool
		current   int64
	}{
		{name: "within what the reservation leaves", reserve: 80, report: 20},
		{name: "one past it", reserve: 80, report: 21, suspended: true, current: 101},
		{name: "far past it, the max itself not crossed", reserve: 80, report: 100, suspended: true, current: 180},
		{name: "past the max itself", reserve: 80, report: 120, suspended: true, current: 120},
		{name: "an expired reservation is not counted", reserve: 80, close: "expire", report: 100},
		{name: "a released reservation is not counted", reserve: 80, close: "release", report: 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.limitedRoot("r", 100)
			w.reserve("r", "res", "", tc.reserve)
			switch tc.close {
			case "expire":
				w.now += 2 * testLease
			case "release":
				w.must(&frames.ReleaseReservation{Header: w.hdr(), ReservationID: "res"})
			}
			c := &frames.RecordUsage{Header: w.hdr(), FrameID: "r", Cost: budget.Cost{SpendMicros: tc.report, Turns: 1}}
			if tc.suspended {
				w.refused(c, frames.ErrInvalidID) // no token minted: refused whole
			}
			c.Mint = w.mint()
			evs := w.must(c)
			f := w.s.Frame("r")
			assert.Equal(t, tc.report, f.Cost.SpendMicros, "the usage itself is recorded")
			if !tc.suspended {
				assert.Len(t, evs, 1)
				assert.Equal(t, frames.StatusActive, f.Status)
				return
			}
			require.Equal(t, []string{frames.TypeUsageRecorded, frames.TypeFrameSuspended}, eventTypes(evs))
			require.Equal(t, frames.StatusSuspended, f.Status)
			assert.Equal(t, &budget.Violation{Code: budget.SpendExceeded, Current: tc.current, Max: 100}, f.Suspension.Limit)
			assert.Equal(t, w.s.Clone(), w.replay())
		})
	}
}

// Concurrent grants are decided in order: two requests that each fit alone
// do not both fit, and the second is refused with what the first left.
func TestReservationsDecidedInOrder(t *testing.T) {
	w := newWorld(t)
	w.limitedRoot("r", 100)
	a, b := w.reserveCmd("r", "a", 70), w.reserveCmd("r", "b", 70)
	_, err := frames.Decide(w.cfg, w.s, b)
	require.NoError(t, err, "alone, b fits")
	w.must(a)
	err = w.refused(b, frames.ErrSpendUnavailable)
	var u *frames.SpendUnavailableError
	require.ErrorAs(t, err, &u)
	assert.Equal(t, int64(30), u.Available)
}

// LeaseTTL turns a request's lease in milliseconds into nanoseconds within
// (0, MaxReservationAge].
func TestLeaseTTL(t *testing.T) {
	const ms = int64(1_000_000)
	for _, tc := range []struct {
		name        string
		millis, def int64
		want        int64
		err         error
	}{
		{name: "the default lease", want: frames.DefaultLease},
		{name: "the server's default", def: 5_000 * ms, want: 5_000 * ms},
		{name: "a server default past the bound is bounded", def: frames.MaxReservationAge + 1, want: frames.MaxReservationAge},
		{name: "a negative server default reads as the default", def: -1, want: frames.DefaultLease},
		{name: "as asked", millis: 1_500, want: 1_500 * ms},
		{name: "one millisecond", millis: 1, want: ms},
		{name: "the bound itself", millis: frames.MaxReservationAge / ms, want: frames.MaxReservationAge},
		{name: "past the bound", millis: frames.MaxReservationAge/ms + 1, want: frames.MaxReservationAge},
		{name: "the largest lease does not overflow", millis: math.MaxInt64, want: frames.MaxReservationAge},
		{name: "negative", millis: -1, err: frames.ErrInvalidArgument},
		{name: "the most negative", millis: math.MinInt64, err: frames.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := frames.LeaseTTL(tc.millis, tc.def)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			assert.Positive(t, got)
			assert.LessOrEqual(t, got, frames.MaxReservationAge)
		})
	}
}

// A reservation's lease: at its end it still holds; one past it, it no
// longer counts in what the frame can grant, and the frame's next
// reservation writes it returned ("expired"). An expired reservation can
// neither be renewed nor bind a push.
func TestReservationLeaseExpires(t *testing.T) {
	w := newWorld(t)
	w.limitedRoot("r", 100)
	r1 := w.reserve("r", "r1", "", 60)
	w.now += 1_000 // r2's lease ends after r1's
	r2 := w.reserve("r", "r2", "", 30)
	f := w.s.Frame("r")
	require.Equal(t, int64(90), f.Outstanding)

	a, limited := w.s.Available(f, r1.ExpiresAt)
	assert.True(t, limited)
	assert.Equal(t, int64(10), a, "at its lease's end a reservation still holds")
	a, _ = w.s.Available(f, r1.ExpiresAt+1)
	assert.Equal(t, int64(70), a, "one past it, it no longer counts")
	assert.False(t, r1.Expired("s", r1.ExpiresAt))
	assert.True(t, r1.Expired("s", r1.ExpiresAt+1))

	w.now = r1.ExpiresAt - 10 // the next request is at r1's lease end
	w.refused(w.reserveCmd("r", "r3", 11), frames.ErrSpendUnavailable)

	w.now = r1.ExpiresAt + 1 // the next request is 11 past it
	assert.Equal(t, int64(90), f.Outstanding, "expiry changes no state by itself")
	assert.Equal(t, int64(30), w.row("r").Outstanding, "the ledger reads only unexpired reservations")
	err := w.refused(w.reserveCmd("r", "r3", 71), frames.ErrSpendUnavailable)
	var u *frames.SpendUnavailableError
	require.ErrorAs(t, err, &u)
	assert.Equal(t, &frames.SpendUnavailableError{Frame: "r", Requested: 71, Available: 70, Max: 100, Outstanding: 30}, u)

	w.now = r1.ExpiresAt
	w.refused(&frames.RenewReservation{Header: w.hdr(), ReservationID: "r1", ExpiresAt: w.now + testLease}, frames.ErrReservationClosed)
	w.now = r1.ExpiresAt
	w.refused(w.pushWithCmd("c", "r", w.claims("r1"), 0), frames.ErrReservationClosed)

	w.now = r1.ExpiresAt
	evs := w.must(w.reserveCmd("r", "r3", 70))
	require.Equal(t, []string{frames.TypeSpendReturned, frames.TypeSpendReserved}, eventTypes(evs), "the frame's next ledger decision returns it")
	ret := evs[0].(*frames.SpendReturned)
	assert.Equal(t, []string{"r1"}, ret.IDs)
	assert.Equal(t, "expired", ret.Why)
	assert.Equal(t, int64(60), ret.Returned)
	assert.Equal(t, "r", ret.Frame)
	assert.True(t, r1.Returned)
	assert.Equal(t, "expired", r1.Why)
	assert.Equal(t, int64(100), f.Outstanding, "r2 and r3")
	assert.Zero(t, w.available("r"))
	w.refused(&frames.RenewReservation{Header: w.hdr(), ReservationID: "r1", ExpiresAt: w.now + testLease}, frames.ErrReservationClosed)
	w.refused(&frames.ReleaseReservation{Header: w.hdr(), ReservationID: "r1"}, frames.ErrReservationClosed)
	w.refused(w.pushWithCmd("c", "r", w.claims("r1"), 0), frames.ErrReservationClosed)

	// Both of the frame's reservations whose leases ran out are returned
	// together, sorted, by its next one.
	w.now = r2.ExpiresAt + testLease
	evs = w.must(w.reserveCmd("r", "r4", 100))
	require.Equal(t, []string{frames.TypeSpendReturned, frames.TypeSpendReserved}, eventTypes(evs))
	ret = evs[0].(*frames.SpendReturned)
	assert.Equal(t, []string{"r2", "r3"}, ret.IDs)
	assert.Equal(t, int64(100), ret.Returned)
	assert.Equal(t, int64(100), f.Outstanding, "r4 alone")
	assert.Equal(t, w.s.Clone(), w.replay())
}

// A reservation bound to a live child here has no lease to run out: it
// holds what the child may still spend until the child's pop settles it,
// however late; the owner never grants that spend again meanwhile.
func TestBoundReservationHereNeverExpires(t *testing.T) {
	w := newWorld(t)
	w.limitedRoot("r", 100)
	r1 := w.reserve("r", "r1", "", 60)
	w.pushWith("c", "r", w.claims("r1"), 0)
	w.now = r1.ExpiresAt + 10*testLease
	assert.False(t, r1.Expired(w.s.Scope, w.now))
	assert.Equal(t, int64(60), w.row("r").Outstanding)
	assert.Equal(t, int64(40), w.available("r"))
	w.refused(w.reserveCmd("r", "r2", 41), frames.ErrSpendUnavailable)
	evs := w.must(w.reserveCmd("r", "r2", 40))
	assert.Equal(t, []string{frames.TypeSpendReserved}, eventTypes(evs), "nothing returned")
	w.must(&frames.RenewReservation{Header: w.hdr(), ReservationID: "r1", ExpiresAt: w.now + testLease})

	w.spend("c", 55)
	w.popFrame("c")
	assert.True(t, r1.Returned)
	assert.Equal(t, "settled", r1.Why)
	assert.Equal(t, int64(55), w.s.Frame("r").Cost.SpendMicros)
	assert.Equal(t, int64(40), w.row("r").Outstanding, "r2 alone")
	assert.Equal(t, w.s.Clone(), w.replay())
}

// Renewal extends an unexpired lease, up to MaxReservationAge after the
// grant, and is refused past that or once the reservation expired or
// returned.
func TestRenewReservation(t *testing.T) {
	w := newWorld(t)
	w.limitedRoot("r", 100)
	r := w.reserve("r", "res", "", 40)
	granted, first := r.At, r.ExpiresAt
	renew := func(end int64) *frames.RenewReservation {
		h := w.hdr()
		if end == 0 {
			end = h.Now + 2*testLease
		}
		return &frames.RenewReservation{Header: h, ReservationID: "res", ExpiresAt: end}
	}

	for _, tc := range []struct {
		name string
		end  func(now int64) int64
	}{
		{"an end at now", func(now int64) int64 { return now }},
		{"an end in the past", func(int64) int64 { return 1 }},
		{"a negative end", func(int64) int64 { return math.MinInt64 }},
		{"an end before the current one", func(int64) int64 { return first - 1 }},
		{"the current end", func(int64) int64 { return first }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := renew(0)
			c.ExpiresAt = tc.end(c.Now)
			w.refused(c, frames.ErrInvalidArgument)
		})
	}
	w.refused(&frames.RenewReservation{Header: w.hdr(), ReservationID: "nope", ExpiresAt: w.now + testLease}, frames.ErrReservationUnknown)
	w.refused(&frames.RenewReservation{Header: w.hdr(), ReservationID: "", ExpiresAt: w.now + testLease}, frames.ErrInvalidID)

	c := renew(0)
	evs := w.must(c)
	require.Len(t, evs, 1)
	assert.Equal(t, &frames.SpendRenewed{Meta: evs[0].(*frames.SpendRenewed).Meta, ID: "res", Owner: "r", ExpiresAt: c.ExpiresAt,
		For: w.s.Scope, Amount: 40, Ceiling: 40}, evs[0])
	assert.Equal(t, "r", evs[0].EventMeta().Frame)
	assert.Equal(t, c.ExpiresAt, r.ExpiresAt)
	assert.Equal(t, int64(1), r.Renewals)
	assert.Equal(t, int64(40), w.s.Frame("r").Outstanding, "renewal holds the same amount")

	evs = w.must(renew(math.MaxInt64))
	assert.Equal(t, granted+frames.MaxReservationAge, evs[0].(*frames.SpendRenewed).ExpiresAt, "never past MaxReservationAge after the grant")
	assert.Equal(t, granted+frames.MaxReservationAge, r.ExpiresAt)
	assert.Equal(t, int64(2), r.Renewals)
	w.refused(renew(0), frames.ErrInvalidArgument)
	w.refused(renew(math.MaxInt64), frames.ErrInvalidArgument)

	w.now = r.ExpiresAt - 10 // the next request is at the lease's end: still renewable, but to no later end
	w.refused(renew(0), frames.ErrInvalidArgument)
	w.now = r.ExpiresAt
	w.refused(renew(0), frames.ErrReservationClosed)

	// A released reservation is closed too.
	w2 := newWorld(t)
	w2.limitedRoot("r", 100)
	w2.reserve("r", "res", "", 40)
	w2.must(&frames.ReleaseReservation{Header: w2.hdr(), ReservationID: "res"})
	w2.refused(&frames.RenewReservation{Header: w2.hdr(), ReservationID: "res", ExpiresAt: w2.now + testLease}, frames.ErrReservationClosed)
	assert.Equal(t, w.s.Clone(), w.replay())
}

// ReserveSpend's lease end is within (now, now + MaxReservationAge].
func TestReserveSpendLeaseBounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(now int64) int64
		err  error
	}{
		{"the shortest lease", func(now int64) int64 { return now + 1 }, nil},
		{"the longest lease", func(now int64) int64 { return now + frames.MaxReservationAge }, nil},
		{"a lease ending now", func(now int64) int64 { return now }, frames.ErrInvalidArgument},
		{"a negative lease", func(now int64) int64 { return now - 1 }, frames.ErrInvalidArgument},
		{"a negative end", func(int64) int64 { return -1 }, frames.ErrInvalidArgument},
		{"one past the longest", func(now int64) int64 { return now + frames.MaxReservationAge + 1 }, frames.ErrInvalidArgument},
		{"the largest end", func(int64) int64 { return math.MaxInt64 }, frames.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.limitedRoot("r", 100)
			c := w.reserveCmd("r", "res", 10)
			c.ExpiresAt = tc.end(c.Now)
			if tc.err != nil {
				w.refused(c, tc.err)
				return
			}
			w.must(c)
			assert.Equal(t, c.ExpiresAt, w.s.Reservations["res"].ExpiresAt)
		})
	}
}

// Release returns what a reservation holds now, except one bound to a live
// child here (its pop settles it).
func TestReleaseReservation(t *testing.T) {
	w := newWorld(t)
	w.limitedRoot("r", 100)
	w.reserve("r", "a", "", 40)
	w.reserve("r", "b", "", 30)
	w.reserve("r", "x", "elsewhere", 20)
	w.pushWith("c", "r", w.claims("b"), 0)
	require.Equal(t, int64(10), w.available("r"))

	release := func(id string) *frames.ReleaseReservation {
		return &frames.ReleaseReservation{Header: w.hdr(), ReservationID: id}
	}
	for _, tc := range []struct {
		id       string
		returned int64
		err      error
	}{
		{"a", 40, nil},
		{"a", 0, frames.ErrReservationClosed},
		{"b", 0, frames.ErrReservationBound},
		{"nope", 0, frames.ErrReservationUnknown},
		{"", 0, frames.ErrInvalidID},
		{"x", 20, nil}, // for another scope: its work may not have started; what it reports later is still charged
	} {
		t.Run(tc.id, func(t *testing.T) {
			if tc.err != nil {
				w.refused(release(tc.id), tc.err)
				return
			}
			before := w.s.Frame("r").Outstanding
			evs := w.must(release(tc.id))
			require.Len(t, evs, 1)
			ret := evs[0].(*frames.SpendReturned)
			assert.Equal(t, []string{tc.id}, ret.IDs)
			assert.Equal(t, "released", ret.Why)
			assert.Equal(t, tc.returned, ret.Returned)
			assert.Equal(t, "r", ret.Frame)
			assert.Equal(t, before-tc.returned, w.s.Frame("r").Outstanding)
			assert.True(t, w.s.Reservations[tc.id].Returned)
		})
	}
	assert.Equal(t, int64(70), w.available("r"), "b alone holds")

	// Once its child popped, b is settled: closed.
	w.spend("c", 10)
	w.popFrame("c")
	w.refused(release("b"), frames.ErrReservationClosed)
	assert.Equal(t, int64(90), w.available("r"))

	// An expired reservation not yet written returned is released as any
	// other (it still holds in the state), and is not returned again.
	w.reserve("r", "e", "", 50)
	w.now += 2 * testLease
	evs := w.must(release("e"))
	assert.Equal(t, int64(50), evs[0].(*frames.SpendReturned).Returned)
	assert.Equal(t, "released", w.s.Reservations["e"].Why)
	evs = w.must(w.reserveCmd("r", "f", 10))
	assert.Equal(t, []string{frames.TypeSpendReserved}, eventTypes(evs), "nothing left to return as expired")
	assert.Equal(t, w.s.Clone(), w.replay())
}

// A child pushed here with its parent's reservation has the reservation's
// ceiling as its spend limit (or its own, if lower).
func TestSameScopeReservationIsTheChildsCeiling(t *testing.T) {
	for _, tc := range []struct {
		name      string
		own, want int64
	}{
		{"no limit of its own", 0, 60},
		{"its own lower limit", 30, 30},
		{"its own higher limit", 90, 60},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.limitedRoot("r", 100)
			w.reserve("r", "res", "", 60)
			evs := w.pushWith("c", "r", w.claims("res"), tc.own)
			p := evs[0].(*frames.FramePushed)
			assert.Equal(t, "res", p.Reservation)
			assert.Nil(t, p.Binding, "a child here binds no outbox entry")
			c := w.s.Frame("c")
			assert.Equal(t, tc.want, c.Limits.SpendMicros)
			assert.Equal(t, "res", c.Reservation)
			assert.Equal(t, "c", w.s.Reservations["res"].Child)
			assert.Equal(t, int64(60), w.s.Frame("r").Outstanding, "bound, it still holds")
			assert.Equal(t, int64(60), w.row("c").Reserved)
		})
	}
}

// The child's pop settles its reservation in the same append: the parent's
// actual grows by the child's spend, the reservation closes, and its unused
// part is returned. A child's usage past its ceiling suspends it
// (spend_exceeded); its pop charges all of it.
func TestSameScopeReservationSettlesAtPop(t *testing.T) {
	for _, tc := range []struct {
		name       string
		parentOwn  int64   // the parent's own spend before it reserves
		reports    []int64 // the child's usage reports
		suspended  bool    // the child is suspended by its last report
		parentOver bool    // the pop takes the parent past its limit
		wantActual int64
		wantAvail  int64
	}{
		{name: "spends part of it", reports: []int64{15, 10}, wantActual: 25, wantAvail: 75},
		{name: "spends nothing", wantActual: 0, wantAvail: 100},
		{name: "spends all of it", reports: []int64{60}, wantActual: 60, wantAvail: 40},
		{name: "one report past it suspends the child", reports: []int64{50, 20}, suspended: true, wantActual: 70, wantAvail: 30},
		{name: "a child's overrun takes the parent past its limit", parentOwn: 40, reports: []int64{50, 20}, suspended: true, parentOver: true,
			wantActual: 110, wantAvail: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.limitedRoot("r", 100)
			if tc.parentOwn > 0 {
				w.spend("r", tc.parentOwn)
			}
			w.reserve("r", "res", "", 60)
			w.pushWith("c", "r", w.claims("res"), 0)
			var last []frames.Event
			for _, n := range tc.reports {
				last = w.spend("c", n)
			}
			c := w.s.Frame("c")
			if tc.suspended {
				require.Equal(t, []string{frames.TypeUsageRecorded, frames.TypeFrameSuspended}, eventTypes(last))
				require.Equal(t, frames.StatusSuspended, c.Status)
				assert.Equal(t, &budget.Violation{Code: budget.SpendExceeded, Current: c.Cost.SpendMicros, Max: 60}, c.Suspension.Limit)
			} else {
				assert.NotEqual(t, frames.StatusSuspended, c.Status)
			}
			childSpend := c.Cost.SpendMicros

			evs := w.popFrame("c")
			want := []string{frames.TypeFramePopped}
			if tc.parentOver {
				want = append(want, frames.TypeFrameSuspended)
			}
			require.Equal(t, want, eventTypes(evs), "the settlement is the pop itself")
			assert.Equal(t, childSpend, evs[0].(*frames.FramePopped).ChargedCost.SpendMicros)
			r := w.s.Reservations["res"]
			assert.True(t, r.Returned)
			assert.True(t, r.Final)
			assert.Equal(t, "settled", r.Why)
			assert.Equal(t, childSpend, r.Settled)
			assert.Zero(t, r.Held())
			p := w.s.Frame("r")
			assert.Equal(t, tc.wantActual, p.Cost.SpendMicros, "the parent's actual grows by the child's spend")
			assert.Zero(t, p.Outstanding, "the unused part is returned")
			assert.Equal(t, tc.wantAvail, w.available("r"))
			row := w.row("r")
			assert.Equal(t, tc.wantActual, row.Actual)
			assert.Zero(t, row.Outstanding)
			if tc.parentOver {
				require.Equal(t, frames.StatusSuspended, p.Status)
				assert.Equal(t, &budget.Violation{Code: budget.SpendExceeded, Current: tc.wantActual, Max: 100}, p.Suspension.Limit)
			}
			assert.Equal(t, w.s.Clone(), w.replay())
		})
	}
}

// A same-scope reservation binds one child of its own frame while it is
// open; the frame's reservations that never bound return when it pops, and
// a cascade settles the bound ones with the children it cancels.
func TestSameScopeReservationBinding(t *testing.T) {
	w := newWorld(t)
	w.limitedRoot("r", 100)
	w.limitedRoot("other", 100)
	w.reserve("r", "a", "", 30)
	w.reserve("r", "b", "", 30)
	w.reserve("r", "x", "elsewhere", 10)
	w.reserve("r", "unused", "", 10)
	w.pushWith("c", "r", w.claims("a"), 0)

	for _, tc := range []struct {
		name string
		cmd  frames.Command
		err  error
	}{
		{"bound twice", w.pushWithCmd("c2", "r", w.claims("a"), 0), frames.ErrReservationBound},
		{"a child of another frame", w.pushWithCmd("c2", "other", w.claims("b"), 0), frames.ErrReservationForeign},
		{"a root", w.pushWithCmd("c2", "", w.claims("b"), 0), frames.ErrReservationForeign},
		{"a reservation for another scope", w.pushWithCmd("c2", "r", w.claims("x"), 0), frames.ErrReservationForeign},
		{"an unknown reservation", w.pushWithCmd("c2", "r", &frames.ReservationClaims{Scope: w.s.Scope, Frame: "r", ID: "nope", For: w.s.Scope}, 0),
			frames.ErrReservationUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) { w.refused(tc.cmd, tc.err) })
	}

	w.pushWith("c2", "r", w.claims("b"), 0)
	w.spend("c", 5)
	w.spend("c2", 7)
	evs := w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "r", Status: frames.StatusCancelled, Cascade: true, Mint: w.mint()})
	require.Len(t, evs, 3)
	for _, id := range []string{"a", "b"} {
		r := w.s.Reservations[id]
		assert.True(t, r.Returned && r.Final, id)
		assert.Equal(t, "settled", r.Why, id)
	}
	assert.Equal(t, int64(5), w.s.Reservations["a"].Settled)
	assert.Equal(t, int64(7), w.s.Reservations["b"].Settled)
	assert.Equal(t, "unused", w.s.Reservations["unused"].Why, "never bound: returned at its frame's pop")
	assert.False(t, w.s.Reservations["x"].Returned, "one for another scope stays open: its work may still report")
	final := evs[2].(*frames.FramePopped).Final
	assert.Equal(t, int64(12), final.Cost.SpendMicros)
	assert.Equal(t, w.s.Clone(), w.replay())
}

// A bound child that continues hands its reservation to the continuation,
// whose pop settles it.
func TestContinuedChildKeepsItsReservation(t *testing.T) {
	w := newWorld(t)
	w.must(&frames.PushFrame{Header: w.hdr(), FrameID: "r", Goal: "g", Budget: budget.TokenBudget{Total: 10_000},
		Limits: budget.Limits{SpendMicros: 100}, ContextWindow: 1_000})
	w.reserve("r", "res", "", 60)
	w.pushWith("c", "r", w.claims("res"), 0)
	w.spend("c", 20)
	for i := 0; i < 8; i++ {
		w.add("c", fmt.Sprintf("u%d", i), frames.RoleUser, compaction.Medium, 40)
		w.add("c", fmt.Sprintf("a%d", i), frames.RoleAssistant, compaction.Medium, 40)
	}
	w.must(&frames.ContinueFrame{Header: w.hdr(), FrameID: "c", ResumeCeiling: 200, With: w.with("c2")})
	c2 := w.s.Frame("c2")
	require.NotNil(t, c2)
	assert.Equal(t, "res", c2.Reservation)
	assert.Equal(t, int64(60), c2.Limits.SpendMicros)
	assert.Equal(t, "c2", w.s.Reservations["res"].Child)
	w.refused(&frames.ReleaseReservation{Header: w.hdr(), ReservationID: "res"}, frames.ErrReservationBound)
	w.spend("c2", 5)
	w.popFrame("c2")
	r := w.s.Reservations["res"]
	assert.True(t, r.Returned && r.Final)
	assert.Equal(t, int64(25), r.Settled)
	assert.Equal(t, int64(25), w.s.Frame("r").Cost.SpendMicros)
	assert.Zero(t, w.s.Frame("r").Outstanding)
	assert.Equal(t, w.s.Clone(), w.replay())
}

// crossScope is a reserving scope ("agent-1", world p) with a limited root
// "top" that reserved "res" (300) for scope "other" (world o), whose root
// "work" is pushed with its claims.
func crossScope(t *testing.T, max int64) (p, o *world) {
	p = newWorld(t)
	p.limitedRoot("top", max)
	p.reserve("top", "res", "other", 300)
	o = otherWorld(t, p, "other")
	o.pushWith("work", "", p.claims("res"), 0)
	return p, o
}

// settle is the SettleSpend the other scope's outbox sends for work.
func (w *world) settle(cl *frames.ReservationClaims, from, frame string, spent, previous int64, final bool) *frames.SettleSpend {
	return &frames.SettleSpend{Header: w.hdr(), Claims: *cl, From: from, FrameID: frame, Spent: spent, Previous: previous, Final: final, Mint: w.mint()}
}

// A root in another scope is bound to the reservation by its push (the
// binding is that scope's outbox entry): its spend limit is the ceiling;
// the claims must be for this scope, unexpired, and bind one root.
func TestCrossScopeBinding(t *testing.T) {
	p, o := crossScope(t, 1000)
	cl := p.claims("res")
	f := o.s.Frame("work")
	assert.Equal(t, int64(300), f.Limits.SpendMicros, "the reservation's ceiling is its spend limit")
	assert.Equal(t, "res", f.Reservation)
	b := o.s.Bindings["res"]
	require.NotNil(t, b)
	assert.Equal(t, frames.Binding{Reservation: "res", Scope: "agent-1", Frame: "top", Token: "token-of-res", Root: "work",
		Amount: 300, Ceiling: 300, ExpiresAt: cl.ExpiresAt, At: b.At}, *b)
	assert.False(t, b.Pending(), "nothing to settle while the root is live")
	assert.Equal(t, int64(300), o.row("work").Reserved)

	o.limitedRoot("live", 0)
	expired := *cl
	expired.ID, expired.ExpiresAt = "res-2", o.now // the next request is past it
	foreign := *cl
	foreign.ID, foreign.For = "res-3", "third"
	for _, tc := range []struct {
		name string
		cmd  frames.Command
		err  error
	}{
		{"bound twice", o.pushWithCmd("again", "", cl, 0), frames.ErrReservationBound},
		{"a child", o.pushWithCmd("again", "live", &frames.ReservationClaims{Scope: "agent-1", Frame: "top", ID: "res-4", For: "other", Amount: 1, Ceiling: 1, ExpiresAt: o.now + testLease}, 0),
			frames.ErrInvalidArgument},
		{"expired claims", o.pushWithCmd("again", "", &expired, 0), frames.ErrReservationClosed},
		{"claims for a third scope", o.pushWithCmd("again", "", &foreign, 0), frames.ErrReservationForeign},
		{"claims with a bad id", o.pushWithCmd("again", "", &frames.ReservationClaims{Scope: "agent-1", Frame: "top", ID: "a b", For: "other", ExpiresAt: o.now + testLease}, 0),
			frames.ErrInvalidID},
	} {
		t.Run(tc.name, func(t *testing.T) { o.refused(tc.cmd, tc.err) })
	}

	// Its pop records its final spend: the outbox entry.
	o.spend("work", 120)
	o.popFrame("work")
	b = o.s.Bindings["res"]
	assert.True(t, b.Final)
	assert.Equal(t, int64(120), b.Reported)
	assert.True(t, b.Pending())
	pending := o.s.PendingSettlements()
	require.Len(t, pending, 1)
	assert.Equal(t, *b, pending[0])
	assert.Equal(t, frames.PendingSettlement, o.s.Pending()[0].Kind)

	// The reserving scope charges it once.
	p.now = o.now
	evs := p.must(p.settle(cl, "other", "work", 120, 0, true))
	require.Len(t, evs, 1)
	st := evs[0].(*frames.SpendSettled)
	assert.Equal(t, int64(120), st.Charged)
	assert.Equal(t, "top", st.ChargedTo)
	assert.Equal(t, "top", st.Frame)
	assert.Equal(t, "top", st.Owner)
	assert.Equal(t, "work", st.Bound)
	assert.Nil(t, st.Claims)
	r := p.s.Reservations["res"]
	assert.True(t, r.Returned && r.Final)
	assert.Equal(t, "settled", r.Why)
	assert.Equal(t, "work", r.Child)
	top := p.s.Frame("top")
	assert.Equal(t, int64(120), top.Cost.SpendMicros)
	assert.Zero(t, top.Outstanding, "the unused part is returned")
	evs = p.must(p.settle(cl, "other", "work", 120, 0, true))
	assert.Zero(t, evs[0].(*frames.SpendSettled).Charged, "a repeat charges nothing")
	assert.Equal(t, int64(120), top.Cost.SpendMicros)
	p.refused(p.settle(cl, "other", "someone-else", 120, 0, true), frames.ErrReservationBound)

	// The acknowledgement ends the outbox entry.
	for _, tc := range []struct {
		name string
		cmd  *frames.AckSettlement
		err  error
	}{
		{"past what was reported", &frames.AckSettlement{ReservationID: "res", Through: 121, Final: true}, frames.ErrInvalidArgument},
		{"negative", &frames.AckSettlement{ReservationID: "res", Through: -1}, frames.ErrInvalidArgument},
		{"unknown", &frames.AckSettlement{ReservationID: "nope", Through: 1}, frames.ErrReservationUnknown},
		{"a bad id", &frames.AckSettlement{ReservationID: "", Through: 1}, frames.ErrInvalidID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cmd.Header = o.hdr()
			o.refused(tc.cmd, tc.err)
		})
	}
	evs = o.must(&frames.AckSettlement{Header: o.hdr(), ReservationID: "res", Through: 120, Final: true})
	assert.Equal(t, &frames.SpendDelivered{Meta: *evs[0].EventMeta(), ID: "res", Through: 120, Final: true}, evs[0])
	assert.Empty(t, evs[0].EventMeta().Frame, "the root finished: the scope's event")
	assert.False(t, o.s.Bindings["res"].Pending())
	assert.Empty(t, o.s.PendingSettlements())
	assert.Equal(t, p.s.Clone(), p.replay())
	assert.Equal(t, o.s.Clone(), o.replay())
}

// A live root's acknowledgement cannot be final.
func TestAckSettlementOfALiveRootIsNotFinal(t *testing.T) {
	_, o := crossScope(t, 1000)
	o.refused(&frames.AckSettlement{Header: o.hdr(), ReservationID: "res", Through: 0, Final: true}, frames.ErrInvalidArgument)
	o.must(&frames.AckSettlement{Header: o.hdr(), ReservationID: "res", Through: 0})
}

// Settlements carry the cumulative spend: each charges only its increase
// over what was settled before (a repeat, or an older one arriving late,
// charges 0), and Previous counts only for a reservation the scope no
// longer keeps.
func TestSettlementsAreCumulative(t *testing.T) {
	p, _ := crossScope(t, 1000)
	cl := p.claims("res")
	for _, tc := range []struct {
		spent, previous int64
		final           bool
		charged         int64
		settled         int64
		held            int64
	}{
		{50, 0, false, 50, 50, 250},
		{50, 0, false, 0, 50, 250},
		{120, 0, false, 70, 120, 180},
		{100, 0, false, 0, 120, 180},    // older, arriving late
		{200, 150, false, 80, 200, 100}, // Previous is no matter while the reservation is kept
		{350, 0, false, 150, 350, 0},    // past the amount: charged all the same, holds nothing
		{350, 0, true, 0, 350, 0},       // final
		{400, 0, true, 50, 400, 0},      // late spend after the final one is still charged
	} {
		t.Run(fmt.Sprintf("spent %d previous %d final %v", tc.spent, tc.previous, tc.final), func(t *testing.T) {
			before := p.s.Frame("top").Cost.SpendMicros
			evs := p.must(p.settle(cl, "other", "work", tc.spent, tc.previous, tc.final))
			st := evs[0].(*frames.SpendSettled)
			assert.Equal(t, tc.charged, st.Charged)
			assert.Zero(t, st.Previous, "only a recreated record carries Previous")
			r := p.s.Reservations["res"]
			assert.Equal(t, tc.settled, r.Settled)
			assert.Equal(t, tc.held, r.Held())
			assert.Equal(t, tc.held, p.s.Frame("top").Outstanding)
			assert.Equal(t, before+tc.charged, p.s.Frame("top").Cost.SpendMicros)
		})
	}
	assert.Equal(t, int64(400), p.s.Frame("top").Cost.SpendMicros, "exactly the work's spend, once")
	assert.Equal(t, p.s.Clone(), p.replay())
}

// Where a settlement's charge goes: the owner while it is live, else its
// nearest live ancestor (by the reservation's Path), else the outbox of the
// tree root's own binding to a reservation further up, else nowhere.
func TestSettlementChargeTarget(t *testing.T) {
	for _, tc := range []struct {
		name      string
		popMid    bool // the owner finished
		popTop    bool // its whole tree finished
		bound     bool // the tree's root is bound to scope "grand"'s reservation
		chargedTo string
		routed    string
	}{
		{name: "the owner while it is live", chargedTo: "mid"},
		{name: "the owner's nearest live ancestor", popMid: true, chargedTo: "top"},
		{name: "the nearest live ancestor of a bound tree", popMid: true, bound: true, chargedTo: "top"},
		{name: "the root's binding once the tree finished", popMid: true, popTop: true, bound: true, routed: "up"},
		{name: "nowhere when the tree finished unbound", popMid: true, popTop: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newWorld(t)
			if tc.bound {
				g := otherWorld(t, p, "grand")
				g.limitedRoot("g", 10_000)
				g.reserve("g", "up", "agent-1", 1_000)
				p.pushWith("top", "", g.claims("up"), 0)
			} else {
				p.limitedRoot("top", 1_000)
			}
			p.must(&frames.PushFrame{Header: p.hdr(), FrameID: "mid", ParentID: "top", Goal: "g", Budget: budget.TokenBudget{Total: 10}})
			r := p.reserve("mid", "res", "other", 300)
			assert.Equal(t, []string{"top"}, r.Path)
			p.spend("top", 5)
			if tc.popMid {
				p.popFrame("mid")
				assert.False(t, p.s.Reservations["res"].Returned, "a reservation for another scope outlives its owner")
			}
			if tc.popTop {
				p.popFrame("top")
			}
			cl := frames.ClaimsOf("agent-1", p.s.Reservations["res"])
			evs := p.must(p.settle(&cl, "other", "work", 40, 0, true))
			require.Len(t, evs, 1)
			st := evs[0].(*frames.SpendSettled)
			assert.Equal(t, int64(40), st.Charged)
			assert.Equal(t, tc.chargedTo, st.ChargedTo)
			assert.Equal(t, tc.routed, st.Routed)
			assert.Equal(t, "mid", st.Owner)
			if tc.popMid {
				assert.Empty(t, st.Frame, "the owner finished: the scope's event")
				assert.Equal(t, int64(40), p.s.Reservations["res"].Late, "charged after its owner finished")
			} else {
				assert.Equal(t, "mid", st.Frame)
				assert.Zero(t, p.s.Reservations["res"].Late)
			}
			switch {
			case tc.chargedTo == "mid":
				assert.Equal(t, int64(40), p.s.Frame("mid").Cost.SpendMicros)
			case tc.chargedTo == "top":
				assert.Equal(t, int64(45), p.s.Frame("top").Cost.SpendMicros)
			case tc.routed != "":
				b := p.s.Bindings["up"]
				assert.Equal(t, int64(45), b.Reported, "the root's final spend and the late charge, to deliver further up")
				assert.True(t, b.Pending())
			}
			assert.Equal(t, p.s.Clone(), p.replay())
		})
	}
}

// Spend reported after its reservation expired, was released, or settled
// is still charged.
func TestLateSettlementIsCharged(t *testing.T) {
	for _, tc := range []struct {
		name  string
		close func(p *world)
		why   string
	}{
		{"after its lease ran out", func(p *world) {
			p.now += 2 * testLease
			p.reserve("top", "next", "", 10) // writes it returned
		}, "expired"},
		{"after its lease ran out, not yet written returned", func(p *world) { p.now += 2 * testLease }, ""},
		{"after it was released", func(p *world) {
			p.must(&frames.ReleaseReservation{Header: p.hdr(), ReservationID: "res"})
		}, "released"},
		{"after the final settlement", func(p *world) {
			p.must(p.settle(p.claims("res"), "other", "work", 100, 0, true))
		}, "settled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := crossScope(t, 1000)
			cl := p.claims("res")
			tc.close(p)
			before := p.s.Frame("top").Cost.SpendMicros
			settled := p.s.Reservations["res"].Settled
			evs := p.must(p.settle(cl, "other", "work", 250, 0, true))
			st := evs[0].(*frames.SpendSettled)
			assert.Equal(t, 250-settled, st.Charged)
			assert.Equal(t, "top", st.ChargedTo)
			assert.Equal(t, before+250-settled, p.s.Frame("top").Cost.SpendMicros)
			r := p.s.Reservations["res"]
			assert.True(t, r.Returned)
			if tc.why != "" {
				assert.Equal(t, tc.why, r.Why, "the reason it closed stays")
			}
			assert.Zero(t, r.Held())
			assert.Equal(t, p.s.Clone(), p.replay())
		})
	}
}

// A settlement that takes its frame past its spend limit suspends it
// (spend_exceeded), once; without a token to mint it is refused whole.
func TestSettlementPastTheLimitSuspends(t *testing.T) {
	p, _ := crossScope(t, 300)
	cl := p.claims("res")
	c := p.settle(cl, "other", "work", 350, 0, true)
	c.Mint = frames.Mint{}
	p.refused(c, frames.ErrInvalidID)

	evs := p.must(p.settle(cl, "other", "work", 350, 0, true))
	require.Equal(t, []string{frames.TypeSpendSettled, frames.TypeFrameSuspended}, eventTypes(evs))
	top := p.s.Frame("top")
	require.Equal(t, frames.StatusSuspended, top.Status)
	assert.Equal(t, frames.SuspendLimit, top.Suspension.Reason)
	assert.Equal(t, &budget.Violation{Code: budget.SpendExceeded, Current: 350, Max: 300}, top.Suspension.Limit)
	evs = p.must(p.settle(cl, "other", "work", 360, 0, true))
	assert.Equal(t, []string{frames.TypeSpendSettled}, eventTypes(evs), "already suspended")
	assert.Equal(t, int64(360), top.Cost.SpendMicros)

	// Within the limit: no suspension.
	p2, _ := crossScope(t, 1000)
	evs = p2.must(p2.settle(p2.claims("res"), "other", "work", 350, 0, true))
	assert.Equal(t, []string{frames.TypeSpendSettled}, eventTypes(evs))
}

// A settlement for a reservation the scope no longer keeps (forgotten
// LedgerKeep after its grant) is recorded anew from its claims and charges
// its cumulative spend less what its sender knows was acknowledged
// (Previous): still once.
func TestSettlementOfAForgottenReservation(t *testing.T) {
	p, _ := crossScope(t, 1000)
	cl := p.claims("res")
	p.must(p.settle(cl, "other", "work", 120, 0, true))
	granted := p.s.Reservations["res"].At
	p.now = granted + frames.LedgerKeep
	p.reserve("top", "tick", "", 1) // a ledger event prunes
	require.Nil(t, p.s.Reservations["res"], "forgotten LedgerKeep after its grant")

	// A late charge routed to the work's binding after its acknowledged 120.
	evs := p.must(p.settle(cl, "other", "work", 150, 120, true))
	require.Len(t, evs, 1)
	st := evs[0].(*frames.SpendSettled)
	assert.Equal(t, int64(30), st.Charged, "Spent − Previous")
	assert.Equal(t, "top", st.ChargedTo)
	require.NotNil(t, st.Claims)
	assert.Equal(t, *cl, *st.Claims)
	assert.Equal(t, int64(120), st.Previous)
	r := p.s.Reservations["res"]
	require.NotNil(t, r, "recorded anew")
	assert.Equal(t, frames.Reservation{ID: "res", Frame: "top", For: "other", Amount: 300, Ceiling: 300, At: st.At, ExpiresAt: cl.ExpiresAt,
		Child: "work", Settled: 150, Returned: true, Why: "settled", Final: true}, *r)
	assert.Equal(t, int64(150), p.s.Frame("top").Cost.SpendMicros)
	assert.Equal(t, int64(1), p.s.Frame("top").Outstanding, "tick alone: the recreated record holds nothing")

	evs = p.must(p.settle(cl, "other", "work", 150, 120, true))
	assert.Zero(t, evs[0].(*frames.SpendSettled).Charged, "a repeat charges nothing")
	assert.Nil(t, evs[0].(*frames.SpendSettled).Claims, "the scope keeps it again")

	// One never granted here (a destroyed scope's) charges the same way.
	ghost := frames.ReservationClaims{Scope: "agent-1", Frame: "top", ID: "ghost", For: "other", Amount: 10, Ceiling: 10, ExpiresAt: 1}
	evs = p.must(p.settle(&ghost, "other", "w2", 25, 5, true))
	assert.Equal(t, int64(20), evs[0].(*frames.SpendSettled).Charged)
	assert.Equal(t, int64(170), p.s.Frame("top").Cost.SpendMicros)
	assert.Equal(t, p.s.Clone(), p.replay())
}

// A late charge for a reservation the scope forgot, whose reserving frame
// finished, goes on to that frame's nearest live ancestor: the claims (the
// token) name the ancestors, since the scope no longer does.
func TestForgottenReservationOfAFinishedFrame(t *testing.T) {
	p := newWorld(t)
	p.limitedRoot("top", 1000)
	p.must(&frames.PushFrame{Header: p.hdr(), FrameID: "mid", ParentID: "top", Goal: "mid", Budget: budget.TokenBudget{Total: 100}})
	p.reserve("mid", "res", "other", 300)
	cl := p.claims("res")
	assert.Equal(t, []string{"top"}, cl.Path, "the token names the ancestors")
	o := otherWorld(t, p, "other")
	o.pushWith("work", "", cl, 0)
	p.must(p.settle(cl, "other", "work", 100, 0, true))
	p.popFrame("mid")
	assert.Equal(t, int64(100), p.s.Frame("top").Cost.SpendMicros, "mid's spend rolled up at its pop")
	p.now = p.s.Reservations["res"].At + frames.LedgerKeep
	p.reserve("top", "tick", "", 1) // a ledger event prunes
	require.Nil(t, p.s.Reservations["res"], "forgotten")

	evs := p.must(p.settle(cl, "other", "work", 150, 100, true))
	st := evs[0].(*frames.SpendSettled)
	assert.Equal(t, int64(50), st.Charged)
	assert.Equal(t, "top", st.ChargedTo, "mid finished: its nearest live ancestor")
	assert.Equal(t, int64(150), p.s.Frame("top").Cost.SpendMicros)
	assert.Equal(t, []string{"top"}, p.s.Reservations["res"].Path, "recorded anew with its ancestors")
	assert.Equal(t, p.s.Clone(), p.replay())
}

// Hostile amounts and claims: each is a clear error, decides no events and
// changes nothing.
func TestLedgerRefusesHostileInput(t *testing.T) {
	p, _ := crossScope(t, 1000)
	p.limitedRoot("free", 0)
	p.reserve("free", "huge", "", math.MaxInt64)
	p.limitedRoot("susp", 100)
	p.must(&frames.SuspendFrame{Header: p.hdr(), FrameID: "susp", Reason: frames.SuspendApproval, Mint: p.mint()})
	p.limitedRoot("done", 100)
	p.popFrame("done")
	p.reserve("top", "here", "", 10)
	cl := *p.claims("res")

	est := func(frame string, n int64, partial bool) frames.Command {
		c := p.reserveCmd(frame, "new", n)
		c.Partial = partial
		return c
	}
	reserve := func(edit func(c *frames.ReserveSpend)) frames.Command {
		c := p.reserveCmd("top", "new", 10)
		edit(c)
		return c
	}
	settle := func(edit func(c *frames.SettleSpend)) frames.Command {
		c := p.settle(&cl, "other", "work", 100, 0, false)
		edit(c)
		return c
	}
	for _, tc := range []struct {
		name string
		cmd  frames.Command
		err  error
	}{
		{"a negative estimate", est("top", -1, false), budget.ErrNegativeAmount},
		{"the most negative estimate", est("top", math.MinInt64, true), budget.ErrNegativeAmount},
		{"an estimate of 0", est("top", 0, false), frames.ErrInvalidArgument},
		{"an estimate of 0, partial", est("top", 0, true), frames.ErrInvalidArgument},
		{"the largest estimate on a limited frame", est("top", math.MaxInt64, false), frames.ErrSpendUnavailable},
		{"an estimate that overflows outstanding", est("free", 1, false), budget.ErrOverflow},
		{"the largest estimate on top of the largest", est("free", math.MaxInt64, true), budget.ErrOverflow},
		{"an estimate on a suspended frame", est("susp", 10, false), frames.ErrFrameSuspended},
		{"an estimate on a finished frame", est("done", 10, false), frames.ErrFrameNotLive},
		{"an estimate on an unknown frame", est("ghost", 10, false), frames.ErrFrameNotFound},
		{"a negative lease", reserve(func(c *frames.ReserveSpend) { c.ExpiresAt = c.Now - 1 }), frames.ErrInvalidArgument},
		{"a lease past the largest", reserve(func(c *frames.ReserveSpend) { c.ExpiresAt = math.MaxInt64 }), frames.ErrInvalidArgument},
		{"a duplicate reservation id", reserve(func(c *frames.ReserveSpend) { c.ReservationID = "res" }), frames.ErrDuplicateID},
		{"an empty reservation id", reserve(func(c *frames.ReserveSpend) { c.ReservationID = "" }), frames.ErrInvalidID},
		{"a reservation id with a NUL", reserve(func(c *frames.ReserveSpend) { c.ReservationID = "a\x00b" }), frames.ErrInvalidID},
		{"a bad scope to reserve for", reserve(func(c *frames.ReserveSpend) { c.For = "no spaces" }), frames.ErrInvalidScope},
		{"a negative spend", settle(func(c *frames.SettleSpend) { c.Spent = -1 }), budget.ErrNegativeAmount},
		{"the most negative spend", settle(func(c *frames.SettleSpend) { c.Spent = math.MinInt64 }), budget.ErrNegativeAmount},
		{"a negative previous", settle(func(c *frames.SettleSpend) { c.Previous = -1 }), budget.ErrNegativeAmount},
		{"previous past spent", settle(func(c *frames.SettleSpend) { c.Previous = 101 }), frames.ErrInvalidArgument},
		{"previous past spent, both huge", settle(func(c *frames.SettleSpend) { c.Spent, c.Previous = math.MaxInt64-1, math.MaxInt64 }), frames.ErrInvalidArgument},
		{"claims of another scope", settle(func(c *frames.SettleSpend) { c.Claims.Scope = "third" }), frames.ErrReservationForeign},
		{"claims for another scope than the sender", settle(func(c *frames.SettleSpend) { c.From = "third" }), frames.ErrReservationForeign},
		{"claims for this scope", settle(func(c *frames.SettleSpend) { c.Claims.For, c.From = "agent-1", "agent-1" }), frames.ErrReservationForeign},
		{"claims naming another frame", settle(func(c *frames.SettleSpend) { c.Claims.Frame = "free" }), frames.ErrReservationForeign},
		{"claims for another scope than the reservation's", settle(func(c *frames.SettleSpend) { c.Claims.For, c.From = "third", "third" }),
			frames.ErrReservationForeign},
		{"a same-scope reservation settled as another scope's", settle(func(c *frames.SettleSpend) { c.Claims.ID = "here" }), frames.ErrReservationForeign},
		{"a sender that is no scope", settle(func(c *frames.SettleSpend) { c.Claims.For, c.From = "a b", "a b" }), frames.ErrInvalidScope},
		{"an empty frame", settle(func(c *frames.SettleSpend) { c.FrameID = "" }), frames.ErrInvalidID},
		{"an empty reservation id", settle(func(c *frames.SettleSpend) { c.Claims.ID = "" }), frames.ErrInvalidID},
		{"a push with claims of another frame's reservation here", p.pushWithCmd("c", "free", p.claims("here"), 0), frames.ErrReservationForeign},
		{"a push with claims for another scope", p.pushWithCmd("c", "", &cl, 0), frames.ErrReservationForeign},
	} {
		t.Run(tc.name, func(t *testing.T) { p.refused(tc.cmd, tc.err) })
	}

	// The largest spend is accepted: the books saturate, the frame is
	// suspended.
	evs := p.must(p.settle(&cl, "other", "work", math.MaxInt64, 0, true))
	require.Equal(t, []string{frames.TypeSpendSettled, frames.TypeFrameSuspended}, eventTypes(evs))
	assert.Equal(t, int64(math.MaxInt64), p.s.Frame("top").Cost.SpendMicros)
	evs = p.must(p.settle(&cl, "other", "work", math.MaxInt64, 0, true))
	assert.Zero(t, evs[0].(*frames.SpendSettled).Charged)
	assert.Equal(t, p.s.Clone(), p.replay())
}

// pruneLedger: a scope keeps its open reservations whatever their age, of
// the returned ones at most KeepReturned + KeepReturned/4 (then the newest
// KeepReturned), none LedgerKeep after its grant;
// and its bindings until delivered, their root gone, LedgerKeep after.
func TestPruneLedger(t *testing.T) {
	t.Run("KeepReturned", func(t *testing.T) {
		w := newWorld(t)
		w.limitedRoot("s", 0)
		w.reserve("s", "old-open", "", 1)
		w.limitedRoot("r", 0)
		const over = frames.KeepReturned + frames.KeepReturned/4 + 1 // past the slack
		for i := 0; i < over; i++ {
			// As w.must, without its check that Decide changes nothing (two
			// clones of a thousand reservations a step).
			evs, err := frames.Decide(w.cfg, w.s, w.reserveCmd("r", fmt.Sprintf("n%04d", i), 1))
			require.NoError(t, err)
			for _, e := range evs {
				require.NoError(t, frames.Apply(w.s, e))
				require.NoError(t, frames.CheckInvariants(w.s))
				w.hist.Add(w.s.Version, e)
			}
			w.log = append(w.log, evs...)
		}
		w.popFrame("r") // returns all of them, unused
		require.Len(t, w.s.Reservations, over+1, "a pop prunes nothing")
		w.reserve("s", "last", "", 1) // prunes, down to KeepReturned
		assert.Len(t, w.s.Reservations, frames.KeepReturned+2, "the returned ones and the two open")
		gone := fmt.Sprintf("n%04d", over-frames.KeepReturned-1)
		assert.Nil(t, w.s.Reservations["n0000"], "the oldest returned are forgotten")
		assert.Nil(t, w.s.Reservations[gone])
		assert.NotNil(t, w.s.Reservations[fmt.Sprintf("n%04d", over-frames.KeepReturned)], "the newest KeepReturned are kept")
		assert.NotNil(t, w.s.Reservations["old-open"], "open reservations are never forgotten")
		assert.Equal(t, w.s.Clone(), w.replay())
	})

	t.Run("LedgerKeep", func(t *testing.T) {
		w := newWorld(t)
		w.limitedRoot("r", 0)
		w.limitedRoot("s", 0)
		c := w.reserveCmd("s", "open", 1)
		c.ExpiresAt = c.Now + frames.MaxReservationAge
		w.must(c)
		a := w.reserve("r", "a", "", 1)
		w.must(&frames.ReleaseReservation{Header: w.hdr(), ReservationID: "a"})

		w.now = a.At + frames.LedgerKeep - 10 // the next request is LedgerKeep after a's grant
		w.reserve("r", "b", "", 1)
		assert.NotNil(t, w.s.Reservations["a"], "kept LedgerKeep after its grant")
		w.must(&frames.ReleaseReservation{Header: w.hdr(), ReservationID: "b"})
		assert.Nil(t, w.s.Reservations["a"], "forgotten past it")
		assert.NotNil(t, w.s.Reservations["b"])
		open := w.s.Reservations["open"]
		require.NotNil(t, open, "an open reservation is kept past LedgerKeep (its lease ran out long ago)")
		assert.True(t, open.Expired("s", w.now))

		evs := w.must(w.reserveCmd("s", "c", 1))
		require.Equal(t, []string{frames.TypeSpendReturned, frames.TypeSpendReserved}, eventTypes(evs))
		assert.Nil(t, w.s.Reservations["open"], "returned at last, and forgotten in the same append")
		assert.Equal(t, int64(1), w.s.Frame("s").Outstanding)
		assert.Equal(t, w.s.Clone(), w.replay())
	})

	t.Run("bindings", func(t *testing.T) {
		p := newWorld(t)
		p.limitedRoot("top", 0)
		for _, id := range []string{"r1", "r2", "r3"} {
			p.reserve("top", id, "other", 10)
		}
		o := otherWorld(t, p, "other")
		for i, id := range []string{"r1", "r2", "r3"} {
			o.pushWith(fmt.Sprintf("w%d", i+1), "", p.claims(id), 0)
		}
		o.spend("w1", 4)
		o.popFrame("w1")
		o.popFrame("w2")
		o.must(&frames.AckSettlement{Header: o.hdr(), ReservationID: "r1", Through: 4, Final: true})
		bound := o.s.Bindings["r1"].At

		o.limitedRoot("x", 0)
		o.now = bound + frames.LedgerKeep - 10
		o.reserve("x", "t1", "", 1) // prunes at LedgerKeep after r1's binding
		assert.Len(t, o.s.Bindings, 3, "kept LedgerKeep after")
		o.reserve("x", "t2", "", 1)
		assert.Nil(t, o.s.Bindings["r1"], "delivered, its root gone: forgotten past LedgerKeep")
		assert.True(t, o.s.Bindings["r2"].Pending(), "a pending settlement is never forgotten")
		assert.NotNil(t, o.s.Bindings["r3"], "nor the binding of a live root")
		o.must(&frames.AckSettlement{Header: o.hdr(), ReservationID: "r2", Through: 0, Final: true})
		assert.Nil(t, o.s.Bindings["r2"], "delivered: forgotten in the same append")
		o.popFrame("w3")
		o.reserve("x", "t3", "", 1)
		assert.True(t, o.s.Bindings["r3"].Pending(), "finished long after its binding: kept until delivered")
		assert.Equal(t, o.s.Clone(), o.replay())
	})
}
