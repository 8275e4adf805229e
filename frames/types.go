package frames

import (
	"fmt"
	"reflect"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
)

// Status is a frame's lifecycle state.
type Status uint8

// Statuses. Active, Waiting and Suspended are live; the rest are terminal.
const (
	StatusActive    Status = iota + 1 // doing work
	StatusWaiting                     // has live children (subcalls) it waits on
	StatusSuspended                   // paused with a suspension token
	StatusCompleted
	StatusFailed
	StatusCancelled
	StatusContinued // handed off to a continuation frame
)

var statusNames = [...]string{"", "active", "waiting", "suspended", "completed", "failed", "cancelled", "continued"}

func (s Status) String() string {
	if s >= StatusActive && s <= StatusContinued {
		return statusNames[s]
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// Live reports whether the frame can still change: active, waiting or suspended.
func (s Status) Live() bool { return s == StatusActive || s == StatusWaiting || s == StatusSuspended }

// Terminal reports whether s ends a frame.
func (s Status) Terminal() bool { return s >= StatusCompleted && s <= StatusContinued }

// ParseStatus is the inverse of String.
func ParseStatus(name string) (Status, error) {
	for i := StatusActive; i <= StatusContinued; i++ {
		if statusNames[i] == name {
			return i, nil
		}
	}
	return 0, invalid("unknown status %q", name)
}

// Reason is a checkpoint reason (versioned-changesets.md): why a change was
// committed. The zero value means "implied by the operation".
type Reason uint8

// Checkpoint reasons.
const (
	ReasonImplied Reason = iota
	ReasonUserMessage
	ReasonAssistantTurnCommitted
	ReasonToolResultsCommitted
	ReasonRunFinished
)

var reasonNames = [...]string{"", "user_message", "assistant_turn_committed", "tool_results_committed", "run_finished"}

func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// SuspendReason says why a frame was suspended (the state schema's
// suspend_reason).
type SuspendReason string

// Suspension reasons.
const (
	SuspendLimit    SuspendReason = "limit"
	SuspendError    SuspendReason = "error"
	SuspendBudget   SuspendReason = "budget"
	SuspendApproval SuspendReason = "approval"
)

// Valid reports whether r is a known reason.
func (r SuspendReason) Valid() bool {
	switch r {
	case SuspendLimit, SuspendError, SuspendBudget, SuspendApproval:
		return true
	}
	return false
}

// ContextHandle is one piece of a frame's context: a message, a document, a
// tool call or result, a summary. Tokens is its size under the server's
// counter when it was added. Content at or above Config.ContentRefBytes is
// stored once per scope (see ContentStored): the handle's event and the
// snapshot carry its hash in ContentRef and no Content; the in-memory
// projection carries both.
type ContextHandle struct {
	ID       string              `msgpack:"id"`
	Kind     string              `msgpack:"k"`
	Priority compaction.Priority `msgpack:"p"`
	// Role is who said it (RoleSystem, RoleUser, RoleAssistant, RoleTool),
	// besides what it is (Kind); "" is unknown, as every handle written
	// before roles existed reads.
	Role    Role   `msgpack:"ro,omitempty"`
	Content string `msgpack:"c"`
	// ContentRef is the hex SHA-256 of content stored by reference ("":
	// the content is inline).
	ContentRef string `msgpack:"cr,omitempty"`
	// StoresContent, in an event only, says that the handle carries
	// content the scope stores by reference from then on: Apply sets
	// ContentRef to its hash (computed, not carried, to keep the record
	// small) and clears the flag.
	StoresContent bool  `msgpack:"sc,omitempty"`
	Tokens        int64 `msgpack:"t"`
	// LightTokens is Tokens after whitespace normalization (compaction's
	// Light level), counted once when the handle is added; 0 if unknown.
	LightTokens int64    `msgpack:"lt,omitempty"`
	CreatedAt   int64    `msgpack:"at"` // unix nanoseconds, server time
	Seq         int64    `msgpack:"q"`  // scope version that added it: recency
	Group       string   `msgpack:"g,omitempty"`
	Covers      []string `msgpack:"cv,omitempty"` // a summary's source handles
}

// ResultRef points at a result a frame produced.
type ResultRef struct {
	ID        string `msgpack:"id"`
	Kind      string `msgpack:"k"`
	Ref       string `msgpack:"r"`
	Summary   string `msgpack:"s,omitempty"`
	CreatedAt int64  `msgpack:"at"`
}

// ToolCall is a journalled tool call. A call with Finished false after a
// crash is in doubt: it may or may not have run, and is never re-run here.
// A call still open when its frame was popped is Abandoned: it, too, may or
// may not have run, and its frame can no longer finish it.
type ToolCall struct {
	ID         string `msgpack:"id"`
	Name       string `msgpack:"n"`
	Input      []byte `msgpack:"in,omitempty"`
	StartedAt  int64  `msgpack:"s"`
	Finished   bool   `msgpack:"f"`
	IsError    bool   `msgpack:"e,omitempty"`
	FinishedAt int64  `msgpack:"fa,omitempty"`
	Abandoned  bool   `msgpack:"ab,omitempty"`
	// Owner and Epoch are the server that recorded the call's intent and
	// the owner epoch it held (ToolStarted; empty and 0 without fencing).
	Owner string `msgpack:"ow,omitempty"`
	Epoch uint64 `msgpack:"ep,omitempty"`
}

// Suspension records why and until when a frame is suspended.
type Suspension struct {
	Reason    SuspendReason     `msgpack:"r"`
	Note      string            `msgpack:"n,omitempty"`
	TokenID   string            `msgpack:"t"`
	At        int64             `msgpack:"at"`
	ExpiresAt int64             `msgpack:"x"`
	Limit     *budget.Violation `msgpack:"l,omitempty"`
}

// Frame is one unit of work in a scope's frame tree.
type Frame struct {
	ID        string             `msgpack:"id"`
	ParentID  string             `msgpack:"pa,omitempty"`
	Goal      string             `msgpack:"g"`
	Inputs    []byte             `msgpack:"in,omitempty"` // opaque encoded bytes
	Status    Status             `msgpack:"st"`
	Depth     int64              `msgpack:"d"`
	Budget    budget.TokenBudget `msgpack:"b"`
	Limits    budget.Limits      `msgpack:"l"`
	Cost      budget.Cost        `msgpack:"c"`
	Handles   []ContextHandle    `msgpack:"h,omitempty"`
	ToolCalls []ToolCall         `msgpack:"tc,omitempty"`
	Results   []ResultRef        `msgpack:"rs,omitempty"`
	// Children lists every child ever pushed, in a State that keeps
	// finished frames (KeepFinished, for tools) only: a live projection
	// keeps counts instead (Kids, LiveKids), never a list that grows with
	// history.
	Children    []string    `msgpack:"ch,omitempty"`
	Suspension  *Suspension `msgpack:"su,omitempty"`
	CreatedAt   int64       `msgpack:"at"`
	CompletedAt int64       `msgpack:"ca,omitempty"`
	ContextHash string      `msgpack:"hx,omitempty"`
	PushSeq     int64       `msgpack:"ps"` // scope version of frame.pushed
	// ContextTokens is the sum of the live handles' Tokens.
	ContextTokens int64 `msgpack:"ct"`
	// LiveKids counts the children that are still live, so that a pop
	// need not scan every child a long-lived frame ever had; Kids counts
	// every child it ever had.
	LiveKids int64 `msgpack:"lk"`
	Kids     int64 `msgpack:"k,omitempty"`
	// A continuation chain's links: ContinuedFrom is the link this frame
	// continues (backward pointer), ContinuedTo the link that continues it
	// (forward pointer, set when it becomes StatusContinued or a finished
	// head is resumed), ChainRoot the chain's first link (set on every link,
	// the root included, once a chain exists; "" for a frame in none).
	ContinuedFrom string `msgpack:"cf,omitempty"`
	ContinuedTo   string `msgpack:"cto,omitempty"`
	ChainRoot     string `msgpack:"cr,omitempty"`
	// ContextWindow is the frame's context window in tokens, when the push
	// set one or inherited its parent's (0: none set; pressure then reads
	// against Config.DefaultContextWindow, and compaction is not held to
	// the refusal rule — see Freed).
	ContextWindow int64 `msgpack:"cw,omitempty"`
	// Freed holds what the frame's last two compactions or continuations
	// freed, oldest first (a continuation carries it to the next link): the
	// refusal rule reads it (see CheckFreed).
	Freed []int64 `msgpack:"fd,omitempty"`
	// Reservation is the spend reservation the frame was pushed with (a
	// reservation of its parent here, or of another scope's frame: see
	// Binding); its ceiling is the frame's spend limit. Outstanding is
	// what the frame's own reservations hold (see Reservation.Held).
	Reservation string `msgpack:"rv,omitempty"`
	Outstanding int64  `msgpack:"so,omitempty"`
	// KV is the frame's key-value state: it ends with the frame and moves
	// to a continuation with it (kv.go).
	KV map[string]*KVEntry `msgpack:"kv,omitempty"`
	// Partial is the frame's current model output, streamed chunk by
	// chunk (partial.go); nil when it has none.
	Partial *PartialOutput `msgpack:"po,omitempty"`

	handleIdx map[string]int // id -> index in Handles; rebuilt when stale
}

// Handle returns the live handle with id, or nil.
func (f *Frame) Handle(id string) *ContextHandle {
	if len(f.handleIdx) != len(f.Handles) {
		f.reindex()
	}
	if i, ok := f.handleIdx[id]; ok && i < len(f.Handles) && f.Handles[i].ID == id {
		return &f.Handles[i]
	}
	return nil
}

func (f *Frame) reindex() {
	f.handleIdx = make(map[string]int, len(f.Handles))
	for i, h := range f.Handles {
		f.handleIdx[h.ID] = i
	}
}

// ToolCall returns the journalled call with id, or nil.
func (f *Frame) ToolCall(id string) *ToolCall {
	for i := range f.ToolCalls {
		if f.ToolCalls[i].ID == id {
			return &f.ToolCalls[i]
		}
	}
	return nil
}

// InDoubt lists tool calls started and not (yet) finished on a live frame.
func (f *Frame) InDoubt() []ToolCall {
	var out []ToolCall
	for _, c := range f.ToolCalls {
		if !c.Finished && !c.Abandoned {
			out = append(out, c)
		}
	}
	return out
}

// Abandoned lists tool calls that were still open when the frame was popped.
func (f *Frame) Abandoned() []ToolCall {
	var out []ToolCall
	for _, c := range f.ToolCalls {
		if c.Abandoned {
			out = append(out, c)
		}
	}
	return out
}

// openCalls returns the ids of the calls started and neither finished nor
// abandoned, in start order (nil if none).
func (f *Frame) openCalls() []string {
	var out []string
	for _, c := range f.ToolCalls {
		if !c.Finished && !c.Abandoned {
			out = append(out, c.ID)
		}
	}
	return out
}

// Clone returns a deep copy that shares nothing with f (empty slices become
// nil, so clones of equal frames are reflect.DeepEqual).
func (f *Frame) Clone() *Frame {
	c := *f
	c.handleIdx = nil
	c.Inputs = cloneBytes(f.Inputs)
	c.Handles, c.ToolCalls = nil, nil
	for _, h := range f.Handles {
		h.Covers = append([]string(nil), h.Covers...)
		c.Handles = append(c.Handles, h)
	}
	for _, t := range f.ToolCalls {
		t.Input = cloneBytes(t.Input)
		c.ToolCalls = append(c.ToolCalls, t)
	}
	c.Results = append([]ResultRef(nil), f.Results...)
	c.Children = append([]string(nil), f.Children...)
	c.Freed = append([]int64(nil), f.Freed...)
	c.KV = cloneKV(f.KV)
	c.Partial = f.Partial.clone()
	if f.Suspension != nil {
		s := *f.Suspension
		if s.Limit != nil {
			l := *s.Limit
			s.Limit = &l
		}
		c.Suspension = &s
	}
	return &c
}

func cloneBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

// FrameRecord is what stays of a frame once it finished: everything but its
// handles, tool calls and inputs, which are read back from its events.
// The frame.popped event that ends a frame carries it (FramePopped.Final),
// so a finished frame is answered from one record of the log.
type FrameRecord struct {
	ID            string             `msgpack:"id"`
	ParentID      string             `msgpack:"pa,omitempty"`
	Goal          string             `msgpack:"g"`
	Status        Status             `msgpack:"st"`
	Depth         int64              `msgpack:"d"`
	Budget        budget.TokenBudget `msgpack:"b"`
	Limits        budget.Limits      `msgpack:"l"`
	Cost          budget.Cost        `msgpack:"c"`
	Results       []ResultRef        `msgpack:"rs,omitempty"`
	Handles       int64              `msgpack:"h"`
	ContextTokens int64              `msgpack:"ct"`
	ToolCalls     int64              `msgpack:"tc"`
	Kids          int64              `msgpack:"k"`
	CreatedAt     int64              `msgpack:"at"`
	CompletedAt   int64              `msgpack:"ca"`
	PushSeq       int64              `msgpack:"ps"`
	ContextHash   string             `msgpack:"hx,omitempty"`
	ContinuedFrom string             `msgpack:"cf,omitempty"`
	ContinuedTo   string             `msgpack:"cto,omitempty"`
	ChainRoot     string             `msgpack:"cr,omitempty"`
	ContextWindow int64              `msgpack:"cw,omitempty"`
	Reservation   string             `msgpack:"rv,omitempty"`
}

// RecordOf returns f's record as it stands.
func RecordOf(f *Frame) FrameRecord {
	return FrameRecord{
		ID: f.ID, ParentID: f.ParentID, Goal: f.Goal, Status: f.Status, Depth: f.Depth, Budget: f.Budget,
		Limits: f.Limits, Cost: f.Cost, Results: append([]ResultRef(nil), f.Results...), Handles: int64(len(f.Handles)),
		ContextTokens: f.ContextTokens, ToolCalls: int64(len(f.ToolCalls)), Kids: f.Kids, CreatedAt: f.CreatedAt,
		CompletedAt: f.CompletedAt, PushSeq: f.PushSeq, ContextHash: f.ContextHash,
		ContinuedFrom: f.ContinuedFrom, ContinuedTo: f.ContinuedTo, ChainRoot: f.ChainRoot, ContextWindow: f.ContextWindow,
		Reservation: f.Reservation,
	}
}

// Equal reports whether r and o record the same frame.
func (r FrameRecord) Equal(o *FrameRecord) bool {
	if o == nil {
		return false
	}
	a, b := r, *o
	if len(a.Results) == 0 && len(b.Results) == 0 {
		a.Results, b.Results = nil, nil
	}
	return reflect.DeepEqual(a, b)
}
