package bench

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// History names the shape of a scope's history in the resume scenario.
type History string

// Histories.
const (
	// Bounded: one long-lived frame; handles and usage are recorded and
	// the context is compacted (summarize_oldest) every 50 events, so the
	// projection stays about the same size however long the history.
	Bounded History = "bounded"
	// Growing: child frames pushed, given two handles and usage, popped
	// completed, one after another under one live root. The log grows
	// with the history (about 1.7 KB per 5 events); the projection does
	// not: a finished frame leaves it (and the snapshot) when it is
	// popped — its record rides on the frame.popped event and reads find
	// it in the log through the store's index — and the root keeps a
	// count of its children, not a list. (Before issue 11 every completed
	// frame stayed in the projection: 42 MB of snapshot at 100k events.)
	Growing History = "growing"
)

// resumeSnapshotEvery is the snapshot interval of the scenario (the
// default); the tail replayed after the snapshot is half of it, the mean
// tail of a crash at a random point.
const resumeSnapshotEvery = 1000

// ResumeResult is cold ResumeActor on a scope of Events events: a fresh
// store and actor system on an existing file (warm page cache) for each
// repetition, once with a snapshot and a tail, once replaying everything.
type ResumeResult struct {
	History         History `json:"history"`
	Events          int64   `json:"events"`
	SnapshotVersion int64   `json:"snapshot_version"`
	SnapshotBytes   int     `json:"snapshot_bytes"`
	// Snapshot: snapshot + tail; Replay: no snapshot, full replay.
	Snapshot ResumeFigure `json:"snapshot_tail"`
	Replay   ResumeFigure `json:"full_replay"`
	// ReplayOverSnapshot is Replay ÷ Snapshot at p50.
	ReplayOverSnapshot float64 `json:"replay_over_snapshot"`
}

// ResumeFigure is the ResumeActor request time over the repetitions (the
// reply includes the durable actor.resumed append); ServerP50us is the
// server's own recovery time (RecoveryMicros) and OpenP50us the time to
// open the store and start the StateIndex, which the request time excludes.
type ResumeFigure struct {
	Call           Figure  `json:"call"`
	ServerP50us    float64 `json:"server_p50_us"`
	OpenP50us      float64 `json:"open_p50_us"`
	EventsReplayed int64   `json:"events_replayed"`
	FromSnapshot   bool    `json:"from_snapshot"`
}

// historyOp returns the workload operation that builds a history.
func historyOp(h History) func(*agent, context.Context) error {
	if h == Growing {
		return (*agent).growingOp
	}
	return (*agent).boundedOp
}

// boundedOp: four handles, one usage record, and every 50th operation a
// compaction of the root frame's context.
func (a *agent) boundedOp(ctx context.Context) error {
	k := a.k
	a.k++
	var err error
	switch {
	case k%50 == 49:
		_, err = a.c.CompactContext(ctx, &messages.CompactContext{Header: a.mut(), FrameID: a.root, TargetTokens: 4000,
			Strategy: messages.Strategy{Kind: messages.StrategySummarizeOldest, KeepRecent: 8}})
	case k%5 == 4:
		_, err = a.c.RecordUsage(ctx, &messages.RecordUsage{Header: a.mut(), FrameID: a.root,
			Cost: budget.Cost{InputTokens: 1200, OutputTokens: 300, Turns: 1, SpendMicros: 4500}})
	default:
		_, err = a.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: a.mut(), FrameID: a.root,
			Priority: prios[k%len(prios)], Content: text("turn "+strconv.Itoa(k), a.size)})
	}
	if err != nil {
		return fmt.Errorf("bounded history op %d: %w", k, err)
	}
	return nil
}

// growingOp: push a child, two handles, usage, pop it completed.
func (a *agent) growingOp(ctx context.Context) error {
	k := a.k
	a.k++
	var err error
	switch k % 5 {
	case 0:
		var r *messages.PushFrameReply
		r, err = a.c.PushFrame(ctx, &messages.PushFrame{Header: a.mut(), ParentID: a.root, Goal: "subtask " + strconv.Itoa(k),
			Inputs: []byte(text("inputs", 128)), Budget: budget.TokenBudget{Total: 4000}})
		if err == nil {
			a.child = r.FrameID
		}
	case 1, 2:
		_, err = a.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: a.mut(), FrameID: a.child,
			Priority: prios[k%len(prios)], Content: text("fact "+strconv.Itoa(k), a.size)})
	case 3:
		_, err = a.c.RecordUsage(ctx, &messages.RecordUsage{Header: a.mut(), FrameID: a.child,
			Cost: budget.Cost{InputTokens: 900, OutputTokens: 200, Turns: 1}})
	case 4:
		_, err = a.c.PopFrame(ctx, &messages.PopFrame{Header: a.mut(), FrameID: a.child, Status: frames.StatusCompleted})
	}
	if err != nil {
		return fmt.Errorf("growing history op %d: %w", k, err)
	}
	return nil
}

const resumeScope = "agent-resume"

// resume builds a history of events events and measures cold ResumeActor
// on it with a snapshot (taken tail events before the head) and without.
func resume(ctx context.Context, o *Options, h History, events int64, reps int) (ResumeResult, error) {
	res := ResumeResult{History: h, Events: events}
	dir, err := scratch(o.Dir, fmt.Sprintf("resume-%s-%d", h, events))
	if err != nil {
		return res, err
	}
	defer o.cleanup(dir)
	snapPath, replayPath := dbPath(dir, "snapshot"), dbPath(dir, "replay")
	tail := resumeTail(events)
	o.progress("resume: building a %s history of %d events", h, events)
	snap, err := buildHistory(ctx, snapPath, h, events, tail)
	if err != nil {
		return res, err
	}
	res.SnapshotVersion, res.SnapshotBytes = snap.Version, len(snap.Data)
	if err := disableSnapshot(ctx, replayPath, snapPath); err != nil {
		return res, err
	}
	o.progress("resume: %s history of %d events, up to %d cold resumes from snapshot + tail", h, events, reps)
	if res.Snapshot, err = coldResume(ctx, snapPath, resumeSnapshotEvery, reps, true); err != nil {
		return res, err
	}
	o.progress("resume: %s history of %d events, up to %d cold resumes by full replay", h, events, reps)
	if res.Replay, err = coldResume(ctx, replayPath, math.MaxInt64, reps, false); err != nil {
		return res, err
	}
	res.ReplayOverSnapshot = Ratio(res.Replay.Call.P50us, res.Snapshot.Call.P50us)
	return res, nil
}

// resumeCycle is the period of both histories' operations (bounded:
// usage every 5th, a compaction every 50th; growing: 5 per child).
const resumeCycle = 50

// resumeTail is how many events before the head of a history of events
// events its snapshot is taken: half the snapshot interval, at most half
// the history (a second snapshot would land on the head), and lowered to
// put the snapshot at the same point of the operations' cycle whatever
// the length, so that the snapshots of two lengths hold the same live work
// (the growing history's snapshot holds the root alone just after a pop,
// the root and a child with two handles just before one). At 1,000 events
// the tail is 450; at 10,000 and more 500.
func resumeTail(events int64) int64 {
	tail := min(int64(resumeSnapshotEvery/2), (events-1)/2)
	if aligned := tail - ((tail-events)%resumeCycle+resumeCycle)%resumeCycle; aligned > 0 {
		return aligned
	}
	return tail
}

// buildHistory writes a scope of events events at path (NoSync, journal
// off: setup; the cold resumes open the file with the journal on, as users
// do).
// The StateIndex itself writes the scope's one snapshot, tail events
// before the head: its snapshot interval is set to events-tail. It returns
// that snapshot.
func buildHistory(ctx context.Context, path string, h History, events, tail int64) (eventstore.Snapshot, error) {
	cfg := config(0)
	cfg.SnapshotEvery = events - tail
	n, err := startWith(path, setupOptions, cfg)
	if err != nil {
		return eventstore.Snapshot{}, err
	}
	a := &agent{c: n.client, scope: resumeScope, size: 800}
	err = a.begin(ctx)
	op := historyOp(h)
	for version := int64(1); err == nil && version < events; version++ { // every operation appends one event
		err = op(a, ctx)
	}
	n.srv.Stop() // waits for the snapshot to be saved
	if err != nil {
		return eventstore.Snapshot{}, errs(err, n.stop())
	}
	info, err := n.store.Stream(ctx, resumeScope)
	if err != nil {
		return eventstore.Snapshot{}, errs(err, n.stop())
	}
	snap, ok, err := n.store.LoadSnapshot(ctx, resumeScope)
	if err = errs(err, n.stop()); err != nil {
		return eventstore.Snapshot{}, err
	}
	if info.Version != events || !ok || snap.Version != events-tail {
		return eventstore.Snapshot{}, fmt.Errorf("bench: %s history at version %d with a snapshot at %d (found %v), want %d and %d",
			h, info.Version, snap.Version, ok, events, events-tail)
	}
	return snap, nil
}

// setupOptions open the files the resume scenario builds: no fsync and no
// journal (a history of 100,000 events written through the journal
// recycles its segments, and at the time of writing a reopen then refused
// the journal as corrupt: reported, see docs/BENCHMARKS.md).
var setupOptions = &eventstore.Options{NoSync: true, JournalOff: true}

// disableSnapshot copies the file at src to dst and replaces the copy's
// snapshot with one of an unknown projection format, which recovery
// ignores (as after an upgrade): it replays the whole stream.
func disableSnapshot(ctx context.Context, dst, src string) error {
	if err := copyFile(dst, src); err != nil {
		return err
	}
	store, err := eventstore.Open(dst, setupOptions)
	if err != nil {
		return err
	}
	foreign := eventstore.Snapshot{Version: 1, Format: frames.StateFormat + 1000, Data: []byte{0xc0}}
	return errs(store.SaveSnapshot(ctx, resumeScope, foreign), store.Close())
}

// coldResume opens the file up to reps+1 times, each time in a new store
// and actor system, and sends one ResumeActor. The first is a warm-up,
// unless it took over a second (the file was just written: the page
// cache is warm); once 3 are measured and they took over 3 s in all, it
// stops early.
func coldResume(ctx context.Context, path string, snapshotEvery int64, reps int, wantSnapshot bool) (ResumeFigure, error) {
	var out ResumeFigure
	cfg := config(0)
	cfg.SnapshotEvery = snapshotEvery
	var calls, server, opens Latencies
	var total time.Duration
	for rep := 0; rep <= reps && !(len(calls) >= 3 && total > 3*time.Second); rep++ {
		begin := time.Now()
		n, err := start(path, false, cfg)
		if err != nil {
			return out, err
		}
		opened := time.Since(begin)
		var r *messages.ActorResumeState
		begin = time.Now()
		r, err = n.client.ResumeActor(ctx, &messages.ResumeActor{Header: messages.Header{Scope: resumeScope}})
		took := time.Since(begin)
		if err = errs(err, n.stop()); err != nil {
			return out, err
		}
		if r.Recovery.FromSnapshot != wantSnapshot {
			return out, fmt.Errorf("bench: resume of %s: from snapshot %v, want %v", path, r.Recovery.FromSnapshot, wantSnapshot)
		}
		if rep == 0 && took < time.Second {
			continue // warm-up
		}
		calls, opens = append(calls, took), append(opens, opened)
		server = append(server, time.Duration(r.Recovery.RecoveryMicros)*time.Microsecond)
		total += took
		out.EventsReplayed, out.FromSnapshot = r.Recovery.EventsReplayed, r.Recovery.FromSnapshot
	}
	out.Call = Summarize(calls, total)
	out.ServerP50us = Summarize(server, 0).P50us
	out.OpenP50us = Summarize(opens, 0).P50us
	return out, nil
}
