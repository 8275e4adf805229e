package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
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
	"github.com/stateindex/stateindex/eventstore"
)

// startServe runs `stateindex serve` in-process and returns its
// "stateindex serving" log line and a function that stops it (SIGINT) and
// returns the rest of its log.
func startServe(t *testing.T, args ...string) (serving string, stop func() string) {
	t.Helper()
	logs := &lineWriter{lines: make(chan string, 1000)}
	done := make(chan int, 1)
	go func() { done <- run(append([]string{"serve"}, args...), io.Discard, logs) }()
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
	return serving, func() string {
		require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGINT))
		require.Equal(t, 0, <-done)
		var rest []string
		for len(logs.lines) > 0 {
			rest = append(rest, <-logs.lines)
		}
		return strings.Join(rest, "")
	}
}

// restore puts a backup in a new data directory as its data file.
func restore(t *testing.T, backup string) string {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile(backup)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, dbFile), b, 0o600))
	return dir
}

// A backup asked of a running `serve` (it holds the file's lock) is made by
// the server over its admin socket; a server started on the copy serves
// the same frame tree.
func TestBackupOfARunningServer(t *testing.T) {
	dir := t.TempDir()
	populate(t, dir)
	serving, stop := startServe(t, "--data", dir)
	sock := filepath.Join(dir, adminSocket)
	assert.Contains(t, serving, "admin="+sock)
	assert.Contains(t, serving, "journal="+eventstore.JournalDir(filepath.Join(dir, dbFile)))
	assert.Contains(t, serving, "journal_max_bytes=67108864")
	fi, err := os.Stat(sock)
	require.NoError(t, err)
	assert.Equal(t, os.ModeSocket|0o600, fi.Mode()&(os.ModeSocket|os.ModePerm), "only the owner may ask")

	to := filepath.Join(t.TempDir(), "copy.db")
	var out, errb bytes.Buffer
	code := run([]string{"backup", "--data", dir, "--to", to}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	assert.Contains(t, out.String(), "online backup by the running server: "+to)
	assert.Regexp(t, `5 records \(sequences 1\.\.5, \d+ of them from the journal\), \d+ bytes`, out.String())

	out.Reset()
	errb.Reset()
	assert.Equal(t, 1, run([]string{"backup", "--data", dir, "--to", to}, &out, &errb), "an existing target is refused")
	assert.Contains(t, errb.String(), "file already exists (refusing to overwrite)")

	rest := stop()
	assert.Contains(t, rest, "backup written")
	assert.NoFileExists(t, sock, "a clean stop removes the socket")

	// Restore: a server on a directory holding the copy.
	restored := restore(t, to)
	_, stop = startServe(t, "--data", restored)
	stop()
	out.Reset()
	require.Equal(t, 0, run([]string{"inspect", "--data", restored}, &out, &errb), errb.String())
	assert.Contains(t, out.String(), "scope agent-7  version 5  frames 2 (2 live)")
	assert.Regexp(t, `suspended depth 1  tokens 300/2000 .*"book flights"`, out.String())
}

// Writes that reach the server while it runs — some still only in the
// journal — are in an online backup, which verifies.
func TestBackupOnlineIncludesTheJournal(t *testing.T) {
	dir := t.TempDir()
	// The applier waits an hour: every write stays in the journal only.
	st, err := eventstore.Open(filepath.Join(dir, dbFile), &eventstore.Options{ApplyInterval: time.Hour, ApplyBytes: 1 << 30})
	require.NoError(t, err)
	defer st.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	defer sys.Shutdown()
	cfg := actors.DefaultConfig()
	cfg.TokenKey, cfg.Logger = bytes.Repeat([]byte{7}, 32), quiet
	srv, err := actors.Start(sys, st, cfg)
	require.NoError(t, err)
	defer srv.Stop()
	admin, err := startAdmin(dir, st, quiet)
	require.NoError(t, err)
	defer admin.stop()
	populateWith(t, srv.Client(), context.Background())
	require.Equal(t, 5, st.JournalStats().Pending)

	to := filepath.Join(t.TempDir(), "copy.db")
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"backup", "--data", dir, "--to", to}, &out, &errb), errb.String())
	assert.Contains(t, out.String(), "online backup")
	assert.Contains(t, out.String(), "5 records (sequences 1..5, 5 of them from the journal)")

	restored := restore(t, to)
	out.Reset()
	require.Equal(t, 0, run([]string{"verify", "--data", restored}, &out, &errb), out.String()+errb.String())
	assert.Contains(t, out.String(), "1 streams, 5 records")
	out.Reset()
	require.Equal(t, 0, run([]string{"inspect", "--data", restored}, &out, &errb), errb.String())
	assert.Contains(t, out.String(), "scope agent-7  version 5  frames 2 (2 live)")
}

// With no server on the directory, backup opens the store itself and says so.
func TestBackupOffline(t *testing.T) {
	dir := t.TempDir()
	populate(t, dir)
	to := filepath.Join(t.TempDir(), "copy.db")
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"backup", "--data", dir, "--to", to}, &out, &errb), errb.String())
	assert.Contains(t, out.String(), "offline backup (no server running on "+dir+"): "+to)
	assert.Contains(t, out.String(), "5 records (sequences 1..5, 0 of them from the journal)")
	out.Reset()
	require.Equal(t, 0, run([]string{"inspect", "--data", restore(t, to)}, &out, &errb), errb.String())
	assert.Contains(t, out.String(), "scope agent-7  version 5  frames 2 (2 live)")

	for name, args := range map[string][]string{
		"no --to":      {"backup", "--data", dir},
		"no data file": {"backup", "--data", t.TempDir(), "--to", filepath.Join(t.TempDir(), "x.db")},
	} {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			assert.NotEqual(t, 0, run(args, &out, &errb))
			if name == "no data file" {
				assert.Contains(t, errb.String(), "no data file")
			}
		})
	}
}

// A socket left by a crashed server is replaced; a request the server does
// not know gets an error reply.
func TestAdminSocketStaleAndUnknownOp(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, adminSocket)
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	require.NoError(t, ln.Close()) // a dead server's socket file stays
	require.FileExists(t, sock)
	_, err = adminCall(context.Background(), dir, adminRequest{Op: "backup", To: "/x"})
	require.ErrorIs(t, err, errNoServer, "connection refused: no server")

	st, err := eventstore.Open(filepath.Join(dir, dbFile), &eventstore.Options{NoSync: true})
	require.NoError(t, err)
	defer st.Close()
	admin, err := startAdmin(dir, st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	for _, tc := range []struct {
		req  adminRequest
		want string
	}{
		{adminRequest{Op: "frobnicate"}, `unknown op "frobnicate"`},
		{adminRequest{Op: "backup", To: "relative.db"}, "must be an absolute path"},
		{adminRequest{Op: "backup", To: filepath.Join(dir, dbFile)}, "file already exists"},
	} {
		rep, err := adminCall(context.Background(), dir, tc.req)
		require.NoError(t, err)
		assert.False(t, rep.OK)
		assert.Contains(t, rep.Error, tc.want)
	}
	// Raw protocol: one JSON line in, one out.
	c, err := net.Dial("unix", sock)
	require.NoError(t, err)
	_, err = c.Write([]byte("not json\n"))
	require.NoError(t, err)
	var rep adminReply
	require.NoError(t, json.NewDecoder(c).Decode(&rep))
	assert.Contains(t, rep.Error, "bad request")
	c.Close()
	admin.stop()
	assert.NoFileExists(t, sock)
	_, err = adminCall(context.Background(), dir, adminRequest{Op: "backup"})
	require.ErrorIs(t, err, errNoServer)
}

// serve --journal off opens the store without a journal (the path before
// the journal existed); a value other than on or off is refused.
func TestServeJournalFlag(t *testing.T) {
	dir := t.TempDir()
	serving, stop := startServe(t, "--data", dir, "--journal", "off")
	assert.Contains(t, serving, "journal=off")
	assert.NotContains(t, serving, "journal_max_bytes")
	stop()
	assert.NoDirExists(t, eventstore.JournalDir(filepath.Join(dir, dbFile)))

	var out, errb bytes.Buffer
	assert.Equal(t, 1, run([]string{"serve", "--data", t.TempDir(), "--journal", "maybe"}, &out, &errb))
	assert.Contains(t, errb.String(), `--journal must be on or off, got "maybe"`)
}
