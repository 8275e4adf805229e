package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/bench"
)

// TestMain lets the remote scenario re-execute this test binary as its
// server.
func TestMain(m *testing.M) {
	if bench.IsRemoteChild() {
		os.Exit(bench.ServeRemoteChild(os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

// TestRunTiny runs every scenario at a tiny scale: the harness works end to
// end and fills every figure. Timing is never checked.
func TestRunTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("writes fsynced files")
	}
	rep, err := bench.Run(context.Background(), bench.Options{Dir: t.TempDir(), Scale: 0.002})
	require.NoError(t, err)

	require.Len(t, rep.Durable, 3)
	for _, d := range rep.Durable {
		assert.Positive(t, d.Actor.Ops, "scopes=%d", d.Scopes)
		assert.Equal(t, d.Actor.Ops, d.GroupCommit.Ops, "the raw run replays exactly the actor's events")
		assert.Positive(t, d.OneTxn.Ops)
		assert.Positive(t, d.Actor.OpsPerSec)
		assert.Positive(t, d.Actor.P50us)
		assert.Positive(t, d.MeanEventBytes)
		assert.LessOrEqual(t, d.Actor.P50us, d.Actor.P99us)
	}
	require.Len(t, rep.Assemble, 3)
	for _, a := range rep.Assemble {
		assert.Positive(t, a.Pack.Ops)
		assert.LessOrEqual(t, a.UsedTokens, a.BudgetTokens)
	}
	require.Len(t, rep.Resume, 6)
	for _, r := range rep.Resume {
		assert.True(t, r.Snapshot.FromSnapshot)
		assert.False(t, r.Replay.FromSnapshot)
		assert.Less(t, r.Snapshot.EventsReplayed, r.Replay.EventsReplayed, "%s %d", r.History, r.Events)
		assert.Positive(t, r.SnapshotVersion)
		assert.Less(t, r.SnapshotVersion, r.Events)
	}
	require.Len(t, rep.Storage, 2)
	for _, s := range rep.Storage {
		assert.Positive(t, s.PayloadBytes)
		assert.Greater(t, s.FileBytes, s.PayloadBytes)
		assert.Positive(t, s.Buckets["streams"])
	}
	require.Len(t, rep.Remote, 1)
	assert.NotEmpty(t, rep.Goals)

	var out bytes.Buffer
	require.NoError(t, bench.WriteText(&out, rep))
	for _, want := range []string{"Durable PushFrame + AddContextHandle", "AssembleContextPack", "Cold ResumeActor", "Bytes on disk", "Remote round trips", "Goals"} {
		assert.Contains(t, out.String(), want)
	}
	b, err := json.Marshal(rep)
	require.NoError(t, err)
	var back bench.Report
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, rep.Durable, back.Durable)
}

// TestRemoteScenario runs the remote scenario against a child process (this
// test binary, see TestMain): both operations are measured, the ratio is
// theirs, and the goal is reported. Timing is never checked.
func TestRemoteScenario(t *testing.T) {
	rep, err := bench.Run(context.Background(), bench.Options{Scale: 0.002, Only: []string{bench.ScenarioRemote}})
	require.NoError(t, err)
	require.Len(t, rep.Remote, 1)
	r := rep.Remote[0]
	assert.Equal(t, 16, r.Callers)
	for name, f := range map[string]bench.Figure{"echo": r.Echo, "GetStack": r.GetStack} {
		assert.Positive(t, f.Ops, name)
		assert.Positive(t, f.OpsPerSec, name)
		assert.Positive(t, f.P50us, name)
		assert.LessOrEqual(t, f.P50us, f.P99us, name)
	}
	assert.InDelta(t, r.GetStack.OpsPerSec/r.Echo.OpsPerSec, r.GetStackOverEcho, 1e-9)
	assert.Empty(t, rep.Durable, "--only remote runs nothing else")
	require.Len(t, rep.Goals, 1)
	assert.Contains(t, rep.Goals[0].Name, "remote GetStack")
	assert.InDelta(t, r.GetStackOverEcho, rep.Goals[0].Value, 1e-9)

	var out bytes.Buffer
	require.NoError(t, bench.WriteText(&out, rep))
	assert.Contains(t, out.String(), "GetStack ÷ echo")
}

// TestRemoteScenarioReportsABrokenServer: a server program that does not
// serve gives an error naming it, not a hang.
func TestRemoteScenarioReportsABrokenServer(t *testing.T) {
	_, err := bench.Run(context.Background(), bench.Options{Scale: 0.002, Only: []string{bench.ScenarioRemote}, Executable: "/bin/true"})
	assert.ErrorContains(t, err, "did not start")
}

func TestCheckpoints(t *testing.T) {
	fig, err := bench.Checkpoints(context.Background(), bench.CheckpointOptions{Total: 10, Threads: 3, Size: 256, Dir: t.TempDir()})
	require.NoError(t, err)
	assert.Equal(t, 10, fig.Ops)

	_, err = bench.Checkpoints(context.Background(), bench.CheckpointOptions{Total: 0, Threads: 1, Size: 1})
	assert.Error(t, err)
}

func TestOnlyRejectsUnknownScenario(t *testing.T) {
	_, err := bench.Run(context.Background(), bench.Options{Only: []string{"nope"}})
	assert.ErrorContains(t, err, "unknown scenario")
}

func TestSummarize(t *testing.T) {
	lat := bench.Latencies{}
	for i := 1; i <= 100; i++ {
		lat = append(lat, time.Duration(i)*time.Microsecond)
	}
	f := bench.Summarize(lat, time.Second)
	assert.Equal(t, 100, f.Ops)
	assert.InDelta(t, 100.0, f.OpsPerSec, 1e-9)
	assert.InDelta(t, 50.0, f.P50us, 1e-9)
	assert.InDelta(t, 99.0, f.P99us, 1e-9)
	assert.InDelta(t, 50.5, f.MeanUs, 1e-9)
	assert.Equal(t, bench.Figure{}, bench.Summarize(nil, 0))
}

func TestGoals(t *testing.T) {
	g := bench.AtMost("latency", 150, 100, "%.0f µs")
	assert.False(t, g.Met)
	assert.Equal(t, "≤ 100 µs", g.Target)
	assert.Contains(t, g.Note, "1.50×")
	g = bench.AtLeast("ratio", 0.8, 0.85, "%.2f")
	assert.False(t, g.Met)
	assert.Contains(t, g.Note, "94%")
	assert.True(t, bench.AtLeast("ratio", 5, 4, "%.1f").Met)
}
