package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// withServer runs fn against a StateIndex on dir's data file, then stops
// it and closes the file.
func withServer(t *testing.T, dir string, fn func(c *actors.Client, ctx context.Context)) {
	t.Helper()
	store, err := openStore(dir, true, time.Second, false)
	require.NoError(t, err)
	defer store.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	defer sys.Shutdown()
	cfg := actors.DefaultConfig()
	cfg.TokenKey, cfg.Logger = bytes.Repeat([]byte{7}, 32), quiet
	srv, err := actors.Start(sys, store, cfg)
	require.NoError(t, err)
	defer srv.Stop()
	fn(srv.Client(), context.Background())
}

// populate writes a small frame tree into dir's data file and closes it.
func populate(t *testing.T, dir string) {
	t.Helper()
	withServer(t, dir, func(c *actors.Client, ctx context.Context) { populateWith(t, c, ctx) })
}

func populateWith(t *testing.T, c *actors.Client, ctx context.Context) {
	m := messages.Header{Scope: "agent-7"}
	root, err := c.PushFrame(ctx, &messages.PushFrame{Header: m, Goal: "plan the trip", Budget: budget.TokenBudget{Total: 8000}})
	require.NoError(t, err)
	child, err := c.PushFrame(ctx, &messages.PushFrame{Header: m, ParentID: root.FrameID, Goal: "book flights", Budget: budget.TokenBudget{Total: 2000}})
	require.NoError(t, err)
	_, err = c.RecordUsage(ctx, &messages.RecordUsage{Header: m, FrameID: child.FrameID, Cost: budget.Cost{InputTokens: 300}})
	require.NoError(t, err)
	_, err = c.StartToolCall(ctx, &messages.StartToolCall{Header: m, FrameID: child.FrameID, Name: "book"})
	require.NoError(t, err)
	_, err = c.SuspendFrame(ctx, &messages.SuspendFrame{Header: m, FrameID: child.FrameID, Reason: frames.SuspendApproval})
	require.NoError(t, err)
}

func TestInspectShowsTree(t *testing.T) {
	dir := t.TempDir()
	populate(t, dir)
	var out, errb bytes.Buffer
	code := run([]string{"inspect", "--data", dir}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	s := out.String()
	assert.Contains(t, s, "scope agent-7")
	assert.Contains(t, s, "frames 2 (2 live)")
	assert.Regexp(t, `└─ \w+ waiting +depth 0  tokens 0/8000 .*"plan the trip"`, s)
	assert.Regexp(t, `└─ \w+ suspended depth 1  tokens 300/2000 .*\(approval\)  1 tool call\(s\) in doubt  "book flights"`, s)

	out.Reset()
	require.Equal(t, 0, run([]string{"inspect", "--data", dir, "--scope", "agent-7"}, &out, &errb))
	assert.Contains(t, out.String(), "agent-7")
	assert.Equal(t, 1, run([]string{"inspect", "--data", dir, "--scope", "nope"}, &out, &errb))
}

func TestInspectFailsFastOnAHeldFile(t *testing.T) {
	dir := t.TempDir()
	populate(t, dir)
	held, err := eventstore.Open(filepath.Join(dir, dbFile), nil)
	require.NoError(t, err)
	defer held.Close()
	var out, errb bytes.Buffer
	start := time.Now()
	code := run([]string{"inspect", "--data", dir}, &out, &errb)
	assert.Equal(t, 1, code)
	assert.Less(t, time.Since(start), 5*time.Second, "fails within the lock timeout, not forever")
	assert.Contains(t, errb.String(), "held by another process")
}

func TestInspectMissingDataDoesNotCreateIt(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	assert.Equal(t, 1, run([]string{"inspect", "--data", dir}, &out, &errb))
	assert.Contains(t, errb.String(), "no data file")
	assert.NoFileExists(t, filepath.Join(dir, dbFile))
}

func TestUsage(t *testing.T) {
	var out, errb bytes.Buffer
	assert.Equal(t, 2, run(nil, &out, &errb))
	assert.Equal(t, 2, run([]string{"frobnicate"}, &out, &errb))
	assert.Equal(t, 0, run([]string{"help"}, &out, &errb))
	assert.True(t, strings.Contains(out.String(), "serve") && strings.Contains(out.String(), "inspect"))
}

func TestServerKeyIsStable(t *testing.T) {
	dir := t.TempDir()
	k1, err := loadKey(dir)
	require.NoError(t, err)
	k2, err := loadKey(dir)
	require.NoError(t, err)
	assert.Equal(t, k1, k2)
	assert.Len(t, k1, keySize)
}

// lineWriter hands each complete line written to it to a channel.
type lineWriter struct {
	buf   bytes.Buffer
	lines chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.WriteString(line)
			return len(p), nil
		}
		w.lines <- line
	}
}

func TestServeStartsAndStopsCleanly(t *testing.T) {
	dir := t.TempDir()
	logs := &lineWriter{lines: make(chan string, 100)}
	done := make(chan int, 1)
	go func() { done <- run([]string{"serve", "--data", dir}, io.Discard, logs) }()
	var serving string
	for serving == "" {
		select {
		case l := <-logs.lines:
			if strings.Contains(l, "stateindex serving") {
				serving = l
			}
		case code := <-done:
			t.Fatalf("serve exited early with %d", code)
		}
	}
	assert.Contains(t, serving, filepath.Join(dir, dbFile))
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGINT))
	assert.Equal(t, 0, <-done)
	var rest []string
	for len(logs.lines) > 0 {
		rest = append(rest, <-logs.lines)
	}
	assert.Contains(t, strings.Join(rest, ""), "stopped cleanly")
	st, err := eventstore.Open(filepath.Join(dir, dbFile), &eventstore.Options{OpenTimeout: time.Second})
	require.NoError(t, err, "the file was released")
	require.NoError(t, st.Close())
}
