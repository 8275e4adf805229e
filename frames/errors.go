package frames

import (
	"errors"
	"fmt"
)

// Errors returned by Decide and Apply. Callers match them with errors.Is;
// messages name the offending value.
var (
	ErrInvalidScope       = errors.New("frames: invalid scope")
	ErrInvalidID          = errors.New("frames: invalid id")
	ErrInvalidArgument    = errors.New("frames: invalid argument")
	ErrTooLarge           = errors.New("frames: value too large")
	ErrFrameNotFound      = errors.New("frames: frame not found")
	ErrNoActiveFrame      = errors.New("frames: no active frame in scope")
	ErrDuplicateID        = errors.New("frames: duplicate id")
	ErrMaxDepthExceeded   = errors.New("frames: max subframe depth exceeded")
	ErrFrameNotLive       = errors.New("frames: frame is not live")
	ErrParentNotLive      = errors.New("frames: parent frame cannot take children")
	ErrLiveChildren       = errors.New("frames: frame has live children")
	ErrNotSuspended       = errors.New("frames: frame is not suspended")
	ErrNotSuspendable     = errors.New("frames: frame cannot be suspended")
	ErrTokenUnknown       = errors.New("frames: suspension token unknown")
	ErrTokenUsed          = errors.New("frames: suspension token already used")
	ErrTokenExpired       = errors.New("frames: suspension token expired")
	ErrToolCallUnknown    = errors.New("frames: tool call not found")
	ErrToolCallFinished   = errors.New("frames: tool call already finished")
	ErrHandleNotFound     = errors.New("frames: context handle not found")
	ErrTooManyHandles     = errors.New("frames: too many context handles")
	ErrCriticalHandle     = errors.New("frames: critical handle cannot be removed")
	ErrBudgetTooSmall     = errors.New("frames: pack budget under the minimum")
	ErrSplitGroup         = errors.New("frames: tool call and result cannot be separated")
	ErrInconsistentEvent  = errors.New("frames: event inconsistent with state")
	ErrUnknownEventType   = errors.New("frames: unknown event type")
	ErrRequestIDReused    = errors.New("frames: request id reused with a different request")
	ErrRequestExpired     = errors.New("frames: request id older than the idempotency horizon")
	ErrInvariantViolation = errors.New("frames: invariant violated")
	// The spend ledger's (ledger.go).
	ErrSpendUnavailable    = errors.New("frames: spend unavailable")
	ErrEstimateRequired    = errors.New("frames: spend estimate required")
	ErrReservationUnknown  = errors.New("frames: reservation not found")
	ErrReservationClosed   = errors.New("frames: reservation expired or returned")
	ErrReservationBound    = errors.New("frames: reservation already bound")
	ErrReservationForeign  = errors.New("frames: reservation of another scope or frame")
	ErrTooManyReservations = errors.New("frames: too many open reservations")
	// The scope state's (kv.go).
	ErrStateTooLarge    = errors.New("frames: state too large")
	ErrStateConflict    = errors.New("frames: state key not at the expected version")
	ErrStateKeyNotFound = errors.New("frames: state key not found")
)

// ErrFrameSuspended: the frame is suspended and the operation needs it
// running (a suspended frame is live: it can still be updated, popped or
// resumed). It also matches ErrFrameNotLive, so callers and the wire code
// that know only that error keep working.
var ErrFrameSuspended error = suspendedError{}

type suspendedError struct{}

func (suspendedError) Error() string { return "frames: frame is suspended" }

// Is makes errors.Is(ErrFrameSuspended, ErrFrameNotLive) true.
func (suspendedError) Is(target error) bool { return target == ErrFrameNotLive }

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}

func inconsistent(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInconsistentEvent}, args...)...)
}
