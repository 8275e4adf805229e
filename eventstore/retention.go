package eventstore

import (
	"context"

	"github.com/stateindex/stateindex/frames"
)

// What a retention pass reads from a scope's log (frames.PlanRetention
// decides from it).

// HistoryScan is a scope's stored history as retention sees it.
type HistoryScan struct {
	Base Base  // where the stored history begins
	Head int64 // the scope's version
	// Finished are the frame.popped records after the base, in order.
	Finished []frames.FinishedFrame
	// FirstSince is the first version whose server time is at or after the
	// time ScanHistory was given (0 if none).
	FirstSince int64
	// RecordedThrough is the latest scope.retention_applied's or
	// scope.destroyed's Through: a removal the store may not have finished
	// (0 if none).
	RecordedThrough int64
	// Destroyed says the removal recorded is a destroy's (its request ids
	// are kept: KeepRequestsSince).
	Destroyed bool
	// LiveChains are the roots of the continuation chains with a link
	// pushed after the base and not popped: chains whose head is live
	// (frames.RetentionInput.LiveChains).
	LiveChains map[string]bool
	// Within maps each version after the base that is not the first of
	// its request's records to the first (a continuation, a cascade): a
	// cut must not fall inside a request (frames.RetentionInput.Within).
	Within map[int64]int64
	// FirstStateSince is the first scope state change (state.changed,
	// state.expired) whose server time is at or after StateSince's (0 if
	// none, or without the option): frames.RetentionInput.StateFrom.
	FirstStateSince int64
}

// ScanOption tunes ScanHistory.
type ScanOption func(*scanOptions)

type scanOptions struct {
	stateSince int64
	state      bool
}

// StateSince makes ScanHistory find the first scope state change at or
// after since, a server time (unix ns): HistoryScan.FirstStateSince.
func StateSince(since int64) ScanOption {
	return func(o *scanOptions) { o.stateSince, o.state = since, true }
}

// ScanHistory reads scope's records after its base. since is a server time
// (unix ns): FirstSince is the first record at or after it.
func ScanHistory(ctx context.Context, store Store, scope string, since int64, opts ...ScanOption) (HistoryScan, error) {
	var sc HistoryScan
	var o scanOptions
	for _, opt := range opts {
		opt(&o)
	}
	var err error
	if sc.Base, err = store.StreamBase(ctx, scope); err != nil {
		return sc, err
	}
	info, err := store.Stream(ctx, scope)
	if err != nil {
		return sc, err
	}
	sc.Head = info.Version
	chainPush := map[string]string{} // link pushed → its chain's root, until popped
	var req string
	var reqStart int64
	err = store.ReadStream(ctx, scope, sc.Base.Version+1, func(r Record) error {
		if sc.FirstSince == 0 && metaAt(r.Data) >= since {
			sc.FirstSince = r.Version
		}
		if o.state && sc.FirstStateSince == 0 && (r.Type == frames.TypeStateChanged || r.Type == frames.TypeStateExpired) && metaAt(r.Data) >= o.stateSince {
			sc.FirstStateSince = r.Version
		}
		if q := metaRequest(r.Data); q == "" || q != req {
			req, reqStart = q, r.Version
		} else {
			if sc.Within == nil {
				sc.Within = map[int64]int64{}
			}
			sc.Within[r.Version] = reqStart
		}
		switch r.Type {
		case frames.TypeFramePushed:
			ev, err := DecodeFrameEvent(r)
			if err != nil {
				return err
			}
			if p := ev.(*frames.FramePushed); p.ChainRoot != "" {
				chainPush[p.Frame] = p.ChainRoot
			}
		case frames.TypeFramePopped:
			ev, err := DecodeFrameEvent(r)
			if err != nil {
				return err
			}
			p := ev.(*frames.FramePopped)
			delete(chainPush, p.Frame)
			ff := frames.FinishedFrame{Frame: p.Frame, Last: r.Version, FinishedAt: p.At}
			if p.Final != nil {
				ff.Parent, ff.First, ff.ChainRoot = p.Final.ParentID, p.Final.PushSeq, p.Final.ChainRoot
			} else if ff.Parent, ff.First, err = pushOf(ctx, store, scope, p.Frame); err != nil {
				return err
			}
			sc.Finished = append(sc.Finished, ff)
		case frames.TypeRetention:
			ev, err := DecodeFrameEvent(r)
			if err != nil {
				return err
			}
			sc.RecordedThrough, sc.Destroyed = ev.(*frames.RetentionApplied).Through, false
		case frames.TypeScopeDestroyed:
			ev, err := DecodeFrameEvent(r)
			if err != nil {
				return err
			}
			if th := ev.(*frames.ScopeDestroyed).Through; th > 0 {
				sc.RecordedThrough, sc.Destroyed = th, true
			}
		}
		return nil
	})
	for _, root := range chainPush {
		if sc.LiveChains == nil {
			sc.LiveChains = map[string]bool{}
		}
		sc.LiveChains[root] = true
	}
	return sc, err
}

// pushOf finds a frame's parent and frame.pushed version through the index
// (for frame.popped records written before they carried the frame's record).
func pushOf(ctx context.Context, store Store, scope, id string) (string, int64, error) {
	sp, ok, err := store.Lookup(ctx, scope, FrameKey(id))
	if err != nil || !ok {
		return "", 0, err
	}
	ev, err := readOne(ctx, store, scope, sp.First)
	if err != nil {
		return "", 0, err
	}
	if p, ok := ev.(*frames.FramePushed); ok {
		return p.ParentID, sp.First, nil
	}
	return "", sp.First, nil // pushed before the base: its push is gone
}

// metaRequest reads the "_q" (request id) field of an event's metadata;
// "" if it has none.
func metaRequest(data []byte) string {
	r := mpReader{b: data}
	n, err := r.mapLen()
	if err != nil {
		return ""
	}
	for i := 0; i < n; i++ {
		k, err := r.str()
		if err != nil || len(k) != 2 || k[0] != '_' {
			return ""
		}
		switch k[1] {
		case 'q':
			q, err := r.str()
			if err != nil {
				return ""
			}
			return string(q)
		case 't':
			if _, err := r.int(); err != nil {
				return ""
			}
		case 's', 'f':
			if _, err := r.str(); err != nil {
				return ""
			}
		default:
			return ""
		}
	}
	return ""
}

// metaAt reads the "_t" (server time) field of an event's metadata; 0 if it
// has none.
func metaAt(data []byte) int64 {
	r := mpReader{b: data}
	n, err := r.mapLen()
	if err != nil {
		return 0
	}
	for i := 0; i < n; i++ {
		k, err := r.str()
		if err != nil || len(k) != 2 || k[0] != '_' {
			return 0
		}
		switch k[1] {
		case 't':
			v, err := r.int()
			if err != nil {
				return 0
			}
			return v
		case 's', 'f', 'q':
			if _, err := r.str(); err != nil {
				return 0
			}
		default:
			return 0
		}
	}
	return 0
}

// LastRecord reads scope's head record: its version, server time (unix
// ns) and type — what inactivity expiry looks at. ok is false for a scope
// with no record stored.
func LastRecord(ctx context.Context, store Store, scope string) (version, at int64, typ string, ok bool, err error) {
	info, err := store.Stream(ctx, scope)
	if err != nil || info.Version == 0 {
		return 0, 0, "", false, err
	}
	r, ok, err := ReadRecord(ctx, store, scope, info.Version)
	if err != nil || !ok {
		return 0, 0, "", false, err
	}
	return r.Version, metaAt(r.Data), r.Type, true, nil
}
