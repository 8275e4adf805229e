package budget_test

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/budget"
)

// The addendum's "Budget Propagation Example", step by step.
func TestBudgetPropagationExample(t *testing.T) {
	root := budget.TokenBudget{Total: 8000}
	require.NoError(t, root.Reserve(500)) // brief_context
	require.NoError(t, root.Reserve(200)) // breadcrumbs
	require.NoError(t, root.AllocateForSubcall(3000))
	require.NoError(t, root.RecordUsage(2000)) // conversation
	assert.Equal(t, int64(2300), root.Available(), "available for evidence")

	child := budget.TokenBudget{Total: 3000}
	require.NoError(t, child.RecordUsage(2500))
	assert.Equal(t, int64(500), child.Available())

	require.NoError(t, root.ReturnFromChild(3000, child.Used))
	assert.Equal(t, int64(0), root.SubcallAllocation)
	assert.Equal(t, int64(4500), root.Used)
	assert.Equal(t, int64(2800), root.Available(), "the child's 500 unused tokens came back")
	require.NoError(t, root.Validate())
}

func TestInsufficientTokens(t *testing.T) {
	b := budget.TokenBudget{Total: 100, Used: 30}
	for name, op := range map[string]func(*budget.TokenBudget, int64) error{
		"reserve":  (*budget.TokenBudget).Reserve,
		"allocate": (*budget.TokenBudget).AllocateForSubcall,
	} {
		t.Run(name, func(t *testing.T) {
			c := b
			err := op(&c, 71)
			var ite *budget.InsufficientTokensError
			require.ErrorAs(t, err, &ite)
			assert.Equal(t, int64(71), ite.Requested)
			assert.Equal(t, int64(70), ite.Available)
			assert.ErrorIs(t, err, budget.ErrInsufficientTokens)
			assert.Equal(t, b, c, "unchanged on error")
			require.NoError(t, op(&c, 70))
			assert.Equal(t, int64(0), c.Available())
		})
	}
}

func TestBadAmountsChangeNothing(t *testing.T) {
	start := budget.TokenBudget{Total: math.MaxInt64, Used: math.MaxInt64 - 5, SubcallAllocation: 3}
	cases := []struct {
		name string
		op   func(b *budget.TokenBudget) error
		want error
	}{
		{"negative reserve", func(b *budget.TokenBudget) error { return b.Reserve(-1) }, budget.ErrNegativeAmount},
		{"negative allocate", func(b *budget.TokenBudget) error { return b.AllocateForSubcall(-1) }, budget.ErrNegativeAmount},
		{"negative release", func(b *budget.TokenBudget) error { return b.ReleaseSubcallAllocation(-1) }, budget.ErrNegativeAmount},
		{"negative usage", func(b *budget.TokenBudget) error { return b.RecordUsage(-1) }, budget.ErrNegativeAmount},
		{"usage overflow", func(b *budget.TokenBudget) error { return b.RecordUsage(10) }, budget.ErrOverflow},
		{"release too large", func(b *budget.TokenBudget) error { return b.ReleaseSubcallAllocation(4) }, budget.ErrReleaseTooLarge},
		{"return overflow", func(b *budget.TokenBudget) error { return b.ReturnFromChild(3, math.MaxInt64) }, budget.ErrOverflow},
		{"unreserve too much", func(b *budget.TokenBudget) error { return b.Unreserve(1) }, budget.ErrInsufficientTokens},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := start
			assert.ErrorIs(t, tc.op(&b), tc.want)
			assert.Equal(t, start, b)
		})
	}
}

func TestValidate(t *testing.T) {
	assert.NoError(t, budget.TokenBudget{Total: 10, Reserved: 4, SubcallAllocation: 6}.Validate())
	assert.ErrorIs(t, budget.TokenBudget{Total: 10, Reserved: 5, SubcallAllocation: 6}.Validate(), budget.ErrInvalidBudget)
	assert.ErrorIs(t, budget.TokenBudget{Total: -1}.Validate(), budget.ErrInvalidBudget)
	assert.ErrorIs(t, budget.TokenBudget{Total: 1, MaxSubframeDepth: -1}.Validate(), budget.ErrNegativeAmount)
	assert.ErrorIs(t, budget.TokenBudget{Total: 1, Reserved: math.MaxInt64, SubcallAllocation: math.MaxInt64}.Validate(), budget.ErrOverflow)
}

func TestAvailableNeverNegative(t *testing.T) {
	b := budget.TokenBudget{Total: 10}
	require.NoError(t, b.RecordUsage(50))
	assert.Equal(t, int64(0), b.Available())
	b = budget.TokenBudget{Total: math.MaxInt64, Used: math.MaxInt64, Reserved: math.MaxInt64}
	assert.Equal(t, int64(0), b.Available())
}

func TestCheckedArithmetic(t *testing.T) {
	_, err := budget.Add(math.MaxInt64, 1)
	assert.ErrorIs(t, err, budget.ErrOverflow)
	_, err = budget.Add(math.MinInt64, -1)
	assert.ErrorIs(t, err, budget.ErrOverflow)
	_, err = budget.Sub(math.MinInt64, 1)
	assert.ErrorIs(t, err, budget.ErrOverflow)
	_, err = budget.Sub(0, math.MinInt64)
	assert.ErrorIs(t, err, budget.ErrOverflow)
	v, err := budget.Sub(5, 7)
	require.NoError(t, err)
	assert.Equal(t, int64(-2), v)
}

func TestLimitsCheck(t *testing.T) {
	l := budget.Limits{Tokens: 100, Turns: 10, SpendMicros: 1_000_000, Spawns: 5, DurationMillis: 60_000}
	cases := []struct {
		cost budget.Cost
		want *budget.Violation
	}{
		{budget.Cost{InputTokens: 60, OutputTokens: 40, Turns: 10, SpendMicros: 1_000_000, Spawns: 5, DurationMillis: 60_000}, nil},
		{budget.Cost{InputTokens: 60, OutputTokens: 41}, &budget.Violation{Code: budget.TokensExceeded, Current: 101, Max: 100}},
		{budget.Cost{Turns: 11}, &budget.Violation{Code: budget.TurnsExceeded, Current: 11, Max: 10}},
		{budget.Cost{SpendMicros: 1_050_000}, &budget.Violation{Code: budget.SpendExceeded, Current: 1_050_000, Max: 1_000_000}},
		{budget.Cost{Spawns: 6}, &budget.Violation{Code: budget.SpawnsExceeded, Current: 6, Max: 5}},
		{budget.Cost{DurationMillis: 60_001}, &budget.Violation{Code: budget.DurationExceeded, Current: 60_001, Max: 60_000}},
		{budget.Cost{InputTokens: math.MaxInt64, OutputTokens: 1}, &budget.Violation{Code: budget.TokensExceeded, Current: math.MaxInt64, Max: 100}},
	}
	for _, tc := range cases {
		got := l.Check(tc.cost)
		assert.Equal(t, tc.want, got, "%+v", tc.cost)
		if got != nil {
			assert.True(t, errors.Is(got, budget.ErrLimitExceeded))
			assert.Contains(t, got.Error(), string(got.Code))
		}
	}
	assert.Nil(t, budget.Limits{}.Check(budget.Cost{Turns: math.MaxInt64}), "zero means no limit")
	assert.ErrorIs(t, budget.Limits{Turns: -1}.Validate(), budget.ErrInvalidLimits)
}

func TestCostPlus(t *testing.T) {
	c := budget.Cost{InputTokens: 1, SpendMicros: 2}
	d, err := c.Plus(budget.Cost{InputTokens: 2, Turns: 1})
	require.NoError(t, err)
	assert.Equal(t, budget.Cost{InputTokens: 3, Turns: 1, SpendMicros: 2}, d)
	_, err = budget.Cost{Spawns: math.MaxInt64}.Plus(budget.Cost{Spawns: 1})
	assert.ErrorIs(t, err, budget.ErrOverflow)
	assert.ErrorIs(t, budget.Cost{Turns: -1}.Validate(), budget.ErrNegativeAmount)
	assert.ErrorIs(t, budget.Cost{InputTokens: math.MaxInt64, OutputTokens: 1}.Validate(), budget.ErrOverflow)
}

func TestSpendConversion(t *testing.T) {
	m, err := budget.SpendFromFloat(1.05)
	require.NoError(t, err)
	assert.Equal(t, int64(1_050_000), m)
	assert.InDelta(t, 1.05, budget.SpendToFloat(m), 1e-12)
	_, err = budget.SpendFromFloat(-0.01)
	assert.ErrorIs(t, err, budget.ErrNegativeAmount)
	_, err = budget.SpendFromFloat(math.NaN())
	assert.ErrorIs(t, err, budget.ErrNegativeAmount)
	_, err = budget.SpendFromFloat(1e20)
	assert.ErrorIs(t, err, budget.ErrOverflow)
}

func TestSaturatingSettlement(t *testing.T) {
	for _, tc := range []struct {
		name    string
		a, b    int64
		want    int64
		clamped bool
	}{
		{"fits", 2, 3, 5, false},
		{"at the edge", math.MaxInt64 - 1, 1, math.MaxInt64, false},
		{"over", math.MaxInt64 - 1, 2, math.MaxInt64, true},
		{"both huge", math.MaxInt64, math.MaxInt64, math.MaxInt64, true},
		{"under", math.MinInt64, -1, math.MinInt64, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, clamped := budget.AddSaturating(tc.a, tc.b)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.clamped, clamped)
		})
	}

	c, clamped := budget.Cost{InputTokens: math.MaxInt64 - 5, Turns: 1}.PlusSaturating(budget.Cost{InputTokens: 10, Turns: 2})
	assert.True(t, clamped)
	assert.Equal(t, budget.Cost{InputTokens: math.MaxInt64, Turns: 3}, c, "each field clamps alone")
	_, clamped = budget.Cost{Turns: 1}.PlusSaturating(budget.Cost{Turns: 1})
	assert.False(t, clamped)

	b := budget.TokenBudget{Total: 100, Used: 10, SubcallAllocation: 40}
	clamped, err := b.ReturnFromChildSaturating(40, math.MaxInt64)
	require.NoError(t, err)
	assert.True(t, clamped)
	assert.Equal(t, budget.TokenBudget{Total: 100, Used: math.MaxInt64}, b)
	assert.NoError(t, b.Validate())

	b = budget.TokenBudget{Total: 100, SubcallAllocation: 40}
	_, err = b.ReturnFromChildSaturating(41, 0)
	assert.ErrorIs(t, err, budget.ErrReleaseTooLarge)
	_, err = b.ReturnFromChildSaturating(40, -1)
	assert.ErrorIs(t, err, budget.ErrNegativeAmount)
	assert.Equal(t, budget.TokenBudget{Total: 100, SubcallAllocation: 40}, b, "nothing changes on error")
}
