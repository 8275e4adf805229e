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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/actors/wire"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/internal/proctest"
	"github.com/stateindex/stateindex/messages"
)

// remoteHookTarget is the actor a member's hook reaches at HOST:PORT/NAME:
// each notification arrives as a *wire.Message (Proto.Actor decoded the
// envelope with wire.Decode), and the reply travels wire-encoded too. The
// first delivery of each notice is refused; later ones are acknowledged.
type remoteHookTarget struct {
	mu    sync.Mutex
	seen  map[string]int // member/scope/frame/notice → deliveries
	log   []delivery
	fresh chan delivery // every delivery, in arrival order
}

type delivery struct {
	note    *messages.HookNotification
	refused bool
}

func (n delivery) key() string {
	return fmt.Sprintf("%s/%s/%s/%s", n.note.Member, n.note.Scope, n.note.FrameID, n.note.Notice)
}

func (h *remoteHookTarget) Receive(c actor.Context) {
	m, ok := c.Message().(*wire.Message)
	if !ok {
		return
	}
	note, ok := m.Value.(*messages.HookNotification)
	if m.Err != nil || !ok {
		// Not what a hook sends: refuse it (the test then fails on its count).
		reply, _ := wire.Encode(&messages.HookAck{Refused: fmt.Sprintf("not a notification: %T %v", m.Value, m.Err)}, 0)
		c.Respond(reply)
		return
	}
	h.mu.Lock()
	d := delivery{note: note}
	h.seen[d.key()]++
	d.refused = h.seen[d.key()] == 1
	h.log = append(h.log, d)
	h.mu.Unlock()
	ack := &messages.HookAck{}
	if d.refused {
		ack.Refused = "first delivery: send it again"
	}
	reply, err := wire.Encode(ack, 0)
	if err != nil {
		return
	}
	c.Respond(reply)
	h.fresh <- d
}

// TestClusterAwaitFrameAndRemoteHook runs two `stateindex serve` members
// whose configuration file has a hook to an actor of this process
// (HOST:PORT/NAME); this process is a client node of the cluster.
//
//   - AwaitFrame through the cluster Client, on scopes homed on each member:
//     an await parked on a live frame answers once the frame is popped,
//     with its final status and results; an await on a continued link
//     answers with the chain's last link once that ends.
//   - The members' hook notifications arrive here decoded
//     (*messages.HookNotification) from both members, in each member's log
//     order; a refused one is delivered again, an acknowledged one never
//     is, not even after its member restarts (the durable subscription
//     resumes after the acknowledged position).
//
// `make test` runs it without the race detector, after the -race run that
// skips it: a cluster node in a race-enabled binary reports Proto.Actor's
// own data races (disthash.Manager's rendezvous table is replaced on each
// topology event while Cluster.Get reads it; remote's endpoint writer
// mailbox on a lost connection), whatever the test does. -short skips it.
func TestClusterAwaitFrameAndRemoteHook(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process cluster test: skipped with -short")
	}
	if raceEnabled {
		t.Skip("a cluster node races inside Proto.Actor under -race: `make test` runs this test again without it")
	}
	_, file, _, _ := runtime.Caller(0)
	server := proctest.Build(t, filepath.Join(filepath.Dir(file), "..", ".."), "./cmd/stateindex")
	ports := proctest.FreePorts(t, 3, true)
	members := []string{fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])}
	self := fmt.Sprintf("127.0.0.1:%d", ports[2])
	cfgFile := filepath.Join(t.TempDir(), "stateindex.yaml")
	require.NoError(t, os.WriteFile(cfgFile, []byte(fmt.Sprintf(`hooks:
  - name: remote
    on: [finished, failed]
    scope_prefix: hook-
    actor: %s/hooktarget
    timeout: 2s
`, self)), 0o600))
	serving := regexp.MustCompile(`stateindex serving`)
	dirs := map[string]string{members[0]: t.TempDir(), members[1]: t.TempDir()}
	start := func(m string) *proctest.Proc {
		p := proctest.Start(t, "member "+m, server, []string{"serve", "--config", cfgFile, "--data", dirs[m], "--listen", m,
			"--cluster", "awaithooks", "--peers", strings.Join(members, ","), "--health-interval", healthInterval.String()})
		p.WaitLine(0, serving, 30*time.Second)
		return p
	}
	procs := map[string]*proctest.Proc{}
	for _, m := range members {
		procs[m] = start(m)
		line, _ := procs[m].WaitLine(0, regexp.MustCompile(`stateindex hook`), 5*time.Second)
		require.Contains(t, line, self+"/hooktarget", "the member started the configured hook")
	}

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	node, err := actors.JoinCluster(sys, actors.ClusterConfig{Name: "awaithooks", Members: members, HealthInterval: healthInterval,
		RequestTimeout: requestTimeout, Logger: quiet}, self)
	require.NoError(t, err)
	t.Cleanup(node.Stop)
	target := &remoteHookTarget{seen: map[string]int{}, fresh: make(chan delivery, 1024)}
	_, err = sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return target }), "hooktarget")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(node.Live()) == 2 }, 20*time.Second, 50*time.Millisecond)
	c := node.Client()
	ctx := context.Background()

	// A scope homed on each member for a plain frame and one for a chain.
	scopes := map[string][]string{}
	for i := 0; len(scopes[members[0]]) < 2 || len(scopes[members[1]]) < 2; i++ {
		s := fmt.Sprintf("hook-%d", i)
		if home := node.Home(s); len(scopes[home]) < 2 {
			scopes[home] = append(scopes[home], s)
		}
	}
	type await struct {
		r   *messages.AwaitFrameReply
		err error
	}
	awaitAsync := func(scope, frame string) chan await {
		ch := make(chan await, 1)
		go func() {
			actx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			r, err := c.AwaitFrame(actx, &messages.AwaitFrame{Header: messages.Header{Scope: scope}, FrameID: frame})
			ch <- await{r, err}
		}()
		return ch
	}
	answer := func(ch chan await) *messages.AwaitFrameReply {
		t.Helper()
		select {
		case a := <-ch:
			require.NoError(t, a.err)
			return a.r
		case <-time.After(30 * time.Second):
			require.FailNow(t, "the await never answered")
			return nil
		}
	}
	notAnswered := func(ch chan await, what string) {
		t.Helper()
		select {
		case a := <-ch:
			require.FailNow(t, "answered while "+what, "%+v %v", a.r, a.err)
		default:
		}
	}
	// want is every notification the hook must deliver, by member/scope/frame/notice.
	want := map[string]*messages.HookNotification{}
	plain := map[string]string{} // member → its plain frame
	expect := func(scope, frame, goal string, st frames.Status, version int64) {
		n := &messages.HookNotification{Hook: "remote", Notice: string(frames.NoticeFinished), Scope: scope, FrameID: frame, Goal: goal,
			Status: st.String(), Member: node.Home(scope), Version: version}
		if st == frames.StatusFailed {
			n.Notice = string(frames.NoticeFailed)
		}
		want[delivery{note: n}.key()] = n
	}

	t.Run("await a frame homed on each member", func(t *testing.T) {
		for i, m := range members {
			scope := scopes[m][0]
			h := messages.Header{Scope: scope}
			status := []frames.Status{frames.StatusCompleted, frames.StatusFailed}[i]
			p, err := c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "plain", Budget: budget.TokenBudget{Total: 100}})
			require.NoError(t, err)
			now, err := c.AwaitFrame(ctx, &messages.AwaitFrame{Header: h, FrameID: p.FrameID, Wait: -1})
			if err == nil {
				t.Fatalf("a negative wait is refused, got %+v", now)
			}
			require.ErrorContains(t, err, "invalid_argument")
			ch := awaitAsync(scope, p.FrameID)
			_, err = c.AddResult(ctx, &messages.AddResult{Header: h, FrameID: p.FrameID, Kind: "answer", Ref: "r-" + m})
			require.NoError(t, err)
			notAnswered(ch, "the frame is live")
			pop, err := c.PopFrame(ctx, &messages.PopFrame{Header: h, FrameID: p.FrameID, Status: status})
			require.NoError(t, err)
			r := answer(ch)
			assert.True(t, r.Terminal, m)
			assert.False(t, r.TimedOut, m)
			assert.Equal(t, status, r.Status, m)
			assert.Equal(t, p.FrameID, r.Head, m)
			require.Len(t, r.Results, 1, m)
			assert.Equal(t, "r-"+m, r.Results[0].Ref)
			assert.NotZero(t, r.FinishedAt)
			expect(scope, p.FrameID, "plain", status, pop.Version)
			plain[m] = p.FrameID
		}
	})

	t.Run("await a continued chain homed on each member", func(t *testing.T) {
		for _, m := range members {
			scope := scopes[m][1]
			h := messages.Header{Scope: scope}
			root, err := c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "run", Budget: budget.TokenBudget{Total: 100_000}, ContextWindow: 2_000})
			require.NoError(t, err)
			task, err := c.PushFrame(ctx, &messages.PushFrame{Header: h, ParentID: root.FrameID, Goal: "task", Budget: budget.TokenBudget{Total: 10_000}})
			require.NoError(t, err)
			for i := range 12 {
				_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, FrameID: task.FrameID, Role: []string{"user", "assistant"}[i%2],
					Priority: compaction.Medium, Content: fmt.Sprintf("turn %02d ", i) + strings.Repeat("x", 150)})
				require.NoError(t, err)
			}
			ch := awaitAsync(scope, task.FrameID)
			link, err := c.ContinueFrame(ctx, &messages.ContinueFrame{Header: h, FrameID: task.FrameID, ResumeCeiling: 200})
			require.NoError(t, err)
			_, err = c.GetFrame(ctx, &messages.GetFrame{Header: h, FrameID: link.FrameID})
			require.NoError(t, err)
			notAnswered(ch, "its link was continued, not ended")
			_, err = c.AddResult(ctx, &messages.AddResult{Header: h, FrameID: link.FrameID, Kind: "answer", Ref: "42"})
			require.NoError(t, err)
			pop, err := c.PopFrame(ctx, &messages.PopFrame{Header: h, FrameID: link.FrameID, Status: frames.StatusCompleted})
			require.NoError(t, err)
			r := answer(ch)
			assert.Equal(t, task.FrameID, r.FrameID, m)
			assert.Equal(t, link.FrameID, r.Head, "the chain's final link: %s", m)
			assert.True(t, r.Terminal)
			assert.Equal(t, frames.StatusCompleted, r.Status)
			require.Len(t, r.Results, 1)
			assert.Equal(t, "42", r.Results[0].Ref)
			// Awaited after the end, any link answers at once with the same.
			again, err := c.AwaitFrame(ctx, &messages.AwaitFrame{Header: h, FrameID: task.FrameID})
			require.NoError(t, err)
			assert.Equal(t, link.FrameID, again.Head)
			assert.True(t, again.Terminal)
			expect(scope, link.FrameID, "task", frames.StatusCompleted, pop.Version)
		}
	})

	// next returns the next delivery to the hook target.
	next := func(what string) delivery {
		t.Helper()
		select {
		case d := <-target.fresh:
			return d
		case <-time.After(30 * time.Second):
			require.FailNow(t, "no hook notification arrived: "+what)
			return delivery{}
		}
	}
	checkNote := func(d delivery) {
		t.Helper()
		w, ok := want[d.key()]
		require.True(t, ok, "an expected notification: %+v (want %d)", d.note, len(want))
		assert.Equal(t, w.Hook, d.note.Hook)
		assert.Equal(t, w.Scope, d.note.Scope)
		assert.Equal(t, w.FrameID, d.note.FrameID)
		assert.Equal(t, w.Goal, d.note.Goal)
		assert.Equal(t, w.Status, d.note.Status)
		assert.Equal(t, w.Version, d.note.Version, "the scope's version after the pop")
		assert.NotZero(t, d.note.At)
	}

	t.Run("hook to a remote actor: decoded, refusal redelivered, ack final", func(t *testing.T) {
		require.Len(t, want, 4)
		// Each notification twice (refused, then acknowledged), nothing else.
		lastAcked := map[string]uint64{}
		for range 2 * len(want) {
			d := next("refused and acknowledged deliveries")
			checkNote(d)
			assert.Greater(t, d.note.Position, lastAcked[d.note.Member], "member %s: in its log order, nothing after an ack again", d.note.Member)
			if !d.refused {
				lastAcked[d.note.Member] = d.note.Position
			}
		}
		target.mu.Lock()
		for k := range want {
			assert.Equal(t, 2, target.seen[k], "%s: refused once, then acknowledged", k)
		}
		perMember := map[string][]delivery{}
		for _, d := range target.log {
			perMember[d.note.Member] = append(perMember[d.note.Member], d)
		}
		for m, ds := range perMember {
			for i, d := range ds {
				if d.refused {
					require.Less(t, i+1, len(ds), m)
					assert.Equal(t, d.key(), ds[i+1].key(), "a refused notification is sent again before the next one of its member")
				}
			}
		}
		target.mu.Unlock()
	})

	t.Run("after a member restarts, acknowledged notifications are not sent again", func(t *testing.T) {
		m := members[0]
		require.NoError(t, procs[m].Stop(30*time.Second))
		procs[m] = start(m)
		require.Eventually(t, func() bool {
			_, err := c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: scopes[m][0]}, FrameID: plain[m]})
			return err == nil
		}, 20*time.Second, 100*time.Millisecond, "the client reaches the restarted member")
		// A sentinel on each member: once its notifications arrived, any
		// redelivery of an earlier one would have come first.
		for _, mm := range members {
			scope := scopes[mm][0]
			h := messages.Header{Scope: scope}
			p, err := c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "sentinel", Budget: budget.TokenBudget{Total: 100}})
			require.NoError(t, err)
			pop, err := c.PopFrame(ctx, &messages.PopFrame{Header: h, FrameID: p.FrameID, Status: frames.StatusCompleted})
			require.NoError(t, err)
			expect(scope, p.FrameID, "sentinel", frames.StatusCompleted, pop.Version)
		}
		for range 4 {
			d := next("the sentinels")
			checkNote(d)
			assert.Equal(t, "sentinel", d.note.Goal, "only the sentinels' notifications: nothing acknowledged came again")
		}
		target.mu.Lock()
		defer target.mu.Unlock()
		assert.Len(t, target.log, 2*len(want), "every notification refused once and acknowledged once, none more")
	})
}
