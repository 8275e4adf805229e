package budget

import "fmt"

// TokenBudget is a frame's hierarchical context budget (addendum §1). All
// amounts are non-negative token counts; arithmetic is checked, never wraps.
//
// Available = Total − Used − Reserved − SubcallAllocation, floored at zero:
// Used may exceed what is left, because usage is recorded after it happened.
type TokenBudget struct {
	Total             int64 `msgpack:"t"`
	Used              int64 `msgpack:"u"`
	Reserved          int64 `msgpack:"r"`
	SubcallAllocation int64 `msgpack:"s"`
	// MaxSubframeDepth is the deepest depth a descendant of this frame may
	// have (a root is depth 0). A frame at this depth cannot push children.
	MaxSubframeDepth int64 `msgpack:"d"`
}

// Validate checks that every field is non-negative and that the reserved and
// allocated parts fit in Total.
func (b TokenBudget) Validate() error {
	for _, f := range []struct {
		name string
		v    int64
	}{{"total", b.Total}, {"used", b.Used}, {"reserved", b.Reserved}, {"subcall allocation", b.SubcallAllocation}, {"max subframe depth", b.MaxSubframeDepth}} {
		if err := NonNegative(f.name, f.v); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidBudget, err)
		}
	}
	committed, err := sum(b.Reserved, b.SubcallAllocation)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidBudget, err)
	}
	if committed > b.Total {
		return fmt.Errorf("%w: reserved %d + allocated %d exceed total %d", ErrInvalidBudget, b.Reserved, b.SubcallAllocation, b.Total)
	}
	return nil
}

// Available is what the frame can still spend, reserve or delegate.
func (b TokenBudget) Available() int64 {
	a := b.Total
	for _, x := range []int64{b.Used, b.Reserved, b.SubcallAllocation} {
		if x >= a {
			return 0
		}
		a -= x
	}
	return a
}

func (b TokenBudget) take(amount int64) error {
	if err := NonNegative("amount", amount); err != nil {
		return err
	}
	if avail := b.Available(); amount > avail {
		return &InsufficientTokensError{Requested: amount, Available: avail}
	}
	return nil
}

// Reserve sets amount aside for a purpose of the frame's own (brief context,
// breadcrumbs). It fails with *InsufficientTokensError if not available.
func (b *TokenBudget) Reserve(amount int64) error {
	if err := b.take(amount); err != nil {
		return err
	}
	b.Reserved += amount // cannot overflow: amount <= Available <= Total
	return nil
}

// Unreserve gives back reserved tokens.
func (b *TokenBudget) Unreserve(amount int64) error {
	if err := NonNegative("amount", amount); err != nil {
		return err
	}
	if amount > b.Reserved {
		return fmt.Errorf("%w: unreserve %d of %d reserved", ErrInsufficientTokens, amount, b.Reserved)
	}
	b.Reserved -= amount
	return nil
}

// AllocateForSubcall delegates amount to a child frame.
func (b *TokenBudget) AllocateForSubcall(amount int64) error {
	if err := b.take(amount); err != nil {
		return err
	}
	b.SubcallAllocation += amount
	return nil
}

// ReleaseSubcallAllocation returns a child's allocation. Releasing more than
// is allocated is an error (the addendum saturates; here it would hide a bug).
func (b *TokenBudget) ReleaseSubcallAllocation(amount int64) error {
	if err := NonNegative("amount", amount); err != nil {
		return err
	}
	if amount > b.SubcallAllocation {
		return fmt.Errorf("%w: release %d of %d allocated", ErrReleaseTooLarge, amount, b.SubcallAllocation)
	}
	b.SubcallAllocation -= amount
	return nil
}

// RecordUsage adds tokens the frame consumed.
func (b *TokenBudget) RecordUsage(amount int64) error {
	if err := NonNegative("amount", amount); err != nil {
		return err
	}
	u, err := Add(b.Used, amount)
	if err != nil {
		return err
	}
	b.Used = u
	return nil
}

// ReturnFromChild settles a finished child with the parent: the child's
// allocation is released and what the child used is charged to the parent
// ("child uses 2500 of 3000, returns 500"). Nothing changes on error.
func (b *TokenBudget) ReturnFromChild(allocation, childUsed int64) error {
	next := *b
	if err := next.ReleaseSubcallAllocation(allocation); err != nil {
		return err
	}
	if err := next.RecordUsage(childUsed); err != nil {
		return err
	}
	*b = next
	return nil
}

// ReturnFromChildSaturating is ReturnFromChild with the charge clamped at the
// largest int64 instead of failing on overflow; clamped tells whether it
// was. Releasing more than is allocated is still an error.
func (b *TokenBudget) ReturnFromChildSaturating(allocation, childUsed int64) (clamped bool, err error) {
	next := *b
	if err := next.ReleaseSubcallAllocation(allocation); err != nil {
		return false, err
	}
	if err := NonNegative("amount", childUsed); err != nil {
		return false, err
	}
	next.Used, clamped = AddSaturating(next.Used, childUsed)
	*b = next
	return clamped, nil
}
