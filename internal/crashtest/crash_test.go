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

// TestCrash: SIGKILL a child in the middle of a write storm again and
// again; after every kill, every acknowledged write is in the log, nothing
// partial or unsent is, every chain, snapshot and signature verifies, and
// recovery equals a full replay.
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
	lost, inFlightCommitted, inFlightAbsent := 0, 0, 0
	killedBeforeReady := 0
	var jt journalTally
	var base []crashtest.Segment // the journal's segments when the child starts
	start := time.Now()
	for cycle := 1; cycle <= *cycles; cycle++ {
		if err := os.Remove(filepath.Join(dir, crashtest.ProbeFile)); err != nil && !os.IsNotExist(err) {
			require.NoError(t, err)
		}
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(),
			crashtest.EnvDir+"="+dir,
			crashtest.EnvIncarnation+"="+strconv.Itoa(cycle),
			crashtest.EnvSeed+"="+strconv.FormatUint(seed, 10))
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

		// Kill at a random moment: now and then during recovery (before the
		// child is ready), mostly somewhere in the storm; in half the storm
		// cycles, at the moment the child's probe shows a journal frame
		// written, an application to bbolt or a segment recycled (a new
		// generation on disk), a random while into the storm.
		var kill <-chan time.Time
		var hit <-chan bool
		stopWatch := make(chan struct{})
		early := rng.IntN(5) == 0
		target, aimed := noTarget, ""
		if !early && rng.IntN(2) == 0 {
			target = killTarget(1 + rng.IntN(3))
		}
		if early {
			kill = time.After(time.Duration(rng.IntN(400)) * time.Millisecond)
		}
		readyTimeout := time.After(2 * time.Minute)
	wait:
		for {
			select {
			case l := <-lines:
				if !early && bytes.HasPrefix([]byte(l), []byte("ready")) {
					d := time.Duration(20+rng.IntN(400)) * time.Millisecond
					if target == noTarget {
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
				t.Fatalf("cycle %d: the child exited on its own (%v) before it was killed:\n%s", cycle, err, stderr.String())
			case <-readyTimeout:
				_ = cmd.Process.Kill()
				t.Fatalf("cycle %d: the child did not get ready in time:\n%s", cycle, stderr.String())
			}
		}
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
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
		t.Logf("cycle %d%s: %s", cycle, aimed, jt.add(probe, probed, base, segs, st))
		base, err = crashtest.Segments(dir)
		require.NoError(t, err)
		lost += st.Lost
		inFlightCommitted += st.InFlightCommitted
		inFlightAbsent += st.InFlightAbsent
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
	require.Positive(t, last.Acked)
	// The kills landed in a journal that was busy with all three.
	require.Positive(t, jt.frames, "no journal frame was written before a kill")
	require.Positive(t, jt.applications, "no background application ran before a kill")
	require.Positive(t, jt.recycles, "no segment was recycled before a kill")
	if *cycles >= 50 {
		require.Positive(t, jt.replayedKills, "no kill left acknowledged records in the journal for the reopen to replay")
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
