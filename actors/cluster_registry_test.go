package actors_test

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/internal/proctest"
	"github.com/stateindex/stateindex/messages"
)

// In a node-local cluster the Client asks every member's registry and
// merges: every frame of every member, newest first across members, each
// entry naming its member, one position per member; a walk with small
// pages gives the same listing (the cursor is one position in the common
// order, which every member resumes from); SeeOwnWrites waits on each
// member for the Client's own writes there.
func TestClusterListFramesFansOutAndMerges(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two cluster members (about two seconds)")
	}
	if raceEnabled {
		t.Skip("two cluster members in one process race inside Proto.Actor's cluster (see raceEnabled)")
	}
	ports := proctest.FreePorts(t, 2, true)
	members := []string{fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cc := actors.ClusterConfig{Name: "reg", Members: members, Shards: 2, HealthInterval: 200 * time.Millisecond, Logger: quiet}
	clock := newFakeClock()
	var nodes []*actors.ClusterNode
	for _, m := range members {
		sys := quietSystem()
		node, err := actors.StartMember(sys, eventstore.NewMemory(), testConfig(clock), cc, m)
		require.NoError(t, err)
		t.Cleanup(node.Stop) // it shuts its actor system down
		nodes = append(nodes, node)
	}
	require.Eventually(t, func() bool { return len(nodes[0].Live()) == 2 }, 30*time.Second, 20*time.Millisecond, "both members up")
	c := nodes[0].Client()
	assert.Equal(t, sortedCopy(members), sortedCopy(c.Members()))

	homes := map[string]int{}
	for i := 0; i < 24; i++ {
		scope := fmt.Sprintf("cl-%d", i)
		homes[nodes[0].Home(scope)]++
		_, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(scope), Goal: fmt.Sprintf("task %d", i), Budget: budget.TokenBudget{Total: 10}})
		require.NoError(t, err)
		clock.Advance(time.Millisecond)
	}
	require.Len(t, homes, 2, "scopes on both members")
	for _, m := range members {
		assert.Positive(t, c.WritePosition(m), "a write position per member")
	}

	all, err := c.ListFrames(ctx, &messages.ListFrames{Limit: 1000}, seeOwn)
	require.NoError(t, err)
	require.Len(t, all.Frames, 24, "every member's frames")
	assert.True(t, newestFirst(all.Frames), "merged newest first: %v", ids(all.Frames))
	assert.Equal(t, "task 23", all.Frames[0].Goal)
	assert.Empty(t, all.NextCursor)
	require.Len(t, all.Positions, 2)
	for _, f := range all.Frames {
		assert.Equal(t, nodes[0].Home(f.Scope), f.Member, "each entry names the member that holds it")
		assert.GreaterOrEqual(t, all.Positions[f.Member], c.WritePosition(f.Member))
	}
	for _, limit := range []int{1, 5} {
		got := listAll(t, c, messages.ListFrames{}, limit)
		assert.Equal(t, ids(all.Frames), ids(got), "pages of %d", limit)
	}
	filtered := listAll(t, c, messages.ListFrames{GoalPrefix: "task 1"}, 3)
	assert.Len(t, filtered, 11, "task 1 and 10..19")
	assert.True(t, newestFirst(filtered))
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}
