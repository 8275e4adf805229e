package frames

import (
	"fmt"

	"github.com/stateindex/stateindex/budget"
)

// Apply folds one event into s: the event is the next version of the scope.
// It checks the event against the state first and returns an error matching
// ErrInconsistentEvent (leaving s unchanged) for an event that could not have
// been decided from s — on replay that means a corrupt or foreign log.
func Apply(s *State, e Event) error {
	if s == nil || e == nil {
		return inconsistent("nil state or event")
	}
	m := e.EventMeta()
	if m.Scope != s.Scope {
		return inconsistent("event of scope %q applied to %q", m.Scope, s.Scope)
	}
	if s.Version == 1<<63-1 {
		return inconsistent("version overflow")
	}
	version := s.Version + 1
	var err error
	switch ev := e.(type) {
	case *FramePushed:
		err = applyPushed(s, ev, version)
	case *FrameUpdated:
		err = applyUpdated(s, ev)
	case *FramePopped:
		err = applyPopped(s, ev)
	case *FrameSuspended:
		err = applySuspended(s, ev)
	case *FrameResumed:
		err = applyResumed(s, ev)
	case *HandleAdded:
		err = applyHandles(s, ev.Frame, version, "", ev.Handle)
	case *ResultAdded:
		err = applyResult(s, ev)
	case *FrameCompacted:
		err = applyCompacted(s, ev, version)
	case *ActorResumed:
		s.Resumes++
	case *UsageRecorded:
		err = applyUsage(s, ev)
	case *ToolStarted:
		err = applyToolStarted(s, ev)
	case *ToolFinished:
		err = applyToolFinished(s, ev, version)
	case *ContentStored:
		err = applyContentStored(s, ev, version)
	case *RetentionApplied:
		if ev.Through <= s.RemovedThrough || ev.Through >= version {
			err = inconsistent("retention through %d after %d, at version %d", ev.Through, s.RemovedThrough, version)
		} else {
			s.RemovedThrough = ev.Through
			s.buryChainLinks(ev)
		}
	case *ScopeDestroyed:
		err = applyDestroyed(s, ev, version)
	case *CounterChanged:
		err = applyCounterChanged(s, ev)
	case *StateChanged:
		err = applyStateChanged(s, ev, version)
	case *StateExpired:
		err = applyStateExpired(s, ev)
	case *SpendReserved:
		err = applySpendReserved(s, ev)
	case *SpendReturned:
		err = applySpendReturned(s, ev)
	case *SpendRenewed:
		err = applySpendRenewed(s, ev)
	case *SpendSettled:
		err = applySpendSettled(s, ev)
	case *SpendDelivered:
		err = applySpendDelivered(s, ev)
	case *PartialOutputRecorded:
		err = applyPartialOutput(s, ev)
	default:
		return fmt.Errorf("%w: %T", ErrUnknownEventType, e)
	}
	if err != nil {
		return err
	}
	s.Version = version
	s.LastAt = m.At
	return nil
}

func (s *State) frameFor(m *Meta) (*Frame, error) {
	f := s.Frames[m.Frame]
	if f == nil {
		return nil, inconsistent("frame %q not in scope", m.Frame)
	}
	return f, nil
}

func (s *State) liveFrameFor(m *Meta) (*Frame, error) {
	f, err := s.frameFor(m)
	if err == nil && !f.Status.Live() {
		err = inconsistent("frame %q is %s", f.ID, f.Status)
	}
	return f, err
}

func applyPushed(s *State, e *FramePushed, version int64) error {
	if e.Frame == "" || s.Frames[e.Frame] != nil {
		return inconsistent("frame %q pushed twice", e.Frame)
	}
	if err := e.Budget.Validate(); err != nil {
		return inconsistent("pushed budget: %v", err)
	}
	if e.ContextWindow < 0 {
		return inconsistent("context window %d", e.ContextWindow)
	}
	if e.ContinuedFrom != "" {
		return applyLinkPushed(s, e, version)
	}
	if e.Cost != nil || e.InDoubt != nil || e.Freed != nil || e.Resumed != nil || e.ChainRoot != "" || e.Partial != nil {
		return inconsistent("frame %q pushed with a chain's fields and no link it continues", e.Frame)
	}
	return applyNewPushed(s, e, version)
}

func applyNewPushed(s *State, e *FramePushed, version int64) error {
	if e.Budget.Used != 0 || e.Budget.SubcallAllocation != 0 {
		return inconsistent("a new frame's budget has used %d and subcall allocation %d", e.Budget.Used, e.Budget.SubcallAllocation)
	}
	var parent *Frame
	var spawns map[*Frame]int64 // each ancestor's spawns after this push
	pb := budget.TokenBudget{}
	if e.ParentID != "" {
		parent = s.Frames[e.ParentID]
		if parent == nil || (parent.Status != StatusActive && parent.Status != StatusWaiting) {
			return inconsistent("parent %q cannot take children", e.ParentID)
		}
		if e.Depth != parent.Depth+1 || e.Depth > parent.Budget.MaxSubframeDepth {
			return inconsistent("depth %d under parent depth %d (max %d)", e.Depth, parent.Depth, parent.Budget.MaxSubframeDepth)
		}
		pb = parent.Budget
		if err := pb.AllocateForSubcall(e.Budget.Total); err != nil {
			return inconsistent("allocation: %v", err)
		}
		spawns = map[*Frame]int64{}
		for a := parent; a != nil; a = s.Frames[a.ParentID] {
			n, err := budget.Add(a.Cost.Spawns, 1)
			if err != nil {
				return inconsistent("spawns of %q: %v", a.ID, err)
			}
			spawns[a] = n
		}
	} else if e.Depth != 0 {
		return inconsistent("root at depth %d", e.Depth)
	}
	if parent != nil {
		parent.Budget = pb
		for a, n := range spawns {
			a.Cost.Spawns = n // every descendant counts against every ancestor
		}
		parent.LiveKids++
		parent.Kids++
		if s.KeepFinished {
			parent.Children = append(parent.Children, e.Frame)
		}
		parent.Status = StatusWaiting
	}
	f := &Frame{
		ID: e.Frame, ParentID: e.ParentID, Goal: e.Goal, Inputs: cloneBytes(e.Inputs), Status: StatusActive,
		Depth: e.Depth, Budget: e.Budget, Limits: e.Limits, CreatedAt: e.At, PushSeq: version, ContextWindow: e.ContextWindow,
	}
	if err := applyBound(s, e, f); err != nil {
		return err
	}
	s.Frames[e.Frame] = f
	s.Order = append(s.Order, e.Frame)
	return nil
}

func applyUpdated(s *State, e *FrameUpdated) error {
	f, err := s.liveFrameFor(&e.Meta)
	if err != nil {
		return err
	}
	b := f.Budget
	if err := reserve(&b, e.ReserveDelta); err != nil {
		return inconsistent("reserve: %v", err)
	}
	f.Budget = b
	if e.Goal != nil {
		f.Goal = *e.Goal
	}
	if e.SetInputs {
		f.Inputs = cloneBytes(e.Inputs)
	}
	if e.Limits != nil {
		f.Limits = *e.Limits
	}
	if e.ContextHash != nil {
		f.ContextHash = *e.ContextHash
	}
	return nil
}

func applyPopped(s *State, e *FramePopped) error {
	f, err := s.liveFrameFor(&e.Meta)
	if err != nil {
		return err
	}
	if !e.Status.Terminal() {
		return inconsistent("pop to %s", e.Status)
	}
	if n := f.LiveKids; n > 0 {
		return inconsistent("frame %q popped with %d live children", f.ID, n)
	}
	cont := e.Status == StatusContinued
	if cont != (e.ContinuedTo != "") || (cont && (s.Frames[e.ContinuedTo] != nil || f.Status == StatusSuspended)) {
		return inconsistent("pop of %q to %s continued to %q", f.ID, e.Status, e.ContinuedTo)
	}
	open := f.openCalls()
	if e.Abandoned != nil && !equalStrings(e.Abandoned, open) {
		// An event from before the field existed has none; a newer one must
		// name exactly the calls the state has open.
		return inconsistent("pop of %q abandons %v, open calls are %v", f.ID, e.Abandoned, open)
	}
	parent := s.Frames[f.ParentID]
	if cont {
		// The allocation moves to the continuation, which carries the
		// cost on: it is handed back here and taken again by the push
		// that follows in the same append (so that the parent's books
		// hold between the two events); nothing is charged.
		if e.ChargedTokens != 0 || !e.ChargedCost.IsZero() || e.Saturated || (parent == nil) != (e.Released == 0) ||
			(parent != nil && e.Released != f.Budget.Total) {
			return inconsistent("continued frame %q settles with its parent", f.ID)
		}
		if parent != nil {
			pb := parent.Budget
			if err := pb.ReturnFromChild(e.Released, 0); err != nil {
				return inconsistent("handing back %q's allocation: %v", f.ID, err)
			}
			parent.Budget = pb
		}
	} else if parent != nil {
		want := chargeable(f.Cost)
		if e.Released != f.Budget.Total || e.ChargedTokens != f.Budget.Used || e.ChargedCost != want {
			return inconsistent("pop of %q settles %d/%d, state says %d/%d", f.ID, e.Released, e.ChargedTokens, f.Budget.Total, f.Budget.Used)
		}
		pb := parent.Budget
		clampedUsed, err := pb.ReturnFromChildSaturating(e.Released, e.ChargedTokens)
		if err != nil {
			return inconsistent("settling with parent: %v", err)
		}
		pc, clampedCost := parent.Cost.PlusSaturating(e.ChargedCost)
		if e.Saturated != (clampedUsed || clampedCost) {
			return inconsistent("pop of %q says saturated %v, settlement says %v", f.ID, e.Saturated, clampedUsed || clampedCost)
		}
		parent.Budget, parent.Cost = pb, pc
	} else if e.Released != 0 || e.ChargedTokens != 0 || !e.ChargedCost.IsZero() || e.Saturated {
		return inconsistent("root pop settles with no parent")
	}
	for i := range f.ToolCalls {
		if tc := &f.ToolCalls[i]; !tc.Finished {
			tc.Abandoned = true
		}
	}
	if f.Suspension != nil {
		// Its token can no longer resume anything: a resume finds the
		// frame finished.
		delete(s.Tokens, f.Suspension.TokenID)
	}
	f.Status = e.Status
	f.CompletedAt = e.At
	f.Suspension = nil
	f.Partial = nil // a finished frame has no output in progress (a continuation took it along)
	if cont {
		f.ContinuedTo = e.ContinuedTo
		if f.ChainRoot == "" {
			f.ChainRoot = f.ID
		}
	}
	if parent != nil {
		parent.LiveKids--
	}
	if parent != nil && parent.Status == StatusWaiting && parent.LiveKids == 0 {
		parent.Status = StatusActive
	}
	if e.Final != nil {
		if want := RecordOf(f); !want.Equal(e.Final) {
			return inconsistent("pop of %q records %+v, state says %+v", f.ID, *e.Final, want)
		}
	}
	if err := s.chainEnded(f, e.ContinuedTo); err != nil {
		return err
	}
	ledgerPopped(s, f, e)
	s.kvFrameEnded(f, e.ContinuedTo)
	s.unref(f.Handles...) // a finished frame's handles are no longer live
	s.Finished++
	s.pruneTokens(e.At)
	if s.KeepFinished {
		return nil
	}
	for _, c := range f.Abandoned() {
		if cont {
			break // carried on, still in doubt, by the continuation
		}
		s.Abandoned = append(s.Abandoned, AbandonedCall{FrameID: f.ID, Goal: f.Goal, Status: f.Status, Call: c})
	}
	delete(s.Frames, f.ID)
	for i, id := range s.Order {
		if id == f.ID {
			s.Order = append(s.Order[:i], s.Order[i+1:]...)
			if len(s.Order) == 0 {
				s.Order = nil
			}
			break
		}
	}
	return nil
}

// pruneTokens forgets used tokens that have expired (they are refused as
// expired or unknown alike by then).
func (s *State) pruneTokens(now int64) {
	for id, t := range s.Tokens {
		if t.Used && t.ExpiresAt < now {
			delete(s.Tokens, id)
		}
	}
}

func applySuspended(s *State, e *FrameSuspended) error {
	f, err := s.liveFrameFor(&e.Meta)
	if err != nil {
		return err
	}
	if f.Status == StatusSuspended {
		return inconsistent("frame %q suspended twice", f.ID)
	}
	sp := e.Suspension
	if sp.TokenID == "" || s.Tokens[sp.TokenID] != nil {
		return inconsistent("suspension token %q reused", sp.TokenID)
	}
	if !sp.Reason.Valid() {
		return inconsistent("suspension reason %q", sp.Reason)
	}
	if sp.Limit != nil {
		l := *sp.Limit
		sp.Limit = &l
	}
	f.Status = StatusSuspended
	f.Suspension = &sp
	s.Tokens[sp.TokenID] = &TokenRecord{FrameID: f.ID, ExpiresAt: sp.ExpiresAt}
	return nil
}

func applyResumed(s *State, e *FrameResumed) error {
	f, err := s.frameFor(&e.Meta)
	if err != nil {
		return err
	}
	tok := s.Tokens[e.TokenID]
	if f.Status != StatusSuspended || f.Suspension == nil || f.Suspension.TokenID != e.TokenID || tok == nil || tok.Used {
		return inconsistent("resume of %q with token %q", f.ID, e.TokenID)
	}
	tok.Used = true
	s.pruneTokens(e.At)
	f.Suspension = nil
	f.Status = StatusActive
	if f.LiveKids > 0 {
		f.Status = StatusWaiting
	}
	return nil
}

// applyHandles adds handles to a live frame; group, when set, is forced on
// each (a tool call and its result share the call id).
func applyHandles(s *State, frameID string, version int64, group string, hs ...ContextHandle) error {
	f := s.Frames[frameID]
	if f == nil || !f.Status.Live() {
		return inconsistent("handle added to frame %q that is not live", frameID)
	}
	total := f.ContextTokens
	var here map[string]bool // content stored by the handles before
	for i, h := range hs {
		if h.ID == "" || f.Handle(h.ID) != nil || !h.Priority.Valid() || h.Tokens < 0 {
			return inconsistent("handle %q", h.ID)
		}
		if (h.ContentRef != "" || h.StoresContent) && here == nil {
			here = map[string]bool{}
		}
		if err := s.checkRef(f, &h, here); err != nil {
			return err
		}
		for _, o := range hs[:i] {
			if o.ID == h.ID {
				return inconsistent("handle %q twice", h.ID)
			}
		}
		var err error
		if total, err = budget.Add(total, h.Tokens); err != nil {
			return inconsistent("context tokens: %v", err)
		}
	}
	for _, h := range hs {
		h.Seq = version
		if h.StoresContent {
			h.ContentRef, h.StoresContent = ContentHash(h.Content), false
			s.store(h.ContentRef, version, f.ID, h.Content)
		}
		if h.ContentRef != "" {
			h.Content = s.ref(h.ContentRef)
		}
		h.Covers = append([]string(nil), h.Covers...)
		if group != "" {
			h.Group = group
		}
		f.Handles = append(f.Handles, h)
		if f.handleIdx != nil {
			f.handleIdx[h.ID] = len(f.Handles) - 1
		}
	}
	f.ContextTokens = total
	return nil
}

func applyResult(s *State, e *ResultAdded) error {
	f, err := s.liveFrameFor(&e.Meta)
	if err != nil {
		return err
	}
	for _, r := range f.Results {
		if r.ID == e.Result.ID {
			return inconsistent("result %q twice", r.ID)
		}
	}
	f.Results = append(f.Results, e.Result)
	return nil
}

func applyCompacted(s *State, e *FrameCompacted, version int64) error {
	f, err := s.liveFrameFor(&e.Meta)
	if err != nil {
		return err
	}
	if len(e.Removed) == 0 && e.Summary == nil {
		return nil // a compaction that found nothing to remove
	}
	removed := make(map[string]bool, len(e.Removed))
	var freed int64
	for _, id := range e.Removed {
		h := f.Handle(id)
		if h == nil || removed[id] {
			return inconsistent("compaction removes %q", id)
		}
		removed[id] = true
		freed += h.Tokens
	}
	if e.Summary != nil && (e.Summary.ID == "" || (f.Handle(e.Summary.ID) != nil && !removed[e.Summary.ID]) || !e.Summary.Priority.Valid() || e.Summary.Tokens < 0) {
		return inconsistent("compaction summary %q", e.Summary.ID)
	}
	if e.Summary != nil {
		if _, err := budget.Add(f.ContextTokens-freed, e.Summary.Tokens); err != nil {
			return inconsistent("compaction summary: %v", err)
		}
		if err := s.checkRef(f, e.Summary, map[string]bool{}); err != nil {
			return err
		}
	}
	kept := f.Handles[:0:0]
	var gone []ContextHandle
	for _, h := range f.Handles {
		if !removed[h.ID] {
			kept = append(kept, h)
		} else if h.ContentRef != "" {
			gone = append(gone, h)
		}
	}
	// The summary's reference counts before the removed ones drop, so
	// that content they share is not forgotten in between.
	defer s.unref(gone...)
	f.Handles = kept
	f.ContextTokens -= freed
	f.handleIdx = nil
	if f.ContextWindow > 0 {
		net := freed
		if e.Summary != nil {
			net -= e.Summary.Tokens
		}
		f.Freed = lastFreed(f.Freed, net)
	}
	if e.Summary != nil {
		if err := applyHandles(s, f.ID, version, "", *e.Summary); err != nil {
			return err // cannot happen after the checks above
		}
	}
	return nil
}

func applyUsage(s *State, e *UsageRecorded) error {
	f, err := s.liveFrameFor(&e.Meta)
	if err != nil {
		return err
	}
	if err := e.Cost.Validate(); err != nil {
		return inconsistent("usage: %v", err)
	}
	if e.Cost.Spawns != 0 {
		return inconsistent("usage records %d spawns (pushes count them)", e.Cost.Spawns)
	}
	cost, err := f.Cost.Plus(e.Cost)
	if err != nil {
		return inconsistent("usage: %v", err)
	}
	tokens, _ := e.Cost.Tokens()
	b := f.Budget
	if err := b.RecordUsage(tokens); err != nil {
		return inconsistent("usage: %v", err)
	}
	if e.Calibration != nil {
		if err := checkCalibration(e.Calibration, maxCounterBytes); err != nil {
			return inconsistent("usage: %v", err)
		}
		if e.CalibrationKeep < 1 || e.CalibrationKeep > MaxCalibrationSamples {
			return inconsistent("usage keeps %d calibration samples, not 1..%d", e.CalibrationKeep, MaxCalibrationSamples)
		}
		s.addCalibration(*e.Calibration, e.CalibrationKeep)
	} else if e.CalibrationKeep != 0 {
		return inconsistent("usage keeps %d calibration samples of none", e.CalibrationKeep)
	}
	f.Cost, f.Budget = cost, b
	endPartialOnTurn(f, e)
	return nil
}

func applyToolStarted(s *State, e *ToolStarted) error {
	f, err := s.liveFrameFor(&e.Meta)
	if err != nil {
		return err
	}
	if e.CallID == "" || f.ToolCall(e.CallID) != nil {
		return inconsistent("tool call %q started twice", e.CallID)
	}
	f.ToolCalls = append(f.ToolCalls, ToolCall{ID: e.CallID, Name: e.Name, Input: cloneBytes(e.Input), StartedAt: e.At,
		Owner: e.Owner, Epoch: e.Epoch})
	return nil
}

func applyToolFinished(s *State, e *ToolFinished, version int64) error {
	f, err := s.liveFrameFor(&e.Meta)
	if err != nil {
		return err
	}
	tc := f.ToolCall(e.CallID)
	if tc == nil || tc.Finished {
		return inconsistent("tool call %q finished without being open", e.CallID)
	}
	if err := applyHandles(s, f.ID, version, e.CallID, e.CallHandle, e.ResultHandle); err != nil {
		return err
	}
	tc.Finished, tc.IsError, tc.FinishedAt = true, e.IsError, e.At
	return nil
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// applyDestroyed starts the scope over empty: only its version (which
// goes on counting), what it removed through, and its request-id horizon
// remain. The event must name exactly the live frames it cancelled.
func applyDestroyed(s *State, e *ScopeDestroyed, version int64) error {
	if e.Through != version-1 {
		return inconsistent("scope destroyed through %d at version %d", e.Through, version)
	}
	live, calls, tokens := destroyed(s)
	if len(live) != len(e.Cancelled) || len(calls) != len(e.Abandoned) || tokens != e.Tokens || (len(live) > 0 && !e.Forced) {
		return inconsistent("scope destroyed naming %d cancelled frame(s), %d call(s) and %d token(s) (forced %v); it has %d, %d and %d",
			len(e.Cancelled), len(e.Abandoned), e.Tokens, e.Forced, len(live), len(calls), tokens)
	}
	for i, id := range live {
		if e.Cancelled[i] != id {
			return inconsistent("scope destroyed cancelling %q where %q is live", e.Cancelled[i], id)
		}
	}
	ledgerDestroyed(s)                     // reservations and the outbox outlive the frames
	s.KV, s.KVBytes, s.carry = nil, 0, nil // the scope's state ends with it
	s.Frames, s.Order, s.Tokens, s.Abandoned = map[string]*Frame{}, nil, map[string]*TokenRecord{}, nil
	s.Content = nil // no live handle is left to refer to stored content
	s.Chains, s.LinkRoots = nil, nil
	s.Finished, s.Resumes = 0, 0
	if e.Through > s.RemovedThrough {
		s.RemovedThrough = e.Through
	}
	return nil
}
