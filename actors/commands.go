package actors

import (
	"fmt"

	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

func (h *handler) mint(now int64, ttl int64) frames.Mint {
	return frames.NewMint(h.cfg.NewID(), now, frames.TokenTTL(ttl, int64(h.cfg.TokenTTL), int64(h.cfg.MaxTokenTTL)))
}

// count measures content under the server's counter (frames.CountContent).
func (h *handler) count(what, content string) (tokens, light int64, err error) {
	return frames.CountContent(h.cfg.Frames, h.cfg.Counter, what, content)
}

// command translates a request into a domain command: frame ids resolved
// and defaults applied by frames, ids minted and time stamped here. A
// non-nil early reply ends the request without an append.
func (h *handler) command(st *frames.State, req messages.MutatingRequest, hdr frames.Header) (frames.Command, messages.Reply, error) {
	switch r := req.(type) {
	case *messages.PushFrame:
		return &frames.PushFrame{Header: hdr, FrameID: h.cfg.NewID(), ParentID: r.ParentID, Goal: r.Goal,
			Inputs: r.Inputs, Budget: r.Budget, Limits: r.Limits}, nil, nil
	case *messages.PopFrame:
		id, err := frames.ResolveFrame(st, r.FrameID)
		return &frames.PopFrame{Header: hdr, FrameID: id, Status: r.Status, Cascade: r.Cascade, Mint: h.mint(hdr.Now, 0)}, nil, err
	case *messages.UpdateFrame:
		id, err := frames.ResolveFrame(st, r.FrameID)
		return &frames.UpdateFrame{Header: hdr, FrameID: id, Goal: r.Goal, Inputs: r.Inputs, SetInputs: r.SetInputs,
			Limits: r.Limits, ReserveDelta: r.ReserveDelta, ContextHash: r.ContextHash, Mint: h.mint(hdr.Now, 0)}, nil, err
	case *messages.AddContextHandle:
		id, err := frames.ResolveFrame(st, r.FrameID)
		if err != nil {
			return nil, nil, err
		}
		tokens, light, err := h.count("content", r.Content)
		if err != nil {
			return nil, nil, err
		}
		return &frames.AddContextHandle{Header: hdr, FrameID: id, Handle: frames.ContextHandle{
			ID: frames.MintIfEmpty(r.HandleID, h.cfg.NewID), Kind: frames.HandleKind(r.Kind), Priority: r.Priority,
			Content: r.Content, Tokens: tokens, LightTokens: light}}, nil, nil
	case *messages.AddResult:
		id, err := frames.ResolveFrame(st, r.FrameID)
		return &frames.AddResult{Header: hdr, FrameID: id, Result: frames.ResultRef{ID: frames.MintIfEmpty(r.ResultID, h.cfg.NewID),
			Kind: r.Kind, Ref: r.Ref, Summary: r.Summary}}, nil, err
	case *messages.RecordUsage:
		id, err := frames.ResolveFrame(st, r.FrameID)
		return &frames.RecordUsage{Header: hdr, FrameID: id, Cost: r.Cost, Mint: h.mint(hdr.Now, 0)}, nil, err
	case *messages.StartToolCall:
		id, err := frames.ResolveFrame(st, r.FrameID)
		return &frames.StartToolCall{Header: hdr, FrameID: id, CallID: frames.MintIfEmpty(r.CallID, h.cfg.NewID), Name: r.Name, Input: r.Input}, nil, err
	case *messages.FinishToolCall:
		return h.finishTool(st, r, hdr)
	case *messages.SuspendFrame:
		id, err := frames.ResolveFrame(st, r.FrameID)
		if err != nil {
			return nil, nil, err
		}
		ttl, err := frames.SuspendTTL(r.TTLMillis, int64(h.cfg.TokenTTL), int64(h.cfg.MaxTokenTTL))
		if err != nil {
			return nil, nil, err
		}
		return &frames.SuspendFrame{Header: hdr, FrameID: id, Reason: r.Reason, Note: r.Note, Mint: h.mint(hdr.Now, ttl)}, nil, nil
	case *messages.ResumeFrame:
		c, err := parseToken(h.cfg.TokenKey, r.Token)
		if err != nil || c.Scope != r.Scope {
			// A token of another scope is as unknown as a forged one.
			return nil, nil, messages.Errorf(messages.CodeTokenInvalid, "suspension token is malformed, forged or not of this scope")
		}
		return &frames.ResumeFrame{Header: hdr, FrameID: c.FrameID, TokenID: c.TokenID}, nil, nil
	case *messages.CompactContext:
		s := r.Strategy
		cmd, err := frames.PlanCompaction(h.cfg.Frames, st, hdr, frames.CompactionQuery{FrameID: r.FrameID, Target: r.TargetTokens,
			Strategy: frames.StrategySpec{Kind: s.Kind, KeepRecent: s.KeepRecent, MessageCount: s.MessageCount, Custom: s.Custom},
			Custom:   h.cfg.Custom, SummaryID: h.cfg.NewID(), Counter: h.cfg.Counter, Summarizer: h.cfg.Summarizer})
		if err != nil {
			return nil, nil, err
		}
		return cmd, nil, nil
	}
	return nil, nil, messages.Errorf(messages.CodeBadRequest, "unknown request %T", req)
}

func (h *handler) finishTool(st *frames.State, r *messages.FinishToolCall, hdr frames.Header) (frames.Command, messages.Reply, error) {
	id, err := frames.ResolveFrame(st, r.FrameID)
	if err != nil {
		return nil, nil, err
	}
	call := frames.ToolCallText(st, id, r.CallID, r.Call)
	ct, cl, err := h.count("tool call", call)
	if err != nil {
		return nil, nil, err
	}
	rt, rl, err := h.count("tool output", r.Output)
	if err != nil {
		return nil, nil, err
	}
	prio := frames.ToolPriority(r.Priority)
	return &frames.FinishToolCall{Header: hdr, FrameID: id, CallID: r.CallID, IsError: r.IsError,
		CallHandle:   frames.ContextHandle{ID: h.cfg.NewID(), Kind: frames.ToolCallKind, Priority: prio, Content: call, Tokens: ct, LightTokens: cl},
		ResultHandle: frames.ContextHandle{ID: h.cfg.NewID(), Kind: frames.ToolResultKind, Priority: prio, Content: r.Output, Tokens: rt, LightTokens: rl},
	}, nil, nil
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
