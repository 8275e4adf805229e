package actors_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/messages"
)

// Many scopes written at once, several writers per scope: every
// acknowledged write is in the state, per-scope versions are dense, and
// each reply's version is the write's own.
func TestConcurrentScopesAndWriters(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) { c.Shards = 3; c.SnapshotEvery = 7 })
	const scopes, writers, perWriter = 12, 3, 15
	roots := make([]string, scopes)
	for i := range roots {
		roots[i] = push(t, e.c, fmt.Sprintf("s%d", i), "", 100)
	}
	var wg sync.WaitGroup
	versions := make([][]int64, scopes*writers)
	for i := 0; i < scopes*writers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			scope, root := fmt.Sprintf("s%d", i%scopes), roots[i%scopes]
			for j := 0; j < perWriter; j++ {
				r, err := e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut(scope), FrameID: root,
					HandleID: fmt.Sprintf("w%d-%d", i, j), Priority: compaction.Medium, Content: "x"})
				if !assert.NoError(t, err) {
					return
				}
				versions[i] = append(versions[i], r.Version)
			}
		}(i)
	}
	wg.Wait()
	for s := 0; s < scopes; s++ {
		seen := map[int64]bool{}
		for w := 0; w < writers; w++ {
			for _, v := range versions[s+w*scopes] {
				assert.False(t, seen[v], "version %d acknowledged twice", v)
				seen[v] = true
			}
		}
		assert.Len(t, seen, writers*perWriter)
		scope := fmt.Sprintf("s%d", s)
		assert.Equal(t, int64(1+writers*perWriter), e.version(scope))
		g := e.readFrame(scope)
		assert.Len(t, g.Frame.Handles, writers*perWriter)
	}
	e.restart()
	for s := 0; s < scopes; s++ {
		g := e.readFrame(fmt.Sprintf("s%d", s))
		require.Len(t, g.Frame.Handles, writers*perWriter, "after restart (snapshot + tail)")
	}
}
