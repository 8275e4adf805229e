package actors_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// A server's share of the scopes (a shared-store member's): when it
// changes, the scopes it no longer owns leave its cache; a request for
// one is still answered, and the scope is not kept afterwards; retention
// passes over the scopes it does not own.
func TestPlacementDropsAndSkipsWhatIsNotOwned(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) { c.RequestHorizon = time.Minute; c.ClockSkew = time.Second })
	roots := map[string]string{}
	for _, scope := range []string{"mine", "theirs"} {
		root, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: scope}, Goal: "chat", Budget: budget.TokenBudget{Total: 1_000_000}})
		require.NoError(t, err)
		roots[scope] = root.FrameID
		for i := range 4 {
			runChild(t, e.c, scope, root.FrameID, i)
		}
	}
	require.Equal(t, []string{"mine", "theirs"}, e.srv.CachedScopes())

	actors.SetPlacement(e.srv, func(scope string) bool { return scope == "mine" })
	require.Eventually(t, func() bool { return len(e.srv.CachedScopes()) == 1 }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, []string{"mine"}, e.srv.CachedScopes(), "the scope it no longer owns left the cache")

	// Still served (a stale caller's request), but not kept.
	got, err := e.c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: "theirs"}, FrameID: roots["theirs"]})
	require.NoError(t, err)
	assert.Equal(t, "chat", got.Frame.Goal)
	assert.Equal(t, []string{"mine"}, e.srv.CachedScopes(), "not kept once answered")

	e.clock.Advance(time.Hour)
	before := e.version("theirs")
	rep := retain(t, e, frames.RetentionPolicy{KeepLastN: 1, OnCompletion: frames.CompletionDelete}, "")
	require.Len(t, rep.Scopes, 1)
	assert.Equal(t, "mine", rep.Scopes[0].Scope)
	assert.Equal(t, before, e.version("theirs"), "retention left the scope it does not own alone")
}
