package budget

import (
	"fmt"
	"math"
)

// Add returns a+b, or ErrOverflow instead of wrapping around.
func Add(a, b int64) (int64, error) {
	if (b > 0 && a > math.MaxInt64-b) || (b < 0 && a < math.MinInt64-b) {
		return 0, fmt.Errorf("%w: %d + %d", ErrOverflow, a, b)
	}
	return a + b, nil
}

// Sub returns a-b, or ErrOverflow instead of wrapping around.
func Sub(a, b int64) (int64, error) {
	if (b < 0 && a > math.MaxInt64+b) || (b > 0 && a < math.MinInt64+b) {
		return 0, fmt.Errorf("%w: %d - %d", ErrOverflow, a, b)
	}
	return a - b, nil
}

// NonNegative returns ErrNegativeAmount (naming what) for n < 0.
func NonNegative(what string, n int64) error {
	if n < 0 {
		return fmt.Errorf("%w: %s is %d", ErrNegativeAmount, what, n)
	}
	return nil
}

// sum adds non-negative amounts with overflow checking.
func sum(xs ...int64) (int64, error) {
	var t int64
	for _, x := range xs {
		var err error
		if t, err = Add(t, x); err != nil {
			return 0, err
		}
	}
	return t, nil
}

// AddSaturating returns a+b for non-negative amounts, clamped at the largest
// int64 instead of failing; clamped tells whether it was. Settlements use it:
// a frame must always be able to end, even when what it hands its parent
// would overflow the parent's counters.
func AddSaturating(a, b int64) (sum int64, clamped bool) {
	if s, err := Add(a, b); err == nil {
		return s, false
	}
	if b < 0 {
		return math.MinInt64, true
	}
	return math.MaxInt64, true
}
