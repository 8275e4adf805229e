package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/messages"
)

func runState(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"state"}, args...), &out, &errb)
	return out.String(), errb.String(), code
}

// `stateindex state` on a data file: the level's size, then each key with
// its version, expiry, size and value; a prefix, a frame's level, JSON.
func TestStateCommand(t *testing.T) {
	dir := t.TempDir()
	var frame string
	var version int64
	withLedgerServer(t, dir, false, func(_ *actors.Server, c *actors.Client, ctx context.Context) {
		h := c.State("agent")
		require.NoError(t, actors.SetJSON(h, "plan", []string{"research", "write"}))
		for _, m := range []string{"one", "two", "three"} {
			require.NoError(t, actors.PushJSON(h, "log", m, 2))
		}
		h.Set("bin", []byte{0xff, 0x00, 0x01})
		h.Set("tmp", []byte("soon"), actors.WithSlidingTTL(240*time.Hour))
		h.Set("long", []byte(strings.Repeat("x", 100)))
		require.NoError(t, h.Flush(ctx))
		version = h.Version()
		f0, err := c.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: "agent"}, Goal: "draft", Budget: budget.TokenBudget{Total: 1000}})
		require.NoError(t, err)
		frame = f0.FrameID
		f := c.FrameState("agent", frame)
		f.Set("draft", []byte("first lines"))
		require.NoError(t, f.Flush(ctx))
	})

	out, errs, code := runState(t, "--data", dir, "--scope", "agent")
	require.Equal(t, 0, code, errs)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 8, out)
	assert.Equal(t, "state of scope agent (the scope's own)  version 3", lines[0], "the scope's: the frame's push and flush came after")
	assert.Regexp(t, `^level: 5 keys, \d+ bytes; scope: \d+ of 1048576 bytes$`, lines[1])
	assert.Regexp(t, `^KEY +VERSION +EXPIRES +SIZE +VALUE$`, lines[2])
	assert.Regexp(t, `^bin +1 +- +3 +\(3 bytes, not UTF-8\)$`, lines[3])
	assert.Regexp(t, `^log +1 +- +2 items, 12 +\["two", "three"\]$`, lines[4])
	assert.Regexp(t, `^long +1 +- +100 +x{59}…$`, lines[5])
	assert.Regexp(t, `^plan +1 +- +20 +\["research","write"\]$`, lines[6])
	assert.Regexp(t, `^tmp +1 +\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(sliding\) +4 +soon$`, lines[7])
	assert.Equal(t, int64(1), version)

	out, errs, code = runState(t, "--data", dir, "--scope", "agent", "--prefix", "l")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "keys starting with \"l\": 2\n")
	assert.NotContains(t, out, "plan")

	out, errs, code = runState(t, "--data", dir, "--scope", "agent", "--frame", frame, "--json")
	require.Equal(t, 0, code, errs)
	var st StateListing
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	assert.Equal(t, frame, st.Frame)
	require.Len(t, st.Keys, 1)
	assert.Equal(t, "draft", st.Keys[0].Key)
	require.NotNil(t, st.Keys[0].Value)
	assert.Equal(t, "first lines", *st.Keys[0].Value)
	assert.Equal(t, int64(1), st.Size.Keys)

	out, errs, code = runState(t, "--data", dir, "--scope", "agent", "--json")
	require.Equal(t, 0, code, errs)
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Len(t, st.Keys, 5)
	assert.Equal(t, []byte{0xff, 0x00, 0x01}, st.Keys[0].ValueBase64)
	assert.Equal(t, []any{`"two"`, `"three"`}, st.Keys[1].Items)
	assert.NotNil(t, st.Keys[4].ExpiresAt)
	assert.True(t, st.Keys[4].Sliding)

	out, errs, code = runState(t, "--data", dir, "--scope", "nobody")
	require.Equal(t, 0, code, errs)
	assert.Equal(t, "state of scope nobody (the scope's own)  version 0\nlevel: 0 keys, 0 bytes; scope: 0 of 1048576 bytes\n", out)

	_, errs, code = runState(t, "--data", dir, "--scope", "agent", "--frame", "nope")
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "frame_not_found")

	for _, bad := range [][]string{
		{"--scope", "agent"},
		{"--data", dir},
		{"--data", dir, "--server", "127.0.0.1:1", "--scope", "agent"},
		{"--data", dir, "--scope", "agent", "extra"},
	} {
		_, _, code = runState(t, bad...)
		assert.Equal(t, 2, code, "%v", bad)
	}
	_, errs, code = runState(t, "--server", "nohost", "--scope", "agent")
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "want host:port")
}
