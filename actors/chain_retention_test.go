package actors_test

import (
	"fmt"
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
	"github.com/stateindex/stateindex/messages"
)

// Retention never removes a link a live link depends on: while a chain's
// head is live, its earlier links stay (whatever the policy), and so does
// everything after them; once the head finished, the links go like any
// run and each leaves a tombstone in its chain — its summary, the range it
// spanned and the hash the scope's chain goes on from — that GetChain
// shows, also after a restart; a resume of a chain whose head is gone is
// refused, naming the tombstone.
func TestRetentionKeepsLiveChainsAndLeavesTombstones(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) { c.RequestHorizon = time.Minute; c.ClockSkew = time.Second })
	const scope = "chains"
	h := messages.Header{Scope: scope}
	r, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "run", Budget: budget.TokenBudget{Total: 100_000}, ContextWindow: 2_000})
	require.NoError(t, err)
	root := r.FrameID
	before := runChild(t, e.c, scope, root, 1) // a run before the chain: removable
	tk, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: h, ParentID: root, Goal: "task", Budget: budget.TokenBudget{Total: 10_000}})
	require.NoError(t, err)
	task := tk.FrameID
	for i := range 12 {
		role := []string{"user", "assistant"}[i%2]
		_, err := e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, FrameID: task, Role: role, Priority: compaction.Medium,
			Content: fmt.Sprintf("turn %d of %s: %s", i/2, role, strings.Repeat("x", 200))})
		require.NoError(t, err)
	}
	cont, err := e.c.ContinueFrame(ctx, &messages.ContinueFrame{Header: h, FrameID: task, ResumeCeiling: 200})
	require.NoError(t, err)
	head := cont.FrameID
	after := runChild(t, e.c, scope, root, 2) // a run after the chain's first link
	e.clock.Advance(time.Hour)

	policy := frames.RetentionPolicy{KeepLastN: 0, OnCompletion: frames.CompletionDelete}
	rep := retain(t, e, policy, "")
	require.Len(t, rep.Scopes, 1)
	through := rep.Scopes[0].Through
	require.Positive(t, through, "the run before the chain goes")
	_, err = e.c.GetFrame(ctx, &messages.GetFrame{Header: h, FrameID: before})
	require.ErrorIs(t, err, actors.ErrFrameNotFound)
	for _, id := range []string{task, after} {
		_, err := e.c.GetFrame(ctx, &messages.GetFrame{Header: h, FrameID: id, WithHandles: true})
		require.NoError(t, err, "%s stays while the chain's head is live", id)
	}
	ch, err := e.c.GetChain(ctx, &messages.GetChain{Header: h, FrameID: head})
	require.NoError(t, err)
	require.Len(t, ch.Links, 2)
	assert.Nil(t, ch.Links[0].Removed)
	assert.Equal(t, frames.StatusContinued, ch.Links[0].Status)
	assert.Contains(t, ch.Links[0].Summary, "task; continued at")
	assert.Positive(t, ch.Links[0].EndVersion)
	hits, err := e.c.SearchChain(ctx, &messages.SearchChain{Header: h, FrameID: head, Query: "turn 0 of user"})
	require.NoError(t, err)
	require.NotEmpty(t, hits.Hits, "the first link's content is still searchable")
	assert.Empty(t, hits.Unsearched)

	// The core refuses a cut into a live chain even if a pass asked for it
	// (chain_running: a pass that planned before the chain came alive
	// plans again next time).
	linkEnd := ch.Links[0].EndVersion
	_, err = e.c.ApplyRetention(ctx, &messages.ApplyRetention{Header: h, Through: linkEnd, Hash: hexOf(recordHashAt(t, e, scope, linkEnd)), Why: "test"})
	require.ErrorIs(t, err, actors.ErrChainRunning)
	require.ErrorContains(t, err, "whose head")

	// The head finishes: the chain is history like any run.
	_, err = e.c.PopFrame(ctx, &messages.PopFrame{Header: h, FrameID: head, Status: frames.StatusCompleted})
	require.NoError(t, err)
	runChild(t, e.c, scope, root, 3) // later runs
	runChild(t, e.c, scope, root, 4)
	// The actor's periodic snapshot, taken now (a pass cuts no further
	// than the scope's latest snapshot; the first pass wrote one before
	// the head finished).
	snap, err := eventstore.EncodeState(mustLoad(t, e, scope))
	require.NoError(t, err)
	require.NoError(t, e.store.SaveSnapshot(ctx, scope, snap))
	e.clock.Advance(time.Hour)
	rep, err = e.srv.RunRetention(ctx)
	require.NoError(t, err)
	require.Empty(t, rep.Errors)
	require.Len(t, rep.Scopes, 1)
	through2 := rep.Scopes[0].Through
	require.Greater(t, through2, through)

	check := func() {
		t.Helper()
		ch, err := e.c.GetChain(ctx, &messages.GetChain{Header: h, FrameID: task})
		require.NoError(t, err, "a removed link is still found in its chain")
		require.Len(t, ch.Links, 2)
		assert.Equal(t, head, ch.Head)
		for _, l := range ch.Links {
			require.NotNil(t, l.Removed, "link %s has a tombstone", l.FrameID)
			assert.Equal(t, through2, l.Removed.Through)
			assert.Len(t, l.Removed.Hash, 64)
			assert.Positive(t, l.Version)
			assert.GreaterOrEqual(t, l.Removed.Through, l.EndVersion, "the range it spanned was removed")
			assert.NotEmpty(t, l.Summary)
		}
		assert.Equal(t, hexOf(recordHashAt(t, e, scope, through2)), ch.Links[0].Removed.Hash, "the hash the stream's base starts from")
		sr, err := e.c.SearchChain(ctx, &messages.SearchChain{Header: h, FrameID: task, Query: "turn 0 of user"})
		require.NoError(t, err, "a chain whose links were all removed is still searched")
		assert.Empty(t, sr.Hits)
		require.NotEmpty(t, sr.Unsearched, "and names what it could not search")
		assert.Equal(t, head, sr.Head)
		_, err = e.c.ResumeChain(ctx, &messages.ResumeChain{Header: h, ChainID: task, Message: "again"})
		require.ErrorIs(t, err, actors.ErrFrameNotFound)
		require.ErrorContains(t, err, "removed by retention")
	}
	check()
	e.restart()
	check()
	require.NoError(t, e.store.Verify(ctx, nil))
}

// recordHashAt is the hash of a scope's record at version: read from the
// stream base once the record itself is removed.
func recordHashAt(t *testing.T, e *env, scope string, version int64) eventstore.Hash {
	t.Helper()
	if base, err := e.store.StreamBase(ctx, scope); err == nil && base.Version == version {
		return base.Hash
	}
	rec, ok, err := eventstore.ReadRecord(ctx, e.store, scope, version)
	require.NoError(t, err)
	require.True(t, ok, "version %d is stored", version)
	return rec.Hash
}

// A frame continued before it spent anything continues with a zero cost,
// which its record leaves out: the scope still loads (a regression: the
// replay took the missing cost for a malformed continuation).
func TestContinuationOfAFrameThatSpentNothingReplays(t *testing.T) {
	e := newEnv(t)
	h := messages.Header{Scope: "zero"}
	p, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "task", Budget: budget.TokenBudget{Total: 10_000}, ContextWindow: 1_000})
	require.NoError(t, err)
	for i := range 8 {
		_, err := e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, FrameID: p.FrameID, Role: []string{"user", "assistant"}[i%2],
			Priority: compaction.Medium, Content: strings.Repeat("y", 300)})
		require.NoError(t, err)
	}
	c, err := e.c.ContinueFrame(ctx, &messages.ContinueFrame{Header: h, FrameID: p.FrameID, ResumeCeiling: 100})
	require.NoError(t, err)
	e.restart()
	ch, err := e.c.GetChain(ctx, &messages.GetChain{Header: h, FrameID: p.FrameID})
	require.NoError(t, err)
	assert.Equal(t, c.FrameID, ch.Head)
	st := mustLoad(t, e, "zero")
	assert.True(t, st.Frame(c.FrameID).Cost.IsZero())
}
