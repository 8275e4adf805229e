package actors_test

import (
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/internal/proctest"
	"github.com/stateindex/stateindex/messages"
)

// sharedCluster starts shared-store members on one store.
type sharedCluster struct {
	t     *testing.T
	store eventstore.Store
	cfg   actors.Config
	quiet *slog.Logger
	nodes map[string]*actors.ClusterNode
}

func newSharedCluster(t *testing.T) *sharedCluster {
	return &sharedCluster{t: t, store: eventstore.NewMemory(), cfg: testConfig(newFakeClock()),
		quiet: slog.New(slog.NewTextHandler(io.Discard, nil)), nodes: map[string]*actors.ClusterNode{}}
}

func (sc *sharedCluster) config(members []string) actors.ClusterConfig {
	return actors.ClusterConfig{Name: "shared", Members: members, Shards: 4, HealthInterval: 200 * time.Millisecond,
		RequestTimeout: 5 * time.Second, Logger: sc.quiet, SharedStore: true}
}

func (sc *sharedCluster) start(self string, members []string) *actors.ClusterNode {
	node, err := actors.StartMember(quietSystem(), sc.store, sc.cfg, sc.config(members), self)
	require.NoError(sc.t, err)
	sc.t.Cleanup(node.Stop)
	sc.nodes[self] = node
	return node
}

func (sc *sharedCluster) client(members []string) *actors.ClusterNode {
	node, err := actors.JoinCluster(quietSystem(), sc.config(members), "127.0.0.1:0")
	require.NoError(sc.t, err)
	sc.t.Cleanup(node.Stop)
	return node
}

// waitLive waits until node sees exactly want live.
func waitLive(t *testing.T, node *actors.ClusterNode, want ...string) {
	t.Helper()
	want = sortedCopy(want)
	require.Eventually(t, func() bool { return slices.Equal(node.Live(), want) }, 30*time.Second, 20*time.Millisecond,
		"live members %v, want %v", node.Live(), want)
}

// owned lists the scopes among scopes that member owns under live.
func owned(scopes, live []string, member string) []string {
	var out []string
	for _, s := range scopes {
		if actors.SharedOwner(s, live) == member {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

func members(ports []int) []string {
	var out []string
	for _, p := range ports {
		out = append(out, fmt.Sprintf("127.0.0.1:%d", p))
	}
	return out
}

// streamRequests reads scope's log: the request ids in order, and checks
// that the versions are one linear history.
func streamRequests(t *testing.T, store eventstore.Store, scope string) []string {
	t.Helper()
	var ids []string
	var v int64
	require.NoError(t, store.ReadStream(ctx, scope, 1, func(r eventstore.Record) error {
		v++
		require.Equal(t, v, r.Version, "%s: one linear history", scope)
		ev, err := eventstore.DecodeFrameEvent(r)
		require.NoError(t, err)
		ids = append(ids, ev.EventMeta().RequestID)
		return nil
	}))
	return ids
}

// In shared-store mode any member serves any scope and placement follows
// the live members: each member keeps exactly the scopes it owns under the
// live members it sees; a member that leaves has its scopes served by the
// others from the shared store (their histories continue, nothing
// forked); a member that joins takes its share and the others drop what
// moved to it from their caches. ListFrames asks one member (one log).
func TestSharedClusterFollowsTheLiveMembers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four cluster members (about ten seconds)")
	}
	if raceEnabled {
		t.Skip("cluster members in one process race inside Proto.Actor's cluster (see raceEnabled)")
	}
	sc := newSharedCluster(t)
	all := members(proctest.FreePorts(t, 4, true))
	list := all[:3]
	a, b, c := list[0], list[1], list[2]
	for _, m := range list {
		sc.start(m, list)
	}
	cl := sc.client(list)
	waitLive(t, cl, list...)
	for _, m := range list {
		waitLive(t, sc.nodes[m], list...)
	}
	client := cl.Client()
	assert.Equal(t, []string{""}, client.Members(), "one log: a global request goes to one member")

	var scopes []string
	frames := map[string]string{}
	for i := 0; i < 30; i++ {
		s := fmt.Sprintf("sh-%d", i)
		scopes = append(scopes, s)
		r, err := client.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: s, RequestID: s + "-push"}, Goal: "task " + s,
			Budget: budget.TokenBudget{Total: 1 << 20}})
		require.NoError(t, err)
		frames[s] = r.FrameID
	}
	addAll := func(c *actors.Client, round string) {
		t.Helper()
		for _, s := range scopes {
			req := &messages.AddContextHandle{Header: messages.Header{Scope: s, RequestID: s + "-" + round},
				FrameID: frames[s], Priority: compaction.Medium, Content: round}
			_, err := c.AddContextHandle(ctx, req)
			require.NoError(t, err, "%s in round %s", s, round)
		}
	}
	addAll(client, "r1")
	for _, m := range list {
		assert.Equal(t, owned(scopes, list, m), sc.nodes[m].Server().CachedScopes(), "%s holds exactly its share", m)
		assert.NotEmpty(t, owned(scopes, list, m), "every member has a share")
	}

	// B leaves: its scopes are served by A and C, their histories continue.
	sc.nodes[b].Stop()
	waitLive(t, cl, a, c)
	waitLive(t, sc.nodes[a], a, c)
	waitLive(t, sc.nodes[c], a, c)
	addAll(client, "r2")
	for _, m := range []string{a, c} {
		assert.Equal(t, owned(scopes, []string{a, c}, m), sc.nodes[m].Server().CachedScopes(), "%s holds its new share", m)
	}
	for _, s := range scopes {
		assert.Equal(t, []string{s + "-push", s + "-r1", s + "-r2"}, streamRequests(t, sc.store, s))
	}
	list2, err := client.ListFrames(ctx, &messages.ListFrames{Limit: 1000}, seeOwn)
	require.NoError(t, err)
	assert.Len(t, list2.Frames, len(scopes), "each frame once")

	// A rolling restart that replaces B by D: D joins with the new list
	// while A and C still run with the old one (they do not poll D). A
	// client with the new list places scopes on D; one with the old list
	// on A and C: both are served, one linear history per scope.
	next := []string{a, c, all[3]}
	d := next[2]
	sc.start(d, next)
	waitLive(t, sc.nodes[d], next...)
	cl2 := sc.client(next)
	waitLive(t, cl2, next...)
	addAll(cl2.Client(), "r3")
	assert.Equal(t, owned(scopes, next, d), sc.nodes[d].Server().CachedScopes(), "D serves its share under the new list")
	addAll(client, "r4")
	for _, s := range scopes {
		assert.Equal(t, []string{s + "-push", s + "-r1", s + "-r2", s + "-r3", s + "-r4"}, streamRequests(t, sc.store, s))
	}

	// A restarts with the new list: it sees D, and C — still on the old
	// list — keeps serving. A's share is now computed over A, C and D.
	sc.nodes[a].Stop()
	sc.start(a, next)
	waitLive(t, sc.nodes[a], next...)
	waitLive(t, cl2, next...)
	addAll(cl2.Client(), "r5")
	assert.Equal(t, owned(scopes, next, a), sc.nodes[a].Server().CachedScopes(), "A holds its share under the new list")
	// C, on the old list, sees A and C only: D's scopes stay out of its
	// cache only once its own list has D (its restart, the roll's end).
	for _, s := range scopes {
		ids := streamRequests(t, sc.store, s)
		assert.Equal(t, s+"-r5", ids[len(ids)-1])
	}
}

func TestSharedClusterNeedsAFencingStore(t *testing.T) {
	sys := quietSystem()
	defer sys.Shutdown()
	st, err := eventstore.Open(filepath.Join(t.TempDir(), "stateindex.db"), &eventstore.Options{NoSync: true})
	require.NoError(t, err)
	defer st.Close()
	cc := actors.ClusterConfig{Name: "c", Members: []string{"127.0.0.1:7500"}, SharedStore: true}
	_, err = actors.StartMember(sys, st, testConfig(newFakeClock()), cc, "127.0.0.1:7500")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "needs a store that fences")
	_, has, err := st.Identity(ctx)
	require.NoError(t, err)
	assert.False(t, has, "nothing recorded")
}

func TestSharedOwnerMovesOnlyWhatItMust(t *testing.T) {
	live := []string{"10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"}
	count := map[string]int{}
	for i := 0; i < 9000; i++ {
		s := fmt.Sprintf("agent-%d", i)
		o := actors.SharedOwner(s, live)
		count[o]++
		// One member leaves: only its scopes move.
		if after := actors.SharedOwner(s, []string{live[0], live[2]}); o != live[1] {
			require.Equal(t, o, after, "a scope of a member that stays does not move")
		} else {
			require.Contains(t, []string{live[0], live[2]}, after)
		}
	}
	for _, m := range live {
		assert.InDelta(t, 3000, count[m], 300, "spread: %v", count)
	}
	assert.Equal(t, "", actors.SharedOwner("s", nil), "no live member: no owner")
}
