package crashtest_test

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/internal/crashtest"
)

var (
	cycles   = flag.Int("crash.cycles", 10, "kill cycles (make crash runs 200)")
	seedFlag = flag.Uint64("crash.seed", 0, "random seed (0: from the clock, logged)")
)

// TestMain turns the test binary into the crash child when the parent
// starts it with the child's environment.
func TestMain(m *testing.M) {
	if dir := os.Getenv(crashtest.EnvDir); dir != "" {
		os.Exit(crashtest.ChildMain(dir))
	}
	os.Exit(m.Run())
}

// readLines forwards the child's stdout lines (dropping any beyond the
// channel's room: the child prints one) until EOF, then closes done.
func readLines(r *bufio.Reader, lines chan<- string, done chan<- struct{}) {
	defer close(done)
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			return
		}
		select {
		case lines <- l:
		default:
		}
	}
}

// TestCrash: SIGKILL a child in the middle of a write storm and its
// retention passes again and again; after every kill, every acknowledged
// write is in the log or, removed by retention, in a verified archive that
// chains to it, nothing partial or unsent is, nothing half removed is
// visible, every chain, snapshot and signature verifies, and recovery
// equals a full replay.
func TestCrash(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("crash test: %d cycles, seed %d (rerun with -crash.seed=%d)", *cycles, seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	dir := t.TempDir()
	exe, err := os.Executable()
	require.NoError(t, err)

	var last crashtest.Stats
	lost, inFlightCommitted, inFlightAbsent := 0, 0, 0 // in flight: resent after the restart and answered
	killedBeforeReady := 0
	ackedUnrecorded := 0 // kills after which the stored position was past the last recorded ack
	chunkKills := 0      // kills with a chunk of partial output in flight
	var jt journalTally
	var rt retentionTally
	var lt ledgerTally
	var kt stateTally
	var base []crashtest.Segment // the journal's segments when the child starts
	var prev crashtest.Stats     // the last check's
	start := time.Now()
	for cycle := 1; cycle <= *cycles; cycle++ {
		if err := os.Remove(filepath.Join(dir, crashtest.ProbeFile)); err != nil && !os.IsNotExist(err) {
			require.NoError(t, err)
		}
		// Kill at a random moment: now and then during recovery (before the
		// child is ready), mostly somewhere in the storm; in a quarter of
		// the storm cycles, the child kills itself at a stage of a spend
		// settlement; in a third of the others, at a step of a retention
		// pass; in half the others, at the moment the child's probe shows
		// a journal frame written, an application to bbolt or a segment
		// recycled (a new generation on disk), a random while into the
		// storm.
		early := rng.IntN(5) == 0
		target, aimed, stage, lstage := noTarget, "", "", ""
		switch {
		case early:
		case rng.IntN(4) == 0:
			lstage = crashtest.LedgerStages[rng.IntN(len(crashtest.LedgerStages))]
		case rng.IntN(3) == 0:
			stage = crashtest.RetentionStages[rng.IntN(len(crashtest.RetentionStages))]
		case rng.IntN(2) == 0:
			target = killTarget(1 + rng.IntN(3))
		}
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(),
			crashtest.EnvDir+"="+dir,
			crashtest.EnvIncarnation+"="+strconv.Itoa(cycle),
			crashtest.EnvSeed+"="+strconv.FormatUint(seed, 10),
			crashtest.EnvRetentionKill+"="+stage,
			crashtest.EnvLedgerKill+"="+lstage)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		require.NoError(t, cmd.Start())
		lines := make(chan string, 16)
		eof := make(chan struct{})
		go readLines(bufio.NewReader(stdout), lines, eof)
		exited := make(chan error, 1)
		go func() {
			<-eof // all reads done before Wait closes the pipe
			exited <- cmd.Wait()
		}()

		var kill <-chan time.Time
		var hit <-chan bool
		stopWatch := make(chan struct{})
		selfKilled := ""   // the retention step the child killed itself at
		ledgerKilled := "" // the settlement stage
		// selfKill reads a line the child prints before it kills itself.
		selfKill := func(l string) bool {
			f := strings.Fields(l)
			switch {
			case len(f) == 3 && f[0] == "retention-kill":
				selfKilled = f[1] + " " + f[2]
			case len(f) == 3 && f[0] == "ledger-kill":
				ledgerKilled = f[1] + " " + f[2]
			default:
				return false
			}
			return true
		}
		if early {
			kill = time.After(time.Duration(rng.IntN(400)) * time.Millisecond)
		}
		readyTimeout := time.After(2 * time.Minute)
	wait:
		for {
			select {
			case l := <-lines:
				if selfKill(l) {
					continue
				}
				if !early && bytes.HasPrefix([]byte(l), []byte("ready")) {
					d := time.Duration(20+rng.IntN(400)) * time.Millisecond
					if stage != "" || lstage != "" {
						kill = time.After(3 * time.Second) // if no pass or settlement reaches the step
					} else if target == noTarget {
						kill = time.After(d)
					} else {
						hit = watchProbe(dir, target, d/2, stopWatch)
					}
				}
			case <-kill:
				break wait
			case h := <-hit:
				jt.targeted(target, h)
				if h {
					aimed = fmt.Sprintf(" (killed as the probe saw %s)", target)
				} else {
					aimed = fmt.Sprintf(" (waited 3 s for %s in vain)", target)
				}
				break wait
			case err := <-exited:
				// The line the child printed before it killed itself is read
				// before its exit is seen.
				for len(lines) > 0 {
					selfKill(<-lines)
				}
				if selfKilled == "" && ledgerKilled == "" {
					t.Fatalf("cycle %d: the child exited on its own (%v) before it was killed:\n%s", cycle, err, stderr.String())
				}
				exited <- err
				break wait
			case <-readyTimeout:
				_ = cmd.Process.Kill()
				t.Fatalf("cycle %d: the child did not get ready in time:\n%s", cycle, stderr.String())
			}
		}
		if selfKilled == "" && ledgerKilled == "" {
			require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		}
		close(stopWatch)
		err = <-exited
		ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("cycle %d: the child ended with %v, not by SIGKILL:\n%s", cycle, err, stderr.String())
		}
		if early {
			killedBeforeReady++
		}

		// What the journal went through before the kill: the child's
		// counters and the segment generations on disk.
		probe, probed, err := crashtest.ReadProbe(dir)
		require.NoError(t, err)
		segs, err := crashtest.Segments(dir)
		require.NoError(t, err)

		st, err := crashtest.Check(t.Context(), dir, cycle)
		require.NoError(t, err, "cycle %d (seed %d); child stderr:\n%s", cycle, seed, stderr.String())
		require.Zero(t, st.Lost, "cycle %d: acknowledged writes lost", cycle)
		switch {
		case selfKilled != "":
			aimed = " (killed itself in a retention pass: " + selfKilled + ")"
		case stage != "":
			aimed = fmt.Sprintf(" (waited 3 s for a retention pass's %q step in vain)", stage)
		case ledgerKilled != "":
			aimed = " (killed itself in a spend settlement: " + ledgerKilled + ")"
		case lstage != "":
			aimed = fmt.Sprintf(" (waited 3 s for a settlement's %q stage in vain)", lstage)
		}
		t.Logf("cycle %d%s: %s; %s; %s; spend ledger: %s", cycle, aimed, jt.add(probe, probed, base, segs, st),
			rt.add(t, cycle, early, stage, selfKilled, prev, st), st.Sub, lt.add(t, cycle, lstage, ledgerKilled, st.Ledger))
		prev = st
		kt.add(st.State)
		base, err = crashtest.Segments(dir)
		require.NoError(t, err)
		lost += st.Lost
		if st.Sub.Stored > st.Sub.LastAck {
			ackedUnrecorded++ // killed between an ack's commit and its line: the restart resumes past it
		}
		inFlightCommitted += st.InFlightCommitted
		inFlightAbsent += st.InFlightAbsent
		if st.Partial.InFlightCommitted+st.Partial.InFlightAbsent > 0 {
			chunkKills++
		}
		last = st
	}
	msg := fmt.Sprintf("crash: %d SIGKILL cycles (%d timed from process start, the rest from readiness) in %s, seed %d: "+
		"lost acknowledged writes: %d; requests in flight at the kills: %d committed whole, %d absent, 0 partial; after the last kill: %s",
		*cycles, killedBeforeReady, time.Since(start).Round(time.Second), seed, lost, inFlightCommitted, inFlightAbsent, last)
	t.Log(msg)
	fmt.Println(msg)
	jmsg := "crash: journal at the kills: " + jt.String()
	t.Log(jmsg)
	fmt.Println(jmsg)
	rmsg := "crash: retention at the kills: " + rt.String(last)
	t.Log(rmsg)
	fmt.Println(rmsg)
	cmsg := fmt.Sprintf("crash: chains after the last kill: %d acknowledged ContinueFrame, %d writes continued automatically, %d ResumeChain; "+
		"%d chains (%d links) read with GetChain from every link, each the replay's (%d removed by retention: answered with their tombstones); %d acknowledged links found; "+
		"%d mutations of earlier links refused (frame_continued naming the head)",
		last.Continuations, last.AutoContinued, last.Resumes, last.Chains, last.ChainLinks, last.RemovedLinks, last.LinksAcked, last.ContinuedRefusals)
	t.Log(cmsg)
	fmt.Println(cmsg)
	smsg := fmt.Sprintf("crash: durable subscription across the kills: %s; every kill's stored position at or above the last recorded ack (past it %d times: killed between an ack and its line) and covering only delivered events, "+
		"every restart resumed there (nothing skipped, order kept within each run)", last.Sub, ackedUnrecorded)
	t.Log(smsg)
	fmt.Println(smsg)
	lmsg := "crash: spend ledger across the kills: " + lt.String(last.Ledger)
	t.Log(lmsg)
	fmt.Println(lmsg)
	kmsg := "crash: scope state across the kills: " + kt.String(last.State)
	t.Log(kmsg)
	fmt.Println(kmsg)
	pmsg := fmt.Sprintf("crash: partial output after the last kill: %s; %d kills landed with a chunk in flight", last.Partial, chunkKills)
	t.Log(pmsg)
	fmt.Println(pmsg)
	require.Positive(t, last.Acked)
	// Scope state changed under the kills; Check fails on a change lost,
	// partial or applied against its condition.
	require.Positive(t, last.State.Requests, "no ChangeState reached the log")
	require.Zero(t, last.State.Lost+last.State.Partial)
	require.Positive(t, last.Chains, "no chain was recovered")
	// The subscriber delivered and acknowledged under the kills, and
	// resumed from its stored position after them.
	require.Positive(t, last.Sub.Unique, "the subscriber delivered nothing")
	require.Positive(t, last.Sub.Acks, "the subscriber acknowledged nothing")
	if *cycles > 2 {
		require.Positive(t, last.Sub.Resumes, "no restart reopened the subscription")
	}
	// Children were settled across the kills, exactly once each (Check
	// fails on a lost or doubled settlement).
	require.Positive(t, last.Ledger.Settled, "no child's spend was settled")
	require.Zero(t, last.Ledger.Lost+last.Ledger.Doubled)
	// Outputs streamed under the kills, and were checked against their chunks.
	require.Positive(t, last.Partial.Chunks, "no chunk of partial output was acknowledged")
	if *cycles >= 20 {
		require.Positive(t, last.Partial.Outputs, "no live output was checked after a kill")
		require.Positive(t, chunkKills, "no kill landed with a chunk in flight")
	}
	// The kills landed in a journal that was busy with all three.
	require.Positive(t, jt.frames, "no journal frame was written before a kill")
	require.Positive(t, jt.applications, "no background application ran before a kill")
	require.Positive(t, jt.recycles, "no segment was recycled before a kill")
	if *cycles >= 50 {
		require.Positive(t, jt.replayedKills, "no kill left acknowledged records in the journal for the reopen to replay")
		// Retention ran under the kills, and kills landed inside passes.
		require.Positive(t, last.Removals, "no removal was recorded")
		require.Positive(t, last.Compactions, "no context compaction was acknowledged")
		require.Positive(t, last.AckedArchived, "no acknowledged write was removed to an archive")
		// Chains were continued both ways and resumed under the kills.
		require.Positive(t, last.Continuations, "no ContinueFrame was acknowledged")
		require.Positive(t, last.AutoContinued, "no write continued its frame automatically")
		require.Positive(t, last.Resumes, "no ResumeChain was acknowledged")
		require.Positive(t, last.LinksAcked, "no acknowledged link was checked")
		require.Positive(t, rt.insidePass, "no kill landed inside a retention pass")
		require.Positive(t, rt.unfinishedSeen, "no kill left a recorded removal unfinished")
		// Kills landed between children's finish and their parent's
		// settlement, and between the settlement and its acknowledgement.
		require.Positive(t, lt.undelivered, "no kill left a finished child's settlement undelivered")
		require.Positive(t, lt.unacked, "no kill left a settlement unacknowledged")
	}
}

// killTarget is the journal event a cycle's kill waits for.
type killTarget int

const (
	noTarget killTarget = iota
	targetFrame
	targetApplication
	targetRecycle
)

func (k killTarget) String() string {
	return [...]string{"none", "a journal frame", "an application", "a recycle"}[k]
}

// watchProbe waits first, then polls the child's probe file until the
// target's counter moves past the value first seen (true) or for 3 s at
// most (false), or until stop.
func watchProbe(dir string, target killTarget, first time.Duration, stop <-chan struct{}) <-chan bool {
	out := make(chan bool, 1)
	counter := func(p crashtest.Probe) uint64 {
		switch target {
		case targetFrame:
			return p.Frames
		case targetApplication:
			return p.Applications
		}
		return p.Generation
	}
	go func() {
		select {
		case <-time.After(first):
		case <-stop:
			return
		}
		p, _, _ := crashtest.ReadProbe(dir)
		base := counter(p)
		tick := time.NewTicker(200 * time.Microsecond)
		defer tick.Stop()
		give := time.After(3 * time.Second)
		for {
			select {
			case <-tick.C:
				if p, ok, _ := crashtest.ReadProbe(dir); ok && counter(p) > base {
					out <- true
					return
				}
			case <-give:
				out <- false
				return
			case <-stop:
				return
			}
		}
	}()
	return out
}

// journalTally adds up what the journal did before each kill.
type journalTally struct {
	hits, misses                       [4]int // targeted kills: the target seen, or not within 3 s
	kills, probed                      int
	frames, applications, recycles     uint64
	withFrames, withApps, withRecycles int // kills after at least one of each in that process
	nearFrame, nearApp, nearRecycle    int // kills within one probe interval of one
	pendingAtKill                      int // kills with records the applier had not written to bbolt
	spareReady                         int // kills between a recycle and the first frame written to it
	replayedKills, replayedRecords     int // kills whose journal the reopen replayed, and the records
	tornKills                          int
}

// add counts one kill: probe is the child's last journal probe (probed:
// it wrote one), before and after the segment headers on disk when the
// child started and after it was killed. A segment whose generation is
// new was prepared by the child: created (the journal had fewer files) or
// recycled (a free segment given a new generation), the one its open
// prepares included.
func (jt *journalTally) add(p crashtest.Probe, probed bool, before, after []crashtest.Segment, st crashtest.Stats) string {
	jt.kills++
	prepared := crashtest.MaxGeneration(after) - crashtest.MaxGeneration(before)
	created := uint64(max(0, len(after)-len(before)))
	recycles := prepared - min(prepared, created)
	jt.recycles += recycles
	if recycles > 0 {
		jt.withRecycles++
	}
	spare := crashtest.SpareReady(after)
	if spare {
		jt.spareReady++
	}
	if probed {
		jt.probed++
		jt.frames += p.Frames
		jt.applications += p.Applications
		if p.Frames > 0 {
			jt.withFrames++
		}
		if p.Applications > 0 {
			jt.withApps++
		}
		if p.DFrames > 0 {
			jt.nearFrame++
		}
		if p.DApplications > 0 {
			jt.nearApp++
		}
		if p.DGeneration > 0 {
			jt.nearRecycle++
		}
		if p.Pending > 0 {
			jt.pendingAtKill++
		}
	}
	if st.Replayed > 0 {
		jt.replayedKills++
		jt.replayedRecords += st.Replayed
	}
	if st.TornBytes > 0 {
		jt.tornKills++
	}
	return fmt.Sprintf("killed after %d journal frames, %d applications, %d segments recycled and %d created (probed %v; last %v: +%d frames, +%d applications, +%d generations; %d records pending; a recycled spare not yet written: %v); "+
		"the reopen replayed %d records (tail cut as torn: %d bytes)",
		p.Frames, p.Applications, recycles, created, probed, crashtest.ProbeEvery, p.DFrames, p.DApplications, p.DGeneration, p.Pending, spare, st.Replayed, st.TornBytes)
}

func (jt *journalTally) targeted(k killTarget, hit bool) {
	if hit {
		jt.hits[k]++
	} else {
		jt.misses[k]++
	}
}

func (jt journalTally) String() string {
	return fmt.Sprintf("%d kills (%d after the store opened) after %d frames / %d applications / %d segment recycles in all; "+
		"%d kills after frames were written, %d after applications, %d after recycles; "+
		"within %v of the kill: a frame write %d times, an application %d, a recycle %d; "+
		"%d kills between a segment's recycling and its first frame; "+
		"%d kills with records pending in the journal at open (replayed: %d records), %d with records pending at the last probe; "+
		"%d reopens cut a final-segment tail as torn (a torn frame, or stale bytes of an earlier generation); "+
		"kills aimed at the moment the probe saw %s: %d (%d timed out), %s: %d (%d), %s: %d (%d)",
		jt.kills, jt.probed, jt.frames, jt.applications, jt.recycles,
		jt.withFrames, jt.withApps, jt.withRecycles,
		crashtest.ProbeEvery, jt.nearFrame, jt.nearApp, jt.nearRecycle,
		jt.spareReady,
		jt.replayedKills, jt.replayedRecords, jt.pendingAtKill, jt.tornKills,
		targetFrame, jt.hits[targetFrame], jt.misses[targetFrame], targetApplication, jt.hits[targetApplication], jt.misses[targetApplication],
		targetRecycle, jt.hits[targetRecycle], jt.misses[targetRecycle])
}

// retentionTally adds up what the kills did to retention passes.
type retentionTally struct {
	hits, misses   map[string]int // aimed kills: the step reached, or not within 3 s
	insidePass     int            // kills that left a pass unfinished (aimed or not)
	unfinishedSeen int            // recorded removals a kill left unfinished
	finished       int            // of those, finished by the next child's first pass
	newOrphans     int            // archives a kill left that no record names
}

// add checks and counts one kill's effect on retention: a kill at the
// "applied" step leaves the scope's removal recorded and not carried out
// (verify warned: Check requires it), one at "archived" an archive no
// record names, one at "removing" the scope's base moved; every removal a
// kill left unfinished is finished once the next child is ready (its first
// pass runs before it says so).
func (rt *retentionTally) add(t *testing.T, cycle int, early bool, stage, selfKilled string, prev, st crashtest.Stats) string {
	if rt.hits == nil {
		rt.hits, rt.misses = map[string]int{}, map[string]int{}
	}
	if stage != "" && selfKilled == "" {
		rt.misses[stage]++
	}
	orphans := st.OrphanArchives - prev.OrphanArchives
	if orphans > 0 {
		rt.newOrphans += orphans
	}
	// A kill inside a pass: one that left a removal recorded and not
	// carried out, or an archive no record names.
	inside := orphans > 0
	for scope, through := range st.Unfinished {
		if prev.Unfinished[scope] != through {
			inside = true
			rt.unfinishedSeen++
		}
	}
	if selfKilled != "" {
		inside = true
		f := strings.Fields(selfKilled)
		step, scope := f[0], f[1]
		rt.hits[step]++
		switch step {
		case crashtest.StageApplied:
			require.Contains(t, st.Unfinished, scope, "cycle %d: killed after the removal was recorded, yet no unfinished removal of %q", cycle, scope)
		case crashtest.StageArchived:
			require.Positive(t, st.Orphans[scope], "cycle %d: killed after the archive was written, yet no new orphan archive of %q", cycle, scope)
		case crashtest.StageRemoving:
			require.Greater(t, st.Bases[scope], prev.Bases[scope], "cycle %d: killed between removal transactions, yet the base of %q did not move", cycle, scope)
			require.NotContains(t, st.Unfinished, scope, "cycle %d: the first removal transaction sets the base", cycle)
		}
	}
	if inside {
		rt.insidePass++
	}
	if !early {
		for scope, through := range prev.Unfinished {
			require.GreaterOrEqual(t, st.Bases[scope], through, "cycle %d: the removal of %q through %d the last kill interrupted was not finished by the next pass", cycle, scope, through)
			rt.finished++
		}
	}
	return fmt.Sprintf("retention: %d removals recorded (%d unfinished), %d records removed, %d archives (%d no record names), "+
		"%d acknowledged writes found in archives, %d resends refused as expired (%d of them had committed), GetFrame: %d frames removed, %d cut",
		st.Removals, len(st.Unfinished), st.RemovedRecords, st.Archives, st.OrphanArchives, st.AckedArchived, st.ExpiredResends, st.ExpiredCommitted,
		st.FramesRemoved, st.FramesCut)
}

func (rt retentionTally) String(last crashtest.Stats) string {
	var aimed []string
	for _, s := range crashtest.RetentionStages {
		aimed = append(aimed, fmt.Sprintf("%s %d (%d missed)", s, rt.hits[s], rt.misses[s]))
	}
	return fmt.Sprintf("after the last kill %d context compactions acknowledged, %d removals recorded, %d records removed from the store, %d archives verified (%d that no record names, %d half written), "+
		"%d acknowledged writes found in archives; %d kills landed inside a pass (aimed at a step: %s); "+
		"%d removals left recorded and unfinished, %d of them checked finished by the next child's first pass; %d orphan archives left by kills; "+
		"%d resends refused as older than the horizon (%d of them had committed before the kill; none applied twice)",
		last.Compactions, last.Removals, last.RemovedRecords, last.Archives, last.OrphanArchives, last.PartialArchives, last.AckedArchived,
		rt.insidePass, strings.Join(aimed, ", "), rt.unfinishedSeen, rt.finished, rt.newOrphans, last.ExpiredResends, last.ExpiredCommitted)
}

// ledgerTally adds up what the kills did to the spend ledger's
// settlements.
type ledgerTally struct {
	hits, misses         map[string]int // aimed kills: the stage reached, or not within 3 s
	undelivered, unacked int            // finished children the kills left undelivered, settled and unacknowledged
	pendingKills         int            // kills (aimed or not) that left at least one
	drained              int64          // deliveries the checker's servers made
	inFlight             int            // pops in flight at the kills
}

// add checks and counts one kill's effect on the ledger: a kill at
// "popped" leaves a finished child undelivered, one at "settled" a
// settlement unacknowledged (Check then proved each delivered exactly
// once).
func (lt *ledgerTally) add(t *testing.T, cycle int, stage, killed string, st crashtest.LedgerStats) string {
	if lt.hits == nil {
		lt.hits, lt.misses = map[string]int{}, map[string]int{}
	}
	if stage != "" && killed == "" {
		lt.misses[stage]++
	}
	if killed != "" {
		step := strings.Fields(killed)[0]
		lt.hits[step]++
		switch step {
		case crashtest.StageLedgerPopped:
			require.Positive(t, st.Undelivered, "cycle %d: killed after a child's pop committed, yet no settlement was undelivered", cycle)
		case crashtest.StageLedgerSettled:
			require.Positive(t, st.Unacked, "cycle %d: killed after the parent's settlement committed, yet none was unacknowledged", cycle)
		}
	}
	lt.undelivered += st.Undelivered
	lt.unacked += st.Unacked
	if st.Undelivered+st.Unacked > 0 {
		lt.pendingKills++
	}
	lt.drained += st.Drained
	lt.inFlight += st.InFlightPops
	return st.String()
}

func (lt ledgerTally) String(last crashtest.LedgerStats) string {
	var aimed []string
	for _, s := range crashtest.LedgerStages {
		aimed = append(aimed, fmt.Sprintf("%s %d (%d missed)", s, lt.hits[s], lt.misses[s]))
	}
	return fmt.Sprintf("%d kills left settlements pending: %d children finished and undelivered, %d settled in the parent and unacknowledged, "+
		"each delivered exactly once by the checker's server (%d deliveries; aimed at a stage: %s); %d pops in flight at the kills, each settled whole or not popped; "+
		"after the last kill: %d children settled exactly once (%d acknowledged pops checked), lost %d, doubled %d; "+
		"%d parent roots charged %d micros, the sum of their children's settlements; actual + outstanding within the max after each of %d parent events (peak %d of %d); "+
		"%d reservations (%d never bound), %d settlements repeated charging nothing",
		lt.pendingKills, lt.undelivered, lt.unacked, lt.drained, strings.Join(aimed, ", "), lt.inFlight,
		last.Settled, last.AckedPops, last.Lost, last.Doubled, last.ParentRoots, last.Charged, last.Events, last.Peak, crashtest.LedgerMax,
		last.Reservations, last.Unbound, last.Repeats)
}
