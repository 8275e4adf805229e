package crashtest_test

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
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
	start := time.Now()
	for cycle := 1; cycle <= *cycles; cycle++ {
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
		// child is ready), mostly somewhere in the storm.
		var kill <-chan time.Time
		early := rng.IntN(5) == 0
		if early {
			kill = time.After(time.Duration(rng.IntN(400)) * time.Millisecond)
		}
		readyTimeout := time.After(2 * time.Minute)
	wait:
		for {
			select {
			case l := <-lines:
				if !early && bytes.HasPrefix([]byte(l), []byte("ready")) {
					kill = time.After(time.Duration(20+rng.IntN(400)) * time.Millisecond)
				}
			case <-kill:
				break wait
			case err := <-exited:
				t.Fatalf("cycle %d: the child exited on its own (%v) before it was killed:\n%s", cycle, err, stderr.String())
			case <-readyTimeout:
				_ = cmd.Process.Kill()
				t.Fatalf("cycle %d: the child did not get ready in time:\n%s", cycle, stderr.String())
			}
		}
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		err = <-exited
		ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("cycle %d: the child ended with %v, not by SIGKILL:\n%s", cycle, err, stderr.String())
		}
		if early {
			killedBeforeReady++
		}

		st, err := crashtest.Check(t.Context(), dir, cycle)
		require.NoError(t, err, "cycle %d (seed %d); child stderr:\n%s", cycle, seed, stderr.String())
		require.Zero(t, st.Lost, "cycle %d: acknowledged writes lost", cycle)
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
	require.Positive(t, last.Acked)
}
