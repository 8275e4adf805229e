package failovertest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/internal/proctest"
)

// Three `stateindex serve --store … --cluster` members on one PostgreSQL
// schema, a driver storming 120 scopes. One member is SIGKILLed mid-run:
// its scopes are served by the other two from the shared store within
// seconds; it restarts. Then a rolling restart replaces a second member by
// one on a new address: B stops gracefully, D starts with the new list
// (A, C, D) while A and C still run with the old one, then A and C are
// restarted one at a time with the new list. At the end every
// acknowledged request is in the store exactly once, every chain and
// signature verifies (stateindex verify --store), and the audit triggers
// show that no scope was ever written by two owners at once.
func TestFailoverKillAndRollingReplace(t *testing.T) {
	base := skipUnlessReady(t)
	start := time.Now()
	c, schema := newCluster(t, base, true)
	t.Logf("phase: built after %s", time.Since(start).Round(time.Millisecond))
	ports := proctest.FreePorts(t, 4, true)
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	a, b, cc, d := addr(0), addr(1), addr(2), addr(3)
	oldList, newList := []string{a, b, cc}, []string{a, cc, d}
	t.Logf("schema %s; members A %s, B %s, C %s; D %s replaces B", schema, a, b, cc, d)

	procs := map[string]*proctest.Proc{}
	for name, m := range map[string]string{"A": a, "B": b, "C": cc} {
		procs[m] = c.member("member "+name, m, oldList)
	}
	// The driver polls every address the cluster will ever have: a client
	// that lists the replacement up front sees it as soon as it is up.
	const scopes = 120
	drv := c.start([]string{a, b, cc, d}, 3, scopes, 0, "agent")
	rep := &report{}
	t0 := time.Now()
	t.Logf("phase: driver ready after %s", time.Since(start).Round(time.Millisecond))
	waitAcks(drv, rep, "600 acknowledged requests", "", t0, 600)

	// C dies mid-run.
	var events []event
	tKill := time.Now()
	procs[cc].Kill()
	events = append(events, event{"C killed", tKill, cc, false})
	tDown := waitMember(drv, rep, "storage member down", cc, tKill)
	waitAcks(drv, rep, "200 acknowledged requests after C was marked down", "", tDown, 200)
	t.Logf("C killed at +%s, marked down by the driver %s later", tKill.Sub(t0).Round(time.Millisecond), tDown.Sub(tKill).Round(time.Millisecond))
	procs[cc] = c.member("member C (restarted)", cc, oldList)
	tUp := waitMember(drv, rep, "storage member up", cc, tKill)
	events = append(events, event{"C back", tUp, cc, true})
	waitAcks(drv, rep, "acknowledgements on C's scopes again", cc, tUp, 100)

	t.Logf("phase: C back at +%s", time.Since(t0).Round(time.Millisecond))
	// The roll: B leaves for good, D joins with the new list; then A and C
	// restart with it, one at a time.
	tStopB := time.Now()
	procs[b].Interrupt()
	events = append(events, event{"B stopped (gracefully)", tStopB, b, false})
	require.NoError(t, procs[b].Wait(30*time.Second), "B stops cleanly")
	waitMember(drv, rep, "storage member down", b, tStopB)
	procs[d] = c.member("member D", d, newList)
	tD := waitMember(drv, rep, "storage member up", d, tStopB)
	events = append(events, event{"D joined", tD, d, true})
	waitAcks(drv, rep, "acknowledgements on D's scopes", d, tD, 100)
	for _, m := range []string{a, cc} {
		tStop := time.Now()
		procs[m].Interrupt()
		events = append(events, event{m + " restarting", tStop, m, false})
		require.NoError(t, procs[m].Wait(30*time.Second), "%s stops cleanly", m)
		procs[m] = c.member("member "+m+" (new list)", m, newList)
		tBack := waitMember(drv, rep, "storage member up", m, tStop)
		events = append(events, event{m + " back", tBack, m, true})
		waitAcks(drv, rep, "acknowledgements on "+m+"'s scopes after its restart", m, tBack, 100)
	}
	t.Logf("phase: roll done at +%s", time.Since(t0).Round(time.Millisecond))
	tEnd := time.Now()
	waitAcks(drv, rep, "300 more acknowledged requests on the new members", "", tEnd, 300)

	stopDriver(t, drv, rep)
	for _, m := range newList {
		procs[m].Interrupt()
	}
	for _, m := range newList {
		require.NoError(t, procs[m].Wait(30*time.Second), "%s stops cleanly", m)
		assertNoErrors(t, procs[m])
	}

	t.Logf("phase: run over at +%s", time.Since(t0).Round(time.Millisecond))
	acked := checkAllAcked(t, rep)
	checkStore(t, c.url, acked, scopes)
	t.Logf("phase: store checked at +%s", time.Since(t0).Round(time.Millisecond))
	c.checkVerify()
	t.Logf("phase: verified at +%s", time.Since(t0).Round(time.Millisecond))
	au := checkAudit(t, c.url)
	moved := 0
	for _, n := range au.epochs {
		if n > 1 {
			moved++
		}
	}
	t.Logf("audit: %d records, every one written by the owner of its scope's current epoch; %d owner changes; %d scopes written under more than one epoch; records by member %v",
		au.writes, au.acquisitions, moved, au.byWriter)
	assert.Positive(t, moved, "scopes changed owners (the kill and the roll moved them)")
	assert.Positive(t, au.byWriter[d], "the replacement member wrote")
	un := reportGaps(t, rep, events)
	t.Logf("unavailability of the scopes a failure, a leave or a join moved, %d (scope, event) pairs: p50 %s, max %s",
		len(un), percentile(un, 0.5).Round(time.Millisecond), percentile(un, 1).Round(time.Millisecond))
}

// assertNoErrors checks that a member logged no error of its own (a
// deposition is a warning; Proto.Actor's connection noise is its own).
func assertNoErrors(t *testing.T, p *proctest.Proc) {
	t.Helper()
	for _, l := range p.Lines() {
		if strings.Contains(l, "level=ERROR") && !strings.Contains(l, "lib=protoactor") {
			t.Errorf("%s logged an error: %s", p.Name, l)
		}
	}
}
