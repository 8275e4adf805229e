package actors_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/eventstore/storetest"
	"github.com/stateindex/stateindex/messages"
)

// faultEnv is a StateIndex over a fault-injecting store over a bolt file,
// optionally with bounded retries of writes that fail before their commit.
type faultEnv struct {
	t      *testing.T
	path   string
	bolt   *eventstore.BoltStore
	faulty *storetest.Faulty
	retry  *eventstore.RetryStore
	sys    *actor.ActorSystem
	srv    *actors.Server
	c      *actors.Client
	waits  []time.Duration
}

func newFaultEnv(t *testing.T, retry bool) *faultEnv {
	e := &faultEnv{t: t, path: filepath.Join(t.TempDir(), "stateindex.db")}
	e.open(retry)
	t.Cleanup(e.close)
	return e
}

func (e *faultEnv) open(retry bool) {
	var err error
	e.bolt, err = eventstore.Open(e.path, &eventstore.Options{NoSync: true})
	require.NoError(e.t, err)
	e.faulty = storetest.NewFaulty(e.bolt)
	var store eventstore.Store = e.faulty
	if retry {
		e.retry = eventstore.WithRetry(e.faulty, eventstore.RetryPolicy{Attempts: 3, Initial: 10 * time.Millisecond, Max: time.Second,
			Wait: func(_ context.Context, d time.Duration) error { e.waits = append(e.waits, d); return nil }})
		store = e.retry
	}
	e.sys = quietSystem()
	cfg := testConfig(newFakeClock())
	cfg.Shards = 2
	e.srv, err = actors.Start(e.sys, store, cfg)
	require.NoError(e.t, err)
	e.c = e.srv.Client()
}

func (e *faultEnv) close() {
	if e.srv == nil {
		return
	}
	e.srv.Stop()
	e.sys.Shutdown()
	_ = e.bolt.Close()
	e.srv = nil
}

// reopen restarts the process: a new StateIndex on the reopened file.
func (e *faultEnv) reopen() {
	retry := e.retry != nil
	e.close()
	e.open(retry)
}

// durable reads what the data file holds for scope: its version and the
// state a cold load rebuilds.
func (e *faultEnv) durable(scope string) (int64, int) {
	e.t.Helper()
	info, err := e.bolt.Stream(ctx, scope)
	require.NoError(e.t, err)
	st, _, err := actors.LoadState(ctx, e.bolt, scope, actors.Recall{}, nil)
	require.NoError(e.t, err)
	return info.Version, len(st.Frames)
}

func (e *faultEnv) stack(scope string) *messages.GetStackReply {
	e.t.Helper()
	g, err := e.c.GetStack(ctx, &messages.GetStack{Header: messages.Header{Scope: scope}})
	require.NoError(e.t, err, "reads keep being served")
	return g
}

// A write that fails before its commit (EIO, ENOSPC): the request fails,
// the cached state does not move (the next read equals the file), the
// scope and every other scope go on, and the same request sent again
// applies once.
func TestWriteErrorBeforeCommit(t *testing.T) {
	for _, kind := range []storetest.FaultKind{storetest.WriteError, storetest.DiskFull} {
		t.Run(kind.String(), func(t *testing.T) {
			e := newFaultEnv(t, false)
			root := push(t, e.c, "a", "", 1000)
			push(t, e.c, "b", "", 1000)
			before := e.stack("a")

			e.faulty.Inject(storetest.Fault{Kind: kind, Stream: "a"})
			req := &messages.PushFrame{Header: mut("a"), ParentID: root, Goal: "child", Budget: budget.TokenBudget{Total: 10}}
			_, err := e.c.PushFrame(ctx, req)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "before its commit (nothing written)")

			after := e.stack("a")
			assert.Equal(t, before, after, "the cached state did not advance")
			v, _ := e.durable("a")
			assert.Equal(t, after.Version, v, "the next read equals what the file holds")

			push(t, e.c, "b", "", 1000) // other scopes carry on
			addHandle(t, e.c, "a", root, compaction.Low, "the scope itself carries on")

			r, err := e.c.PushFrame(ctx, req) // the same request id again
			require.NoError(t, err)
			again, err := e.c.PushFrame(ctx, req)
			require.NoError(t, err)
			assert.Equal(t, r, again, "applied once")
			assert.Len(t, e.stack("a").Frames, 2)
		})
	}
}

// With bounded retries (eventstore.WithRetry), a write that fails before
// its commit is retried with exponential backoff: a passing failure is
// invisible to the caller; one that persists fails after the last attempt,
// having written nothing.
func TestWriteRetriedBeforeCommit(t *testing.T) {
	e := newFaultEnv(t, true)
	root := push(t, e.c, "a", "", 1000)

	e.faulty.Inject(storetest.Fault{Kind: storetest.DiskFull, Stream: "a", Times: 2})
	before := e.faulty.Attempts()
	_, err := e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut("a"), FrameID: root, Priority: compaction.Low, Content: "x"})
	require.NoError(t, err, "the third attempt succeeds")
	assert.Equal(t, before+3, e.faulty.Attempts())
	assert.Equal(t, []time.Duration{10 * time.Millisecond, 20 * time.Millisecond}, e.waits)

	e.faulty.Inject(storetest.Fault{Kind: storetest.WriteError, Stream: "a", Times: 3})
	v0, _ := e.durable("a")
	_, err = e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut("a"), FrameID: root, Priority: compaction.Low, Content: "y"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "gave up after 3 attempts")
	v1, _ := e.durable("a")
	assert.Equal(t, v0, v1, "nothing written")
	assert.Equal(t, v0, e.stack("a").Version, "the cached state did not advance")
}

// A failed commit (fsync): the request fails with store_failed, nothing of
// it is visible, the cached state does not advance, the failed fsync is
// never retried, and the store refuses every write — in every scope —
// until it is reopened, saying so, while reads go on. After the reopen the
// same request applies exactly once.
func TestFsyncFailureDisablesWritesUntilReopen(t *testing.T) {
	e := newFaultEnv(t, true) // retries on: they must not touch a failed commit
	root := push(t, e.c, "a", "", 1000)
	push(t, e.c, "b", "", 1000)
	beforeA, beforeB := e.stack("a"), e.stack("b")

	e.faulty.Inject(storetest.Fault{Kind: storetest.SyncError, Stream: "a"})
	attempts := e.faulty.Attempts()
	req := &messages.RecordUsage{Header: mut("a"), FrameID: root, Cost: budget.Cost{InputTokens: 7, Turns: 1}}
	_, err := e.c.RecordUsage(ctx, req)
	require.ErrorIs(t, err, actors.ErrStoreFailed)
	assert.Contains(t, err.Error(), "writes are disabled until the store is reopened")
	assert.Equal(t, attempts+1, e.faulty.Attempts(), "a failed fsync is never retried")

	assert.Equal(t, beforeA, e.stack("a"), "the cached state did not advance")
	v, _ := e.durable("a")
	assert.Equal(t, beforeA.Version, v)

	for _, s := range []string{"a", "b"} {
		_, err = e.c.PushFrame(ctx, &messages.PushFrame{Header: mut(s), Goal: "more"})
		require.ErrorIs(t, err, actors.ErrStoreFailed, "scope %s: writes refused", s)
		assert.Contains(t, err.Error(), "writes disabled until the store is reopened")
	}
	assert.Equal(t, beforeB, e.stack("b"), "other scopes keep serving reads")
	_, err = e.c.AssembleContextPack(ctx, &messages.AssembleContextPack{Header: messages.Header{Scope: "a"}, FrameID: root, BudgetTokens: 1000})
	require.NoError(t, err)

	e.reopen()
	r, err := e.c.RecordUsage(ctx, req)
	require.NoError(t, err, "after the reopen the same request applies")
	again, err := e.c.RecordUsage(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, r, again, "once")
	g, err := e.c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: "a"}, FrameID: root})
	require.NoError(t, err)
	assert.Equal(t, int64(7), g.Frame.Cost.InputTokens)
}

// A commit whose fsync failed after its events reached the file: the
// outcome is unknown until the reopen; then the file has them, and the
// same request sent again returns the original reply without writing
// anything (request ids make the uncertain write safe to retry).
func TestFsyncFailureAfterWriteResolvedByReopen(t *testing.T) {
	e := newFaultEnv(t, false)
	root := push(t, e.c, "a", "", 1000)
	e.faulty.Inject(storetest.Fault{Kind: storetest.SyncErrorAfterWrite, Stream: "a"})
	req := &messages.AddResult{Header: mut("a"), FrameID: root, Kind: "file", Ref: "/out/report.md"}
	_, err := e.c.AddResult(ctx, req)
	require.ErrorIs(t, err, actors.ErrStoreFailed)
	assert.Contains(t, err.Error(), "whether these events were written is unknown")
	_, err = e.c.PushFrame(ctx, &messages.PushFrame{Header: mut("b"), Goal: "g"})
	require.ErrorIs(t, err, actors.ErrStoreFailed, "writes refused until the reopen")

	e.reopen()
	v, _ := e.durable("a")
	assert.Equal(t, int64(2), v, "the events reached the file")
	r, err := e.c.AddResult(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, int64(2), r.Version, "the original reply: nothing appended again")
	v, _ = e.durable("a")
	assert.Equal(t, int64(2), v)
	g, err := e.c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: "a"}, FrameID: root})
	require.NoError(t, err)
	assert.Len(t, g.Frame.Results, 1)
}

// A failing snapshot write (in the background) costs no reply anything:
// snapshots only shorten recovery.
func TestSnapshotWriteFailureIsHarmless(t *testing.T) {
	e := newFaultEnv(t, false)
	e.faulty.Inject(storetest.Fault{Kind: storetest.DiskFull, Op: storetest.Snapshots, Times: 1000})
	root := push(t, e.c, "a", "", 100_000)
	for i := range 1100 { // past SnapshotEvery (1000)
		_, err := e.c.RecordUsage(ctx, &messages.RecordUsage{Header: mut("a"), FrameID: root, Cost: budget.Cost{InputTokens: int64(i%5 + 1)}})
		require.NoError(t, err)
	}
	e.reopen()
	_, ok, err := e.bolt.LoadSnapshot(ctx, "a")
	require.NoError(t, err)
	assert.False(t, ok, "no snapshot was written")
	g, err := e.c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: "a"}, FrameID: root})
	require.NoError(t, err)
	assert.Equal(t, int64(1101), g.Version, "recovery replayed the whole log")
}
