package eventstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/stateindex/stateindex/frames"
)

// A scope's history in the store: what its live projection (frames.State)
// no longer holds — finished frames and committed requests — answered from
// the per-stream index and the log.

// History returns the frames.History of scope in store. LoadState gives
// every state it loads one.
func History(store Store, scope string) frames.History { return scopeHistory{store, scope} }

type scopeHistory struct {
	store Store
	scope string
}

var errStopRead = errors.New("stop")

// readOne returns the event of scope at version.
func readOne(ctx context.Context, store Store, scope string, version int64) (frames.Event, error) {
	r, ok, err := ReadRecord(ctx, store, scope, version)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &CorruptionError{Stream: scope, Version: version, Reason: "the index names a record that is not there"}
	}
	return DecodeFrameEvent(r)
}

// FinishedFrame implements frames.History: a frame the index knows whose
// last record is its frame.popped (ok is false for a live one too).
func (h scopeHistory) FinishedFrame(id string) (frames.Status, bool, error) {
	ctx := context.Background()
	sp, ok, err := h.store.Lookup(ctx, h.scope, FrameKey(id))
	if err != nil || !ok {
		return 0, false, err
	}
	ev, err := readOne(ctx, h.store, h.scope, sp.Last)
	if err != nil {
		return 0, false, err
	}
	pop, ok := ev.(*frames.FramePopped)
	if !ok || pop.Frame != id {
		return 0, false, nil // still live
	}
	return pop.Status, true, nil
}

// Request implements frames.History: the records the request wrote, its
// digest and time from the first of them.
func (h scopeHistory) Request(id string) (frames.RequestRecord, bool, error) {
	ctx := context.Background()
	sp, ok, err := h.store.Lookup(ctx, h.scope, RequestKey(id))
	if err != nil || !ok {
		return frames.RequestRecord{}, false, err
	}
	base, err := h.store.StreamBase(ctx, h.scope)
	if err != nil {
		return frames.RequestRecord{}, false, err
	}
	if sp.First <= base.Version {
		// A tombstone a destroy kept (KeepRequestsSince): applied, its
		// records gone.
		return frames.RequestRecord{ID: id, FirstVersion: sp.First, LastVersion: sp.Last, Gone: true}, true, nil
	}
	ev, err := readOne(ctx, h.store, h.scope, sp.First)
	if err != nil {
		return frames.RequestRecord{}, false, err
	}
	m := ev.EventMeta()
	if m.RequestID != id {
		return frames.RequestRecord{}, false, &CorruptionError{Stream: h.scope, Version: sp.First, Reason: "the index names a record of another request"}
	}
	return frames.RequestRecord{ID: id, Hash: m.RequestHash, FirstVersion: sp.First, LastVersion: sp.Last, At: m.At}, true, nil
}

// LoadFinishedFrame rebuilds a finished frame of scope in full, handles
// included, from its own records (frames.RebuildFinished); a frame whose
// frame.popped carries no record (written by an earlier build) is taken
// from a fold of the log through it that keeps finished frames. A frame
// the scope never had is frames.ErrFrameNotFound.
func LoadFinishedFrame(ctx context.Context, store Store, scope, id string) (*frames.Frame, error) {
	sp, ok, err := store.Lookup(ctx, scope, FrameKey(id))
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: %q", frames.ErrFrameNotFound, id)
	}
	base, err := store.StreamBase(ctx, scope)
	if err != nil {
		return nil, err
	}
	// A frame whose first records were removed while it was live (it was
	// in the snapshot then): its record stands for it, without its handles.
	fromFinal := func() (*frames.Frame, error) {
		ev, err := readOne(ctx, store, scope, sp.Last)
		if err != nil {
			return nil, err
		}
		if p, ok := ev.(*frames.FramePopped); ok && p.Final != nil {
			return frames.FromRecord(p.Final), nil
		}
		return nil, fmt.Errorf("%w: %q (its history was removed)", frames.ErrFrameNotFound, id)
	}
	if sp.First <= base.Version {
		return fromFinal()
	}
	var own []frames.Versioned
	err = store.ReadStream(ctx, scope, sp.First, func(r Record) error {
		if r.Version > sp.Last {
			return errStopRead
		}
		// Its own records, and the content its handles may refer to.
		if f, _ := metaKeys(r.Data); string(f) != id && r.Type != frames.TypeContentStored {
			return nil
		}
		ev, err := DecodeFrameEvent(r)
		if err != nil {
			return err
		}
		own = append(own, frames.Versioned{Version: r.Version, Event: ev})
		return nil
	})
	if err != nil && !errors.Is(err, errStopRead) {
		return nil, err
	}
	if len(own) > 0 && base.Version > 0 {
		if _, pushed := own[0].Event.(*frames.FramePushed); !pushed {
			// Every record it had when history was removed was removed (it
			// was live, in the snapshot): the removal dropped its index
			// entry with them, and its later records started a new one.
			return fromFinal()
		}
	}
	f, ok, err := frames.RebuildFinished(own)
	if err != nil {
		return nil, &CorruptionError{Stream: scope, Version: sp.First, Reason: err.Error()}
	}
	if ok {
		return f, nil
	}
	st, err := LoadAll(ctx, store, scope, sp.Last)
	if err != nil {
		return nil, err
	}
	if f = st.Frame(id); f == nil || f.Status.Live() {
		return nil, &CorruptionError{Stream: scope, Version: sp.Last, Reason: fmt.Sprintf("frame %s did not finish where the index says", quoteString(id))}
	}
	return f, nil
}

// LoadAll folds scope's log from its first record through version through
// (0: its head) keeping finished frames (frames.State.KeepFinished): the
// whole history, for tools. It reads every record: use LoadState to serve.
func LoadAll(ctx context.Context, store Store, scope string, through int64) (*frames.State, error) {
	st := newState(scope, 0, 0)
	st.KeepFinished = true
	err := store.ReadStream(ctx, scope, 1, func(r Record) error {
		if through > 0 && r.Version > through {
			return errStopRead
		}
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
		return nil
	})
	if err != nil && !errors.Is(err, errStopRead) {
		return nil, err
	}
	return st, nil
}
