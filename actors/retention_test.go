package actors_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

func retain(t *testing.T, e *env, p frames.RetentionPolicy, dir string) actors.RetentionReport {
	t.Helper()
	require.NoError(t, e.srv.StartRetention(actors.RetentionConfig{Policy: func(string) (frames.RetentionPolicy, string, bool) {
		return p, dir, true
	}}))
	rep, err := e.srv.RunRetention(ctx)
	require.NoError(t, err)
	require.Empty(t, rep.Errors)
	return rep
}

// chatEnv is a server whose idempotency horizon is a minute, with a scope
// that has a live root and runs finished children, an hour ago.
func chatEnv(t *testing.T, scope string, runs int) (*env, string) {
	t.Helper()
	e := newEnv(t, func(c *actors.Config) { c.RequestHorizon = time.Minute; c.ClockSkew = time.Second })
	root, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: scope}, Goal: "chat", Budget: budget.TokenBudget{Total: 1_000_000}})
	require.NoError(t, err)
	for i := range runs {
		runChild(t, e.c, scope, root.FrameID, i)
	}
	e.clock.Advance(time.Hour)
	return e, root.FrameID
}

// A retention pass keeps the last N runs and removes the rest: the removal
// is recorded in the scope, the records leave the store, an archive holds
// them and verifies, the live root and the kept runs answer as before, and
// the file verifies — also after a restart.
func TestRetentionKeepsTheLastRuns(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) { c.RequestHorizon = time.Minute; c.ClockSkew = time.Second })
	const scope = "chat"
	h := messages.Header{Scope: scope}
	root, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "chat", Budget: budget.TokenBudget{Total: 1_000_000}})
	require.NoError(t, err)
	var kids []string
	for i := range 12 {
		kids = append(kids, runChild(t, e.c, scope, root.FrameID, i))
	}
	e.clock.Advance(time.Hour) // every request is now past the idempotency horizon
	before := e.version(scope)
	dir := t.TempDir()
	rep := retain(t, e, frames.RetentionPolicy{KeepLastN: 3, OnCompletion: frames.CompletionArchive}, dir)
	require.Len(t, rep.Scopes, 1)
	sr := rep.Scopes[0]
	assert.Equal(t, 9, sr.Runs)
	assert.Equal(t, 3, sr.Kept)
	assert.Positive(t, sr.Removed)
	assert.Equal(t, e.version(scope), before+1, "one scope.retention_applied")

	// The kept runs answer in full; the removed are gone; the root is live.
	for i, id := range kids {
		got, err := e.c.GetFrame(ctx, &messages.GetFrame{Header: h, FrameID: id, WithHandles: true})
		if i >= 9 {
			require.NoError(t, err)
			assert.Len(t, got.Frame.Handles, 2)
		} else {
			assert.ErrorIs(t, err, actors.ErrFrameNotFound, "run %d", i)
		}
	}
	rs, err := e.c.ResumeActor(ctx, &messages.ResumeActor{Header: h})
	require.NoError(t, err)
	require.Len(t, rs.LiveFrames, 1)
	assert.Equal(t, root.FrameID, rs.LiveFrames[0].ID)
	assert.Len(t, rs.PendingWork, 12, "abandoned calls are never forgotten")

	base, err := e.store.StreamBase(ctx, scope)
	require.NoError(t, err)
	assert.Equal(t, sr.Through, base.Version)
	info, err := eventstore.VerifyArchive(sr.Archive, nil)
	require.NoError(t, err)
	assert.Equal(t, int64(1), info.From)
	assert.Equal(t, sr.Through, info.Through)
	assert.Equal(t, base.Hash, info.Head, "the archive ends where the stream's base is")
	require.NoError(t, e.store.Verify(ctx, nil))

	// A second pass removes nothing more; the scope goes on.
	rep2, err := e.srv.RunRetention(ctx)
	require.NoError(t, err)
	require.Empty(t, rep2.Errors)
	assert.Zero(t, rep2.Scopes[0].Through)
	runChild(t, e.c, scope, root.FrameID, 99)

	e.restart()
	rs, err = e.c.ResumeActor(ctx, &messages.ResumeActor{Header: h})
	require.NoError(t, err)
	require.Len(t, rs.LiveFrames, 1)
	got, err := e.c.GetFrame(ctx, &messages.GetFrame{Header: h, FrameID: kids[11], WithHandles: true})
	require.NoError(t, err)
	assert.Equal(t, frames.StatusCompleted, got.Frame.Status)
	require.NoError(t, e.store.Verify(ctx, nil))
}

// Requests within the idempotency horizon are never removed: a resend is
// still answered with its original reply after a pass.
func TestRetentionKeepsTheIdempotencyHorizon(t *testing.T) {
	e := newEnv(t)
	const scope = "resend"
	h := messages.Header{Scope: scope}
	root, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "chat", Budget: budget.TokenBudget{Total: 1_000_000}})
	require.NoError(t, err)
	for i := range 5 {
		runChild(t, e.c, scope, root.FrameID, i)
	}
	first, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: scope, RequestID: "late-resend"}, ParentID: root.FrameID, Goal: "x"})
	require.NoError(t, err)
	_, err = e.c.PopFrame(ctx, &messages.PopFrame{Header: h, FrameID: first.FrameID, Status: frames.StatusCompleted})
	require.NoError(t, err)
	rep := retain(t, e, frames.RetentionPolicy{OnCompletion: frames.CompletionDelete}, "")
	assert.Zero(t, rep.Scopes[0].Through, "every request is within the default horizon (7 days)")

	e.clock.Advance(8 * 24 * time.Hour)
	rep, err = e.srv.RunRetention(ctx)
	require.NoError(t, err)
	require.Empty(t, rep.Errors)
	assert.Positive(t, rep.Scopes[0].Through, "past the horizon the runs go")
	require.NoError(t, e.store.Verify(ctx, nil))
}

// A removal recorded but not carried out (a crash between the two) is
// finished by the next pass.
func TestRetentionFinishesARecordedRemoval(t *testing.T) {
	const scope = "crashy"
	h := messages.Header{Scope: scope}
	e, _ := chatEnv(t, scope, 4)
	// Record a removal through version 10 the way a pass does, without
	// removing anything (what a crash right after it leaves).
	var hash string
	require.NoError(t, e.store.ReadStream(ctx, scope, 10, func(r eventstore.Record) error {
		if r.Version == 10 {
			hash = hexOf(r.Hash)
		}
		return nil
	}))
	snap, err := eventstore.EncodeState(mustLoad(t, e, scope))
	require.NoError(t, err)
	require.NoError(t, e.store.SaveSnapshot(ctx, scope, snap))
	_, err = e.c.ApplyRetention(ctx, &messages.ApplyRetention{Header: h, Through: 10, Hash: hash, Why: "test"})
	require.NoError(t, err)
	_, err = e.c.ApplyRetention(ctx, &messages.ApplyRetention{Header: h, Through: 11, Hash: hash})
	assert.ErrorIs(t, err, actors.ErrInvalidArgument, "a hash that is not the record's is refused")
	base, err := e.store.StreamBase(ctx, scope)
	require.NoError(t, err)
	require.Zero(t, base.Version)

	rep := retain(t, e, frames.RetentionPolicy{KeepLastN: 100, OnCompletion: frames.CompletionDelete}, "")
	require.Len(t, rep.Scopes, 1)
	assert.Equal(t, int64(10), rep.Scopes[0].Removed)
	base, err = e.store.StreamBase(ctx, scope)
	require.NoError(t, err)
	assert.Equal(t, int64(10), base.Version)
	require.NoError(t, e.store.Verify(ctx, nil))
}

// An archive a crashed pass wrote and never recorded (it starts where the
// stored history starts) is replaced, not left beside the new one.
func TestRetentionReplacesAnOrphanArchive(t *testing.T) {
	const scope = "orphan"
	e, _ := chatEnv(t, scope, 6)
	dir := t.TempDir()
	orphan := eventstore.ArchivePath(dir, scope, 1, 3)
	require.NoError(t, os.MkdirAll(filepath.Dir(orphan), 0o700))
	require.NoError(t, os.WriteFile(orphan, []byte("a crashed pass's archive\n"), 0o600))
	rep := retain(t, e, frames.RetentionPolicy{KeepLastN: 2, OnCompletion: frames.CompletionArchive}, dir)
	require.Len(t, rep.Scopes, 1)
	require.NotEqual(t, orphan, rep.Scopes[0].Archive)
	assert.NoFileExists(t, orphan)
	files, err := filepath.Glob(filepath.Join(dir, scope, "*.jsonl"))
	require.NoError(t, err)
	assert.Equal(t, []string{rep.Scopes[0].Archive}, files, "one archive: the one the removal names")
}
