package actors_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

// fakeClock is a test clock: it moves only when told to.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// env is a StateIndex on a bolt file in a temporary directory.
type env struct {
	t      *testing.T
	dir    string
	path   string
	store  quietStore
	sys    *actor.ActorSystem
	srv    *actors.Server
	c      *actors.Client
	clock  *fakeClock
	cfg    actors.Config
	closed bool
}

func quietSystem() *actor.ActorSystem {
	return actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}))
}

func testConfig(clock *fakeClock) actors.Config {
	cfg := actors.DefaultConfig()
	cfg.TokenKey = testKey
	cfg.Clock = clock.Now
	cfg.Shards = 4
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return cfg
}

func newEnv(t *testing.T, tweak ...func(*actors.Config)) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{t: t, dir: dir, path: filepath.Join(dir, "stateindex.db"), clock: newFakeClock()}
	e.cfg = testConfig(e.clock)
	for _, f := range tweak {
		f(&e.cfg)
	}
	e.start()
	t.Cleanup(e.stop)
	return e
}

func (e *env) start() {
	e.t.Helper()
	st, err := eventstore.Open(e.path, &eventstore.Options{NoSync: true})
	require.NoError(e.t, err)
	e.store = quietStore{BoltStore: st, e: e}
	e.sys = quietSystem()
	e.srv, err = actors.Start(e.sys, st, e.cfg)
	require.NoError(e.t, err)
	e.c = e.srv.Client()
	e.closed = false
}

func (e *env) stop() {
	if e.closed {
		return
	}
	e.srv.Stop()
	e.sys.Shutdown()
	_ = e.store.Close()
	e.closed = true
}

// quietStore is the env's store: its Verify first lets the registry
// write what it has to (Verify wants a quiet store: its page check reads
// what a concurrent commit changes, and the registry commits its index
// after the scopes' commits).
type quietStore struct {
	*eventstore.BoltStore
	e *env
}

func (s quietStore) Verify(ctx context.Context, report func(stream string, err error)) error {
	s.e.settle()
	return s.BoltStore.Verify(ctx, report)
}

// settle waits until the registry's index reflects the whole log (its last
// write done), when the server runs one.
func (e *env) settle() {
	e.t.Helper()
	if e.closed || e.cfg.RegistryOff {
		return
	}
	_, err := e.c.ListFrames(ctx, &messages.ListFrames{Limit: 1, MinPosition: e.seq()})
	require.NoError(e.t, err)
}

// restart simulates a process restart: new actor system, same data file.
func (e *env) restart() {
	e.t.Helper()
	e.stop()
	e.start()
}

func (e *env) version(scope string) int64 {
	e.t.Helper()
	info, err := e.store.Stream(context.Background(), scope)
	require.NoError(e.t, err)
	return info.Version
}

func (e *env) seq() uint64 {
	e.t.Helper()
	s, err := e.store.LastSeq(context.Background())
	require.NoError(e.t, err)
	return s
}

var ctx = context.Background()

func errorsAs(err error, target any) bool { return errors.As(err, target) }

func hexOf(h eventstore.Hash) string { return fmt.Sprintf("%x", h[:]) }

func mustLoad(t *testing.T, e *env, scope string) *frames.State {
	t.Helper()
	st, _, err := eventstore.LoadState(ctx, e.store, scope, 0, 0, nil)
	require.NoError(t, err)
	return st
}

// signedSettle and signedAck sign a settlement and its acknowledgement with
// the tests' ledger key (the TokenKey), as the outbox signs its own.
func signedSettle(r *messages.SettleSpend) *messages.SettleSpend {
	actors.SignSettlement(testKey, r)
	return r
}

func signedAck(r *messages.AckSettlement) *messages.AckSettlement {
	actors.SignAck(testKey, r)
	return r
}
