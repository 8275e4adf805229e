package clustertest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/automanaged"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/actors/wire"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/internal/proctest"
	"github.com/stateindex/stateindex/messages"
)

// kindTarget is the grain of the cluster kind a hook sends to: it records
// which identity each notification reached, refuses the first delivery of
// each and acknowledges the rest (wire-encoded, as over remoting).
type kindTarget struct {
	mu   sync.Mutex
	seen map[string]int
	got  chan kindDelivery
}

type kindDelivery struct {
	identity string
	note     *messages.HookNotification
	refused  bool
}

type kindGrain struct {
	t        *kindTarget
	identity string
}

func (g *kindGrain) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *cluster.ClusterInit:
		g.identity = m.Identity.Identity
	case *wire.Message:
		note, ok := m.Value.(*messages.HookNotification)
		if m.Err != nil || !ok {
			reply, _ := wire.Encode(&messages.HookAck{Refused: fmt.Sprintf("not a notification: %T %v", m.Value, m.Err)}, 0)
			c.Respond(reply)
			return
		}
		g.t.mu.Lock()
		key := note.Member + "/" + note.FrameID + "/" + note.Notice
		g.t.seen[key]++
		d := kindDelivery{identity: g.identity, note: note, refused: g.t.seen[key] == 1}
		g.t.mu.Unlock()
		ack := &messages.HookAck{}
		if d.refused {
			ack.Refused = "first delivery: send it again"
		}
		reply, err := wire.Encode(ack, 0)
		if err != nil {
			return
		}
		c.Respond(reply)
		g.t.got <- d
	}
}

// TestClusterHookToAKind: a member's hook whose target is a cluster kind
// reaches the grain of that kind (identity: the frame's scope) on another
// node of the cluster, decoded; a refusal is sent again, an ack is final.
//
// Kinds live on cluster members, and the automanaged provider's members
// are exactly the nodes listed in --peers (their health endpoints): a
// cluster client (actors.JoinCluster) hosts no kinds, and actors.StartMember
// registers only its own stateindex@MEMBER kind. So this process is a
// member itself, started with Proto.Actor's cluster API (the same
// provider and identity lookup as actors.ClusterNode.join), listed in the
// members' --peers, hosting the kind; the scopes written are homed on the
// two `stateindex serve` members. A second actor system here is the
// cluster Client that writes them.
func TestClusterHookToAKind(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process cluster test: skipped with -short")
	}
	if raceEnabled {
		t.Skip("a cluster node races inside Proto.Actor under -race: `make test` runs this test again without it")
	}
	_, file, _, _ := runtime.Caller(0)
	server := proctest.Build(t, filepath.Join(filepath.Dir(file), "..", ".."), "./cmd/stateindex")
	ports := proctest.FreePorts(t, 3, true)
	members := []string{fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1]), fmt.Sprintf("127.0.0.1:%d", ports[2])}
	host := members[2] // this process: a member hosting the kind, no StateIndex
	const name = "hookkind"
	var hosts []string
	for _, m := range members {
		h, err := actors.HealthAddress(m)
		require.NoError(t, err)
		hosts = append(hosts, h)
	}

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	newSys := func() *actor.ActorSystem {
		return actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	}
	target := &kindTarget{seen: map[string]int{}, got: make(chan kindDelivery, 64)}
	kind := cluster.NewKind("overseer", actor.PropsFromProducer(func() actor.Actor { return &kindGrain{t: target} }))
	hostSys := newSys()
	cl := cluster.New(hostSys, cluster.Configure(name, automanaged.NewWithConfig(healthInterval, ports[2]+1, hosts...), disthash.New(),
		actors.RemoteConfig("127.0.0.1", ports[2]), cluster.WithKinds(kind)))
	cl.StartMember()
	t.Cleanup(func() { cl.Shutdown(true) })

	cfgFile := filepath.Join(t.TempDir(), "stateindex.yaml")
	require.NoError(t, os.WriteFile(cfgFile, []byte(`hooks:
  - name: k
    on: [finished]
    scope_prefix: k-
    kind: overseer
    timeout: 2s
`), 0o600))
	serving := regexp.MustCompile(`stateindex serving`)
	for _, m := range members[:2] {
		p := proctest.Start(t, "member "+m, server, []string{"serve", "--config", cfgFile, "--data", t.TempDir(), "--listen", m,
			"--cluster", name, "--peers", strings.Join(members, ","), "--health-interval", healthInterval.String()})
		p.WaitLine(0, serving, 30*time.Second)
		line, _ := p.WaitLine(0, regexp.MustCompile(`stateindex hook`), 5*time.Second)
		require.Contains(t, line, "kind overseer")
	}

	node, err := actors.JoinCluster(newSys(), actors.ClusterConfig{Name: name, Members: members, HealthInterval: healthInterval,
		RequestTimeout: requestTimeout, Logger: quiet}, "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(node.Stop)
	require.Eventually(t, func() bool { return len(node.Live()) == 2 }, 20*time.Second, 50*time.Millisecond)
	c := node.Client()
	ctx := context.Background()

	// A scope homed on each `stateindex serve` member.
	var scopes []string
	done := map[string]bool{}
	for i := 0; len(scopes) < 2; i++ {
		s := fmt.Sprintf("k-%d", i)
		if home := node.Home(s); home != host && !done[home] {
			done[home] = true
			scopes = append(scopes, s)
		}
	}
	want := map[string]string{} // frame → scope
	for _, s := range scopes {
		h := messages.Header{Scope: s}
		p, err := c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "watched", Budget: budget.TokenBudget{Total: 100}})
		require.NoError(t, err)
		_, err = c.PopFrame(ctx, &messages.PopFrame{Header: h, FrameID: p.FrameID, Status: frames.StatusCompleted})
		require.NoError(t, err)
		want[p.FrameID] = s
	}

	count := map[string]int{}
	for range 2 * len(want) {
		var d kindDelivery
		select {
		case d = <-target.got:
		case <-time.After(30 * time.Second):
			require.FailNow(t, "no notification reached the kind's grain")
		}
		scope, ok := want[d.note.FrameID]
		require.True(t, ok, "an expected notification: %+v", d.note)
		assert.Equal(t, scope, d.note.Scope)
		assert.Equal(t, scope, d.identity, "the grain's identity is the frame's scope")
		assert.Equal(t, node.Home(scope), d.note.Member)
		assert.Equal(t, "k", d.note.Hook)
		assert.Equal(t, string(frames.NoticeFinished), d.note.Notice)
		assert.Equal(t, "watched", d.note.Goal)
		assert.Equal(t, count[d.note.FrameID] == 0, d.refused, "refused first, then acknowledged")
		count[d.note.FrameID]++
	}
	// One more frame on each member: once it arrives, nothing acknowledged
	// came again before it (a member delivers in its log order).
	for _, s := range scopes {
		h := messages.Header{Scope: s}
		p, err := c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "watched", Budget: budget.TokenBudget{Total: 100}})
		require.NoError(t, err)
		_, err = c.PopFrame(ctx, &messages.PopFrame{Header: h, FrameID: p.FrameID, Status: frames.StatusCompleted})
		require.NoError(t, err)
		want[p.FrameID] = s
		for range 2 {
			select {
			case d := <-target.got:
				assert.Equal(t, p.FrameID, d.note.FrameID, "only the new frame's notification: nothing acknowledged came again")
			case <-time.After(30 * time.Second):
				require.FailNow(t, "the last notification never reached the grain")
			}
		}
	}
}
