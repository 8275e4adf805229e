package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/internal/proctest"
)

const (
	requestTimeout = 5 * time.Second
	healthInterval = 300 * time.Millisecond
	// slack is what scheduling on a loaded 2-core machine may add to a
	// deadline the Client honours.
	slack = 300 * time.Millisecond
)

// op is one line of the driver's report (see driver.Op).
type op struct {
	Ev      string `json:"ev"`
	Scope   string `json:"scope"`
	Home    string `json:"home"`
	Req     string `json:"req"`
	Kind    string `json:"kind"`
	Handle  string `json:"handle"`
	Frame   string `json:"frame"`
	Attempt int    `json:"attempt"`
	T0      int64  `json:"t0"`
	T1      int64  `json:"t1"`
	Res     string `json:"res"`
	Err     string `json:"err"`
}

// logLine is a slog JSON line of the driver (member up/down).
type logLine struct {
	Time   time.Time `json:"time"`
	Msg    string    `json:"msg"`
	Member string    `json:"member"`
	Ev     string    `json:"ev"`
	Failed int       `json:"failed"`
}

// report parses the driver's output incrementally.
type report struct {
	n    int
	ops  []op
	logs []logLine
}

func (r *report) feed(lines []string) {
	for ; r.n < len(lines); r.n++ {
		l := lines[r.n]
		if !strings.HasPrefix(l, "{") {
			continue
		}
		if strings.HasPrefix(l, `{"ev":"op"`) {
			var o op
			if json.Unmarshal([]byte(l), &o) == nil {
				r.ops = append(r.ops, o)
			}
			continue
		}
		var ll logLine
		if json.Unmarshal([]byte(l), &ll) == nil {
			r.logs = append(r.logs, ll)
		}
	}
}

// count counts the ops on home's scopes with result res (any result if
// res is "") sent at or after since.
func (r *report) count(home, res string, since time.Time) int {
	n := 0
	for _, o := range r.ops {
		if o.Home == home && (res == "" || o.Res == res) && o.T0 >= since.UnixNano() {
			n++
		}
	}
	return n
}

// memberEvent returns the time of the first driver log line msg about
// member at or after since.
func (r *report) memberEvent(msg, member string, since time.Time) (time.Time, bool) {
	for _, l := range r.logs {
		if strings.Contains(l.Msg, msg) && l.Member == member && !l.Time.Before(since) {
			return l.Time, true
		}
	}
	return time.Time{}, false
}

func TestClusterSurvivesAMemberKilledMidRun(t *testing.T) {
	if os.Getenv("STATEINDEX_CLUSTER_TEST") == "" {
		t.Skip("multi-process cluster test: run `make cluster-test` (STATEINDEX_CLUSTER_TEST=1)")
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	server := proctest.Build(t, root, "./cmd/stateindex")
	driver := proctest.Build(t, root, "./internal/clustertest/driver")

	ports := proctest.FreePorts(t, 3, true)
	addrA, addrB, addrC := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1]), fmt.Sprintf("127.0.0.1:%d", ports[2])
	peers := strings.Join([]string{addrA, addrB, addrC}, ",")
	dirs := map[string]string{addrA: t.TempDir(), addrB: t.TempDir(), addrC: t.TempDir()}
	serveArgs := func(addr string) []string {
		return []string{"serve", "--data", dirs[addr], "--listen", addr, "--cluster", "clustertest", "--peers", peers,
			"--health-interval", healthInterval.String(), "--log-level", "info"}
	}
	serving := regexp.MustCompile(`stateindex serving`)

	// B and C are `stateindex serve`; A is the driver, a member too.
	b := proctest.Start(t, "member B", server, serveArgs(addrB))
	c := proctest.Start(t, "member C", server, serveArgs(addrC))
	b.WaitLine(0, serving, 30*time.Second)
	c.WaitLine(0, serving, 30*time.Second)
	a := proctest.Start(t, "driver A", driver, []string{"--data", dirs[addrA], "--listen", addrA, "--cluster", "clustertest",
		"--peers", peers, "--scopes", "100", "--workers", "10", "--timeout", requestTimeout.String(), "--health-interval", healthInterval.String()})
	a.WaitLine(0, regexp.MustCompile(`"ev":"ready"`), 60*time.Second)
	misroute, _ := a.WaitLine(0, regexp.MustCompile(`"ev":"misroute"`), time.Second)
	assert.Contains(t, misroute, `"badRequest":true`, "a member refuses a scope homed elsewhere")
	assert.Contains(t, misroute, "belongs to member")
	rep := &report{}

	// Load on both members; then B dies mid-run.
	a.WaitFor("200 acknowledged requests on B's scopes", 60*time.Second, func(l []string) bool {
		rep.feed(l)
		return rep.count(addrB, "ok", time.Time{}) >= 200 && rep.count(addrC, "ok", time.Time{}) >= 200
	})
	tKill := time.Now()
	b.Kill()
	tDead := time.Now()

	var tDown time.Time
	a.WaitFor("B marked down", 30*time.Second, func(l []string) bool {
		rep.feed(l)
		var ok bool
		tDown, ok = rep.memberEvent("storage member down", addrB, tKill)
		return ok
	})
	t.Logf("B killed at %s, dead by +%s, marked down by the driver at +%s",
		tKill.Format("15:04:05.000"), tDead.Sub(tKill).Round(time.Millisecond), tDown.Sub(tKill).Round(time.Millisecond))
	// Let the down period last a while: B's scopes are refused, C's served.
	a.WaitFor("two seconds of B being down", 30*time.Second, func(l []string) bool {
		rep.feed(l)
		return rep.count(addrB, "unavailable", tDown.Add(2*time.Second)) >= 20 && rep.count(addrC, "ok", tDown.Add(2*time.Second)) >= 50
	})

	tRestart := time.Now()
	b2 := proctest.Start(t, "member B (restarted)", server, serveArgs(addrB))
	b2.WaitLine(0, serving, 30*time.Second)
	var tUp time.Time
	a.WaitFor("B back, and 200 more acknowledged requests on its scopes", 60*time.Second, func(l []string) bool {
		rep.feed(l)
		var ok bool
		if tUp, ok = rep.memberEvent("storage member up", addrB, tRestart); !ok {
			return false
		}
		return rep.count(addrB, "ok", tUp) >= 200
	})
	t.Logf("B restarted at +%s, up again at +%s", tRestart.Sub(tKill).Round(time.Millisecond), tUp.Sub(tKill).Round(time.Millisecond))

	a.WriteLine("stop")
	done, _ := a.WaitLine(0, regexp.MustCompile(`"ev":"done"`), 60*time.Second)
	assert.Contains(t, done, `"failed":0`)
	require.NoError(t, a.Wait(30*time.Second), "the driver leaves the cluster and exits")
	rep.feed(a.Lines())
	b2.Interrupt()
	c.Interrupt()
	require.NoError(t, b2.Wait(30*time.Second), "B stops cleanly")
	require.NoError(t, c.Wait(30*time.Second), "C stops cleanly")

	checkOutcomes(t, rep, addrB, addrC, tKill, tDead, tDown, tRestart, tUp)
	acked := checkAllAcked(t, rep)
	checkDataFiles(t, rep, acked, map[string]string{addrB: dirs[addrB], addrC: dirs[addrC]}, []string{addrA, addrB, addrC})
}

// checkOutcomes checks every reported request against the timeline.
func checkOutcomes(t *testing.T, rep *report, addrB, addrC string, tKill, tDead, tDown, tRestart, tUp time.Time) {
	t.Helper()
	var inFlightUnknown, downRefused int
	for _, o := range rep.ops {
		took := time.Duration(o.T1 - o.T0)
		t0, t1 := time.Unix(0, o.T0), time.Unix(0, o.T1)
		assert.NotEqual(t, "error", o.Res, "%+v", o)
		assert.LessOrEqual(t, took, requestTimeout+slack, "never answered after the caller's deadline: %+v", o)
		switch o.Home {
		case addrC:
			assert.Equal(t, "ok", o.Res, "C's scopes keep working throughout: %+v", o)
		case addrB:
			switch {
			case t0.Before(tKill) && t1.After(tKill):
				// In flight when B died: done before it, or unknown.
				assert.Contains(t, []string{"ok", "unknown"}, o.Res, "in flight at the kill: %+v", o)
				if o.Res == "unknown" {
					inFlightUnknown++
				}
			case t0.After(tDead) && t0.Before(tRestart):
				assert.NotEqual(t, "ok", o.Res, "B is dead: %+v", o)
			}
			if !t0.Before(tDown) && t1.Before(tUp) {
				// Sent while B is marked down: refused, quickly.
				assert.Equal(t, "unavailable", o.Res, "%+v", o)
				assert.Contains(t, o.Err, "unavailable")
				assert.Less(t, took, 2*time.Second, "%+v", o)
				downRefused++
			}
			if t0.Before(tDown) && t1.After(tDown) && o.Res != "ok" {
				// Pending when B was marked down: answered within 2 s of it.
				assert.LessOrEqual(t, t1.Sub(tDown), 2*time.Second, "%+v", o)
			}
		}
	}
	assert.Positive(t, inFlightUnknown, "requests in flight when B died report an unknown outcome")
	assert.Positive(t, downRefused, "requests for B's scopes were refused while it was down")
	t.Logf("%d requests reported; %d in flight at the kill had an unknown outcome; %d refused as unavailable while B was down",
		len(rep.ops), inFlightUnknown, downRefused)
}

// acked is an acknowledged request.
type acked struct {
	scope, home, kind, handle, frame string
}

// checkAllAcked checks that every request the driver sent was finally
// acknowledged (the driver repeats each, same request id, until it is), and
// returns them by request id.
func checkAllAcked(t *testing.T, rep *report) map[string]acked {
	t.Helper()
	out := map[string]acked{}
	seen := map[string]bool{}
	retried := 0
	for _, o := range rep.ops {
		seen[o.Req] = true
		if o.Res == "ok" {
			_, dup := out[o.Req]
			assert.False(t, dup, "request %s acknowledged twice by the driver", o.Req)
			out[o.Req] = acked{scope: o.Scope, home: o.Home, kind: o.Kind, handle: o.Handle, frame: o.Frame}
			if o.Attempt > 1 {
				retried++
			}
		}
	}
	for req := range seen {
		assert.Contains(t, out, req, "request %s was finally acknowledged", req)
	}
	t.Logf("%d requests acknowledged, %d of them after retries with the same request id", len(out), retried)
	return out
}

// checkDataFiles opens each storage member's data file and checks that every
// acknowledged request is there exactly once, that nothing else is, that
// each scope lives only at its home, and that the files verify.
func checkDataFiles(t *testing.T, rep *report, want map[string]acked, dirs map[string]string, members []string) {
	t.Helper()
	ctx := context.Background()
	found := map[string]int{}
	for home, dir := range dirs {
		st, err := eventstore.Open(filepath.Join(dir, "stateindex.db"), &eventstore.Options{OpenTimeout: 5 * time.Second})
		require.NoError(t, err)
		require.NoError(t, st.Verify(ctx, func(stream string, err error) { t.Errorf("%s: %s: %v", home, stream, err) }))
		id, ok, err := st.Identity(ctx)
		require.NoError(t, err)
		require.True(t, ok, "the member recorded its identity")
		assert.Equal(t, home, id.Member)
		var scopes []string
		require.NoError(t, st.Streams(ctx, func(i eventstore.StreamInfo) error { scopes = append(scopes, i.Stream); return nil }))
		assert.NotEmpty(t, scopes)
		for _, scope := range scopes {
			assert.Equal(t, home, actors.HomeOf(scope, members), "scope %s lives only at its home", scope)
			handles := 0
			err := st.ReadStream(ctx, scope, 1, func(r eventstore.Record) error {
				ev, err := eventstore.DecodeFrameEvent(r)
				if err != nil {
					return err
				}
				m := ev.EventMeta()
				found[m.RequestID]++
				w, ok := want[m.RequestID]
				if !assert.True(t, ok, "%s: event %s of request %q that was never acknowledged", scope, r.Type, m.RequestID) {
					return nil
				}
				assert.Equal(t, w.scope, scope)
				switch e := ev.(type) {
				case *frames.FramePushed:
					assert.Equal(t, "push", w.kind)
					assert.Equal(t, w.frame, m.Frame, "the acknowledged frame id")
				case *frames.HandleAdded:
					assert.Equal(t, "handle", w.kind)
					assert.Equal(t, w.handle, e.Handle.ID, "the acknowledged handle id")
					handles++
				default:
					t.Errorf("%s: unexpected event %s", scope, r.Type)
				}
				return nil
			})
			require.NoError(t, err)
			state, _, err := actors.LoadState(ctx, st, scope, actors.Recall{}, nil)
			require.NoError(t, err, "the scope's history replays")
			live := state.LiveFrames()
			require.Len(t, live, 1)
			assert.Len(t, live[0].Handles, handles)
		}
		require.NoError(t, st.Close())
	}
	for req, w := range want {
		assert.Equal(t, 1, found[req], "acknowledged request %s (%s on %s) is in the data exactly once", req, w.kind, w.scope)
	}
	t.Logf("%d acknowledged requests found, each exactly once, in the data files of %d members", len(want), len(dirs))
}
