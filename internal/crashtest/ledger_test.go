package crashtest

import (
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// ledgerDir is a crash test directory after a storm with the ledger
// workload, every settlement delivered.
func ledgerDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	require.NoError(t, runChild(t.Context(), d, 0, 11, nil, 4, childOptions{ledger: true}))
	return d
}

// ledgerServer opens a copy of dir with a server whose outbox is off and
// a ledger workload on it: what it finishes stays pending.
type ledgerServer struct {
	t     *testing.T
	dir   string
	store *eventstore.BoltStore
	srv   *actors.Server
	lr    *ledgerRun
	close func()
}

func openLedger(t *testing.T, from string) *ledgerServer {
	t.Helper()
	d := filepath.Join(t.TempDir(), "crash")
	require.NoError(t, os.CopyFS(d, os.DirFS(from)))
	store, err := eventstore.Open(filepath.Join(d, DataFile), StoreOptions())
	require.NoError(t, err)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys := quietSystem(quiet)
	cfg := Config(quiet)
	cfg.OutboxOff = true
	srv, err := actors.Start(sys, store, cfg)
	require.NoError(t, err)
	sl, err := OpenSideLog(filepath.Join(d, SideFile))
	require.NoError(t, err)
	ls := &ledgerServer{t: t, dir: d, store: store, srv: srv, lr: &ledgerRun{w: &Storm{C: srv.Client(), Log: sl}, srv: srv}}
	ls.close = func() {
		srv.Stop()
		sys.Shutdown()
		require.NoError(t, sl.Close())
		require.NoError(t, store.Close())
	}
	require.NoError(t, ls.lr.recover(t.Context(), rand.New(rand.NewPCG(1, 2))))
	return ls
}

// child runs one child in child scope 0 that spends spent, and returns
// its binding (pending: the outbox is off).
func (ls *ledgerServer) child(spent int64) frames.Binding {
	t, ctx, lr := ls.t, ls.t.Context(), ls.lr
	t.Helper()
	child := LedgerChild(0)
	est := spent + 100
	var res *messages.ReserveSpendReply
	for res == nil {
		r, err := lr.do(ctx, &messages.ReserveSpend{Header: ledgerHeader(LedgerParent), FrameID: lr.root, For: child, Estimate: &est})
		var me *messages.Error
		if errors.As(err, &me) && me.Code == messages.CodeSpendUnavailable {
			// A root with nothing left: a new one (the outbox is
			// off, and nothing is pending: the storm drained it).
			_, err = lr.do(ctx, &messages.PopFrame{Header: ledgerHeader(LedgerParent), FrameID: lr.root, Status: frames.StatusCompleted})
			require.NoError(t, err)
			require.NoError(t, lr.pushRoot(ctx))
			continue
		}
		require.NoError(t, err)
		res = r.(*messages.ReserveSpendReply)
	}
	p, err := lr.do(ctx, &messages.PushFrame{Header: ledgerHeader(child), Goal: "work", Budget: budget.TokenBudget{Total: 1000}, Reservation: res.Token})
	require.NoError(t, err)
	frame := p.(*messages.PushFrameReply).FrameID
	_, err = lr.do(ctx, &messages.RecordUsage{Header: ledgerHeader(child), FrameID: frame, Cost: budget.Cost{SpendMicros: spent}})
	require.NoError(t, err)
	_, err = lr.do(ctx, &messages.PopFrame{Header: ledgerHeader(child), FrameID: frame, Status: frames.StatusCompleted})
	require.NoError(t, err)
	l, err := lr.ledger(ctx, child)
	require.NoError(t, err)
	for _, b := range l.Bindings {
		if b.Reservation == res.ReservationID {
			require.True(t, b.Pending())
			require.Equal(t, spent, b.Reported)
			return b
		}
	}
	t.Fatalf("no binding of reservation %s in %q", res.ReservationID, child)
	return frames.Binding{}
}

// The ledger checker catches a broken promise: a settlement charged twice,
// one acknowledged without the parent's charge, one the outbox cannot find
// (its table row gone); and it delivers what a kill left pending.
func TestCheckLedgerCatchesBrokenPromises(t *testing.T) {
	base := ledgerDir(t)
	check := func(t *testing.T, d string) (LedgerStats, error) {
		st, err := Check(t.Context(), d, 1)
		return st.Ledger, err
	}

	t.Run("intact", func(t *testing.T) {
		t.Parallel()
		ls := openLedger(t, base)
		ls.close()
		st, err := check(t, ls.dir)
		require.NoError(t, err)
		assert.Positive(t, st.Settled)
		assert.Equal(t, st.Children, st.Settled)
		assert.Equal(t, st.Settled, st.AckedPops)
		assert.Zero(t, st.Lost+st.Doubled+st.Undelivered+st.Unacked)
		assert.Positive(t, st.Charged)
		assert.Positive(t, st.Peak)
		assert.LessOrEqual(t, st.Peak, int64(LedgerMax))
	})
	t.Run("pending settlement, delivered by the checker", func(t *testing.T) {
		t.Parallel()
		ls := openLedger(t, base)
		ls.child(250)
		ls.close()
		st, err := check(t, ls.dir)
		require.NoError(t, err)
		assert.Equal(t, 1, st.Undelivered)
		assert.Equal(t, int64(1), st.Drained)
		assert.Equal(t, st.Children, st.Settled)
		assert.Zero(t, st.Lost+st.Doubled)
	})
	t.Run("settlement charged twice", func(t *testing.T) {
		t.Parallel()
		ls := openLedger(t, base)
		b := ls.child(120)
		// The parent settles it (the outbox's two steps, by hand), then
		// is charged for it again by a second spend.settled.
		settle := &messages.SettleSpend{Header: messages.Header{Scope: LedgerParent, RequestID: settleRequest + "by-hand"},
			Token: b.Token, From: LedgerChild(0), FrameID: b.Root, Spent: b.Reported, Final: true}
		actors.SignSettlement(tokenKey, settle)
		_, err := ls.lr.w.C.SettleSpend(t.Context(), settle)
		require.NoError(t, err)
		ack := &messages.AckSettlement{Header: messages.Header{Scope: LedgerChild(0), RequestID: settledRequest + "by-hand"},
			ReservationID: b.Reservation, Through: b.Reported, Final: true}
		actors.SignAck(tokenKey, ack)
		_, err = ls.lr.w.C.AckSettlement(t.Context(), ack)
		require.NoError(t, err)
		var settled *frames.SpendSettled
		require.NoError(t, ls.store.ReadStream(t.Context(), LedgerParent, 1, func(r eventstore.Record) error {
			ev, err := eventstore.DecodeFrameEvent(r)
			if s, ok := ev.(*frames.SpendSettled); ok && s.ID == b.Reservation {
				settled = s
			}
			return err
		}))
		require.NotNil(t, settled)
		again := *settled
		again.RequestID = settleRequest + "forged"
		enc, err := eventstore.EncodeFrameEvent(&again)
		require.NoError(t, err)
		_, err = ls.store.Append(t.Context(), LedgerParent, eventstore.Any, []eventstore.Event{enc})
		require.NoError(t, err)
		ls.close()
		st, err := check(t, ls.dir)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "DOUBLED: \""+LedgerChild(0)+"\"'s root "+b.Root)
		assert.Equal(t, 1, st.Doubled)
	})
	t.Run("acknowledged, never charged", func(t *testing.T) {
		t.Parallel()
		ls := openLedger(t, base)
		b := ls.child(90)
		// An outbox that acknowledges without settling.
		ack := &messages.AckSettlement{Header: messages.Header{Scope: LedgerChild(0), RequestID: settledRequest + "unsettled"},
			ReservationID: b.Reservation, Through: b.Reported, Final: true}
		actors.SignAck(tokenKey, ack) // with the servers' key: a broken outbox, not a forger
		_, err := ls.lr.w.C.AckSettlement(t.Context(), ack)
		require.NoError(t, err)
		ls.close()
		st, err := check(t, ls.dir)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "LOST: \""+LedgerChild(0)+"\"'s root "+b.Root)
		assert.Equal(t, 1, st.Lost)
	})
	t.Run("pending, its outbox row gone", func(t *testing.T) {
		t.Parallel()
		ls := openLedger(t, base)
		b := ls.child(70)
		require.NoError(t, ls.store.TableWrite(t.Context(), "outbox", []eventstore.TableOp{{Key: []byte(LedgerChild(0)), Delete: true}}))
		ls.close()
		_, err := check(t, ls.dir)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "LOST: \""+LedgerChild(0)+"\"'s root "+b.Root)
		assert.Contains(t, err.Error(), "no final settlement")
	})
}
