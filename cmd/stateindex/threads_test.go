package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/internal/proctest"
	"github.com/stateindex/stateindex/messages"
)

func threadsJSON(t *testing.T, args ...string) *messages.ListFramesReply {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"threads", "--json"}, args...), &out, &errb)
	require.Equal(t, 0, code, errb.String())
	var r messages.ListFramesReply
	require.NoError(t, json.Unmarshal(out.Bytes(), &r))
	return &r
}

// On a data file: the registry is brought up to date and queried; filters
// and pages work; bad flags are refused; a file a server holds is refused.
func TestThreadsOnAFile(t *testing.T) {
	dir := t.TempDir()
	populate(t, dir)
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"threads", "--data", dir}, &out, &errb), errb.String())
	s := out.String()
	assert.Contains(t, s, `"plan the trip"`)
	assert.Contains(t, s, `"book flights"`)
	assert.Regexp(t, `suspended +agent-7 +\w+ +\w+ +- +- +"book flights"`, s, "a live frame's tokens are recorded when it ends")
	assert.Contains(t, s, "2 frame(s), registry position")

	all := threadsJSON(t, "--data", dir)
	require.Len(t, all.Frames, 2)
	assert.Equal(t, "book flights", all.Frames[0].Goal, "newest first")
	assert.Positive(t, all.Position)

	susp := threadsJSON(t, "--data", dir, "--status", "suspended,failed")
	require.Len(t, susp.Frames, 1)
	assert.Equal(t, "approval", susp.Frames[0].SuspendReason)
	assert.Len(t, threadsJSON(t, "--data", dir, "--goal", "plan").Frames, 1)
	assert.Len(t, threadsJSON(t, "--data", dir, "--scope", "agent-").Frames, 2)
	assert.Len(t, threadsJSON(t, "--data", dir, "--scope", "other").Frames, 0)
	assert.Len(t, threadsJSON(t, "--data", dir, "--in-scope", "agent-7", "--parent", all.Frames[1].FrameID).Frames, 1)
	assert.Len(t, threadsJSON(t, "--data", dir, "--since", "1h").Frames, 2, "created within the hour")
	assert.Len(t, threadsJSON(t, "--data", dir, "--until", "1h").Frames, 0)

	p1 := threadsJSON(t, "--data", dir, "--limit", "1")
	require.Len(t, p1.Frames, 1)
	require.NotEmpty(t, p1.NextCursor)
	p2 := threadsJSON(t, "--data", dir, "--limit", "1", "--cursor", p1.NextCursor)
	require.Len(t, p2.Frames, 1)
	assert.Equal(t, all.Frames[1].FrameID, p2.Frames[0].FrameID)
	assert.Empty(t, p2.NextCursor)

	for _, bad := range [][]string{
		{"--data", dir, "--status", "done"},
		{"--data", dir, "--since", "yesterday"},
		{"--data", dir, "--cursor", "garbage"},
	} {
		out.Reset()
		errb.Reset()
		assert.Equal(t, 1, run(append([]string{"threads"}, bad...), &out, &errb), "%v", bad)
		assert.NotEmpty(t, errb.String())
	}
	assert.Equal(t, 2, run([]string{"threads"}, &out, &errb), "--data or --server is needed")
	assert.Equal(t, 2, run([]string{"threads", "--data", dir, "--server", "127.0.0.1:1"}, &out, &errb), "not both")

	held, err := eventstore.Open(filepath.Join(dir, dbFile), nil)
	require.NoError(t, err)
	defer held.Close()
	errb.Reset()
	assert.Equal(t, 1, run([]string{"threads", "--data", dir}, &out, &errb))
	assert.Contains(t, errb.String(), "held by another process")
}

// Against a running server (`stateindex serve --listen`, a child process:
// two remoting systems in one process race in gRPC's global logger), over
// remoting: the same listing, once the server's registry reached the
// file's last position.
func TestThreadsAgainstAServer(t *testing.T) {
	dir := t.TempDir()
	populate(t, dir)
	st, err := openStore(dir, false, time.Second, true)
	require.NoError(t, err)
	last, err := st.LastSeq(context.Background())
	require.NoError(t, err)
	require.NoError(t, st.Close())

	_, file, _, _ := runtime.Caller(0)
	bin := proctest.Build(t, filepath.Join(filepath.Dir(file), "..", ".."), "./cmd/stateindex")
	addr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePorts(t, 1, false)[0])
	srv := proctest.Start(t, "stateindex serve", bin, []string{"serve", "--data", dir, "--listen", addr})
	srv.WaitLine(0, regexp.MustCompile(`stateindex serving`), 60*time.Second)
	defer func() {
		srv.Interrupt()
		assert.NoError(t, srv.Wait(30*time.Second))
	}()

	at := strconv.FormatUint(last, 10)
	r := threadsJSON(t, "--server", addr, "--min-position", at)
	require.Len(t, r.Frames, 2)
	assert.Equal(t, "book flights", r.Frames[0].Goal)
	assert.GreaterOrEqual(t, r.Position, last)
	assert.Len(t, threadsJSON(t, "--server", addr, "--status", "waiting", "--min-position", at).Frames, 1)

	var out, errb bytes.Buffer
	assert.Equal(t, 1, run([]string{"threads", "--server", addr, "--status", "nope"}, &out, &errb))
	assert.Contains(t, errb.String(), "unknown status")
	errb.Reset()
	assert.Equal(t, 1, run([]string{"threads", "--server", addr, "--min-position", "999999", "--timeout", "1s"}, &out, &errb))
	assert.Contains(t, errb.String(), "registry index is at position")
}
