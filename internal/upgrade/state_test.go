package upgrade

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// stateWorks: scope key-value state (issue 15) works on every scope an
// older release wrote, none of which has any: a set, a push with a
// window, a conditional set (refused at a wrong version, applied at the
// right one), reads and a key's history; a frame's state on a fresh root,
// gone with it; and a key with a 1 ms TTL, gone from reads at once and
// then from the state (the server's expiry or a pass run here). Nothing of
// it can expire later, so nothing writes behind the checks that count
// versions after it. stateAfterRestart reads it back after the restart;
// checkFixture runs verify on the file afterwards (the snapshots written
// over the old log hold the state).
func (u *upgraded) stateWorks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := u.c
	for _, sc := range u.m.Scopes {
		h := messages.Header{Scope: sc.Scope}
		r, err := c.ChangeState(ctx, &messages.ChangeState{Header: h, Ops: []messages.StateOp{
			{Kind: "set", Key: "plan", Value: []byte("v1")},
			{Kind: "push", Key: "msgs", Value: []byte("a"), Keep: 2},
			{Kind: "push", Key: "msgs", Value: []byte("b"), Keep: 2},
			{Kind: "push", Key: "msgs", Value: []byte("c"), Keep: 2},
		}})
		require.NoError(t, err, sc.Scope)
		wrong := r.Version + 1
		_, err = c.ChangeState(ctx, &messages.ChangeState{Header: h, Ops: []messages.StateOp{{Kind: "set", Key: "plan", Value: []byte("no"), IfVersion: &wrong}}})
		require.ErrorIs(t, err, messages.ErrStateConflict, sc.Scope)
		r2, err := c.ChangeState(ctx, &messages.ChangeState{Header: h, Ops: []messages.StateOp{{Kind: "set", Key: "plan", Value: []byte("v2"), IfVersion: &r.Version}}})
		require.NoError(t, err, sc.Scope)
		assert.Equal(t, r.Version+1, r2.Version, sc.Scope)

		u.checkState(t, sc.Scope, r2.Version)
		hist, err := c.StateHistory(ctx, &messages.StateHistory{Header: h, Key: "plan"})
		require.NoError(t, err, sc.Scope)
		require.Len(t, hist.Changes, 2, sc.Scope)
		assert.Equal(t, []byte("v2"), hist.Changes[0].Entry.Value, sc.Scope)
		assert.Equal(t, []byte("v1"), hist.Changes[1].Entry.Value, sc.Scope)
		assert.Less(t, hist.RemovedThrough, r.Version, "%s: the history starts after any removal of the old log", sc.Scope)

		root, err := c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "a frame with state", Budget: budget.TokenBudget{Total: 1000}})
		require.NoError(t, err, sc.Scope)
		_, err = c.ChangeState(ctx, &messages.ChangeState{Header: h, Ops: []messages.StateOp{{Kind: "set", FrameID: root.FrameID, Key: "req", Value: []byte("r")}}})
		require.NoError(t, err, sc.Scope)
		g, err := c.GetState(ctx, &messages.GetState{Header: h, FrameID: root.FrameID, Keys: []string{"req"}})
		require.NoError(t, err, sc.Scope)
		require.Len(t, g.Entries, 1, sc.Scope)
		_, err = c.PopFrame(ctx, &messages.PopFrame{Header: h, FrameID: root.FrameID, Status: frames.StatusCompleted})
		require.NoError(t, err, sc.Scope)
		_, err = c.GetState(ctx, &messages.GetState{Header: h, FrameID: root.FrameID, Keys: []string{"req"}})
		require.ErrorIs(t, err, messages.ErrFrameNotLive, "%s: a frame's state ends with it", sc.Scope)

		_, err = c.ChangeState(ctx, &messages.ChangeState{Header: h, Ops: []messages.StateOp{{Kind: "set", Key: "tmp", Value: []byte("t"), TTLMillis: 1}}})
		require.NoError(t, err, sc.Scope)
		g, err = c.GetState(ctx, &messages.GetState{Header: h, Keys: []string{"tmp"}})
		require.NoError(t, err, sc.Scope)
		assert.Equal(t, []string{"tmp"}, g.Missing, "%s: gone from reads at its expiry (the clock steps 1 ms a reading)", sc.Scope)
	}
	rep, err := u.srv.RunStateExpiry(ctx) // the server's own passes may have removed some already
	require.NoError(t, err)
	require.Empty(t, rep.Errors)
	for _, sc := range u.m.Scopes {
		hist, err := c.StateHistory(ctx, &messages.StateHistory{Header: messages.Header{Scope: sc.Scope}, Key: "tmp"})
		require.NoError(t, err, sc.Scope)
		require.Len(t, hist.Changes, 2, sc.Scope)
		assert.Equal(t, "expired", hist.Changes[0].Kind, "%s: removed from the state", sc.Scope)
		assert.Equal(t, "set", hist.Changes[1].Kind, sc.Scope)
	}
}

// stateAfterRestart reads back what stateWorks wrote, after the restart.
func (u *upgraded) stateAfterRestart(t *testing.T) {
	for _, sc := range u.m.Scopes {
		u.checkState(t, sc.Scope, 0)
	}
}

// checkState reads a scope's state as stateWorks leaves it: plan at
// version (0: any), the list's last two items, and the level's keys.
func (u *upgraded) checkState(t *testing.T, scope string, version int64) {
	t.Helper()
	ctx := context.Background()
	h := messages.Header{Scope: scope}
	g, err := u.c.GetState(ctx, &messages.GetState{Header: h, Keys: []string{"plan", "msgs", "tmp"}})
	require.NoError(t, err, scope)
	require.Len(t, g.Entries, 2, scope)
	assert.Equal(t, []byte("v2"), g.Entries[0].Value, scope)
	if version != 0 {
		assert.Equal(t, version, g.Entries[0].Version, scope)
	}
	assert.Equal(t, [][]byte{[]byte("b"), []byte("c")}, g.Entries[1].Items, "%s: the last 2 kept", scope)
	assert.Equal(t, []string{"tmp"}, g.Missing, scope)
	rg, err := u.c.RangeState(ctx, &messages.RangeState{Header: h})
	require.NoError(t, err, scope)
	var keys []string
	for _, e := range rg.Entries {
		keys = append(keys, e.Key)
	}
	assert.Equal(t, []string{"msgs", "plan"}, keys, scope)
	assert.Equal(t, int64(2), rg.Size.Keys, scope)
}
