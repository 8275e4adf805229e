package upgrade

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// Checks of a fixture's spend ledger (v6 on: Manifest.Ledger).

// outboxAsWritten checks the store's outbox table before anything serves
// the copy: it lists the scopes the manifest says (those of the pending
// settlements), and nothing in a fixture before the ledger.
func (u *upgraded) outboxAsWritten(t *testing.T) {
	rows, err := outboxScopes(context.Background(), u.store)
	require.NoError(t, err)
	var want []string
	if u.m.Ledger != nil {
		want = u.m.Ledger.OutboxScopes
	}
	require.Equal(t, want, rows, "the outbox table as the fixture was written")
}

// awaitPending waits for the delivery of every settlement the fixture
// left pending without asking the outbox to deliver anything: its
// acknowledgement (spend.delivered in the work's scope) is read with a
// long poll past the fixture's last position, so the server's outbox found
// it by itself, through the outbox table, when it started. Then the outbox
// is drained: the delivery's last sweep (which removes the scope's row)
// runs after the acknowledgement.
func (u *upgraded) awaitPending(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a bound on a broken test, not a wait
	defer cancel()
	if l := u.m.Ledger; l != nil {
		for _, p := range l.Pending {
			req := &messages.ReadEvents{Filter: &messages.EventFilter{Scope: p.Scope, Kinds: []string{frames.TypeSpendDelivered}},
				From: u.m.LastSeq + 1, Wait: 20 * time.Second}
			for {
				r, err := u.c.ReadEvents(ctx, "", req)
				require.NoError(t, err, "waiting for the delivery of %s's settlement", p.Scope)
				if len(r.Events) > 0 {
					ev, err := r.Events[0].Decode()
					require.NoError(t, err)
					d, ok := ev.(*frames.SpendDelivered)
					require.True(t, ok, "%T", ev)
					assert.Equal(t, p.Reservation, d.ID)
					assert.Equal(t, p.Reported, d.Through)
					assert.True(t, d.Final)
					break
				}
				req.From = r.Next
			}
		}
	}
	require.NoError(t, u.srv.DrainOutbox(ctx))
}

// pendingWork is the pending work ResumeActor lists for sc once the
// settlements the fixture left pending are delivered (awaitPending): what
// the manifest recorded, less those settlements.
func (u *upgraded) pendingWork(sc ScopeFacts) []Pending {
	if u.m.Ledger == nil {
		return sc.Pending
	}
	var out []Pending
	for _, p := range sc.Pending {
		delivered := false
		for _, s := range u.m.Ledger.Pending {
			delivered = delivered || (s.Scope == sc.Scope && s.Root == p.FrameID && p.Kind == string(frames.PendingSettlement))
		}
		if !delivered {
			out = append(out, p)
		}
	}
	return out
}

// pendingSettled: each settlement the fixture left pending was delivered
// once — the outbox delivered as many as the manifest lists, its table is
// empty, and a drain more appends nothing; the reserving frame's row shows
// the actual spend and what is outstanding as the manifest expects, each
// of its reservations as the fixture left it (the pending one now
// settled); the work's binding is delivered in full; and GetLedger answers
// as the writing release answered once its own outbox had delivered them.
func (u *upgraded) pendingSettled(t *testing.T) {
	l := u.m.Ledger
	if l == nil || len(l.Pending) == 0 {
		t.Skip("the fixture leaves no settlement pending (before v6)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	assert.Equal(t, int64(len(l.Pending)), u.srv.OutboxStats().Delivered, "each pending settlement delivered once")
	rows, err := outboxScopes(ctx, u.store)
	require.NoError(t, err)
	assert.Empty(t, rows, "every binding delivered: the outbox table is empty")
	seq := u.lastSeq()
	require.NoError(t, u.srv.DrainOutbox(ctx))
	require.Equal(t, seq, u.lastSeq(), "nothing more to deliver")

	row := u.ledgerRow(t, l.Scope, l.Frame)
	assert.Equal(t, l.SpendLimit, row.Max)
	assert.Equal(t, l.Actual, row.Actual, "the pending settlement charged once")
	assert.Equal(t, l.Outstanding, row.Outstanding)
	assert.Zero(t, row.Late)
	held := map[string]frames.Reservation{}
	for _, r := range row.Reservations {
		held[r.ID] = r
	}
	for _, f := range l.Reservations {
		if f.Scope != l.Scope || f.Frame != l.Frame {
			continue
		}
		r, ok := held[f.ID]
		if !assert.True(t, ok, "reservation %s (%s) is on its frame's row", f.ID, f.Left) {
			continue
		}
		assert.Equal(t, f.For, r.For, f.ID)
		switch f.Left {
		case LeftOpen:
			assert.False(t, r.Returned, "open reservation %s", f.ID)
			assert.Empty(t, r.Child)
		case LeftPending:
			assert.True(t, r.Returned && r.Final, "reservation %s settled once delivered", f.ID)
			assert.Equal(t, LeftSettled, r.Why, f.ID)
			assert.Equal(t, f.Bound, r.Child, f.ID)
		default:
			assert.True(t, r.Returned, "reservation %s (%s)", f.ID, f.Left)
			assert.Equal(t, f.Left, r.Why, f.ID)
		}
	}
	for _, p := range l.Pending {
		r := held[p.Reservation]
		assert.Equal(t, p.Reported, r.Settled, "reservation %s settled with what %s reported", p.Reservation, p.Scope)
		lr, err := u.c.GetLedger(ctx, &messages.GetLedger{Header: messages.Header{Scope: p.Scope}})
		require.NoError(t, err)
		var found bool
		for _, b := range lr.Bindings {
			if b.Reservation != p.Reservation {
				continue
			}
			found = true
			assert.Equal(t, p.Root, b.Root)
			assert.Equal(t, p.Reported, b.Reported)
			assert.Equal(t, b.Reported, b.Delivered, "delivered in full")
			assert.True(t, b.Final && b.DeliveredFinal)
			assert.False(t, b.Pending())
		}
		assert.True(t, found, "%s's binding to %s", p.Scope, p.Reservation)
	}
	for i, r := range l.Delivered {
		req, err := BuildRead(r)
		require.NoError(t, err)
		reply, err := u.do(req)
		require.NoError(t, err, "delivered read %d: %s of %q on %s", i, r.Op, r.FrameID, r.Scope)
		got, err := ReadOf(r, reply)
		require.NoError(t, err)
		assert.Equal(t, r, got, "delivered read %d: %s of %q on %s", i, r.Op, r.FrameID, r.Scope)
	}
	require.Equal(t, seq, u.lastSeq(), "reads appended")
}

// openReservationBinds: the reservation the fixture left open binds a
// root frame in the scope it is for with the token the manifest recorded
// (the frame's spend limit its ceiling), once; the root spends, finishes,
// and the outbox delivers its settlement: the reserving frame is charged
// exactly that, and nothing is outstanding any more.
func (u *upgraded) openReservationBinds(t *testing.T) {
	l := u.m.Ledger
	if l == nil || l.Open == nil {
		t.Skip("the fixture has no open reservation (before v6)")
	}
	o := l.Open
	require.Less(t, u.clock.last(), o.ExpiresAt, "the test's clock (from the fixture's end) is within the reservation's lease")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := messages.Header{Scope: o.For}
	root, err := u.c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "work paid for by an old reservation",
		Budget: budget.TokenBudget{Total: 2_000}, Reservation: o.Token})
	require.NoError(t, err)
	got := u.ledgerRow(t, o.For, root.FrameID)
	assert.Equal(t, o.Ceiling, got.Max, "the reservation's ceiling is the root's spend limit")
	assert.Equal(t, o.ID, got.Reservation)
	_, err = u.c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "a second root with the same token",
		Budget: budget.TokenBudget{Total: 2_000}, Reservation: o.Token})
	require.ErrorIs(t, err, messages.ErrReservationBound)

	const spent = 100_000
	r, err := u.c.RecordUsage(ctx, &messages.RecordUsage{Header: h, FrameID: root.FrameID, Cost: budget.Cost{SpendMicros: spent, Turns: 1}})
	require.NoError(t, err)
	require.Nil(t, r.Suspension)
	_, err = u.c.PopFrame(ctx, &messages.PopFrame{Header: h, FrameID: root.FrameID, Status: frames.StatusCompleted})
	require.NoError(t, err)
	require.NoError(t, u.srv.DrainOutbox(ctx))

	row := u.ledgerRow(t, l.Scope, l.Frame)
	assert.Equal(t, l.Actual+spent, row.Actual, "exactly the root's spend")
	assert.Equal(t, l.Outstanding-o.Amount, row.Outstanding)
	for _, v := range row.Reservations {
		if v.ID == o.ID {
			assert.True(t, v.Returned && v.Final)
			assert.Equal(t, LeftSettled, v.Why)
			assert.Equal(t, int64(spent), v.Settled)
			assert.Equal(t, root.FrameID, v.Child)
		}
	}
	lr, err := u.c.GetLedger(ctx, &messages.GetLedger{Header: h})
	require.NoError(t, err)
	require.Len(t, lr.Bindings, 1)
	b := lr.Bindings[0]
	assert.Equal(t, o.ID, b.Reservation)
	assert.Equal(t, int64(spent), b.Delivered)
	assert.True(t, b.DeliveredFinal)
	assert.False(t, b.Pending())
}
