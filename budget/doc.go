// Package budget holds the arithmetic of StateIndex's hierarchical budgets:
// a frame's TokenBudget (its context budget, partly delegated to children),
// its run Limits and accumulated Cost, and the check that names a crossed
// limit.
//
// It is pure: standard library only, no I/O, no clock. Every amount is an
// int64 with checked arithmetic — an overflow is ErrOverflow, never a wrap —
// and negative amounts are rejected with ErrNegativeAmount. A method that
// returns an error leaves its receiver unchanged.
//
// Propagation (addendum §1): pushing a child allocates the child's total from
// the parent's Available (AllocateForSubcall); finishing the child releases
// the allocation and charges the parent what the child used
// (ReturnFromChild).
package budget
