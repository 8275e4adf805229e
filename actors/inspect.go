package actors

import (
	"context"
	"errors"
	"slices"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// The reads an inspector makes (messages/inspect.go): a scope as it stands
// (GetScope, from the state: the recovery report of frames.Recover without
// the actor.resumed ResumeActor records) and its history (ReadScope, from
// its own log, off the shard). Neither appends anything.

// readChunk is how many versions ReadScope reads at once, walking back.
const readChunk = 256

// getScope answers GetScope from the scope's state.
func (h *handler) getScope(st *frames.State, r *messages.GetScope) messages.Reply {
	limit := r.Limit
	switch {
	case limit == 0:
		limit = messages.DefaultScopeFrames
	case limit < 0 || limit > messages.MaxScopeFrames:
		return failure(r, messages.Errorf(messages.CodeInvalidArgument, "a page of %d frames: 1 to %d", limit, messages.MaxScopeFrames))
	}
	if r.After < 0 {
		return failure(r, messages.Errorf(messages.CodeInvalidArgument, "after %d: a version", r.After))
	}
	out := &messages.GetScopeReply{Result: messages.Result{Version: st.Version}, Finished: st.Finished, Chains: len(st.Chains),
		RemovedThrough: st.RemovedThrough, LastAt: st.LastAt, Counter: st.Counter}
	if st.Version == 0 {
		return out
	}
	rec := frames.Recover(st)
	if rec.Current != nil {
		out.Top = rec.Current.ID
	}
	out.Live = len(rec.Live)
	for _, f := range rec.Live {
		if f.PushSeq <= r.After {
			continue
		}
		if len(out.Frames) == limit {
			out.Next = out.Frames[len(out.Frames)-1].PushVersion
			break
		}
		out.Frames = append(out.Frames, messages.ScopeFrame{FrameSummary: summary(st, f), PushVersion: f.PushSeq,
			ContextWindow: f.ContextWindow, ChainRoot: f.ChainRoot, ContinuedFrom: f.ContinuedFrom,
			Reservation: f.Reservation, Outstanding: f.Outstanding, ToolCalls: len(f.ToolCalls)})
	}
	out.PendingTotal, out.AbandonedTotal = len(rec.Pending), len(st.Abandoned)
	out.Pending = rec.Pending[:min(len(rec.Pending), messages.MaxScopePending)]
	for _, a := range st.Abandoned[:min(len(st.Abandoned), messages.MaxScopePending)] {
		a.Call.Input = slices.Clone(a.Call.Input)
		out.Abandoned = append(out.Abandoned, a)
	}
	return out
}

// readScope reads a page of the scope's events, newest first, off the
// shard.
func (h *handler) readScope(st *frames.State, r *messages.ReadScope) outcome {
	limit := r.Limit
	switch {
	case limit == 0:
		limit = messages.DefaultScopeEvents
	case limit < 0 || limit > messages.MaxScopeEvents:
		return replied(failure(r, messages.Errorf(messages.CodeInvalidArgument, "a page of %d events: 1 to %d", limit, messages.MaxScopeEvents)))
	}
	if r.Before < 0 {
		return replied(failure(r, messages.Errorf(messages.CodeInvalidArgument, "before %d: a version", r.Before)))
	}
	for _, reason := range r.Reasons {
		if reason > frames.ReasonRunFinished {
			return replied(failure(r, messages.Errorf(messages.CodeInvalidArgument, "unknown checkpoint reason %d", reason)))
		}
	}
	if r.FrameID != "" {
		if err := frames.ValidateID("frame id", r.FrameID, h.cfg.Frames.MaxIDBytes); err != nil {
			return replied(failure(r, toWire(err)))
		}
	}
	scope, version, removed := st.Scope, st.Version, st.RemovedThrough
	top := version
	if r.Before > 0 && r.Before-1 < top {
		top = r.Before - 1
	}
	filtered := r.FrameID != "" || len(r.Reasons) > 0
	type page struct {
		out *messages.ReadScopeReply
		err error
	}
	return outcome{job: &job{scope: scope,
		run: func() any {
			out := &messages.ReadScopeReply{Result: messages.Result{Version: version}, RemovedThrough: removed}
			size, examined := 0, 0
			hi := top
			for hi > removed {
				lo := max(removed+1, hi-readChunk+1)
				var chunk []eventstore.Record
				err := h.store.ReadStream(context.Background(), scope, lo, func(rec eventstore.Record) error {
					if rec.Version > hi {
						return errStop
					}
					chunk = append(chunk, rec)
					return nil
				})
				if err != nil && !errors.Is(err, errStop) {
					return page{err: err}
				}
				for i := len(chunk) - 1; i >= 0; i-- {
					rec := chunk[i]
					examined++
					var meta frames.Meta
					if err := eventstore.Unmarshal(rec.Data, &meta); err != nil {
						return page{err: err}
					}
					if (r.FrameID != "" && meta.Frame != r.FrameID) || (len(r.Reasons) > 0 && !slices.Contains(r.Reasons, meta.Reason)) {
						continue
					}
					ev := messages.SubscribedEvent{Seq: rec.Seq, Scope: rec.Stream, Version: rec.Version, Type: rec.Type,
						Frame: meta.Frame, At: meta.At, Data: rec.Data}
					n := len(ev.Data) + len(ev.Scope) + len(ev.Type) + len(ev.Frame) + 48
					if len(out.Events) > 0 && size+n > messages.MaxScopeEventBytes {
						out.Next = out.Events[len(out.Events)-1].Version
						return page{out: out}
					}
					size += n
					out.Events = append(out.Events, ev)
					if len(out.Events) == limit {
						if rec.Version-1 > removed {
							out.Next = rec.Version
						}
						return page{out: out}
					}
				}
				hi = lo - 1
				if filtered && examined >= messages.ScopeEventsExamined && hi > removed {
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
