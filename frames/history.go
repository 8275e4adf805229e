package frames

// LogHistory is a History kept in memory from one scope's events, fed in
// order. It is the reference for what the shell's history answers from
// the store's index and log: a frame that finished is known with its final
// status, a request with the versions of its events, its digest and its
// time. Tools that fold a whole log and tests use it.
type LogHistory struct {
	finished map[string]Status
	requests map[string]RequestRecord
}

// NewLogHistory returns an empty history.
func NewLogHistory() *LogHistory {
	return &LogHistory{finished: map[string]Status{}, requests: map[string]RequestRecord{}}
}

// Add records e, the scope's event at version.
func (h *LogHistory) Add(version int64, e Event) {
	m := e.EventMeta()
	if _, ok := e.(*ScopeDestroyed); ok {
		// The scope's frames and records are gone; its request ids stay,
		// marked, so that none is applied again (the store keeps them the
		// same way: eventstore.KeepRequestsSince).
		clear(h.finished)
		for id, r := range h.requests {
			r.Gone = true
			h.requests[id] = r
		}
	}
	if p, ok := e.(*FramePopped); ok {
		h.finished[m.Frame] = p.Status
	}
	if m.RequestID == "" {
		return
	}
	if r, ok := h.requests[m.RequestID]; ok {
		r.LastVersion = version
		h.requests[m.RequestID] = r
		return
	}
	h.requests[m.RequestID] = RequestRecord{ID: m.RequestID, Hash: cloneBytes(m.RequestHash), FirstVersion: version, LastVersion: version, At: m.At}
}

// FinishedFrame implements History.
func (h *LogHistory) FinishedFrame(id string) (Status, bool, error) {
	st, ok := h.finished[id]
	return st, ok, nil
}

// Request implements History.
func (h *LogHistory) Request(id string) (RequestRecord, bool, error) {
	r, ok := h.requests[id]
	return r, ok, nil
}

// Versioned is an event with the scope version it was stored at.
type Versioned struct {
	Version int64
	Event   Event
}

// RebuildFinished rebuilds a finished frame from its own events — those
// whose metadata names it, from its frame.pushed to its frame.popped, in
// order: its handles, tool calls and inputs from them, everything else
// from the record its frame.popped carries (Final). ok is false when that
// event has no record (written before records existed): fold the whole
// log with KeepFinished instead. own may hold content.stored events of any
// frame within the span: the content its handles refer to is among them
// (see ContentStored), and the rebuilt handles carry it inline. Events that
// do not fit the frame, or a reference to content not in own, are an error
// matching ErrInconsistentEvent.
func RebuildFinished(own []Versioned) (f *Frame, ok bool, err error) {
	if len(own) < 2 {
		return nil, false, inconsistent("a finished frame has %d events", len(own))
	}
	push, isPush := own[0].Event.(*FramePushed)
	pop, isPop := own[len(own)-1].Event.(*FramePopped)
	if !isPush || !isPop {
		return nil, false, inconsistent("a finished frame's events run from %s to %s", own[0].Event.EventType(), own[len(own)-1].Event.EventType())
	}
	if pop.Final == nil {
		return nil, false, nil
	}
	id := push.Frame
	// A scratch scope holding only this frame, live while its events fold.
	s := &State{Scope: push.Scope, Frames: map[string]*Frame{}, Tokens: map[string]*TokenRecord{}}
	fr := &Frame{ID: id, ParentID: push.ParentID, Goal: push.Goal, Inputs: cloneBytes(push.Inputs), Status: StatusActive,
		Depth: push.Depth, Budget: push.Budget, Limits: push.Limits, CreatedAt: push.At, PushSeq: own[0].Version}
	for _, c := range push.InDoubt { // carried on from the link it continues
		c.Input = cloneBytes(c.Input)
		fr.ToolCalls = append(fr.ToolCalls, c)
	}
	s.Frames[id] = fr
	stored := map[string]string{}
	for _, v := range own[1 : len(own)-1] {
		if cs, ok := v.Event.(*ContentStored); ok {
			if err := checkStored(cs); err != nil {
				return nil, false, err
			}
			stored[cs.Hash] = cs.Content
			continue
		}
		m := v.Event.EventMeta()
		if m.Frame != id || m.Scope != push.Scope {
			return nil, false, inconsistent("event %d is about %q, not %q", v.Version, m.Frame, id)
		}
		switch e := v.Event.(type) {
		case *FrameUpdated:
			if e.Goal != nil {
				fr.Goal = *e.Goal
			}
			if e.SetInputs {
				fr.Inputs = cloneBytes(e.Inputs)
			}
		case *HandleAdded:
			h := e.Handle
			if err = inlineRefs(stored, &h); err == nil {
				err = applyHandles(s, id, v.Version, "", h)
			}
		case *FrameCompacted:
			c := *e
			if c.Summary != nil {
				sum := *c.Summary
				c.Summary = &sum
			}
			if err = inlineRefs(stored, c.Summary); err == nil {
				err = applyCompacted(s, &c, v.Version)
			}
		case *ToolStarted:
			err = applyToolStarted(s, e)
		case *ToolFinished:
			c := *e
			if err = inlineRefs(stored, &c.CallHandle, &c.ResultHandle); err == nil {
				err = applyToolFinished(s, &c, v.Version)
			}
		}
		if err != nil {
			return nil, false, err
		}
	}
	for i := range fr.ToolCalls {
		if tc := &fr.ToolCalls[i]; !tc.Finished {
			tc.Abandoned = true
		}
	}
	r := pop.Final
	if r.ID != id || r.Handles != int64(len(fr.Handles)) || r.ToolCalls != int64(len(fr.ToolCalls)) || r.ContextTokens != fr.ContextTokens {
		return nil, false, inconsistent("frame %q's record (%d handles, %d calls, %d tokens) disagrees with its events (%d, %d, %d)",
			id, r.Handles, r.ToolCalls, r.ContextTokens, len(fr.Handles), len(fr.ToolCalls), fr.ContextTokens)
	}
	fr.ParentID, fr.Goal, fr.Status, fr.Depth, fr.Budget, fr.Limits, fr.Cost = r.ParentID, r.Goal, r.Status, r.Depth, r.Budget, r.Limits, r.Cost
	fr.Results = append([]ResultRef(nil), r.Results...)
	fr.Kids, fr.CreatedAt, fr.CompletedAt, fr.PushSeq, fr.ContextHash = r.Kids, r.CreatedAt, r.CompletedAt, r.PushSeq, r.ContextHash
	fr.LiveKids, fr.Suspension = 0, nil
	fr.ContinuedFrom, fr.ContinuedTo, fr.ChainRoot, fr.ContextWindow = r.ContinuedFrom, r.ContinuedTo, r.ChainRoot, r.ContextWindow
	fr.Reservation = r.Reservation
	return fr, true, nil
}

// FromRecord is a finished frame as its record describes it, without its
// handles, tool calls and inputs.
func FromRecord(r *FrameRecord) *Frame {
	return &Frame{ID: r.ID, ParentID: r.ParentID, Goal: r.Goal, Status: r.Status, Depth: r.Depth, Budget: r.Budget,
		Limits: r.Limits, Cost: r.Cost, Results: append([]ResultRef(nil), r.Results...), Kids: r.Kids,
		CreatedAt: r.CreatedAt, CompletedAt: r.CompletedAt, PushSeq: r.PushSeq, ContextHash: r.ContextHash, ContextTokens: r.ContextTokens,
		ContinuedFrom: r.ContinuedFrom, ContinuedTo: r.ContinuedTo, ChainRoot: r.ChainRoot, ContextWindow: r.ContextWindow, Reservation: r.Reservation}
}

// HistoricView is a read-only state that holds path — a frame and its
// ancestors, root first, some of them finished (read back from the log) —
// as of live's version, so that reads written against a State (a pack, a
// stack) answer for a finished frame as they did while it was live. Never
// decide or apply anything on it.
func HistoricView(live *State, path []*Frame) *State {
	v := &State{Scope: live.Scope, Version: live.Version, Frames: make(map[string]*Frame, len(path)), Tokens: map[string]*TokenRecord{},
		Horizon: live.Horizon, Skew: live.Skew, LastAt: live.LastAt, Counter: live.Counter, KeepFinished: true}
	for _, f := range path {
		v.Frames[f.ID] = f
		v.Order = append(v.Order, f.ID)
	}
	return v
}
