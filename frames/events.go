package frames

import (
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
)

// Meta is carried by every event: where it belongs, when the server stamped
// it, which request caused it and why it was committed. RequestHash is set on
// the first event of a request's batch only. It is inlined into each event's
// encoding; its field names start with "_" so they never collide.
type Meta struct {
	Scope       string `msgpack:"_s"`
	Frame       string `msgpack:"_f,omitempty"`
	At          int64  `msgpack:"_t"` // unix nanoseconds, server time
	RequestID   string `msgpack:"_q,omitempty"`
	RequestHash []byte `msgpack:"_h,omitempty"`
	Reason      Reason `msgpack:"_r"`
}

// Event is a fact in a scope's log. Events are past tense and never reused
// as requests.
type Event interface {
	// EventType is the stable type name stored with the event.
	EventType() string
	// EventMeta returns the event's metadata.
	EventMeta() *Meta
}

// Event type names (addendum §6, plus usage, tools and budgets).
const (
	TypeFramePushed    = "frame.pushed"
	TypeFrameUpdated   = "frame.updated"
	TypeFramePopped    = "frame.popped"
	TypeFrameSuspended = "frame.suspended"
	TypeFrameResumed   = "frame.resumed"
	TypeHandleAdded    = "frame.handle_added"
	TypeResultAdded    = "frame.result_added"
	TypeFrameCompacted = "frame.compacted"
	TypeActorResumed   = "actor.resumed"
	TypeUsageRecorded  = "usage.recorded"
	TypeToolStarted    = "tool.started"
	TypeToolFinished   = "tool.finished"
	TypeRetention      = "scope.retention_applied"
	TypeScopeDestroyed = "scope.destroyed"
	TypeContentStored  = "content.stored"
)

// NewEvent returns a zero event of the named type, for decoders.
func NewEvent(eventType string) (Event, error) {
	switch eventType {
	case TypeFramePushed:
		return &FramePushed{}, nil
	case TypeFrameUpdated:
		return &FrameUpdated{}, nil
	case TypeFramePopped:
		return &FramePopped{}, nil
	case TypeFrameSuspended:
		return &FrameSuspended{}, nil
	case TypeFrameResumed:
		return &FrameResumed{}, nil
	case TypeHandleAdded:
		return &HandleAdded{}, nil
	case TypeResultAdded:
		return &ResultAdded{}, nil
	case TypeFrameCompacted:
		return &FrameCompacted{}, nil
	case TypeActorResumed:
		return &ActorResumed{}, nil
	case TypeUsageRecorded:
		return &UsageRecorded{}, nil
	case TypeToolStarted:
		return &ToolStarted{}, nil
	case TypeToolFinished:
		return &ToolFinished{}, nil
	case TypeRetention:
		return &RetentionApplied{}, nil
	case TypeScopeDestroyed:
		return &ScopeDestroyed{}, nil
	case TypeContentStored:
		return &ContentStored{}, nil
	case TypeCounterChanged:
		return &CounterChanged{}, nil
	case TypeStateChanged:
		return &StateChanged{}, nil
	case TypeStateExpired:
		return &StateExpired{}, nil
	case TypeSpendReserved:
		return &SpendReserved{}, nil
	case TypeSpendReturned:
		return &SpendReturned{}, nil
	case TypeSpendRenewed:
		return &SpendRenewed{}, nil
	case TypeSpendSettled:
		return &SpendSettled{}, nil
	case TypeSpendDelivered:
		return &SpendDelivered{}, nil
	case TypePartialOutput:
		return &PartialOutputRecorded{}, nil
	}
	return nil, ErrUnknownEventType
}

// FramePushed: a new frame was created; a child's budget total was allocated
// from its parent in the same event.
type FramePushed struct {
	Meta     `msgpack:",inline"`
	ParentID string             `msgpack:"pa,omitempty"`
	Goal     string             `msgpack:"g"`
	Inputs   []byte             `msgpack:"in,omitempty"`
	Depth    int64              `msgpack:"d"`
	Budget   budget.TokenBudget `msgpack:"b"`
	Limits   budget.Limits      `msgpack:"l"`
	// ContinuedFrom and ChainRoot make the pushed frame a link of a
	// continuation chain (Frame.ContinuedFrom, Frame.ChainRoot).
	ContinuedFrom string `msgpack:"cf,omitempty"`
	ChainRoot     string `msgpack:"cr,omitempty"`
	// ContextWindow is the frame's window (Frame.ContextWindow).
	ContextWindow int64 `msgpack:"cw,omitempty"`
	// A continuation (see ContinueFrame) carries on what the link it
	// continues had: its cost (Budget carries its used tokens), its tool
	// calls still in doubt and what its last attempts freed. Resumed is
	// the link a resume continues when no chain held it yet (ResumeChain).
	Cost    *budget.Cost `msgpack:"co,omitempty"`
	InDoubt []ToolCall   `msgpack:"idc,omitempty"`
	Freed   []int64      `msgpack:"fd,omitempty"`
	Resumed *ChainLink   `msgpack:"rl,omitempty"`
	// Reservation is the spend reservation the frame is pushed with
	// (Frame.Reservation); Binding, for a root bound to another scope's
	// reservation, the outbox entry that will settle it.
	Reservation string   `msgpack:"rv,omitempty"`
	Binding     *Binding `msgpack:"bn,omitempty"`
	// Partial is the output in progress a continuation takes along from
	// the link it continues (Frame.Partial).
	Partial *PartialOutput `msgpack:"po,omitempty"`
}

// FrameUpdated: some of a frame's fields changed.
type FrameUpdated struct {
	Meta         `msgpack:",inline"`
	Goal         *string        `msgpack:"g,omitempty"`
	Inputs       []byte         `msgpack:"in,omitempty"`
	SetInputs    bool           `msgpack:"si,omitempty"`
	Limits       *budget.Limits `msgpack:"l,omitempty"`
	ReserveDelta int64          `msgpack:"rd,omitempty"`
	ContextHash  *string        `msgpack:"hx,omitempty"`
}

// FramePopped: a frame ended. Its allocation went back to its parent and
// what it used was charged there (the amounts are recorded for audit and
// checked on replay).
//
// Saturated says the charge would have overflowed one of the parent's
// counters, which were clamped at the largest int64 instead: a frame can
// always end. Charged* still record what the child really used.
//
// Abandoned lists the frame's tool calls that were started and never
// finished, in start order: they may or may not have run, and stay on
// record as abandoned. Events written before the field existed leave it
// empty; replay marks the open calls abandoned all the same.
type FramePopped struct {
	Meta          `msgpack:",inline"`
	Status        Status      `msgpack:"st"`
	Released      int64       `msgpack:"rl"`
	ChargedTokens int64       `msgpack:"ck"`
	ChargedCost   budget.Cost `msgpack:"cc"`
	Saturated     bool        `msgpack:"sat,omitempty"`
	Abandoned     []string    `msgpack:"ab,omitempty"`
	// ContinuedTo, with Status StatusContinued, is the frame pushed in the
	// same append that continues this one (Frame.ContinuedTo).
	ContinuedTo string `msgpack:"cto,omitempty"`
	// Final is the frame's record once popped (see FrameRecord); replay
	// checks it against the fold. Events written before it existed have
	// none: their frames are rebuilt by folding the log.
	Final *FrameRecord `msgpack:"fin,omitempty"`
}

// FrameSuspended: a frame was paused; TokenID is the id inside the signed
// suspension token handed to the caller.
type FrameSuspended struct {
	Meta       `msgpack:",inline"`
	Suspension Suspension `msgpack:"s"`
}

// FrameResumed: a suspended frame was resumed with its token.
type FrameResumed struct {
	Meta    `msgpack:",inline"`
	TokenID string `msgpack:"t"`
}

// HandleAdded: a context handle was added to a frame.
type HandleAdded struct {
	Meta   `msgpack:",inline"`
	Handle ContextHandle `msgpack:"h"`
}

// ResultAdded: a result reference was added to a frame.
type ResultAdded struct {
	Meta   `msgpack:",inline"`
	Result ResultRef `msgpack:"r"`
}

// FrameCompacted: handles were removed from a frame's live context and,
// optionally, a summary handle added. The removed content stays in the log.
type FrameCompacted struct {
	Meta           `msgpack:",inline"`
	Strategy       string           `msgpack:"sg"`
	Removed        []string         `msgpack:"rm"`
	Summary        *ContextHandle   `msgpack:"su,omitempty"`
	OriginalTokens int64            `msgpack:"ot"`
	FinalTokens    int64            `msgpack:"ft"`
	Level          compaction.Level `msgpack:"lv"`
}

// Counts splits the handles a compaction removed: summarized are those its
// summary covers, dropped the rest; each removed handle counts once, so the
// two add up to len(Removed).
func (e *FrameCompacted) Counts() (dropped, summarized int) {
	if e.Summary != nil {
		rm := make(map[string]bool, len(e.Removed))
		for _, id := range e.Removed {
			rm[id] = true
		}
		for _, id := range e.Summary.Covers {
			if rm[id] {
				summarized++
				rm[id] = false
			}
		}
	}
	return len(e.Removed) - summarized, summarized
}

// ActorResumed: an actor recovered this scope after a restart.
type ActorResumed struct {
	Meta            `msgpack:",inline"`
	FramesRecovered int64  `msgpack:"fr"`
	PendingItems    int64  `msgpack:"pi"`
	LastSeq         uint64 `msgpack:"ls"`
}

// UsageRecorded: a frame consumed tokens, turns, spend or time. Its token
// budget's Used grew by input plus output tokens. A Calibration sample
// joins the scope's, which keeps the last CalibrationKeep (the window when
// it was decided, so that replay does not depend on the configuration).
type UsageRecorded struct {
	Meta            `msgpack:",inline"`
	Cost            budget.Cost        `msgpack:"c"`
	Calibration     *CalibrationSample `msgpack:"cal,omitempty"`
	CalibrationKeep int64              `msgpack:"calk,omitempty"`
}

// ToolStarted: the agent is about to dispatch a tool call (the intent is
// journalled first, so a crash leaves it in doubt, never forgotten). Owner
// and Epoch are the server that recorded it and the owner epoch it held on
// the scope (DESIGN §13; empty and 0 without fencing, and in records
// written before fencing existed).
type ToolStarted struct {
	Meta   `msgpack:",inline"`
	CallID string `msgpack:"id"`
	Name   string `msgpack:"n"`
	Input  []byte `msgpack:"in,omitempty"`
	Owner  string `msgpack:"ow,omitempty"`
	Epoch  uint64 `msgpack:"ep,omitempty"`
}

// ToolFinished: a tool call's result came back. The call and its result
// were added as two context handles sharing the call id as their group, so
// compaction keeps or drops them together.
type ToolFinished struct {
	Meta         `msgpack:",inline"`
	CallID       string        `msgpack:"id"`
	IsError      bool          `msgpack:"e,omitempty"`
	CallHandle   ContextHandle `msgpack:"ch"`
	ResultHandle ContextHandle `msgpack:"rh"`
}

func (e *FramePushed) EventType() string    { return TypeFramePushed }
func (e *FrameUpdated) EventType() string   { return TypeFrameUpdated }
func (e *FramePopped) EventType() string    { return TypeFramePopped }
func (e *FrameSuspended) EventType() string { return TypeFrameSuspended }
func (e *FrameResumed) EventType() string   { return TypeFrameResumed }
func (e *HandleAdded) EventType() string    { return TypeHandleAdded }
func (e *ResultAdded) EventType() string    { return TypeResultAdded }
func (e *FrameCompacted) EventType() string { return TypeFrameCompacted }
func (e *ActorResumed) EventType() string   { return TypeActorResumed }
func (e *UsageRecorded) EventType() string  { return TypeUsageRecorded }
func (e *ToolStarted) EventType() string    { return TypeToolStarted }
func (e *ToolFinished) EventType() string   { return TypeToolFinished }
func (e *RetentionApplied) EventType() string {
	return TypeRetention
}
func (e *ScopeDestroyed) EventType() string { return TypeScopeDestroyed }

// EventMeta returns the embedded metadata.
func (m *Meta) EventMeta() *Meta { return m }

// RetentionApplied: the scope's history through version Through was
// removed from the store (deleted, or archived first): Hash is the hex
// SHA-256 of that last removed record, from which the chain of what remains
// goes on, so that verify proves exactly that prefix was removed. Archive
// names the archive file and ArchiveSHA256 its digest ("" when deleted).
type RetentionApplied struct {
	Meta          `msgpack:",inline"`
	Through       int64  `msgpack:"th"`
	Hash          string `msgpack:"h"`
	Runs          int64  `msgpack:"rn"`
	Why           string `msgpack:"w"`
	Archive       string `msgpack:"ar,omitempty"`
	ArchiveSHA256 string `msgpack:"as,omitempty"`
}

// ScopeDestroyed: the scope was destroyed. Everything before this event is
// removed from the store (Through, the version before it, and Hash, the hex
// SHA-256 of that record, as for RetentionApplied: "" and 0 for a scope
// that had no events), and the projection starts over empty; the version
// goes on counting. It is one event, so that it is the first record of
// what the store keeps and verify can check the removal against it: the
// live frames a Force cancelled are named here (Cancelled, in push order),
// with the tool calls that may have run and no longer have a record
// (Abandoned: those in doubt on the cancelled frames, then those the scope
// had on record as abandoned), and the unused tokens dropped.
type ScopeDestroyed struct {
	Meta      `msgpack:",inline"`
	Through   int64           `msgpack:"th"`
	Hash      string          `msgpack:"h,omitempty"`
	Forced    bool            `msgpack:"fo,omitempty"`
	Cancelled []string        `msgpack:"cx,omitempty"`
	Abandoned []AbandonedCall `msgpack:"ab,omitempty"`
	Tokens    int64           `msgpack:"tk,omitempty"`
	Why       string          `msgpack:"w,omitempty"`
}
