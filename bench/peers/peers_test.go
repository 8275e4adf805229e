package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/bench"
)

// TestTinyRun runs the four peers with a few checkpoints each: the harness
// works end to end, SQLite and both StateIndex modes run in rounds whose
// figures are kept, the disk probe runs at 1 thread, and the table and
// goals name both modes. Timing is never checked.
func TestTinyRun(t *testing.T) {
	dir := t.TempDir()
	jsonOut := filepath.Join(dir, "peers.json")
	var out, errb bytes.Buffer
	err := run([]string{"--checkpoints", "40", "--threads", "1,4", "--size", "512", "--statejson-max-per-thread", "10",
		"--rounds", "2", "--probe-ops", "5", "--dir", dir, "--quiet", "--json-out", jsonOut}, &out, &errb)
	require.NoError(t, err, errb.String())
	s := out.String()
	for _, want := range []string{"state.json", "SQLite WAL FULL", "StateIndex journal", "StateIndex journal=off", "journal=off",
		"ran 10 of 40 checkpoints", "overwrite p50", "1 thread: StateIndex ÷ SQLite", "1 thread: StateIndex p50 − overwrite-fdatasync p50"} {
		assert.Contains(t, s, want)
	}
	b, err := os.ReadFile(jsonOut)
	require.NoError(t, err)
	var o Output
	require.NoError(t, json.Unmarshal(b, &o))
	require.Len(t, o.Runs, 8)
	for _, r := range o.Runs {
		assert.Equal(t, r.Checkpoints, r.Figure.Ops, "%s %d", r.Peer, r.Threads)
	}
	assert.Equal(t, []string{peerStateJSON, peerSQLite, peerStateIndex, peerJournalOff}, []string{o.Runs[0].Peer, o.Runs[1].Peer, o.Runs[2].Peer, o.Runs[3].Peer})
	assert.Equal(t, 10, o.Runs[0].Checkpoints, "state.json capped at 10 per thread")
	assert.Len(t, o.Runs[0].Rounds, 1, "state.json runs once")
	assert.Equal(t, 40, o.Runs[4].Checkpoints, "4 threads × 10 = 40")
	for _, r := range o.Runs[1:4] {
		require.Len(t, r.Rounds, 2, r.Peer)
		assert.Equal(t, 20, r.Rounds[0].Ops, "%s: 40 checkpoints in 2 rounds", r.Peer)
	}
	require.NotNil(t, o.Fsync)
	assert.Equal(t, 10, o.Fsync.Overwrite.Ops, "5 probes in each of 2 rounds")
	assert.Positive(t, o.Fsync.Overwrite.P50us)
	assert.Positive(t, o.Fsync.Append.P50us)
	assert.Equal(t, 2, o.Rounds)
}

func TestPeerGoals(t *testing.T) {
	fig := func(ops, p50 float64) bench.Figure { return bench.Figure{OpsPerSec: ops, P50us: p50} }
	runs := []Run{
		{Peer: peerSQLite, Threads: 1, Figure: fig(4000, 200)},
		{Peer: peerStateIndex, Threads: 1, Figure: fig(5000, 180)},
		{Peer: peerSQLite, Threads: 64, Figure: fig(4000, 0)},
		{Peer: peerStateIndex, Threads: 64, Figure: fig(20000, 0)},
		{Peer: peerJournalOff, Threads: 64, Figure: fig(16000, 0)},
	}
	goals := peerGoals(runs, &bench.FsyncProbe{Overwrite: fig(0, 137)})
	require.Len(t, goals, 4)
	byName := map[string]bench.Goal{}
	for _, g := range goals {
		byName[g.Name[:strings.Index(g.Name, ":")]+g.Target] = g
	}
	assert.InDelta(t, 1.25, byName["1 thread≥ 1.00×"].Value, 1e-9)
	assert.True(t, byName["1 thread≥ 1.00×"].Met)
	assert.InDelta(t, 43, byName["1 thread≤ 60 µs"].Value, 1e-9)
	assert.True(t, byName["1 thread≤ 60 µs"].Met)
	assert.InDelta(t, 5, byName["64 threads≥ 6.00×"].Value, 1e-9)
	assert.False(t, byName["64 threads≥ 6.00×"].Met)
	assert.InDelta(t, 1.25, byName["64 threads≥ 1.50×"].Value, 1e-9)
	assert.False(t, byName["64 threads≥ 1.50×"].Met)
	assert.Len(t, peerGoals(runs, nil), 3, "no probe, no p50 goal")
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
