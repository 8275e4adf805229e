package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// spawn is the two-level spawn of the tests: a planner root (max $1.00)
// reserves $0.40 for scope researcher; the researcher root pushed with it
// reserves $0.10 for a child of its own.
type spawn struct {
	planner, research, child string // frame ids
	plannerRes, researchRes  *messages.ReserveSpendReply
}

func micros(dollars float64) int64 {
	m, err := budget.SpendFromFloat(dollars)
	if err != nil {
		panic(err)
	}
	return m
}

func spendOn(t *testing.T, c *actors.Client, ctx context.Context, scope, frame string, dollars float64) {
	t.Helper()
	_, err := c.RecordUsage(ctx, &messages.RecordUsage{Header: messages.Header{Scope: scope}, FrameID: frame, Cost: budget.Cost{SpendMicros: micros(dollars)}})
	require.NoError(t, err)
}

func pop(t *testing.T, c *actors.Client, ctx context.Context, scope, frame string) {
	t.Helper()
	_, err := c.PopFrame(ctx, &messages.PopFrame{Header: messages.Header{Scope: scope}, FrameID: frame, Status: frames.StatusCompleted})
	require.NoError(t, err)
}

// withLedgerServer runs fn against a server on dir's data file; outbox
// false leaves its outbox worker off (the test delivers by hand).
func withLedgerServer(t *testing.T, dir string, outbox bool, fn func(srv *actors.Server, c *actors.Client, ctx context.Context)) {
	t.Helper()
	store, err := openStore(dir, true, time.Second, false)
	require.NoError(t, err)
	defer store.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	defer sys.Shutdown()
	cfg := actors.DefaultConfig()
	cfg.TokenKey, cfg.Logger, cfg.OutboxOff = ledgerTestKey, quiet, !outbox
	srv, err := actors.Start(sys, store, cfg)
	require.NoError(t, err)
	defer srv.Stop()
	fn(srv, srv.Client(), context.Background())
}

// ledgerTestKey signs the test servers' tokens (and so their settlements).
var ledgerTestKey = bytes.Repeat([]byte{7}, 32)

// startSpawn pushes the spawn; finish pops the researcher's frames (child
// $0.07, root $0.05 of its own), lets the server's outbox settle the
// planner's reservation (SettleSpend to the planner, then AckSettlement to
// the researcher) and charges the planner $0.03 of its own.
func startSpawn(t *testing.T, srv *actors.Server, c *actors.Client, ctx context.Context, finish bool) spawn {
	return startSpawnAck(t, srv, c, ctx, finish, true)
}

// startSpawnAck is startSpawn; ack false (on a server whose outbox is off)
// delivers the settlement by hand and leaves out the AckSettlement.
func startSpawnAck(t *testing.T, srv *actors.Server, c *actors.Client, ctx context.Context, finish, ack bool) spawn {
	t.Helper()
	pl, rs := messages.Header{Scope: "planner"}, messages.Header{Scope: "researcher"}
	var s spawn
	p, err := c.PushFrame(ctx, &messages.PushFrame{Header: pl, Goal: "plan the trip", Budget: budget.TokenBudget{Total: 8000},
		Limits: budget.Limits{SpendMicros: micros(1.00)}})
	require.NoError(t, err)
	s.planner = p.FrameID
	est := micros(0.40)
	s.plannerRes, err = c.ReserveSpend(ctx, &messages.ReserveSpend{Header: pl, FrameID: s.planner, For: "researcher", Estimate: &est})
	require.NoError(t, err)
	r, err := c.PushFrame(ctx, &messages.PushFrame{Header: rs, Goal: "research flights", Budget: budget.TokenBudget{Total: 4000},
		Reservation: s.plannerRes.Token})
	require.NoError(t, err)
	s.research = r.FrameID
	est = micros(0.10)
	s.researchRes, err = c.ReserveSpend(ctx, &messages.ReserveSpend{Header: rs, FrameID: s.research, Estimate: &est})
	require.NoError(t, err)
	ch, err := c.PushFrame(ctx, &messages.PushFrame{Header: rs, ParentID: s.research, Goal: "compare fares", Budget: budget.TokenBudget{Total: 1000},
		Reservation: s.researchRes.Token})
	require.NoError(t, err)
	s.child = ch.FrameID
	if !finish {
		return s
	}
	spendOn(t, c, ctx, "researcher", s.child, 0.07)
	spendOn(t, c, ctx, "researcher", s.research, 0.05)
	pop(t, c, ctx, "researcher", s.child)
	pop(t, c, ctx, "researcher", s.research)
	if ack {
		require.NoError(t, srv.DrainOutbox(ctx))
	} else {
		// What the outbox delivers first (Binding.Pending → SettleSpend).
		l, err := c.GetLedger(ctx, &messages.GetLedger{Header: rs})
		require.NoError(t, err)
		require.Len(t, l.Bindings, 1)
		b := l.Bindings[0]
		require.True(t, b.Pending())
		require.Equal(t, micros(0.12), b.Reported, "the researcher root's spend, its child's included")
		settle := &messages.SettleSpend{Header: pl, Token: b.Token, From: "researcher", FrameID: b.Root, Spent: b.Reported, Final: true}
		actors.SignSettlement(ledgerTestKey, settle) // as the outbox would
		_, err = c.SettleSpend(ctx, settle)
		require.NoError(t, err)
	}
	spendOn(t, c, ctx, "planner", s.planner, 0.03)
	return s
}

func runLedger(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"ledger"}, args...), &out, &errb)
	return out.String(), errb.String(), code
}

// anonymize replaces the spawn's ids and the times in ledger output.
func anonymize(s string, sp spawn) string {
	s = strings.NewReplacer(sp.planner, "P", sp.research, "R", sp.child, "C",
		sp.plannerRes.ReservationID, "rv-planner", sp.researchRes.ReservationID, "rv-research").Replace(s)
	return regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`).ReplaceAllString(s, "TIME")
}

// The two-level spawn, finished and settled, on a data file: the planner's
// tree goes into scope researcher through the reservation, and every
// amount is the ledger's.
func TestLedgerTwoLevelSpawnAcrossScopes(t *testing.T) {
	dir := t.TempDir()
	var sp spawn
	withLedgerServer(t, dir, true, func(srv *actors.Server, c *actors.Client, ctx context.Context) { sp = startSpawn(t, srv, c, ctx, true) })

	out, errs, code := runLedger(t, "--data", dir, "--scope", "planner")
	require.Equal(t, 0, code, errs)
	t.Logf("ledger --data DIR --scope planner:\n%s", out)
	// R's record: after the AckSettlement, the researcher scope's last record
	// naming R is its spend.delivered, not its frame.popped, and GetFrame
	// answers frame_not_found (a defect of the ledger's core, reported): the
	// tree then shows what the ledger knows of R.
	want := `ledger of scope planner  version 4  at TIME  (amounts in dollars)
└─ P active  max $1.000000  reserved -  outstanding $0.000000  actual $0.150000  "plan the trip"
   └─ $ reservation rv-planner for researcher  amount $0.400000  settled $0.120000  settled  lease ends TIME
      └─ [researcher] R completed  max $0.400000  reserved $0.400000  outstanding $0.000000  actual $0.120000  "research flights"
         └─ $ reservation rv-research for researcher  amount $0.100000  settled $0.070000  settled  lease ends TIME
            └─ [researcher] C completed  max $0.100000  reserved $0.100000  outstanding $0.000000  actual $0.070000  "compare fares"
`
	assert.Equal(t, want, anonymize(out, sp))

	// --json: the same tree, amounts in micro-units.
	out, errs, code = runLedger(t, "--data", dir, "--scope", "planner", "--json")
	require.Equal(t, 0, code, errs)
	var tree LedgerTree
	require.NoError(t, json.Unmarshal([]byte(out), &tree))
	require.Len(t, tree.Roots, 1)
	p := tree.Roots[0]
	assert.Equal(t, []int64{micros(1), 0, 0, micros(0.15)}, []int64{p.Max, p.Reserved, p.Outstanding, p.Actual})
	require.Len(t, p.Reservations, 1)
	rv := p.Reservations[0]
	assert.Equal(t, "settled", rv.State)
	require.NotNil(t, rv.Outbox)
	assert.True(t, rv.Outbox.DeliveredFinal, "the researcher scope recorded the delivery")
	assert.Empty(t, rv.Outbox.Token, "the token is a credential: never printed")
	require.NotNil(t, rv.Work)
	r := rv.Work
	assert.Equal(t, []any{"researcher", sp.research, true, micros(0.40), micros(0.12)},
		[]any{r.Scope, r.Frame, r.Finished, r.Reserved, r.Actual}, "actual: what its binding reported")
	require.Len(t, r.Reservations, 1)
	require.NotNil(t, r.Reservations[0].Work)
	assert.Equal(t, micros(0.07), r.Reservations[0].Work.Actual)

	// --frame starts there; --depth 0 stays in the scope.
	out, errs, code = runLedger(t, "--data", dir, "--scope", "planner", "--frame", sp.planner, "--depth", "0")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "ledger of scope planner from frame "+sp.planner)
	assert.Contains(t, out, "(scope researcher not followed (--depth 0))")
	assert.NotContains(t, out, "[researcher]")

	// The researcher's own ledger: its finished root, read from the log.
	out, errs, code = runLedger(t, "--data", dir, "--scope", "researcher")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, anonymize(out, sp), "└─ R completed  max $0.400000  reserved $0.400000  outstanding $0.000000  actual $0.120000  \"research flights\"")
	assert.Contains(t, anonymize(out, sp), "   └─ $ reservation rv-research for researcher  amount $0.100000  settled $0.070000  settled")
}

// Settled in the planner, not yet acknowledged to the researcher: R's
// record is read from the log (max, status, goal), and the researcher's
// outbox still has the settlement to deliver.
func TestLedgerSettledBeforeTheAck(t *testing.T) {
	dir := t.TempDir()
	var sp spawn
	withLedgerServer(t, dir, false, func(srv *actors.Server, c *actors.Client, ctx context.Context) {
		sp = startSpawnAck(t, srv, c, ctx, true, false)
	})
	out, errs, code := runLedger(t, "--data", dir, "--scope", "planner")
	require.Equal(t, 0, code, errs)
	t.Logf("ledger --data DIR --scope planner:\n%s", out)
	want := `ledger of scope planner  version 4  at TIME  (amounts in dollars)
└─ P active  max $1.000000  reserved -  outstanding $0.000000  actual $0.150000  "plan the trip"
   └─ $ reservation rv-planner for researcher  amount $0.400000  settled $0.120000  settled  lease ends TIME  outbox: $0.120000 to deliver
      └─ [researcher] R completed  max $0.400000  reserved $0.400000  outstanding $0.000000  actual $0.120000  "research flights"
         └─ $ reservation rv-research for researcher  amount $0.100000  settled $0.070000  settled  lease ends TIME
            └─ [researcher] C completed  max $0.100000  reserved $0.100000  outstanding $0.000000  actual $0.070000  "compare fares"
`
	assert.Equal(t, want, anonymize(out, sp))
}

// Live, before anything settles: the reservations hold their amounts, the
// researcher root is bound to the planner's, nothing is spent yet.
func TestLedgerLiveSpawn(t *testing.T) {
	dir := t.TempDir()
	var sp spawn
	withLedgerServer(t, dir, true, func(srv *actors.Server, c *actors.Client, ctx context.Context) {
		sp = startSpawn(t, srv, c, ctx, false)
		spendOn(t, c, ctx, "researcher", sp.child, 0.02)
	})
	out, errs, code := runLedger(t, "--data", dir, "--scope", "planner")
	require.Equal(t, 0, code, errs)
	t.Logf("ledger --data DIR --scope planner:\n%s", out)
	want := `ledger of scope planner  version 2  at TIME  (amounts in dollars)
└─ P active  max $1.000000  reserved -  outstanding $0.400000  actual $0.000000  "plan the trip"
   └─ $ reservation rv-planner for researcher  amount $0.400000  settled $0.000000  bound  lease ends TIME
      └─ [researcher] R waiting  max $0.400000  reserved $0.400000  outstanding $0.100000  actual $0.000000  "research flights"
         └─ $ reservation rv-research for researcher  amount $0.100000  settled $0.000000  bound  lease ends TIME
            └─ [researcher] C active  max $0.100000  reserved $0.100000  outstanding $0.000000  actual $0.020000  "compare fares"
`
	assert.Equal(t, want, anonymize(out, sp))
}

// Bad input: flags (exit 2), an unknown scope (an empty ledger), a frame
// the scope does not have (the server's error, exit 1).
func TestLedgerBadInput(t *testing.T) {
	dir := t.TempDir()
	withLedgerServer(t, dir, true, func(srv *actors.Server, c *actors.Client, ctx context.Context) { startSpawn(t, srv, c, ctx, false) })
	for _, args := range [][]string{
		{"--scope", "planner"},
		{"--data", dir},
		{"--data", dir, "--server", "127.0.0.1:1", "--scope", "planner"},
		{"--data", dir, "--scope", "planner", "--depth", "-1"},
		{"--data", dir, "--scope", "planner", "extra"},
	} {
		_, _, code := runLedger(t, args...)
		assert.Equal(t, 2, code, "%v", args)
	}
	out, errs, code := runLedger(t, "--data", dir, "--scope", "nobody")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "empty ledger: scope nobody has no live frame and keeps no reservation")

	out, errs, code = runLedger(t, "--data", dir, "--scope", "planner", "--frame", "no-such-frame")
	assert.Equal(t, 1, code, out)
	assert.Contains(t, errs, "stateindex ledger: scope \"planner\"")
	assert.Contains(t, errs, "no-such-frame")

	_, errs, code = runLedger(t, "--data", t.TempDir(), "--scope", "planner")
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "no data file")

	_, errs, code = runLedger(t, "--server", "nohost", "--scope", "planner")
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "want host:port")
}

func TestDollars(t *testing.T) {
	for m, want := range map[int64]string{0: "$0.000000", 250_000: "$0.250000", 1_000_000: "$1.000000", 12_345_678: "$12.345678", -5: "-$0.000005"} {
		assert.Equal(t, want, dollars(m))
	}
}
