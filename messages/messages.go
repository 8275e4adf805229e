package messages

import (
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/frames"
)

// Request is any StateIndex request. Every request embeds a Header first
// (the scope is in the same place in all of them, and so is the request id
// of the ones that change something) and names its operation
// (operations.go: the protocol table).
type Request interface {
	ScopeName() string
	Head() *Header
	Op() Op
}

// MutatingRequest is a request that appends events. Its Header's RequestID
// makes it idempotent (the Client fills one in when it is empty).
type MutatingRequest interface {
	Request
	// Mut returns the request's header; only mutating requests have it.
	Mut() *Header
}

// Header is embedded first in every request. Its encoding (scope, request
// id, guard, reason in this order) is the one the previous release's
// Mutation had, so digests of requests it recorded still match.
type Header struct {
	Scope string `msgpack:"sc"`
	// RequestID makes a mutating request idempotent: a repeat with the same
	// id and the same content returns the original reply and appends
	// nothing, within the server's horizon (Config.RequestHorizon); an id
	// whose first-send time is older is refused (request_expired). The
	// Client fills a time-ordered one (UUIDv7) when empty. Reads take none.
	RequestID string `msgpack:"rq,omitempty"`
	// IfVersion, when set on a mutating request, is the scope version the
	// request was decided against; if the scope has moved on the request
	// fails with version_conflict instead of applying. Reads take none.
	IfVersion *int64 `msgpack:"iv,omitempty"`
	// Reason overrides the checkpoint reason the operation implies
	// (mutating requests only).
	Reason frames.Reason `msgpack:"re,omitempty"`
}

// ScopeName returns the scope.
func (h *Header) ScopeName() string { return h.Scope }

// Head returns the header.
func (h *Header) Head() *Header { return h }

// Mut returns the header of a mutating request.
func (r *PushFrame) Mut() *Header { return &r.Header }

// Mut returns the header of a mutating request.
func (r *PopFrame) Mut() *Header { return &r.Header }

// Mut returns the header of a mutating request.
func (r *UpdateFrame) Mut() *Header { return &r.Header }

// Mut returns the header of a mutating request.
func (r *AddContextHandle) Mut() *Header { return &r.Header }

// Mut returns the header of a mutating request.
func (r *AddResult) Mut() *Header { return &r.Header }

// Mut returns the header of a mutating request.
func (r *RecordUsage) Mut() *Header { return &r.Header }

// Mut returns the header of a mutating request.
func (r *StartToolCall) Mut() *Header { return &r.Header }

// Mut returns the header of a mutating request.
func (r *FinishToolCall) Mut() *Header { return &r.Header }

// Mut returns the header of a mutating request.
func (r *SuspendFrame) Mut() *Header { return &r.Header }

// Mut returns the header of a mutating request.
func (r *ResumeFrame) Mut() *Header { return &r.Header }

// Mut returns the header of a mutating request.
func (r *CompactContext) Mut() *Header { return &r.Header }

// Mut returns the header of a mutating request.
func (r *ResumeActor) Mut() *Header { return &r.Header }

// Mut returns the header of a mutating request.
func (r *ApplyRetention) Mut() *Header { return &r.Header }

// Mut returns the header of a mutating request.
func (r *DestroyScope) Mut() *Header { return &r.Header }

// Reply is any StateIndex reply: it carries its result or an *Error.
type Reply interface {
	Failure() *Error
	SetFailure(*Error)
}

// Result is embedded in every reply.
type Result struct {
	Err *Error `msgpack:"err,omitempty"`
	// Version is the scope's version after the operation (for reads: as read).
	Version int64 `msgpack:"ver"`
}

// Failure returns the error, or nil on success.
func (r *Result) Failure() *Error { return r.Err }

// SetFailure sets the error.
func (r *Result) SetFailure(e *Error) { r.Err = e }

// PushFrame creates a frame: a root when ParentID is empty, else a child
// whose Budget.Total is allocated from the parent's available tokens.
type PushFrame struct {
	Header   `msgpack:",inline"`
	ParentID string             `msgpack:"pa,omitempty"`
	Goal     string             `msgpack:"g"`
	Inputs   []byte             `msgpack:"in,omitempty"`
	Budget   budget.TokenBudget `msgpack:"b"`
	Limits   budget.Limits      `msgpack:"l"`
}

// PushFrameReply names the new frame.
type PushFrameReply struct {
	Result  `msgpack:",inline"`
	FrameID string             `msgpack:"f"`
	Depth   int64              `msgpack:"d"`
	Budget  budget.TokenBudget `msgpack:"b"`
}

// PopFrame ends a frame (the top of the stack when FrameID is empty).
type PopFrame struct {
	Header  `msgpack:",inline"`
	FrameID string        `msgpack:"f,omitempty"`
	Status  frames.Status `msgpack:"st"`
	Cascade bool          `msgpack:"cs,omitempty"`
}

// PopFrameReply reports how the frame settled with its parent.
type PopFrameReply struct {
	Result        `msgpack:",inline"`
	FrameID       string        `msgpack:"f"`
	Status        frames.Status `msgpack:"st"`
	Released      int64         `msgpack:"rl"`
	ChargedTokens int64         `msgpack:"ck"`
	// Cancelled lists descendants a cascade cancelled, deepest first.
	Cancelled []string `msgpack:"cx,omitempty"`
	// ParentSuspension is set when the child's cost pushed its parent over
	// a limit: the parent was suspended with this token.
	ParentSuspension *SuspensionToken `msgpack:"ps,omitempty"`
}

// UpdateFrame changes a live frame; unset fields stay as they are.
type UpdateFrame struct {
	Header       `msgpack:",inline"`
	FrameID      string         `msgpack:"f,omitempty"`
	Goal         *string        `msgpack:"g,omitempty"`
	Inputs       []byte         `msgpack:"in,omitempty"`
	SetInputs    bool           `msgpack:"si,omitempty"`
	Limits       *budget.Limits `msgpack:"l,omitempty"`
	ReserveDelta int64          `msgpack:"rd,omitempty"`
	ContextHash  *string        `msgpack:"hx,omitempty"`
}

// UpdateFrameReply confirms the update. Limits lowered below what the frame
// already consumed suspend it at once: Suspension then carries the token.
type UpdateFrameReply struct {
	Result     `msgpack:",inline"`
	FrameID    string           `msgpack:"f"`
	Suspension *SuspensionToken `msgpack:"s,omitempty"`
}

// AddContextHandle adds a piece of context to a frame. HandleID is minted
// when empty; Tokens is counted by the server's counter.
type AddContextHandle struct {
	Header   `msgpack:",inline"`
	FrameID  string              `msgpack:"f,omitempty"`
	HandleID string              `msgpack:"h,omitempty"`
	Kind     string              `msgpack:"k,omitempty"`
	Priority compaction.Priority `msgpack:"p"`
	// Role is who said it: system, user, assistant, tool, or "" (unknown).
	Role    string `msgpack:"ro,omitempty"`
	Content string `msgpack:"c"`
}

// AddContextHandleReply names the handle and its size.
type AddContextHandleReply struct {
	Result   `msgpack:",inline"`
	FrameID  string `msgpack:"f"`
	HandleID string `msgpack:"h"`
	Tokens   int64  `msgpack:"t"`
}

// AddResult records a result reference on a frame.
type AddResult struct {
	Header   `msgpack:",inline"`
	FrameID  string `msgpack:"f,omitempty"`
	ResultID string `msgpack:"r,omitempty"`
	Kind     string `msgpack:"k"`
	Ref      string `msgpack:"ref"`
	Summary  string `msgpack:"s,omitempty"`
}

// AddResultReply names the result.
type AddResultReply struct {
	Result   `msgpack:",inline"`
	FrameID  string `msgpack:"f"`
	ResultID string `msgpack:"r"`
}

// RecordUsage adds consumption to a frame. Crossing a limit does not fail
// the request: the usage is recorded and the frame suspended (Suspension).
type RecordUsage struct {
	Header  `msgpack:",inline"`
	FrameID string      `msgpack:"f,omitempty"`
	Cost    budget.Cost `msgpack:"c"`
}

// RecordUsageReply says whether the usage suspended the frame.
type RecordUsageReply struct {
	Result     `msgpack:",inline"`
	FrameID    string           `msgpack:"f"`
	Suspension *SuspensionToken `msgpack:"s,omitempty"`
}

// StartToolCall journals a tool call before it is dispatched. CallID is
// minted when empty.
type StartToolCall struct {
	Header  `msgpack:",inline"`
	FrameID string `msgpack:"f,omitempty"`
	CallID  string `msgpack:"id,omitempty"`
	Name    string `msgpack:"n"`
	Input   []byte `msgpack:"in,omitempty"`
}

// StartToolCallReply names the call.
type StartToolCallReply struct {
	Result  `msgpack:",inline"`
	FrameID string `msgpack:"f"`
	CallID  string `msgpack:"id"`
}

// FinishToolCall records a started call's output. The call and its output
// become two context handles that compaction keeps together.
type FinishToolCall struct {
	Header  `msgpack:",inline"`
	FrameID string `msgpack:"f,omitempty"`
	CallID  string `msgpack:"id"`
	// Call is the call's context text; empty means "name(input)".
	Call     string              `msgpack:"cl,omitempty"`
	Output   string              `msgpack:"o"`
	IsError  bool                `msgpack:"e,omitempty"`
	Priority compaction.Priority `msgpack:"p,omitempty"` // default Medium
}

// FinishToolCallReply names the two handles.
type FinishToolCallReply struct {
	Result         `msgpack:",inline"`
	FrameID        string `msgpack:"f"`
	CallID         string `msgpack:"id"`
	CallHandleID   string `msgpack:"ch"`
	ResultHandleID string `msgpack:"rh"`
	Tokens         int64  `msgpack:"t"`
}

// AssembleContextPack asks for a frame's context fitted to a token budget.
type AssembleContextPack struct {
	Header         `msgpack:",inline"`
	FrameID        string           `msgpack:"f,omitempty"`
	BudgetTokens   int64            `msgpack:"b"`
	Role           string           `msgpack:"r,omitempty"`
	IncludeHandles []string         `msgpack:"ih,omitempty"`
	ExcludeHandles []string         `msgpack:"xh,omitempty"`
	MinCompaction  compaction.Level `msgpack:"mc,omitempty"`
}

// Breadcrumb is one ancestor of the packed frame, root first.
type Breadcrumb struct {
	FrameID string        `msgpack:"f"`
	Depth   int64         `msgpack:"d"`
	Status  frames.Status `msgpack:"st"`
	Text    string        `msgpack:"t"` // what is emitted and counted
}

// Segment is one piece of context in a pack.
type Segment struct {
	HandleID string              `msgpack:"h"`
	Kind     string              `msgpack:"k"`
	Priority compaction.Priority `msgpack:"p"`
	// Role is the handle's role ("" unknown; a summary has none).
	Role    string `msgpack:"ro,omitempty"`
	Content string `msgpack:"c"`
	Tokens  int64  `msgpack:"t"`
	Group   string `msgpack:"g,omitempty"`
	// Covers is set on a summary segment: the handles it stands for.
	Covers []string `msgpack:"cv,omitempty"`
}

// TokenBreakdown splits a pack's tokens by part.
type TokenBreakdown struct {
	Brief       int64 `msgpack:"b"`
	Breadcrumbs int64 `msgpack:"c"`
	Segments    int64 `msgpack:"s"`
}

// TokenSummary accounts for a pack: Used never exceeds Budget under the
// counter the pack was built with.
type TokenSummary struct {
	Budget          int64            `msgpack:"b"`
	Used            int64            `msgpack:"u"`
	Remaining       int64            `msgpack:"r"`
	Breakdown       TokenBreakdown   `msgpack:"bd"`
	CompactionLevel compaction.Level `msgpack:"l"`
}

// PackMetadata identifies what a pack was built from.
type PackMetadata struct {
	Scope       string `msgpack:"sc"`
	FrameID     string `msgpack:"f"`
	AssembledAt int64  `msgpack:"at"`
	// Counter names the counter every token count of the pack is under:
	// the scope's (its handles were counted under it), never a mix.
	Counter string `msgpack:"cn"`
	// Recounting, when set, names the counter a recount of the scope's
	// handles in progress moves it to; later packs will be under it.
	Recounting string `msgpack:"rc,omitempty"`
}

// ContextPack is a frame's context fitted to a budget.
type ContextPack struct {
	Result       `msgpack:",inline"`
	Metadata     PackMetadata `msgpack:"md"`
	BriefContext string       `msgpack:"bc"`
	Breadcrumbs  []Breadcrumb `msgpack:"cr"`
	Segments     []Segment    `msgpack:"sg"`
	TokenSummary TokenSummary `msgpack:"ts"`
	// Dropped lists handles left out of the pack; Summarized those a
	// summary segment stands for.
	Dropped    []string `msgpack:"dr,omitempty"`
	Summarized []string `msgpack:"sm,omitempty"`
}

// SuspendFrame pauses a frame and returns a signed, single-use token.
type SuspendFrame struct {
	Header  `msgpack:",inline"`
	FrameID string               `msgpack:"f,omitempty"`
	Reason  frames.SuspendReason `msgpack:"r"`
	Note    string               `msgpack:"n,omitempty"`
	// TTLMillis is how long the token stays valid; 0 means the server's
	// default, and the server caps it.
	TTLMillis int64 `msgpack:"ttl,omitempty"`
}

// SuspensionToken is the opaque, signed token a suspended frame resumes with.
type SuspensionToken struct {
	Result      `msgpack:",inline"`
	Token       string               `msgpack:"tk"`
	TokenID     string               `msgpack:"id"`
	Scope       string               `msgpack:"sc"`
	FrameID     string               `msgpack:"f"`
	Reason      frames.SuspendReason `msgpack:"r"`
	SuspendedAt int64                `msgpack:"at"`
	ExpiresAt   int64                `msgpack:"x"`
	Limit       *budget.Violation    `msgpack:"l,omitempty"`
}

// ResumeFrame resumes a suspended frame with its token.
type ResumeFrame struct {
	Header `msgpack:",inline"`
	Token  string `msgpack:"tk"`
}

// ResumeFrameReply names the resumed frame.
type ResumeFrameReply struct {
	Result  `msgpack:",inline"`
	FrameID string `msgpack:"f"`
}

// Strategy names a compaction strategy for CompactContext.
type Strategy struct {
	// Kind is priority_based, summarize_oldest, truncate_at or custom.
	Kind         string `msgpack:"k"`
	KeepRecent   int    `msgpack:"kr,omitempty"` // summarize_oldest
	MessageCount int    `msgpack:"mc,omitempty"` // truncate_at
	Custom       string `msgpack:"cu,omitempty"` // custom: a name registered on the server
}

// Strategy kinds.
const (
	StrategyPriorityBased   = "priority_based"
	StrategySummarizeOldest = "summarize_oldest"
	StrategyTruncateAt      = "truncate_at"
	StrategyCustom          = "custom"
)

// CompactContext permanently compacts a frame's live context toward
// TargetTokens. Removed handles stay readable in the log.
type CompactContext struct {
	Header       `msgpack:",inline"`
	FrameID      string   `msgpack:"f,omitempty"`
	TargetTokens int64    `msgpack:"t"`
	Strategy     Strategy `msgpack:"s"`
}

// CompactionResult reports what a compaction did. Removed lists every
// handle that left the live context; each is counted once, either as
// removed or as summarized: ItemsRemoved + ItemsSummarized == len(Removed).
type CompactionResult struct {
	Result         `msgpack:",inline"`
	FrameID        string           `msgpack:"f"`
	OriginalTokens int64            `msgpack:"ot"`
	FinalTokens    int64            `msgpack:"ft"`
	Level          compaction.Level `msgpack:"l"`
	// ItemsRemoved counts the handles dropped without a trace in the live
	// context (those the summary does not cover).
	ItemsRemoved int `msgpack:"ir"`
	// ItemsSummarized counts the handles the summary (SummaryID) covers.
	ItemsSummarized int      `msgpack:"is"`
	Removed         []string `msgpack:"rm,omitempty"`
	SummaryID       string   `msgpack:"su,omitempty"`
}

// ResumeActor recovers a scope, typically from an actor's Started handler.
// On a scope with no events it returns an empty state and writes nothing;
// otherwise it appends actor.resumed. A repeat of RequestID appends nothing
// and returns the current state.
type ResumeActor struct {
	Header `msgpack:",inline"`
}

// FrameSummary is a frame without its context content.
type FrameSummary struct {
	ID            string             `msgpack:"id"`
	ParentID      string             `msgpack:"pa,omitempty"`
	Goal          string             `msgpack:"g"`
	Status        frames.Status      `msgpack:"st"`
	Depth         int64              `msgpack:"d"`
	Budget        budget.TokenBudget `msgpack:"b"`
	Limits        budget.Limits      `msgpack:"l"`
	Cost          budget.Cost        `msgpack:"c"`
	Handles       int                `msgpack:"h"`
	ContextTokens int64              `msgpack:"ct"`
	Results       int                `msgpack:"r"`
	// Children are the frame's live children (a finished child is no
	// longer listed: the projection keeps only what is live).
	Children    []string           `msgpack:"ch,omitempty"`
	InDoubt     []frames.ToolCall  `msgpack:"id2,omitempty"`
	Suspension  *frames.Suspension `msgpack:"su,omitempty"`
	CreatedAt   int64              `msgpack:"at"`
	CompletedAt int64              `msgpack:"ca,omitempty"`
}

// RecoverySummary says what recovery found and what it cost.
type RecoverySummary struct {
	FramesRecovered  int    `msgpack:"fr"`
	PendingWorkItems int    `msgpack:"pw"`
	LastEventSeq     uint64 `msgpack:"ls"`
	// RecoveryMicros is the time to load the scope (snapshot plus tail) and
	// build this reply.
	RecoveryMicros int64 `msgpack:"us"`
	FromSnapshot   bool  `msgpack:"sn"`
	EventsReplayed int64 `msgpack:"er"`
}

// ActorResumeState is what an actor needs to continue after a restart.
type ActorResumeState struct {
	Result       `msgpack:",inline"`
	CurrentFrame *FrameSummary        `msgpack:"cf,omitempty"`
	FrameStack   []FrameSummary       `msgpack:"fs,omitempty"` // root → current
	LiveFrames   []FrameSummary       `msgpack:"lf,omitempty"` // every live frame, push order
	PendingWork  []frames.PendingWork `msgpack:"pw,omitempty"`
	Recovery     RecoverySummary      `msgpack:"rs"`
}

// GetFrame reads one frame; WithHandles includes its context handles.
type GetFrame struct {
	Header      `msgpack:",inline"`
	FrameID     string `msgpack:"f,omitempty"`
	WithHandles bool   `msgpack:"wh,omitempty"`
}

// GetFrameReply carries the frame (a copy).
type GetFrameReply struct {
	Result `msgpack:",inline"`
	Frame  *frames.Frame `msgpack:"fr,omitempty"`
}

// GetStack reads the path root → frame (the top of the stack when FrameID
// is empty).
type GetStack struct {
	Header  `msgpack:",inline"`
	FrameID string `msgpack:"f,omitempty"`
}

// GetStackReply carries the stack, root first.
type GetStackReply struct {
	Result `msgpack:",inline"`
	Frames []FrameSummary `msgpack:"fs,omitempty"`
}

// ApplyRetention records that the scope's history through Through is
// removed (the server's retention pass sends it, then removes the records
// from the store; an operator tool may too). Hash is the hex SHA-256 of
// the record at Through, which the server checks; Archive and
// ArchiveSHA256 name the archive file written first ("" when the history
// is deleted).
type ApplyRetention struct {
	Header        `msgpack:",inline"`
	Through       int64  `msgpack:"th"`
	Hash          string `msgpack:"h"`
	Runs          int64  `msgpack:"rn,omitempty"`
	Why           string `msgpack:"w,omitempty"`
	Archive       string `msgpack:"ar,omitempty"`
	ArchiveSHA256 string `msgpack:"as,omitempty"`
}

// ApplyRetentionReply says through which version the scope's history is
// removed once the store has done it.
type ApplyRetentionReply struct {
	Result  `msgpack:",inline"`
	Through int64 `msgpack:"th"`
}

// DestroyScope removes everything the scope holds — its frames, tokens,
// history and snapshots — and starts it over empty (seed 004's destroy()).
// A scope with live frames (and so unused suspension tokens or tool calls
// in doubt) is refused (live_children) unless Force, which cancels them:
// the destroy records which, with the tool calls that may have run. The
// version goes on counting, and a request id the scope committed before is
// never applied again: within the idempotency horizon it is refused
// (request_expired: its reply is gone), past it as expired. A scope used
// again after a destroy starts empty.
type DestroyScope struct {
	Header `msgpack:",inline"`
	Force  bool   `msgpack:"fo,omitempty"`
	Why    string `msgpack:"w,omitempty"`
}

// DestroyScopeReply says what the destroy removed: the history through
// Through (the version before the destroy's own record, which stays as the
// scope's first), the live frames it cancelled and the tool calls that may
// have run (Abandoned: in doubt on those frames, or abandoned before), and
// the records the store deleted (0 on a repeat).
type DestroyScopeReply struct {
	Result    `msgpack:",inline"`
	Through   int64    `msgpack:"th"`
	Cancelled []string `msgpack:"cx,omitempty"`
	Abandoned []string `msgpack:"ab,omitempty"` // tool call ids
	Tokens    int64    `msgpack:"tk,omitempty"`
	Removed   int64    `msgpack:"rm,omitempty"`
}
