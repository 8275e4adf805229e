package actors_test

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// hookTarget is a hook's target actor: it hands every notification to the
// test (on got) and answers with refuse's next answer ("" acknowledges).
type hookTarget struct {
	got    chan *messages.HookNotification
	refuse chan string
}

func (h *hookTarget) Receive(c actor.Context) {
	n, ok := c.Message().(*messages.HookNotification)
	if !ok {
		return
	}
	h.got <- n
	var r string
	select {
	case r = <-h.refuse:
	default:
	}
	c.Respond(&messages.HookAck{Refused: r})
}

func spawnHookTarget(t *testing.T, sys *actor.ActorSystem, name string) *hookTarget {
	t.Helper()
	h := &hookTarget{got: make(chan *messages.HookNotification, 100), refuse: make(chan string, 10)}
	_, err := sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return h }), name)
	require.NoError(t, err)
	return h
}

func nextNote(t *testing.T, h *hookTarget) *messages.HookNotification {
	t.Helper()
	select {
	case n := <-h.got:
		return n
	case <-time.After(10 * time.Second):
		require.FailNow(t, "no hook notification within 10 s")
		return nil
	}
}

func noNote(t *testing.T, h *hookTarget) {
	t.Helper()
	select {
	case n := <-h.got:
		require.FailNow(t, "unexpected notification", "%+v", n)
	default:
	}
}

// A hook notifies its target of the notices it names, for its scope
// prefix only, in log order, each acknowledged once; a refusal is sent
// again; and after a restart it resumes after the last acknowledged one.
func TestHooksNotifyAtLeastOnceInOrder(t *testing.T) {
	e := newEnv(t)
	target := spawnHookTarget(t, e.sys, "supervisor")
	hooks := []actors.Hook{{Name: "limits", On: []frames.Notice{frames.NoticeLimitReached, frames.NoticeFailed},
		ScopePrefix: "agents:", Actor: "supervisor", Timeout: 5 * time.Second}}
	_, err := e.srv.StartHooks(hooks, actors.HookOptions{})
	require.NoError(t, err)
	waitSubscribed(t, e, "hook.limits")

	// A limit in agents:a: limit_reached (not suspended: the hook does
	// not ask for it).
	root := push(t, e.c, "agents:a", "", 100)
	_, err = e.c.UpdateFrame(ctx, &messages.UpdateFrame{Header: mut("agents:a"), FrameID: root, Limits: &budget.Limits{Turns: 1}})
	require.NoError(t, err)
	r, err := e.c.RecordUsage(ctx, &messages.RecordUsage{Header: mut("agents:a"), FrameID: root, Cost: budget.Cost{Turns: 2}})
	require.NoError(t, err)
	require.NotNil(t, r.Suspension)
	n := nextNote(t, target)
	assert.Equal(t, "limits", n.Hook)
	assert.Equal(t, string(frames.NoticeLimitReached), n.Notice)
	assert.Equal(t, "agents:a", n.Scope)
	assert.Equal(t, root, n.FrameID)
	assert.Equal(t, "limit", n.Reason)
	assert.Equal(t, "suspended", n.Status)
	assert.Equal(t, "goal under ", n.Goal, "looked up: a suspension does not carry the goal")
	assert.Equal(t, e.seq(), n.Position)

	// Outside the prefix, and a notice it does not ask for: nothing.
	other := push(t, e.c, "others:b", "", 100)
	_, err = e.c.PopFrame(ctx, &messages.PopFrame{Header: mut("others:b"), FrameID: other, Status: frames.StatusFailed})
	require.NoError(t, err)
	done := push(t, e.c, "agents:c", "", 100)
	_, err = e.c.PopFrame(ctx, &messages.PopFrame{Header: mut("agents:c"), FrameID: done, Status: frames.StatusCompleted})
	require.NoError(t, err)

	// A failure, refused once: sent again, and nothing after it overtakes it.
	target.refuse <- "busy"
	f1 := push(t, e.c, "agents:d", "", 100)
	f2 := push(t, e.c, "agents:d", "", 100)
	_, err = e.c.PopFrame(ctx, &messages.PopFrame{Header: mut("agents:d"), FrameID: f2, Status: frames.StatusFailed})
	require.NoError(t, err)
	_, err = e.c.PopFrame(ctx, &messages.PopFrame{Header: mut("agents:d"), FrameID: f1, Status: frames.StatusFailed})
	require.NoError(t, err)
	first := nextNote(t, target)
	again := nextNote(t, target)
	assert.Equal(t, first, again, "the refused notification comes again, the same")
	assert.Equal(t, f2, first.FrameID)
	assert.Equal(t, "failed", first.Notice)
	second := nextNote(t, target)
	assert.Equal(t, f1, second.FrameID)
	assert.Greater(t, second.Position, first.Position)
	noNote(t, target)

	// A restart resumes after the last acknowledged notification.
	e.restart()
	target = spawnHookTarget(t, e.sys, "supervisor")
	_, err = e.srv.StartHooks(hooks, actors.HookOptions{})
	require.NoError(t, err)
	f3 := push(t, e.c, "agents:e", "", 100)
	_, err = e.c.PopFrame(ctx, &messages.PopFrame{Header: mut("agents:e"), FrameID: f3, Status: frames.StatusFailed})
	require.NoError(t, err)
	n = nextNote(t, target)
	assert.Equal(t, f3, n.FrameID, "nothing acknowledged before the restart comes again")
}

// A hook whose goal prefix does not match the frame's goal stays quiet;
// one that matches fires.
func TestHooksFilterByGoal(t *testing.T) {
	e := newEnv(t)
	target := spawnHookTarget(t, e.sys, "watcher")
	_, err := e.srv.StartHooks([]actors.Hook{{Name: "research", On: []frames.Notice{frames.NoticeFinished},
		GoalPrefix: "research:", Actor: "watcher"}}, actors.HookOptions{})
	require.NoError(t, err)
	waitSubscribed(t, e, "hook.research")
	for _, goal := range []string{"chores", "research: tides"} {
		r, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: mut("s"), Goal: goal, Budget: budget.TokenBudget{Total: 100}})
		require.NoError(t, err)
		_, err = e.c.PopFrame(ctx, &messages.PopFrame{Header: mut("s"), FrameID: r.FrameID, Status: frames.StatusCompleted})
		require.NoError(t, err)
	}
	n := nextNote(t, target)
	assert.Equal(t, "research: tides", n.Goal)
	assert.Equal(t, "finished", n.Notice)
	noNote(t, target)
}

func TestHooksRefuseWhatCannotWork(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name string
		h    actors.Hook
		want string
	}{
		{"no name", actors.Hook{On: []frames.Notice{frames.NoticeFailed}, Actor: "a"}, "needs a name"},
		{"no notice", actors.Hook{Name: "x", Actor: "a"}, "fires on no notice"},
		{"unknown notice", actors.Hook{Name: "x", On: []frames.Notice{"limit"}, Actor: "a"}, `unknown notice "limit"`},
		{"no target", actors.Hook{Name: "x", On: []frames.Notice{frames.NoticeFailed}}, "exactly one target"},
		{"kind outside a cluster", actors.Hook{Name: "x", On: []frames.Notice{frames.NoticeFailed}, Kind: "k"}, "not a cluster member"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.srv.StartHooks([]actors.Hook{tc.h}, actors.HookOptions{})
			require.ErrorContains(t, err, tc.want)
		})
	}
	twice := actors.Hook{Name: "x", On: []frames.Notice{frames.NoticeFailed}, Actor: "a"}
	_, err := e.srv.StartHooks([]actors.Hook{twice, twice}, actors.HookOptions{})
	require.ErrorContains(t, err, "given twice")
}

// waitSubscribed waits for a hook's durable subscription to exist (its
// start position is "now" when it is created): a Subscribe of the same
// name and filter would create it, so this reads it instead.
func waitSubscribed(t *testing.T, e *env, name string) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, err := e.c.ReadEvents(ctx, "", &messages.ReadEvents{Name: name, Max: 1})
		return err == nil
	}, 10*time.Second, 5*time.Millisecond)
}
