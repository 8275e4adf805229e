// Package killtest_test kills a process that wrote through the StateIndex
// and checks what a new process on the same file answers.
package killtest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// killChildEnv makes the test binary act as the child of TestKilledAfterAck.
const killChildEnv = "STATEINDEX_KILL_CHILD_DB"

// TestMain lets this test binary double as a child process that writes
// through the StateIndex, prints the acknowledged replies, and waits to be
// killed.
func TestMain(m *testing.M) {
	if path := os.Getenv(killChildEnv); path != "" {
		killChild(path)
		return
	}
	os.Exit(m.Run())
}

func killChild(path string) {
	store, err := eventstore.Open(path, nil)
	if err != nil {
		panic(err)
	}
	sys := quietSystem()
	srv, err := actors.Start(sys, store, testConfig())
	if err != nil {
		panic(err)
	}
	c := srv.Client()
	out := json.NewEncoder(os.Stdout)
	push, err := c.PushFrame(ctx, killPush())
	if err != nil {
		panic(err)
	}
	tok, err := c.SuspendFrame(ctx, &messages.SuspendFrame{Header: messages.Header{Scope: "killed", RequestID: "suspend-1"},
		FrameID: push.FrameID, Reason: frames.SuspendApproval})
	if err != nil {
		panic(err)
	}
	_ = out.Encode(push)
	_ = out.Encode(tok)
	select {} // acknowledged; now wait for SIGKILL
}

func killPush() *messages.PushFrame {
	return &messages.PushFrame{Header: messages.Header{Scope: "killed", RequestID: "push-1"}, Goal: "survive a kill",
		Budget: budget.TokenBudget{Total: 1000}}
}

// A request acknowledged, the process SIGKILLed, a new process on the same
// file: the same request with its id gets the same reply and writes nothing;
// the token signed before the kill still resumes the frame.
func TestKilledAfterAck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "killed.db")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), killChildEnv+"="+path)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	dec := json.NewDecoder(bufio.NewReader(stdout))
	var push messages.PushFrameReply
	var tok messages.SuspensionToken
	require.NoError(t, dec.Decode(&push))
	require.NoError(t, dec.Decode(&tok))
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()

	store, err := eventstore.Open(path, nil)
	require.NoError(t, err)
	defer store.Close()
	before, err := store.Stream(ctx, "killed")
	require.NoError(t, err)
	sys := quietSystem()
	defer sys.Shutdown()
	srv, err := actors.Start(sys, store, testConfig())
	require.NoError(t, err)
	defer srv.Stop()
	c := srv.Client()

	again, err := c.PushFrame(ctx, killPush())
	require.NoError(t, err)
	assert.Equal(t, push, *again, "the original reply")
	after, err := store.Stream(ctx, "killed")
	require.NoError(t, err)
	assert.Equal(t, before.Version, after.Version, "nothing appended")

	_, err = c.ResumeFrame(ctx, &messages.ResumeFrame{Header: messages.Header{Scope: "killed"}, Token: tok.Token})
	require.NoError(t, err, "a token issued before the kill resumes after it")
	_, err = c.ResumeFrame(ctx, &messages.ResumeFrame{Header: messages.Header{Scope: "killed"}, Token: tok.Token})
	assert.ErrorIs(t, err, actors.ErrTokenUsed, "and only once")
}

var ctx = context.Background()

func quietSystem() *actor.ActorSystem {
	return actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}))
}

func testConfig() actors.Config {
	cfg := actors.DefaultConfig()
	cfg.TokenKey = []byte("0123456789abcdef0123456789abcdef")
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return cfg
}
