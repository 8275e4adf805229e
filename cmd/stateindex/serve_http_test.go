package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/internal/proctest"
)

// `serve --listen A --http B` (a child process: two remoting systems in
// one process race in gRPC's global logger) prints how to connect — a Go
// Client line and the inspector's URL — and serves the inspector; inspect
// reads it with --server; inspect on the file it holds names both instead
// of a bare lock error.
func TestServeInspectorAndInspectAgainstIt(t *testing.T) {
	dir := t.TempDir()
	populate(t, dir)
	st, err := openStore(dir, false, time.Second, true)
	require.NoError(t, err)
	last, err := st.LastSeq(context.Background())
	require.NoError(t, err)
	require.NoError(t, st.Close())

	_, file, _, _ := runtime.Caller(0)
	bin := proctest.Build(t, filepath.Join(filepath.Dir(file), "..", ".."), "./cmd/stateindex")
	ports := proctest.FreePorts(t, 2, false)
	addr, web := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	srv := proctest.Start(t, "stateindex serve", bin, []string{"serve", "--data", dir, "--listen", addr, "--http", web})
	line, _ := srv.WaitLine(0, regexp.MustCompile(`inspector: http://`), 60*time.Second)
	defer func() {
		srv.Interrupt()
		assert.NoError(t, srv.Wait(30*time.Second))
	}()
	url := "http://" + web + "/"
	assert.Contains(t, line, url)
	all := strings.Join(srv.Lines(), "\n")
	assert.Contains(t, all, `actors.NewClient(sys.Root, actors.RemotePID("`+addr+`")`, "a Go client line")
	assert.Contains(t, all, "stateindex inspect --server "+addr)

	threadsJSON(t, "--server", addr, "--min-position", strconv.FormatUint(last, 10)) // the registry has every frame

	res, err := http.Get(url + "scope?s=agent-7")
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.Equal(t, 200, res.StatusCode)
	assert.Contains(t, string(body), "book flights")
	res, err = http.Post(url, "text/plain", strings.NewReader("x"))
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, 405, res.StatusCode, "read-only")

	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"inspect", "--server", addr}, &out, &errb), errb.String())
	s := out.String()
	assert.Contains(t, s, "scope agent-7")
	assert.Contains(t, s, "frames 2 (2 live)")
	assert.Regexp(t, `└─ \w+ waiting +depth 0  tokens 0/8000 .*"plan the trip"`, s)
	assert.Regexp(t, `└─ \w+ suspended depth 1  tokens 300/2000 .*\(approval\)  1 tool call\(s\) in doubt  "book flights"`, s)
	out.Reset()
	assert.Equal(t, 1, run([]string{"inspect", "--server", addr, "--scope", "nope"}, &out, &errb))
	assert.Contains(t, errb.String(), "no such scope")

	errb.Reset()
	assert.Equal(t, 1, run([]string{"inspect", "--data", dir}, &out, &errb))
	assert.Contains(t, errb.String(), "held by another process")
	assert.Contains(t, errb.String(), "stateindex inspect --server "+addr)
	assert.Contains(t, errb.String(), url)
	errb.Reset()
	assert.Equal(t, 1, run([]string{"ledger", "--data", dir, "--scope", "agent-7"}, &out, &errb))
	assert.Contains(t, errb.String(), "stateindex ledger --server "+addr)
}

// Off loopback the inspector needs a secret: serve refuses to start
// without one, before it opens anything.
func TestServeRefusesAnOpenInspectorWithoutASecret(t *testing.T) {
	var out, errb bytes.Buffer
	dir := t.TempDir()
	assert.Equal(t, 1, run([]string{"serve", "--data", dir, "--http", "0.0.0.0:7421"}, &out, &errb))
	assert.Contains(t, errb.String(), "not a loopback address")
	assert.NoFileExists(t, filepath.Join(dir, dbFile))

	short := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(short, []byte("short\n"), 0o600))
	errb.Reset()
	assert.Equal(t, 1, run([]string{"serve", "--data", dir, "--http", "0.0.0.0:7421", "--http-secret-file", short}, &out, &errb))
	assert.Contains(t, errb.String(), "holds 5 bytes of secret, want at least 16")
	good := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(good, []byte("0123456789abcdef0123\n"), 0o600))
	errb.Reset()
	assert.Equal(t, 1, run([]string{"serve", "--data", dir, "--http-secret-file", good}, &out, &errb))
	assert.Contains(t, errb.String(), "needs http.listen")
	assert.NoFileExists(t, filepath.Join(dir, dbFile))
}
