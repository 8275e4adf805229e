package actors_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// historyOf reads a key's whole retained history, newest first.
func historyOf(t *testing.T, c *actors.Client, scope, frame, key string) ([]messages.StateChangeRecord, int64) {
	t.Helper()
	h, err := c.StateHistory(ctx, &messages.StateHistory{Header: messages.Header{Scope: scope}, FrameID: frame, Key: key, Limit: 1000})
	require.NoError(t, err)
	require.Zero(t, h.Next, "one page")
	return h.Changes, h.RemovedThrough
}

// Retention keeps a key's current value and removes its history beyond
// the cut: a key set in every run (and between runs), a list pushed in
// every run, and a key written in the first run only. Retention removes
// the older runs; after a restart GetState answers every current value
// (the oldest key's included, its only write removed), StateHistory lists
// only the retained changes and says where the retained log starts, and
// the file verifies.
func TestRetentionKeepsCurrentStateValues(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) { c.RequestHorizon = time.Minute; c.ClockSkew = time.Second })
	const scope = "kv-runs"
	h := messages.Header{Scope: scope}
	var firstOfRun []int64 // the version of each run's push
	for i := range 6 {
		r, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: fmt.Sprintf("run %d", i), Budget: budget.TokenBudget{Total: 1000}})
		require.NoError(t, err)
		firstOfRun = append(firstOfRun, r.Version)
		ops := []messages.StateOp{
			{Kind: "set", Key: "plan", Value: []byte(fmt.Sprintf("plan %d", i))},
			{Kind: "push", Key: "log", Value: []byte{byte('0' + i)}, Keep: 3},
			{Kind: "set", FrameID: r.FrameID, Key: "scratch", Value: []byte("ends with the run")},
		}
		if i == 0 {
			ops = append(ops, messages.StateOp{Kind: "set", Key: "old", Value: []byte("first")})
		}
		setState(t, e.c, scope, ops...)
		pop(t, e.c, scope, r.FrameID)
		setState(t, e.c, scope, messages.StateOp{Kind: "set", Key: "plan", Value: []byte(fmt.Sprintf("between %d", i))})
		e.clock.Advance(time.Minute)
	}
	plans, removed := historyOf(t, e.c, scope, "", "plan")
	require.Len(t, plans, 12)
	require.Zero(t, removed)

	e.clock.Advance(time.Hour) // every request past the idempotency horizon
	rep := retain(t, e, frames.RetentionPolicy{KeepLastN: 2, OnCompletion: frames.CompletionDelete}, "")
	require.Len(t, rep.Scopes, 1)
	sr := rep.Scopes[0]
	assert.Equal(t, 4, sr.Runs)
	assert.Equal(t, firstOfRun[4]-1, sr.Through, "cut before the oldest kept run")

	e.restart()
	g := getState(t, e.c, scope, "", "plan", "log", "old")
	require.Len(t, g.Entries, 3)
	assert.Equal(t, []byte("between 5"), g.Entries[0].Value)
	assert.Equal(t, [][]byte{[]byte("3"), []byte("4"), []byte("5")}, g.Entries[1].Items, "the list's window, its earlier pushes removed")
	assert.Equal(t, []byte("first"), g.Entries[2].Value, "the current value of a key whose only write was removed")
	assert.LessOrEqual(t, g.Entries[2].Version, sr.Through)

	plans, removed = historyOf(t, e.c, scope, "", "plan")
	assert.Equal(t, sr.Through, removed, "the history says where it stops")
	var values []string
	for _, c := range plans {
		assert.Greater(t, c.Version, sr.Through)
		values = append(values, string(c.Entry.Value))
	}
	assert.Equal(t, []string{"between 5", "plan 5", "between 4", "plan 4"}, values, "the retained changes only, newest first")
	pushes, _ := historyOf(t, e.c, scope, "", "log")
	assert.Len(t, pushes, 2)
	old, removed := historyOf(t, e.c, scope, "", "old")
	assert.Empty(t, old, "its one change was removed")
	assert.Equal(t, sr.Through, removed)
	require.NoError(t, e.store.Verify(ctx, nil))
}

// A scope that keeps state and no frames has no runs: retention removes
// its state history older than the policy's OlderThan (and past the
// idempotency horizon and its latest snapshot), never a current value.
func TestRetentionKeepsStateHistoryForItsAge(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) { c.RequestHorizon = time.Minute; c.ClockSkew = time.Second })
	const scope = "kv-only"
	var versions []int64
	for i := range 3 {
		r := setState(t, e.c, scope, messages.StateOp{Kind: "set", Key: "k", Value: []byte(fmt.Sprintf("v%d", i))})
		versions = append(versions, r.Version)
		e.clock.Advance(2 * time.Hour)
	}
	p := frames.RetentionPolicy{OlderThan: int64(5 * time.Hour), OnCompletion: frames.CompletionDelete}
	// Now: v0 is 6 h old, v1 4 h, v2 2 h.
	rep := retain(t, e, p, "")
	require.Len(t, rep.Scopes, 1)
	assert.Equal(t, versions[1]-1, rep.Scopes[0].Through, "the changes of the last 5 h stay")
	changes, removed := historyOf(t, e.c, scope, "", "k")
	require.Len(t, changes, 2)
	assert.Equal(t, []byte("v2"), changes[0].Entry.Value)
	assert.Equal(t, []byte("v1"), changes[1].Entry.Value)
	assert.Equal(t, versions[1]-1, removed)

	e.clock.Advance(4 * time.Hour) // v1 8 h old, v2 6 h: both older than 5 h
	r2, err := e.srv.RunRetention(ctx)
	require.NoError(t, err)
	require.Empty(t, r2.Errors)
	require.Len(t, r2.Scopes, 1)
	assert.GreaterOrEqual(t, r2.Scopes[0].Through, versions[2], "every change removed (as far as the scope's latest snapshot)")

	e.restart()
	g := getState(t, e.c, scope, "", "k")
	require.Len(t, g.Entries, 1)
	assert.Equal(t, []byte("v2"), g.Entries[0].Value, "the current value stays")
	changes, removed = historyOf(t, e.c, scope, "", "k")
	assert.Empty(t, changes)
	assert.Equal(t, r2.Scopes[0].Through, removed)
	require.NoError(t, e.store.Verify(ctx, nil))
}
