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
	// Position, on a write's reply, is the global sequence of the write's
	// last record (for a repeated request: the original write's, or a
	// position at or above it); 0 on reads. ListFrames with MinPosition at
	// or above it sees the write (read-your-writes).
	Position uint64 `msgpack:"pos,omitempty"`
}

// SetPosition sets the reply's Position (every reply embeds Result).
func (r *Result) SetPosition(p uint64) { r.Position = p }

// WritePosition returns the reply's Position.
func (r *Result) WritePosition() uint64 { return r.Position }

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
	// ContextWindow is the frame's context window in tokens: the pressure
	// replies report is its live context against it. 0 inherits the
	// parent's (a root: the server's default, 200,000).
	ContextWindow int64 `msgpack:"cw,omitempty"`
	// Reservation is a reservation token (ReserveSpendReply.Token): the
	// frame's spend limit becomes the reservation's ceiling, and its spend
	// is settled with the reserving frame — at its pop for a child of that
	// frame here, through the outbox for a root frame of the scope the
	// reservation is for.
	Reservation string `msgpack:"rv,omitempty"`
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
	ContextChange
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
	// Calibration, if set, reports how the provider counted the pack this
	// usage was for; the scope fits later packs of the same counter by it.
	// A bad sample refuses the whole request.
	Calibration *Calibration `msgpack:"cal,omitempty"`
}

// Calibration is one pack's count against the provider's: PackTokens is
// the pack's TokenSummary.Used, Counter its Metadata.Counter, and
// ProviderInputTokens the input tokens the provider reported for the
// request that carried it. Both counts are positive and within a factor
// of 10 of each other.
type Calibration struct {
	PackTokens          int64  `msgpack:"p"`
	ProviderInputTokens int64  `msgpack:"q"`
	Counter             string `msgpack:"c"`
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
	ContextChange
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
// counter the pack was built with — or, when the scope's calibration
// samples of that counter fitted it (Calibration), never exceeds
// Calibration.EffectiveBudget. Remaining is what is left of the budget the
// pack was fitted to.
type TokenSummary struct {
	Budget          int64            `msgpack:"b"`
	Used            int64            `msgpack:"u"`
	Remaining       int64            `msgpack:"r"`
	Breakdown       TokenBreakdown   `msgpack:"bd"`
	CompactionLevel compaction.Level `msgpack:"l"`
	Calibration     *PackCalibration `msgpack:"cal,omitempty"`
}

// PackCalibration says how calibration fitted a pack: Samples of Counter
// gave a worst provider ÷ pack ratio of MaxRatioPermille/1000, and the
// pack was fitted to EffectiveBudget = floor(Budget × pack/provider ×
// (1 − margin)), at most 2 × Budget. EstimatedProviderTokens is Used
// scaled by that ratio, rounded up.
type PackCalibration struct {
	Counter                 string `msgpack:"c"`
	Samples                 int    `msgpack:"n"`
	EffectiveBudget         int64  `msgpack:"eb"`
	MaxRatioPermille        int64  `msgpack:"mr"`
	EstimatedProviderTokens int64  `msgpack:"ep"`
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
	// ChainHead is the head of the chain the packed frame is a link of.
	ChainHead string `msgpack:"chh,omitempty"`
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
	ContextChange
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
	// Owner and Epoch are the answering server's fence on the scope when
	// servers share a store (DESIGN §13; empty and 0 otherwise): a tool
	// call in doubt whose Epoch (frames.ToolCall, PendingWork) is lower was
	// started by an earlier owner.
	Owner string `msgpack:"ow,omitempty"`
	Epoch uint64 `msgpack:"ep,omitempty"`
}

// ActorResumeState is what an actor needs to continue after a restart.
type ActorResumeState struct {
	Result       `msgpack:",inline"`
	CurrentFrame *FrameSummary        `msgpack:"cf,omitempty"`
	FrameStack   []FrameSummary       `msgpack:"fs,omitempty"` // root → current
	LiveFrames   []FrameSummary       `msgpack:"lf,omitempty"` // every live frame, push order
	PendingWork  []frames.PendingWork `msgpack:"pw,omitempty"`
	Recovery     RecoverySummary      `msgpack:"rs"`
	// Outputs are the live frames' model outputs that were streaming (or
	// complete and not yet recorded as a turn) when the actor stopped, in
	// push order (RecordPartialOutput). Past 512 KiB of text in all, an
	// output is listed without its text (Omitted): GetFrame's
	// Frame.Partial has it.
	Outputs []frames.InterruptedOutput `msgpack:"po,omitempty"`
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
	// ChainHead is the head of the continuation chain the frame is a link
	// of ("" for a frame in none).
	ChainHead string `msgpack:"chh,omitempty"`
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
	// ChainHead is the head of the chain the frame read is a link of.
	ChainHead string `msgpack:"chh,omitempty"`
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

// Pressure is a frame's live context against its context window: Tokens
// of Window, Permille rounded down.
type Pressure struct {
	Tokens   int64 `msgpack:"t"`
	Window   int64 `msgpack:"w"`
	Permille int64 `msgpack:"pm"`
}

// Continuation says a frame was continued: From, the link that ended, To,
// the new one (the chain's head).
type Continuation struct {
	From string `msgpack:"f"`
	To   string `msgpack:"t"`
}

// ContextChange is embedded in the replies of requests that change a
// frame's context. Pressure is the frame's (the new link's, after a
// continuation) as the reply is built — a repeated request id reports it
// as it stands then, nil once the frame has finished. Continued is set
// when the request crossed the automatic continuation threshold and the
// frame was continued in the same append; ContinueSkipped, when it crossed
// it and the continuation was refused (the reason; the request itself was
// applied).
type ContextChange struct {
	Pressure        *Pressure     `msgpack:"pr,omitempty"`
	Continued       *Continuation `msgpack:"co,omitempty"`
	ContinueSkipped string        `msgpack:"cs,omitempty"`
}

// Change returns the reply's context change, for the server to fill.
func (c *ContextChange) Change() *ContextChange { return c }

// ContextChanger is a reply that embeds ContextChange; PressureFrame is
// the frame whose pressure it reports.
type ContextChanger interface {
	Reply
	Change() *ContextChange
	PressureFrame() string
}

// PressureFrame implements ContextChanger.
func (r *AddContextHandleReply) PressureFrame() string { return r.FrameID }

// PressureFrame implements ContextChanger.
func (r *FinishToolCallReply) PressureFrame() string { return r.FrameID }

// PressureFrame implements ContextChanger.
func (r *CompactionResult) PressureFrame() string { return r.FrameID }

// PressureFrame implements ContextChanger.
func (r *ContinueFrameReply) PressureFrame() string { return r.FrameID }

// PressureFrame implements ContextChanger.
func (r *ResumeChainReply) PressureFrame() string { return r.FrameID }

// ContinueFrame continues a frame whose context fills (DESIGN §10): it
// becomes continued, and a new frame — its sibling, with the same
// allocation, carrying its cost on — takes over with every Critical
// handle, the trailing handles that fit ResumeCeiling (default 16,000
// tokens; whole tool calls, from a user's message), the tool calls still
// in doubt, a summary of the rest (Summary "": the server's summarizer;
// "none": none; any other text: yours, framed as state) and a segment
// telling the model it was continued. Mutations naming the old frame then
// fail with frame_continued, naming the head. A continuation that would
// free less than 5% of the window, or the second in a row to free no
// more than the one before, is refused (compaction_refused).
type ContinueFrame struct {
	Header        `msgpack:",inline"`
	FrameID       string `msgpack:"f,omitempty"`
	ResumeCeiling int64  `msgpack:"rc,omitempty"`
	Summary       string `msgpack:"s,omitempty"`
}

// ContinueFrameReply names the new link and what it carries.
type ContinueFrameReply struct {
	Result `msgpack:",inline"`
	// From is the frame continued; FrameID the new one (the chain's head).
	From    string `msgpack:"fr"`
	FrameID string `msgpack:"f"`
	// Carried counts the handles carried over (the segment and summary
	// not included), InDoubt the tool calls carried in doubt.
	Carried   int    `msgpack:"n"`
	InDoubt   int    `msgpack:"id,omitempty"`
	SummaryID string `msgpack:"su,omitempty"`
	SegmentID string `msgpack:"sg"`
	// TokensBefore is the old frame's live context, TokensAfter the new
	// one's.
	TokensBefore int64 `msgpack:"tb"`
	TokensAfter  int64 `msgpack:"ta"`
	ContextChange
}

// GetChain reads the continuation chain a frame is a link of (any link).
type GetChain struct {
	Header  `msgpack:",inline"`
	FrameID string `msgpack:"f"`
}

// ChainLink is one link of a chain. Tokens is its live context when it
// was continued or finished (0 while live); Version its frame.pushed's.
type ChainLink struct {
	FrameID     string        `msgpack:"f"`
	Status      frames.Status `msgpack:"st"`
	Tokens      int64         `msgpack:"t,omitempty"`
	CreatedAt   int64         `msgpack:"at"`
	CompletedAt int64         `msgpack:"ca,omitempty"`
	Version     int64         `msgpack:"v"`
	// EndVersion is the version of the link's frame.popped (0 while it is
	// live); Summary says what it was (goal, status, tokens, results).
	EndVersion int64  `msgpack:"ev,omitempty"`
	Summary    string `msgpack:"sm,omitempty"`
	// Removed is the link's tombstone once retention removed its records:
	// they spanned Version..EndVersion (through Removed.Through when
	// EndVersion is 0), and the scope's hash chain goes on from
	// Removed.Hash, the hash of the record at Removed.Through.
	Removed *ChainTombstone `msgpack:"rm,omitempty"`
}

// ChainTombstone is what retention left of a chain link.
type ChainTombstone struct {
	Through int64  `msgpack:"th"`
	Hash    string `msgpack:"h"`
	At      int64  `msgpack:"at"`
}

// GetChainReply lists the chain root → head. A frame in no chain is a
// chain of one link.
type GetChainReply struct {
	Result `msgpack:",inline"`
	Root   string      `msgpack:"r"`
	Head   string      `msgpack:"h"`
	Links  []ChainLink `msgpack:"l"`
}

// ResumeChain resumes a finished chain (any link names it) with a user's
// message: its head must be completed, failed or cancelled (a running
// chain is refused: chain_running). The new link is the head's sibling if
// its parent is live — with Budget (default: the head's total, allocated
// anew) and Limits (default: the head's) — else a new root, which needs
// Budget. It carries what a continuation carries, then Message as a user's
// handle. Idempotent by request id.
type ResumeChain struct {
	Header        `msgpack:",inline"`
	ChainID       string             `msgpack:"c"`
	Message       string             `msgpack:"m"`
	Budget        budget.TokenBudget `msgpack:"b"`
	Limits        budget.Limits      `msgpack:"l"`
	ResumeCeiling int64              `msgpack:"rc,omitempty"`
}

// ResumeChainReply names the new link.
type ResumeChainReply struct {
	Result    `msgpack:",inline"`
	From      string `msgpack:"fr"` // the head resumed
	FrameID   string `msgpack:"f"`  // the new link
	Root      string `msgpack:"r"`
	ParentID  string `msgpack:"pa,omitempty"`
	Carried   int    `msgpack:"n"`
	MessageID string `msgpack:"mh"`
	ContextChange
}

// Mut returns the header of a mutating request.
func (r *ContinueFrame) Mut() *Header { return &r.Header }

// Mut returns the header of a mutating request.
func (r *ResumeChain) Mut() *Header { return &r.Header }
