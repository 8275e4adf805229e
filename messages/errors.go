package messages

import "fmt"

// Code classifies an error reply. Codes are stable wire values.
type Code string

// Error codes.
const (
	CodeInvalidArgument       Code = "invalid_argument"
	CodeInvalidScope          Code = "invalid_scope"
	CodeTooLarge              Code = "too_large"
	CodeFrameNotFound         Code = "frame_not_found"
	CodeNoActiveFrame         Code = "no_active_frame"
	CodeDuplicateID           Code = "duplicate_id"
	CodeMaxDepthExceeded      Code = "max_depth_exceeded"
	CodeFrameNotLive          Code = "frame_not_live"
	CodeLiveChildren          Code = "live_children"
	CodeInsufficientTokens    Code = "insufficient_tokens"
	CodeLimitExceeded         Code = "limit_exceeded"
	CodeBudgetTooSmall        Code = "budget_too_small"
	CodeCriticalExceedsBudget Code = "critical_exceeds_budget"
	CodeNotSuspended          Code = "not_suspended"
	CodeNotSuspendable        Code = "not_suspendable"
	CodeTokenInvalid          Code = "token_invalid"
	CodeTokenUsed             Code = "token_used"
	CodeTokenExpired          Code = "token_expired"
	CodeToolCallNotFound      Code = "tool_call_not_found"
	CodeToolCallFinished      Code = "tool_call_finished"
	CodeHandleNotFound        Code = "handle_not_found"
	CodeTooManyHandles        Code = "too_many_handles"
	CodeCompactionRefused     Code = "compaction_refused"
	CodeRequestIDReused       Code = "request_id_reused"
	CodeRequestExpired        Code = "request_expired"
	CodeOverloaded            Code = "overloaded"
	CodeVersionConflict       Code = "version_conflict"
	CodeStoreFailed           Code = "store_failed"
	CodeUnavailable           Code = "unavailable"
	CodeBadRequest            Code = "bad_request"
	CodeInternal              Code = "internal"
	// CodeFrameContinued: the frame was continued; Error.Head names its
	// chain's head, where the work goes on.
	CodeFrameContinued Code = "frame_continued"
	// CodeChainRunning: a chain whose head is still live cannot be resumed.
	CodeChainRunning Code = "chain_running"
	// The spend ledger's. CodeSpendUnavailable: a reservation asked more
	// than the frame has available (Requested, Available);
	// CodeEstimateRequired: a reservation without an estimate, refused by
	// the server's policy; CodeReservationNotFound, CodeReservationClosed
	// (expired or returned), CodeReservationBound (already bound to a
	// frame), CodeReservationInvalid (a token forged, malformed or of
	// another scope or frame), CodeTooManyReservations.
	CodeSpendUnavailable    Code = "spend_unavailable"
	CodeEstimateRequired    Code = "estimate_required"
	CodeReservationNotFound Code = "reservation_not_found"
	CodeReservationClosed   Code = "reservation_closed"
	CodeReservationBound    Code = "reservation_bound"
	CodeReservationInvalid  Code = "reservation_invalid"
	CodeTooManyReservations Code = "too_many_reservations"
	// Scope state's. CodeStateTooLarge: a write would take a value or the
	// scope's state past its limit (the message names the key, the size
	// and the limit); CodeStateConflict: a conditional write found the key
	// at another version (the message names both); CodeStateKeyNotFound: a
	// touch of an absent key.
	CodeStateTooLarge    Code = "state_too_large"
	CodeStateConflict    Code = "state_conflict"
	CodeStateKeyNotFound Code = "state_key_not_found"
	// CodeScopeMoved: the server answering had been deposed as the scope's
	// owner in a shared store (another server took it over: DESIGN §13);
	// nothing of the request was written, and the server dropped the
	// scope. Error.Owner and Error.Epoch name the new owner. Retry with
	// the same request id (the Client does, a few times).
	CodeScopeMoved Code = "scope_moved"
)

// Error is the typed error every reply can carry. It is an error value, so
// a Client returns it as is; errors.Is matches on Code, so the sentinels
// below work across processes.
type Error struct {
	Code    Code   `msgpack:"c"`
	Message string `msgpack:"m"`
	// Needed is set for budget_too_small and critical_exceeds_budget: the
	// tokens the request would need.
	Needed int64 `msgpack:"n,omitempty"`
	// Requested and Available are set for insufficient_tokens.
	Requested int64 `msgpack:"rq,omitempty"`
	Available int64 `msgpack:"av,omitempty"`
	// Version is the scope's current version for version_conflict.
	Version int64 `msgpack:"v,omitempty"`
	// Head is set for frame_continued: the head of the frame's chain.
	Head string `msgpack:"hd,omitempty"`
	// Owner and Epoch are set for scope_moved: the scope's owner (a
	// server) and its epoch when the refused write was checked.
	Owner string `msgpack:"ow,omitempty"`
	Epoch uint64 `msgpack:"ep,omitempty"`
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "stateindex: " + string(e.Code)
	}
	return fmt.Sprintf("stateindex: %s: %s", e.Code, e.Message)
}

// Is matches another *Error with the same Code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Errorf builds an *Error.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Sentinels for errors.Is: errors.Is(err, messages.ErrFrameNotFound).
var (
	ErrInvalidArgument       = &Error{Code: CodeInvalidArgument}
	ErrInvalidScope          = &Error{Code: CodeInvalidScope}
	ErrTooLarge              = &Error{Code: CodeTooLarge}
	ErrFrameNotFound         = &Error{Code: CodeFrameNotFound}
	ErrNoActiveFrame         = &Error{Code: CodeNoActiveFrame}
	ErrDuplicateID           = &Error{Code: CodeDuplicateID}
	ErrMaxDepthExceeded      = &Error{Code: CodeMaxDepthExceeded}
	ErrFrameNotLive          = &Error{Code: CodeFrameNotLive}
	ErrLiveChildren          = &Error{Code: CodeLiveChildren}
	ErrInsufficientTokens    = &Error{Code: CodeInsufficientTokens}
	ErrLimitExceeded         = &Error{Code: CodeLimitExceeded}
	ErrBudgetTooSmall        = &Error{Code: CodeBudgetTooSmall}
	ErrCriticalExceedsBudget = &Error{Code: CodeCriticalExceedsBudget}
	ErrNotSuspended          = &Error{Code: CodeNotSuspended}
	ErrNotSuspendable        = &Error{Code: CodeNotSuspendable}
	ErrTokenInvalid          = &Error{Code: CodeTokenInvalid}
	ErrTokenUsed             = &Error{Code: CodeTokenUsed}
	ErrTokenExpired          = &Error{Code: CodeTokenExpired}
	ErrToolCallNotFound      = &Error{Code: CodeToolCallNotFound}
	ErrToolCallFinished      = &Error{Code: CodeToolCallFinished}
	ErrHandleNotFound        = &Error{Code: CodeHandleNotFound}
	ErrTooManyHandles        = &Error{Code: CodeTooManyHandles}
	ErrCompactionRefused     = &Error{Code: CodeCompactionRefused}
	ErrRequestIDReused       = &Error{Code: CodeRequestIDReused}
	ErrRequestExpired        = &Error{Code: CodeRequestExpired}
	ErrOverloaded            = &Error{Code: CodeOverloaded}
	ErrVersionConflict       = &Error{Code: CodeVersionConflict}
	ErrStoreFailed           = &Error{Code: CodeStoreFailed}
	ErrUnavailable           = &Error{Code: CodeUnavailable}
	ErrBadRequest            = &Error{Code: CodeBadRequest}
	ErrInternal              = &Error{Code: CodeInternal}
	ErrFrameContinued        = &Error{Code: CodeFrameContinued}
	ErrChainRunning          = &Error{Code: CodeChainRunning}
	ErrSpendUnavailable      = &Error{Code: CodeSpendUnavailable}
	ErrEstimateRequired      = &Error{Code: CodeEstimateRequired}
	ErrReservationNotFound   = &Error{Code: CodeReservationNotFound}
	ErrReservationClosed     = &Error{Code: CodeReservationClosed}
	ErrReservationBound      = &Error{Code: CodeReservationBound}
	ErrReservationInvalid    = &Error{Code: CodeReservationInvalid}
	ErrTooManyReservations   = &Error{Code: CodeTooManyReservations}
	ErrStateTooLarge         = &Error{Code: CodeStateTooLarge}
	ErrStateConflict         = &Error{Code: CodeStateConflict}
	ErrStateKeyNotFound      = &Error{Code: CodeStateKeyNotFound}
	ErrScopeMoved            = &Error{Code: CodeScopeMoved}
)
