package upgrade

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
)

// The v4 workload (issue 12): handle roles, context windows, calibration
// samples, explicit and automatic continuations, chains resumed as a
// sibling and as a new root, a retention pass that leaves chain
// tombstones, and a scope whose token counter changes across a restart.

// uuid7 returns a UUIDv7 request id stamped with the fake clock's latest
// reading (its other bits reproducible), as the Client mints them: the
// serving release reads the first-send time in it.
func (g *gen) uuid7() string {
	b, err := hex.DecodeString(g.uuid())
	require.NoError(g.t, err)
	ms := uint64(g.clk.last() / 1e6)
	b[0], b[1], b[2], b[3], b[4], b[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
	b[6] = 0x70 | b[6]&0x0F
	b[8] = 0x80 | b[8]&0x3F
	h := hex.EncodeToString(b)
	id := h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
	_, ok := frames.RequestIDTime(id)
	require.True(g.t, ok, "%s is a UUIDv7", id)
	return id
}

// turns adds n handles to frame, user and assistant in turn, each of
// about size bytes, and returns the last reply.
func (g *gen) turns(scope, frame, topic string, n, size int, expired bool) Reply {
	g.t.Helper()
	var last Reply
	for i := range n {
		role := []string{string(frames.RoleUser), string(frames.RoleAssistant)}[i%2]
		text := fmt.Sprintf("%s, turn %d of the %s: ", topic, i/2, role)
		text += strings.Repeat("lorem ipsum ", (size-len(text))/12+1)[:size-len(text)]
		s := Step{Op: "AddContextHandle", Scope: scope, FrameID: frame, Kind: "message", Role: role,
			Priority: prio(compaction.Medium), Content: text, Expired: expired}
		if expired {
			s.RequestID = g.uuid7()
		}
		last = g.do(s)
	}
	return last
}

// retained writes genRetentionScope: a chain of two links (the first
// continued before it spent anything) and a later run, all finished; the
// clock then jumps past the request horizon and a retention pass removes
// them, leaving the chain's links as tombstones. The pass's ApplyRetention
// is recorded as a step (resent with its request id, as a pass after a
// crash would).
func (g *gen) retained() {
	const scope = genRetentionScope
	x := func(s Step) Reply { // a request stamped before the jump
		s.RequestID, s.Expired = g.uuid7(), true
		return g.do(s)
	}
	root := x(Step{Op: "PushFrame", Scope: scope, Goal: str("nightly digest"), Budget: &budget.TokenBudget{Total: 100_000},
		ContextWindow: 400}).FrameID
	task := x(Step{Op: "PushFrame", Scope: scope, ParentID: root, Goal: str("digest of Monday"),
		Budget: &budget.TokenBudget{Total: 10_000}}).FrameID
	g.turns(scope, task, "monday digest", 6, 160, true)
	head := x(Step{Op: "ContinueFrame", Scope: scope, FrameID: task, ResumeCeiling: 60}).FrameID // zero cost
	headEnd := x(Step{Op: "PopFrame", Scope: scope, FrameID: head, Status: frames.StatusCompleted.String()}).Version
	// Later runs, so that the scope's latest snapshot (what the cut may
	// reach) lies past the chain: the cut then falls between two requests.
	// (With the runs ending before the next snapshot, the pass cuts at the
	// first link's frame.popped, inside ContinueFrame's append, and
	// stateindex verify reports the request's index entry missing: see
	// the report of issue 12's upgrade fixture.)
	for _, day := range []string{"Tuesday", "Wednesday", "Thursday", "Friday"} {
		run := x(Step{Op: "PushFrame", Scope: scope, ParentID: root, Goal: str("digest of " + day),
			Budget: &budget.TokenBudget{Total: 2_000}}).FrameID
		x(Step{Op: "PopFrame", Scope: scope, FrameID: run, Status: frames.StatusCompleted.String()})
	}

	// A restart: Stop waits for the background snapshots, so the pass
	// (which cuts at most as far as the latest snapshot) sees the same
	// ones at every run.
	g.restart()
	g.clk.advance(genClockJump)
	ctx := context.Background()
	require.NoError(g.t, g.srv.StartRetention(actors.RetentionConfig{
		Policy: func(s string) (frames.RetentionPolicy, string, bool) {
			return frames.RetentionPolicy{OnCompletion: frames.CompletionDelete}, "", s == scope
		}}))
	rep, err := g.srv.RunRetention(ctx)
	require.NoError(g.t, err)
	require.Empty(g.t, rep.Errors)
	require.Len(g.t, rep.Scopes, 1)
	sr := rep.Scopes[0]
	require.GreaterOrEqual(g.t, sr.Through, headEnd, "the pass removes the chain's links")
	require.Positive(g.t, sr.Removed)
	base, err := g.store.StreamBase(ctx, scope)
	require.NoError(g.t, err)
	require.Equal(g.t, sr.Through, base.Version)
	sum := sha256.Sum256([]byte(scope)) // the pass's request id (actors.retentionRequestID)
	rid := "retention:" + hex.EncodeToString(sum[:12]) + ":" + strconv.FormatInt(sr.Through, 10)
	seq, err := g.store.LastSeq(ctx)
	require.NoError(g.t, err)
	g.do(Step{Op: "ApplyRetention", Scope: scope, RequestID: rid, Through: sr.Through, Hash: hex.EncodeToString(base.Hash[:]),
		Runs: int64(sr.Runs), Why: sr.Why})
	now, err := g.store.LastSeq(ctx)
	require.NoError(g.t, err)
	require.Equal(g.t, seq, now, "the recorded ApplyRetention is the pass's own: a resend appends nothing")

	g.do(Step{Op: "AddContextHandle", Scope: scope, FrameID: root, Kind: "note", Role: string(frames.RoleSystem),
		Priority: prio(compaction.High), Content: "Digests older than a week are removed; their chains keep tombstones."})
	g.do(Step{Op: "ResumeActor", Scope: scope, RequestID: scope + "-resume-actor"})
	g.facts(scope, nil)
	// No SearchChain here: of a chain whose every link retention deleted,
	// it answers frame_not_found (GetChain answers the tombstones); see
	// the report of issue 12's upgrade fixture.
	g.toRead = append(g.toRead, chainOf{scope: scope, links: []string{task, head}})
}

// restart stops the server (waiting for its background snapshots and
// signatures) and starts another with the same configuration.
func (g *gen) restart() {
	g.srv.Stop()
	g.sys.Shutdown()
	g.sys = quietSystem()
	srv, err := actors.Start(g.sys, g.store, g.cfg)
	require.NoError(g.t, err)
	g.srv, g.c = srv, srv.Client()
}

// chains writes the chain scopes.
func (g *gen) chains() {
	// kappa: a task with roles, a tool call, usage with a calibration
	// sample, an explicit continuation (of a link that spent), automatic
	// continuations as its context fills (a call in doubt carried), the
	// chain finished and then resumed by a user as a sibling, left live.
	const kappa = "kappa"
	root := g.do(Step{Op: "PushFrame", Scope: kappa, RequestID: "kappa-push-root", Goal: str("write the quarterly report"),
		Budget: &budget.TokenBudget{Total: 200_000}, Limits: &budget.Limits{Tokens: 100_000, Turns: 50}, ContextWindow: 1_000}).FrameID
	link1 := g.do(Step{Op: "PushFrame", Scope: kappa, RequestID: "kappa-push-task", ParentID: root, Goal: str("draft section one"),
		Budget: &budget.TokenBudget{Total: 20_000}, Limits: &budget.Limits{Turns: 20}, ContextWindow: 400}).FrameID
	g.do(Step{Op: "AddContextHandle", Scope: kappa, RequestID: "kappa-system", FrameID: link1, HandleID: "h-style", Kind: "instruction",
		Role: string(frames.RoleSystem), Priority: prio(compaction.Critical), Content: "You write concise financial prose."})
	g.do(Step{Op: "AddContextHandle", Scope: kappa, RequestID: "kappa-user", FrameID: link1, HandleID: "h-ask", Kind: "message",
		Role: string(frames.RoleUser), Priority: prio(compaction.High),
		Content: "Draft section one from the numbers: revenue 4.2M EUR, margin 31%, see /reports/q3/numbers.csv."})
	g.do(Step{Op: "StartToolCall", Scope: kappa, RequestID: "kappa-tool-start", FrameID: link1, CallID: "call-numbers",
		Name: "read_csv", Input: []byte(`{"path":"/reports/q3/numbers.csv"}`)})
	g.do(Step{Op: "FinishToolCall", Scope: kappa, RequestID: "kappa-tool-finish", FrameID: link1, CallID: "call-numbers",
		Output: "revenue,4200000\nmargin,0.31\nheadcount,48"})
	g.turns(kappa, link1, "section one", 6, 200, false)
	g.do(Step{Op: "RecordUsage", Scope: kappa, RequestID: "kappa-usage", FrameID: link1,
		Cost:        &budget.Cost{InputTokens: 380, OutputTokens: 160, Turns: 1, SpendMicros: 4100},
		Calibration: &Calibration{PackTokens: 350, ProviderInputTokens: 380, Counter: frames.EstimateCounterName}})
	link2 := g.do(Step{Op: "ContinueFrame", Scope: kappa, RequestID: "kappa-continue", FrameID: link1, ResumeCeiling: 60}).FrameID
	g.do(Step{Op: "StartToolCall", Scope: kappa, RequestID: "kappa-tool-in-doubt", FrameID: link2, CallID: "call-publish",
		Name: "publish_draft", Input: []byte(`{"section":1}`)}) // never finished: carried in doubt
	links := []string{link1, link2}
	head := link2
	for i := 0; i < 12 && len(links) < 4; i++ {
		r := g.turns(kappa, head, fmt.Sprintf("section one, revision %d", i), 1, 240, false)
		if r.Continued != nil {
			require.Equal(g.t, head, r.Continued.From)
			head = r.Continued.To
			links = append(links, head)
		}
	}
	require.Len(g.t, links, 4, "the context filled twice: two automatic continuations")
	g.do(Step{Op: "PopFrame", Scope: kappa, RequestID: "kappa-pop-head", FrameID: head, Status: frames.StatusCompleted.String()})
	link5 := g.do(Step{Op: "ResumeChain", Scope: kappa, RequestID: "kappa-resume-chain", ChainID: link1,
		Message: "Add a paragraph on risks: FX exposure and the 48-person headcount."}).FrameID
	links = append(links, link5)
	g.do(Step{Op: "ResumeActor", Scope: kappa, RequestID: "kappa-resume-actor"})
	g.facts(kappa, nil)
	g.toRead = append(g.toRead, chainOf{scope: kappa, links: links, query: []Read{
		{Query: "revenue"}, {Query: `margin,?\s*(0\.)?31`, Regex: true, Limit: 2}, {Query: "revision"}}})

	// lambda: a root continued before it spent anything, finished, and
	// resumed by a user as a new root with its own budget.
	const lambda = "lambda"
	l1 := g.do(Step{Op: "PushFrame", Scope: lambda, RequestID: "lambda-push", Goal: str("triage the backlog"),
		Budget: &budget.TokenBudget{Total: 30_000}, ContextWindow: 400}).FrameID
	g.turns(lambda, l1, "backlog triage", 6, 150, false)
	l2 := g.do(Step{Op: "ContinueFrame", Scope: lambda, RequestID: "lambda-continue", FrameID: l1, ResumeCeiling: 60,
		Summary: "Triaged 14 of 31 issues; #212 and #219 block the release."}).FrameID
	g.do(Step{Op: "PopFrame", Scope: lambda, RequestID: "lambda-pop", FrameID: l2, Status: frames.StatusCompleted.String()})
	l3 := g.do(Step{Op: "ResumeChain", Scope: lambda, RequestID: "lambda-resume-chain", ChainID: l2,
		Message: "Reopen: two new bugs came in (#240, #241).", Budget: &budget.TokenBudget{Total: 12_000},
		Limits: &budget.Limits{Turns: 10}}).FrameID
	g.do(Step{Op: "ResumeActor", Scope: lambda, RequestID: "lambda-resume-actor"})
	g.facts(lambda, nil)
	g.toRead = append(g.toRead, chainOf{scope: lambda, links: []string{l1, l2, l3}, query: []Read{{Query: "#2[0-9]{2}", Regex: true}}})

	// tok-mu: counted under o200k_base (the first counting request writes
	// the counter change first); the tail recounts it.
	const mu = genCounterPrefix + "mu"
	mroot := g.do(Step{Op: "PushFrame", Scope: mu, RequestID: "mu-push", Goal: str("translate the menu"),
		Budget: &budget.TokenBudget{Total: 8_000}, ContextWindow: 4_000}).FrameID
	g.do(Step{Op: "AddContextHandle", Scope: mu, RequestID: "mu-user", FrameID: mroot, Kind: "message", Role: string(frames.RoleUser),
		Priority: prio(compaction.High), Content: "Translate: 早餐包括咖啡和面包。午餐从十二点开始。"})
	g.do(Step{Op: "AddContextHandle", Scope: mu, RequestID: "mu-assistant", FrameID: mroot, Kind: "message",
		Role: string(frames.RoleAssistant), Priority: prio(compaction.Medium), Content: "Breakfast includes coffee and bread. Lunch starts at noon."})
	for i, c := range []string{"菜单第二页：甜点。", "Page two of the menu: desserts.", "价格以欧元计。", "Prices are in euros."} {
		g.do(Step{Op: "AddContextHandle", Scope: mu, FrameID: mroot, Kind: "message", Priority: prio(compaction.Medium),
			Role: []string{string(frames.RoleUser), string(frames.RoleAssistant)}[i%2], Content: c})
	} // eight events: a snapshot under o200k_base
	g.mu = mroot
}

// muTail touches tok-mu on the tail's server: its first request waits
// for the recount under the estimate (scope.counter_changed), then adds a
// handle counted under it.
func (g *gen) muTail() {
	const mu = genCounterPrefix + "mu"
	var before Step
	for _, s := range g.m.Steps {
		if s.Scope == mu {
			before = s
		}
	}
	r := g.do(Step{Op: "AddContextHandle", Scope: mu, RequestID: "mu-after-restart", FrameID: g.mu, Kind: "message",
		Role: string(frames.RoleUser), Priority: prio(compaction.High), Content: "Also: 晚餐在七点。"})
	require.Equal(g.t, before.Reply.Version+2, r.Version, "the recount's scope.counter_changed, then the handle")
	g.do(Step{Op: "ResumeActor", Scope: mu, RequestID: "mu-resume-actor"})
	g.facts(mu, nil)
}

// snapshotsHoldChains checks that the fixture's snapshots carry the state
// this release added, so that a later release decodes it from a snapshot
// and not only from a replay: chains with tombstones (theta), a chain and
// calibration samples (kappa), a scope's counter (tok-mu, snapshotted
// while it counted under o200k_base).
func (g *gen) snapshotsHoldChains() {
	load := g.loadSnapshot
	tombs := 0
	for _, c := range load(genRetentionScope).Chains {
		for _, l := range c.Links {
			if l.Removed != nil {
				tombs++
			}
		}
	}
	require.Positive(g.t, tombs, "theta's snapshot holds chain tombstones")
	k := load("kappa")
	require.NotEmpty(g.t, k.Chains, "kappa's snapshot holds its chain")
	require.NotEmpty(g.t, k.LinkRoots)
	require.NotEmpty(g.t, k.Calibration, "kappa's snapshot holds its calibration sample")
	require.Equal(g.t, genCounterName, load(genCounterPrefix+"mu").Counter, "tok-mu's snapshot names its counter")
}

// loadSnapshot decodes scope's latest snapshot, which must be of this
// release's format.
func (g *gen) loadSnapshot(scope string) *frames.State {
	g.t.Helper()
	snap, ok, err := g.store.LoadSnapshot(context.Background(), scope)
	require.NoError(g.t, err)
	require.True(g.t, ok, "%s has a snapshot", scope)
	st, fresh, err := eventstore.DecodeState(scope, snap)
	require.NoError(g.t, err)
	require.True(g.t, fresh, "%s's snapshot is of this release's format", scope)
	return st
}

// reads records GetChain from the first and the last link, SearchChain's queries and
// GetFrame (with handles) of every link of the chains written.
func (g *gen) reads() {
	for _, ch := range g.toRead {
		head := ch.links[len(ch.links)-1]
		g.read(Read{Op: "GetChain", Scope: ch.scope, FrameID: ch.links[0]}) // reads accept any link
		g.read(Read{Op: "GetChain", Scope: ch.scope, FrameID: head})
		for _, q := range ch.query {
			q.Op, q.Scope, q.FrameID = "SearchChain", ch.scope, head
			r := g.read(q)
			if r.Search.Next != "" { // the next page too
				q.Cursor = r.Search.Next
				g.read(q)
			}
		}
		for _, l := range ch.links {
			if ch.scope == genRetentionScope {
				continue // removed: GetFrame answers not found (checked by the test)
			}
			g.read(Read{Op: "GetFrame", Scope: ch.scope, FrameID: l, WithHandles: true})
		}
	}
	// tok-mu's handles with their roles, counted under the estimate since
	// the recount.
	g.read(Read{Op: "GetFrame", Scope: genCounterPrefix + "mu", FrameID: g.mu, WithHandles: true})
}

// read sends a read and records it with its answer.
func (g *gen) read(r Read) Read {
	g.t.Helper()
	req, err := BuildRead(r)
	require.NoError(g.t, err)
	reply, err := Send(context.Background(), g.c, req)
	require.NoError(g.t, err, "%s of %s on %s", r.Op, r.FrameID, r.Scope)
	r, err = ReadOf(r, reply)
	require.NoError(g.t, err)
	g.m.Reads = append(g.m.Reads, r)
	return r
}
