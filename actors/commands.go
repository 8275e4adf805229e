package actors

import (
	"fmt"
	"time"

	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// resolveFrame returns id, or the top of the stack when id is empty.
func resolveFrame(st *frames.State, id string) (string, error) {
	if id != "" {
		return id, nil
	}
	top := st.TopOfStack()
	if top == nil {
		return "", fmt.Errorf("%w: %q", frames.ErrNoActiveFrame, st.Scope)
	}
	return top.ID, nil
}

func (h *handler) mint(now int64, ttl time.Duration) frames.Mint {
	if ttl <= 0 {
		ttl = h.cfg.TokenTTL
	}
	ttl = min(ttl, h.cfg.MaxTokenTTL)
	return frames.Mint{TokenID: h.cfg.NewID(), ExpiresAt: now + int64(ttl)}
}

// count measures content under the server's counter — as is and after
// whitespace normalization, so that packs need not rescan it — refusing
// oversized content before a tokenizer ever sees it.
func (h *handler) count(what, content string) (tokens, light int64, err error) {
	if len(content) > h.cfg.Frames.MaxContentBytes {
		return 0, 0, fmt.Errorf("%w: %s is %d bytes, limit %d", frames.ErrTooLarge, what, len(content), h.cfg.Frames.MaxContentBytes)
	}
	return h.cfg.Counter.Count(content), compaction.LightTokens(content, h.cfg.Counter), nil
}

// command translates a request into a domain command, minting ids and
// stamping time. A non-nil early reply ends the request without an append.
func (h *handler) command(st *frames.State, req messages.MutatingRequest, hdr frames.Header) (frames.Command, messages.Reply, error) {
	switch r := req.(type) {
	case *messages.PushFrame:
		return &frames.PushFrame{Header: hdr, FrameID: h.cfg.NewID(), ParentID: r.ParentID, Goal: r.Goal,
			Inputs: r.Inputs, Budget: r.Budget, Limits: r.Limits}, nil, nil
	case *messages.PopFrame:
		id, err := resolveFrame(st, r.FrameID)
		return &frames.PopFrame{Header: hdr, FrameID: id, Status: r.Status, Cascade: r.Cascade, Mint: h.mint(hdr.Now, 0)}, nil, err
	case *messages.UpdateFrame:
		id, err := resolveFrame(st, r.FrameID)
		return &frames.UpdateFrame{Header: hdr, FrameID: id, Goal: r.Goal, Inputs: r.Inputs, SetInputs: r.SetInputs,
			Limits: r.Limits, ReserveDelta: r.ReserveDelta, ContextHash: r.ContextHash, Mint: h.mint(hdr.Now, 0)}, nil, err
	case *messages.AddContextHandle:
		id, err := resolveFrame(st, r.FrameID)
		if err != nil {
			return nil, nil, err
		}
		tokens, light, err := h.count("content", r.Content)
		if err != nil {
			return nil, nil, err
		}
		hid, kind := r.HandleID, r.Kind
		if hid == "" {
			hid = h.cfg.NewID()
		}
		if kind == "" {
			kind = "text"
		}
		return &frames.AddContextHandle{Header: hdr, FrameID: id, Handle: frames.ContextHandle{
			ID: hid, Kind: kind, Priority: r.Priority, Content: r.Content, Tokens: tokens, LightTokens: light}}, nil, nil
	case *messages.AddResult:
		id, err := resolveFrame(st, r.FrameID)
		rid := r.ResultID
		if rid == "" {
			rid = h.cfg.NewID()
		}
		return &frames.AddResult{Header: hdr, FrameID: id, Result: frames.ResultRef{ID: rid, Kind: r.Kind, Ref: r.Ref, Summary: r.Summary}}, nil, err
	case *messages.RecordUsage:
		id, err := resolveFrame(st, r.FrameID)
		return &frames.RecordUsage{Header: hdr, FrameID: id, Cost: r.Cost, Mint: h.mint(hdr.Now, 0)}, nil, err
	case *messages.StartToolCall:
		id, err := resolveFrame(st, r.FrameID)
		cid := r.CallID
		if cid == "" {
			cid = h.cfg.NewID()
		}
		return &frames.StartToolCall{Header: hdr, FrameID: id, CallID: cid, Name: r.Name, Input: r.Input}, nil, err
	case *messages.FinishToolCall:
		return h.finishTool(st, r, hdr)
	case *messages.SuspendFrame:
		id, err := resolveFrame(st, r.FrameID)
		if r.TTLMillis < 0 {
			return nil, nil, fmt.Errorf("%w: negative TTL", frames.ErrInvalidArgument)
		}
		return &frames.SuspendFrame{Header: hdr, FrameID: id, Reason: r.Reason, Note: r.Note,
			Mint: h.mint(hdr.Now, time.Duration(min(r.TTLMillis, int64(h.cfg.MaxTokenTTL/time.Millisecond)))*time.Millisecond)}, nil, err
	case *messages.ResumeFrame:
		c, err := parseToken(h.cfg.TokenKey, r.Token)
		if err != nil || c.Scope != r.Scope {
			// A token of another scope is as unknown as a forged one.
			return nil, nil, messages.Errorf(messages.CodeTokenInvalid, "suspension token is malformed, forged or not of this scope")
		}
		return &frames.ResumeFrame{Header: hdr, FrameID: c.FrameID, TokenID: c.TokenID}, nil, nil
	case *messages.CompactContext:
		return h.compact(st, r, hdr)
	}
	return nil, nil, messages.Errorf(messages.CodeBadRequest, "unknown request %T", req)
}

func (h *handler) finishTool(st *frames.State, r *messages.FinishToolCall, hdr frames.Header) (frames.Command, messages.Reply, error) {
	id, err := resolveFrame(st, r.FrameID)
	if err != nil {
		return nil, nil, err
	}
	call := r.Call
	if call == "" {
		if f := st.Frame(id); f != nil {
			if tc := f.ToolCall(r.CallID); tc != nil {
				call = tc.Name + "(" + string(tc.Input) + ")"
			}
		}
	}
	ct, cl, err := h.count("tool call", call)
	if err != nil {
		return nil, nil, err
	}
	rt, rl, err := h.count("tool output", r.Output)
	if err != nil {
		return nil, nil, err
	}
	prio := r.Priority
	if prio == 0 {
		prio = compaction.Medium
	}
	return &frames.FinishToolCall{Header: hdr, FrameID: id, CallID: r.CallID, IsError: r.IsError,
		CallHandle:   frames.ContextHandle{ID: h.cfg.NewID(), Kind: "tool_call", Priority: prio, Content: call, Tokens: ct, LightTokens: cl},
		ResultHandle: frames.ContextHandle{ID: h.cfg.NewID(), Kind: "tool_result", Priority: prio, Content: r.Output, Tokens: rt, LightTokens: rl},
	}, nil, nil
}

func (h *handler) strategy(s messages.Strategy) (compaction.Strategy, error) {
	switch s.Kind {
	case messages.StrategyPriorityBased, "":
		return compaction.PriorityBased{}, nil
	case messages.StrategySummarizeOldest:
		return compaction.SummarizeOldest{KeepRecent: s.KeepRecent}, nil
	case messages.StrategyTruncateAt:
		return compaction.TruncateAt{MessageCount: s.MessageCount}, nil
	case messages.StrategyCustom:
		if fn, ok := h.cfg.Custom[s.Custom]; ok && fn != nil {
			return fn, nil
		}
		return nil, fmt.Errorf("%w: no custom strategy %q is registered", frames.ErrInvalidArgument, s.Custom)
	}
	return nil, fmt.Errorf("%w: unknown strategy %q", frames.ErrInvalidArgument, s.Kind)
}

// compact plans a compaction with package compaction and turns the plan
// into a command; a plan that changes nothing is answered without a write.
func (h *handler) compact(st *frames.State, r *messages.CompactContext, hdr frames.Header) (frames.Command, messages.Reply, error) {
	id, err := resolveFrame(st, r.FrameID)
	if err != nil {
		return nil, nil, err
	}
	if err := frames.ValidateID("frame id", id, h.cfg.Frames.MaxIDBytes); err != nil {
		return nil, nil, err
	}
	f := st.Frame(id)
	if f == nil {
		return nil, nil, fmt.Errorf("%w: %q", frames.ErrFrameNotFound, id)
	}
	if !f.Status.Live() {
		return nil, nil, fmt.Errorf("%w: %q is %s", frames.ErrFrameNotLive, id, f.Status)
	}
	if r.TargetTokens < 0 {
		return nil, nil, fmt.Errorf("%w: negative target", frames.ErrInvalidArgument)
	}
	strat, err := h.strategy(r.Strategy)
	if err != nil {
		return nil, nil, err
	}
	items := handleItems(nil, f.Handles, nil, nil)
	res, err := compaction.Compact(items, r.TargetTokens, strat, compaction.Options{
		SummaryID: h.cfg.NewID(), Counter: h.cfg.Counter, Summarizer: h.cfg.Summarizer})
	if err != nil {
		return nil, nil, err
	}
	if len(res.Removed) == 0 && res.Summary == nil {
		return nil, &messages.CompactionResult{Result: messages.Result{Version: st.Version}, FrameID: id,
			OriginalTokens: res.OriginalTokens, FinalTokens: res.FinalTokens, Level: res.Level}, nil
	}
	var sum *frames.ContextHandle
	if s := res.Summary; s != nil {
		prio := s.Priority
		if !prio.Valid() {
			prio = compaction.Low
		}
		sum = &frames.ContextHandle{ID: s.ID, Kind: "summary", Priority: prio, Content: s.Content, Tokens: s.Tokens,
			LightTokens: compaction.LightTokens(s.Content, h.cfg.Counter), Covers: s.Covers}
	}
	return &frames.CompactContext{Header: hdr, FrameID: id, Strategy: strat.Name(), Removed: res.Removed, Summary: sum,
		OriginalTokens: res.OriginalTokens, FinalTokens: res.FinalTokens, Level: res.Level}, nil, nil
}

// handleItems appends a frame's handles to buf as compaction items; include
// marks mandatory handles and exclude leaves handles out.
func handleItems(buf []compaction.Item, hs []frames.ContextHandle, include, exclude map[string]bool) []compaction.Item {
	items := buf[:0]
	for i := range hs {
		hd := &hs[i]
		if exclude[hd.ID] {
			continue
		}
		items = append(items, compaction.Item{ID: hd.ID, Kind: hd.Kind, Priority: hd.Priority, Content: hd.Content,
			Seq: hd.Seq, Group: hd.Group, Mandatory: include[hd.ID], Covers: hd.Covers, Tokens: hd.Tokens, LightTokens: hd.LightTokens})
	}
	return items
}

// replyFromEvents builds a mutation's reply from the events it appended
// alone, so that a repeated request id gets the very same reply.
func (h *handler) replyFromEvents(req messages.Request, evs []frames.Event, version int64) (messages.Reply, error) {
	if len(evs) == 0 {
		return nil, fmt.Errorf("no events for %T", req)
	}
	res := messages.Result{Version: version}
	first := evs[0]
	frameID := first.EventMeta().Frame
	bad := func() (messages.Reply, error) {
		return nil, fmt.Errorf("events of %T start with %s", req, first.EventType())
	}
	switch req.(type) {
	case *messages.PushFrame:
		e, ok := first.(*frames.FramePushed)
		if !ok {
			return bad()
		}
		return &messages.PushFrameReply{Result: res, FrameID: frameID, Depth: e.Depth, Budget: e.Budget}, nil
	case *messages.PopFrame:
		r := &messages.PopFrameReply{Result: res}
		for _, ev := range evs {
			switch e := ev.(type) {
			case *frames.FramePopped:
				if r.FrameID != "" {
					r.Cancelled = append(r.Cancelled, r.FrameID)
				}
				r.FrameID, r.Status, r.Released, r.ChargedTokens = e.Frame, e.Status, e.Released, e.ChargedTokens
			case *frames.FrameSuspended:
				r.ParentSuspension = h.token(e, version)
			}
		}
		return r, nil
	case *messages.UpdateFrame:
		r := &messages.UpdateFrameReply{Result: res, FrameID: frameID}
		for _, ev := range evs[1:] {
			if e, ok := ev.(*frames.FrameSuspended); ok {
				r.Suspension = h.token(e, version)
			}
		}
		return r, nil
	case *messages.AddContextHandle:
		e, ok := first.(*frames.HandleAdded)
		if !ok {
			return bad()
		}
		return &messages.AddContextHandleReply{Result: res, FrameID: frameID, HandleID: e.Handle.ID, Tokens: e.Handle.Tokens}, nil
	case *messages.AddResult:
		e, ok := first.(*frames.ResultAdded)
		if !ok {
			return bad()
		}
		return &messages.AddResultReply{Result: res, FrameID: frameID, ResultID: e.Result.ID}, nil
	case *messages.RecordUsage:
		r := &messages.RecordUsageReply{Result: res, FrameID: frameID}
		for _, ev := range evs[1:] {
			if e, ok := ev.(*frames.FrameSuspended); ok {
				r.Suspension = h.token(e, version)
			}
		}
		return r, nil
	case *messages.StartToolCall:
		e, ok := first.(*frames.ToolStarted)
		if !ok {
			return bad()
		}
		return &messages.StartToolCallReply{Result: res, FrameID: frameID, CallID: e.CallID}, nil
	case *messages.FinishToolCall:
		e, ok := first.(*frames.ToolFinished)
		if !ok {
			return bad()
		}
		return &messages.FinishToolCallReply{Result: res, FrameID: frameID, CallID: e.CallID,
			CallHandleID: e.CallHandle.ID, ResultHandleID: e.ResultHandle.ID, Tokens: e.CallHandle.Tokens + e.ResultHandle.Tokens}, nil
	case *messages.SuspendFrame:
		e, ok := first.(*frames.FrameSuspended)
		if !ok {
			return bad()
		}
		return h.token(e, version), nil
	case *messages.ResumeFrame:
		return &messages.ResumeFrameReply{Result: res, FrameID: frameID}, nil
	case *messages.CompactContext:
		e, ok := first.(*frames.FrameCompacted)
		if !ok {
			return bad()
		}
		r := &messages.CompactionResult{Result: res, FrameID: frameID, OriginalTokens: e.OriginalTokens, FinalTokens: e.FinalTokens,
			Level: e.Level, ItemsRemoved: len(e.Removed), Removed: e.Removed}
		if e.Summary != nil {
			// A handle the summary covers is summarized, not counted as
			// removed too: the two counts add up to len(Removed).
			r.SummaryID, r.ItemsSummarized = e.Summary.ID, coveredCount(e.Removed, e.Summary.Covers)
			r.ItemsRemoved -= r.ItemsSummarized
		}
		return r, nil
	}
	return nil, fmt.Errorf("no reply for %T", req)
}

// coveredCount counts the removed handles a summary covers, each once.
func coveredCount(removed, covers []string) int {
	rm := make(map[string]bool, len(removed))
	for _, id := range removed {
		rm[id] = true
	}
	n := 0
	for _, id := range covers {
		if rm[id] {
			n++
			rm[id] = false
		}
	}
	return n
}

// token signs the suspension an event recorded.
func (h *handler) token(e *frames.FrameSuspended, version int64) *messages.SuspensionToken {
	s := e.Suspension
	return &messages.SuspensionToken{
		Result:  messages.Result{Version: version},
		Token:   signToken(h.cfg.TokenKey, tokenClaims{Scope: e.Scope, FrameID: e.Frame, TokenID: s.TokenID, ExpiresAt: s.ExpiresAt}),
		TokenID: s.TokenID, Scope: e.Scope, FrameID: e.Frame, Reason: s.Reason, SuspendedAt: s.At, ExpiresAt: s.ExpiresAt, Limit: s.Limit,
	}
}
