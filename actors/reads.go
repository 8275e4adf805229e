package actors

import (
	"context"
	"errors"
	"time"

	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// MinPackBudget is the smallest budget AssembleContextPack accepts.
const MinPackBudget = frames.MinPackBudget

func summary(f *frames.Frame) messages.FrameSummary {
	s := messages.FrameSummary{
		ID: f.ID, ParentID: f.ParentID, Goal: f.Goal, Status: f.Status, Depth: f.Depth, Budget: f.Budget,
		Limits: f.Limits, Cost: f.Cost, Handles: len(f.Handles), ContextTokens: f.ContextTokens, Results: len(f.Results),
		Children: append([]string(nil), f.Children...), InDoubt: f.InDoubt(), CreatedAt: f.CreatedAt, CompletedAt: f.CompletedAt,
	}
	if f.Suspension != nil {
		sp := *f.Suspension
		s.Suspension = &sp
	}
	return s
}

func summaries(fs []*frames.Frame) []messages.FrameSummary {
	out := make([]messages.FrameSummary, len(fs))
	for i, f := range fs {
		out[i] = summary(f)
	}
	return out
}

func (h *handler) getFrame(ctx context.Context, r *messages.GetFrame) messages.Reply {
	e, _, err := h.load(ctx, r.Scope)
	if err != nil {
		return failure(r, toWire(err))
	}
	f, err := frames.LookupFrame(h.cfg.Frames, e.st, r.FrameID)
	if err != nil {
		return failure(r, toWire(err))
	}
	c := f.Clone()
	if !r.WithHandles {
		c.Handles = nil
	}
	return &messages.GetFrameReply{Result: messages.Result{Version: e.st.Version}, Frame: c}
}

func (h *handler) getStack(ctx context.Context, r *messages.GetStack) messages.Reply {
	e, _, err := h.load(ctx, r.Scope)
	if err != nil {
		return failure(r, toWire(err))
	}
	f, err := frames.LookupFrame(h.cfg.Frames, e.st, r.FrameID)
	if err != nil {
		return failure(r, toWire(err))
	}
	return &messages.GetStackReply{Result: messages.Result{Version: e.st.Version}, Frames: summaries(e.st.Ancestry(f.ID))}
}

// resumeActor rebuilds a scope for an actor that (re)started. On a scope
// with events it appends actor.resumed (unless the request id is a repeat).
func (h *handler) resumeActor(ctx context.Context, r *messages.ResumeActor) (messages.Reply, *write) {
	start := time.Now()
	e, info, err := h.load(ctx, r.Scope)
	if err != nil {
		return failure(r, toWire(err)), nil
	}
	st := e.st
	recovered := frames.Recover(st)
	build := func() (messages.Reply, error) {
		out := &messages.ActorResumeState{Result: messages.Result{Version: st.Version}}
		if st.Version > 0 {
			rec := frames.Recover(st) // as it stands once actor.resumed is applied
			if rec.Current != nil {
				s := summary(rec.Current)
				out.CurrentFrame = &s
				out.FrameStack = summaries(rec.Stack)
			}
			out.LiveFrames = summaries(rec.Live)
			out.PendingWork = rec.Pending
			seq, err := h.store.LastSeq(ctx)
			if err != nil {
				return nil, err
			}
			out.Recovery = messages.RecoverySummary{FramesRecovered: len(rec.Live), PendingWorkItems: len(rec.Pending), LastEventSeq: seq}
		}
		out.Recovery.FromSnapshot = info.FromSnapshot
		out.Recovery.EventsReplayed = info.Replayed
		out.Recovery.RecoveryMicros = time.Since(start).Microseconds()
		return out, nil
	}
	reqID := r.RequestID
	if reqID == "" {
		return failure(r, messages.Errorf(messages.CodeInvalidArgument, "request id is required on %T (the Client sets one)", r)), nil
	}
	if err := frames.ValidateID("request id", reqID, h.cfg.Frames.MaxIDBytes); err != nil {
		return failure(r, toWire(err)), nil
	}
	hash, err := requestHash(r)
	if err != nil {
		return failure(r, toWire(err)), nil
	}
	now := h.cfg.Clock().UnixNano()
	_, dup, err := st.CheckRequest(reqID, hash, now)
	if err != nil {
		return failure(r, toWire(err)), nil
	}
	if st.Version == 0 || dup {
		reply, err := build()
		if err != nil {
			return failure(r, toWire(err)), nil
		}
		return reply, nil
	}
	seq, err := h.store.LastSeq(ctx)
	if err != nil {
		return failure(r, toWire(err)), nil
	}
	cmd := recovered.Command(frames.Header{RequestID: reqID, RequestHash: hash, Now: now, Reason: r.Reason}, seq)
	evs, err := frames.Decide(h.cfg.Frames, st, cmd)
	if err != nil {
		return failure(r, toWire(err)), nil
	}
	w, err := h.begin(r, e, evs)
	if err != nil {
		return failure(r, toWire(err)), nil
	}
	w.reply = func(*write) (messages.Reply, error) { return build() }
	return nil, w
}

// assemble builds a context pack with frames.AssemblePack, reusing the
// shard's buffers, and turns it into the reply.
func (h *handler) assemble(ctx context.Context, r *messages.AssembleContextPack) messages.Reply {
	e, _, err := h.load(ctx, r.Scope)
	if err != nil {
		return failure(r, toWire(err))
	}
	p, err := frames.AssemblePack(h.cfg.Frames, e.st, frames.PackQuery{FrameID: r.FrameID, Budget: r.BudgetTokens, Role: r.Role,
		Include: r.IncludeHandles, Exclude: r.ExcludeHandles, MinLevel: r.MinCompaction, Counter: h.cfg.Counter, Summarizer: h.cfg.Summarizer}, &h.pack)
	if err != nil {
		return failure(r, packError(err))
	}
	crumbs := make([]messages.Breadcrumb, len(p.Breadcrumbs))
	for i, b := range p.Breadcrumbs {
		crumbs[i] = messages.Breadcrumb{FrameID: b.FrameID, Depth: b.Depth, Status: b.Status, Text: b.Text}
	}
	segs := make([]messages.Segment, len(p.Segments))
	for i, it := range p.Segments {
		segs[i] = messages.Segment{HandleID: it.ID, Kind: it.Kind, Priority: it.Priority, Content: it.Content,
			Tokens: it.Tokens, Group: it.Group, Covers: it.Covers}
	}
	return &messages.ContextPack{
		Result:       messages.Result{Version: p.Version},
		Metadata:     messages.PackMetadata{Scope: p.Scope, FrameID: p.FrameID, AssembledAt: h.cfg.Clock().UnixNano(), Counter: h.cfg.CounterName},
		BriefContext: p.Brief,
		Breadcrumbs:  crumbs,
		Segments:     segs,
		TokenSummary: messages.TokenSummary{Budget: p.Budget, Used: p.Used, Remaining: p.Budget - p.Used,
			Breakdown:       messages.TokenBreakdown{Brief: p.BriefTokens, Breadcrumbs: p.CrumbTokens, Segments: p.SegmentTokens},
			CompactionLevel: p.Level},
		Dropped:    p.Dropped,
		Summarized: p.Summarized,
	}
}

// packError is toWire, with the minimum budget a pack refuses under.
func packError(err error) *messages.Error {
	var small *frames.BudgetTooSmallError
	if errors.As(err, &small) {
		return &messages.Error{Code: messages.CodeBudgetTooSmall, Needed: small.Needed, Message: small.Error()}
	}
	return toWire(err)
}
