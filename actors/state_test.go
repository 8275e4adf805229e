package actors_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/messages"
)

func ver(n int64) *int64 { return &n }

// Scope state end to end: set, conditional set, push with a window, range,
// history, frame-level state ending with its frame, TTL expiry on the
// server's clock, and the state surviving a restart.
func TestScopeStateEndToEnd(t *testing.T) {
	e := newEnv(t)
	s := "agent"
	r, err := e.c.ChangeState(ctx, &messages.ChangeState{Header: mut(s), Ops: []messages.StateOp{
		{Kind: "set", Key: "plan", Value: []byte("v1")},
		{Kind: "push", Key: "msgs", Value: []byte("a"), Keep: 2},
		{Kind: "push", Key: "msgs", Value: []byte("b"), Keep: 2},
		{Kind: "push", Key: "msgs", Value: []byte("c"), Keep: 2},
		{Kind: "set", Key: "tmp", Value: []byte("x"), TTLMillis: 1000},
	}})
	require.NoError(t, err)
	v1 := r.Version

	_, err = e.c.ChangeState(ctx, &messages.ChangeState{Header: mut(s), Ops: []messages.StateOp{
		{Kind: "set", Key: "plan", Value: []byte("v2"), IfVersion: ver(v1 + 5)},
	}})
	require.ErrorIs(t, err, actors.ErrStateConflict)
	r2, err := e.c.ChangeState(ctx, &messages.ChangeState{Header: mut(s), Ops: []messages.StateOp{
		{Kind: "set", Key: "plan", Value: []byte("v2"), IfVersion: ver(v1)},
	}})
	require.NoError(t, err)

	g, err := e.c.GetState(ctx, &messages.GetState{Header: messages.Header{Scope: s}, Keys: []string{"plan", "msgs", "tmp", "nope"}})
	require.NoError(t, err)
	require.Len(t, g.Entries, 3)
	assert.Equal(t, []byte("v2"), g.Entries[0].Value)
	assert.Equal(t, r2.Version, g.Entries[0].Version)
	assert.Equal(t, [][]byte{[]byte("b"), []byte("c")}, g.Entries[1].Items, "the last 2 kept")
	assert.Equal(t, []string{"nope"}, g.Missing)

	e.clock.Advance(2 * time.Second)
	g, err = e.c.GetState(ctx, &messages.GetState{Header: messages.Header{Scope: s}, Keys: []string{"tmp"}})
	require.NoError(t, err)
	assert.Empty(t, g.Entries, "expired: gone from reads at once")
	x, err := e.c.ExpireState(ctx, &messages.ExpireState{Header: mut(s)})
	require.NoError(t, err)
	assert.Equal(t, 1, x.Removed)
	x, err = e.c.ExpireState(ctx, &messages.ExpireState{Header: mut(s)})
	require.NoError(t, err)
	assert.Zero(t, x.Removed)

	rg, err := e.c.RangeState(ctx, &messages.RangeState{Header: messages.Header{Scope: s}, Limit: 1})
	require.NoError(t, err)
	require.Len(t, rg.Entries, 1)
	assert.Equal(t, "msgs", rg.Entries[0].Key)
	assert.Equal(t, int64(2), rg.Size.Keys)
	rg, err = e.c.RangeState(ctx, &messages.RangeState{Header: messages.Header{Scope: s}, After: rg.Next})
	require.NoError(t, err)
	require.Len(t, rg.Entries, 1)
	assert.Equal(t, "plan", rg.Entries[0].Key)
	assert.Empty(t, rg.Next)

	h, err := e.c.StateHistory(ctx, &messages.StateHistory{Header: messages.Header{Scope: s}, Key: "plan"})
	require.NoError(t, err)
	require.Len(t, h.Changes, 2)
	assert.Equal(t, []byte("v2"), h.Changes[0].Entry.Value)
	assert.Equal(t, []byte("v1"), h.Changes[1].Entry.Value)

	f := push(t, e.c, s, "", 1)
	_, err = e.c.ChangeState(ctx, &messages.ChangeState{Header: mut(s), Ops: []messages.StateOp{{Kind: "set", FrameID: f, Key: "req", Value: []byte("r")}}})
	require.NoError(t, err)
	g, err = e.c.GetState(ctx, &messages.GetState{Header: messages.Header{Scope: s}, FrameID: f, Keys: []string{"req"}})
	require.NoError(t, err)
	require.Len(t, g.Entries, 1)

	e.restart()
	g, err = e.c.GetState(ctx, &messages.GetState{Header: messages.Header{Scope: s}, Keys: []string{"plan"}})
	require.NoError(t, err)
	require.Len(t, g.Entries, 1)
	assert.Equal(t, []byte("v2"), g.Entries[0].Value)
	pop(t, e.c, s, f)
	_, err = e.c.GetState(ctx, &messages.GetState{Header: messages.Header{Scope: s}, FrameID: f, Keys: []string{"req"}})
	require.ErrorIs(t, err, actors.ErrFrameNotLive, "a frame's state ends with it")
}
