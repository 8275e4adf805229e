package actors_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/messages"
)

func TestHomeOfIsStableAndSpreads(t *testing.T) {
	members := []string{"10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"}
	reversed := slices.Clone(members)
	slices.Reverse(reversed)
	count := map[string]int{}
	for i := 0; i < 9000; i++ {
		scope := fmt.Sprintf("agent-%d", i)
		home := actors.HomeOf(scope, members)
		require.Contains(t, members, home)
		require.Equal(t, home, actors.HomeOf(scope, reversed), "the list's order does not matter")
		count[home]++
	}
	for _, m := range members {
		assert.InDelta(t, 3000, count[m], 300, "scopes spread evenly: %v", count)
	}
	// Adding a member moves only the scopes it takes (rendezvous hashing);
	// the rest keep their home.
	more := append(slices.Clone(members), "10.0.0.4:7000")
	moved := 0
	for i := 0; i < 9000; i++ {
		scope := fmt.Sprintf("agent-%d", i)
		if h := actors.HomeOf(scope, more); h != actors.HomeOf(scope, members) {
			require.Equal(t, "10.0.0.4:7000", h)
			moved++
		}
	}
	assert.InDelta(t, 9000/4, moved, 300)
	assert.Equal(t, "", actors.HomeOf("s", nil))
}

func TestHealthAddress(t *testing.T) {
	h, err := actors.HealthAddress("127.0.0.1:7400")
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:7401", h)
	for _, bad := range []string{"", "7400", "127.0.0.1", "127.0.0.1:x", "127.0.0.1:0", "127.0.0.1:65535", ":7400", "0.0.0.0:7400", "[::]:7400"} {
		_, err := actors.HealthAddress(bad)
		assert.Error(t, err, bad)
	}
	assert.Equal(t, "stateindex@127.0.0.1:7400", actors.KindOf("127.0.0.1:7400"))
}

func TestStartMemberRefusesABadConfiguration(t *testing.T) {
	sys := quietSystem()
	defer sys.Shutdown()
	cfg := testConfig(newFakeClock())
	ok := actors.ClusterConfig{Name: "c", Members: []string{"127.0.0.1:7500", "127.0.0.1:7510"}}
	for name, tc := range map[string]struct {
		cc   actors.ClusterConfig
		self string
		want string
	}{
		"no name":        {actors.ClusterConfig{Members: ok.Members}, "127.0.0.1:7500", "needs a name"},
		"no members":     {actors.ClusterConfig{Name: "c"}, "127.0.0.1:7500", "list of storage members"},
		"not a member":   {ok, "127.0.0.1:7520", "is not one of the cluster's members"},
		"listed twice":   {actors.ClusterConfig{Name: "c", Members: []string{"127.0.0.1:7500", "127.0.0.1:7500"}}, "127.0.0.1:7500", "listed twice"},
		"bad address":    {actors.ClusterConfig{Name: "c", Members: []string{"localhost"}}, "localhost", "not host:port"},
		"any address":    {actors.ClusterConfig{Name: "c", Members: []string{"0.0.0.0:7500"}}, "0.0.0.0:7500", "give the address others reach it at"},
		"no health port": {actors.ClusterConfig{Name: "c", Members: []string{"127.0.0.1:65535"}}, "127.0.0.1:65535", "no port left"},
	} {
		_, err := actors.StartMember(sys, eventstore.NewMemory(), cfg, tc.cc, tc.self)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), tc.want, name)
	}
}

func TestStartMemberRefusesAFileOfAnotherMember(t *testing.T) {
	sys := quietSystem()
	defer sys.Shutdown()
	cfg := testConfig(newFakeClock())
	path := filepath.Join(t.TempDir(), "stateindex.db")
	st, err := eventstore.Open(path, &eventstore.Options{NoSync: true})
	require.NoError(t, err)
	defer st.Close()
	cc := actors.ClusterConfig{Name: "c", Members: []string{"127.0.0.1:7500", "127.0.0.1:7510"}, Shards: 4}
	require.NoError(t, st.ClaimIdentity(ctx, eventstore.Identity{Cluster: "c", Member: "127.0.0.1:7510", Members: cc.Members, Shards: 4}))
	_, err = actors.StartMember(sys, st, cfg, cc, "127.0.0.1:7500")
	require.Error(t, err)
	assert.True(t, errors.Is(err, eventstore.ErrIdentityMismatch), "%v", err)
	cc.Shards = 8
	_, err = actors.StartMember(sys, st, cfg, cc, "127.0.0.1:7510")
	assert.True(t, errors.Is(err, eventstore.ErrIdentityMismatch), "another shard count: %v", err)
}

func TestStartMemberRefusesAStandaloneFileWithScopesHomedElsewhere(t *testing.T) {
	sys := quietSystem()
	defer sys.Shutdown()
	cfg := testConfig(newFakeClock())
	path := filepath.Join(t.TempDir(), "stateindex.db")
	st, err := eventstore.Open(path, &eventstore.Options{NoSync: true})
	require.NoError(t, err)
	defer st.Close()
	members := []string{"127.0.0.1:7500", "127.0.0.1:7510"}
	srv, err := actors.Start(sys, st, cfg)
	require.NoError(t, err)
	var foreign string
	for i := 0; foreign == ""; i++ {
		if s := fmt.Sprintf("s%d", i); actors.HomeOf(s, members) != members[0] {
			foreign = s
		}
	}
	_, err = srv.Client().PushFrame(ctx, &messages.PushFrame{Header: mut(foreign), Goal: "g", Budget: budget.TokenBudget{Total: 10}})
	require.NoError(t, err)
	srv.Stop()
	_, err = actors.StartMember(sys, st, cfg, actors.ClusterConfig{Name: "c", Members: members}, members[0])
	require.Error(t, err)
	assert.Contains(t, err.Error(), "written by a standalone server")
	_, has, err := st.Identity(ctx)
	require.NoError(t, err)
	assert.False(t, has, "nothing recorded")
}

// TestScopeActivatedTwiceNeverForks runs two StateIndex instances — as two
// activations of one scope during a membership change would be — on one
// store, and writes one scope through both at once. The store's expected
// version lets exactly one write per version through; the loser fails with
// version_conflict and its retry (same request id) applies once. The log
// holds every acknowledged request exactly once, in one linear history.
func TestScopeActivatedTwiceNeverForks(t *testing.T) {
	store := eventstore.NewMemory()
	var clients []*actors.Client
	for i := 0; i < 2; i++ {
		sys := quietSystem()
		defer sys.Shutdown()
		srv, err := actors.Start(sys, store, testConfig(newFakeClock()))
		require.NoError(t, err)
		defer srv.Stop()
		clients = append(clients, srv.Client())
	}
	const scope = "twice"
	root, err := clients[0].PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: scope, RequestID: "root"}, Goal: "g",
		Budget: budget.TokenBudget{Total: 1 << 30}})
	require.NoError(t, err)

	const perWriter = 60
	conflicts := make([]int, 2)
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				req := &messages.AddContextHandle{Header: messages.Header{Scope: scope, RequestID: fmt.Sprintf("w%d-%d", w, i)},
					FrameID: root.FrameID, HandleID: fmt.Sprintf("h-w%d-%d", w, i), Priority: compaction.Medium, Content: "fact"}
				for attempt := 0; ; attempt++ {
					// Alternate activations, and retry the same request on the
					// other one after a conflict.
					_, err := clients[(w+i+attempt)%2].AddContextHandle(ctx, req)
					if err == nil {
						break
					}
					if !assert.True(t, errors.Is(err, actors.ErrVersionConflict), "%v", err) || attempt > 50 {
						return
					}
					conflicts[w]++
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("conflicts refused by the store: %v", conflicts)

	seen := map[string]int{}
	var version int64
	require.NoError(t, store.ReadStream(ctx, scope, 1, func(r eventstore.Record) error {
		version++
		require.Equal(t, version, r.Version, "one linear history")
		ev, err := eventstore.DecodeFrameEvent(r)
		require.NoError(t, err)
		seen[ev.EventMeta().RequestID]++
		return nil
	}))
	assert.Equal(t, int64(1+2*perWriter), version, "every acknowledged request, nothing else")
	for id, n := range seen {
		assert.Equal(t, 1, n, "request %s applied once", id)
	}
	st, _, err := actors.LoadState(ctx, store, scope, actors.Recall{}, nil)
	require.NoError(t, err)
	assert.Len(t, st.Frames[root.FrameID].Handles, 2*perWriter)
	// A stale activation catches up at its next write: the conflict drops
	// its cached state, and the retry applies on the current history.
	for i, c := range clients {
		req := &messages.AddContextHandle{Header: messages.Header{Scope: scope, RequestID: fmt.Sprintf("last-%d", i)},
			FrameID: root.FrameID, Priority: compaction.Medium, Content: "last"}
		_, err := c.AddContextHandle(ctx, req)
		if errors.Is(err, actors.ErrVersionConflict) {
			_, err = c.AddContextHandle(ctx, req)
		}
		require.NoError(t, err)
	}
	info, err := store.Stream(ctx, scope)
	require.NoError(t, err)
	assert.Equal(t, version+2, info.Version)
}
