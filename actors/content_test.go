package actors_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/internal/verify"
	"github.com/stateindex/stateindex/messages"
)

// verifyStore stops the server and runs the logical checks on its file
// (replay, snapshots against the replay, invariants), failing on any
// problem, then starts it again.
func verifyStore(t *testing.T, e *env, snapshots bool) {
	t.Helper()
	e.stop()
	sum, err := verify.File(ctx, e.path, verify.Options{}, func(p verify.Problem) { t.Errorf("verify: %+v", p) })
	require.NoError(t, err)
	assert.Zero(t, sum.Problems)
	if snapshots { // (only a stream whose history was not removed is replayed from its start)
		assert.Positive(t, sum.Snapshots, "a snapshot was compared with the replay")
	}
	e.start()
}

// copies counts the records of scope from version from on that hold
// content (stored by hash).
func copies(t *testing.T, e *env, scope, content string, from int64) int {
	t.Helper()
	hash := frames.ContentHash(content)
	n := 0
	require.NoError(t, e.store.ReadStream(ctx, scope, from, func(r eventstore.Record) error {
		ev, err := eventstore.DecodeFrameEvent(r)
		require.NoError(t, err)
		if c, ok := frames.ContentOf(ev, hash); ok && c == content {
			n++
		}
		return nil
	}))
	return n
}

func frameContents(t *testing.T, c *actors.Client, scope, id string) map[string]string {
	t.Helper()
	got, err := c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: scope}, FrameID: id, WithHandles: true})
	require.NoError(t, err)
	out := map[string]string{}
	for _, h := range got.Frame.Handles {
		out[h.ID] = h.Content
	}
	return out
}

func packContents(t *testing.T, c *actors.Client, scope, id string) map[string]string {
	t.Helper()
	p, err := c.AssembleContextPack(ctx, &messages.AssembleContextPack{Header: messages.Header{Scope: scope}, FrameID: id, BudgetTokens: 1_000_000})
	require.NoError(t, err)
	out := map[string]string{}
	for _, s := range p.Segments {
		out[s.HandleID] = s.Content
	}
	return out
}

// Large content is stored once per scope and answered in full by every
// read; a retention pass that removes the record a live handle's content
// was first stored in stores it again first, so that nothing live is
// orphaned — before and after a restart from the snapshot.
func TestLargeContentOnceAndThroughRetention(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) { c.RequestHorizon = time.Minute; c.ClockSkew = time.Second; c.SnapshotEvery = 5 })
	const scope = "claims"
	h := messages.Header{Scope: scope}
	root, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "chat", Budget: budget.TokenBudget{Total: 1_000_000}})
	require.NoError(t, err)
	system := "system prompt " + strings.Repeat("be helpful. ", 300)
	v := e.version(scope)
	for _, id := range []string{"sys-1", "sys-2"} {
		_, err = e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, FrameID: root.FrameID, HandleID: id, Priority: compaction.Critical, Content: system})
		require.NoError(t, err)
	}
	assert.Equal(t, v+2, e.version(scope), "one record per handle")
	assert.Equal(t, 1, copies(t, e, scope, system, 1), "the content is in the log once")

	// A run that is kept, with large content of its own.
	for i := range 4 {
		runChild(t, e.c, scope, root.FrameID, i)
	}
	kept, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: h, ParentID: root.FrameID, Goal: "kept", Budget: budget.TokenBudget{Total: 1000}})
	require.NoError(t, err)
	doc := "document " + strings.Repeat("lorem ipsum ", 200)
	_, err = e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, FrameID: kept.FrameID, HandleID: "doc", Priority: compaction.Medium, Content: doc})
	require.NoError(t, err)
	_, err = e.c.PopFrame(ctx, &messages.PopFrame{Header: h, FrameID: kept.FrameID, Status: frames.StatusCompleted})
	require.NoError(t, err)

	check := func(when string) {
		assert.Equal(t, map[string]string{"sys-1": system, "sys-2": system}, frameContents(t, e.c, scope, root.FrameID), when)
		assert.Equal(t, map[string]string{"sys-1": system, "sys-2": system}, packContents(t, e.c, scope, root.FrameID), when)
		assert.Equal(t, map[string]string{"doc": doc}, frameContents(t, e.c, scope, kept.FrameID), when)
	}
	check("before retention")
	verifyStore(t, e, true)

	e.clock.Advance(time.Hour)
	rep := retain(t, e, frames.RetentionPolicy{KeepLastN: 1, OnCompletion: frames.CompletionDelete}, "")
	require.Len(t, rep.Scopes, 1)
	sr := rep.Scopes[0]
	require.Equal(t, 4, sr.Runs)
	require.Greater(t, sr.Through, v+1, "the cut passes the record the system prompt was first stored in")

	assert.Equal(t, 1, copies(t, e, scope, system, sr.Through+1), "the system prompt was stored again after the cut")
	check("after retention")
	require.NoError(t, e.store.Verify(ctx, nil))

	e.restart()
	check("after a restart")
	snap, ok, err := e.store.LoadSnapshot(ctx, scope)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Less(t, len(snap.Data), len(system), "the snapshot holds the reference, not the content")
	require.NoError(t, e.store.Verify(ctx, nil))
	verifyStore(t, e, false)
}

// The same content in two scopes is stored in each: one scope never learns
// what another holds.
func TestLargeContentIsStoredPerScope(t *testing.T) {
	e := newEnv(t)
	text := "shared " + strings.Repeat("abc ", 400)
	for _, scope := range []string{"a", "b"} {
		h := messages.Header{Scope: scope}
		root, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "g", Budget: budget.TokenBudget{Total: 1000}})
		require.NoError(t, err)
		_, err = e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, FrameID: root.FrameID, Priority: compaction.Low, Content: text})
		require.NoError(t, err)
		assert.Equal(t, 1, copies(t, e, scope, text, 1), "scope %s stores its own copy", scope)
	}
}
