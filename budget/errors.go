package budget

import (
	"errors"
	"fmt"
)

// Errors returned by this package.
var (
	ErrNegativeAmount     = errors.New("budget: negative amount")
	ErrOverflow           = errors.New("budget: arithmetic overflow")
	ErrInsufficientTokens = errors.New("budget: insufficient tokens")
	ErrReleaseTooLarge    = errors.New("budget: release exceeds subcall allocation")
	ErrInvalidBudget      = errors.New("budget: invalid budget")
	ErrInvalidLimits      = errors.New("budget: invalid limits")
	ErrLimitExceeded      = errors.New("budget: limit exceeded")
)

// InsufficientTokensError reports a reservation or allocation that asked for
// more tokens than were available. It matches ErrInsufficientTokens.
type InsufficientTokensError struct {
	Requested int64
	Available int64
}

func (e *InsufficientTokensError) Error() string {
	return fmt.Sprintf("budget: insufficient tokens: requested %d, available %d", e.Requested, e.Available)
}

// Is makes errors.Is(err, ErrInsufficientTokens) true.
func (e *InsufficientTokensError) Is(target error) bool { return target == ErrInsufficientTokens }
