package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTinyRun runs the three peers with a few checkpoints each: the harness
// works end to end. Timing is never checked.
func TestTinyRun(t *testing.T) {
	dir := t.TempDir()
	jsonOut := filepath.Join(dir, "peers.json")
	var out, errb bytes.Buffer
	err := run([]string{"--checkpoints", "40", "--threads", "1,4", "--size", "512", "--statejson-max-per-thread", "10",
		"--dir", dir, "--quiet", "--json-out", jsonOut}, &out, &errb)
	require.NoError(t, err, errb.String())
	s := out.String()
	for _, want := range []string{"state.json", "SQLite", "StateIndex", "ran 10 of 40 checkpoints"} {
		assert.Contains(t, s, want)
	}
	b, err := os.ReadFile(jsonOut)
	require.NoError(t, err)
	var o Output
	require.NoError(t, json.Unmarshal(b, &o))
	require.Len(t, o.Runs, 6)
	for _, r := range o.Runs {
		assert.Equal(t, r.Checkpoints, r.Figure.Ops, "%s %d", r.Peer, r.Threads)
	}
	assert.Equal(t, 10, o.Runs[0].Checkpoints, "state.json capped at 10 per thread")
	assert.Equal(t, 40, o.Runs[3].Checkpoints, "4 threads × 10 = 40")
}

func TestSQLiteSettings(t *testing.T) {
	db, err := openRegistry(t.TempDir())
	require.NoError(t, err)
	defer db.Close()
	var mode string
	require.NoError(t, db.QueryRow("PRAGMA journal_mode").Scan(&mode))
	assert.Equal(t, "wal", mode)
}

func TestStateJSONIsWholeAndValid(t *testing.T) {
	dir := t.TempDir()
	_, _, err := stateJSON{}.run(t.Context(), dir, 5, 1, 100)
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(dir, ".ai", "threads", "thread-000", "state.json"))
	require.NoError(t, err)
	var st threadState
	require.NoError(t, json.Unmarshal(b, &st))
	assert.Len(t, st.Messages, 5)
	assert.Equal(t, 5, st.TurnNumber)
	_, err = os.Stat(filepath.Join(dir, ".ai", "threads", "thread-000", "state.json.tmp"))
	assert.True(t, os.IsNotExist(err), "no temporary file left behind")
}
