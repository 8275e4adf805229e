package actors_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// expiryWatch collects the reports of the state expirer's background
// passes.
type expiryWatch struct {
	mu      sync.Mutex
	removed map[string]int // scope → keys removed
	errs    []error
	more    chan struct{}
}

func watchExpiry(srv *actors.Server) *expiryWatch {
	w := &expiryWatch{removed: map[string]int{}, more: make(chan struct{}, 1)}
	actors.SetStateExpiryHook(srv, func(r actors.StateExpiryReport) {
		w.mu.Lock()
		for _, s := range r.Scopes {
			w.removed[s.Scope] += s.Removed
		}
		w.errs = append(w.errs, r.Errors...)
		w.mu.Unlock()
		select {
		case w.more <- struct{}{}:
		default:
		}
	})
	return w
}

// wait returns once the background passes removed n keys of scope.
func (w *expiryWatch) wait(t *testing.T, scope string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		w.mu.Lock()
		got, errs := w.removed[scope], w.errs
		w.mu.Unlock()
		require.Empty(t, errs)
		if got >= n {
			require.Equal(t, n, got, "scope %s", scope)
			return
		}
		select {
		case <-w.more:
		case <-ctx.Done():
			t.Fatalf("the background expiry removed %d of %d keys of %s", got, n, scope)
		}
	}
}

// expiredInLog lists the keys the state.expired events of scope's log
// removed.
func expiredInLog(t *testing.T, e *env, scope string) []string {
	t.Helper()
	var keys []string
	require.NoError(t, e.store.ReadStream(ctx, scope, 1, func(r eventstore.Record) error {
		if r.Type != frames.TypeStateExpired {
			return nil
		}
		ev, err := eventstore.DecodeFrameEvent(r)
		if err != nil {
			return err
		}
		for _, k := range ev.(*frames.StateExpired).Keys {
			keys = append(keys, k.Frame+"/"+k.Key)
		}
		return nil
	}))
	return keys
}

// expiryRows reads the state expirer's table: scope → row times.
func expiryRows(t *testing.T, e *env) map[string][]int64 {
	t.Helper()
	rows := map[string][]int64{}
	require.NoError(t, e.store.TableScan(ctx, actors.StateExpiryTable, nil, nil, false, func(k, _ []byte) (bool, error) {
		at, scope, ok := actors.ParseExpiryRow(k)
		require.True(t, ok, "row %x", k)
		rows[scope] = append(rows[scope], at)
		return true, nil
	}))
	return rows
}

func setState(t *testing.T, c *actors.Client, scope string, ops ...messages.StateOp) *messages.ChangeStateReply {
	t.Helper()
	r, err := c.ChangeState(ctx, &messages.ChangeState{Header: mut(scope), Ops: ops})
	require.NoError(t, err)
	return r
}

func getState(t *testing.T, c *actors.Client, scope, frame string, keys ...string) *messages.GetStateReply {
	t.Helper()
	g, err := c.GetState(ctx, &messages.GetState{Header: messages.Header{Scope: scope}, FrameID: frame, Keys: keys})
	require.NoError(t, err)
	return g
}

func noBackgroundExpiry(c *actors.Config) { c.StateExpiryCheck = -1 }

// A key with a TTL is gone from reads at its expiry, then from the state
// by the server's background expiry with no request to its scope: the log
// has its state.expired, and a restart (a snapshot, and the log replayed)
// shows it gone. The key without a TTL stays.
func TestStateExpiryInTheBackground(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) { c.StateExpiryCheck = 2 * time.Millisecond; c.SnapshotEvery = 1 })
	w := watchExpiry(e.srv)
	s := "expiring"
	r := setState(t, e.c, s, messages.StateOp{Kind: "set", Key: "tmp", Value: []byte("x"), TTLMillis: 60_000},
		messages.StateOp{Kind: "set", Key: "keep", Value: []byte("y")})

	e.clock.Advance(time.Minute - time.Nanosecond)
	require.Len(t, getState(t, e.c, s, "", "tmp").Entries, 1, "a nanosecond before its expiry")
	e.clock.Advance(time.Nanosecond)
	g := getState(t, e.c, s, "", "tmp", "keep")
	require.Len(t, g.Entries, 1, "gone from reads at its expiry")
	assert.Equal(t, "keep", g.Entries[0].Key)
	assert.Equal(t, []string{"tmp"}, g.Missing)

	w.wait(t, s, 1)
	assert.Equal(t, []string{"/tmp"}, expiredInLog(t, e, s))
	assert.Equal(t, r.Version+1, e.version(s), "one state.expired and nothing else")
	st := mustLoad(t, e, s)
	assert.NotContains(t, st.KV, "tmp", "gone from the state")
	assert.Contains(t, st.KV, "keep")
	assert.Empty(t, expiryRows(t, e), "nothing left to expire, no row left")

	e.restart()
	rg, err := e.c.RangeState(ctx, &messages.RangeState{Header: messages.Header{Scope: s}})
	require.NoError(t, err)
	require.Len(t, rg.Entries, 1)
	assert.Equal(t, "keep", rg.Entries[0].Key)
	assert.Equal(t, int64(len("keep")+1+32), rg.Size.Total, "the expired key no longer counts")
	enc, err := eventstore.EncodeState(mustLoad(t, e, s))
	require.NoError(t, err)
	require.NoError(t, e.store.SaveSnapshot(ctx, s, enc))
	e.restart()
	st, info, err := actors.LoadState(ctx, e.store, s, e.cfg.Recall(), nil)
	require.NoError(t, err)
	assert.Equal(t, r.Version+1, info.SnapshotVersion, "loaded from a snapshot after the state.expired")
	assert.NotContains(t, st.KV, "tmp")
}

// A restart before a key's expiry: the schedule is in the store, and the
// key is removed once it expires, with nothing sent to its scope. A key
// that expires while the server is down is removed by the first pass
// after the start, once.
func TestStateExpiryAcrossRestarts(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) { c.StateExpiryCheck = 2 * time.Millisecond })
	setState(t, e.c, "a", messages.StateOp{Kind: "set", Key: "k", Value: []byte("1"), TTLMillis: 10_000})
	setState(t, e.c, "b", messages.StateOp{Kind: "push", Key: "l", Value: []byte("1"), TTLMillis: 20_000, Keep: 5})
	f := push(t, e.c, "b", "", 100)
	setState(t, e.c, "b", messages.StateOp{Kind: "set", FrameID: f, Key: "req", Value: []byte("r"), TTLMillis: 30_000})

	e.restart()
	w := watchExpiry(e.srv)
	e.clock.Advance(11 * time.Second)
	w.wait(t, "a", 1)
	assert.Equal(t, []string{"/k"}, expiredInLog(t, e, "a"))
	assert.Empty(t, expiredInLog(t, e, "b"), "b's keys expire later")

	e.stop()
	e.clock.Advance(time.Minute) // both of b's keys expire while the server is down
	e.start()
	_, err := e.srv.RunStateExpiry(ctx) // the first pass may have run already: either removes them
	require.NoError(t, err)
	assert.Equal(t, []string{"/l", f + "/req"}, expiredInLog(t, e, "b"), "removed once, the frame's key too")
	assert.Empty(t, getState(t, e.c, "b", f, "req").Entries)
	assert.Empty(t, expiryRows(t, e))
}

// Many scopes: each pass expires at most StateExpiryBatch scopes (the
// rest the next), only the scopes whose keys expired are written to, and
// once every key expired, every scope has its state.expired and the
// schedule is empty.
func TestStateExpiryManyScopes(t *testing.T) {
	e := newEnv(t, noBackgroundExpiry)
	const n = actors.StateExpiryBatch*2 + 88
	versions := map[string]int64{}
	for i := range n {
		s := fmt.Sprintf("scope-%03d", i)
		r := setState(t, e.c, s, messages.StateOp{Kind: "set", Key: "k", Value: []byte("v"), TTLMillis: int64(1000 * (i + 1))},
			messages.StateOp{Kind: "set", Key: "stay", Value: []byte("v")})
		versions[s] = r.Version
	}
	require.Len(t, expiryRows(t, e), n, "one row per scope")

	due := actors.StateExpiryBatch + 44
	e.clock.Advance(time.Duration(due)*time.Second + time.Millisecond)
	rep, err := e.srv.RunStateExpiry(ctx)
	require.NoError(t, err)
	require.Empty(t, rep.Errors)
	assert.Len(t, rep.Scopes, actors.StateExpiryBatch, "bounded")
	assert.True(t, rep.More)
	rep, err = e.srv.RunStateExpiry(ctx)
	require.NoError(t, err)
	assert.Len(t, rep.Scopes, 44, "the rest of what is due")
	assert.False(t, rep.More)
	assert.Equal(t, e.clock.Now().Add(time.Second-time.Millisecond).UnixNano(), rep.Next, "the next scope's expiry")
	for i := range n {
		s := fmt.Sprintf("scope-%03d", i)
		if i < due {
			assert.Equal(t, versions[s]+1, e.version(s), s)
		} else {
			assert.Equal(t, versions[s], e.version(s), "%s: not due, not written", s)
		}
	}

	e.clock.Advance(time.Duration(n) * time.Second)
	for {
		rep, err := e.srv.RunStateExpiry(ctx)
		require.NoError(t, err)
		require.Empty(t, rep.Errors)
		if !rep.More {
			break
		}
	}
	for i := range n {
		s := fmt.Sprintf("scope-%03d", i)
		assert.Equal(t, []string{"/k"}, expiredInLog(t, e, s), s)
	}
	assert.Empty(t, expiryRows(t, e))
	rep, err = e.srv.RunStateExpiry(ctx)
	require.NoError(t, err)
	assert.Empty(t, rep.Scopes, "nothing due")
	assert.Zero(t, rep.Next)
}

// A sliding TTL pushed back by writes is not removed at its first
// expiry: the row that fires early only moves to the key's new expiry.
func TestStateExpirySlidingTTLNotEarly(t *testing.T) {
	e := newEnv(t, noBackgroundExpiry)
	s := "sliding"
	setState(t, e.c, s, messages.StateOp{Kind: "set", Key: "session", Value: []byte("0"), TTLMillis: 10_000, Sliding: true})
	for i := range 5 {
		e.clock.Advance(6 * time.Second)
		setState(t, e.c, s, messages.StateOp{Kind: "set", Key: "session", Value: []byte{byte('1' + i)}}) // TTL 0: the key's own rule
		rep, err := e.srv.RunStateExpiry(ctx)
		require.NoError(t, err)
		require.Empty(t, rep.Errors)
		assert.Zero(t, rep.Removed(), "write %d", i)
		g := getState(t, e.c, s, "", "session")
		require.Len(t, g.Entries, 1, "write %d", i)
		assert.Equal(t, e.clock.Now().Add(10*time.Second).UnixNano(), g.Entries[0].ExpiresAt)
	}
	assert.Empty(t, expiredInLog(t, e, s))
	rows := expiryRows(t, e)[s]
	require.NotEmpty(t, rows)
	assert.LessOrEqual(t, rows[0], e.clock.Now().Add(10*time.Second).UnixNano(), "a row at or before the key's expiry")

	e.clock.Advance(10 * time.Second)
	rep, err := e.srv.RunStateExpiry(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, rep.Removed())
	assert.Equal(t, []string{"/session"}, expiredInLog(t, e, s))
}

// The expirer sleeps until the earliest row, not its check interval: a
// row written while it sleeps for an hour wakes it, and the key is
// removed once the clock reaches its expiry.
func TestStateExpiryTimerFollowsTheEarliestRow(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) { c.StateExpiryCheck = time.Hour })
	w := watchExpiry(e.srv)
	setState(t, e.c, "soon", messages.StateOp{Kind: "set", Key: "k", Value: []byte("v"), TTLMillis: 20})
	e.clock.Advance(20 * time.Millisecond)
	w.wait(t, "soon", 1)
	assert.Equal(t, []string{"/k"}, expiredInLog(t, e, "soon"))
}

// The schedule's invariant under random changes, restarts and passes:
// every scope with a key that has a TTL (at either level) has a row at or
// before its earliest expiry; once the clock passes every expiry, passes
// remove every key with a TTL and leave no row.
func TestStateExpiryScheduleInvariant(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			e := newEnv(t, noBackgroundExpiry, func(c *actors.Config) { c.CacheScopes = 4 }) // evictions too
			rnd := rand.New(rand.NewPCG(seed, 15))
			scopes := []string{"s0", "s1", "s2", "s3", "s4", "s5"}
			live := map[string]string{} // scope → a live frame
			check := func(step int) {
				rows := expiryRows(t, e)
				for _, s := range scopes {
					next := mustLoad(t, e, s).NextStateExpiry()
					if next == 0 {
						continue
					}
					ok := false
					for _, at := range rows[s] {
						ok = ok || at <= next
					}
					require.True(t, ok, "step %d: %s expires at %d; rows %v", step, s, next, rows[s])
				}
			}
			for step := range 300 {
				s := scopes[rnd.IntN(len(scopes))]
				key := fmt.Sprintf("k%d", rnd.IntN(4))
				ttl := []int64{0, 0, -1, 500, 2000, 5000, 30_000}[rnd.IntN(7)]
				op := messages.StateOp{Kind: "set", Key: key, Value: []byte("v"), TTLMillis: ttl, Sliding: ttl > 0 && rnd.IntN(2) == 0}
				switch x := rnd.IntN(20); {
				case x < 8:
				case x < 11:
					op.Kind, op.Keep = "push", 3
				case x < 13:
					op = messages.StateOp{Kind: "delete", Key: key}
				case x == 13:
					op = messages.StateOp{Kind: "clear"}
				case x == 14:
					if f := live[s]; f != "" {
						pop(t, e.c, s, f)
						delete(live, s)
					} else {
						live[s] = push(t, e.c, s, "", 100)
					}
					continue
				case x == 15:
					e.clock.Advance(time.Duration(rnd.IntN(3000)) * time.Millisecond)
					_, err := e.srv.RunStateExpiry(ctx)
					require.NoError(t, err)
					check(step)
					continue
				case x == 16 && step%7 == 0:
					e.restart()
					check(step)
					continue
				default:
					e.clock.Advance(time.Duration(rnd.IntN(1000)) * time.Millisecond)
				}
				if f := live[s]; f != "" && rnd.IntN(3) == 0 {
					op.FrameID = f
				}
				_, err := e.c.ChangeState(ctx, &messages.ChangeState{Header: mut(s), Ops: []messages.StateOp{op}})
				if err != nil {
					require.ErrorIs(t, err, actors.ErrInvalidArgument, "a push to a key that holds a value") // refused: no row needed
				}
				check(step)
			}
			e.clock.Advance(time.Minute)
			for {
				rep, err := e.srv.RunStateExpiry(ctx)
				require.NoError(t, err)
				require.Empty(t, rep.Errors)
				if !rep.More {
					break
				}
			}
			now := e.clock.Now().UnixNano()
			for _, s := range scopes {
				st := mustLoad(t, e, s)
				assert.Empty(t, st.ExpiredKeys(now), s)
				assert.Zero(t, st.NextStateExpiry(), s)
			}
			assert.Empty(t, expiryRows(t, e))
		})
	}
}

// Scopes writing their first TTL at once share the schedule's table
// writes (rowWriter): every one gets its row, and every key is removed.
func TestStateExpiryConcurrentFirstTTLs(t *testing.T) {
	e := newEnv(t, noBackgroundExpiry)
	const n = 64
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = e.c.ChangeState(ctx, &messages.ChangeState{Header: mut(fmt.Sprintf("c-%02d", i)),
				Ops: []messages.StateOp{{Kind: "set", Key: "k", Value: []byte("v"), TTLMillis: 1000}}})
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	assert.Len(t, expiryRows(t, e), n)
	e.clock.Advance(time.Second)
	rep, err := e.srv.RunStateExpiry(ctx)
	require.NoError(t, err)
	assert.Equal(t, n, rep.Removed())
	assert.Empty(t, expiryRows(t, e))
}
