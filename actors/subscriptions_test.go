package actors_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
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

// subEnv is a StateIndex over a given store (a MemoryStore keeps tables,
// signals commits and reports removals; a BoltStore may not yet).
type subEnv struct {
	t     *testing.T
	store eventstore.Store
	sys   *actor.ActorSystem
	srv   *actors.Server
	c     *actors.Client
	clock *fakeClock
	cfg   actors.Config
}

func newSubEnv(t *testing.T, store eventstore.Store, tweak ...func(*actors.Config)) *subEnv {
	t.Helper()
	e := &subEnv{t: t, store: store, clock: newFakeClock()}
	e.cfg = testConfig(e.clock)
	for _, f := range tweak {
		f(&e.cfg)
	}
	e.start()
	t.Cleanup(e.stop)
	return e
}

func (e *subEnv) start() {
	e.t.Helper()
	e.sys = quietSystem()
	var err error
	e.srv, err = actors.Start(e.sys, e.store, e.cfg)
	require.NoError(e.t, err)
	e.c = e.srv.Client()
}

func (e *subEnv) stop() {
	if e.srv != nil {
		e.srv.Stop()
		e.sys.Shutdown()
		e.srv = nil
	}
}

// work runs one frame in scope: a push and a pop (two events).
func work(t testing.TB, c *actors.Client, scope string) {
	t.Helper()
	p, err := c.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: scope}, Goal: "g", Budget: budget.TokenBudget{Total: 100}})
	require.NoError(t, err)
	_, err = c.PopFrame(ctx, &messages.PopFrame{Header: messages.Header{Scope: scope}, FrameID: p.FrameID, Status: frames.StatusCompleted})
	require.NoError(t, err)
}

// expected lists the sequences of the store's records that f matches, from
// position from.
func expected(t testing.TB, store eventstore.Store, f messages.EventFilter, from uint64) []uint64 {
	t.Helper()
	var out []uint64
	require.NoError(t, store.ReadAll(ctx, from, func(r eventstore.Record) error {
		if f.Matches(r.Stream, r.Type) {
			out = append(out, r.Seq)
		}
		return nil
	}))
	return out
}

// collector is a handler that records what it is given.
type collector struct {
	mu   sync.Mutex
	seqs []uint64
	evs  []messages.SubscribedEvent
	got  chan struct{}
}

func newCollector() *collector { return &collector{got: make(chan struct{}, 1<<16)} }

func (k *collector) handle(_ context.Context, ev messages.SubscribedEvent) error {
	k.mu.Lock()
	k.seqs = append(k.seqs, ev.Seq)
	k.evs = append(k.evs, ev)
	k.mu.Unlock()
	k.got <- struct{}{}
	return nil
}

// wait waits until the collector holds n events (or fails after 20 s).
func (k *collector) wait(t testing.TB, n int) []uint64 {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		k.mu.Lock()
		have := len(k.seqs)
		k.mu.Unlock()
		if have >= n {
			k.mu.Lock()
			defer k.mu.Unlock()
			return append([]uint64(nil), k.seqs...)
		}
		select {
		case <-k.got:
		case <-deadline:
			t.Fatalf("collected %d events of %d", have, n)
		}
	}
}

// readAll reads every event f matches from from through ReadEvents pages.
func readAll(t testing.TB, c *actors.Client, f messages.EventFilter, from uint64, max int) []uint64 {
	t.Helper()
	var out []uint64
	for {
		r, err := c.ReadEvents(ctx, "", &messages.ReadEvents{Filter: &f, From: from, Max: max})
		require.NoError(t, err)
		for _, ev := range r.Events {
			out = append(out, ev.Seq)
		}
		require.GreaterOrEqual(t, r.Next, from, "Next never goes back")
		if r.Next > r.Head {
			return out
		}
		from = r.Next
	}
}

// A subscription receives every event committed after it started, in
// order, while writers write several scopes at once.
func TestSubscriptionDeliversEveryEventInOrder(t *testing.T) {
	e := newSubEnv(t, eventstore.NewMemory())
	k := newCollector()
	sub, err := e.c.Subscribe(ctx, actors.SubscribeOptions{Handler: k.handle, Batch: 7})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				work(t, e.c, fmt.Sprintf("w%d", w))
			}
		}()
	}
	wg.Wait()
	want := expected(t, e.store, messages.EventFilter{}, 1)
	require.Len(t, want, 200)
	got := k.wait(t, len(want))
	require.NoError(t, sub.Close())
	assert.Equal(t, want, got[:len(want)], "every event, in log order")
	assert.Equal(t, map[string]uint64{"": want[len(want)-1] + 1}, sub.Positions())
	for _, ev := range k.evs[:4] {
		d, err := ev.Decode()
		require.NoError(t, err)
		assert.Equal(t, ev.Type, d.EventType())
		assert.Equal(t, ev.Scope, d.EventMeta().Scope)
		assert.Equal(t, ev.Frame, d.EventMeta().Frame)
		assert.Equal(t, ev.At, d.EventMeta().At)
	}
}

// ReadEvents filters by exact scope, by prefix and by kind, from any
// position, in pages of any size; Next moves past what was scanned even
// when nothing matched.
func TestReadEventsFilters(t *testing.T) {
	e := newSubEnv(t, eventstore.NewMemory())
	for range 3 {
		for _, s := range []string{"a:1", "a:2", "b:1", "a"} {
			work(t, e.c, s)
		}
	}
	for _, tc := range []struct {
		name string
		f    messages.EventFilter
		n    int
	}{
		{"all", messages.EventFilter{}, 24},
		{"scope", messages.EventFilter{Scope: "a"}, 6},
		{"prefix", messages.EventFilter{Prefix: "a:"}, 12},
		{"kind", messages.EventFilter{Kinds: []string{frames.TypeFramePopped}}, 12},
		{"prefix and kinds", messages.EventFilter{Prefix: "b", Kinds: []string{frames.TypeFramePushed, frames.TypeFramePopped}}, 6},
		{"nothing", messages.EventFilter{Prefix: "zzz"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := expected(t, e.store, tc.f, 1)
			require.Len(t, want, tc.n)
			for _, max := range []int{1, 5, 0} {
				assert.Equal(t, want, readAll(t, e.c, tc.f, 0, max), "page size %d", max)
			}
			if tc.n > 2 {
				from := want[2]
				assert.Equal(t, want[2:], readAll(t, e.c, tc.f, from, 3), "from a position")
			}
			r, err := e.c.ReadEvents(ctx, "", &messages.ReadEvents{Filter: &tc.f, From: 1})
			require.NoError(t, err)
			assert.Equal(t, len(want), len(r.Events))
			assert.Equal(t, uint64(25), r.Next, "Next is past the whole log scanned")
		})
	}
}

// From now: a read from now returns nothing and the position after the
// head; a long poll from there wakes on the next matching commit (and not
// on one that does not match), with the store's commit signal and with
// the 20 ms poll of a store without it.
func TestLongPollFromNowWakesOnACommit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) eventstore.Store
	}{
		{"memory (commit watcher)", func(*testing.T) eventstore.Store { return eventstore.NewMemory() }},
		{"without a commit watcher", func(*testing.T) eventstore.Store { return noWatcher{eventstore.NewMemory()} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newSubEnv(t, tc.store(t))
			work(t, e.c, "old")
			f := messages.EventFilter{Scope: "new"}
			now, err := e.c.ReadEvents(ctx, "", &messages.ReadEvents{Filter: &f, FromNow: true})
			require.NoError(t, err)
			assert.Empty(t, now.Events)
			assert.Equal(t, uint64(3), now.Next)
			type res struct {
				r   *messages.ReadEventsReply
				err error
			}
			done := make(chan res, 1)
			start := time.Now()
			go func() {
				r, err := e.c.ReadEvents(ctx, "", &messages.ReadEvents{Filter: &f, From: now.Next, Wait: 20 * time.Second})
				done <- res{r, err}
			}()
			work(t, e.c, "other") // matches nothing: the poll stays parked or answers past it
			work(t, e.c, "new")
			r := <-done
			require.NoError(t, r.err)
			require.NotEmpty(t, r.r.Events)
			assert.Equal(t, "new", r.r.Events[0].Scope)
			assert.Equal(t, uint64(5), r.r.Events[0].Seq)
			assert.Less(t, time.Since(start), 10*time.Second, "woken by the commit, not by its wait")
		})
	}
}

// noWatcher hides the store's CommitWatcher.
type noWatcher struct{ *eventstore.MemoryStore }

func (noWatcher) WatchCommits() {} // not the interface's signature: the store has none

// A long poll with nothing to read answers with no events at its wait's
// end, Next unchanged.
func TestLongPollEndsEmptyAtItsWait(t *testing.T) {
	e := newSubEnv(t, eventstore.NewMemory())
	work(t, e.c, "s")
	f := messages.EventFilter{Scope: "none"}
	start := time.Now()
	r, err := e.c.ReadEvents(ctx, "", &messages.ReadEvents{Filter: &f, From: 3, Wait: 200 * time.Millisecond})
	require.NoError(t, err)
	assert.Empty(t, r.Events)
	assert.Equal(t, uint64(3), r.Next)
	assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)
	assert.Equal(t, 0, e.srv.SubscriptionStats().Parked, "an answered poll leaves nothing behind")
}

// A durable subscription resumes from its last acknowledgement after the
// Client goes away and after the server restarts: every event after the
// acknowledged position is delivered (at least once), in order, nothing
// skipped.
func TestDurableSubscriptionResumes(t *testing.T) {
	bolt := func(t *testing.T) eventstore.Store {
		st, err := eventstore.Open(t.TempDir()+"/stateindex.db", &eventstore.Options{NoSync: true})
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) eventstore.Store
	}{
		{"memory", func(*testing.T) eventstore.Store { return eventstore.NewMemory() }},
		{"bolt", bolt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := tc.store(t)
			if _, ok := store.(eventstore.Tables); !ok {
				t.Skip("this store keeps no tables yet (BoltStore gets them on branch wt-store)")
			}
			e := newSubEnv(t, store)
			f := messages.EventFilter{Prefix: "job"}
			for i := range 10 {
				work(t, e.c, fmt.Sprintf("job%d", i))
				work(t, e.c, "other")
			}
			all := expected(t, store, f, 1)
			require.Len(t, all, 20)

			// The first Client processes 7 events, then goes away.
			k1 := newCollector()
			stopAt := make(chan struct{})
			var n int
			sub, err := e.c.Subscribe(ctx, actors.SubscribeOptions{Name: "jobs", Filter: f, AckEvery: 1,
				Handler: func(ctx context.Context, ev messages.SubscribedEvent) error {
					if n == 7 {
						close(stopAt)
						<-ctx.Done()
						return ctx.Err()
					}
					n++
					return k1.handle(ctx, ev)
				}})
			require.NoError(t, err)
			<-stopAt
			require.NoError(t, sub.Close())
			assert.Equal(t, all[:7], k1.wait(t, 7))
			pos := sub.Positions()[""]
			assert.Equal(t, all[6]+1, pos)

			// A second Client resumes there.
			k2 := newCollector()
			sub2, err := e.c.Subscribe(ctx, actors.SubscribeOptions{Name: "jobs", Filter: f, Handler: k2.handle})
			require.NoError(t, err)
			got := k2.wait(t, 13)
			require.NoError(t, sub2.Close())
			assert.Equal(t, all[7:], got, "resumed after the last acknowledged event")

			// The server restarts; more events come; a third resumes.
			e.stop()
			e.start()
			work(t, e.c, "job-late")
			all = expected(t, store, f, 1)
			k3 := newCollector()
			sub3, err := e.c.Subscribe(ctx, actors.SubscribeOptions{Name: "jobs", Filter: f, Handler: k3.handle})
			require.NoError(t, err)
			assert.Equal(t, all[20:], k3.wait(t, 2))
			require.NoError(t, sub3.Close())

			existed, err := e.c.Unsubscribe(ctx, "jobs")
			require.NoError(t, err)
			assert.True(t, existed)
			_, err = e.c.ReadEvents(ctx, "", &messages.ReadEvents{Name: "jobs"})
			assert.ErrorIs(t, err, &messages.Error{Code: messages.CodeSubscriptionNotFound})
		})
	}
}

// Subscribe creates, opens and resets; acks are monotonic and checked.
func TestSubscribeAndAckRules(t *testing.T) {
	e := newSubEnv(t, eventstore.NewMemory())
	for range 3 {
		work(t, e.c, "s")
	}
	f := messages.EventFilter{Scope: "s"}
	r, err := e.c.SubscribeOn(ctx, "", &messages.Subscribe{Name: "n", Filter: f, FromNow: true})
	require.NoError(t, err)
	assert.True(t, r.Created)
	assert.Equal(t, uint64(7), r.Position, "from now: after the head")
	r, err = e.c.SubscribeOn(ctx, "", &messages.Subscribe{Name: "n", Filter: f, From: 2})
	require.NoError(t, err)
	assert.False(t, r.Created)
	assert.Equal(t, uint64(7), r.Position, "an existing subscription keeps its position")
	_, err = e.c.SubscribeOn(ctx, "", &messages.Subscribe{Name: "n", Filter: messages.EventFilter{Scope: "t"}})
	require.ErrorIs(t, err, actors.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "exists with another filter")
	r, err = e.c.SubscribeOn(ctx, "", &messages.Subscribe{Name: "n", Filter: messages.EventFilter{Scope: "t"}, Reset: true, From: 2})
	require.NoError(t, err)
	assert.Equal(t, uint64(2), r.Position)

	a, err := e.c.AckEvents(ctx, "", &messages.AckEvents{Name: "n", Position: 5})
	require.NoError(t, err)
	assert.Equal(t, uint64(5), a.Position)
	a, err = e.c.AckEvents(ctx, "", &messages.AckEvents{Name: "n", Position: 3})
	require.NoError(t, err)
	assert.Equal(t, uint64(5), a.Position, "a lower ack is ignored")
	_, err = e.c.AckEvents(ctx, "", &messages.AckEvents{Name: "n", Position: 99})
	assert.ErrorIs(t, err, actors.ErrInvalidArgument, "past the head")
	_, err = e.c.AckEvents(ctx, "", &messages.AckEvents{Name: "nope", Position: 1})
	assert.ErrorIs(t, err, &messages.Error{Code: messages.CodeSubscriptionNotFound})
	r, err = e.c.SubscribeOn(ctx, "", &messages.Subscribe{Name: "n", Filter: messages.EventFilter{Scope: "t"}})
	require.NoError(t, err)
	assert.Equal(t, uint64(5), r.Position, "the ack is stored")
}

// Reading from a position retention removed is position_removed naming the
// oldest position still available; after it, reads work.
func TestReadFromARemovedPositionNamesTheOldest(t *testing.T) {
	e := newSubEnv(t, eventstore.NewMemory(), func(c *actors.Config) { c.RequestHorizon = time.Minute; c.ClockSkew = time.Second })
	removedThrough := retainedScope(t, e, "chat")
	require.Positive(t, removedThrough)
	for _, f := range []messages.EventFilter{{Scope: "chat"}, {Prefix: "ch"}, {}} {
		_, err := e.c.ReadEvents(ctx, "", &messages.ReadEvents{Filter: &f, From: 1})
		require.ErrorIs(t, err, &messages.Error{Code: messages.CodePositionRemoved}, "%s", f)
		assert.Contains(t, err.Error(), fmt.Sprintf("the oldest position still available is %d", removedThrough+1))
		var me *messages.Error
		require.True(t, errors.As(err, &me))
		assert.Equal(t, int64(removedThrough+1), me.Version)
		_, err = e.c.ReadEvents(ctx, "", &messages.ReadEvents{Filter: &f, From: removedThrough + 1})
		assert.NoError(t, err)
	}
	other := messages.EventFilter{Scope: "elsewhere"}
	_, err := e.c.ReadEvents(ctx, "", &messages.ReadEvents{Filter: &other, From: 1})
	assert.NoError(t, err, "another scope's removal does not concern this filter")
}

// retainedScope writes scope with finished runs, ages them past the
// horizon and runs a retention pass that keeps the last one; it returns
// the highest global sequence removed.
func retainedScope(t *testing.T, e *subEnv, scope string) uint64 {
	t.Helper()
	root, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: scope}, Goal: "chat", Budget: budget.TokenBudget{Total: 1_000_000}})
	require.NoError(t, err)
	for i := range 6 {
		runChild(t, e.c, scope, root.FrameID, i)
	}
	e.clock.Advance(time.Hour)
	rr := e.store.(eventstore.RemovalReporter)
	before, err := rr.RemovedThrough(ctx, scope, true)
	require.NoError(t, err)
	require.Zero(t, before)
	runRetention(t, e)
	after, err := rr.RemovedThrough(ctx, scope, true)
	require.NoError(t, err)
	return after
}

func runRetention(t *testing.T, e *subEnv) actors.RetentionReport {
	t.Helper()
	_ = e.srv.StartRetention(actors.RetentionConfig{Policy: func(string) (frames.RetentionPolicy, string, bool) {
		return frames.RetentionPolicy{KeepLastN: 1, OnCompletion: frames.CompletionDelete}, "", true
	}})
	rep, err := e.srv.RunRetention(ctx)
	require.NoError(t, err)
	require.Empty(t, rep.Errors)
	return rep
}

// With SubscriptionHold, retention does not cut past the position of a
// durable subscription of the scope that acknowledged within the hold;
// once it has not acknowledged for longer, it is not waited for.
func TestRetentionHoldsForRecentSubscribers(t *testing.T) {
	e := newSubEnv(t, eventstore.NewMemory(), func(c *actors.Config) {
		c.RequestHorizon = time.Minute
		c.ClockSkew = time.Second
		c.SubscriptionHold = 2 * time.Hour
	})
	_, err := e.c.SubscribeOn(ctx, "", &messages.Subscribe{Name: "audit", Filter: messages.EventFilter{Prefix: "ch"}})
	require.NoError(t, err)
	_, err = e.c.SubscribeOn(ctx, "", &messages.Subscribe{Name: "unrelated", Filter: messages.EventFilter{Scope: "other"}})
	require.NoError(t, err)
	removed := retainedScope(t, e, "chat") // an hour after the subscription: within the hold
	assert.Zero(t, removed, "held: the subscription has processed nothing")
	rep := runRetention(t, e)
	require.Len(t, rep.Scopes, 1)
	assert.Contains(t, rep.Scopes[0].Why, `held for subscription "audit"`)

	// Acknowledging part of the log lets the cut go up to it, not past.
	var pushedAt []uint64
	require.NoError(t, e.store.ReadAll(ctx, 1, func(r eventstore.Record) error {
		pushedAt = append(pushedAt, r.Seq)
		return nil
	}))
	_, err = e.c.AckEvents(ctx, "", &messages.AckEvents{Name: "audit", Position: pushedAt[len(pushedAt)-1] + 1})
	require.NoError(t, err)
	runRetention(t, e)
	through, err := e.store.(eventstore.RemovalReporter).RemovedThrough(ctx, "chat", true)
	require.NoError(t, err)
	assert.Positive(t, through, "acknowledged past the cut: not held")

	// A subscriber that stopped acknowledging is not waited for.
	e2 := newSubEnv(t, eventstore.NewMemory(), func(c *actors.Config) {
		c.RequestHorizon = time.Minute
		c.ClockSkew = time.Second
		c.SubscriptionHold = 30 * time.Minute
	})
	_, err = e2.c.SubscribeOn(ctx, "", &messages.Subscribe{Name: "stale", Filter: messages.EventFilter{}})
	require.NoError(t, err)
	assert.Positive(t, retainedScope(t, e2, "chat"), "acked an hour ago, the hold is 30 minutes: the cut goes ahead")
}

// A slow subscriber lags: while its handler is blocked, 10,000 writes
// commit unhindered, and the service holds nothing for it (no parked poll,
// no read, no buffer: the puller has one batch, and waits).
func TestSlowSubscriberHoldsNoServerMemoryNorStallsWriters(t *testing.T) {
	e := newSubEnv(t, eventstore.NewMemory())
	block := make(chan struct{})
	first := make(chan struct{}, 1)
	k := newCollector()
	sub, err := e.c.Subscribe(ctx, actors.SubscribeOptions{Batch: 100, Handler: func(ctx context.Context, ev messages.SubscribedEvent) error {
		select {
		case first <- struct{}{}:
		default:
		}
		<-block
		return k.handle(ctx, ev)
	}})
	require.NoError(t, err)
	work(t, e.c, "w-0")
	<-first
	start := time.Now()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 625 {
				work(t, e.c, fmt.Sprintf("w-%d-%d", w, i%16))
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	st := e.srv.SubscriptionStats()
	assert.Equal(t, actors.SubscriptionStats{Head: st.Head}, st, "no poll parked, no read in flight, nothing queued")
	assert.Equal(t, uint64(10_002), st.Head)
	t.Logf("10,000 writes with a blocked subscriber: %s", took)
	close(block)
	got := k.wait(t, 10_002)
	require.NoError(t, sub.Close())
	for i, s := range got[:10_002] {
		require.Equal(t, uint64(i+1), s, "caught up from the log, in order")
	}
}

// Bad input gets a clear error and changes nothing.
func TestSubscriptionRequestsRefuseBadInput(t *testing.T) {
	e := newSubEnv(t, eventstore.NewMemory())
	work(t, e.c, "s")
	long := string(make([]byte, 129))
	for _, tc := range []struct {
		name string
		req  messages.Request
		want string
	}{
		{"empty name", &messages.Subscribe{}, "subscription name is 1..128"},
		{"long name", &messages.Subscribe{Name: long}, "subscription name is 1..128"},
		{"unknown kind", &messages.Subscribe{Name: "x", Filter: messages.EventFilter{Kinds: []string{"frame.exploded"}}}, `"frame.exploded" is not an event type`},
		{"scope and prefix", &messages.Subscribe{Name: "x", Filter: messages.EventFilter{Scope: "a", Prefix: "b"}}, "not both"},
		{"from and now", &messages.Subscribe{Name: "x", From: 1, FromNow: true}, "not both"},
		{"from past the head", &messages.Subscribe{Name: "x", From: 99}, "past the log's head"},
		{"a scope in the header", &messages.Subscribe{Header: messages.Header{Scope: "s"}, Name: "x"}, "names no scope"},
		{"read neither", &messages.ReadEvents{}, "needs a subscription name or a filter"},
		{"read both", &messages.ReadEvents{Name: "x", Filter: &messages.EventFilter{}}, "not both"},
		{"read max", &messages.ReadEvents{Filter: &messages.EventFilter{}, Max: 5000}, "out of range"},
		{"read bytes", &messages.ReadEvents{Filter: &messages.EventFilter{}, MaxBytes: 2 << 20}, "out of range"},
		{"read wait", &messages.ReadEvents{Filter: &messages.EventFilter{}, Wait: time.Hour}, "out of range"},
		{"read negative", &messages.ReadEvents{Filter: &messages.EventFilter{}, Max: -1}, "out of range"},
		{"ack zero", &messages.AckEvents{Name: "x"}, "at least 1"},
		{"unsubscribe no name", &messages.Unsubscribe{}, "subscription name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.c.Do(ctx, tc.req)
			require.ErrorIs(t, err, actors.ErrInvalidArgument)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	existed, err := e.c.Unsubscribe(ctx, "x")
	require.NoError(t, err)
	assert.False(t, existed, "nothing was created")
	_, err = e.c.Subscribe(ctx, actors.SubscribeOptions{})
	assert.ErrorIs(t, err, actors.ErrInvalidArgument, "no handler")
}

// Stop answers a parked poll (with no events) instead of leaving it to its
// deadline.
func TestStopAnswersParkedPolls(t *testing.T) {
	e := newSubEnv(t, eventstore.NewMemory())
	f := messages.EventFilter{}
	done := make(chan error, 1)
	go func() {
		r, err := e.c.ReadEvents(ctx, "", &messages.ReadEvents{Filter: &f, From: 1, Wait: 30 * time.Second})
		if err == nil && len(r.Events) > 0 {
			err = errors.New("events from an empty store")
		}
		done <- err
	}()
	for e.srv.SubscriptionStats().Parked == 0 { // each call is a round trip to the service
		require.Empty(t, done, "answered before parking")
	}
	start := time.Now()
	e.stop()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("a parked poll outlived Stop")
	}
	assert.Less(t, time.Since(start), 10*time.Second)
}

// Over remoting: a durable subscription long-polls a StateIndex in another
// process, receives every event in order, and a second one resumes after
// the first's acknowledgement; a handler-less Target actor works too.
func TestRemoteSubscription(t *testing.T) {
	p := newRemotePair(t)
	for i := range 5 {
		work(t, p.c, fmt.Sprintf("r%d", i))
	}
	k := newCollector()
	sub, err := p.c.Subscribe(ctx, actors.SubscribeOptions{Name: "remote", Handler: k.handle, Wait: time.Second})
	require.NoError(t, err)
	got := k.wait(t, 10)
	work(t, p.c, "late") // delivered by a long poll
	got = k.wait(t, 12)
	require.NoError(t, sub.Close())
	for i, s := range got {
		require.Equal(t, uint64(i+1), s)
	}
	assert.Equal(t, map[string]uint64{"": 13}, sub.Positions())

	work(t, p.c, "after")
	// The Target form: an actor that answers each event.
	seen := make(chan uint64, 16)
	pid := p.cliSys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if ev, ok := c.Message().(*messages.SubscribedEvent); ok {
			seen <- ev.Seq
			c.Respond(true)
		}
	}))
	defer p.cliSys.Root.Stop(pid)
	sub2, err := p.c.Subscribe(ctx, actors.SubscribeOptions{Name: "remote", Target: pid, Wait: time.Second})
	require.NoError(t, err)
	assert.Equal(t, uint64(13), <-seen, "resumed after the acknowledged position")
	assert.Equal(t, uint64(14), <-seen)
	require.NoError(t, sub2.Close())
}
