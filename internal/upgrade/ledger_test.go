package upgrade

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// ledgerScope is the fresh scope the reserving frame delegates work to.
const ledgerScope = "ledger-after-upgrade"

// ledgerWorks: the spend ledger (issue 14) works on a scope an older
// release wrote. A live frame of it (active, in no chain; a fresh root of
// the first scope when none is) is given a spend limit and reserves spend
// for a child here and for a root in a fresh scope; both are pushed with
// their tokens, record spend and pop; once the server's outbox has
// delivered the fresh scope's settlement, the frame's ledger row shows
// exactly the children's spend as actual (on top of what it had) and
// nothing outstanding. checkFixture's last step runs verify on the file
// afterwards.
func (u *upgraded) ledgerWorks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := u.c
	scope, frame := u.ledgerFrame(t)
	t.Logf("the ledger on %s frame %s", scope, frame)
	hdr := messages.Header{Scope: scope}

	got, err := c.GetFrame(ctx, &messages.GetFrame{Header: hdr, FrameID: frame})
	require.NoError(t, err)
	actual0 := got.Frame.Cost.SpendMicros
	require.Zero(t, got.Frame.Outstanding, "an old frame holds no reservation")
	limits := got.Frame.Limits
	limits.SpendMicros = actual0 + 1_000_000
	up, err := c.UpdateFrame(ctx, &messages.UpdateFrame{Header: hdr, FrameID: frame, Limits: &limits})
	require.NoError(t, err)
	require.Nil(t, up.Suspension)

	// A child here.
	est := int64(300_000)
	here, err := c.ReserveSpend(ctx, &messages.ReserveSpend{Header: hdr, FrameID: frame, Estimate: &est})
	require.NoError(t, err)
	assert.Equal(t, est, here.Amount)
	child, err := c.PushFrame(ctx, &messages.PushFrame{Header: hdr, ParentID: frame, Goal: "a child with a reservation",
		Reservation: here.Token})
	require.NoError(t, err)

	// A root in a fresh scope.
	est = 400_000
	away, err := c.ReserveSpend(ctx, &messages.ReserveSpend{Header: hdr, FrameID: frame, For: ledgerScope, Estimate: &est})
	require.NoError(t, err)
	other := messages.Header{Scope: ledgerScope}
	root, err := c.PushFrame(ctx, &messages.PushFrame{Header: other, Goal: "work for an old scope", Budget: budget.TokenBudget{Total: 1_000},
		Reservation: away.Token})
	require.NoError(t, err)

	row := u.ledgerRow(t, scope, frame)
	assert.Equal(t, limits.SpendMicros, row.Max)
	assert.Equal(t, int64(700_000), row.Outstanding)
	assert.Equal(t, actual0, row.Actual)
	assert.Equal(t, int64(300_000), u.ledgerRow(t, scope, child.FrameID).Max, "the reservation is the child's ceiling")
	assert.Equal(t, int64(400_000), u.ledgerRow(t, ledgerScope, root.FrameID).Max)

	for _, w := range []struct {
		h     messages.Header
		frame string
		spend int64
	}{{hdr, child.FrameID, 120_000}, {other, root.FrameID, 70_000}} {
		r, err := c.RecordUsage(ctx, &messages.RecordUsage{Header: w.h, FrameID: w.frame, Cost: budget.Cost{SpendMicros: w.spend, Turns: 1}})
		require.NoError(t, err)
		require.Nil(t, r.Suspension)
		_, err = c.PopFrame(ctx, &messages.PopFrame{Header: w.h, FrameID: w.frame, Status: frames.StatusCompleted})
		require.NoError(t, err)
	}
	require.NoError(t, u.srv.DrainOutbox(ctx))

	row = u.ledgerRow(t, scope, frame)
	assert.Equal(t, actual0+190_000, row.Actual, "exactly the children's spend")
	assert.Zero(t, row.Outstanding)
	assert.Zero(t, row.Late)
	assert.Equal(t, frames.StatusActive, row.Status)
	require.Len(t, row.Reservations, 2)
	for _, r := range row.Reservations {
		assert.True(t, r.Returned && r.Final, r.ID)
		assert.Equal(t, "settled", r.Why, r.ID)
	}
	l, err := c.GetLedger(ctx, &messages.GetLedger{Header: other})
	require.NoError(t, err)
	require.Len(t, l.Bindings, 1)
	b := l.Bindings[0]
	assert.Equal(t, away.ReservationID, b.Reservation)
	assert.Equal(t, int64(70_000), b.Delivered)
	assert.True(t, b.DeliveredFinal)
	assert.False(t, b.Pending())
}

// ledgerFrame picks the frame ledgerWorks reserves on: the first frame the
// manifest lists live that is active now, in no chain, and can take a
// child (its depth and every ancestor's spawn limit allow one); else a
// fresh root of the first scope.
func (u *upgraded) ledgerFrame(t *testing.T) (scope, frame string) {
	for _, sc := range u.m.Scopes {
		for _, lf := range sc.Live {
			if u.canDelegate(t, sc.Scope, lf.ID) {
				return sc.Scope, lf.ID
			}
		}
	}
	scope = u.m.Scopes[0].Scope
	r, err := u.c.PushFrame(context.Background(), &messages.PushFrame{Header: messages.Header{Scope: scope}, Goal: "a root for the ledger",
		Budget: budget.TokenBudget{Total: 1_000}})
	require.NoError(t, err)
	return scope, r.FrameID
}

func (u *upgraded) canDelegate(t *testing.T, scope, id string) bool {
	ctx := context.Background()
	got, err := u.c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: scope}, FrameID: id})
	if errors.Is(err, messages.ErrFrameNotFound) || errors.Is(err, messages.ErrFrameNotLive) {
		return false // continued or removed since the fixture was written
	}
	require.NoError(t, err, "%s %s", scope, id)
	f := got.Frame
	if f.Status != frames.StatusActive || got.ChainHead != "" || f.ChainRoot != "" || f.Depth >= f.Budget.MaxSubframeDepth {
		return false
	}
	for a := f; ; {
		if a.Limits.Spawns > 0 && a.Cost.Spawns >= a.Limits.Spawns {
			return false
		}
		if a.ParentID == "" {
			return true
		}
		p, err := u.c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: scope}, FrameID: a.ParentID})
		require.NoError(t, err)
		a = p.Frame
	}
}

// ledgerRow reads frame's row of scope's ledger.
func (u *upgraded) ledgerRow(t *testing.T, scope, frame string) frames.LedgerRow {
	t.Helper()
	l, err := u.c.GetLedger(context.Background(), &messages.GetLedger{Header: messages.Header{Scope: scope}, FrameID: frame})
	require.NoError(t, err)
	for _, r := range l.Frames {
		if r.Frame == frame {
			return r
		}
	}
	t.Fatalf("no ledger row for %s in %s", frame, scope)
	return frames.LedgerRow{}
}
