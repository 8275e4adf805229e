package upgrade

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/tokenizer"
)

// writeFixtureEnv names the directory TestWriteFixture writes a fixture to
// (e.g. STATEINDEX_WRITE_FIXTURE=$PWD/testdata/v2); unset, it is skipped.
const writeFixtureEnv = "STATEINDEX_WRITE_FIXTURE"

// Settings the fixture is written with.
const (
	genShards        = 4
	genSnapshotEvery = 8
	genClockStep     = 250 * time.Millisecond
	// Small segments keep the committed journal small; a store reads the
	// size of existing segments from their files.
	genJournalSegmentBytes = 64 << 10
	// Automatic continuation at 90% of a frame's context window (v4 on).
	// carrying at most genResumeCeiling tokens of trailing context (the
	// fixture's windows are small).
	genContinueAt    = frames.DefaultContinueAt
	genResumeCeiling = 60
	// The scopes whose names start with genCounterPrefix count under
	// o200k_base while the scenario is written; the tail's server has no
	// such rule and does not know o200k_base, so it recounts them under the
	// estimate before serving their first request (scope.counter_changed).
	genCounterPrefix = "tok-"
	genCounterName   = "o200k_base"
	// genRetentionScope's history goes through a retention pass, after a
	// clock jump past the request horizon (its ids before the jump are
	// UUIDv7 ids the serving release refuses as expired).
	genRetentionScope = "theta"
	genClockJump      = time.Duration(frames.DefaultRequestHorizon) + time.Hour
)

var genClockStart = time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC).UnixNano()

// TestWriteFixture writes a fixture with this release's code: a data
// directory written through the real BoltStore, Server and Client, with
// fixed keys, a fake clock and fixed ids, and the manifest of what it
// answered. It refuses to overwrite: a released fixture is never rewritten.
// Run: STATEINDEX_WRITE_FIXTURE=$PWD/testdata/vN go test -run TestWriteFixture ./internal/upgrade
func TestWriteFixture(t *testing.T) {
	dir := os.Getenv(writeFixtureEnv)
	if dir == "" {
		t.Skip("set " + writeFixtureEnv + "=DIR to write a fixture")
	}
	_, err := os.Stat(dir)
	require.ErrorIs(t, err, os.ErrNotExist, "%s exists: a fixture is never rewritten, write a new release's directory", dir)
	m := writeFixture(t, dir)
	t.Logf("wrote %s: %d steps, %d scopes, last seq %d", dir, len(m.Steps), len(m.Scopes), m.LastSeq)
}

// fixedBytes derives n reproducible bytes from a label.
func fixedBytes(label string, n int) []byte {
	sum := sha256.Sum256([]byte("stateindex upgrade fixture/" + label))
	return sum[:n]
}

// idSource returns ids like actors.NewID's (32 hex digits), reproducible.
func idSource(label string) func() string {
	var n atomic.Uint64
	return func() string {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], n.Add(1))
		sum := sha256.Sum256(append([]byte("stateindex upgrade fixture/"+label+"/"), b[:]...))
		return hex.EncodeToString(sum[:16])
	}
}

func writeFixture(t *testing.T, dir string) *Manifest {
	data := filepath.Join(dir, DataDir)
	require.NoError(t, os.MkdirAll(data, 0o700))
	tokenKey := fixedBytes("server.key", 32)
	seed := fixedBytes("checkpoint.key", ed25519.SeedSize)
	signing := ed25519.NewKeyFromSeed(seed)
	require.NoError(t, os.WriteFile(filepath.Join(data, serverKeyFile), tokenKey, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(data, checkpointKeyFile), seed, 0o600))
	pub := hex.EncodeToString(signing.Public().(ed25519.PublicKey)) + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(data, checkpointPubFile), []byte(pub), 0o644))

	// The store is written in a scratch directory and copied into the
	// fixture while it is open (see below); the keys are copied with it.
	live := t.TempDir()
	require.NoError(t, copyDir(live, data))
	// Records wait in the journal (bbolt gets them when a snapshot asks for
	// an application, or at the Flush below); the last scope's are in the
	// journal alone.
	store, err := eventstore.Open(filepath.Join(live, dbFile), &eventstore.Options{
		JournalSegmentBytes: genJournalSegmentBytes, ApplyInterval: time.Hour, ApplyBytes: 1 << 30})
	require.NoError(t, err)
	clk := newClock(genClockStart, genClockStep)
	cfg := actors.DefaultConfig()
	cfg.TokenKey, cfg.SigningKey = tokenKey, signing
	cfg.Shards, cfg.SnapshotEvery = genShards, genSnapshotEvery
	cfg.Clock, cfg.NewID = clk.Now, idSource("server")
	cfg.Logger = quietLogger()
	cfg.Frames.ContinueAt = genContinueAt
	cfg.Frames.ResumeCeiling = genResumeCeiling
	cfg.Counters = []actors.CounterRule{{Prefix: genCounterPrefix, Name: genCounterName, Counter: tokenizer.MustNew(genCounterName)}}
	sys := quietSystem()
	srv, err := actors.Start(sys, store, cfg)
	require.NoError(t, err)

	g := &gen{t: t, c: srv.Client(), srv: srv, sys: sys, cfg: cfg, store: store, clk: clk, rid: idSource("request"), uuid: idSource("uuid7"),
		m: &Manifest{Release: filepath.Base(dir), ClockStart: genClockStart, SnapshotEvery: genSnapshotEvery, Shards: genShards,
			JournalSegmentBytes: genJournalSegmentBytes, ContinueAt: genContinueAt, ResumeCeiling: genResumeCeiling}}
	g.retained() // first: the clock jumps past the request horizon after it
	g.scenario()
	g.chains()
	g.ledger()

	g.srv.Stop() // waits for background snapshots and checkpoint signatures
	g.sys.Shutdown()

	// The tail: bbolt covers the scenario; a last scope is written by a
	// server that never snapshots (a snapshot makes the store apply the
	// journal), so its records are in the journal only. Its outbox is off:
	// the ledger's last settlement is left pending (ledgerPending), as a
	// crash before the delivery leaves it.
	require.NoError(t, store.Flush(context.Background()))
	cfg.SnapshotEvery = 1 << 40
	cfg.Counters = nil // the tok- scopes are recounted under the estimate
	cfg.OutboxOff = true
	sys = quietSystem()
	srv, err = actors.Start(sys, store, cfg)
	require.NoError(t, err)
	g.c, g.srv = srv.Client(), srv
	g.tail()
	g.muTail()
	g.ledgerPending()
	g.reads()
	g.ledgerReads()
	srv.Stop()
	sys.Shutdown()
	g.snapshotsHoldChains()
	g.snapshotsHoldLedger()
	g.m.LastSeq, err = store.LastSeq(context.Background())
	require.NoError(t, err)
	g.m.Ledger.OutboxScopes, err = outboxScopes(context.Background(), store)
	require.NoError(t, err)
	require.Equal(t, []string{genLedgerPending}, g.m.Ledger.OutboxScopes, "the outbox table lists the scope of the pending settlement alone")
	// What a crash leaves: the data file and the journal, copied while the
	// store is open, with acknowledged records not yet applied to bbolt.
	js := store.JournalStats()
	require.Positive(t, js.Pending, "the journal must hold records bbolt lacks")
	g.m.JournalPending = js.Pending
	require.NoError(t, copyFile(filepath.Join(data, dbFile), filepath.Join(live, dbFile)))
	jdir := filepath.Join(data, filepath.Base(eventstore.JournalDir(dbFile)))
	require.NoError(t, copyDir(jdir, eventstore.JournalDir(filepath.Join(live, dbFile))))
	g.m.ClockEnd = clk.last()
	g.ledgerDelivered(cfg) // after the copy: the scratch store alone sees it
	require.NoError(t, store.Close())
	b, err := g.m.Encode()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, ManifestFile), b, 0o644))
	return g.m
}

// gen sends a scenario's steps and records them.
type gen struct {
	t     *testing.T
	c     *actors.Client
	srv   *actors.Server
	sys   *actor.ActorSystem
	cfg   actors.Config
	store *eventstore.BoltStore
	clk   *clock
	m     *Manifest
	rid   func() string
	uuid  func() string // the random part of UUIDv7 request ids
	// toRead are the chains reads() records.
	toRead []chainOf
	mu     string // tok-mu's root frame
}

// chainOf names a chain's links to read at the end.
type chainOf struct {
	scope string
	links []string
	query []Read // SearchChain requests (Scope and FrameID filled by reads)
}

// do sends a step (a request id is drawn when it has none) and records it
// with its reply.
func (g *gen) do(s Step) Reply {
	g.t.Helper()
	s.N = len(g.m.Steps) + 1
	if s.RequestID == "" {
		s.RequestID = g.rid() // as the Client would fill it, reproducibly
	}
	req, err := Build(s)
	require.NoError(g.t, err)
	s.WireV1, s.DigestV1, err = Wire(req)
	require.NoError(g.t, err)
	reply, err := Send(context.Background(), g.c, req)
	require.NoError(g.t, err, "step %d %s on %s", s.N, s.Op, s.Scope)
	s.Reply, err = ReplyOf(reply)
	require.NoError(g.t, err)
	g.m.Steps = append(g.m.Steps, s)
	return s.Reply
}

// facts records a scope's state once its last step is done: GetStack of
// the top of the stack and the ResumeActor reply last recorded for it.
func (g *gen) facts(scope string, unused *Token) {
	g.t.Helper()
	last := g.m.Steps[len(g.m.Steps)-1]
	require.Equal(g.t, "ResumeActor", last.Op)
	require.Equal(g.t, scope, last.Scope)
	f := ScopeFacts{Scope: scope, Version: last.Reply.Version, Pending: last.Reply.Pending, UnusedToken: unused}
	ra, err := Build(Step{Op: "ResumeActor", Scope: scope, RequestID: last.RequestID}) // a repeat: appends nothing
	require.NoError(g.t, err)
	reply, err := Send(context.Background(), g.c, ra)
	require.NoError(g.t, err)
	f.Live, err = LiveOf(reply)
	require.NoError(g.t, err)
	if len(f.Live) > 0 {
		req, err := Build(Step{Op: OpGetStack, Scope: scope, FrameID: f.Live[len(f.Live)-1].ID})
		require.NoError(g.t, err)
		reply, err := Send(context.Background(), g.c, req)
		require.NoError(g.t, err)
		f.Stack, err = StackOf(reply)
		require.NoError(g.t, err)
	}
	g.m.Scopes = append(g.m.Scopes, f)
}

func str(s string) *string { return &s }

func prio(p compaction.Priority) *compaction.Priority { return &p }

func ver(v int64) *int64 { return &v }

// scenario exercises every mutating operation over four scopes.
func (g *gen) scenario() {
	// alpha: nested frames, context, results, tool calls (one left in
	// doubt), usage, both compaction strategies, an update guarded by
	// IfVersion, suspend and resume, a pop; enough events for snapshots.
	const alpha = "alpha"
	root := g.do(Step{Op: "PushFrame", Scope: alpha, RequestID: "alpha-push-root", Goal: str("plan the offsite"),
		Inputs: []byte(`{"city":"Lisbon","people":12}`), Budget: &budget.TokenBudget{Total: 20000, Reserved: 500, MaxSubframeDepth: 3},
		Limits: &budget.Limits{Tokens: 50000, Turns: 40, Spawns: 8}}).FrameID
	child := g.do(Step{Op: "PushFrame", Scope: alpha, RequestID: "alpha-push-child", ParentID: root, Goal: str("book flights"),
		Budget: &budget.TokenBudget{Total: 4000}}).FrameID
	grand := g.do(Step{Op: "PushFrame", Scope: alpha, ParentID: child, Goal: str("compare fares"),
		Budget: &budget.TokenBudget{Total: 1000}, Limits: &budget.Limits{Turns: 5}}).FrameID
	g.do(Step{Op: "AddContextHandle", Scope: alpha, RequestID: "alpha-ctx-brief", FrameID: child, HandleID: "h-brief",
		Kind: "user_message", Priority: prio(compaction.High), Content: "Twelve people, arriving Monday, leaving Thursday."})
	g.do(Step{Op: "AddContextHandle", Scope: alpha, FrameID: child, Kind: "note", Priority: prio(compaction.Low),
		Content: "Earlier search results, mostly expensive direct flights from the northern hubs; keep only if nothing better turns up."})
	g.do(Step{Op: "AddContextHandle", Scope: alpha, FrameID: child, Kind: "note", Priority: prio(compaction.Background),
		Content: "Weather in Lisbon in late November: mild, some rain."})
	g.do(Step{Op: "AddResult", Scope: alpha, RequestID: "alpha-result-fares", FrameID: child, ResultID: "r-fares",
		Kind: "document", Ref: "s3://offsite/fares.csv", Summary: "fares of 14 carriers"})
	g.do(Step{Op: "AddResult", Scope: alpha, FrameID: grand, Kind: "table", Ref: "mem://cheapest"})
	g.do(Step{Op: "StartToolCall", Scope: alpha, RequestID: "alpha-tool-start", FrameID: grand, CallID: "call-search",
		Name: "search_fares", Input: []byte(`{"from":"AMS","to":"LIS"}`)})
	g.do(Step{Op: "FinishToolCall", Scope: alpha, RequestID: "alpha-tool-finish", FrameID: grand, CallID: "call-search",
		Output: "TP 662 €129; KL 1693 €154"})
	g.do(Step{Op: "StartToolCall", Scope: alpha, RequestID: "alpha-tool-in-doubt", FrameID: child,
		Name: "charge_card", Input: []byte(`{"amount_cents":154800}`)}) // never finished: in doubt
	g.do(Step{Op: "RecordUsage", Scope: alpha, RequestID: "alpha-usage", FrameID: grand,
		Cost: &budget.Cost{InputTokens: 300, OutputTokens: 120, Turns: 1, SpendMicros: 2100}})
	g.do(Step{Op: "CompactContext", Scope: alpha, RequestID: "alpha-compact-priority", FrameID: child, TargetTokens: 30,
		Strategy: &Strategy{Kind: "priority_based"}})
	v := g.m.Steps[len(g.m.Steps)-1].Reply.Version
	g.do(Step{Op: "UpdateFrame", Scope: alpha, RequestID: "alpha-update", IfVersion: ver(v), FrameID: child,
		Goal: str("book flights (economy)"), Limits: &budget.Limits{Tokens: 8000, Turns: 20}, ContextHash: str("sha256:5f1d")})
	tok := g.do(Step{Op: "SuspendFrame", Scope: alpha, RequestID: "alpha-suspend", FrameID: grand, SuspendAs: string(frames.SuspendApproval),
		Note: "fare above policy: needs sign-off"}).Suspension
	g.do(Step{Op: "ResumeFrame", Scope: alpha, RequestID: "alpha-resume-frame", Token: tok.Token})
	g.do(Step{Op: "PopFrame", Scope: alpha, RequestID: "alpha-pop-grand", FrameID: grand, Status: frames.StatusCompleted.String(),
		Reason: uint8(frames.ReasonAssistantTurnCommitted)})
	for i, c := range []string{"Agenda draft: day one workshops.", "Agenda draft: day two talks.", "Agenda draft: day three outing."} {
		g.do(Step{Op: "AddContextHandle", Scope: alpha, FrameID: root, Kind: "draft", Priority: prio(compaction.Medium), Content: c,
			HandleID: []string{"h-day1", "", "h-day3"}[i]})
	}
	g.do(Step{Op: "CompactContext", Scope: alpha, RequestID: "alpha-compact-summarize", FrameID: root, TargetTokens: 18,
		Strategy: &Strategy{Kind: "summarize_oldest", KeepRecent: 1}})
	g.do(Step{Op: "ResumeActor", Scope: alpha, RequestID: "alpha-resume-actor"})
	g.facts(alpha, nil)

	// beta: usage crossing a limit suspends the frame; its token is never
	// used.
	const beta = "beta"
	broot := g.do(Step{Op: "PushFrame", Scope: beta, RequestID: "beta-push", Goal: str("summarize the inbox"),
		Budget: &budget.TokenBudget{Total: 5000}, Limits: &budget.Limits{Tokens: 1000}}).FrameID
	g.do(Step{Op: "AddContextHandle", Scope: beta, RequestID: "beta-system", FrameID: broot, Kind: "system",
		Priority: prio(compaction.Critical), Content: "You summarize email threads in three lines."})
	unused := g.do(Step{Op: "RecordUsage", Scope: beta, RequestID: "beta-usage-over", FrameID: broot,
		Cost: &budget.Cost{InputTokens: 800, OutputTokens: 300, Turns: 1}}).Suspension
	require.NotNil(g.t, unused, "the usage must cross the limit")
	g.do(Step{Op: "ResumeActor", Scope: beta, RequestID: "beta-resume-actor"})
	g.facts(beta, unused)

	// gamma: a failed child, then a root popped with cascade, cancelling
	// its live descendants (the run finishes: a signed checkpoint).
	const gamma = "gamma"
	groot := g.do(Step{Op: "PushFrame", Scope: gamma, RequestID: "gamma-push-root", Goal: str("nightly batch"),
		Budget: &budget.TokenBudget{Total: 9000}}).FrameID
	gchild := g.do(Step{Op: "PushFrame", Scope: gamma, ParentID: groot, Goal: str("shard 1"), Budget: &budget.TokenBudget{Total: 2000}}).FrameID
	g.do(Step{Op: "PushFrame", Scope: gamma, ParentID: gchild, Goal: str("shard 1 part a"), Budget: &budget.TokenBudget{Total: 500}})
	gchild2 := g.do(Step{Op: "PushFrame", Scope: gamma, ParentID: groot, Goal: str("shard 2"), Budget: &budget.TokenBudget{Total: 2000}}).FrameID
	g.do(Step{Op: "RecordUsage", Scope: gamma, FrameID: gchild2, Cost: &budget.Cost{InputTokens: 50, OutputTokens: 10}})
	g.do(Step{Op: "PopFrame", Scope: gamma, RequestID: "gamma-pop-failed", FrameID: gchild2, Status: frames.StatusFailed.String()})
	g.do(Step{Op: "PopFrame", Scope: gamma, RequestID: "gamma-pop-cascade", FrameID: groot, Status: frames.StatusCancelled.String(),
		Cascade: true})
	g.do(Step{Op: "ResumeActor", Scope: gamma, RequestID: "gamma-resume-actor"})
	g.facts(gamma, nil)

	// delta (a scope name using every allowed punctuation): a child's cost pushes its parent over a
	// limit when it is popped (the parent is suspended); the limit is
	// raised and the parent resumed, then suspended by hand and left so.
	const delta = "tenant-7:delta.triage_2"
	droot := g.do(Step{Op: "PushFrame", Scope: delta, RequestID: "delta-push-root", Goal: str("triage tickets"),
		Budget: &budget.TokenBudget{Total: 3000}, Limits: &budget.Limits{Tokens: 500}}).FrameID
	dchild := g.do(Step{Op: "PushFrame", Scope: delta, RequestID: "delta-push-child", ParentID: droot, Goal: str("read ticket 42"),
		Budget: &budget.TokenBudget{Total: 1000}}).FrameID
	g.do(Step{Op: "RecordUsage", Scope: delta, RequestID: "delta-usage", FrameID: dchild, Cost: &budget.Cost{InputTokens: 450, OutputTokens: 150}})
	ps := g.do(Step{Op: "PopFrame", Scope: delta, RequestID: "delta-pop-child", FrameID: dchild, Status: frames.StatusCompleted.String()}).ParentSuspension
	require.NotNil(g.t, ps, "the child's cost must push the parent over its limit")
	g.do(Step{Op: "UpdateFrame", Scope: delta, RequestID: "delta-raise-limit", FrameID: droot, Limits: &budget.Limits{Tokens: 5000},
		Inputs: []byte("priority=high"), SetInputs: true})
	g.do(Step{Op: "ResumeFrame", Scope: delta, RequestID: "delta-resume-parent", Token: ps.Token})
	dtok := g.do(Step{Op: "SuspendFrame", Scope: delta, RequestID: "delta-suspend", FrameID: droot, SuspendAs: string(frames.SuspendError),
		Note: "ticket system down", TTLMillis: (48 * time.Hour).Milliseconds()}).Suspension
	g.do(Step{Op: "ResumeActor", Scope: delta, RequestID: "delta-resume-actor"})
	g.facts(delta, dtok)
}

// tail writes the scope a journal fixture leaves in its journal alone: a
// stack of two frames, context, a finished tool call, usage, a result and a
// suspension never resumed.
func (g *gen) tail() {
	const epsilon = "epsilon"
	root := g.do(Step{Op: "PushFrame", Scope: epsilon, RequestID: "epsilon-push-root", Goal: str("answer the survey"),
		Budget: &budget.TokenBudget{Total: 6000}, Limits: &budget.Limits{Tokens: 20000, Turns: 10}}).FrameID
	child := g.do(Step{Op: "PushFrame", Scope: epsilon, RequestID: "epsilon-push-child", ParentID: root, Goal: str("fetch the questions"),
		Budget: &budget.TokenBudget{Total: 1500}}).FrameID
	g.do(Step{Op: "AddContextHandle", Scope: epsilon, RequestID: "epsilon-ctx", FrameID: child, HandleID: "h-form",
		Kind: "tool_output", Priority: prio(compaction.High), Content: "Q1: name. Q2: team. Q3: favourite editor."})
	g.do(Step{Op: "StartToolCall", Scope: epsilon, RequestID: "epsilon-tool-start", FrameID: child, CallID: "call-form",
		Name: "fetch_form", Input: []byte(`{"id":"survey-9"}`)})
	g.do(Step{Op: "FinishToolCall", Scope: epsilon, RequestID: "epsilon-tool-finish", FrameID: child, CallID: "call-form",
		Output: "3 questions"})
	g.do(Step{Op: "RecordUsage", Scope: epsilon, RequestID: "epsilon-usage", FrameID: child,
		Cost: &budget.Cost{InputTokens: 120, OutputTokens: 40, Turns: 1}})
	g.do(Step{Op: "AddResult", Scope: epsilon, RequestID: "epsilon-result", FrameID: child, ResultID: "r-form",
		Kind: "document", Ref: "mem://survey-9", Summary: "the survey's questions"})
	tok := g.do(Step{Op: "SuspendFrame", Scope: epsilon, RequestID: "epsilon-suspend", FrameID: root, SuspendAs: string(frames.SuspendApproval),
		Note: "answers need the user's approval"}).Suspension
	g.do(Step{Op: "ResumeActor", Scope: epsilon, RequestID: "epsilon-resume-actor"})
	g.facts(epsilon, tok)
}
