package actors

import (
	"context"
	"errors"
	"math"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// Scope state in the shell: the protocol's operations translated to the
// core's (frames/kv.go has the rules), and StateHistory, which reads the
// log.

// Bounds of a StateHistory page.
const (
	defaultHistoryLimit = 20
	defaultRangeLimit   = 100
	// historyExamine bounds the events one page reads; historyChunk is how
	// many versions it reads at once, walking back.
	historyExamine = 100_000
	historyChunk   = 512
)

// stateOps translates a ChangeState's operations (TTLs in milliseconds).
func stateOps(ops []messages.StateOp) ([]frames.StateOp, error) {
	out := make([]frames.StateOp, len(ops))
	for i, op := range ops {
		ttl := op.TTLMillis
		switch {
		case ttl > math.MaxInt64/1_000_000:
			return nil, messages.Errorf(messages.CodeInvalidArgument, "operation %d: a TTL of %d ms", i+1, ttl)
		case ttl > 0:
			ttl *= 1_000_000
		}
		out[i] = frames.StateOp{Kind: op.Kind, Frame: op.FrameID, Key: op.Key, Prefix: op.Prefix, Value: op.Value,
			IfVersion: op.IfVersion, TTL: ttl, Sliding: op.Sliding, Keep: op.Keep}
	}
	return out, nil
}

// stateHistory reads key's changes from the scope's log, newest first,
// below r.Before, off the shard.
func (h *handler) stateHistory(st *frames.State, r *messages.StateHistory) outcome {
	if err := frames.CheckStateLevel(st, r.FrameID, h.cfg.Frames); err != nil {
		return replied(failure(r, toWire(err)))
	}
	if err := frames.ValidateStateKey(r.Key, h.cfg.Frames.MaxStateKeyBytes); err != nil {
		return replied(failure(r, toWire(err)))
	}
	limit := r.Limit
	switch {
	case limit == 0:
		limit = defaultHistoryLimit
	case limit < 0 || limit > frames.MaxStateOps:
		return replied(failure(r, messages.Errorf(messages.CodeInvalidArgument, "a page of %d changes: 1 to %d", limit, frames.MaxStateOps)))
	}
	if r.Before < 0 {
		return replied(failure(r, messages.Errorf(messages.CodeInvalidArgument, "before %d: a version", r.Before)))
	}
	scope, version, removed := st.Scope, st.Version, st.RemovedThrough
	top := version // the newest version to read
	if r.Before > 0 && r.Before-1 < top {
		top = r.Before - 1
	}
	type page struct {
		out *messages.StateHistoryReply
		err error
	}
	return outcome{job: &job{scope: scope,
		run: func() any {
			out := &messages.StateHistoryReply{Result: messages.Result{Version: version}, RemovedThrough: removed}
			examined := 0
			hi := top
			for hi > removed {
				lo := max(removed+1, hi-historyChunk+1)
				var found []messages.StateChangeRecord
				err := h.store.ReadStream(context.Background(), scope, lo, func(rec eventstore.Record) error {
					if rec.Version > hi {
						return errStop
					}
					examined++
					if rec.Type != frames.TypeStateChanged && rec.Type != frames.TypeStateExpired {
						return nil
					}
					ev, err := eventstore.DecodeFrameEvent(rec)
					if err != nil {
						return err
					}
					if en, kind, ok := frames.StateHistoryOf(ev, r.FrameID, r.Key); ok {
						if en.Version == 0 || kind != "expired" {
							en.Version = rec.Version
						}
						found = append(found, messages.StateChangeRecord{Version: rec.Version, At: ev.EventMeta().At, Kind: kind, Entry: en})
					}
					return nil
				})
				if err != nil && !errors.Is(err, errStop) {
					return page{err: err}
				}
				for i := len(found) - 1; i >= 0; i-- {
					out.Changes = append(out.Changes, found[i])
					if len(out.Changes) == limit {
						if found[i].Version-1 > removed {
							out.Next = found[i].Version
						}
						return page{out: out}
					}
				}
				hi = lo - 1
				if examined >= historyExamine && hi > removed {
					out.Next = hi + 1
					break
				}
			}
			return page{out: out}
		},
		finish: func(v any) outcome {
			p := v.(page)
			if p.err != nil {
				return replied(failure(r, toWire(p.err)))
			}
			return replied(p.out)
		}}}
}
