package actors_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/internal/verify"
	"github.com/stateindex/stateindex/messages"
)

// uuid7At is a UUIDv7 request id stamped with t (frames.RequestIDTime).
func uuid7At(t time.Time, n int) string {
	ms := t.UnixMilli()
	return fmt.Sprintf("%08x-%04x-7000-8000-%012x", ms>>16, ms&0xffff, n)
}

// busyScope gives scope finished runs under a live root and a suspended
// child with a tool call in doubt; it returns the root, the runs and the
// request ids of two pushes: one that carries its time, one that does not.
func busyScope(t *testing.T, e *env, scope string) (root string, runs []string, timed, plain *messages.PushFrame) {
	t.Helper()
	h := messages.Header{Scope: scope}
	r, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "chat", Budget: budget.TokenBudget{Total: 1_000_000}})
	require.NoError(t, err)
	for i := range 3 {
		runs = append(runs, runChild(t, e.c, scope, r.FrameID, i))
	}
	timed = &messages.PushFrame{Header: messages.Header{Scope: scope, RequestID: uuid7At(e.clock.Now(), 1)}, ParentID: r.FrameID, Goal: "timed"}
	plain = &messages.PushFrame{Header: messages.Header{Scope: scope, RequestID: "plain-push"}, ParentID: r.FrameID, Goal: "plain"}
	for _, p := range []*messages.PushFrame{timed, plain} {
		got, err := e.c.PushFrame(ctx, p)
		require.NoError(t, err)
		runs = append(runs, got.FrameID)
	}
	_, err = e.c.StartToolCall(ctx, &messages.StartToolCall{Header: h, FrameID: runs[4], CallID: "in-doubt", Name: "search"})
	require.NoError(t, err)
	_, err = e.c.SuspendFrame(ctx, &messages.SuspendFrame{Header: h, FrameID: runs[4], Reason: frames.SuspendApproval})
	require.NoError(t, err)
	_, err = e.c.PopFrame(ctx, &messages.PopFrame{Header: h, FrameID: runs[3], Status: frames.StatusCompleted})
	require.NoError(t, err)
	return r.FrameID, runs, timed, plain
}

func verifyFile(t *testing.T, e *env) verify.Summary {
	t.Helper()
	e.stop()
	var problems []verify.Problem
	sum, err := verify.File(ctx, e.path, verify.Options{}, func(p verify.Problem) { problems = append(problems, p) })
	require.NoError(t, err)
	assert.Empty(t, problems)
	e.start()
	return sum
}

// DestroyScope end to end: refused while work is live, forced it cancels
// it; the history leaves the store, old frames are not found, the version
// counts on, the scope starts empty when used again, old request ids are
// never applied again, and the store and the file verify — also after a
// restart.
func TestDestroyScopeEndToEnd(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) { c.RequestHorizon = time.Hour; c.ClockSkew = time.Second })
	const scope = "doomed"
	h := messages.Header{Scope: scope}
	root, runs, timed, plain := busyScope(t, e, scope)
	before := e.version(scope)

	_, err := e.c.DestroyScope(ctx, &messages.DestroyScope{Header: h})
	require.ErrorIs(t, err, actors.ErrLiveChildren)
	assert.Contains(t, err.Error(), "2 live frame(s), 1 unused suspension token(s) and 1 tool call(s) in doubt")
	assert.Equal(t, before, e.version(scope), "a refusal writes nothing")

	req := &messages.DestroyScope{Header: messages.Header{Scope: scope, RequestID: "destroy-1"}, Force: true, Why: "test"}
	got, err := e.c.DestroyScope(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, before, got.Through)
	assert.Equal(t, []string{root, runs[4]}, got.Cancelled)
	assert.Equal(t, []string{"in-doubt", "call-0", "call-1", "call-2"}, got.Abandoned)
	assert.Equal(t, int64(1), got.Tokens)
	assert.Equal(t, before, got.Removed, "every record before the destroy")
	assert.Equal(t, before+1, e.version(scope), "the version counts on")
	base, err := e.store.StreamBase(ctx, scope)
	require.NoError(t, err)
	assert.Equal(t, before, base.Version)

	again, err := e.c.DestroyScope(ctx, req)
	require.NoError(t, err, "a repeat is answered")
	assert.Equal(t, got.Cancelled, again.Cancelled)
	assert.Equal(t, before+1, e.version(scope))

	check := func(t *testing.T) {
		for _, id := range append([]string{root}, runs...) {
			_, err := e.c.GetFrame(ctx, &messages.GetFrame{Header: h, FrameID: id})
			assert.ErrorIs(t, err, actors.ErrFrameNotFound, id)
		}
		rs, err := e.c.ResumeActor(ctx, &messages.ResumeActor{Header: h})
		require.NoError(t, err)
		assert.Empty(t, rs.LiveFrames)
		assert.Empty(t, rs.PendingWork)
		for _, p := range []*messages.PushFrame{timed, plain} {
			_, err := e.c.PushFrame(ctx, p)
			require.ErrorIs(t, err, actors.ErrRequestExpired, p.Goal)
			assert.Contains(t, err.Error(), "applied before the scope was destroyed")
		}
		require.NoError(t, e.store.Verify(ctx, nil))
	}
	t.Run("after the destroy", check)
	e.restart()
	t.Run("after a restart", check)

	// Used again, it starts empty; the version counts on.
	v := e.version(scope)
	p, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "again", Budget: budget.TokenBudget{Total: 10}})
	require.NoError(t, err)
	assert.Equal(t, v+1, p.Version)
	st, err := e.c.GetStack(ctx, &messages.GetStack{Header: h})
	require.NoError(t, err)
	require.Len(t, st.Frames, 1)
	assert.Equal(t, p.FrameID, st.Frames[0].ID)

	sum := verifyFile(t, e)
	assert.Equal(t, int64(1), sum.Removed, "the removal matches the destroy it records")

	// Past the horizon the timed id is refused as expired like any other.
	e.clock.Advance(2 * time.Hour)
	_, err = e.c.PushFrame(ctx, timed)
	require.ErrorIs(t, err, actors.ErrRequestExpired)
	assert.Contains(t, err.Error(), "past the horizon")
}

// Destroying a scope without events, or one with nothing live, needs no
// force; destroying twice removes the first destroy's record too.
func TestDestroyScopeQuiet(t *testing.T) {
	e := newEnv(t)
	h := messages.Header{Scope: "quiet"}
	got, err := e.c.DestroyScope(ctx, &messages.DestroyScope{Header: h})
	require.NoError(t, err)
	assert.Zero(t, got.Through)
	assert.Equal(t, int64(1), e.version("quiet"))
	p, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "g"})
	require.NoError(t, err)
	_, err = e.c.PopFrame(ctx, &messages.PopFrame{Header: h, FrameID: p.FrameID, Status: frames.StatusCompleted})
	require.NoError(t, err)
	got, err = e.c.DestroyScope(ctx, &messages.DestroyScope{Header: h})
	require.NoError(t, err)
	assert.Equal(t, int64(3), got.Through)
	got, err = e.c.DestroyScope(ctx, &messages.DestroyScope{Header: h})
	require.NoError(t, err)
	assert.Equal(t, int64(4), got.Through)
	base, err := e.store.StreamBase(ctx, "quiet")
	require.NoError(t, err)
	assert.Equal(t, int64(4), base.Version)
	require.NoError(t, e.store.Verify(ctx, nil))
	verifyFile(t, e)
}

// recordDestroy appends a scope.destroyed the way the actor does and
// removes nothing: what a crash between the two leaves. The server is
// stopped meanwhile.
func recordDestroy(t *testing.T, e *env, scope string) int64 {
	t.Helper()
	e.stop()
	st, err := eventstore.Open(e.path, &eventstore.Options{NoSync: true})
	require.NoError(t, err)
	state, _, err := eventstore.LoadState(ctx, st, scope, int64(e.cfg.RequestHorizon), int64(e.cfg.ClockSkew), nil)
	require.NoError(t, err)
	var hash string
	require.NoError(t, st.ReadStream(ctx, scope, state.Version, func(r eventstore.Record) error {
		hash = hexOf(r.Hash)
		return nil
	}))
	evs, err := frames.Decide(frames.DefaultConfig(), state, &frames.DestroyScope{Force: true, Hash: hash,
		Header: frames.Header{RequestID: "crashed-destroy", Now: e.clock.Now().UnixNano()}})
	require.NoError(t, err)
	enc, err := eventstore.EncodeFrameEvent(evs[0])
	require.NoError(t, err)
	_, err = st.Append(ctx, scope, state.Version, []eventstore.Event{enc})
	require.NoError(t, err)
	require.NoError(t, st.Close())
	e.start()
	return state.Version
}

// A destroy recorded and not carried out is finished by the next pass,
// with or without a retention policy (expiry alone finds it too); the
// request ids within the horizon stay refused.
func TestRetentionFinishesARecordedDestroy(t *testing.T) {
	cases := []struct {
		name string
		rc   actors.RetentionConfig
	}{
		{"retention policy", actors.RetentionConfig{Policy: func(string) (frames.RetentionPolicy, string, bool) {
			return frames.RetentionPolicy{KeepLastN: 100, OnCompletion: frames.CompletionDelete}, "", true
		}}},
		{"expiry only", actors.RetentionConfig{Expiry: func(string) time.Duration { return 24 * time.Hour }}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, func(c *actors.Config) { c.RequestHorizon = time.Hour; c.ClockSkew = time.Second })
			const scope = "crashy"
			_, _, _, plain := busyScope(t, e, scope)
			through := recordDestroy(t, e, scope)
			base, err := e.store.StreamBase(ctx, scope)
			require.NoError(t, err)
			require.Zero(t, base.Version)

			require.NoError(t, e.srv.StartRetention(c.rc))
			rep, err := e.srv.RunRetention(ctx)
			require.NoError(t, err)
			require.Empty(t, rep.Errors)
			require.Len(t, rep.Scopes, 1)
			assert.Equal(t, through, rep.Scopes[0].Removed)
			assert.False(t, rep.Scopes[0].Expired)
			base, err = e.store.StreamBase(ctx, scope)
			require.NoError(t, err)
			assert.Equal(t, through, base.Version)
			require.NoError(t, e.store.Verify(ctx, nil))

			_, err = e.c.PushFrame(ctx, plain)
			require.ErrorIs(t, err, actors.ErrRequestExpired)
			assert.Contains(t, err.Error(), "applied before the scope was destroyed")
			verifyFile(t, e)
		})
	}
}

// Expiry destroys a scope inactive for longer than its setting, with
// force, and leaves an active one, and a scope whose setting is 0; a
// destroyed scope is not destroyed again.
func TestExpiryDestroysInactiveScopes(t *testing.T) {
	e := newEnv(t)
	root, _, _, _ := busyScope(t, e, "idle")
	_, _, _, _ = busyScope(t, e, "busy")
	_, _, _, _ = busyScope(t, e, "kept")
	e.clock.Advance(2 * time.Hour)
	_, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: "busy"}, Goal: "still here"})
	require.NoError(t, err)
	versions := map[string]int64{"idle": e.version("idle"), "busy": e.version("busy"), "kept": e.version("kept")}

	require.NoError(t, e.srv.StartRetention(actors.RetentionConfig{Expiry: func(scope string) time.Duration {
		if scope == "kept" {
			return 0
		}
		return time.Hour
	}}))
	rep, err := e.srv.RunRetention(ctx)
	require.NoError(t, err)
	require.Empty(t, rep.Errors)
	require.Len(t, rep.Scopes, 1)
	sr := rep.Scopes[0]
	assert.Equal(t, "idle", sr.Scope)
	assert.True(t, sr.Expired)
	assert.Equal(t, versions["idle"], sr.Through)
	assert.Equal(t, []string{root, sr.Cancelled[1]}, sr.Cancelled)
	assert.Contains(t, sr.Why, "inactive for 2h0m0s")
	assert.Equal(t, versions["idle"]+1, e.version("idle"))
	assert.Equal(t, versions["busy"], e.version("busy"), "active: left alone")
	assert.Equal(t, versions["kept"], e.version("kept"), "expiry 0: never")
	_, err = e.c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: "idle"}, FrameID: root})
	assert.ErrorIs(t, err, actors.ErrFrameNotFound)

	e.clock.Advance(3 * time.Hour)
	rep, err = e.srv.RunRetention(ctx)
	require.NoError(t, err)
	require.Empty(t, rep.Errors)
	for _, sr := range rep.Scopes {
		assert.NotEqual(t, "idle", sr.Scope, "already destroyed")
	}
	assert.Equal(t, versions["idle"]+1, e.version("idle"))
	assert.Equal(t, versions["busy"]+1, e.version("busy"), "now idle too")
	require.NoError(t, e.store.Verify(ctx, nil))
	verifyFile(t, e)
}
