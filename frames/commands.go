package frames

import (
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
)

// Header is carried by every command. The shell fills Now (server time) and
// RequestHash (a digest of the request without its id); the core never reads
// a clock. Owner and Epoch name the server deciding the command and the
// owner epoch it holds on the scope, when servers share a store (fenced:
// DESIGN §13; empty and 0 otherwise): a tool call's intent records them,
// so that a call in doubt says which owner started it.
type Header struct {
	RequestID   string
	RequestHash []byte
	Now         int64 // unix nanoseconds
	Reason      Reason
	Owner       string
	Epoch       uint64
}

// Command is a validated intent; Decide turns it into events.
type Command interface {
	header() *Header
}

func (h *Header) header() *Header { return h }

// Mint carries ids and expiry the shell minted in case the command suspends
// a frame (a usage, a child's pop or a lowered limit that crosses a limit).
type Mint struct {
	TokenID   string
	ExpiresAt int64
}

// PushFrame creates a frame. A child's Budget.Total is allocated from its
// parent's available tokens. Budget.Used and SubcallAllocation must be zero.
// Budget.MaxSubframeDepth 0 means "inherit" (the parent's, or the server's).
type PushFrame struct {
	Header
	FrameID  string
	ParentID string
	Goal     string
	Inputs   []byte
	Budget   budget.TokenBudget
	Limits   budget.Limits
	// ContextWindow is the frame's context window in tokens; 0 inherits
	// its parent's (a root: none, read as Config.DefaultContextWindow).
	ContextWindow int64
	// Reservation, when set, is the verified claims of the reservation
	// token ReservationToken the push presents: the frame's spend ceiling,
	// settled with the reserving frame (see ledger.go).
	Reservation      *ReservationClaims
	ReservationToken string
}

// UpdateFrame changes a live frame's fields; nil/false fields stay as they are.
// Limits lowered below what the frame already consumed suspend it at once
// with reason limit (Mint names the token).
type UpdateFrame struct {
	Header
	FrameID      string
	Goal         *string
	Inputs       []byte
	SetInputs    bool
	Limits       *budget.Limits
	ReserveDelta int64 // positive reserves, negative gives back
	ContextHash  *string
	Mint         Mint
}

// PopFrame ends a frame with a terminal status. A frame with live children
// is refused unless Cascade, which cancels them first (deepest first). Tool
// calls still open on a popped frame are recorded as abandoned.
type PopFrame struct {
	Header
	FrameID string
	Status  Status
	Cascade bool
	Mint    Mint
}

// AddContextHandle adds context to a live frame. Handle.ID, Tokens and
// CreatedAt are filled by the shell.
type AddContextHandle struct {
	Header
	FrameID string
	Handle  ContextHandle
	// Continue, when set (Config.ContinueAt > 0), lets the command
	// continue the frame in the same append once its pressure reaches
	// the threshold.
	Continue *ContinueWith
}

// AddResult adds a result reference to a live frame.
type AddResult struct {
	Header
	FrameID string
	Result  ResultRef
}

// RecordUsage adds consumption to a live frame. If a limit is crossed the
// usage is still recorded and the frame suspended with reason limit.
type RecordUsage struct {
	Header
	FrameID string
	Cost    budget.Cost // Spawns must be zero: spawns are counted by pushes
	Mint    Mint
	// Calibration, if set, is the pack the usage was for: its own count
	// and the provider's (see Calibrate). A bad sample refuses the usage.
	Calibration *CalibrationSample
}

// StartToolCall journals a tool call before the agent dispatches it.
type StartToolCall struct {
	Header
	FrameID string
	CallID  string
	Name    string
	Input   []byte
}

// FinishToolCall records a started call's result as two grouped handles.
type FinishToolCall struct {
	Header
	FrameID      string
	CallID       string
	IsError      bool
	CallHandle   ContextHandle
	ResultHandle ContextHandle
	Continue     *ContinueWith // as for AddContextHandle
}

// SuspendFrame pauses an active or waiting frame.
type SuspendFrame struct {
	Header
	FrameID string
	Reason  SuspendReason
	Note    string
	Mint    Mint
}

// ResumeFrame resumes a suspended frame; the shell has already checked the
// token's signature, the core checks it is this frame's, unused and unexpired.
type ResumeFrame struct {
	Header
	FrameID string
	TokenID string
}

// CompactContext applies a compaction the shell planned with package
// compaction: handles removed, and an optional summary handle added.
type CompactContext struct {
	Header
	FrameID        string
	Strategy       string
	Removed        []string
	Summary        *ContextHandle
	OriginalTokens int64
	FinalTokens    int64
	Level          compaction.Level
}

// ResumeActor records that an actor recovered the scope.
type ResumeActor struct {
	Header
	FramesRecovered int64
	PendingItems    int64
	LastSeq         uint64
}

// ApplyRetention records that the scope's history through Through is
// removed (see RetentionApplied); the shell removes it from the store once
// the event is durable.
type ApplyRetention struct {
	Header
	Through       int64
	Hash          string
	Runs          int64
	Why           string
	Archive       string
	ArchiveSHA256 string
}

// DestroyScope removes everything the scope holds: its frames, tokens and
// history (see ScopeDestroyed). A scope with live frames (and so unused
// tokens or tool calls in doubt) is refused unless Force, which cancels
// them. Hash is the hex hash of the scope's head record (the last record
// the shell removes), "" for a scope without events.
type DestroyScope struct {
	Header
	Force bool
	Hash  string
	Why   string
}
