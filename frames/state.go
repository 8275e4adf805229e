package frames

import "fmt"

// DefaultRequestHorizon is how long a scope remembers a request id after
// the request committed: 7 days, the default lifetime of a suspension
// token, so that an agent that resumes a week-old suspension and resends
// what it was doing is still answered from the log. Payment APIs keep
// idempotency keys for 24 hours to 30 days; agents' retries span restarts
// and human approvals, hence days rather than hours.
const DefaultRequestHorizon int64 = 7 * 24 * 3600 * 1e9

// DefaultClockSkew is how far a client's clock may be from the server's
// without weakening the horizon's promise (see ExpiredRequest).
const DefaultClockSkew int64 = 10 * 60 * 1e9

// RequestRecord remembers a committed request: its id, the digest of what it
// asked, the versions of the events it produced (from which the shell
// rebuilds the original reply for a repeat) and when it committed.
type RequestRecord struct {
	ID           string `msgpack:"id"`
	Hash         []byte `msgpack:"h"`
	FirstVersion int64  `msgpack:"f"`
	LastVersion  int64  `msgpack:"l"`
	// At is the server time of the request's events (unix ns); 0 in
	// snapshots written before the horizon existed (Normalize fills it).
	At int64 `msgpack:"a,omitempty"`
	// Gone says the request's records were removed by a destroy of the
	// scope within the horizon: it was applied, and its reply is gone.
	Gone bool `msgpack:"-"`
}

// TokenRecord is a suspension token the scope issued.
type TokenRecord struct {
	FrameID   string `msgpack:"f"`
	ExpiresAt int64  `msgpack:"x"`
	Used      bool   `msgpack:"u"`
}

// AbandonedCall is a tool call that was still open when its frame
// finished: it may or may not have run, and stays on record for good.
type AbandonedCall struct {
	FrameID string   `msgpack:"f"`
	Goal    string   `msgpack:"g"`
	Status  Status   `msgpack:"st"` // the frame's final status
	Call    ToolCall `msgpack:"c"`
}

// History answers for what a live projection no longer holds: frames that
// finished and requests that committed. The shell implements it over the
// store's index and log; a State without one knows no history (a fold that
// keeps finished frames, or a test of one run).
type History interface {
	// FinishedFrame returns the final status of a frame of this scope that
	// finished; ok is false if the scope never had a frame with id.
	FinishedFrame(id string) (status Status, ok bool, err error)
	// Request returns the record of a request this scope committed.
	Request(id string) (rec RequestRecord, ok bool, err error)
}

// State is a scope's projection: the fold of its events. It holds what is
// live — the live frames whole, the tokens that can still be used or
// refused, the tool calls abandoned by finished frames — and counts for
// the rest, so that it (and its snapshot) grows with the live work, not
// with history. A frame that finishes leaves it: its final record is its
// frame.popped event (Final), found through the store's index (History).
// It is not safe for concurrent use; the actor that owns it is its only
// user.
type State struct {
	Scope   string `msgpack:"sc"`
	Version int64  `msgpack:"v"` // stream version of the last applied event
	// Frames are the live frames by id, and Order their ids in push order
	// (with KeepFinished: every frame).
	Frames map[string]*Frame `msgpack:"fr"`
	Order  []string          `msgpack:"o"`
	// Tokens are the suspension tokens of live frames, and used tokens
	// until they expire (so that a reuse is refused as used).
	Tokens map[string]*TokenRecord `msgpack:"tk"`
	// Abandoned are the tool calls finished frames left open, in the order
	// their frames finished.
	Abandoned []AbandonedCall `msgpack:"ab,omitempty"`
	// Content is the content stored by reference that live handles refer
	// to, by hash (see ContentStored).
	Content map[string]*StoredContent `msgpack:"cs,omitempty"`
	// Chains are the scope's continuation chains by root, and LinkRoots
	// every chain link's root (only chain links: see chain.go).
	Chains    map[string]*Chain `msgpack:"chn,omitempty"`
	LinkRoots map[string]string `msgpack:"chl,omitempty"`
	// Finished counts the frames that finished.
	Finished int64 `msgpack:"fn"`
	// RemovedThrough is the version the scope's history was removed
	// through (RetentionApplied); 0 when nothing was.
	RemovedThrough int64 `msgpack:"rt,omitempty"`
	// Horizon and Skew (unix ns) bound how long request ids are
	// remembered; the shell sets them from its configuration (they are
	// not taken from a snapshot).
	Horizon int64 `msgpack:"hz,omitempty"`
	Skew    int64 `msgpack:"sk,omitempty"`
	Resumes int64 `msgpack:"rs"`
	// LastAt is the server time of the last applied event.
	LastAt int64 `msgpack:"la"`
	// Calibration holds the scope's last calibration samples, oldest
	// first (RecordUsage; see Calibrate). Absent from older snapshots.
	Calibration []CalibrationSample `msgpack:"cal,omitempty"`
	// Counter names the counter the live handles' Tokens are under
	// (scope.counter_changed sets it); "" is the estimate, as every
	// snapshot written before the field existed reads (CounterOf).
	Counter string `msgpack:"cn,omitempty"`
	// Reservations are the spend reservations of the scope's frames (open,
	// and returned ones until LedgerKeep after their grant), and Bindings
	// the scope's roots bound to other scopes' reservations: the outbox
	// of settlements (see ledger.go). Absent from older snapshots.
	Reservations map[string]*Reservation `msgpack:"rsv,omitempty"`
	Bindings     map[string]*Binding     `msgpack:"bnd,omitempty"`
	// KV is the scope's own key-value state and KVBytes what the scope's
	// state, both levels (frames' KV too), counts against MaxStateBytes
	// (see kv.go). Absent from older snapshots.
	KV      map[string]*KVEntry `msgpack:"kv,omitempty"`
	KVBytes int64               `msgpack:"kvb,omitempty"`
	// KeepFinished makes the fold keep finished frames (and children
	// lists): the whole history, for tools and checks. Never encoded.
	KeepFinished bool `msgpack:"-"`

	history History
	// carry is a continued frame's key-value state between its pop and its
	// continuation's push, two events of one append (kv.go).
	carry *kvCarry
}

// NewState returns the empty projection of scope (a scope with no events)
// remembering request ids for horizon (unix ns; <= 0 means
// DefaultRequestHorizon) with DefaultClockSkew.
func NewState(scope string, horizon int64) *State {
	s := &State{Scope: scope, Frames: map[string]*Frame{}, Tokens: map[string]*TokenRecord{}}
	s.SetHorizon(horizon, 0)
	return s
}

// SetHorizon sets how long request ids are remembered (<= 0: the defaults).
func (s *State) SetHorizon(horizon, skew int64) {
	if horizon <= 0 {
		horizon = DefaultRequestHorizon
	}
	if skew <= 0 {
		skew = DefaultClockSkew
	}
	s.Horizon, s.Skew = horizon, skew
}

// SetHistory gives the state its history (nil: none).
func (s *State) SetHistory(h History) { s.history = h }

// Normalize restores what a decoder leaves out (nil maps); call it after
// loading a State from a snapshot.
func (s *State) Normalize() {
	if s.Frames == nil {
		s.Frames = map[string]*Frame{}
	}
	if s.Tokens == nil {
		s.Tokens = map[string]*TokenRecord{}
	}
	if s.Horizon <= 0 || s.Skew <= 0 {
		s.SetHorizon(s.Horizon, s.Skew)
	}
}

// Frame returns the frame with id, or nil.
func (s *State) Frame(id string) *Frame { return s.Frames[id] }

// Request returns the committed request with id, from the history.
func (s *State) Request(id string) (RequestRecord, bool, error) {
	if s.history == nil {
		return RequestRecord{}, false, nil
	}
	return s.history.Request(id)
}

// finished returns the final status of a frame that left the projection.
func (s *State) finished(id string) (Status, bool, error) {
	if s.history == nil {
		return 0, false, nil
	}
	return s.history.FinishedFrame(id)
}

// TopOfStack is the most recently pushed frame that is still active, or nil.
func (s *State) TopOfStack() *Frame {
	for i := len(s.Order) - 1; i >= 0; i-- {
		if f := s.Frames[s.Order[i]]; f != nil && f.Status == StatusActive {
			return f
		}
	}
	return nil
}

// Ancestry returns the path root → id, or nil if id is unknown.
func (s *State) Ancestry(id string) []*Frame {
	var path []*Frame
	for f := s.Frames[id]; f != nil; f = s.Frames[f.ParentID] {
		path = append(path, f)
		if f.ParentID == "" {
			break
		}
	}
	for i, j := 0, len(path)-1; i < j; i, j = i+1, j-1 {
		path[i], path[j] = path[j], path[i]
	}
	return path
}

// LiveChildren returns f's children that are still live, in push order.
func (s *State) LiveChildren(f *Frame) []*Frame {
	if f.LiveKids == 0 {
		return nil
	}
	var out []*Frame
	for _, id := range s.Order {
		if c := s.Frames[id]; c != nil && c.ParentID == f.ID && c.Status.Live() {
			out = append(out, c)
		}
	}
	return out
}

// LiveFrames returns every live frame in push order.
func (s *State) LiveFrames() []*Frame {
	var out []*Frame
	for _, id := range s.Order {
		if f := s.Frames[id]; f != nil && f.Status.Live() {
			out = append(out, f)
		}
	}
	return out
}

// PendingKind classifies pending work found on recovery.
type PendingKind string

// Pending work kinds.
const (
	PendingWaitingForSubcall PendingKind = "waiting_for_subcall"
	PendingToolInDoubt       PendingKind = "tool_in_doubt"
	PendingSuspended         PendingKind = "suspended"
	PendingToolAbandoned     PendingKind = "tool_abandoned"
	// PendingSettlement: a root bound to another scope's reservation
	// finished and its spend is not yet acknowledged by that scope (the
	// server's outbox delivers it).
	PendingSettlement PendingKind = "settlement_pending"
)

// PendingWork names one piece of unfinished work in a scope.
type PendingWork struct {
	FrameID     string      `msgpack:"f"`
	Kind        PendingKind `msgpack:"k"`
	ToolCallID  string      `msgpack:"t,omitempty"`
	Description string      `msgpack:"d"`
	// Owner and Epoch, for a tool call in doubt or abandoned, are the
	// server that recorded its intent and the owner epoch it held
	// (ToolCall.Owner, ToolCall.Epoch; empty and 0 without fencing).
	Owner string `msgpack:"ow,omitempty"`
	Epoch uint64 `msgpack:"ep,omitempty"`
}

// startedBy says which owner recorded a call's intent, when one did.
func startedBy(c ToolCall) string {
	if c.Epoch == 0 {
		return ""
	}
	return fmt.Sprintf(" (intent recorded by owner %s, epoch %d)", c.Owner, c.Epoch)
}

// Pending lists the scope's unfinished work in push order: frames waiting on
// subcalls, tool calls started and never finished (in doubt: never re-run
// them blindly), suspended frames, and tool calls abandoned when their frame
// was popped (they may have run; they are listed for good, never forgotten).
func (s *State) Pending() []PendingWork {
	var out []PendingWork
	abandoned := func(frame string, status Status, c ToolCall) {
		out = append(out, PendingWork{FrameID: frame, Kind: PendingToolAbandoned, ToolCallID: c.ID, Owner: c.Owner, Epoch: c.Epoch,
			Description: "tool '" + c.Name + "' started and never finished: abandoned when its frame was popped (" + status.String() + ")" + startedBy(c)})
	}
	for _, a := range s.Abandoned {
		abandoned(a.FrameID, a.Status, a.Call)
	}
	for _, id := range s.Order {
		f := s.Frames[id]
		if f == nil {
			continue
		}
		if f.Status == StatusContinued {
			continue // its open calls went on, in doubt, with its continuation
		}
		for _, c := range f.Abandoned() {
			abandoned(f.ID, f.Status, c)
		}
		if !f.Status.Live() {
			continue
		}
		switch f.Status {
		case StatusWaiting:
			out = append(out, PendingWork{FrameID: f.ID, Kind: PendingWaitingForSubcall,
				Description: "frame '" + f.Goal + "' waiting for subcalls"})
		case StatusSuspended:
			d := "frame '" + f.Goal + "' suspended"
			if f.Suspension != nil {
				d += " (" + string(f.Suspension.Reason) + ")"
			}
			out = append(out, PendingWork{FrameID: f.ID, Kind: PendingSuspended, Description: d})
		}
		for _, c := range f.InDoubt() {
			out = append(out, PendingWork{FrameID: f.ID, Kind: PendingToolInDoubt, ToolCallID: c.ID, Owner: c.Owner, Epoch: c.Epoch,
				Description: "tool '" + c.Name + "' started and never finished: in doubt" + startedBy(c)})
		}
	}
	for _, b := range s.PendingSettlements() {
		out = append(out, PendingWork{FrameID: b.Root, Kind: PendingSettlement,
			Description: fmt.Sprintf("spend %d of reservation %s to settle with frame '%s' of scope '%s'", b.Reported, b.Reservation, b.Frame, b.Scope)})
	}
	return out
}

// Clone returns a deep copy of s that shares nothing with it; clones of equal
// states are reflect.DeepEqual.
// The clone has no history (SetHistory).
func (s *State) Clone() *State {
	c := *s
	c.history = nil
	c.Frames = make(map[string]*Frame, len(s.Frames))
	for id, f := range s.Frames {
		c.Frames[id] = f.Clone()
	}
	c.Order = append([]string(nil), s.Order...)
	c.Tokens = make(map[string]*TokenRecord, len(s.Tokens))
	for id, t := range s.Tokens {
		tc := *t
		c.Tokens[id] = &tc
	}
	c.Content = nil
	if s.Content != nil {
		c.Content = make(map[string]*StoredContent, len(s.Content))
		for h, sc := range s.Content {
			cc := *sc
			c.Content[h] = &cc
		}
	}
	s.cloneChains(&c)
	c.Calibration = append([]CalibrationSample(nil), s.Calibration...)
	cloneLedger(s, &c)
	c.KV, c.carry = cloneKV(s.KV), nil
	c.Abandoned = nil
	for _, a := range s.Abandoned {
		a.Call.Input = cloneBytes(a.Call.Input)
		c.Abandoned = append(c.Abandoned, a)
	}
	return &c
}

// StateFormat is the layout version of an encoded State (a snapshot). A
// snapshot of another format is ignored and the scope replayed instead.
// Format 2: Cost.Spawns counts every descendant, not only children, and tool
// calls open when their frame was popped are marked abandoned. Format 3:
// only live frames (finished ones are found through the store's index),
// no request records (the store's index answers for them), no children
// lists. A snapshot of an earlier format is ignored and the scope
// replayed, which rebuilds it. Format 4: content at or above the threshold
// is referred to by hash (State.Content; handles carry ContentRef and, in
// the snapshot, no content).
const StateFormat uint32 = 4
