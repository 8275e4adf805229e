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
