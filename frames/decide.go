package frames

import (
	"fmt"
	"strings"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
)

// Decide validates cmd against s and returns the events that carry it out.
// It never changes s: applying the events (after they are durable) does.
// Every rejection is an error matching one of this package's (or budget's)
// sentinels.
func Decide(cfg Config, s *State, cmd Command) ([]Event, error) {
	if s == nil || cmd == nil {
		return nil, invalid("nil state or command")
	}
	h := cmd.header()
	if h.RequestID != "" {
		if err := ValidateID("request id", h.RequestID, cfg.MaxIDBytes); err != nil {
			return nil, err
		}
	}
	if len(h.RequestHash) > 64 {
		return nil, invalid("request hash of %d bytes", len(h.RequestHash))
	}
	if h.Reason > ReasonRunFinished {
		return nil, invalid("unknown checkpoint reason %d", h.Reason)
	}
	if h.Now <= 0 {
		return nil, invalid("server time not set")
	}
	d := decider{cfg: cfg, s: s, h: h}
	var evs []Event
	var err error
	switch c := cmd.(type) {
	case *PushFrame:
		evs, err = d.push(c)
	case *UpdateFrame:
		evs, err = d.update(c)
	case *PopFrame:
		evs, err = d.pop(c)
	case *AddContextHandle:
		evs, err = d.addHandle(c)
	case *AddResult:
		evs, err = d.addResult(c)
	case *RecordUsage:
		evs, err = d.usage(c)
	case *StartToolCall:
		evs, err = d.startTool(c)
	case *FinishToolCall:
		evs, err = d.finishTool(c)
	case *SuspendFrame:
		evs, err = d.suspend(c)
	case *ResumeFrame:
		evs, err = d.resume(c)
	case *CompactContext:
		evs, err = d.compact(c)
	case *ResumeActor:
		evs, err = d.resumeActor(c)
	case *ApplyRetention:
		evs, err = d.retention(c)
	case *DestroyScope:
		evs, err = d.destroy(c)
	case *ContinueFrame:
		evs, err = d.continueCmd(c)
	case *ResumeChain:
		evs, err = d.resumeChain(c)
	case *ChangeCounter:
		evs, err = d.changeCounter(c)
	case *ChangeState:
		evs, err = d.changeState(c)
	case *ExpireState:
		evs, err = d.expireState(c)
	case *ReserveSpend:
		evs, err = d.reserveSpend(c)
	case *RenewReservation:
		evs, err = d.renewReservation(c)
	case *ReleaseReservation:
		evs, err = d.releaseReservation(c)
	case *SettleSpend:
		evs, err = d.settleSpend(c)
	case *AckSettlement:
		evs, err = d.ackSettlement(c)
	case *RecordPartialOutput:
		evs, err = d.partialOutput(c)
	default:
		return nil, invalid("unknown command %T", cmd)
	}
	if err != nil {
		return nil, err
	}
	if len(evs) > 0 {
		evs[0].EventMeta().RequestHash = cloneBytes(h.RequestHash)
	}
	return evs, nil
}

// CheckRequest tells whether a request id was already committed in this
// scope: dup is true with the original record when id and hash match; a
// known id with another hash is ErrRequestIDReused; an unknown id stamped
// with a first-send time older than the horizon is ErrRequestExpired (see
// ExpiredRequest). now is the server's time (unix ns).
func (s *State) CheckRequest(id string, hash []byte, now int64) (rec RequestRecord, dup bool, err error) {
	if id == "" {
		return RequestRecord{}, false, nil
	}
	// Expiry comes first, so the answer at the horizon does not depend on
	// whether the record has been dropped yet.
	if s.ExpiredRequest(id, now) {
		sent, _ := RequestIDTime(id)
		return RequestRecord{}, false, fmt.Errorf("%w: %q was first sent %s ago, past the horizon of %s (plus %s of clock skew): "+
			"its outcome is no longer guaranteed to be remembered, so it is not applied; send a new request id if it must run",
			ErrRequestExpired, id, span(now-sent), span(s.Horizon), span(s.Skew))
	}
	rec, ok, err := s.Request(id)
	if err != nil {
		return RequestRecord{}, false, err
	}
	if !ok {
		return RequestRecord{}, false, nil
	}
	if rec.Gone {
		return RequestRecord{}, false, fmt.Errorf("%w: %q was applied before the scope was destroyed; its reply is gone, and it is not applied again",
			ErrRequestExpired, id)
	}
	if string(rec.Hash) != string(hash) {
		return RequestRecord{}, false, fmt.Errorf("%w: %q", ErrRequestIDReused, id)
	}
	return rec, true, nil
}

// ExpiredRequest reports whether id carries a first-send time (RequestIDTime)
// older than now - (Horizon + Skew). Records are kept until Horizon + 2·Skew
// after their commit, so an id the scope has forgotten always reads as
// expired here when the client's clock was at most Skew ahead of the
// server's: the record committed no earlier than the id's time minus Skew.
// Ids that carry no time are remembered for the same span after their
// commit and not refused after it.
func (s *State) ExpiredRequest(id string, now int64) bool {
	sent, ok := RequestIDTime(id)
	return ok && sent < now-s.Horizon-s.Skew
}

// span formats nanoseconds for a message without importing time's clock.
func span(ns int64) string {
	switch {
	case ns >= 2*24*3600*1e9:
		return fmt.Sprintf("%.1f days", float64(ns)/(24*3600*1e9))
	case ns >= 2*3600*1e9:
		return fmt.Sprintf("%.1f hours", float64(ns)/(3600*1e9))
	default:
		return fmt.Sprintf("%.1f minutes", float64(ns)/(60*1e9))
	}
}

type decider struct {
	cfg Config
	s   *State
	h   *Header
}

func (d decider) meta(frame string, implied Reason) Meta {
	r := d.h.Reason
	if r == ReasonImplied {
		r = implied
	}
	return Meta{Scope: d.s.Scope, Frame: frame, At: d.h.Now, RequestID: d.h.RequestID, Reason: r}
}

// frame finds a frame by id; a frame of another scope is simply not here.
// A frame that finished and left the projection is returned as a stand-in
// that carries only its id and final status (it is never live, so every
// rule refuses it as before).
func (d decider) frame(id string) (*Frame, error) {
	if err := ValidateID("frame id", id, d.cfg.MaxIDBytes); err != nil {
		return nil, err
	}
	if f := d.s.Frames[id]; f != nil {
		return f, nil
	}
	status, ok, err := d.s.finished(id)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrFrameNotFound, id)
	}
	return &Frame{ID: id, Status: status}, nil
}

func (d decider) liveFrame(id string) (*Frame, error) {
	f, err := d.frame(id)
	if err != nil {
		return nil, err
	}
	if f.Status == StatusContinued {
		return nil, d.s.continued(id)
	}
	if !f.Status.Live() {
		return nil, fmt.Errorf("%w: %q is %s", ErrFrameNotLive, id, f.Status)
	}
	return f, nil
}

func (d decider) push(c *PushFrame) ([]Event, error) {
	if err := ValidateID("frame id", c.FrameID, d.cfg.MaxIDBytes); err != nil {
		return nil, err
	}
	if d.s.Frames[c.FrameID] != nil {
		return nil, fmt.Errorf("%w: frame %q", ErrDuplicateID, c.FrameID)
	}
	if _, ok, err := d.s.finished(c.FrameID); err != nil || ok {
		if err == nil {
			err = fmt.Errorf("%w: frame %q (a finished frame)", ErrDuplicateID, c.FrameID)
		}
		return nil, err
	}
	if err := checkText("goal", c.Goal, d.cfg.MaxGoalBytes); err != nil {
		return nil, err
	}
	if err := checkBytes("inputs", c.Inputs, d.cfg.MaxInputsBytes); err != nil {
		return nil, err
	}
	b := c.Budget
	if err := b.Validate(); err != nil {
		return nil, err
	}
	if b.Used != 0 || b.SubcallAllocation != 0 {
		return nil, invalid("a new frame's budget must have zero used and zero subcall allocation")
	}
	if err := c.Limits.Validate(); err != nil {
		return nil, err
	}
	if err := budget.NonNegative("context window", c.ContextWindow); err != nil {
		return nil, err
	}
	window := c.ContextWindow
	maxDepth := d.cfg.MaxDepth
	var depth int64
	if c.ParentID != "" {
		p, err := d.frame(c.ParentID)
		if err != nil {
			return nil, err
		}
		if p.Status == StatusContinued {
			return nil, fmt.Errorf("parent: %w", d.s.continued(p.ID))
		}
		if p.Status != StatusActive && p.Status != StatusWaiting {
			return nil, fmt.Errorf("%w: parent %q is %s", ErrParentNotLive, p.ID, p.Status)
		}
		depth = p.Depth + 1
		if window == 0 {
			window = p.ContextWindow
		}
		maxDepth = min(maxDepth, p.Budget.MaxSubframeDepth)
		if depth > maxDepth {
			return nil, fmt.Errorf("%w: depth %d, max %d", ErrMaxDepthExceeded, depth, maxDepth)
		}
		pb := p.Budget
		if err := pb.AllocateForSubcall(b.Total); err != nil {
			return nil, err
		}
		if err := d.checkSpawn(p); err != nil {
			return nil, err
		}
	}
	if b.MaxSubframeDepth == 0 || b.MaxSubframeDepth > maxDepth {
		b.MaxSubframeDepth = maxDepth
	}
	limits, rid := c.Limits, ""
	var binding *Binding
	if c.Reservation != nil {
		var err error
		if limits, rid, binding, err = d.bind(c, c.Reservation, c.ReservationToken); err != nil {
			return nil, err
		}
	}
	return []Event{&FramePushed{
		Meta: d.meta(c.FrameID, ReasonUserMessage), ParentID: c.ParentID, Goal: c.Goal,
		Inputs: cloneBytes(c.Inputs), Depth: depth, Budget: b, Limits: limits, ContextWindow: window,
		Reservation: rid, Binding: binding,
	}}, nil
}

// checkSpawn refuses a push under parent that would take the parent or any
// of its ancestors past its spawn limit: every descendant counts against
// every ancestor. Spawns are refused before they happen (no suspension).
func (d decider) checkSpawn(parent *Frame) error {
	for a := parent; a != nil; a = d.s.Frames[a.ParentID] {
		if a.Limits.Spawns > 0 && a.Cost.Spawns >= a.Limits.Spawns {
			v := &budget.Violation{Code: budget.SpawnsExceeded, Current: a.Cost.Spawns + 1, Max: a.Limits.Spawns}
			who := "parent"
			if a != parent {
				who = "ancestor"
			}
			return fmt.Errorf("%s %q: %w", who, a.ID, v)
		}
		if _, err := budget.Add(a.Cost.Spawns, 1); err != nil {
			return fmt.Errorf("spawns of %q: %w", a.ID, err)
		}
	}
	return nil
}

func (d decider) update(c *UpdateFrame) ([]Event, error) {
	f, err := d.liveFrame(c.FrameID)
	if err != nil {
		return nil, err
	}
	if c.Goal == nil && !c.SetInputs && c.Limits == nil && c.ReserveDelta == 0 && c.ContextHash == nil {
		return nil, invalid("update names no field")
	}
	if c.Goal != nil {
		if err := checkText("goal", *c.Goal, d.cfg.MaxGoalBytes); err != nil {
			return nil, err
		}
	}
	if !c.SetInputs && c.Inputs != nil {
		return nil, invalid("inputs given without SetInputs")
	}
	if err := checkBytes("inputs", c.Inputs, d.cfg.MaxInputsBytes); err != nil {
		return nil, err
	}
	if c.Limits != nil {
		if err := c.Limits.Validate(); err != nil {
			return nil, err
		}
	}
	if c.ContextHash != nil {
		if err := checkText("context hash", *c.ContextHash, 128); err != nil {
			return nil, err
		}
	}
	b := f.Budget
	if err := reserve(&b, c.ReserveDelta); err != nil {
		return nil, err
	}
	e := &FrameUpdated{Meta: d.meta(f.ID, ReasonUserMessage), Goal: c.Goal, SetInputs: c.SetInputs,
		Inputs: cloneBytes(c.Inputs), Limits: c.Limits, ReserveDelta: c.ReserveDelta, ContextHash: c.ContextHash}
	evs := []Event{e}
	// A limit lowered below what the frame already consumed is crossed now.
	if c.Limits != nil && f.Status != StatusSuspended {
		if v := c.Limits.Check(f.Cost); v != nil {
			s, err := d.limitSuspension(f, v, c.Mint, ReasonUserMessage)
			if err != nil {
				return nil, err
			}
			evs = append(evs, s)
		}
	}
	return evs, nil
}

// reserve reserves (delta > 0) or gives back (delta < 0) tokens.
func reserve(b *budget.TokenBudget, delta int64) error {
	if delta >= 0 {
		return b.Reserve(delta)
	}
	if delta == -1<<63 {
		return fmt.Errorf("%w: reserve delta %d", budget.ErrOverflow, delta)
	}
	return b.Unreserve(-delta)
}

// settled is a frame's budget and cost as a pop sequence changes them.
type settled struct {
	used     int64
	subcall  int64
	cost     budget.Cost
	children int // live children left
}

func (d decider) pop(c *PopFrame) ([]Event, error) {
	f, err := d.liveFrame(c.FrameID)
	if err != nil {
		return nil, err
	}
	switch c.Status {
	case StatusCompleted, StatusFailed, StatusCancelled:
	default:
		return nil, invalid("pop status must be completed, failed or cancelled, not %s", c.Status)
	}
	// Frames to pop: live descendants deepest first (post-order), then f.
	var order []*Frame
	var walk func(*Frame)
	walk = func(x *Frame) {
		for _, ch := range d.s.LiveChildren(x) {
			walk(ch)
		}
		order = append(order, x)
	}
	walk(f)
	if len(order) > 1 && !c.Cascade {
		return nil, fmt.Errorf("%w: %q has %d live children (pop with cascade to cancel them)", ErrLiveChildren, f.ID, f.LiveKids)
	}
	scratch := map[string]*settled{}
	get := func(x *Frame) *settled {
		st := scratch[x.ID]
		if st == nil {
			st = &settled{used: x.Budget.Used, subcall: x.Budget.SubcallAllocation, cost: x.Cost, children: int(x.LiveKids)}
			scratch[x.ID] = st
		}
		return st
	}
	implied := ReasonUserMessage
	if f.ParentID == "" {
		implied = ReasonRunFinished
	}
	var evs []Event
	for _, x := range order {
		st := get(x)
		status := StatusCancelled
		if x == f {
			status = c.Status
		}
		e := &FramePopped{Meta: d.meta(x.ID, implied), Status: status, Abandoned: x.openCalls()}
		final := RecordOf(x)
		final.Budget.Used, final.Budget.SubcallAllocation, final.Cost = st.used, st.subcall, st.cost
		final.Status, final.CompletedAt = status, d.h.Now
		e.Final = &final
		if p := d.s.Frames[x.ParentID]; p != nil {
			ps := get(p)
			charged := chargeable(st.cost)
			pb := budget.TokenBudget{Total: p.Budget.Total, Used: ps.used, Reserved: p.Budget.Reserved, SubcallAllocation: ps.subcall}
			// The charge saturates rather than fail: a frame can always end.
			clampedUsed, err := pb.ReturnFromChildSaturating(x.Budget.Total, st.used)
			if err != nil {
				return nil, fmt.Errorf("settling %q with its parent: %w", x.ID, err)
			}
			pc, clampedCost := ps.cost.PlusSaturating(charged)
			ps.used, ps.subcall, ps.cost = pb.Used, pb.SubcallAllocation, pc
			ps.children--
			e.Released, e.ChargedTokens, e.ChargedCost = x.Budget.Total, st.used, charged
			e.Saturated = clampedUsed || clampedCost
		}
		evs = append(evs, e)
	}
	// The parent may now be over one of its limits: it is suspended, not failed.
	if p := d.s.Frames[f.ParentID]; p != nil && p.Status != StatusSuspended {
		if v := p.Limits.Check(scratch[p.ID].cost); v != nil {
			e, err := d.limitSuspension(p, v, c.Mint, implied)
			if err != nil {
				return nil, err
			}
			evs = append(evs, e)
		}
	}
	return evs, nil
}

// chargeable is the part of a child's cost that rolls up into its parent:
// tokens, turns and spend add up; spawns are counted where they happen and
// wall-clock durations overlap, so neither is charged.
func chargeable(c budget.Cost) budget.Cost {
	return budget.Cost{InputTokens: c.InputTokens, OutputTokens: c.OutputTokens, Turns: c.Turns, SpendMicros: c.SpendMicros}
}

func (d decider) limitSuspension(f *Frame, v *budget.Violation, m Mint, implied Reason) (Event, error) {
	if err := d.checkMint(m); err != nil {
		return nil, err
	}
	return &FrameSuspended{Meta: d.meta(f.ID, implied), Suspension: Suspension{
		Reason: SuspendLimit, TokenID: m.TokenID, At: d.h.Now, ExpiresAt: m.ExpiresAt,
		Limit: &budget.Violation{Code: v.Code, Current: v.Current, Max: v.Max},
	}}, nil
}

func (d decider) checkMint(m Mint) error {
	if err := ValidateID("token id", m.TokenID, d.cfg.MaxIDBytes); err != nil {
		return err
	}
	if d.s.Tokens[m.TokenID] != nil {
		return fmt.Errorf("%w: token %q", ErrDuplicateID, m.TokenID)
	}
	if m.ExpiresAt <= d.h.Now {
		return invalid("token expiry %d is not after now %d", m.ExpiresAt, d.h.Now)
	}
	return nil
}

func (d decider) checkHandle(f *Frame, h *ContextHandle, extra int) error {
	if err := ValidateID("handle id", h.ID, d.cfg.MaxIDBytes); err != nil {
		return err
	}
	if f.Handle(h.ID) != nil {
		return fmt.Errorf("%w: handle %q", ErrDuplicateID, h.ID)
	}
	if err := checkText("kind", h.Kind, d.cfg.MaxNameBytes); err != nil {
		return err
	}
	if !h.Priority.Valid() {
		return invalid("handle priority %d", h.Priority)
	}
	if !h.Role.Valid() {
		return invalid("handle role %.64q: one of system, user, assistant, tool, or none", h.Role)
	}
	if err := checkText("content", h.Content, d.cfg.MaxContentBytes); err != nil {
		return err
	}
	if h.ContentRef != "" || h.StoresContent {
		return invalid("handle %q names a content reference: the server assigns them", h.ID)
	}
	if err := budget.NonNegative("handle tokens", h.Tokens); err != nil {
		return err
	}
	if err := budget.NonNegative("handle light tokens", h.LightTokens); err != nil {
		return err
	}
	if h.Group != "" {
		if err := ValidateID("group", h.Group, d.cfg.MaxIDBytes); err != nil {
			return err
		}
	}
	if len(f.Handles)+extra > d.cfg.MaxHandlesPerFrame {
		return fmt.Errorf("%w: frame %q has %d, limit %d", ErrTooManyHandles, f.ID, len(f.Handles), d.cfg.MaxHandlesPerFrame)
	}
	return nil
}

func (d decider) addHandle(c *AddContextHandle) ([]Event, error) {
	f, err := d.liveFrame(c.FrameID)
	if err != nil {
		return nil, err
	}
	h := c.Handle
	if err := d.checkHandle(f, &h, 1); err != nil {
		return nil, err
	}
	if len(h.Covers) > 0 {
		return nil, invalid("only compaction adds summary handles")
	}
	if _, err := budget.Add(f.ContextTokens, h.Tokens); err != nil {
		return nil, err
	}
	h.CreatedAt = d.h.Now
	h.Seq = 0 // assigned on Apply: the event's version
	pending := h
	d.byRef(f, &h)
	return d.autoContinue(f, []Event{&HandleAdded{Meta: d.meta(f.ID, ReasonUserMessage), Handle: h}}, []ContextHandle{pending}, c.Continue), nil
}

func (d decider) addResult(c *AddResult) ([]Event, error) {
	f, err := d.liveFrame(c.FrameID)
	if err != nil {
		return nil, err
	}
	r := c.Result
	if err := ValidateID("result id", r.ID, d.cfg.MaxIDBytes); err != nil {
		return nil, err
	}
	for _, x := range f.Results {
		if x.ID == r.ID {
			return nil, fmt.Errorf("%w: result %q", ErrDuplicateID, r.ID)
		}
	}
	for _, t := range []struct {
		n, v string
		max  int
	}{{"result kind", r.Kind, d.cfg.MaxNameBytes}, {"result ref", r.Ref, d.cfg.MaxNameBytes}, {"result summary", r.Summary, d.cfg.MaxContentBytes}} {
		if err := checkText(t.n, t.v, t.max); err != nil {
			return nil, err
		}
	}
	r.CreatedAt = d.h.Now
	return []Event{&ResultAdded{Meta: d.meta(f.ID, ReasonUserMessage), Result: r}}, nil
}

func (d decider) usage(c *RecordUsage) ([]Event, error) {
	f, err := d.liveFrame(c.FrameID)
	if err != nil {
		return nil, err
	}
	if err := c.Cost.Validate(); err != nil {
		return nil, err
	}
	if c.Cost.Spawns != 0 {
		return nil, invalid("spawns are counted by pushes, not recorded as usage")
	}
	if c.Cost.IsZero() && c.Calibration == nil {
		return nil, invalid("usage records nothing")
	}
	var cal *CalibrationSample
	if c.Calibration != nil {
		if err := checkCalibration(c.Calibration, d.cfg.MaxIDBytes); err != nil {
			return nil, err
		}
		cc := *c.Calibration
		cal = &cc
	}
	cost, err := f.Cost.Plus(c.Cost)
	if err != nil {
		return nil, err
	}
	tokens, _ := c.Cost.Tokens()
	b := f.Budget
	if err := b.RecordUsage(tokens); err != nil {
		return nil, err
	}
	ev := &UsageRecorded{Meta: d.meta(f.ID, ReasonAssistantTurnCommitted), Cost: c.Cost, Calibration: cal}
	if cal != nil {
		ev.CalibrationKeep = d.cfg.calibrationSamples()
	}
	evs := []Event{ev}
	if f.Status != StatusSuspended {
		v := f.Limits.Check(cost)
		if v == nil {
			v = d.s.overCommitted(f, cost.SpendMicros, d.h.Now)
		}
		if v != nil {
			e, err := d.limitSuspension(f, v, c.Mint, ReasonAssistantTurnCommitted)
			if err != nil {
				return nil, err
			}
			evs = append(evs, e)
		}
	}
	return evs, nil
}

func (d decider) startTool(c *StartToolCall) ([]Event, error) {
	f, err := d.liveFrame(c.FrameID)
	if err != nil {
		return nil, err
	}
	if f.Status == StatusSuspended {
		return nil, fmt.Errorf("%w: %q cannot start a tool call until it is resumed", ErrFrameSuspended, f.ID)
	}
	if err := ValidateID("tool call id", c.CallID, d.cfg.MaxIDBytes); err != nil {
		return nil, err
	}
	if f.ToolCall(c.CallID) != nil {
		return nil, fmt.Errorf("%w: tool call %q", ErrDuplicateID, c.CallID)
	}
	if c.Name == "" {
		return nil, invalid("tool name is empty")
	}
	if err := checkText("tool name", c.Name, d.cfg.MaxNameBytes); err != nil {
		return nil, err
	}
	if err := checkBytes("tool input", c.Input, d.cfg.MaxInputsBytes); err != nil {
		return nil, err
	}
	return []Event{&ToolStarted{Meta: d.meta(f.ID, ReasonUserMessage), CallID: c.CallID, Name: c.Name, Input: cloneBytes(c.Input),
		Owner: d.h.Owner, Epoch: d.h.Epoch}}, nil
}

func (d decider) finishTool(c *FinishToolCall) ([]Event, error) {
	f, err := d.liveFrame(c.FrameID)
	if err != nil {
		return nil, err
	}
	if err := ValidateID("tool call id", c.CallID, d.cfg.MaxIDBytes); err != nil {
		return nil, err
	}
	tc := f.ToolCall(c.CallID)
	if tc == nil {
		return nil, fmt.Errorf("%w: %q", ErrToolCallUnknown, c.CallID)
	}
	if tc.Finished {
		return nil, fmt.Errorf("%w: %q", ErrToolCallFinished, c.CallID)
	}
	ch, rh := c.CallHandle, c.ResultHandle
	ch.Group, rh.Group = c.CallID, c.CallID
	if err := d.checkHandle(f, &ch, 2); err != nil {
		return nil, err
	}
	if err := d.checkHandle(f, &rh, 2); err != nil {
		return nil, err
	}
	if ch.ID == rh.ID {
		return nil, fmt.Errorf("%w: call and result handle share id %q", ErrDuplicateID, ch.ID)
	}
	if len(ch.Covers)+len(rh.Covers) > 0 {
		return nil, invalid("only compaction adds summary handles")
	}
	total, err := budget.Add(ch.Tokens, rh.Tokens)
	if err == nil {
		_, err = budget.Add(f.ContextTokens, total)
	}
	if err != nil {
		return nil, err
	}
	ch.CreatedAt, rh.CreatedAt = d.h.Now, d.h.Now
	ch.Seq, rh.Seq = 0, 0
	pending := []ContextHandle{ch, rh}
	d.byRef(f, &ch, &rh)
	evs := []Event{&ToolFinished{Meta: d.meta(f.ID, ReasonToolResultsCommitted), CallID: c.CallID, IsError: c.IsError, CallHandle: ch, ResultHandle: rh}}
	if c.Continue != nil && d.cfg.ContinueAt > 0 {
		// The continuation sees the call finished: it no longer carries it in doubt.
		done := *f
		done.ToolCalls = append([]ToolCall(nil), f.ToolCalls...)
		done.ToolCall(c.CallID).Finished = true
		evs = d.autoContinue(&done, evs, pending, c.Continue)
	}
	return evs, nil
}

func (d decider) suspend(c *SuspendFrame) ([]Event, error) {
	f, err := d.liveFrame(c.FrameID)
	if err != nil {
		return nil, err
	}
	if f.Status == StatusSuspended {
		return nil, fmt.Errorf("%w: %q is already suspended", ErrNotSuspendable, f.ID)
	}
	if !c.Reason.Valid() {
		return nil, invalid("suspension reason %q (want limit, error, budget or approval)", c.Reason)
	}
	if err := checkText("note", c.Note, d.cfg.MaxNameBytes); err != nil {
		return nil, err
	}
	if err := d.checkMint(c.Mint); err != nil {
		return nil, err
	}
	return []Event{&FrameSuspended{Meta: d.meta(f.ID, ReasonUserMessage), Suspension: Suspension{
		Reason: c.Reason, Note: c.Note, TokenID: c.Mint.TokenID, At: d.h.Now, ExpiresAt: c.Mint.ExpiresAt,
	}}}, nil
}

func (d decider) resume(c *ResumeFrame) ([]Event, error) {
	f, err := d.frame(c.FrameID)
	if err != nil {
		return nil, err
	}
	if f.Status == StatusContinued {
		return nil, d.s.continued(f.ID)
	}
	if err := ValidateID("token id", c.TokenID, d.cfg.MaxIDBytes); err != nil {
		return nil, err
	}
	tok := d.s.Tokens[c.TokenID]
	if tok != nil && tok.FrameID == f.ID && tok.Used {
		return nil, ErrTokenUsed
	}
	if !f.Status.Live() && d.s.Frames[f.ID] == nil {
		// Finished: its unused token went with it.
		return nil, fmt.Errorf("%w: %q is %s", ErrNotSuspended, f.ID, f.Status)
	}
	if tok == nil || tok.FrameID != f.ID {
		return nil, ErrTokenUnknown
	}
	if f.Status != StatusSuspended || f.Suspension == nil || f.Suspension.TokenID != c.TokenID {
		return nil, fmt.Errorf("%w: %q is %s", ErrNotSuspended, f.ID, f.Status)
	}
	if d.h.Now > tok.ExpiresAt {
		return nil, ErrTokenExpired
	}
	return []Event{&FrameResumed{Meta: d.meta(f.ID, ReasonUserMessage), TokenID: c.TokenID}}, nil
}

func (d decider) compact(c *CompactContext) ([]Event, error) {
	f, err := d.liveFrame(c.FrameID)
	if err != nil {
		return nil, err
	}
	// A compaction that removes nothing is still recorded: its event keeps
	// the request id, so that a resend gets the original reply.
	if err := checkText("strategy", c.Strategy, 64); err != nil {
		return nil, err
	}
	if !c.Level.Valid() {
		return nil, invalid("compaction level %d", c.Level)
	}
	if c.OriginalTokens < 0 || c.FinalTokens < 0 {
		return nil, fmt.Errorf("%w: compaction token counts", budget.ErrNegativeAmount)
	}
	removed := make(map[string]bool, len(c.Removed))
	groups := map[string]bool{}
	for _, id := range c.Removed {
		h := f.Handle(id)
		if h == nil {
			return nil, fmt.Errorf("%w: %q", ErrHandleNotFound, id)
		}
		if removed[id] {
			return nil, fmt.Errorf("%w: handle %q removed twice", ErrDuplicateID, id)
		}
		if h.Priority == compaction.Critical {
			return nil, fmt.Errorf("%w: %q", ErrCriticalHandle, id)
		}
		removed[id] = true
		if h.Group != "" {
			groups[h.Group] = true
		}
	}
	if len(groups) > 0 {
		for _, h := range f.Handles {
			if groups[h.Group] && !removed[h.ID] {
				return nil, fmt.Errorf("%w: group %q would lose %q but keep %q", ErrSplitGroup, h.Group, firstRemovedOf(f, removed, h.Group), h.ID)
			}
		}
	}
	var sum *ContextHandle
	if c.Summary != nil {
		h := *c.Summary
		h.Covers = append([]string(nil), h.Covers...)
		if err := d.checkHandle(f, &h, 1-len(c.Removed)); err != nil {
			return nil, err
		}
		for _, id := range h.Covers {
			if !removed[id] {
				return nil, invalid("summary covers %q, which is not removed", id)
			}
		}
		h.CreatedAt, h.Seq = d.h.Now, 0
		sum = &h
	}
	if f.ContextWindow > 0 {
		// The refusal rule holds a frame with a window of its own.
		var freed int64
		for _, id := range c.Removed {
			freed += f.Handle(id).Tokens
		}
		if sum != nil {
			freed -= sum.Tokens
		}
		if err := CheckFreed(f.Freed, freed, f.ContextWindow); err != nil {
			return nil, fmt.Errorf("compacting %q: %w", f.ID, err)
		}
	}
	d.byRef(f, sum)
	return []Event{&FrameCompacted{Meta: d.meta(f.ID, ReasonUserMessage), Strategy: c.Strategy,
		Removed: append([]string(nil), c.Removed...), Summary: sum, OriginalTokens: c.OriginalTokens,
		FinalTokens: c.FinalTokens, Level: c.Level}}, nil
}

func firstRemovedOf(f *Frame, removed map[string]bool, group string) string {
	for _, h := range f.Handles {
		if h.Group == group && removed[h.ID] {
			return h.ID
		}
	}
	return ""
}

func (d decider) resumeActor(c *ResumeActor) ([]Event, error) {
	if c.FramesRecovered < 0 || c.PendingItems < 0 {
		return nil, fmt.Errorf("%w: recovery counts", budget.ErrNegativeAmount)
	}
	return []Event{&ActorResumed{Meta: d.meta("", ReasonUserMessage), FramesRecovered: c.FramesRecovered,
		PendingItems: c.PendingItems, LastSeq: c.LastSeq}}, nil
}

func (d decider) retention(c *ApplyRetention) ([]Event, error) {
	switch {
	case c.Through <= d.s.RemovedThrough:
		return nil, invalid("retention through %d: history is already removed through %d", c.Through, d.s.RemovedThrough)
	case c.Through > d.s.Version:
		return nil, invalid("retention through %d beyond the scope's version %d", c.Through, d.s.Version)
	case c.Runs < 0:
		return nil, fmt.Errorf("%w: runs removed", budget.ErrNegativeAmount)
	case len(c.Hash) != 64 || strings.Trim(c.Hash, "0123456789abcdef") != "":
		return nil, invalid("retention hash %q is not a lowercase hex SHA-256", c.Hash)
	}
	for _, t := range []struct{ n, v string }{{"why", c.Why}, {"archive", c.Archive}, {"archive digest", c.ArchiveSHA256}} {
		if err := checkText(t.n, t.v, d.cfg.MaxNameBytes); err != nil {
			return nil, err
		}
	}
	if err := d.s.checkRetentionKeepsLiveChains(c.Through); err != nil {
		return nil, err
	}
	// Content live handles still refer to is stored again at the head
	// before the prefix that holds it goes.
	again, err := d.restoreLive(c.Through)
	if err != nil {
		return nil, err
	}
	return append([]Event{&RetentionApplied{Meta: d.meta("", ReasonUserMessage), Through: c.Through, Hash: c.Hash, Runs: c.Runs,
		Why: c.Why, Archive: c.Archive, ArchiveSHA256: c.ArchiveSHA256}}, again...), nil
}

// destroyed lists what a destroy of s drops: its live frames in push
// order, the tool calls that may have run (in doubt on the live frames,
// then those already abandoned) and its unused tokens.
func destroyed(s *State) (live []string, calls []AbandonedCall, tokens int64) {
	for _, f := range s.LiveFrames() {
		live = append(live, f.ID)
		for _, c := range f.InDoubt() {
			c.Input = cloneBytes(c.Input)
			c.Abandoned = true
			calls = append(calls, AbandonedCall{FrameID: f.ID, Goal: f.Goal, Status: StatusCancelled, Call: c})
		}
	}
	for _, a := range s.Abandoned {
		a.Call.Input = cloneBytes(a.Call.Input)
		calls = append(calls, a)
	}
	for _, t := range s.Tokens {
		if !t.Used {
			tokens++
		}
	}
	return live, calls, tokens
}

func (d decider) destroy(c *DestroyScope) ([]Event, error) {
	if err := checkText("why", c.Why, d.cfg.MaxNameBytes); err != nil {
		return nil, err
	}
	switch {
	case d.s.Version == 0 && c.Hash != "":
		return nil, invalid("destroy hash %q of a scope without events", c.Hash)
	case d.s.Version > 0 && (len(c.Hash) != 64 || strings.Trim(c.Hash, "0123456789abcdef") != ""):
		return nil, invalid("destroy hash %q is not a lowercase hex SHA-256", c.Hash)
	}
	live, calls, tokens := destroyed(d.s)
	if len(live) > 0 && !c.Force {
		inDoubt := 0
		for _, f := range d.s.LiveFrames() {
			inDoubt += len(f.InDoubt())
		}
		return nil, fmt.Errorf("%w: scope %q has %d live frame(s), %d unused suspension token(s) and %d tool call(s) in doubt: "+
			"destroy with force to cancel them", ErrLiveChildren, d.s.Scope, len(live), tokens, inDoubt)
	}
	return []Event{&ScopeDestroyed{Meta: d.meta("", ReasonUserMessage), Through: d.s.Version, Hash: c.Hash, Forced: c.Force,
		Cancelled: live, Abandoned: calls, Tokens: tokens, Why: c.Why}}, nil
}
