package failovertest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/actors/wire"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/internal/proctest"
	"github.com/stateindex/stateindex/messages"
)

// A member paused (SIGSTOP) long enough to be marked down has its scopes
// taken over by the others, which take their next owner epochs. Resumed
// (SIGCONT), it still holds a scope in its cache and still believes it
// owns it (its own view of the members never changed), but it can write
// nothing: a request sent to it directly is refused scope_moved, naming
// the new owner, and nothing it decided after its deposition is in the
// log — the audit shows no record it wrote after it was resumed. (The
// probe scope is the test's own: the storm's scopes each have a request
// in flight at every moment, and B, resumed, answers those first — they
// are refused too, and the first refusal drops the scope from its cache.)
func TestFailoverPausedMemberIsFenced(t *testing.T) {
	base := skipUnlessReady(t)
	c, schema := newCluster(t, base, true)
	ports := proctest.FreePorts(t, 3, true)
	var list []string
	for _, p := range ports {
		list = append(list, fmt.Sprintf("127.0.0.1:%d", p))
	}
	a, b, cc := list[0], list[1], list[2]
	t.Logf("schema %s; members A %s, B %s (paused), C %s", schema, a, b, cc)
	procs := map[string]*proctest.Proc{}
	for name, m := range map[string]string{"A": a, "B": b, "C": cc} {
		procs[m] = c.member("member "+name, m, list)
	}
	const scopes = 100
	drv := c.start(list, 3, scopes, 0, "paused")
	rep := &report{}
	t0 := time.Now()
	waitAcks(drv, rep, "300 acknowledged requests", "", t0, 300)

	// The probe: a scope B owns under every view that has B (the highest
	// rendezvous score of the three), written once through B.
	var probe string
	for i := 0; probe == ""; i++ {
		if p := fmt.Sprintf("probe-%d", i); actors.SharedOwner(p, list) == b {
			probe = p
		}
	}
	raw := newRawSender(t)
	pushed := raw.send(b, &messages.PushFrame{Header: messages.Header{Scope: probe, RequestID: "probe-push"}, Goal: "probe",
		Budget: budget.TokenBudget{Total: 1 << 20}})
	require.Nil(t, pushed.Failure(), "%+v", pushed)
	frame := pushed.(*messages.PushFrameReply).FrameID
	addTo := func(member, id string) messages.Reply {
		return raw.send(member, &messages.AddContextHandle{Header: messages.Header{Scope: probe, RequestID: id},
			FrameID: frame, HandleID: id, Priority: compaction.Medium, Content: "written through " + member})
	}

	tStop := time.Now()
	require.NoError(t, syscall.Kill(procs[b].Pid(), syscall.SIGSTOP))
	resumed := false
	defer func() {
		if !resumed {
			_ = syscall.Kill(procs[b].Pid(), syscall.SIGCONT)
		}
	}()
	tDown := waitMember(drv, rep, "storage member down", b, tStop)
	waitAcks(drv, rep, "200 acknowledged requests after B was marked down", "", tDown, 200)
	// The probe taken over: A writes it (taking its next epoch).
	took := addTo(a, "probe-by-a")
	require.Nil(t, took.Failure(), "%+v", took)
	tCont := time.Now()
	require.NoError(t, syscall.Kill(procs[b].Pid(), syscall.SIGCONT))
	resumed = true
	t.Logf("B paused at +%s, marked down %s later, resumed after %s",
		tStop.Sub(t0).Round(time.Millisecond), tDown.Sub(tStop).Round(time.Millisecond), tCont.Sub(tStop).Round(time.Millisecond))

	// Straight to B, without the Client's resends: refused, naming the
	// scope's new owner.
	reply := addTo(b, "probe-after-resume")
	e := reply.Failure()
	require.NotNil(t, e, "B's write is refused: %+v", reply)
	assert.Equal(t, messages.CodeScopeMoved, e.Code, "%v", e)
	assert.Equal(t, a, ownerMember(e.Owner), "the new owner is A: %v", e)
	assert.Contains(t, e.Message, "retry")
	t.Logf("B, resumed, answered the probe's write: %v", e)
	procs[b].WaitFor("B's log line saying it was deposed", 30*time.Second, func(l []string) bool {
		for _, line := range l {
			if strings.Contains(line, "deposed") && strings.Contains(line, probe) {
				return true
			}
		}
		return false
	})

	waitAcks(drv, rep, "200 more acknowledged requests", "", time.Now(), 200)
	stopDriver(t, drv, rep)
	for _, m := range list {
		procs[m].Interrupt()
	}
	deposed := 0
	for _, m := range list {
		require.NoError(t, procs[m].Wait(30*time.Second), "%s stops cleanly", m)
	}
	for _, l := range procs[b].Lines() {
		if strings.Contains(l, "deposed") {
			deposed++
		}
	}

	want := checkAllAcked(t, rep)
	want["probe-push"] = acked{scope: probe, kind: "push", frame: frame}
	want["probe-by-a"] = acked{scope: probe, kind: "handle", handle: "probe-by-a"}
	checkStore(t, c.url, want, scopes+1) // "probe-after-resume" is not in the log
	c.checkVerify()
	au := checkAudit(t, c.url)
	after, takenOver := auditSince(t, c.url, b, tStop, tCont)
	assert.Zero(t, after, "records B wrote after it was resumed")
	assert.Positive(t, takenOver, "records of B's scopes the others wrote while B was paused")
	t.Logf("audit: %d records, every one written by its scope's owner at the time; %d owner changes; B wrote %d records, none after it was resumed (%d refused batches logged as deposed); %d records of B's scopes written by the others while it was paused",
		au.writes, au.acquisitions, au.byWriter[b], deposed, takenOver)
	un := reportGaps(t, rep, []event{{"B paused", tStop, b, false}})
	t.Logf("unavailability of B's scopes when it was paused: p50 %s, max %s (a paused member is marked down when a health poll times out: 2 s)",
		percentile(un, 0.5).Round(time.Millisecond), percentile(un, 1).Round(time.Millisecond))
}

// rawSender sends requests over remoting, once each, without a Client
// (no resend), and returns the replies as they came.
type rawSender struct {
	t   *testing.T
	sys *actor.ActorSystem
}

func newRawSender(t *testing.T) *rawSender {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	r, err := actors.StartRemote(sys, actors.RemoteConfig("127.0.0.1", 0))
	require.NoError(t, err)
	t.Cleanup(func() {
		sys.Shutdown()
		r.Shutdown(false)
	})
	return &rawSender{t: t, sys: sys}
}

func (s *rawSender) send(member string, req messages.Request) messages.Reply {
	s.t.Helper()
	msg, err := wire.Encode(req, 0)
	require.NoError(s.t, err)
	res, err := s.sys.Root.RequestFuture(actors.RemotePID(member), msg, 30*time.Second).Result()
	require.NoError(s.t, err)
	m, ok := res.(*wire.Message)
	require.True(s.t, ok, "%T", res)
	require.Nil(s.t, m.Err)
	reply, ok := m.Value.(messages.Reply)
	require.True(s.t, ok, "%T", m.Value)
	return reply
}

// auditSince counts the records member wrote after resumed, and the
// records others wrote between paused and resumed of the scopes member
// wrote before it was paused.
func auditSince(t *testing.T, u, member string, paused, resumed time.Time) (after, takenOver int) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	defer func() { _ = conn.Close(ctx) }()
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE writer = $1 AND at > $2`, member, resumed).Scan(&after))
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE writer <> $1 AND at > $2 AND at < $3
		AND stream IN (SELECT stream FROM audit_events WHERE writer = $1 AND at < $2)`, member, paused, resumed).Scan(&takenOver))
	return after, takenOver
}
