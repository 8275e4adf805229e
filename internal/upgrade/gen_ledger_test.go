package upgrade

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// The v6 workload (issue 14, the spend ledger). genLedgerScope's root has
// a spend limit and reserves:
//
//   - for a child here: pushed with the token, usage, popped (settled in the
//     pop's append);
//   - for a root in genLedgerWork, which reserves in turn for a root in
//     genLedgerNested (a two-level spawn across scopes): both finish and the
//     outbox delivers both settlements (their SettleSpend and AckSettlement
//     are recorded as steps, with the outbox's request ids and proofs);
//   - for a child here, released;
//   - for genLedgerNever with a one-minute lease: the clock moves past it
//     and the next grant returns it (expired);
//   - for genLedgerOpen with a day's lease, renewed to the most a lease
//     may last (7 days after the grant), never bound: its renewed token is
//     the manifest's Open;
//   - on the tail's server, whose outbox is off (Config.OutboxOff), for a
//     root in genLedgerPending that finishes: its settlement is left
//     pending, the scope listed in the store's outbox table.
//
// After the copy, the generator's own server delivers the pending
// settlement to the scratch store and records GetLedger as it then
// answers (Ledger.Delivered).
const (
	genLedgerScope   = "ledger-nu"
	genLedgerWork    = "ledger-xi"
	genLedgerNested  = "ledger-omicron"
	genLedgerPending = "ledger-rho"
	genLedgerOpen    = "ledger-pi"
	genLedgerNever   = "ledger-sigma"

	genSpendLimit = 5_000_000
	// The open reservation's lease: a day at its grant, renewed to the
	// longest a lease lasts, so that a test serving the fixture from just
	// after its clock's end binds it well within it.
	genOpenLease    = 24 * time.Hour
	genOpenRenewed  = time.Duration(frames.MaxReservationAge)
	genShortLease   = time.Minute
	genPendingLease = time.Hour
)

func est(v int64) *int64 { return &v }

// ledger writes the ledger's settled part on the scenario's server (its
// outbox on). The frame and the facts are kept for ledgerPending.
func (g *gen) ledger() {
	ctx := context.Background()
	const nu, xi, omicron = genLedgerScope, genLedgerWork, genLedgerNested
	l := &Ledger{Scope: nu, SpendLimit: genSpendLimit}
	g.m.Ledger = l
	p := g.do(Step{Op: "PushFrame", Scope: nu, RequestID: "nu-push-root", Goal: str("procure the conference venue"),
		Budget: &budget.TokenBudget{Total: 50_000, MaxSubframeDepth: 2},
		Limits: &budget.Limits{Tokens: 200_000, Turns: 40, SpendMicros: genSpendLimit}}).FrameID
	l.Frame = p

	// A child here, settled by its pop.
	r1 := g.do(Step{Op: "ReserveSpend", Scope: nu, RequestID: "nu-reserve-child", FrameID: p, Estimate: est(500_000)})
	c1 := g.do(Step{Op: "PushFrame", Scope: nu, RequestID: "nu-push-child", ParentID: p, Goal: str("shortlist three venues"),
		Budget: &budget.TokenBudget{Total: 5_000}, Reservation: r1.ReservationToken}).FrameID
	g.do(Step{Op: "RecordUsage", Scope: nu, RequestID: "nu-child-usage", FrameID: c1,
		Cost: &budget.Cost{InputTokens: 1_200, OutputTokens: 300, Turns: 1, SpendMicros: 200_000}})
	g.do(Step{Op: "PopFrame", Scope: nu, RequestID: "nu-pop-child", FrameID: c1, Status: frames.StatusCompleted.String()})
	l.Reservations = append(l.Reservations, ReservationFact{ID: r1.ReservationID, Scope: nu, Frame: p, For: nu, Bound: c1, Left: LeftSettled})

	// A root in xi, which reserves for a root in omicron.
	r2 := g.do(Step{Op: "ReserveSpend", Scope: nu, RequestID: "nu-reserve-xi", FrameID: p, For: xi, Estimate: est(1_500_000)})
	x := g.do(Step{Op: "PushFrame", Scope: xi, RequestID: "xi-push-root", Goal: str("negotiate with the venues"),
		Budget: &budget.TokenBudget{Total: 20_000}, Reservation: r2.ReservationToken}).FrameID
	g.do(Step{Op: "AddContextHandle", Scope: xi, RequestID: "xi-ctx", FrameID: x, HandleID: "h-shortlist", Kind: "document",
		Role: string(frames.RoleUser), Priority: prio(compaction.High), Content: "Shortlist: Casa do Marquês, LX Factory, Pátio da Galé."})
	g.do(Step{Op: "RecordUsage", Scope: xi, RequestID: "xi-usage", FrameID: x,
		Cost: &budget.Cost{InputTokens: 2_000, OutputTokens: 900, Turns: 2, SpendMicros: 300_000}})
	r2b := g.do(Step{Op: "ReserveSpend", Scope: xi, RequestID: "xi-reserve-omicron", FrameID: x, For: omicron, Estimate: est(400_000)})
	y := g.do(Step{Op: "PushFrame", Scope: omicron, RequestID: "omicron-push-root", Goal: str("check catering quotes"),
		Budget: &budget.TokenBudget{Total: 8_000}, Reservation: r2b.ReservationToken}).FrameID
	g.do(Step{Op: "RecordUsage", Scope: omicron, RequestID: "omicron-usage", FrameID: y,
		Cost: &budget.Cost{InputTokens: 700, OutputTokens: 200, Turns: 1, SpendMicros: 150_000}})
	g.do(Step{Op: "PopFrame", Scope: omicron, RequestID: "omicron-pop-root", FrameID: y, Status: frames.StatusCompleted.String()})
	require.NoError(g.t, g.srv.DrainOutbox(ctx))
	g.delivered(omicron, y, r2b.ReservationID, 150_000)
	l.Reservations = append(l.Reservations, ReservationFact{ID: r2b.ReservationID, Scope: xi, Frame: x, For: omicron, Bound: y, Left: LeftSettled})
	g.do(Step{Op: "AddResult", Scope: xi, RequestID: "xi-result", FrameID: x, ResultID: "r-venue", Kind: "decision",
		Ref: "mem://venue", Summary: "LX Factory, 14-16 May"})
	g.do(Step{Op: "PopFrame", Scope: xi, RequestID: "xi-pop-root", FrameID: x, Status: frames.StatusCompleted.String()})
	require.NoError(g.t, g.srv.DrainOutbox(ctx))
	g.delivered(xi, x, r2.ReservationID, 450_000) // its own 300,000 and omicron's 150,000
	l.Reservations = append(l.Reservations, ReservationFact{ID: r2.ReservationID, Scope: nu, Frame: p, For: xi, Bound: x, Left: LeftSettled})

	// Released.
	r4 := g.do(Step{Op: "ReserveSpend", Scope: nu, RequestID: "nu-reserve-unused", FrameID: p, Estimate: est(250_000)})
	g.do(Step{Op: "ReleaseReservation", Scope: nu, RequestID: "nu-release", ReservationID: r4.ReservationID})
	l.Reservations = append(l.Reservations, ReservationFact{ID: r4.ReservationID, Scope: nu, Frame: p, For: nu, Left: LeftReleased})

	// Expired: the clock moves past its lease; the next grant returns it.
	r5 := g.do(Step{Op: "ReserveSpend", Scope: nu, RequestID: "nu-reserve-short", FrameID: p, For: genLedgerNever,
		Estimate: est(300_000), LeaseMillis: genShortLease.Milliseconds()})
	g.clk.advance(2 * genShortLease)
	l.Reservations = append(l.Reservations, ReservationFact{ID: r5.ReservationID, Scope: nu, Frame: p, For: genLedgerNever, Left: LeftExpired})

	// Open: granted (returning the expired one), renewed, never bound.
	r3 := g.do(Step{Op: "ReserveSpend", Scope: nu, RequestID: "nu-reserve-open", FrameID: p, For: genLedgerOpen,
		Estimate: est(800_000), LeaseMillis: genOpenLease.Milliseconds()})
	require.Equal(g.t, []string{r5.ReservationID}, r3.ReturnedIDs, "the grant returns the expired reservation")
	rn := g.do(Step{Op: "RenewReservation", Scope: nu, RequestID: "nu-renew-open", Token: r3.ReservationToken,
		LeaseMillis: genOpenRenewed.Milliseconds()})
	require.Greater(g.t, rn.ExpiresAt, r3.ExpiresAt)
	l.Open = &OpenReservation{ID: r3.ReservationID, For: genLedgerOpen, Amount: r3.Amount, Ceiling: r3.Ceiling, ExpiresAt: rn.ExpiresAt,
		Token: rn.ReservationToken}
	l.Reservations = append(l.Reservations, ReservationFact{ID: r3.ReservationID, Scope: nu, Frame: p, For: genLedgerOpen, Left: LeftOpen})

	for _, sc := range []string{xi, omicron} {
		g.do(Step{Op: "ResumeActor", Scope: sc, RequestID: sc + "-resume-actor"})
		g.facts(sc, nil)
	}
}

// delivered records the outbox's delivery of the final settlement of root
// (in scope) to reservation id, which reported spent: the SettleSpend and
// AckSettlement it sent, resent with its request ids and proofs (each
// answered with the reply the outbox got, appending nothing).
func (g *gen) delivered(scope, root, id string, spent int64) {
	g.t.Helper()
	ctx := context.Background()
	l, err := g.c.GetLedger(ctx, &messages.GetLedger{Header: messages.Header{Scope: scope}})
	require.NoError(g.t, err)
	var b *frames.Binding
	for i := range l.Bindings {
		if l.Bindings[i].Reservation == id {
			b = &l.Bindings[i]
		}
	}
	require.NotNil(g.t, b, "%s has a binding to %s", scope, id)
	require.Equal(g.t, root, b.Root)
	require.Equal(g.t, spent, b.Reported)
	require.True(g.t, b.Final && b.DeliveredFinal && b.Delivered == b.Reported, "%s's settlement of %s is delivered: %+v", scope, id, *b)
	sent := *b
	sent.Delivered, sent.DeliveredFinal = 0, false // as the binding was when the outbox read it

	key := g.cfg.TokenKey // the ledger key (Config.LedgerKey unset)
	settle := &messages.SettleSpend{Header: messages.Header{Scope: b.Scope, RequestID: outboxRequestID("settle-", scope, &sent)},
		Token: b.Token, From: scope, FrameID: b.Root, Spent: b.Reported, Final: true}
	actors.SignSettlement(key, settle)
	ack := &messages.AckSettlement{Header: messages.Header{Scope: scope, RequestID: outboxRequestID("settled-", scope, &sent)},
		ReservationID: b.Reservation, Through: b.Reported, Final: true}
	actors.SignAck(key, ack)

	seq, err := g.store.LastSeq(ctx)
	require.NoError(g.t, err)
	r := g.do(Step{Op: "SettleSpend", Scope: settle.Scope, RequestID: settle.RequestID, Token: settle.Token, From: settle.From,
		FrameID: settle.FrameID, Spent: settle.Spent, Final: settle.Final, Proof: settle.Proof})
	require.Equal(g.t, spent, r.Charged, "the settlement charged what %s spent", root)
	g.do(Step{Op: "AckSettlement", Scope: ack.Scope, RequestID: ack.RequestID, ReservationID: ack.ReservationID, Through: ack.Through,
		Final: ack.Final, Proof: ack.Proof})
	now, err := g.store.LastSeq(ctx)
	require.NoError(g.t, err)
	require.Equal(g.t, seq, now, "the recorded SettleSpend and AckSettlement are the outbox's own: a resend appends nothing")
}

// outboxRequestID is the request id the outbox sends a delivery step of
// binding b of scope with (actors.settleRequestID).
func outboxRequestID(prefix, scope string, b *frames.Binding) string {
	h := sha256.New()
	var n [8]byte
	for _, s := range []string{scope, b.Scope, b.Reservation, b.Root, b.Token} {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	for _, v := range []int64{b.Reported, b.Delivered} {
		binary.BigEndian.PutUint64(n[:], uint64(v))
		h.Write(n[:])
	}
	if b.Final {
		h.Write([]byte{1})
	} else {
		h.Write([]byte{0})
	}
	return prefix + hex.EncodeToString(h.Sum(nil))[:32]
}

// ledgerPending writes, on the tail's server (its outbox off), a root in
// genLedgerPending bound to a reservation of the ledger's frame that
// finishes: its settlement stays pending and the scope is in the outbox
// table. The frame's scope is then left as it is.
func (g *gen) ledgerPending() {
	l := g.m.Ledger
	const rho = genLedgerPending
	r6 := g.do(Step{Op: "ReserveSpend", Scope: l.Scope, RequestID: "nu-reserve-rho", FrameID: l.Frame, For: rho,
		Estimate: est(600_000), LeaseMillis: genPendingLease.Milliseconds()})
	z := g.do(Step{Op: "PushFrame", Scope: rho, RequestID: "rho-push-root", Goal: str("book the catering"),
		Budget: &budget.TokenBudget{Total: 6_000}, Reservation: r6.ReservationToken}).FrameID
	g.do(Step{Op: "RecordUsage", Scope: rho, RequestID: "rho-usage", FrameID: z,
		Cost: &budget.Cost{InputTokens: 900, OutputTokens: 400, Turns: 1, SpendMicros: 350_000}})
	g.do(Step{Op: "PopFrame", Scope: rho, RequestID: "rho-pop-root", FrameID: z, Status: frames.StatusCompleted.String()})
	l.Reservations = append(l.Reservations, ReservationFact{ID: r6.ReservationID, Scope: l.Scope, Frame: l.Frame, For: rho, Bound: z, Left: LeftPending})
	l.Pending = append(l.Pending, PendingSettlement{Scope: rho, Root: z, Reservation: r6.ReservationID, ReservingScope: l.Scope,
		Reported: 350_000})

	ctx := context.Background()
	lr, err := g.c.GetLedger(ctx, &messages.GetLedger{Header: messages.Header{Scope: rho}})
	require.NoError(g.t, err)
	require.Len(g.t, lr.Bindings, 1)
	require.True(g.t, lr.Bindings[0].Pending(), "the tail's server delivers nothing: the settlement is pending")
	require.Equal(g.t, int64(350_000), lr.Bindings[0].Reported)

	// As left: 200,000 (the child) + 450,000 (xi with omicron) charged;
	// the open reservation and the pending one held. Once delivered: the
	// pending one's 350,000 charged, the open one held.
	row := g.ledgerRow(l.Scope, l.Frame)
	require.Equal(g.t, int64(650_000), row.Actual)
	require.Equal(g.t, l.Open.Amount+r6.Amount, row.Outstanding)
	l.Actual, l.Outstanding = row.Actual+350_000, l.Open.Amount

	g.do(Step{Op: "ResumeActor", Scope: rho, RequestID: "rho-resume-actor"})
	g.facts(rho, nil)
	g.do(Step{Op: "ResumeActor", Scope: l.Scope, RequestID: "nu-resume-actor"})
	g.facts(l.Scope, nil)
}

// ledgerRow reads frame's row of scope's ledger.
func (g *gen) ledgerRow(scope, frame string) frames.LedgerRow {
	g.t.Helper()
	lr, err := g.c.GetLedger(context.Background(), &messages.GetLedger{Header: messages.Header{Scope: scope}, FrameID: frame})
	require.NoError(g.t, err)
	for _, r := range lr.Frames {
		if r.Frame == frame {
			return r
		}
	}
	g.t.Fatalf("no ledger row for %s in %s", frame, scope)
	return frames.LedgerRow{}
}

// ledgerReads records GetLedger of the scopes the pending settlement does
// not touch (their answers do not change when it is delivered).
func (g *gen) ledgerReads() {
	g.read(Read{Op: "GetLedger", Scope: genLedgerWork})
	g.read(Read{Op: "GetLedger", Scope: genLedgerNested})
}

// ledgerDelivered runs after the fixture is copied: a server with its
// outbox on delivers the pending settlement to the scratch store, and
// GetLedger of the reserving frame and of the pending scopes is recorded
// as it then answers.
func (g *gen) ledgerDelivered(cfg actors.Config) {
	l := g.m.Ledger
	ctx := context.Background()
	rows, err := outboxScopes(ctx, g.store)
	require.NoError(g.t, err)
	require.Equal(g.t, l.OutboxScopes, rows)
	cfg.OutboxOff = false
	sys := quietSystem()
	srv, err := actors.Start(sys, g.store, cfg)
	require.NoError(g.t, err)
	defer sys.Shutdown()
	defer srv.Stop()
	g.c, g.srv = srv.Client(), srv
	require.NoError(g.t, srv.DrainOutbox(ctx))
	require.Equal(g.t, int64(len(l.Pending)), srv.OutboxStats().Delivered)
	rows, err = outboxScopes(ctx, g.store)
	require.NoError(g.t, err)
	require.Empty(g.t, rows, "every binding delivered: the outbox table is empty")
	row := g.ledgerRow(l.Scope, l.Frame)
	require.Equal(g.t, l.Actual, row.Actual)
	require.Equal(g.t, l.Outstanding, row.Outstanding)

	reads := len(g.m.Reads)
	g.read(Read{Op: "GetLedger", Scope: l.Scope, FrameID: l.Frame})
	for _, p := range l.Pending {
		g.read(Read{Op: "GetLedger", Scope: p.Scope})
	}
	l.Delivered = append(l.Delivered, g.m.Reads[reads:]...)
	g.m.Reads = g.m.Reads[:reads]
}

// snapshotsHoldLedger checks that the fixture's snapshots carry the
// ledger's state, so that a later release decodes it from a snapshot and
// not only from a replay: the reserving scope's reservations and the
// working scope's binding.
func (g *gen) snapshotsHoldLedger() {
	nu := g.loadSnapshot(genLedgerScope)
	require.NotEmpty(g.t, nu.Reservations, "%s's snapshot holds reservations", genLedgerScope)
	xi := g.loadSnapshot(genLedgerWork)
	require.NotEmpty(g.t, xi.Bindings, "%s's snapshot holds its binding", genLedgerWork)
	require.NotEmpty(g.t, xi.Reservations, "%s's snapshot holds its reservation", genLedgerWork)
}
