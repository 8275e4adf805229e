package upgrade

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
)

// ManifestFile is the manifest's name inside a fixture directory; DataDir
// is the data directory beside it (laid out as stateindex serve lays out
// --data: stateindex.db, server.key, checkpoint.key, checkpoint.pub).
const (
	ManifestFile = "manifest.json"
	DataDir      = "data"
)

// Manifest records how a fixture was written and what it must answer.
// Its JSON is frozen with the fixture: fields may be added (older fixtures
// then lack them), never renamed or given another meaning.
type Manifest struct {
	// Release names the fixture (its directory: v1, v2, ...).
	Release string `json:"release"`
	// ClockStart is the fake clock's first reading (Unix nanoseconds);
	// ClockEnd its last while writing. A test serving the fixture runs its
	// clock from just after ClockEnd, so that suspension tokens and request
	// ids are as young as on the day the fixture was written.
	ClockStart int64 `json:"clock_start"`
	ClockEnd   int64 `json:"clock_end"`
	// SnapshotEvery and Shards are the server settings it was written with.
	SnapshotEvery int64 `json:"snapshot_every"`
	Shards        int   `json:"shards"`
	// LastSeq is the store's global sequence once written.
	LastSeq uint64 `json:"last_seq"`
	// JournalPending is the number of acknowledged records the data
	// directory holds in its write-ahead journal and not in bbolt (the
	// copy was taken while the store was open, as a crash leaves it): the
	// first open must replay exactly these. Fixtures before the journal
	// (v1) have none.
	JournalPending int `json:"journal_pending,omitempty"`
	// JournalSegmentBytes is the size of the fixture's journal segments
	// (0: no journal).
	JournalSegmentBytes int `json:"journal_segment_bytes,omitempty"`
	// ContinueAt is the automatic continuation threshold (permille of a
	// frame's context window) the fixture was written with; 0 off (every
	// fixture before v4).
	ContinueAt int64 `json:"continue_at,omitempty"`
	// ResumeCeiling is the trailing context a continuation carries unless
	// the request says (0: the default).
	ResumeCeiling int64 `json:"resume_ceiling,omitempty"`
	// Steps are the mutating requests in the order they were sent, each
	// with the reply it got.
	Steps []Step `json:"steps"`
	// Scopes is each scope as the fixture leaves it.
	Scopes []ScopeFacts `json:"scopes"`
	// Reads are reads of the fixture as it was left (GetChain, SearchChain,
	// GetFrame of chain links, v4 on; GetLedger, v6 on), each with what it
	// answered: a later release must answer the same.
	Reads []Read `json:"reads,omitempty"`
	// Ledger is the spend ledger's part of the scenario (v6 on).
	Ledger *Ledger `json:"ledger,omitempty"`
}

// Step is one mutating request and its reply. Request fields that the
// operation does not have are left empty.
type Step struct {
	N         int    `json:"n"`
	Op        string `json:"op"` // PushFrame, PopFrame, ... as in messages
	Scope     string `json:"scope"`
	RequestID string `json:"request_id"`
	// Header fields of every mutating request.
	IfVersion *int64 `json:"if_version,omitempty"`
	Reason    uint8  `json:"reason,omitempty"` // frames.Reason

	FrameID      string               `json:"frame_id,omitempty"`
	ParentID     string               `json:"parent_id,omitempty"`
	Goal         *string              `json:"goal,omitempty"`
	Inputs       []byte               `json:"inputs,omitempty"`
	SetInputs    bool                 `json:"set_inputs,omitempty"`
	Budget       *budget.TokenBudget  `json:"budget,omitempty"`
	Limits       *budget.Limits       `json:"limits,omitempty"`
	ReserveDelta int64                `json:"reserve_delta,omitempty"`
	ContextHash  *string              `json:"context_hash,omitempty"`
	Status       string               `json:"status,omitempty"` // frames.Status name
	Cascade      bool                 `json:"cascade,omitempty"`
	HandleID     string               `json:"handle_id,omitempty"`
	Kind         string               `json:"kind,omitempty"` // a handle's or a result's kind
	Priority     *compaction.Priority `json:"priority,omitempty"`
	Content      string               `json:"content,omitempty"`
	ResultID     string               `json:"result_id,omitempty"`
	Ref          string               `json:"ref,omitempty"`
	Summary      string               `json:"summary,omitempty"`
	Cost         *budget.Cost         `json:"cost,omitempty"`
	CallID       string               `json:"call_id,omitempty"`
	Name         string               `json:"name,omitempty"`
	Input        []byte               `json:"input,omitempty"`
	Call         string               `json:"call,omitempty"`
	Output       string               `json:"output,omitempty"`
	IsError      bool                 `json:"is_error,omitempty"`
	SuspendAs    string               `json:"suspend_reason,omitempty"` // frames.SuspendReason
	Note         string               `json:"note,omitempty"`
	TTLMillis    int64                `json:"ttl_millis,omitempty"`
	Token        string               `json:"token,omitempty"`
	TargetTokens int64                `json:"target_tokens,omitempty"`
	Strategy     *Strategy            `json:"strategy,omitempty"`
	// v4 on: a handle's role, a frame's context window, a usage's
	// calibration sample, ContinueFrame's and ResumeChain's fields
	// (ResumeChain's budget and limits are Budget and Limits; ContinueFrame's
	// summary is Summary).
	Role          string       `json:"role,omitempty"`
	ContextWindow int64        `json:"context_window,omitempty"`
	Calibration   *Calibration `json:"calibration,omitempty"`
	ResumeCeiling int64        `json:"resume_ceiling,omitempty"`
	ChainID       string       `json:"chain_id,omitempty"`
	Message       string       `json:"message,omitempty"`
	// ApplyRetention (a retention pass's, recorded as the pass sent it;
	// Through is also AckSettlement's).
	Through int64  `json:"through,omitempty"`
	Hash    string `json:"hash,omitempty"`
	Runs    int64  `json:"runs,omitempty"`
	Why     string `json:"why,omitempty"`

	// v6 on, the spend ledger: PushFrame's Reservation (a reservation
	// token); ReserveSpend's Estimate, For, Partial and LeaseMillis;
	// RenewReservation's Token (the reservation token) and LeaseMillis;
	// ReleaseReservation's ReservationID; SettleSpend's Token (the
	// reservation token), From, FrameID, Spent, Previous, Final and Proof;
	// AckSettlement's ReservationID, Through, Final and Proof. SettleSpend
	// and AckSettlement are the writing release's outbox's own requests,
	// recorded with the request ids and proofs it sent them with.
	Reservation   string `json:"reservation,omitempty"`
	Estimate      *int64 `json:"estimate,omitempty"`
	For           string `json:"for,omitempty"`
	Partial       bool   `json:"partial,omitempty"`
	LeaseMillis   int64  `json:"lease_millis,omitempty"`
	ReservationID string `json:"reservation_id,omitempty"`
	From          string `json:"from,omitempty"`
	Spent         int64  `json:"spent,omitempty"`
	Previous      int64  `json:"previous,omitempty"`
	Final         bool   `json:"final,omitempty"`
	Proof         string `json:"proof,omitempty"`

	// Expired says the request id is a UUIDv7 stamped before the scope's
	// request horizon (as the fixture is served): a resend is refused as
	// request_expired and appends nothing, its reply being gone.
	Expired bool `json:"expired,omitempty"`

	// WireV1 is the request as the writing release encoded it (msgpack,
	// the bytes its request digest was taken of) and DigestV1 that digest
	// (SHA-256, hex): what the scope remembers next to the request id.
	WireV1   []byte `json:"wire_v1"`
	DigestV1 string `json:"digest_v1"`

	// Reply is what the request got; a resend must get the same.
	Reply Reply `json:"reply"`
}

// Calibration is RecordUsage's calibration sample.
type Calibration struct {
	PackTokens          int64  `json:"pack_tokens"`
	ProviderInputTokens int64  `json:"provider_input_tokens"`
	Counter             string `json:"counter"`
}

// Strategy is CompactContext's strategy.
type Strategy struct {
	Kind         string `json:"kind"`
	KeepRecent   int    `json:"keep_recent,omitempty"`
	MessageCount int    `json:"message_count,omitempty"`
	Custom       string `json:"custom,omitempty"`
}

// Reply is what a resend must reproduce of a reply: its version and every
// id, token and amount it names. Counts a later release may compute
// differently from the same events (a compaction's ItemsRemoved and
// ItemsSummarized, recovery timings) are left out; the ids stand for them.
type Reply struct {
	Version int64  `json:"version"`
	FrameID string `json:"frame_id,omitempty"`
	// PushFrame
	Depth  int64               `json:"depth,omitempty"`
	Budget *budget.TokenBudget `json:"budget,omitempty"`
	// PopFrame
	Status           string   `json:"status,omitempty"`
	Released         int64    `json:"released,omitempty"`
	ChargedTokens    int64    `json:"charged_tokens,omitempty"`
	Cancelled        []string `json:"cancelled,omitempty"`
	ParentSuspension *Token   `json:"parent_suspension,omitempty"`
	// AddContextHandle, FinishToolCall
	HandleID string `json:"handle_id,omitempty"`
	Tokens   int64  `json:"tokens,omitempty"`
	// AddResult
	ResultID string `json:"result_id,omitempty"`
	// RecordUsage (a crossed limit), SuspendFrame (the reply is the token)
	Suspension *Token `json:"suspension,omitempty"`
	// StartToolCall, FinishToolCall
	CallID         string `json:"call_id,omitempty"`
	CallHandleID   string `json:"call_handle_id,omitempty"`
	ResultHandleID string `json:"result_handle_id,omitempty"`
	// CompactContext
	Removed   []string `json:"removed,omitempty"`
	SummaryID string   `json:"summary_id,omitempty"`
	// ContinueFrame, ResumeChain (From: the frame continued or resumed)
	From         string `json:"from,omitempty"`
	Carried      int    `json:"carried,omitempty"`
	InDoubt      int    `json:"in_doubt,omitempty"`
	SegmentID    string `json:"segment_id,omitempty"`
	TokensBefore int64  `json:"tokens_before,omitempty"`
	TokensAfter  int64  `json:"tokens_after,omitempty"`
	Root         string `json:"root,omitempty"`
	ParentID     string `json:"parent_id,omitempty"`
	MessageID    string `json:"message_id,omitempty"`
	// Continued: a context change that crossed the automatic continuation
	// threshold continued the frame in the same append. (A refused
	// automatic continuation, ContinueSkipped, is said once and not
	// kept: a resend does not repeat it, like the pressure.)
	Continued *Continuation `json:"continued,omitempty"`
	// ApplyRetention, AckSettlement
	Through int64 `json:"through,omitempty"`
	// ResumeActor (not compared on a resend: the writing release answered
	// a repeated ResumeActor with the scope's current state)
	Live    []string  `json:"live,omitempty"`
	Pending []Pending `json:"pending,omitempty"`
	// v6 on, the spend ledger. ReserveSpend: the reservation's id, For,
	// Amount, Ceiling, Policy, ExpiresAt, its token (ReservationToken) and
	// the expired reservations it returned (ReturnedIDs); RenewReservation:
	// ReservationID, ExpiresAt, ReservationToken; ReleaseReservation:
	// ReservationID, ReturnedSpend; SettleSpend: ReservationID, Settled,
	// Charged, ChargedTo, Routed (and Suspension); AckSettlement:
	// ReservationID, Through.
	ReservationID    string   `json:"reservation_id,omitempty"`
	For              string   `json:"for,omitempty"`
	Amount           int64    `json:"amount,omitempty"`
	Ceiling          int64    `json:"ceiling,omitempty"`
	Policy           string   `json:"policy,omitempty"`
	ExpiresAt        int64    `json:"expires_at,omitempty"`
	ReservationToken string   `json:"reservation_token,omitempty"`
	ReturnedIDs      []string `json:"returned_ids,omitempty"`
	ReturnedSpend    int64    `json:"returned_spend,omitempty"`
	Settled          int64    `json:"settled,omitempty"`
	Charged          int64    `json:"charged,omitempty"`
	ChargedTo        string   `json:"charged_to,omitempty"`
	Routed           string   `json:"routed,omitempty"`
}

// Continuation names the link a context change continued and the new one.
type Continuation struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Token is a suspension token as a reply carries it.
type Token struct {
	Token       string            `json:"token"`
	TokenID     string            `json:"token_id"`
	Scope       string            `json:"scope"`
	FrameID     string            `json:"frame_id"`
	Reason      string            `json:"reason"`
	SuspendedAt int64             `json:"suspended_at"`
	ExpiresAt   int64             `json:"expires_at"`
	Limit       *budget.Violation `json:"limit,omitempty"`
}

// Pending is one item of a scope's pending work.
type Pending struct {
	FrameID    string `json:"frame_id"`
	Kind       string `json:"kind"`
	ToolCallID string `json:"tool_call_id,omitempty"`
}

// Frame is what a scope's reads must still say about one frame.
type Frame struct {
	ID       string   `json:"id"`
	ParentID string   `json:"parent_id,omitempty"`
	Goal     string   `json:"goal"`
	Status   string   `json:"status"`
	Depth    int64    `json:"depth"`
	Handles  int      `json:"handles"`
	Results  int      `json:"results"`
	InDoubt  []string `json:"in_doubt,omitempty"`
	// Suspended is the suspension's reason, "" when not suspended.
	Suspended string `json:"suspended,omitempty"`
}

// ScopeFacts is a scope as the fixture leaves it.
type ScopeFacts struct {
	Scope   string `json:"scope"`
	Version int64  `json:"version"`
	// Stack is GetStack of the last live frame (by id), root first; empty
	// when no frame is live.
	Stack []Frame `json:"stack,omitempty"`
	// Live and Pending are what ResumeActor lists.
	Live    []Frame   `json:"live,omitempty"`
	Pending []Pending `json:"pending,omitempty"`
	// UnusedToken is a suspension token the fixture never used: it must
	// still resume FrameID exactly once.
	UnusedToken *Token `json:"unused_token,omitempty"`
}

// Load reads a fixture's manifest, refusing fields it does not know (a
// renamed field would otherwise read as empty and weaken the test).
func Load(path string) (*Manifest, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(m.Steps) == 0 || len(m.Scopes) == 0 {
		return nil, fmt.Errorf("%s: no steps or no scopes", path)
	}
	return &m, nil
}

// Encode returns the manifest's JSON, indented, newline-terminated.
func (m *Manifest) Encode() ([]byte, error) {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Read is a read of the fixture as it was left and what it answered
// (v4 on). Versions the reply carries as "the scope's version as read" are
// left out (serving a fixture appends: ResumeActor); the versions of
// records (a link's push and pop, a hit's record) are kept.
type Read struct {
	Op      string `json:"op"` // GetChain, SearchChain, GetFrame, GetLedger
	Scope   string `json:"scope"`
	FrameID string `json:"frame_id"`
	// SearchChain's request.
	Query  string `json:"query,omitempty"`
	Regex  bool   `json:"regex,omitempty"`
	Limit  int    `json:"limit,omitempty"`
	Cursor string `json:"cursor,omitempty"`
	// GetFrame's request (with its handles).
	WithHandles bool `json:"with_handles,omitempty"`

	// The answer: one of these, as Op says.
	Chain  *Chain      `json:"chain,omitempty"`
	Search *Search     `json:"search,omitempty"`
	Frame  *FrameState `json:"frame,omitempty"`
	Ledger *LedgerRead `json:"ledger,omitempty"`
}

// Chain is GetChain's answer.
type Chain struct {
	Root  string      `json:"root"`
	Head  string      `json:"head"`
	Links []ChainLink `json:"links"`
}

// ChainLink is one link of a chain.
type ChainLink struct {
	FrameID     string     `json:"frame_id"`
	Status      string     `json:"status"`
	Tokens      int64      `json:"tokens,omitempty"`
	CreatedAt   int64      `json:"created_at"`
	CompletedAt int64      `json:"completed_at,omitempty"`
	Version     int64      `json:"version"`
	EndVersion  int64      `json:"end_version,omitempty"`
	Summary     string     `json:"summary,omitempty"`
	Removed     *Tombstone `json:"removed,omitempty"`
}

// Tombstone is what retention left of a link.
type Tombstone struct {
	Through int64  `json:"through"`
	Hash    string `json:"hash"`
	At      int64  `json:"at"`
}

// Search is SearchChain's answer (one page).
type Search struct {
	Hits       []Hit          `json:"hits,omitempty"`
	Next       string         `json:"next,omitempty"`
	Unsearched []VersionRange `json:"unsearched,omitempty"`
	Links      []string       `json:"links"`
	Head       string         `json:"head"`
}

// Hit is one search hit.
type Hit struct {
	FrameID string `json:"frame_id"`
	ItemID  string `json:"item_id,omitempty"`
	Version int64  `json:"version"`
	Kind    string `json:"kind"`
	Snippet string `json:"snippet"`
}

// VersionRange is a range of versions a search could not read.
type VersionRange struct {
	From    int64  `json:"from"`
	Through int64  `json:"through"`
	Why     string `json:"why,omitempty"`
}

// FrameState is GetFrame's answer: the frame with its chain fields and
// handles, and the head of its chain.
type FrameState struct {
	ChainHead     string             `json:"chain_head,omitempty"`
	ID            string             `json:"id"`
	ParentID      string             `json:"parent_id,omitempty"`
	Goal          string             `json:"goal"`
	Status        string             `json:"status"`
	Depth         int64              `json:"depth"`
	Budget        budget.TokenBudget `json:"budget"`
	Limits        budget.Limits      `json:"limits"`
	Cost          budget.Cost        `json:"cost"`
	CreatedAt     int64              `json:"created_at"`
	CompletedAt   int64              `json:"completed_at,omitempty"`
	ContextTokens int64              `json:"context_tokens"`
	ContextWindow int64              `json:"context_window,omitempty"`
	ContinuedFrom string             `json:"continued_from,omitempty"`
	ContinuedTo   string             `json:"continued_to,omitempty"`
	ChainRoot     string             `json:"chain_root,omitempty"`
	Freed         []int64            `json:"freed,omitempty"`
	Handles       []Handle           `json:"handles,omitempty"`
	Results       []string           `json:"results,omitempty"`
	ToolCalls     []ToolCall         `json:"tool_calls,omitempty"`
}

// ToolCall is one of a frame's tool calls: a call in doubt carried by a
// continuation is on every link, abandoned on those that ended.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	StartedAt int64  `json:"started_at"`
	Finished  bool   `json:"finished,omitempty"`
	IsError   bool   `json:"is_error,omitempty"`
	Abandoned bool   `json:"abandoned,omitempty"`
}

// Handle is one live handle of a frame.
type Handle struct {
	ID       string              `json:"id"`
	Kind     string              `json:"kind"`
	Priority compaction.Priority `json:"priority"`
	Role     string              `json:"role,omitempty"`
	// ContentSHA256 is the hex SHA-256 of the handle's content as read
	// (the manifest stays small; the steps hold the texts written).
	ContentSHA256 string   `json:"content_sha256"`
	ContentRef    string   `json:"content_ref,omitempty"`
	Tokens        int64    `json:"tokens"`
	Seq           int64    `json:"seq"`
	Group         string   `json:"group,omitempty"`
	Covers        []string `json:"covers,omitempty"`
}

// Ledger is the spend ledger's part of a fixture (v6 on): a root frame
// with a spend limit (Frame, in Scope) and its reservations, each left as
// Reservations says; the open one's token (Open); the settlements the
// fixture leaves pending (Pending: the work finished, the writing
// release's outbox did not deliver it before the copy) and the scopes the
// store's outbox table lists (OutboxScopes); and what the frame's ledger
// row says once every pending settlement is delivered (Actual,
// Outstanding, and Delivered: GetLedger as the writing release answered
// after its own outbox delivered them to the scratch store the fixture was
// copied from).
type Ledger struct {
	Scope        string              `json:"scope"`
	Frame        string              `json:"frame"`
	SpendLimit   int64               `json:"spend_limit"`
	Reservations []ReservationFact   `json:"reservations"`
	Open         *OpenReservation    `json:"open,omitempty"`
	Pending      []PendingSettlement `json:"pending,omitempty"`
	OutboxScopes []string            `json:"outbox_scopes,omitempty"`
	// Actual and Outstanding are the frame's ledger row once the pending
	// settlements are delivered, each charged once.
	Actual      int64  `json:"actual"`
	Outstanding int64  `json:"outstanding"`
	Delivered   []Read `json:"delivered,omitempty"`
}

// Reservation fates (ReservationFact.Left).
const (
	LeftSettled  = "settled"  // the work finished and its settlement was charged
	LeftReleased = "released" // released by request
	LeftExpired  = "expired"  // its lease ran out and a later grant returned it
	LeftOpen     = "open"     // unbound, its lease running
	LeftPending  = "pending"  // bound; the work finished, its settlement not delivered
)

// ReservationFact is one reservation of the scenario: whose (Scope,
// Frame), for which scope, the frame it paid for (Bound), and how the
// fixture left it (Left).
type ReservationFact struct {
	ID    string `json:"id"`
	Scope string `json:"scope"`
	Frame string `json:"frame"`
	For   string `json:"for"`
	Bound string `json:"bound,omitempty"`
	Left  string `json:"left"`
}

// OpenReservation is a reservation never bound: its Token (the latest a
// reply gave) must still bind a root frame in For, once.
type OpenReservation struct {
	ID        string `json:"id"`
	For       string `json:"for"`
	Amount    int64  `json:"amount"`
	Ceiling   int64  `json:"ceiling"`
	ExpiresAt int64  `json:"expires_at"`
	Token     string `json:"token"`
}

// PendingSettlement is a binding of root Root in Scope to reservation
// Reservation of ReservingScope, whose final spend Reported the fixture
// leaves undelivered.
type PendingSettlement struct {
	Scope          string `json:"scope"`
	Root           string `json:"root"`
	Reservation    string `json:"reservation"`
	ReservingScope string `json:"reserving_scope"`
	Reported       int64  `json:"reported"`
}

// LedgerRead is GetLedger's answer, without the scope's version and the
// server's time.
type LedgerRead struct {
	Frames   []LedgerRow     `json:"frames,omitempty"`
	Bindings []LedgerBinding `json:"bindings,omitempty"`
}

// LedgerRow is one frame's line of a ledger.
type LedgerRow struct {
	Frame        string              `json:"frame"`
	Parent       string              `json:"parent,omitempty"`
	Goal         string              `json:"goal,omitempty"`
	Status       string              `json:"status,omitempty"`
	Finished     bool                `json:"finished,omitempty"`
	Max          int64               `json:"max,omitempty"`
	Reserved     int64               `json:"reserved,omitempty"`
	Reservation  string              `json:"reservation,omitempty"`
	Outstanding  int64               `json:"outstanding,omitempty"`
	Actual       int64               `json:"actual,omitempty"`
	Late         int64               `json:"late,omitempty"`
	Reservations []LedgerReservation `json:"reservations,omitempty"`
}

// LedgerReservation is a reservation as a ledger row lists it.
type LedgerReservation struct {
	ID        string   `json:"id"`
	Frame     string   `json:"frame"`
	Path      []string `json:"path,omitempty"`
	For       string   `json:"for"`
	Amount    int64    `json:"amount"`
	Ceiling   int64    `json:"ceiling"`
	Estimate  int64    `json:"estimate"`
	Policy    string   `json:"policy,omitempty"`
	At        int64    `json:"at"`
	ExpiresAt int64    `json:"expires_at"`
	Child     string   `json:"child,omitempty"`
	Settled   int64    `json:"settled,omitempty"`
	Late      int64    `json:"late,omitempty"`
	Returned  bool     `json:"returned,omitempty"`
	Why       string   `json:"why,omitempty"`
	Final     bool     `json:"final,omitempty"`
	Renewals  int64    `json:"renewals,omitempty"`
}

// LedgerBinding is a scope's binding to another scope's reservation (its
// outbox entry).
type LedgerBinding struct {
	Reservation    string `json:"reservation"`
	Scope          string `json:"scope"`
	Frame          string `json:"frame"`
	Token          string `json:"token"`
	Root           string `json:"root"`
	Amount         int64  `json:"amount"`
	Ceiling        int64  `json:"ceiling"`
	ExpiresAt      int64  `json:"expires_at"`
	At             int64  `json:"at"`
	Reported       int64  `json:"reported,omitempty"`
	Final          bool   `json:"final,omitempty"`
	Delivered      int64  `json:"delivered,omitempty"`
	DeliveredFinal bool   `json:"delivered_final,omitempty"`
}
