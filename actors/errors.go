package actors

import (
	"context"
	"errors"
	"fmt"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// Sentinel errors returned by the Client, for errors.Is. They match the
// *messages.Error a reply carries by its code.
var (
	ErrInvalidArgument       = messages.ErrInvalidArgument
	ErrInvalidScope          = messages.ErrInvalidScope
	ErrTooLarge              = messages.ErrTooLarge
	ErrFrameNotFound         = messages.ErrFrameNotFound
	ErrNoActiveFrame         = messages.ErrNoActiveFrame
	ErrDuplicateID           = messages.ErrDuplicateID
	ErrMaxDepthExceeded      = messages.ErrMaxDepthExceeded
	ErrFrameNotLive          = messages.ErrFrameNotLive
	ErrLiveChildren          = messages.ErrLiveChildren
	ErrInsufficientTokens    = messages.ErrInsufficientTokens
	ErrLimitExceeded         = messages.ErrLimitExceeded
	ErrBudgetTooSmall        = messages.ErrBudgetTooSmall
	ErrCriticalExceedsBudget = messages.ErrCriticalExceedsBudget
	ErrNotSuspended          = messages.ErrNotSuspended
	ErrNotSuspendable        = messages.ErrNotSuspendable
	ErrTokenInvalid          = messages.ErrTokenInvalid
	ErrTokenUsed             = messages.ErrTokenUsed
	ErrTokenExpired          = messages.ErrTokenExpired
	ErrToolCallNotFound      = messages.ErrToolCallNotFound
	ErrToolCallFinished      = messages.ErrToolCallFinished
	ErrHandleNotFound        = messages.ErrHandleNotFound
	ErrTooManyHandles        = messages.ErrTooManyHandles
	ErrCompactionRefused     = messages.ErrCompactionRefused
	ErrRequestIDReused       = messages.ErrRequestIDReused
	// ErrRequestExpired: the request id's first-send time is older than the
	// server's idempotency horizon; it was not applied. Send a new id if
	// the work must still be done.
	ErrRequestExpired = messages.ErrRequestExpired
	// ErrOverloaded: the scope's shard has as much pending work as it is
	// configured to hold; the request was not applied: retry later.
	ErrOverloaded      = messages.ErrOverloaded
	ErrVersionConflict = messages.ErrVersionConflict
	ErrStoreFailed     = messages.ErrStoreFailed
	ErrUnavailable     = messages.ErrUnavailable
	ErrBadRequest      = messages.ErrBadRequest
	ErrInternal        = messages.ErrInternal
	// ErrFrameContinued: the frame was continued; the error's Head names
	// its chain's head.
	ErrFrameContinued = messages.ErrFrameContinued
	// ErrChainRunning: a chain whose head is live cannot be resumed.
	ErrChainRunning = messages.ErrChainRunning
	// The spend ledger's (messages.CodeSpendUnavailable and the rest).
	ErrSpendUnavailable    = messages.ErrSpendUnavailable
	ErrEstimateRequired    = messages.ErrEstimateRequired
	ErrReservationNotFound = messages.ErrReservationNotFound
	ErrReservationClosed   = messages.ErrReservationClosed
	ErrReservationBound    = messages.ErrReservationBound
	ErrReservationInvalid  = messages.ErrReservationInvalid
	ErrTooManyReservations = messages.ErrTooManyReservations
	// Scope state's (messages.CodeStateTooLarge and the rest).
	ErrStateTooLarge    = messages.ErrStateTooLarge
	ErrStateConflict    = messages.ErrStateConflict
	ErrStateKeyNotFound = messages.ErrStateKeyNotFound
	// ErrScopeMoved: the server that answered was deposed as the scope's
	// owner in a shared store (another server took the scope over); the
	// request was not applied and the server dropped the scope. The
	// Client resends it with the same request id a few times within its
	// deadline (moveRetries) before it returns this.
	ErrScopeMoved = messages.ErrScopeMoved
	// ErrTimeout: the reply did not arrive before the deadline. For a
	// mutating request the outcome is unknown: resend it with the same
	// request id, which applies it at most once.
	ErrTimeout = errors.New("stateindex: request timed out; outcome unknown, retry with the same request id")
)

// errorTable maps domain errors to wire codes, most specific first.
var errorTable = []struct {
	err  error
	code messages.Code
}{
	{frames.ErrInvalidScope, messages.CodeInvalidScope},
	{frames.ErrTooLarge, messages.CodeTooLarge},
	{frames.ErrFrameNotFound, messages.CodeFrameNotFound},
	{frames.ErrNoActiveFrame, messages.CodeNoActiveFrame},
	{frames.ErrFrameContinued, messages.CodeFrameContinued},
	{frames.ErrChainRunning, messages.CodeChainRunning},
	{frames.ErrIneffective, messages.CodeCompactionRefused},
	{frames.ErrChainCorrupt, messages.CodeStoreFailed},
	{frames.ErrSpendUnavailable, messages.CodeSpendUnavailable},
	{frames.ErrEstimateRequired, messages.CodeEstimateRequired},
	{frames.ErrReservationUnknown, messages.CodeReservationNotFound},
	{frames.ErrReservationClosed, messages.CodeReservationClosed},
	{frames.ErrReservationBound, messages.CodeReservationBound},
	{frames.ErrReservationForeign, messages.CodeReservationInvalid},
	{frames.ErrTooManyReservations, messages.CodeTooManyReservations},
	{frames.ErrStateTooLarge, messages.CodeStateTooLarge},
	{frames.ErrStateConflict, messages.CodeStateConflict},
	{frames.ErrStateKeyNotFound, messages.CodeStateKeyNotFound},
	{frames.ErrDuplicateID, messages.CodeDuplicateID},
	{frames.ErrMaxDepthExceeded, messages.CodeMaxDepthExceeded},
	{frames.ErrFrameNotLive, messages.CodeFrameNotLive},
	{frames.ErrParentNotLive, messages.CodeFrameNotLive},
	{frames.ErrLiveChildren, messages.CodeLiveChildren},
	{frames.ErrNotSuspended, messages.CodeNotSuspended},
	{frames.ErrNotSuspendable, messages.CodeNotSuspendable},
	{frames.ErrTokenUnknown, messages.CodeTokenInvalid},
	{frames.ErrTokenUsed, messages.CodeTokenUsed},
	{frames.ErrTokenExpired, messages.CodeTokenExpired},
	{frames.ErrToolCallUnknown, messages.CodeToolCallNotFound},
	{frames.ErrToolCallFinished, messages.CodeToolCallFinished},
	{frames.ErrHandleNotFound, messages.CodeHandleNotFound},
	{frames.ErrTooManyHandles, messages.CodeTooManyHandles},
	{frames.ErrCriticalHandle, messages.CodeCompactionRefused},
	{frames.ErrSplitGroup, messages.CodeCompactionRefused},
	{frames.ErrRequestIDReused, messages.CodeRequestIDReused},
	{frames.ErrRequestExpired, messages.CodeRequestExpired},
	{budget.ErrInsufficientTokens, messages.CodeInsufficientTokens},
	{budget.ErrLimitExceeded, messages.CodeLimitExceeded},
	{compaction.ErrCriticalExceedsBudget, messages.CodeCriticalExceedsBudget},
	{frames.ErrBudgetTooSmall, messages.CodeBudgetTooSmall},
	{eventstore.ErrFenced, messages.CodeScopeMoved},
	{eventstore.ErrConflict, messages.CodeVersionConflict},
	{eventstore.ErrRecordTooLarge, messages.CodeTooLarge},
	{eventstore.ErrWritesDisabled, messages.CodeStoreFailed},
	{eventstore.ErrCommitFailed, messages.CodeStoreFailed},
	{eventstore.ErrTransient, messages.CodeStoreFailed},
	{eventstore.ErrClosed, messages.CodeUnavailable},
	{eventstore.ErrCorrupt, messages.CodeStoreFailed},
	{context.DeadlineExceeded, messages.CodeUnavailable},
	{frames.ErrInvalidID, messages.CodeInvalidArgument},
	{frames.ErrInvalidArgument, messages.CodeInvalidArgument},
	{budget.ErrNegativeAmount, messages.CodeInvalidArgument},
	{budget.ErrOverflow, messages.CodeInvalidArgument},
	{budget.ErrInvalidBudget, messages.CodeInvalidArgument},
	{budget.ErrInvalidLimits, messages.CodeInvalidArgument},
	{budget.ErrReleaseTooLarge, messages.CodeInvalidArgument},
}

// toWire turns any error into the typed reply error. Unknown errors are
// internal: their text is kept, since it names what failed.
func toWire(err error) *messages.Error {
	var me *messages.Error
	if errors.As(err, &me) {
		return me
	}
	out := &messages.Error{Code: messages.CodeInternal, Message: err.Error()}
	for _, m := range errorTable {
		if errors.Is(err, m.err) {
			out.Code = m.code
			break
		}
	}
	var ite *budget.InsufficientTokensError
	if errors.As(err, &ite) {
		out.Requested, out.Available = ite.Requested, ite.Available
	}
	var su *frames.SpendUnavailableError
	if errors.As(err, &su) {
		out.Requested, out.Available = su.Requested, su.Available
	}
	var small *frames.BudgetTooSmallError
	if errors.As(err, &small) {
		out.Needed = small.Needed
	}
	var coe *compaction.CriticalOverflowError
	if errors.As(err, &coe) {
		out.Needed = coe.Needed
	}
	var fc *frames.ContinuedError
	if errors.As(err, &fc) {
		out.Head = fc.Head
	}
	var ce *eventstore.ConflictError
	if errors.As(err, &ce) {
		out.Version = ce.Actual
	}
	var fe *eventstore.FencedError
	if errors.As(err, &fe) {
		out.Owner, out.Epoch = fe.Current.Owner, fe.Current.Epoch
		out.Message = fmt.Sprintf("scope %q moved to owner %s (epoch %d); this server held epoch %d and wrote nothing of the request: "+
			"retry it with the same request id", fe.Stream, fe.Current.Owner, fe.Current.Epoch, fe.Held.Epoch)
	}
	if errors.Is(err, compaction.ErrInvalidPriority) || isCompactionInput(err) {
		out.Code = messages.CodeInvalidArgument
	}
	return out
}

func isCompactionInput(err error) bool {
	for _, e := range []error{compaction.ErrEmptyID, compaction.ErrDuplicateID, compaction.ErrNegativeTokens,
		compaction.ErrNegativeBudget, compaction.ErrInvalidLevel, compaction.ErrInvalidOption, compaction.ErrInvalidStrategy,
		compaction.ErrTargetTooSmall, compaction.ErrCustomOutput} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
