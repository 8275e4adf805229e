// Package proctest runs programs under test as child processes: it builds
// them, starts them with their output captured line by line, waits for a
// line (with a deadline, never a sleep), and stops or SIGKILLs them. It
// also finds free ports on 127.0.0.1.
//
// It is test support, like eventstore/storetest: only tests import it.
package proctest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Build compiles the main package pkg (an import path or a ./relative
// path, resolved from dir) into a temporary directory and returns the
// binary's path; with PROCTEST_RACE set, with the race detector.
func Build(t testing.TB, dir, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	args := []string{"build", "-o", out}
	if os.Getenv("PROCTEST_RACE") != "" {
		args = append(args, "-race") // children report data races on their output
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// FreePorts returns n distinct TCP ports that were free on 127.0.0.1 a
// moment ago. With pairs, each port p also had p+1 free (for a member and
// its health endpoint).
func FreePorts(t testing.TB, n int, pairs bool) []int {
	t.Helper()
	var ports []int
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for tries := 0; len(ports) < n && tries < 1000; tries++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("no free port: %v", err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		if !pairs {
			held, ports = append(held, l), append(ports, p)
			continue
		}
		l2, err := net.Listen("tcp", fmt.Sprintf(":%d", p+1))
		if err != nil {
			l.Close()
			continue
		}
		held, ports = append(held, l, l2), append(ports, p)
	}
	if len(ports) < n {
		t.Fatalf("found only %d free ports", len(ports))
	}
	return ports
}

// Proc is a running child process.
type Proc struct {
	Name string
	cmd  *exec.Cmd
	t    testing.TB

	mu      sync.Mutex
	lines   []string
	changed chan struct{} // closed and replaced when a line arrives or the process exits
	exited  bool
	waitErr error
	stdin   io.WriteCloser
	readers sync.WaitGroup
}

// Start runs bin with args and extra environment; stdout and stderr are
// captured (and written to the test log when it fails). The process is
// SIGKILLed at the end of the test if it still runs.
func Start(t testing.TB, name, bin string, args []string, env ...string) *Proc {
	t.Helper()
	p := &Proc{Name: name, t: t, changed: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	p.readers.Add(2)
	go p.read(stdout)
	go p.read(stderr)
	go func() {
		p.readers.Wait()
		err := p.cmd.Wait()
		p.mu.Lock()
		p.exited, p.waitErr = true, err
		close(p.changed)
		p.changed = make(chan struct{})
		p.mu.Unlock()
	}()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("--- output of %s ---\n%s", name, p.Output())
		}
	})
	return p
}

func (p *Proc) read(r io.Reader) {
	defer p.readers.Done()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		p.mu.Lock()
		p.lines = append(p.lines, sc.Text())
		close(p.changed)
		p.changed = make(chan struct{})
		p.mu.Unlock()
	}
}

// Output returns everything the process printed so far.
func (p *Proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// Lines returns the lines printed so far.
func (p *Proc) Lines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// WaitLine waits until the process prints a line matching re (searching
// from line index from), and returns the line and its index. It fails the
// test at the deadline or when the process exits first.
func (p *Proc) WaitLine(from int, re *regexp.Regexp, timeout time.Duration) (string, int) {
	p.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for i := from; ; {
		p.mu.Lock()
		for ; i < len(p.lines); i++ {
			if re.MatchString(p.lines[i]) {
				line := p.lines[i]
				p.mu.Unlock()
				return line, i
			}
		}
		exited, changed := p.exited, p.changed
		p.mu.Unlock()
		if exited {
			p.t.Fatalf("%s exited (%v) before printing a line matching %q", p.Name, p.waitErr, re)
		}
		select {
		case <-changed:
		case <-deadline.C:
			p.t.Fatalf("%s printed no line matching %q within %s", p.Name, re, timeout)
		}
	}
}

// WriteLine writes one line to the process's standard input.
func (p *Proc) WriteLine(s string) {
	p.t.Helper()
	if _, err := io.WriteString(p.stdin, s+"\n"); err != nil {
		p.t.Fatalf("writing to %s: %v", p.Name, err)
	}
}

// CloseStdin closes the process's standard input.
func (p *Proc) CloseStdin() { _ = p.stdin.Close() }

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Kill SIGKILLs the process and waits until it is gone.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	p.wait(time.Minute)
}

// Interrupt sends SIGINT and returns at once (see Wait).
func (p *Proc) Interrupt() { _ = p.cmd.Process.Signal(syscall.SIGINT) }

// Stop sends SIGINT and waits up to timeout for the process to exit on its
// own; it returns the exit error (nil for status 0) and SIGKILLs it if it
// did not exit in time.
func (p *Proc) Stop(timeout time.Duration) error {
	p.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	if !p.wait(timeout) {
		p.Kill()
		return fmt.Errorf("%s did not exit within %s of SIGINT", p.Name, timeout)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

// Wait waits up to timeout for the process to exit on its own and returns
// its exit error (nil for status 0); it SIGKILLs it if it does not.
func (p *Proc) Wait(timeout time.Duration) error {
	p.t.Helper()
	if !p.wait(timeout) {
		p.Kill()
		return fmt.Errorf("%s did not exit within %s", p.Name, timeout)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

// Exited reports whether the process has exited, and its exit error.
func (p *Proc) Exited() (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited, p.waitErr
}

func (p *Proc) wait(timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		exited, changed := p.exited, p.changed
		p.mu.Unlock()
		if exited {
			return true
		}
		select {
		case <-changed:
		case <-deadline.C:
			return false
		}
	}
}

// WaitFor waits until cond, called with every line printed so far each time
// a line arrives, returns true. It fails the test at the deadline (naming
// what) or when the process exits first.
func (p *Proc) WaitFor(what string, timeout time.Duration, cond func(lines []string) bool) {
	p.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		ok := cond(p.lines)
		exited, changed := p.exited, p.changed
		p.mu.Unlock()
		if ok {
			return
		}
		if exited {
			p.t.Fatalf("%s exited (%v) before %s", p.Name, p.waitErr, what)
		}
		select {
		case <-changed:
		case <-deadline.C:
			p.t.Fatalf("%s: no %s within %s", p.Name, what, timeout)
		}
	}
}
