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
		assert.Equal(t, d.Actor.Ops, d.ActorOff.Ops, "both modes run the same requests")
		assert.Equal(t, d.GroupCommit.Ops, d.GroupCommitOff.Ops)
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
		assert.Positive(t, s.Buckets["index"], "the per-stream index is counted among the buckets")
		assert.Positive(t, s.JournalBytes, "the journal is on: its directory is counted")
		assert.Equal(t, s.FileBytes+s.JournalBytes, s.DirBytes)
		assert.InDelta(t, float64(s.JournalBytes)/float64(s.DirBytes), s.JournalShare, 1e-9)
		assert.InDelta(t, float64(s.DirBytes)/float64(s.PayloadBytes), s.Ratio, 1e-9, "the goal's ratio is the directory's")
		assert.Less(t, s.FileRatio, s.Ratio)
		assert.Equal(t, s.Events, s.Index.Requests, "every event of the workload names its request")
		assert.Positive(t, s.Index.Frames)
	}
	require.Len(t, rep.Remote, 1)
	require.Len(t, rep.Ledger, 2)
	for _, l := range rep.Ledger {
		assert.Positive(t, l.Reserve.Ops, "spawners=%d", l.Spawners)
		assert.Positive(t, l.Children)
		assert.Equal(t, l.Children, l.Settle.Ops, "every child's settlement was seen by the subscriber")
		assert.Positive(t, l.Refused, "the parent's limit is reached")
		assert.False(t, l.Exceeded)
		assert.Equal(t, l.MaxMicros, l.PeakMicros, "the limit is reached, never passed")
		assert.Equal(t, l.ChildrenMicros, l.ActualMicros, "the parent is charged exactly what its children spent")
		assert.Positive(t, l.EventsChecked)
	}
	checkPartial(t, rep)
	assert.NotEmpty(t, rep.Goals)
	names := make([]string, 0, len(rep.Goals))
	for _, g := range rep.Goals {
		names = append(names, g.Name)
	}
	assert.Contains(t, names, "growing history: snapshot at 200 ÷ snapshot at 20 events")
	assert.Contains(t, names, "storage: data directory (file + journal) ÷ encoded event payload (default page size)")
	// At --scale 0.002 the goals stated for 1,000 handles, 100,000-event
	// scopes and a large storage run are not judged: the report says so.
	unjudged := map[string]string{}
	for _, u := range rep.Unjudged {
		unjudged[u.Goal] = u.Why
	}
	assert.Contains(t, unjudged["AssembleContextPack, 1,000 handles: p50 ≤ 100 µs"], "--scale 0.002")
	assert.Contains(t, unjudged["cold ResumeActor at 100,000 events: p50 ≤ 25 ms, p50 growth ≤ 1.5×"], "largest scope has 200 events")
	assert.Contains(t, unjudged["storage: the journal's share of the data directory ≤ 5%"], "events")
	for _, n := range names {
		assert.NotContains(t, n, "AssembleContextPack", "judged at the wrong size")
		assert.NotContains(t, n, "cold ResumeActor", "judged at the wrong size")
		assert.NotContains(t, n, "journal's share", "judged at the wrong size")
	}

	var out bytes.Buffer
	require.NoError(t, bench.WriteText(&out, rep))
	require.Len(t, rep.State, 2)
	for _, want := range []string{"Durable PushFrame + AddContextHandle", "AssembleContextPack", "Cold ResumeActor", "Bytes on disk", "Remote round trips", "Spend ledger", "Scope state", "Partial output", "Goals", "Goals this run cannot judge:"} {
		assert.Contains(t, out.String(), want)
	}
	b, err := json.Marshal(rep)
	require.NoError(t, err)
	var back bench.Report
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, rep.Durable, back.Durable)
}

// TestStateScenario runs the scope-state scenario at a tiny scale: every
// phase of every round runs its requests, the cold reads are all timed,
// the ratios are the medians', and the table prints. Timing is never
// checked.
func TestStateScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("writes fsynced files")
	}
	rep, err := bench.Run(context.Background(), bench.Options{Dir: t.TempDir(), Scale: 0.01, Rounds: 2, Only: []string{bench.ScenarioState}})
	require.NoError(t, err)
	assert.Empty(t, rep.Durable, "--only state runs nothing else")
	require.Len(t, rep.State, 2)
	for _, x := range rep.State {
		require.Equal(t, 2, x.Rounds, "scopes=%d", x.Scopes)
		require.Len(t, x.RoundFigures, 2)
		assert.NotEqual(t, x.RoundFigures[0].Order, x.RoundFigures[1].Order, "the phase order rotates")
		for _, r := range x.RoundFigures {
			for name, f := range map[string]bench.Figure{"set": r.Set, "set+ttl": r.SetTTL, "push": r.Push, "frames": r.Frames, "hot": r.GetHot, "set+row": r.SetTTLRow} {
				assert.Positive(t, f.Ops, "scopes=%d %s", x.Scopes, name)
				assert.Positive(t, f.OpsPerSec, "scopes=%d %s", x.Scopes, name)
				assert.LessOrEqual(t, f.P50us, f.P99us, "scopes=%d %s", x.Scopes, name)
			}
			assert.Equal(t, r.Set.Ops, r.Frames.Ops, "every write phase runs the same requests")
			assert.Equal(t, r.Set.Ops, r.Push.Ops)
			assert.Positive(t, r.GetCold.Ops)
			assert.Positive(t, r.GetCold.P50us)
		}
		assert.Equal(t, x.RoundFigures[0].Set.Ops+x.RoundFigures[1].Set.Ops, x.Set.Ops)
		assert.InDelta(t, x.Set.OpsPerSec/x.Frames.OpsPerSec, x.SetOverFrames, 1e-9)
		assert.InDelta(t, x.Push.OpsPerSec/x.Frames.OpsPerSec, x.PushOverFrames, 1e-9)
		assert.Positive(t, x.EventsPerScope)
	}
	assert.Positive(t, rep.State[0].GetColdSmall.Ops, "one scope: the filler's cold reads")
	assert.Zero(t, rep.State[1].GetColdSmall.Ops)
	assert.Equal(t, 1, rep.State[0].Scopes)
	assert.Equal(t, 64, rep.State[1].Scopes)
	var out bytes.Buffer
	require.NoError(t, bench.WriteText(&out, rep))
	for _, want := range []string{"Scope state", "set+ttl", "get cold", "set+row"} {
		assert.Contains(t, out.String(), want)
	}
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

// TestBenchDurableBothModes: the durable scenario measures the journal
// and journal=off in alternating rounds, keeps every round, reports medians
// and the ratios of those medians, the journal's size within its bound,
// and the disk probe at one scope only. Timing is never checked.
func TestBenchDurableBothModes(t *testing.T) {
	rep, err := bench.Run(context.Background(), bench.Options{Dir: t.TempDir(), Scale: 0.002, Rounds: 2, Only: []string{bench.ScenarioDurable}})
	require.NoError(t, err)
	require.Len(t, rep.Durable, 3)
	for _, d := range rep.Durable {
		require.Equal(t, 2, d.Rounds, "scopes=%d", d.Scopes)
		require.Len(t, d.RoundFigures, 2)
		assert.True(t, d.RoundFigures[0].JournalFirst)
		assert.False(t, d.RoundFigures[1].JournalFirst, "rounds alternate which mode goes first")
		sum := 0
		for _, r := range d.RoundFigures {
			for name, f := range map[string]bench.Figure{"actor": r.Actor, "actor off": r.ActorOff, "raw": r.GroupCommit, "raw off": r.GroupCommitOff, "one txn": r.OneTxn} {
				assert.Positive(t, f.Ops, "scopes=%d %s", d.Scopes, name)
			}
			assert.Equal(t, r.Actor.Ops, r.ActorOff.Ops)
			assert.Equal(t, r.Actor.Ops, r.GroupCommit.Ops)
			sum += r.Actor.Ops
		}
		assert.Equal(t, sum, d.Actor.Ops, "the median figure counts every round's operations")
		assert.Equal(t, bench.MedianFigure([]bench.Figure{d.RoundFigures[0].ActorOff, d.RoundFigures[1].ActorOff}), d.ActorOff)
		assert.InDelta(t, d.Actor.OpsPerSec/d.ActorOff.OpsPerSec, d.JournalOverOff, 1e-9)
		assert.InDelta(t, d.Actor.OpsPerSec/d.GroupCommit.OpsPerSec, d.ActorOverGroupCommit, 1e-9)
		assert.InDelta(t, d.ActorOff.OpsPerSec/d.GroupCommitOff.OpsPerSec, d.ActorOffOverGroupCommitOff, 1e-9)
		assert.Positive(t, d.Journal.Segments)
		assert.Positive(t, d.Journal.Frames, "the journal run wrote frames")
		assert.Positive(t, d.Journal.MaxBytes)
		assert.LessOrEqual(t, d.Journal.Bytes, d.Journal.MaxBytes)
		if d.Scopes == 1 {
			require.NotNil(t, d.Fsync)
			assert.Positive(t, d.Fsync.Overwrite.Ops)
			assert.Positive(t, d.Fsync.Overwrite.P50us)
			assert.Positive(t, d.Fsync.Append.P50us)
		} else {
			assert.Nil(t, d.Fsync, "the probe runs with one scope only")
		}
	}
	names := make([]string, 0, len(rep.Goals))
	for _, g := range rep.Goals {
		names = append(names, g.Name)
	}
	for _, want := range []string{"64 scopes: actor ÷ raw journal group commit (ops/s)", "64 scopes: actor, journal ÷ journal=off (ops/s)",
		"1 scope: actor p50 − overwrite-fdatasync p50 (same rounds)", "64 scopes: journal on disk after the run ≤ its bound"} {
		assert.Contains(t, names, want)
	}
	var out bytes.Buffer
	require.NoError(t, bench.WriteText(&out, rep))
	for _, want := range []string{"actor, journal=off", "raw journal", "Disk floor", "overwrite p50", "Journal, 64 scope(s)", "bound 64 MiB"} {
		assert.Contains(t, out.String(), want)
	}
}

func TestMedianFigure(t *testing.T) {
	figs := []bench.Figure{
		{Ops: 10, Seconds: 1, OpsPerSec: 10, P50us: 300, P99us: 900, MeanUs: 310},
		{Ops: 10, Seconds: 2, OpsPerSec: 5, P50us: 100, P99us: 700, MeanUs: 110},
		{Ops: 20, Seconds: 1, OpsPerSec: 20, P50us: 200, P99us: 800, MeanUs: 210},
	}
	assert.Equal(t, bench.Figure{Ops: 40, Seconds: 4, OpsPerSec: 10, P50us: 200, P99us: 800, MeanUs: 210}, bench.MedianFigure(figs))
	assert.InDelta(t, 7.5, bench.MedianFigure(figs[:2]).OpsPerSec, 1e-9, "even count: the mean of the middle two")
	assert.Equal(t, bench.Figure{}, bench.MedianFigure(nil))
	assert.InDelta(t, 2.0, bench.Median([]float64{3, 1, 2}), 1e-9)
}

func TestCheckpoints(t *testing.T) {
	for _, off := range []bool{false, true} {
		fig, err := bench.Checkpoints(context.Background(), bench.CheckpointOptions{Total: 10, Threads: 3, Size: 256, Dir: t.TempDir(), JournalOff: off})
		require.NoError(t, err, "journal off: %v", off)
		assert.Equal(t, 10, fig.Ops)
	}

	_, err := bench.Checkpoints(context.Background(), bench.CheckpointOptions{Total: 0, Threads: 1, Size: 1})
	assert.Error(t, err)
}

// TestStorageSize: the storage scenario writes the events and page sizes
// it is told to (the must-show figure needs a larger run than the
// default).
func TestStorageSize(t *testing.T) {
	if testing.Short() {
		t.Skip("writes fsynced files")
	}
	rep, err := bench.Run(context.Background(), bench.Options{Dir: t.TempDir(), Only: []string{bench.ScenarioStorage},
		StorageEvents: 48, StoragePages: []int{0}})
	require.NoError(t, err)
	require.Len(t, rep.Storage, 1)
	s := rep.Storage[0]
	assert.Equal(t, 0, s.PageSize)
	assert.Equal(t, 48+s.Scopes, s.Events, "the workload's events and each scope's root")
	assert.Positive(t, s.JournalSegments)
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

// checkPartial checks the partial-output scenario's figures: 64 streams in
// 64 scopes and in 4, each phase measured in every round.
func checkPartial(t *testing.T, rep *bench.Report) {
	t.Helper()
	require.Len(t, rep.Partial, 2)
	for i, x := range rep.Partial {
		assert.Equal(t, 64, x.Streams)
		assert.Equal(t, []int{64, 4}[i], x.Scopes)
		assert.InDelta(t, 3200, x.OfferedRate, 1e-9, "64 streams, one chunk per 20 ms each")
		require.Len(t, x.RoundFigures, x.Rounds)
		for _, f := range []bench.Figure{x.Alone, x.WithDurable, x.Durable, x.DurableWith} {
			assert.Positive(t, f.Ops, "scopes=%d", x.Scopes)
			assert.Positive(t, f.OpsPerSec)
			assert.LessOrEqual(t, f.P50us, f.P99us)
		}
		assert.Equal(t, x.Durable.Ops, x.DurableWith.Ops, "the same durable workload with and without the streams")
		assert.Positive(t, x.FsyncsPerSec, "the journal's fdatasyncs are counted")
		assert.Positive(t, x.ChunksPerFsync)
		assert.InDelta(t, x.DurableWith.OpsPerSec/x.Durable.OpsPerSec, x.DurableRatio, 1e-9)
	}
}

// TestPartialScenario runs the partial-output scenario alone at a tiny
// scale: it runs, fills its figures, and its goal is reported. Timing is
// never checked.
func TestPartialScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("writes fsynced files")
	}
	rep, err := bench.Run(context.Background(), bench.Options{Dir: t.TempDir(), Scale: 0.002, Rounds: 2, Only: []string{bench.ScenarioPartial}})
	require.NoError(t, err)
	checkPartial(t, rep)
	var notRun []string
	for _, u := range rep.Unjudged {
		if u.Why == "not run (--only partial)" {
			notRun = append(notRun, u.Goal)
		}
	}
	assert.Len(t, notRun, 7, "every other scenario with goals (all but state)'s goals are listed as not run: %v", notRun)
	require.Empty(t, rep.Durable, "only the scenario asked for")
	var names []string
	for _, g := range rep.Goals {
		names = append(names, g.Name)
	}
	assert.Contains(t, names, "partial output, 64 streams over 4 scopes: chunks/s achieved ÷ offered (alone)")
}
