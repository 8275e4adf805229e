package eventstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/stateindex/stateindex/frames"
)

// Loading a scope lives with the store: its latest snapshot plus the tail
// of its log, or a full replay. The actor shell calls it off its shards'
// goroutines; tools (inspect, the crash and cluster checks) call it directly.

func newState(scope string, horizon, skew int64) *frames.State {
	st := frames.NewState(scope, horizon)
	st.SetHorizon(horizon, skew)
	return st
}

// LoadInfo says how a scope's state was rebuilt.
type LoadInfo struct {
	FromSnapshot    bool
	SnapshotVersion int64 // 0 without a snapshot
	SnapshotBytes   int64 // the snapshot's encoded size
	Replayed        int64 // events applied after the snapshot
	ReplayedBytes   int64 // their encoded payload bytes
	Took            time.Duration
}

// LoadState rebuilds a scope's state from the store: its latest snapshot
// (if readable, of the current format, and continued by the log) plus the
// events after it, or a full replay. A log that does not replay — a record
// that does not decode, an event inconsistent with the state — is an error
// naming the stream and version. horizon and skew (unix ns; <= 0: the
// defaults) bound how long the state remembers request ids. log may be nil.
func LoadState(ctx context.Context, store Store, scope string, horizon, skew int64, log *slog.Logger) (*frames.State, LoadInfo, error) {
	if log == nil {
		log = slog.Default()
	}
	start := time.Now()
	var info LoadInfo
	var st *frames.State
	snap, ok, err := store.LoadSnapshot(ctx, scope)
	if err != nil {
		log.Warn("stateindex: snapshot unreadable, replaying the whole stream", "scope", scope, "error", err)
	} else if ok {
		s, ok2, err := DecodeState(scope, snap)
		switch {
		case err != nil:
			log.Warn("stateindex: snapshot undecodable, replaying the whole stream", "scope", scope, "error", err)
		case ok2:
			s.SetHorizon(horizon, skew)
			st, info.FromSnapshot, info.SnapshotVersion, info.SnapshotBytes = s, true, snap.Version, int64(len(snap.Data))
		}
	}
	if st == nil {
		st = newState(scope, horizon, skew)
	}
	err = replay(ctx, store, st, &info)
	if err == nil {
		err = resolveContent(ctx, store, st)
	}
	if err != nil && info.FromSnapshot {
		// A snapshot that the log does not continue is not trusted.
		log.Warn("stateindex: snapshot inconsistent with log, replaying the whole stream", "scope", scope, "error", err)
		st, info = newState(scope, horizon, skew), LoadInfo{}
		if err = replay(ctx, store, st, &info); err == nil {
			err = resolveContent(ctx, store, st)
		}
	}
	if err != nil {
		return nil, info, err
	}
	st.SetHistory(History(store, scope))
	info.Took = time.Since(start)
	return st, info, nil
}

func replay(ctx context.Context, store Store, st *frames.State, info *LoadInfo) error {
	return store.ReadStream(ctx, st.Scope, st.Version+1, func(r Record) error {
		if r.Version != st.Version+1 {
			return &CorruptionError{Stream: r.Stream, Version: r.Version, Reason: fmt.Sprintf("expected version %d", st.Version+1)}
		}
		ev, err := DecodeFrameEvent(r)
		if err != nil {
			return err
		}
		if err := frames.Apply(st, ev); err != nil {
			return &CorruptionError{Stream: r.Stream, Version: r.Version, Reason: err.Error()}
		}
		info.Replayed++
		info.ReplayedBytes += int64(len(r.Data))
		return nil
	})
}

// resolveContent reads the content stored by reference that a state decoded
// from a snapshot refers to — one record each, at the version the state
// keeps — and fills the live handles that refer to it
// (also those whose content a replayed content.stored brought), so that
// packs need no I/O.
func resolveContent(ctx context.Context, store Store, st *frames.State) error {
	need := st.UnresolvedContent()
	if len(need) == 0 {
		// Handles may still wait for content a replayed record brought.
		if err := st.ResolveContent(nil); err != nil {
			return &CorruptionError{Stream: st.Scope, Version: st.Version, Reason: err.Error()}
		}
		return nil
	}
	// One walk over the range the needed records lie in: a record read
	// on its own costs a transaction and a chain check each.
	want := make(map[int64][]string, len(need))
	lo, hi := need[0].Version, need[0].Version
	for _, n := range need {
		want[n.Version] = append(want[n.Version], n.Hash)
		lo, hi = min(lo, n.Version), max(hi, n.Version)
	}
	found := make(map[string]string, len(need))
	err := store.ReadStream(ctx, st.Scope, lo, func(r Record) error {
		if r.Version > hi {
			return errStopRead
		}
		hashes, ok := want[r.Version]
		if !ok {
			return nil
		}
		ev, err := DecodeFrameEvent(r)
		if err != nil {
			return err
		}
		for _, h := range hashes {
			content, ok := frames.ContentOf(ev, h)
			if !ok {
				return &CorruptionError{Stream: st.Scope, Version: r.Version,
					Reason: fmt.Sprintf("the state refers to content %s stored here, the record (%s) does not hold it", h, ev.EventType())}
			}
			found[h] = content
		}
		delete(want, r.Version)
		return nil
	})
	if err != nil && !errors.Is(err, errStopRead) {
		return err
	}
	for v := range want {
		return &CorruptionError{Stream: st.Scope, Version: v, Reason: "the state refers to content stored in a record that is not there"}
	}
	if err := st.ResolveContent(found); err != nil {
		return &CorruptionError{Stream: st.Scope, Version: st.Version, Reason: err.Error()}
	}
	return nil
}
