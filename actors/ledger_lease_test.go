package actors_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// returnedEvents lists the spend.returned events of scope.
func returnedEvents(t *testing.T, e *env, scope string) []*frames.SpendReturned {
	t.Helper()
	var out []*frames.SpendReturned
	require.NoError(t, e.store.ReadStream(ctx, scope, 1, func(r eventstore.Record) error {
		ev, err := eventstore.DecodeFrameEvent(r)
		if err != nil {
			return err
		}
		if s, ok := ev.(*frames.SpendReturned); ok {
			out = append(out, s)
		}
		return nil
	}))
	return out
}

// reservationIn finds reservation id among the ledger rows of scope.
func reservationIn(t *testing.T, c *actors.Client, scope, id string) frames.Reservation {
	t.Helper()
	r, err := c.GetLedger(ctx, &messages.GetLedger{Header: messages.Header{Scope: scope}})
	require.NoError(t, err)
	for _, row := range r.Frames {
		for _, rv := range row.Reservations {
			if rv.ID == id {
				return rv
			}
		}
	}
	t.Fatalf("scope %q keeps no reservation %q", scope, id)
	return frames.Reservation{}
}

// A reservation not settled by its lease returns what it held: at once
// for what may be granted and what the ledger shows, and in the log by the
// frame's next ledger decision, whose reply names it.
func TestLeaseExpiryReturnsWhatItHeld(t *testing.T) {
	e := newEnv(t)
	p := pushLimited(t, e.c, "s", "", 1000, "")
	short, err := e.c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut("s"), FrameID: p, Estimate: spend(300), LeaseMillis: 60_000})
	require.NoError(t, err)
	assert.Equal(t, e.clock.Now().UnixNano()+int64(time.Minute), short.ExpiresAt)
	long, err := e.c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut("s"), FrameID: p, Estimate: spend(200)})
	require.NoError(t, err)
	assert.Equal(t, e.clock.Now().UnixNano()+frames.DefaultLease, long.ExpiresAt, "the default lease")
	assert.Equal(t, int64(500), ledgerRow(t, e.c, "s", p).Outstanding)
	_, err = e.c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut("s"), FrameID: p, Estimate: spend(800)})
	require.ErrorIs(t, err, actors.ErrSpendUnavailable, "500 of 1000 held")

	e.clock.Advance(time.Minute) // the lease's last instant: still held
	assert.Equal(t, int64(500), ledgerRow(t, e.c, "s", p).Outstanding)
	e.clock.Advance(time.Nanosecond)
	assert.Equal(t, int64(200), ledgerRow(t, e.c, "s", p).Outstanding, "expired: no longer outstanding")
	assert.Empty(t, returnedEvents(t, e, "s"), "nothing written until the frame's next ledger decision")

	next, err := e.c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut("s"), FrameID: p, Estimate: spend(800)})
	require.NoError(t, err, "what the expired reservation held is available again")
	assert.Equal(t, []string{short.ReservationID}, next.Returned)
	ret := returnedEvents(t, e, "s")
	require.Len(t, ret, 1)
	assert.Equal(t, "expired", ret[0].Why)
	assert.Equal(t, []string{short.ReservationID}, ret[0].IDs)
	assert.Equal(t, int64(300), ret[0].Returned)
	rv := reservationIn(t, e.c, "s", short.ReservationID)
	assert.True(t, rv.Returned)
	assert.Equal(t, "expired", rv.Why)
	row := ledgerRow(t, e.c, "s", p)
	assert.Equal(t, int64(1000), row.Outstanding)
	assert.Zero(t, row.Actual)

	// An expired reservation is closed: no renewal, no push, no release.
	_, err = e.c.RenewReservation(ctx, &messages.RenewReservation{Header: mut("s"), Token: short.Token})
	require.ErrorIs(t, err, actors.ErrReservationClosed)
	_, err = e.c.PushFrame(ctx, &messages.PushFrame{Header: mut("s"), ParentID: p, Goal: "late", Budget: budget.TokenBudget{Total: 1}, Reservation: short.Token})
	require.ErrorIs(t, err, actors.ErrReservationClosed)
	_, err = e.c.ReleaseReservation(ctx, &messages.ReleaseReservation{Header: mut("s"), ReservationID: short.ReservationID})
	require.ErrorIs(t, err, actors.ErrReservationClosed)
	require.NoError(t, frames.CheckInvariants(mustLoad(t, e, "s")))
}

// RenewReservation, by token or by id, extends a live lease (and its new
// token says so), never past 7 days after the grant; once expired, it is
// refused, and so is a push with the expired token.
func TestLeaseRenewal(t *testing.T) {
	e := newEnv(t)
	p := pushLimited(t, e.c, "s", "", 1000, "")
	granted := e.clock.Now().UnixNano()
	res, err := e.c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut("s"), FrameID: p, For: "kid", Estimate: spend(300), LeaseMillis: 60_000})
	require.NoError(t, err)
	here, err := e.c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut("s"), FrameID: p, Estimate: spend(100), LeaseMillis: 60_000})
	require.NoError(t, err)

	e.clock.Advance(50 * time.Second)
	byToken, err := e.c.RenewReservation(ctx, &messages.RenewReservation{Header: mut("s"), Token: res.Token, LeaseMillis: 60_000})
	require.NoError(t, err)
	assert.Equal(t, res.ReservationID, byToken.ReservationID)
	assert.Equal(t, e.clock.Now().UnixNano()+int64(time.Minute), byToken.ExpiresAt)
	assert.NotEqual(t, res.Token, byToken.Token, "the new token says the new lease")

	e.clock.Advance(50 * time.Second) // past the first lease, within the renewed one
	renewed := reservationIn(t, e.c, "s", res.ReservationID)
	assert.Equal(t, int64(300), renewed.Held(), "renewed: still held")
	_, err = e.c.PushFrame(ctx, &messages.PushFrame{Header: mut("kid"), Goal: "work", Budget: budget.TokenBudget{Total: 1}, Reservation: res.Token})
	require.ErrorIs(t, err, actors.ErrReservationClosed, "the old token's lease ran out")
	_, err = e.c.PushFrame(ctx, &messages.PushFrame{Header: mut("s"), ParentID: p, Goal: "late", Budget: budget.TokenBudget{Total: 1}, Reservation: here.Token})
	require.ErrorIs(t, err, actors.ErrReservationClosed, "a reservation here whose lease ran out")
	byID, err := e.c.RenewReservation(ctx, &messages.RenewReservation{Header: mut("s"), ReservationID: res.ReservationID})
	require.NoError(t, err)
	assert.Equal(t, e.clock.Now().UnixNano()+frames.DefaultLease, byID.ExpiresAt, "no lease named: the default")
	kid := pushLimited(t, e.c, "kid", "", 0, byID.Token)
	assert.Equal(t, int64(300), ledgerRow(t, e.c, "kid", kid).Max, "the renewed token binds")

	// Renewals end 7 days after the grant.
	week, err := e.c.RenewReservation(ctx, &messages.RenewReservation{Header: mut("s"), Token: byID.Token, LeaseMillis: 8 * 24 * 3600 * 1000})
	require.NoError(t, err)
	assert.Equal(t, granted+frames.MaxReservationAge, week.ExpiresAt, "capped at 7 days after the grant")
	_, err = e.c.RenewReservation(ctx, &messages.RenewReservation{Header: mut("s"), ReservationID: res.ReservationID, LeaseMillis: 60_000})
	require.ErrorIs(t, err, actors.ErrInvalidArgument, "nothing left to extend: refused")
	e.clock.Advance(time.Duration(week.ExpiresAt - e.clock.Now().UnixNano()))
	_, err = e.c.RenewReservation(ctx, &messages.RenewReservation{Header: mut("s"), ReservationID: res.ReservationID})
	require.ErrorIs(t, err, actors.ErrInvalidArgument, "at its last instant it still cannot pass 7 days")
	e.clock.Advance(time.Nanosecond)
	_, err = e.c.RenewReservation(ctx, &messages.RenewReservation{Header: mut("s"), ReservationID: res.ReservationID})
	require.ErrorIs(t, err, actors.ErrReservationClosed, "expired")
	_, err = e.c.RenewReservation(ctx, &messages.RenewReservation{Header: mut("s"), Token: week.Token})
	require.ErrorIs(t, err, actors.ErrReservationClosed, "expired, by token")
	assert.Equal(t, int64(3), reservationIn(t, e.c, "s", res.ReservationID).Renewals, "three renewals; the refused ones wrote nothing")
}

// A lease ends what the scope cannot see: the reservation of a root in
// another scope expires, and spend that root reports after that is still
// charged, once. A reservation bound to a live child here never expires:
// the child may still spend what it holds, and its pop settles it.
func TestLeaseExpiredUsageIsStillCharged(t *testing.T) {
	e := newEnv(t)
	p := pushLimited(t, e.c, "s", "", 1000, "")
	here, err := e.c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut("s"), FrameID: p, Estimate: spend(300), LeaseMillis: 60_000})
	require.NoError(t, err)
	there, err := e.c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut("s"), FrameID: p, For: "kid", Estimate: spend(200), LeaseMillis: 60_000})
	require.NoError(t, err)
	child := pushLimited(t, e.c, "s", p, 0, here.Token)
	root := pushLimited(t, e.c, "kid", "", 0, there.Token)
	_, err = e.c.RecordUsage(ctx, &messages.RecordUsage{Header: mut("kid"), FrameID: root, Cost: budget.Cost{SpendMicros: 50}})
	require.NoError(t, err)

	e.clock.Advance(2 * time.Minute)
	assert.Equal(t, int64(300), ledgerRow(t, e.c, "s", p).Outstanding, "the other scope's lease ran out; the live child's reservation holds on")
	_, err = e.c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut("s"), FrameID: p, Estimate: spend(701)})
	require.ErrorIs(t, err, actors.ErrSpendUnavailable, "what the child here may spend is not granted again")
	next, err := e.c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut("s"), FrameID: p, Estimate: spend(700)})
	require.NoError(t, err, "what the other scope's reservation held is available again")
	assert.Equal(t, []string{there.ReservationID}, next.Returned)
	_, err = e.c.ReleaseReservation(ctx, &messages.ReleaseReservation{Header: mut("s"), ReservationID: next.ReservationID})
	require.NoError(t, err)

	// The work goes on: its spend is recorded and charged.
	u, err := e.c.RecordUsage(ctx, &messages.RecordUsage{Header: mut("s"), FrameID: child, Cost: budget.Cost{SpendMicros: 250}})
	require.NoError(t, err)
	assert.Nil(t, u.Suspension, "its ceiling is 300")
	_, err = e.c.RecordUsage(ctx, &messages.RecordUsage{Header: mut("kid"), FrameID: root, Cost: budget.Cost{SpendMicros: 70}})
	require.NoError(t, err)
	pop(t, e.c, "s", child)
	assert.Equal(t, int64(250), ledgerRow(t, e.c, "s", p).Actual)
	pop(t, e.c, "kid", root)
	drain(t, e.srv)
	row := ledgerRow(t, e.c, "s", p)
	assert.Equal(t, int64(370), row.Actual, "both charged, the other scope's after its lease ran out")
	assert.Zero(t, row.Outstanding)
	assert.Equal(t, []int64{120}, settledCharges(t, e, "s"), "the root's spend charged once")
	b := binding(t, e.c, "kid", there.ReservationID)
	assert.False(t, b.Pending())
	assert.Equal(t, int64(120), b.Delivered)
	rv := reservationIn(t, e.c, "s", there.ReservationID)
	assert.Equal(t, int64(120), rv.Settled)
	assert.Equal(t, "expired", rv.Why, "returned by its expiry; settled after")
	assert.True(t, rv.Final)

	// A repeat of the delivery charges nothing more.
	_, err = e.c.SettleSpend(ctx, signedSettle(&messages.SettleSpend{Header: mut("s"), Token: there.Token, From: "kid", FrameID: root, Spent: 120, Final: true}))
	require.NoError(t, err)
	assert.Equal(t, int64(370), ledgerRow(t, e.c, "s", p).Actual)
	require.NoError(t, frames.CheckInvariants(mustLoad(t, e, "s")))
}
