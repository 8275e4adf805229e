package actors_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// TestFencing runs the fencing suite (DESIGN §13) on the memory store.
// fencingSuite takes the store's opener, so that a shared store of
// another kind (PostgreSQL) runs the same tests.
func TestFencing(t *testing.T) {
	fencingSuite(t, func(t *testing.T) eventstore.Store { return eventstore.NewMemory() })
}

// fencingSuite runs two servers with different owners on one store that
// open returns (an eventstore.Fencer), as two members sharing a database
// would, and checks what a deposed owner can and cannot do.
func fencingSuite(t *testing.T, open func(t *testing.T) eventstore.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, p *fencedPair)
	}{
		{"DeposedOwnerRefused", testDeposedOwnerRefused},
		{"RetryLandsOnceOnTheNewOwner", testRetryLandsOnceOnTheNewOwner},
		{"RepeatOnAStaleOwner", testRepeatOnAStaleOwner},
		{"BatchInFlightFailsWhole", testBatchInFlightFailsWhole},
		{"ToolIntentCarriesEpoch", testToolIntentCarriesEpoch},
		{"TwoOwnersNeverFork", testTwoOwnersNeverFork},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { _ = s.Close() })
			tt.fn(t, startFencedPair(t, s))
		})
	}
}

// fencedPair is two servers, a and b, of one actor system on one shared
// store. a's appends go through a gate that a test can hold; b uses the
// store as it is.
type fencedPair struct {
	sys    *actor.ActorSystem
	store  eventstore.Store
	fencer eventstore.Fencer
	a, b   *fencedServer
}

type fencedServer struct {
	owner string
	srv   *actors.Server
	c     *actors.Client
	logs  *syncBuffer
	gate  *gateStore // a's only
}

func startFencedPair(t *testing.T, store eventstore.Store) *fencedPair {
	t.Helper()
	f, ok := store.(eventstore.Fencer)
	require.True(t, ok, "%T is not an eventstore.Fencer", store)
	p := &fencedPair{sys: quietSystem(), store: store, fencer: f}
	t.Cleanup(p.sys.Shutdown)
	gate := &gateStore{Store: store, f: f, entered: make(chan chan struct{}, 4)}
	p.a = startFenced(t, p.sys, gate, actors.OwnerName("member-a:7400"))
	p.a.gate = gate
	p.b = startFenced(t, p.sys, store, actors.OwnerName("member-b:7400"))
	require.NotEqual(t, p.a.owner, p.b.owner)
	return p
}

func startFenced(t *testing.T, sys *actor.ActorSystem, store eventstore.Store, owner string) *fencedServer {
	t.Helper()
	logs := &syncBuffer{}
	cfg := testConfig(newFakeClock())
	cfg.Clock = time.Now // the Client mints UUIDv7 ids from the real clock
	cfg.Owner = owner
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	// The servers' background workers would write through both servers;
	// these tests write only what they send.
	cfg.RegistryOff, cfg.OutboxOff, cfg.StateExpiryCheck = true, true, -1
	srv, err := actors.Start(sys, store, cfg)
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	return &fencedServer{owner: owner, srv: srv, c: srv.Client(), logs: logs}
}

// gateStore is a shared store whose next Append, once armed, waits until
// the test releases it (the channel it sends on entered).
type gateStore struct {
	eventstore.Store
	f       eventstore.Fencer
	armed   atomic.Bool
	entered chan chan struct{}
	appends atomic.Int64
}

func (g *gateStore) AcquireOwner(ctx context.Context, stream, owner string) (eventstore.Fence, error) {
	return g.f.AcquireOwner(ctx, stream, owner)
}

func (g *gateStore) Owner(ctx context.Context, stream string) (eventstore.Fence, error) {
	return g.f.Owner(ctx, stream)
}

func (g *gateStore) Append(ctx context.Context, stream string, expected int64, evs []eventstore.Event) (eventstore.AppendResult, error) {
	g.appends.Add(1)
	if g.armed.CompareAndSwap(true, false) {
		release := make(chan struct{})
		g.entered <- release
		<-release
	}
	return g.Store.Append(ctx, stream, expected, evs)
}

// syncBuffer collects a server's log lines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the lines that contain s.
func (b *syncBuffer) lines(s string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, l := range strings.Split(b.buf.String(), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

func (p *fencedPair) requireOwner(t *testing.T, scope string, owner *fencedServer, epoch uint64) {
	t.Helper()
	f, err := p.fencer.Owner(ctx, scope)
	require.NoError(t, err)
	require.Equal(t, eventstore.Fence{Owner: owner.owner, Epoch: epoch}, f)
}

// raw sends req to s's router and returns the reply as it comes, without
// a Client (which would resend a scope_moved request).
func raw(t *testing.T, p *fencedPair, s *fencedServer, req messages.Request) *actor.Future {
	t.Helper()
	return p.sys.Root.RequestFuture(s.srv.PID(), req, 30*time.Second)
}

func result(t *testing.T, f *actor.Future) messages.Reply {
	t.Helper()
	v, err := f.Result()
	require.NoError(t, err)
	r, ok := v.(messages.Reply)
	require.True(t, ok, "reply %T", v)
	return r
}

// requireMoved checks a reply is scope_moved to owner at epoch.
func requireMoved(t *testing.T, r messages.Reply, owner *fencedServer, epoch uint64) {
	t.Helper()
	e := r.Failure()
	require.NotNil(t, e, "%T succeeded", r)
	require.Equal(t, messages.CodeScopeMoved, e.Code, "%v", e)
	assert.ErrorIs(t, e, actors.ErrScopeMoved)
	assert.Equal(t, owner.owner, e.Owner)
	assert.Equal(t, epoch, e.Epoch)
	assert.Contains(t, e.Message, owner.owner)
	assert.Contains(t, e.Message, fmt.Sprintf("epoch %d", epoch))
}

// logOf reads a scope's log: it checks the versions are dense and the
// chain verifies, and counts the records of each request id.
func logOf(t *testing.T, store eventstore.Store, scope string) (records map[string]int, events []frames.Event) {
	t.Helper()
	records = map[string]int{}
	var version int64
	require.NoError(t, store.ReadStream(ctx, scope, 1, func(r eventstore.Record) error {
		version++
		require.Equal(t, version, r.Version, "dense versions, one linear history")
		ev, err := eventstore.DecodeFrameEvent(r)
		require.NoError(t, err)
		records[ev.EventMeta().RequestID]++
		events = append(events, ev)
		return nil
	}))
	require.NoError(t, store.VerifyStream(ctx, scope))
	return records, events
}

func usage(scope, id, frame string, turns int64) *messages.RecordUsage {
	return &messages.RecordUsage{Header: messages.Header{Scope: scope, RequestID: id}, FrameID: frame, Cost: budget.Cost{Turns: turns}}
}

func fencedRoot(t *testing.T, c *actors.Client, scope string) string {
	t.Helper()
	r, err := c.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: scope, RequestID: "root"}, Goal: "g",
		Budget: budget.TokenBudget{Total: 1 << 30}})
	require.NoError(t, err)
	return r.FrameID
}

func turns(t *testing.T, c *actors.Client, scope, frame string) int64 {
	t.Helper()
	f, err := c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: scope}, FrameID: frame})
	require.NoError(t, err)
	return f.Frame.Cost.Turns
}

// A scope taken over by b refuses a's next write — a still holds the
// latest version b started from, so only the fence stops it — with
// scope_moved naming b and its epoch; a writes nothing, logs one line,
// drops the scope, and loads it again (a new epoch) at its next request,
// where the refused request, resent with its id, lands once.
func testDeposedOwnerRefused(t *testing.T, p *fencedPair) {
	const scope = "s"
	root := fencedRoot(t, p.a.c, scope)
	p.requireOwner(t, scope, p.a, 1)
	_, err := p.a.c.RecordUsage(ctx, usage(scope, "a-1", root, 1))
	require.NoError(t, err)

	// b activates the scope with a read, takes epoch 2, and writes.
	assert.Equal(t, int64(1), turns(t, p.b.c, scope, root))
	p.requireOwner(t, scope, p.b, 2)
	_, err = p.b.c.RecordUsage(ctx, usage(scope, "b-1", root, 10))
	require.NoError(t, err)

	// a still caches the scope at the version b started from... until its
	// next write, refused.
	refused := usage(scope, "a-refused", root, 100)
	requireMoved(t, result(t, raw(t, p, p.a, refused)), p.b, 2)
	records, _ := logOf(t, p.store, scope)
	assert.Zero(t, records["a-refused"], "nothing of a's refused write")
	assert.Len(t, p.a.logs.lines("deposed"), 1, "one line logged")
	assert.Contains(t, p.a.logs.lines("deposed")[0], p.b.owner)
	assert.Empty(t, p.b.logs.lines("deposed"))

	// a dropped the scope: its next request loads it again, with b's write.
	assert.Equal(t, int64(11), turns(t, p.a.c, scope, root))
	p.requireOwner(t, scope, p.a, 3)
	// The refused request resent with its id lands, once.
	first, err := p.a.c.RecordUsage(ctx, refused)
	require.NoError(t, err)
	again, err := p.a.c.RecordUsage(ctx, refused)
	require.NoError(t, err)
	assert.Equal(t, first.Version, again.Version, "the repeat is answered, not applied")
	records, _ = logOf(t, p.store, scope)
	assert.Equal(t, 1, records["a-refused"])
	assert.Equal(t, map[string]int{"root": 1, "a-1": 1, "b-1": 1, "a-refused": 1}, records)

	// b, deposed in turn, does not know it yet: it answers reads from the
	// state it cached (the stale read window, fence.go)...
	assert.Equal(t, int64(11), turns(t, p.b.c, scope, root))
	// ...until its next write, refused: b drops the scope, and its
	// Client's resend lands once b has loaded it again.
	_, err = p.b.c.RecordUsage(ctx, usage(scope, "b-2", root, 1000))
	require.NoError(t, err)
	p.requireOwner(t, scope, p.b, 4)
	assert.Len(t, p.b.logs.lines("deposed"), 1)
	assert.Equal(t, int64(1111), turns(t, p.b.c, scope, root))
	records, _ = logOf(t, p.store, scope)
	assert.Equal(t, map[string]int{"root": 1, "a-1": 1, "b-1": 1, "a-refused": 1, "b-2": 1}, records)
}

// A Client resends a scope_moved request with the same request id: the
// caller sees it succeed once, here on the new owner (the placement the
// Client follows moved the scope to b), which recorded the tool call's
// intent with its own epoch.
func testRetryLandsOnceOnTheNewOwner(t *testing.T, p *fencedPair) {
	const scope = "s"
	root := fencedRoot(t, p.a.c, scope)
	assert.Zero(t, turns(t, p.b.c, scope, root)) // b takes the scope over
	p.requireOwner(t, scope, p.b, 2)

	var sends atomic.Int32
	var routes []string
	var mu sync.Mutex
	c := actors.NewRoutedClient(p.sys.Root, func(string) *actor.PID {
		mu.Lock()
		defer mu.Unlock()
		if sends.Add(1) == 1 { // the Client's placement still says a
			routes = append(routes, "a")
			return p.a.srv.PID()
		}
		routes = append(routes, "b")
		return p.b.srv.PID()
	}, 30*time.Second)
	req := &messages.StartToolCall{Header: messages.Header{Scope: scope, RequestID: "moved"}, FrameID: root, CallID: "call-1", Name: "fetch"}
	r, err := c.StartToolCall(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, "call-1", r.CallID)
	assert.Equal(t, []string{"a", "b"}, routes, "refused by a, resent to b")
	assert.Len(t, p.a.logs.lines("deposed"), 1)
	p.requireOwner(t, scope, p.b, 2) // a did not take it back

	again, err := c.StartToolCall(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, r.Version, again.Version, "a repeat is answered, not applied")
	records, events := logOf(t, p.store, scope)
	assert.Equal(t, map[string]int{"root": 1, "moved": 1}, records)
	started, ok := events[1].(*frames.ToolStarted)
	require.True(t, ok, "%T", events[1])
	assert.Equal(t, p.b.owner, started.Owner, "b recorded the intent")
	assert.Equal(t, uint64(2), started.Epoch)
}

// A request the new owner applied, resent to the deposed owner — whose
// cached state was loaded before it — is not applied twice: request ids
// are looked up in the store's per-scope index, which the servers share,
// so the deposed owner finds it and answers the original reply from the
// log, writing nothing (it stays deposed, not knowing it yet).
func testRepeatOnAStaleOwner(t *testing.T, p *fencedPair) {
	const scope = "s"
	root := fencedRoot(t, p.a.c, scope)
	req := usage(scope, "once", root, 7)
	orig, err := p.b.c.RecordUsage(ctx, req)
	require.NoError(t, err)
	p.requireOwner(t, scope, p.b, 2)

	again, err := p.a.c.RecordUsage(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, orig.Version, again.Version, "the original reply")
	assert.Equal(t, orig.Position, again.Position)
	assert.Empty(t, p.a.logs.lines("deposed"), "nothing to write, nothing refused")
	p.requireOwner(t, scope, p.b, 2)
	records, _ := logOf(t, p.store, scope)
	assert.Equal(t, map[string]int{"root": 1, "once": 1}, records)

	// A new request on a is refused, and its resend, on the state a loads
	// again, sees "once" applied.
	_, err = p.a.c.RecordUsage(ctx, usage(scope, "next", root, 1))
	require.NoError(t, err)
	assert.Len(t, p.a.logs.lines("deposed"), 1)
	p.requireOwner(t, scope, p.a, 3)
	assert.Equal(t, int64(8), turns(t, p.a.c, scope, root))
	records, _ = logOf(t, p.store, scope)
	assert.Equal(t, map[string]int{"root": 1, "once": 1, "next": 1}, records)
}

// A batch in flight on a when b takes the scope over fails whole: its
// writes and the read decided between them are answered scope_moved,
// nothing of it is in the log, and the resends land once each.
func testBatchInFlightFailsWhole(t *testing.T, p *fencedPair) {
	const scope = "s"
	root := fencedRoot(t, p.a.c, scope)
	appendsBefore := p.a.gate.appends.Load()

	// a's first write holds its append: the scope is busy, and the
	// requests after it wait.
	p.a.gate.armed.Store(true)
	w1 := raw(t, p, p.a, usage(scope, "w1", root, 1))
	release1 := <-p.a.gate.entered
	waiting := []*actor.Future{
		raw(t, p, p.a, usage(scope, "w2", root, 2)),
		raw(t, p, p.a, usage(scope, "w3", root, 4)),
		raw(t, p, p.a, &messages.GetFrame{Header: messages.Header{Scope: scope}, FrameID: root}),
		raw(t, p, p.a, usage(scope, "w5", root, 8)),
	}
	require.Eventually(t, func() bool { return actors.Pending(p.a.srv) == int64(1+len(waiting)) }, 10*time.Second, time.Millisecond)
	// w1 goes through; the four waiting are decided into one batch, whose
	// append holds.
	p.a.gate.armed.Store(true)
	close(release1)
	require.Nil(t, result(t, w1).Failure())
	release2 := <-p.a.gate.entered

	// Meanwhile b takes the scope over and writes.
	_, err := p.b.c.RecordUsage(ctx, usage(scope, "b1", root, 16))
	require.NoError(t, err)
	p.requireOwner(t, scope, p.b, 2)

	close(release2)
	for _, f := range waiting {
		requireMoved(t, result(t, f), p.b, 2)
	}
	assert.Equal(t, appendsBefore+2, p.a.gate.appends.Load(), "w1's append, then the batch's: one append, refused")
	lines := p.a.logs.lines("deposed")
	require.Len(t, lines, 1, "one line for the batch")
	assert.Contains(t, lines[0], "requests=4")
	records, _ := logOf(t, p.store, scope)
	assert.Equal(t, map[string]int{"root": 1, "w1": 1, "b1": 1}, records, "nothing of the refused batch")

	// Resent with their ids, they land once each (a takes the scope back).
	for _, id := range []string{"w2", "w3", "w5", "w2"} {
		_, err := p.a.c.RecordUsage(ctx, usage(scope, id, root, map[string]int64{"w2": 2, "w3": 4, "w5": 8}[id]))
		require.NoError(t, err)
	}
	records, _ = logOf(t, p.store, scope)
	assert.Equal(t, map[string]int{"root": 1, "w1": 1, "b1": 1, "w2": 1, "w3": 1, "w5": 1}, records)
	assert.Equal(t, int64(1+16+2+4+8), turns(t, p.a.c, scope, root))
}

// A tool call's intent records the owner and epoch of the server that
// recorded it; ResumeActor shows them for each call in doubt, beside the
// answering server's own epoch.
func testToolIntentCarriesEpoch(t *testing.T, p *fencedPair) {
	const scope = "s"
	root := fencedRoot(t, p.a.c, scope)
	_, err := p.a.c.StartToolCall(ctx, &messages.StartToolCall{Header: messages.Header{Scope: scope}, FrameID: root, CallID: "by-a", Name: "fetch"})
	require.NoError(t, err)
	ra, err := p.a.c.ResumeActor(ctx, &messages.ResumeActor{Header: messages.Header{Scope: scope}})
	require.NoError(t, err)
	assert.Equal(t, p.a.owner, ra.Recovery.Owner)
	assert.Equal(t, uint64(1), ra.Recovery.Epoch)
	require.Len(t, ra.LiveFrames, 1)
	require.Len(t, ra.LiveFrames[0].InDoubt, 1)
	assert.Equal(t, p.a.owner, ra.LiveFrames[0].InDoubt[0].Owner)
	assert.Equal(t, uint64(1), ra.LiveFrames[0].InDoubt[0].Epoch)

	// b takes over: the call in doubt still names a, epoch 1.
	rb, err := p.b.c.ResumeActor(ctx, &messages.ResumeActor{Header: messages.Header{Scope: scope}})
	require.NoError(t, err)
	assert.Equal(t, p.b.owner, rb.Recovery.Owner)
	assert.Equal(t, uint64(2), rb.Recovery.Epoch)
	_, err = p.b.c.StartToolCall(ctx, &messages.StartToolCall{Header: messages.Header{Scope: scope}, FrameID: root, CallID: "by-b", Name: "search"})
	require.NoError(t, err)
	rb, err = p.b.c.ResumeActor(ctx, &messages.ResumeActor{Header: messages.Header{Scope: scope}})
	require.NoError(t, err)
	require.Len(t, rb.LiveFrames, 1)
	got := map[string]frames.ToolCall{}
	for _, c := range rb.LiveFrames[0].InDoubt {
		got[c.ID] = c
	}
	assert.Equal(t, p.a.owner, got["by-a"].Owner)
	assert.Equal(t, uint64(1), got["by-a"].Epoch)
	assert.Equal(t, p.b.owner, got["by-b"].Owner)
	assert.Equal(t, uint64(2), got["by-b"].Epoch)
	var pending []frames.PendingWork
	for _, w := range rb.PendingWork {
		if w.Kind == frames.PendingToolInDoubt {
			pending = append(pending, w)
		}
	}
	require.Len(t, pending, 2)
	for _, w := range pending {
		want := got[w.ToolCallID]
		assert.Equal(t, want.Owner, w.Owner)
		assert.Equal(t, want.Epoch, w.Epoch)
		assert.Contains(t, w.Description, fmt.Sprintf("owner %s, epoch %d", want.Owner, want.Epoch))
	}
	// Each intent in the log says who recorded it.
	_, events := logOf(t, p.store, scope)
	var epochs []uint64
	for _, ev := range events {
		if s, ok := ev.(*frames.ToolStarted); ok {
			epochs = append(epochs, s.Epoch)
		}
	}
	assert.Equal(t, []uint64{1, 2}, epochs)
}

// Two servers writing one scope at once, each taking it from the other
// again and again, never fork it: every refusal is scope_moved (never a
// version conflict: the fence is checked first), each request lands
// once, and the epochs the intents record never go down along the log —
// no deposed owner wrote after a newer one.
func testTwoOwnersNeverFork(t *testing.T, p *fencedPair) {
	const scope = "s"
	root := fencedRoot(t, p.a.c, scope)
	const perWriter = 40
	clients := []*actors.Client{p.a.c, p.b.c}
	var moved atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				id := fmt.Sprintf("w%d-%d", w, i)
				req := &messages.StartToolCall{Header: messages.Header{Scope: scope, RequestID: id}, FrameID: root, CallID: id, Name: "t"}
				for attempt := 0; ; attempt++ {
					_, err := clients[(w+i+attempt)%2].StartToolCall(ctx, req)
					if err == nil {
						break
					}
					if !assert.ErrorIs(t, err, actors.ErrScopeMoved) || attempt > 50 {
						return
					}
					moved.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	records, events := logOf(t, p.store, scope)
	assert.Len(t, records, 1+2*perWriter, "every request")
	for id, n := range records {
		assert.Equal(t, 1, n, "request %s applied once", id)
	}
	var last uint64
	for _, ev := range events {
		if s, ok := ev.(*frames.ToolStarted); ok {
			require.GreaterOrEqual(t, s.Epoch, last, "an intent by epoch %d after one by epoch %d", s.Epoch, last)
			last = s.Epoch
		}
	}
	t.Logf("refusals past the Client's resends: %d; last epoch %d", moved.Load(), last)
	deposed := len(p.a.logs.lines("deposed")) + len(p.b.logs.lines("deposed"))
	assert.Positive(t, deposed, "the servers took the scope from each other")
}

// Fencing needs a store servers share, and a valid owner name.
func TestFencingConfig(t *testing.T) {
	sys := quietSystem()
	defer sys.Shutdown()
	bolt, err := eventstore.Open(t.TempDir()+"/x.db", &eventstore.Options{NoSync: true})
	require.NoError(t, err)
	defer bolt.Close()
	cfg := testConfig(newFakeClock())
	cfg.Owner = "member-a#1"
	_, err = actors.Start(sys, bolt, cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not one servers share")
	assert.Contains(t, err.Error(), "member-a#1")

	for _, bad := range []string{"a\nb", strings.Repeat("x", eventstore.MaxOwnerBytes+1), "\xff"} {
		cfg.Owner = bad
		_, err = actors.Start(sys, eventstore.NewMemory(), cfg)
		assert.ErrorIs(t, err, eventstore.ErrInvalidOwner, "owner %q", bad)
	}

	// No Owner: no fencing, even on a store that could fence.
	mem := eventstore.NewMemory()
	cfg.Owner = ""
	srv, err := actors.Start(sys, mem, cfg)
	require.NoError(t, err)
	defer srv.Stop()
	root := fencedRoot(t, srv.Client(), "s")
	_, err = srv.Client().StartToolCall(ctx, &messages.StartToolCall{Header: mut("s"), FrameID: root, Name: "fetch"})
	require.NoError(t, err)
	f, err := mem.Owner(ctx, "s")
	require.NoError(t, err)
	assert.Equal(t, eventstore.Fence{}, f, "no epoch taken")
	r, err := srv.Client().ResumeActor(ctx, &messages.ResumeActor{Header: mut("s")})
	require.NoError(t, err)
	assert.Zero(t, r.Recovery.Epoch)
	require.Len(t, r.LiveFrames[0].InDoubt, 1)
	assert.Zero(t, r.LiveFrames[0].InDoubt[0].Epoch)
	assert.Empty(t, r.LiveFrames[0].InDoubt[0].Owner)
	assert.NotContains(t, r.PendingWork[0].Description, "epoch")

	name := actors.OwnerName("10.0.0.5:7400")
	assert.True(t, strings.HasPrefix(name, "10.0.0.5:7400#"))
	assert.NotEqual(t, name, actors.OwnerName("10.0.0.5:7400"), "a nonce per call: a restarted member is a new owner")
	require.NoError(t, eventstore.CheckOwner(name))
}

// The Client resends a scope_moved request a bounded number of times, with
// the same request id each time, and returns ErrScopeMoved when every
// resend was refused; a deadline that ends first stops the resends.
func TestClientResendsScopeMoved(t *testing.T) {
	sys := quietSystem()
	defer sys.Shutdown()
	var mu sync.Mutex
	var ids []string
	cancelAt := -1
	var cancel context.CancelFunc
	pid := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		req, ok := c.Message().(messages.Request)
		if !ok {
			return
		}
		mu.Lock()
		ids = append(ids, req.(messages.MutatingRequest).Mut().RequestID)
		if len(ids) == cancelAt {
			cancel()
		}
		mu.Unlock()
		r := messages.ReplyFor(req)
		r.SetFailure(&messages.Error{Code: messages.CodeScopeMoved, Message: "moved", Owner: "elsewhere", Epoch: 9})
		c.Respond(r)
	}))
	c := actors.NewClient(sys.Root, pid, 10*time.Second)
	_, err := c.RecordUsage(ctx, &messages.RecordUsage{Header: mut("s"), FrameID: "f", Cost: budget.Cost{Turns: 1}})
	require.ErrorIs(t, err, actors.ErrScopeMoved)
	var me *messages.Error
	require.True(t, errors.As(err, &me))
	assert.Equal(t, uint64(9), me.Epoch)
	mu.Lock()
	require.Len(t, ids, 1+actors.MoveRetries)
	for _, id := range ids {
		assert.Equal(t, ids[0], id, "the same request id on every resend")
	}
	assert.NotEmpty(t, ids[0])
	ids, cancelAt = nil, 1
	mu.Unlock()

	// The caller's context ends at the first refusal: no resend. (The
	// caller gets the refusal, or ErrTimeout if its context's end won the
	// race with the reply.)
	cctx, cf := context.WithCancel(ctx)
	cancel = cf
	defer cf()
	_, err = c.RecordUsage(cctx, &messages.RecordUsage{Header: mut("s"), FrameID: "f", Cost: budget.Cost{Turns: 1}})
	assert.True(t, errors.Is(err, actors.ErrScopeMoved) || errors.Is(err, actors.ErrTimeout), "%v", err)
	mu.Lock()
	assert.Len(t, ids, 1)
	mu.Unlock()
}
