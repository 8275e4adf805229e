package actors_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/internal/proctest"
	"github.com/stateindex/stateindex/messages"
)

// spawn reserves est on a new root of scope parent for work in scope
// child, pushes the child's root with the token and records spent on it;
// it returns the parent frame, the child root and the reservation id.
func spawn(t *testing.T, c *actors.Client, parent, child string, est, spent int64) (string, string, string) {
	t.Helper()
	p := pushLimited(t, c, parent, "", 1000, "")
	res, err := c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut(parent), FrameID: p, For: child, Estimate: spend(est)})
	require.NoError(t, err)
	ch := pushLimited(t, c, child, "", 0, res.Token)
	_, err = c.RecordUsage(ctx, &messages.RecordUsage{Header: mut(child), FrameID: ch, Cost: budget.Cost{SpendMicros: spent}})
	require.NoError(t, err)
	return p, ch, res.ReservationID
}

func binding(t *testing.T, c *actors.Client, scope, id string) frames.Binding {
	t.Helper()
	r, err := c.GetLedger(ctx, &messages.GetLedger{Header: messages.Header{Scope: scope}})
	require.NoError(t, err)
	for _, b := range r.Bindings {
		if b.Reservation == id {
			return b
		}
	}
	t.Fatalf("scope %q has no binding %q: %+v", scope, id, r.Bindings)
	return frames.Binding{}
}

func pop(t *testing.T, c *actors.Client, scope, frame string) {
	t.Helper()
	_, err := c.PopFrame(ctx, &messages.PopFrame{Header: mut(scope), FrameID: frame, Status: frames.StatusCompleted})
	require.NoError(t, err)
}

func drain(t *testing.T, s *actors.Server) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	require.NoError(t, s.DrainOutbox(c))
}

// settledCharges lists the Charged of every spend.settled of scope.
func settledCharges(t *testing.T, e *env, scope string) []int64 {
	t.Helper()
	var out []int64
	require.NoError(t, e.store.ReadStream(ctx, scope, 1, func(r eventstore.Record) error {
		ev, err := eventstore.DecodeFrameEvent(r)
		if err != nil {
			return err
		}
		if s, ok := ev.(*frames.SpendSettled); ok {
			out = append(out, s.Charged)
		}
		return nil
	}))
	return out
}

func outboxRow(t *testing.T, e *env, scope string) bool {
	t.Helper()
	_, ok, err := e.store.TableGet(ctx, "outbox", []byte(scope))
	require.NoError(t, err)
	return ok
}

// assertDelivered checks the parent was charged spent once and the child's
// binding acknowledged it.
func assertDelivered(t *testing.T, c *actors.Client, parent, p, child, id string, spent int64) {
	t.Helper()
	row := ledgerRow(t, c, parent, p)
	assert.Equal(t, spent, row.Actual, "the parent is charged the child's spend")
	assert.Zero(t, row.Outstanding, "the reservation holds nothing once settled")
	b := binding(t, c, child, id)
	assert.True(t, b.Final)
	assert.Equal(t, spent, b.Reported)
	assert.Equal(t, b.Reported, b.Delivered, "the delivery is acknowledged")
	assert.True(t, b.DeliveredFinal)
	assert.False(t, b.Pending())
}

// The child's pop makes its binding pending; the worker settles it in the
// parent's scope and acknowledges it in the child's; the outbox row goes.
func TestOutboxDeliversAcrossScopes(t *testing.T) {
	e := newEnv(t)
	p, ch, id := spawn(t, e.c, "parent", "child", 300, 120)
	assert.True(t, outboxRow(t, e, "child"), "the row is written before the binding's push")
	assert.False(t, outboxRow(t, e, "parent"), "the reserving scope has no binding")
	before := ledgerRow(t, e.c, "parent", p)
	assert.Zero(t, before.Actual, "nothing settled before the pop")
	assert.Equal(t, int64(300), before.Outstanding)
	pop(t, e.c, "child", ch)
	drain(t, e.srv)
	assertDelivered(t, e.c, "parent", p, "child", id, 120)
	assert.Equal(t, []int64{120}, settledCharges(t, e, "parent"))
	assert.False(t, outboxRow(t, e, "child"), "every binding delivered: the row is removed")
	st := e.srv.OutboxStats()
	assert.Equal(t, int64(1), st.Delivered)
	assert.Zero(t, st.Pending)
}

// A crash between the parent's write and the child's acknowledgement: the
// delivery after the restart is the same request, answered as it was; the
// parent is charged once.
func TestOutboxCrashBetweenTheTwoWrites(t *testing.T) {
	e := newEnv(t)
	hit := make(chan struct{}, 1)
	actors.SetOutboxHook(e.srv, func(stage, _ string) bool {
		if stage != "ack" {
			return false
		}
		select {
		case hit <- struct{}{}:
		default:
		}
		return true
	})
	p, ch, id := spawn(t, e.c, "parent", "child", 300, 80)
	pop(t, e.c, "child", ch)
	<-hit
	assert.Equal(t, int64(80), ledgerRow(t, e.c, "parent", p).Actual, "the parent's write happened")
	b := binding(t, e.c, "child", id)
	assert.True(t, b.Pending(), "the child's did not")

	e.restart()
	drain(t, e.srv)
	assertDelivered(t, e.c, "parent", p, "child", id, 80)
	var total int64
	for _, c := range settledCharges(t, e, "parent") {
		total += c
	}
	assert.Equal(t, int64(80), total, "charged exactly once")
}

// The server stops before any delivery: the restarted server finds the
// scope in the outbox table and delivers by itself.
func TestOutboxFoundAfterRestart(t *testing.T) {
	e := newEnv(t)
	hit := make(chan struct{}, 1)
	actors.SetOutboxHook(e.srv, func(stage, _ string) bool {
		select {
		case hit <- struct{}{}:
		default:
		}
		return true
	})
	p, ch, id := spawn(t, e.c, "parent", "child", 300, 55)
	pop(t, e.c, "child", ch)
	<-hit
	assert.Zero(t, ledgerRow(t, e.c, "parent", p).Actual)
	require.True(t, outboxRow(t, e, "child"))

	e.restart()
	// No DrainOutbox: Start's scan of the table finds it.
	require.Eventually(t, func() bool {
		r, err := e.c.GetLedger(ctx, &messages.GetLedger{Header: messages.Header{Scope: "child"}})
		return err == nil && len(r.Bindings) == 1 && !r.Bindings[0].Pending()
	}, 20*time.Second, 5*time.Millisecond)
	drain(t, e.srv)
	assertDelivered(t, e.c, "parent", p, "child", id, 55)
	assert.False(t, outboxRow(t, e, "child"))
}

// A reserving scope that refuses the token (here: the server restarted with
// another ledger key, as members that do not share one would) is retried,
// never dropped; once the key is right again it is delivered.
func TestOutboxRetriesARefusalAndNeverDrops(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) { c.LedgerKey = []byte("ledger-key-A-0123456789abcdef0123") })
	hit := make(chan struct{}, 1)
	actors.SetOutboxHook(e.srv, func(string, string) bool {
		select {
		case hit <- struct{}{}:
		default:
		}
		return true
	})
	p, ch, id := spawn(t, e.c, "parent", "child", 300, 70)
	pop(t, e.c, "child", ch)
	<-hit

	keyA := e.cfg.LedgerKey
	e.cfg.LedgerKey = []byte("ledger-key-B-0123456789abcdef0123")
	e.restart()
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err := e.srv.DrainOutbox(short)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "refused: still pending")
	assert.Zero(t, ledgerRow(t, e.c, "parent", p).Actual)
	b := binding(t, e.c, "child", id)
	assert.True(t, b.Pending(), "kept")
	st := e.srv.OutboxStats()
	assert.Positive(t, st.Retries)
	assert.Equal(t, 1, st.Pending)
	assert.True(t, outboxRow(t, e, "child"))

	e.cfg.LedgerKey = keyA
	e.restart()
	drain(t, e.srv)
	assertDelivered(t, e.c, "parent", p, "child", id, 70)
}

// A forced destroy of the child's scope while its root is live finishes
// the binding with the spend so far, and the outbox still delivers it.
func TestOutboxOutlivesADestroyedScope(t *testing.T) {
	e := newEnv(t)
	p, _, id := spawn(t, e.c, "parent", "child", 300, 90)
	_, err := e.c.DestroyScope(ctx, &messages.DestroyScope{Header: mut("child"), Force: true, Why: "test"})
	require.NoError(t, err)
	drain(t, e.srv)
	assertDelivered(t, e.c, "parent", p, "child", id, 90)
	e.restart() // the binding survives the destroyed scope's removal (its snapshot)
	assert.Equal(t, int64(90), binding(t, e.c, "child", id).Delivered)
}

// Retention's expiry of an idle child scope destroys it with force: its
// live root's spend is still delivered.
func TestOutboxSurvivesExpiry(t *testing.T) {
	e := newEnv(t)
	p, _, id := spawn(t, e.c, "parent", "child", 300, 40)
	require.NoError(t, e.srv.StartRetention(actors.RetentionConfig{Expiry: func(scope string) time.Duration {
		if scope == "child" {
			return time.Hour
		}
		return 0
	}}))
	e.clock.Advance(2 * time.Hour)
	rep, err := e.srv.RunRetention(ctx)
	require.NoError(t, err)
	expired := false
	for _, s := range rep.Scopes {
		expired = expired || (s.Scope == "child" && s.Expired)
	}
	require.True(t, expired, "the child's scope expired: %+v", rep.Scopes)
	drain(t, e.srv)
	assertDelivered(t, e.c, "parent", p, "child", id, 40)
}

// In a node-local cluster the parent's scope and the child's live on
// different members: the child's member delivers through its cluster
// Client.
func TestClusterOutboxDeliversAcrossMembers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two cluster members (about two seconds)")
	}
	if raceEnabled {
		t.Skip("two cluster members in one process race inside Proto.Actor's cluster (see raceEnabled)")
	}
	ports := proctest.FreePorts(t, 2, true)
	members := []string{fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cc := actors.ClusterConfig{Name: "ob", Members: members, Shards: 2, HealthInterval: 200 * time.Millisecond, Logger: quiet}
	clock := newFakeClock()
	var nodes []*actors.ClusterNode
	for _, m := range members {
		node, err := actors.StartMember(quietSystem(), eventstore.NewMemory(), testConfig(clock), cc, m)
		require.NoError(t, err)
		t.Cleanup(node.Stop)
		nodes = append(nodes, node)
	}
	require.Eventually(t, func() bool { return len(nodes[0].Live()) == 2 && len(nodes[1].Live()) == 2 }, 30*time.Second, 20*time.Millisecond)
	scopeOn := func(m, prefix string) string {
		for i := 0; ; i++ {
			if s := fmt.Sprintf("%s-%d", prefix, i); actors.HomeOf(s, members) == m {
				return s
			}
		}
	}
	parent, child := scopeOn(members[0], "parent"), scopeOn(members[1], "child")
	c := nodes[0].Client()
	p, ch, id := spawn(t, c, parent, child, 300, 130)
	pop(t, c, child, ch)
	drain(t, nodes[1].Server())
	assertDelivered(t, c, parent, p, child, id, 130)
	assert.Equal(t, int64(1), nodes[1].Server().OutboxStats().Delivered, "the child's member delivered")
}

// Two levels: g reserves for scope mid, whose root reserves for scope
// leaf. The mid root finishes first and is delivered; the leaf's spend
// arrives late, is routed to mid's binding (its row written again before
// that append) and delivered on to g: g is charged both, once each.
func TestOutboxLateChargeIsRoutedUpward(t *testing.T) {
	e := newEnv(t)
	g, mid, midID := spawn(t, e.c, "g", "mid", 500, 20)
	res, err := e.c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut("mid"), FrameID: mid, For: "leaf", Estimate: spend(100)})
	require.NoError(t, err)
	leaf := pushLimited(t, e.c, "leaf", "", 0, res.Token)
	_, err = e.c.RecordUsage(ctx, &messages.RecordUsage{Header: mut("leaf"), FrameID: leaf, Cost: budget.Cost{SpendMicros: 30}})
	require.NoError(t, err)

	pop(t, e.c, "mid", mid)
	drain(t, e.srv)
	assertDelivered(t, e.c, "g", g, "mid", midID, 20)
	require.False(t, outboxRow(t, e, "mid"), "mid's bindings all delivered")

	hit := make(chan struct{}, 1)
	actors.SetOutboxHook(e.srv, func(stage, scope string) bool {
		if scope != "mid" {
			return false
		}
		select {
		case hit <- struct{}{}:
		default:
		}
		return true
	})
	pop(t, e.c, "leaf", leaf)
	<-hit // the leaf's settlement reached mid, and mid's binding is pending again
	assert.True(t, outboxRow(t, e, "mid"), "written again before the routed charge's append")
	b := binding(t, e.c, "mid", midID)
	assert.Equal(t, int64(50), b.Reported)
	assert.True(t, b.Pending())
	actors.SetOutboxHook(e.srv, nil)
	drain(t, e.srv)
	assertDelivered(t, e.c, "g", g, "mid", midID, 50)
	assert.Equal(t, []int64{20, 30}, settledCharges(t, e, "g"))
	assert.False(t, outboxRow(t, e, "mid"))
	assert.False(t, outboxRow(t, e, "leaf"))
}

// Retention never removes an outbox entry before its delivery: the child
// scope's bound root finished (its settlement held back); a pass that
// keeps no finished run removes the run's records, or one that expires the
// idle scope destroys it; after a restart the settlement is still found
// (in the scope's state and the outbox table) and delivered: the parent is
// charged once.
func TestOutboxSurvivesRetention(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rc      actors.RetentionConfig
		expired bool
	}{
		{"keep no finished run", actors.RetentionConfig{Policy: func(string) (frames.RetentionPolicy, string, bool) {
			return frames.RetentionPolicy{KeepLastN: 0, OnCompletion: frames.CompletionDelete}, "", true
		}}, false},
		{"expire the idle scope", actors.RetentionConfig{Expiry: func(scope string) time.Duration {
			if scope == "child" {
				return time.Minute
			}
			return 0
		}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(c *actors.Config) { c.RequestHorizon = time.Minute; c.ClockSkew = time.Second })
			hit := make(chan struct{}, 1)
			actors.SetOutboxHook(e.srv, func(string, string) bool {
				select {
				case hit <- struct{}{}:
				default:
				}
				return true
			})
			p, ch, id := spawn(t, e.c, "parent", "child", 300, 65)
			pop(t, e.c, "child", ch)
			<-hit
			other := pushLimited(t, e.c, "child", "", 0, "") // a later run, unbound
			pop(t, e.c, "child", other)

			e.clock.Advance(time.Hour) // past the request horizon (and the reservation's lease)
			require.NoError(t, e.srv.StartRetention(tc.rc))
			rep, err := e.srv.RunRetention(ctx)
			require.NoError(t, err)
			require.Empty(t, rep.Errors)
			var sr *actors.ScopeRetention
			for i := range rep.Scopes {
				if rep.Scopes[i].Scope == "child" {
					sr = &rep.Scopes[i]
				}
			}
			require.NotNil(t, sr, "the pass ran over the child scope: %+v", rep.Scopes)
			assert.Equal(t, tc.expired, sr.Expired, "%+v", *sr)
			if !tc.expired {
				assert.Equal(t, 2, sr.Runs, "both finished runs removed")
			}
			_, err = e.c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: "child"}, FrameID: ch})
			require.ErrorIs(t, err, actors.ErrFrameNotFound, "the bound root's records are gone")
			b := binding(t, e.c, "child", id)
			assert.True(t, b.Pending(), "its binding is not")
			assert.Equal(t, int64(65), b.Reported)
			assert.True(t, outboxRow(t, e, "child"), "nor its outbox row")
			assert.Zero(t, ledgerRow(t, e.c, "parent", p).Actual)

			e.restart()
			drain(t, e.srv)
			assertDelivered(t, e.c, "parent", p, "child", id, 65)
			assert.Equal(t, []int64{65}, settledCharges(t, e, "parent"), "charged once")
			assert.False(t, outboxRow(t, e, "child"), "delivered: the row goes")
			require.NoError(t, e.store.Verify(ctx, nil))
		})
	}
}

// gatedTables is a store whose first write to the outbox table waits to be
// released, and which counts the outbox table's writes.
type gatedTables struct {
	*eventstore.BoltStore
	entered, release chan struct{}
	writes           atomic.Int64
}

func (g *gatedTables) TableWrite(c context.Context, table string, ops []eventstore.TableOp) error {
	if table == "outbox" && g.writes.Add(1) == 1 {
		close(g.entered)
		<-g.release
	}
	return g.BoltStore.TableWrite(c, table, ops)
}

// A scope evicted from the cache while a push writes its outbox row is
// reloaded knowing the row is there: the row is written once. (Before, the
// reload wrote it again; in a busy server with a small cache, a push could
// go round write, evict, reload many times, until its request id was
// older than the request horizon and the push was refused as expired on
// its first send.)
func TestOutboxRowWrittenOnceAcrossEviction(t *testing.T) {
	st, err := eventstore.Open(filepath.Join(t.TempDir(), "stateindex.db"), &eventstore.Options{NoSync: true})
	require.NoError(t, err)
	defer st.Close()
	gs := &gatedTables{BoltStore: st, entered: make(chan struct{}), release: make(chan struct{})}
	cfg := testConfig(newFakeClock())
	cfg.Shards, cfg.CacheScopes = 1, 1 // a read of another scope evicts the pushing one
	sys := quietSystem()
	defer sys.Shutdown()
	srv, err := actors.Start(sys, gs, cfg)
	require.NoError(t, err)
	defer srv.Stop()
	c := srv.Client()

	p := pushLimited(t, c, "parent", "", 1000, "")
	res, err := c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut("parent"), FrameID: p, For: "child", Estimate: spend(300)})
	require.NoError(t, err)
	pushed := make(chan error, 1)
	go func() {
		_, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut("child"), Goal: "work", Budget: budget.TokenBudget{Total: 1000}, Reservation: res.Token})
		pushed <- err
	}()
	<-gs.entered // the child scope is held, its row being written
	_, err = c.GetLedger(ctx, &messages.GetLedger{Header: mut("parent")})
	require.NoError(t, err) // the parent loaded: the child's state evicted
	close(gs.release)
	require.NoError(t, <-pushed)
	assert.Equal(t, int64(1), gs.writes.Load(), "the outbox row is written once")
	_, ok, err := st.TableGet(ctx, "outbox", []byte("child"))
	require.NoError(t, err)
	assert.True(t, ok)
	r, err := c.GetLedger(ctx, &messages.GetLedger{Header: mut("child")})
	require.NoError(t, err)
	require.Len(t, r.Bindings, 1)
	assert.Equal(t, res.ReservationID, r.Bindings[0].Reservation)
}
