package actors_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

func spend(n int64) *int64 { return &n }

// pushLimited pushes a frame with a spend limit (micro-units) and an
// optional reservation token.
func pushLimited(t *testing.T, c *actors.Client, scope, parent string, max int64, token string) string {
	t.Helper()
	r, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(scope), ParentID: parent, Goal: "work", Budget: budget.TokenBudget{Total: map[bool]int64{true: 1000, false: 100}[parent == ""]},
		Limits: budget.Limits{SpendMicros: max}, Reservation: token})
	require.NoError(t, err)
	return r.FrameID
}

func ledgerRow(t *testing.T, c *actors.Client, scope, frame string) frames.LedgerRow {
	t.Helper()
	r, err := c.GetLedger(ctx, &messages.GetLedger{Header: messages.Header{Scope: scope}, FrameID: frame})
	require.NoError(t, err)
	for _, row := range r.Frames {
		if row.Frame == frame {
			return row
		}
	}
	t.Fatalf("no ledger row for %q in %+v", frame, r.Frames)
	return frames.LedgerRow{}
}

// A child in the same scope: the reservation is its ceiling, its overrun
// suspends it with spend_exceeded, and its pop settles: the parent's actual
// grows by what the child spent and nothing stays outstanding.
func TestReservationSameScopeSettlesAtPop(t *testing.T) {
	e := newEnv(t)
	p := pushLimited(t, e.c, "s", "", 100, "")
	res, err := e.c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut("s"), FrameID: p, Estimate: spend(60)})
	require.NoError(t, err)
	assert.Equal(t, int64(60), res.Amount)
	_, err = e.c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut("s"), FrameID: p, Estimate: spend(50)})
	require.ErrorIs(t, err, actors.ErrSpendUnavailable)
	part, err := e.c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut("s"), FrameID: p, Estimate: spend(50), Partial: true})
	require.NoError(t, err)
	assert.Equal(t, int64(40), part.Amount)
	row := ledgerRow(t, e.c, "s", p)
	assert.Equal(t, int64(100), row.Outstanding)

	child := pushLimited(t, e.c, "s", p, 0, res.Token)
	assert.Equal(t, int64(60), ledgerRow(t, e.c, "s", child).Max, "the reservation is the child's ceiling")
	_, err = e.c.PushFrame(ctx, &messages.PushFrame{Header: mut("s"), ParentID: p, Goal: "again", Reservation: res.Token})
	require.ErrorIs(t, err, actors.ErrReservationBound)

	u, err := e.c.RecordUsage(ctx, &messages.RecordUsage{Header: mut("s"), FrameID: child, Cost: budget.Cost{SpendMicros: 70}})
	require.NoError(t, err)
	require.NotNil(t, u.Suspension)
	assert.Equal(t, budget.SpendExceeded, u.Suspension.Limit.Code)

	_, err = e.c.PopFrame(ctx, &messages.PopFrame{Header: mut("s"), FrameID: child, Status: frames.StatusCompleted})
	require.NoError(t, err)
	row = ledgerRow(t, e.c, "s", p)
	assert.Equal(t, int64(70), row.Actual)
	assert.Equal(t, int64(40), row.Outstanding, "the settled reservation holds nothing; the partial one still holds 40")

	rel, err := e.c.ReleaseReservation(ctx, &messages.ReleaseReservation{Header: mut("s"), ReservationID: part.ReservationID})
	require.NoError(t, err)
	assert.Equal(t, int64(40), rel.Returned)
	assert.Zero(t, ledgerRow(t, e.c, "s", p).Outstanding)
}

// Another scope's root: bound by the token; a settlement charges the
// parent once however often it is delivered.
func TestReservationAcrossScopesSettlesOnce(t *testing.T) {
	e := newEnv(t)
	p := pushLimited(t, e.c, "parent", "", 1000, "")
	res, err := e.c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut("parent"), FrameID: p, For: "child", Estimate: spend(300)})
	require.NoError(t, err)
	_, err = e.c.PushFrame(ctx, &messages.PushFrame{Header: mut("other"), Goal: "x", Budget: budget.TokenBudget{Total: 10}, Reservation: res.Token})
	require.ErrorIs(t, err, actors.ErrReservationInvalid, "a token for another scope")
	c := pushLimited(t, e.c, "child", "", 0, res.Token)
	assert.Equal(t, int64(300), ledgerRow(t, e.c, "child", c).Max)
	for i := 0; i < 3; i++ {
		s, err := e.c.SettleSpend(ctx, signedSettle(&messages.SettleSpend{Header: mut("parent"), Token: res.Token, From: "child", FrameID: c, Spent: 120, Final: true}))
		require.NoError(t, err)
		if i == 0 {
			assert.Equal(t, int64(120), s.Charged)
		} else {
			assert.Zero(t, s.Charged)
		}
	}
	row := ledgerRow(t, e.c, "parent", p)
	assert.Equal(t, int64(120), row.Actual)
	assert.Zero(t, row.Outstanding)
	forged := res.Token[:len(res.Token)-2] + "AA"
	_, err = e.c.SettleSpend(ctx, signedSettle(&messages.SettleSpend{Header: mut("parent"), Token: forged, From: "child", FrameID: c, Spent: 500, Final: true}))
	require.ErrorIs(t, err, actors.ErrReservationInvalid)
}

// GetLedger of one frame: a live one and its descendants; a finished one
// with what the scope keeps of it (nothing here: its record is GetFrame's);
// a frame the scope never had is not found, as everywhere.
func TestLedgerOfAFrame(t *testing.T) {
	e := newEnv(t)
	p := pushLimited(t, e.c, "s", "", 100, "")
	done := pushLimited(t, e.c, "s", p, 0, "")
	pop(t, e.c, "s", done)
	for _, restarted := range []bool{false, true} {
		if restarted {
			e.restart()
		}
		r, err := e.c.GetLedger(ctx, &messages.GetLedger{Header: messages.Header{Scope: "s"}, FrameID: p})
		require.NoError(t, err)
		require.Len(t, r.Frames, 1)
		assert.Equal(t, int64(100), r.Frames[0].Max)
		r, err = e.c.GetLedger(ctx, &messages.GetLedger{Header: messages.Header{Scope: "s"}, FrameID: done})
		require.NoError(t, err, "a finished frame (restarted: %v)", restarted)
		assert.Empty(t, r.Frames)
		_, err = e.c.GetLedger(ctx, &messages.GetLedger{Header: messages.Header{Scope: "s"}, FrameID: actors.NewID()})
		require.ErrorIs(t, err, actors.ErrFrameNotFound)
		_, err = e.c.GetLedger(ctx, &messages.GetLedger{Header: messages.Header{Scope: "elsewhere"}, FrameID: p})
		require.ErrorIs(t, err, actors.ErrFrameNotFound, "a frame of another scope")
	}
}

// A reservation without an estimate gets what the server's policy says,
// never a silent skip: deny refuses it (estimate_required, nothing
// written); cap reserves the configured amount (refused, or granted in
// part with Partial, when less is available); allow holds nothing and
// gives the work what is available as its ceiling (none on a frame
// without a max). With an estimate the policy does not apply.
func TestReservationEstimatePolicy(t *testing.T) {
	for _, policy := range []frames.EstimatePolicy{"", frames.EstimateDeny, frames.EstimateCap, frames.EstimateAllow} {
		name := string(policy)
		if name == "" {
			name = "unset"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, func(c *actors.Config) {
				c.Frames.Unestimated = policy
				if policy == frames.EstimateCap {
					c.Frames.UnestimatedCap = 250
				}
			})
			p := pushLimited(t, e.c, "s", "", 1000, "")
			withEst, err := e.c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut("s"), FrameID: p, Estimate: spend(600)})
			require.NoError(t, err)
			assert.Equal(t, int64(600), withEst.Amount)
			assert.Empty(t, withEst.Policy, "an estimate is granted as such")
			unlimited := pushLimited(t, e.c, "s", "", 0, "")

			before := e.version("s")
			res, err := e.c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut("s"), FrameID: p})
			switch policy {
			case "", frames.EstimateDeny:
				require.ErrorIs(t, err, actors.ErrEstimateRequired)
				assert.Equal(t, before, e.version("s"), "nothing written")
				_, err = e.c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut("s"), FrameID: unlimited})
				require.ErrorIs(t, err, actors.ErrEstimateRequired, "a frame without a max too")
				assert.Equal(t, int64(600), ledgerRow(t, e.c, "s", p).Outstanding)

			case frames.EstimateCap:
				require.NoError(t, err)
				assert.Equal(t, frames.EstimateCap, res.Policy)
				assert.Equal(t, int64(250), res.Amount)
				assert.Equal(t, int64(250), res.Ceiling)
				assert.Equal(t, int64(850), ledgerRow(t, e.c, "s", p).Outstanding, "the cap is held")
				_, err = e.c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut("s"), FrameID: p})
				require.ErrorIs(t, err, actors.ErrSpendUnavailable, "150 left, the cap is 250")
				part, err := e.c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut("s"), FrameID: p, Partial: true})
				require.NoError(t, err)
				assert.Equal(t, int64(150), part.Amount, "Partial: what is left")
				free, err := e.c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut("s"), FrameID: unlimited})
				require.NoError(t, err)
				assert.Equal(t, int64(250), free.Amount, "the cap without a max too")
				child := pushLimited(t, e.c, "s", p, 0, res.Token)
				assert.Equal(t, int64(250), ledgerRow(t, e.c, "s", child).Max)

			case frames.EstimateAllow:
				require.NoError(t, err)
				assert.Equal(t, frames.EstimateAllow, res.Policy)
				assert.Zero(t, res.Amount, "nothing held")
				assert.Equal(t, int64(400), res.Ceiling, "what is available is the work's ceiling")
				assert.Equal(t, int64(600), ledgerRow(t, e.c, "s", p).Outstanding)
				child := pushLimited(t, e.c, "s", p, 0, res.Token)
				assert.Equal(t, int64(400), ledgerRow(t, e.c, "s", child).Max)
				_, err = e.c.RecordUsage(ctx, &messages.RecordUsage{Header: mut("s"), FrameID: child, Cost: budget.Cost{SpendMicros: 300}})
				require.NoError(t, err)
				pop(t, e.c, "s", child)
				row := ledgerRow(t, e.c, "s", p)
				assert.Equal(t, int64(300), row.Actual, "charged when it settles")
				assert.Equal(t, int64(600), row.Outstanding)
				_, err = e.c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut("s"), FrameID: p, Estimate: spend(100)})
				require.NoError(t, err)
				_, err = e.c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut("s"), FrameID: p})
				require.ErrorIs(t, err, actors.ErrSpendUnavailable, "nothing available: no ceiling to give")
				free, err := e.c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut("s"), FrameID: unlimited})
				require.NoError(t, err)
				assert.Zero(t, free.Amount)
				assert.Zero(t, free.Ceiling, "no max: no ceiling")
				kid := pushLimited(t, e.c, "s", unlimited, 0, free.Token)
				assert.Zero(t, ledgerRow(t, e.c, "s", kid).Max)
			}
			require.NoError(t, frames.CheckInvariants(mustLoad(t, e, "s")))
		})
	}
}

// The policy is checked when the server starts: cap needs a positive
// amount, and an amount goes with cap alone.
func TestReservationEstimatePolicyConfig(t *testing.T) {
	for _, bad := range []frames.Config{
		{Unestimated: frames.EstimateCap},
		{Unestimated: frames.EstimateAllow, UnestimatedCap: 5},
		{Unestimated: frames.EstimateDeny, UnestimatedCap: 5},
		{Unestimated: frames.EstimateCap, UnestimatedCap: -1},
		{Unestimated: "sometimes"},
	} {
		cfg := testConfig(newFakeClock())
		cfg.Frames.Unestimated, cfg.Frames.UnestimatedCap = bad.Unestimated, bad.UnestimatedCap
		sys := quietSystem()
		srv, err := actors.Start(sys, eventstore.NewMemory(), cfg)
		if assert.Error(t, err, "%+v", bad) {
			assert.Contains(t, err.Error(), "unestimated spend policy")
		} else {
			srv.Stop()
		}
		sys.Shutdown()
	}
}
