package compaction

import (
	"errors"
	"fmt"
)

// Errors returned by this package. Bad input is reported with one of these,
// wrapped with %w and a detail; nothing is ever partially applied.
var (
	ErrInvalidPriority = errors.New("compaction: invalid priority")

	// Input validation (Fit, Compact, ValidateItems).
	ErrEmptyID        = errors.New("compaction: item id is empty")
	ErrDuplicateID    = errors.New("compaction: duplicate item id")
	ErrNegativeTokens = errors.New("compaction: negative token count")
	ErrNegativeBudget = errors.New("compaction: negative budget")
	ErrInvalidLevel   = errors.New("compaction: invalid level")
	ErrInvalidOption  = errors.New("compaction: invalid option")
	ErrOverflow       = errors.New("compaction: token count overflows int64")

	// Fit.
	ErrCriticalExceedsBudget = errors.New("compaction: critical content exceeds the budget")

	// Summaries.
	ErrSummaryOverBudget = errors.New("compaction: summarizer exceeded its token limit")
	ErrSummarizerFailed  = errors.New("compaction: summarizer failed")
	ErrSummaryIDRequired = errors.New("compaction: a summary is needed but Options.SummaryID is empty")

	// Compact.
	ErrTargetTooSmall     = errors.New("compaction: target leaves no room for a summary")
	ErrInvalidStrategy    = errors.New("compaction: invalid strategy")
	ErrCustomOutput       = errors.New("compaction: custom strategy returned an invalid result")
	ErrCustomStrategyFail = errors.New("compaction: custom strategy failed")

	// ErrPanic reports a panic inside Fit or Compact, most likely in a
	// caller's Counter or Summarizer: it is returned, never propagated.
	ErrPanic = errors.New("compaction: panic")
)

// CriticalOverflowError reports that the Critical content alone, already
// whitespace-trimmed, needs more tokens than the budget allows: no level of
// compaction can make the pack fit. Needed is what a caller would have to
// ask for.
type CriticalOverflowError struct {
	Needed int64 // tokens of the Critical units at their most compact
	Budget int64 // the budget that was asked for
}

// Error names both numbers, so that a log line is enough to act on.
func (e *CriticalOverflowError) Error() string {
	return fmt.Sprintf("%v: needs %d tokens, budget is %d", ErrCriticalExceedsBudget, e.Needed, e.Budget)
}

// Is makes errors.Is(err, ErrCriticalExceedsBudget) true.
func (e *CriticalOverflowError) Is(target error) bool { return target == ErrCriticalExceedsBudget }
