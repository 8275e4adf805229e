package actors

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// MinPackBudget is the smallest budget AssembleContextPack accepts.
const MinPackBudget = 500

// Goals are cut short in the brief context and the breadcrumbs so that
// neither can crowd out the segments.
const (
	briefGoalBytes = 1024
	crumbGoalBytes = 120
)

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

// lookup resolves a read's frame: the named one, or the top of the stack.
func lookup(cfg frames.Config, st *frames.State, id string) (*frames.Frame, error) {
	id, err := resolveFrame(st, id)
	if err != nil {
		return nil, err
	}
	if err := frames.ValidateID("frame id", id, cfg.MaxIDBytes); err != nil {
		return nil, err
	}
	f := st.Frame(id)
	if f == nil {
		return nil, fmt.Errorf("%w: %q", frames.ErrFrameNotFound, id)
	}
	return f, nil
}

func (h *handler) getFrame(ctx context.Context, r *messages.GetFrame) messages.Reply {
	e, _, err := h.load(ctx, r.Scope)
	if err != nil {
		return failure(r, toWire(err))
	}
	f, err := lookup(h.cfg.Frames, e.st, r.FrameID)
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
	f, err := lookup(h.cfg.Frames, e.st, r.FrameID)
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
	build := func() (messages.Reply, error) {
		out := &messages.ActorResumeState{Result: messages.Result{Version: st.Version}}
		if st.Version > 0 {
			if top := st.TopOfStack(); top != nil {
				s := summary(top)
				out.CurrentFrame = &s
				out.FrameStack = summaries(st.Ancestry(top.ID))
			}
			live := st.LiveFrames()
			out.LiveFrames = summaries(live)
			out.PendingWork = st.Pending()
			seq, err := h.store.LastSeq(ctx)
			if err != nil {
				return nil, err
			}
			out.Recovery = messages.RecoverySummary{FramesRecovered: len(live), PendingWorkItems: len(out.PendingWork), LastEventSeq: seq}
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
	cmd := &frames.ResumeActor{Header: frames.Header{RequestID: reqID, RequestHash: hash, Now: now, Reason: r.Reason},
		FramesRecovered: int64(len(st.LiveFrames())), PendingItems: int64(len(st.Pending())), LastSeq: seq}
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

// assemble builds a context pack: a brief context, breadcrumbs of the
// frame's ancestry, and the frame's handles fitted to what is left of the
// budget by package compaction. Every part is counted as emitted.
func (h *handler) assemble(ctx context.Context, r *messages.AssembleContextPack) messages.Reply {
	if r.BudgetTokens < MinPackBudget {
		return failure(r, &messages.Error{Code: messages.CodeBudgetTooSmall, Needed: MinPackBudget,
			Message: fmt.Sprintf("budget %d is under the minimum of %d tokens", r.BudgetTokens, MinPackBudget)})
	}
	if !r.MinCompaction.Valid() {
		return failure(r, messages.Errorf(messages.CodeInvalidArgument, "min compaction level %d", r.MinCompaction))
	}
	if err := checkText("role", r.Role, h.cfg.Frames.MaxNameBytes); err != nil {
		return failure(r, toWire(err))
	}
	e, _, err := h.load(ctx, r.Scope)
	if err != nil {
		return failure(r, toWire(err))
	}
	st := e.st
	f, err := lookup(h.cfg.Frames, st, r.FrameID)
	if err != nil {
		return failure(r, toWire(err))
	}
	include, err := idSet(f, r.IncludeHandles, true)
	if err != nil {
		return failure(r, toWire(err))
	}
	exclude, _ := idSet(f, r.ExcludeHandles, false)
	for id := range include {
		if exclude[id] {
			return failure(r, messages.Errorf(messages.CodeInvalidArgument, "handle %q is both included and excluded", id))
		}
	}

	c := h.cfg.Counter
	role := r.Role
	if role == "" {
		role = "agent"
	}
	brief := "Role: " + role + "\nScope: " + st.Scope + "\nGoal: " + cut(f.Goal, briefGoalBytes)
	briefTokens := c.Count(brief)

	ancestry := st.Ancestry(f.ID)
	crumbs := make([]messages.Breadcrumb, len(ancestry))
	crumbTokens := make([]int64, len(ancestry))
	var crumbTotal int64
	for i, a := range ancestry {
		crumbs[i] = messages.Breadcrumb{FrameID: a.ID, Depth: a.Depth, Status: a.Status,
			Text: fmt.Sprintf("%d. [%s] %s", a.Depth, a.Status, cut(a.Goal, crumbGoalBytes))}
		crumbTokens[i] = c.Count(crumbs[i].Text)
		crumbTotal += crumbTokens[i]
	}
	// Breadcrumbs go from the root side first; the frame's own stays.
	for len(crumbs) > 1 && briefTokens+crumbTotal > r.BudgetTokens {
		crumbTotal -= crumbTokens[0]
		crumbs, crumbTokens = crumbs[1:], crumbTokens[1:]
	}
	room := r.BudgetTokens - briefTokens - crumbTotal
	if room < 0 {
		return failure(r, &messages.Error{Code: messages.CodeCriticalExceedsBudget, Needed: briefTokens + crumbTotal,
			Message: fmt.Sprintf("brief context and breadcrumb need %d tokens, budget is %d", briefTokens+crumbTotal, r.BudgetTokens)})
	}

	// The items buffer and the fitter are the shard's, reused across packs;
	// handle ids are unique per frame (frames refuses duplicates), so the
	// fitter need not check them again.
	h.items = handleItems(h.items, f.Handles, include, exclude)
	fit, err := h.fitter.Fit(h.items, room, compaction.FitOptions{Counter: c, Summarizer: h.cfg.Summarizer, MinLevel: r.MinCompaction, TrustIDs: true})
	if err != nil {
		var coe *compaction.CriticalOverflowError
		if errors.As(err, &coe) {
			need := coe.Needed + briefTokens + crumbTotal
			return failure(r, &messages.Error{Code: messages.CodeCriticalExceedsBudget, Needed: need,
				Message: fmt.Sprintf("critical content needs %d tokens with the brief context and breadcrumbs, budget is %d", need, r.BudgetTokens)})
		}
		return failure(r, toWire(err))
	}
	used := briefTokens + crumbTotal + fit.Tokens
	if used > r.BudgetTokens {
		return failure(r, messages.Errorf(messages.CodeInternal, "pack of %d tokens over budget %d", used, r.BudgetTokens))
	}
	defer clear(h.items) // drop references to contents until the next pack
	segs := make([]messages.Segment, len(fit.Items))
	for i, it := range fit.Items {
		segs[i] = messages.Segment{HandleID: it.ID, Kind: it.Kind, Priority: it.Priority, Content: it.Content,
			Tokens: it.Tokens, Group: it.Group, Covers: it.Covers}
	}
	return &messages.ContextPack{
		Result:       messages.Result{Version: st.Version},
		Metadata:     messages.PackMetadata{Scope: st.Scope, FrameID: f.ID, AssembledAt: h.cfg.Clock().UnixNano(), Counter: h.cfg.CounterName},
		BriefContext: brief,
		Breadcrumbs:  crumbs,
		Segments:     segs,
		TokenSummary: messages.TokenSummary{Budget: r.BudgetTokens, Used: used, Remaining: r.BudgetTokens - used,
			Breakdown:       messages.TokenBreakdown{Brief: briefTokens, Breadcrumbs: crumbTotal, Segments: fit.Tokens},
			CompactionLevel: fit.Level},
		Dropped:    fit.Dropped,
		Summarized: fit.Summarized,
	}
}

// idSet collects handle ids; with strict, an id the frame lacks is an error.
func idSet(f *frames.Frame, ids []string, strict bool) (map[string]bool, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	set := make(map[string]bool, len(ids))
	for _, id := range ids {
		if strict && f.Handle(id) == nil {
			return nil, fmt.Errorf("%w: %q", frames.ErrHandleNotFound, id)
		}
		set[id] = true
	}
	return set, nil
}

// cut shortens s to at most n bytes on a rune boundary, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n - len("…")
	for i > 0 && s[i]&0xC0 == 0x80 {
		i--
	}
	return s[:i] + "…"
}

func checkText(what, s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("%w: %s is %d bytes, limit %d", frames.ErrTooLarge, what, len(s), max)
	}
	return nil
}
