package budget

import "fmt"

// MicrosPerUnit is how many spend micro-units make one currency unit: spend
// is an integer so that sums are exact.
const MicrosPerUnit = 1_000_000

// Cost is what a frame has consumed (the state schema's cost block). Spend is
// in micro-units of the currency; Duration in milliseconds.
type Cost struct {
	InputTokens    int64 `msgpack:"i"`
	OutputTokens   int64 `msgpack:"o"`
	Turns          int64 `msgpack:"t"`
	SpendMicros    int64 `msgpack:"s"`
	Spawns         int64 `msgpack:"p"`
	DurationMillis int64 `msgpack:"d"`
}

func (c Cost) fields() [6]int64 {
	return [6]int64{c.InputTokens, c.OutputTokens, c.Turns, c.SpendMicros, c.Spawns, c.DurationMillis}
}

var costNames = [6]string{"input tokens", "output tokens", "turns", "spend", "spawns", "duration"}

// Validate rejects negative amounts.
func (c Cost) Validate() error {
	for i, v := range c.fields() {
		if err := NonNegative(costNames[i], v); err != nil {
			return err
		}
	}
	_, err := c.Tokens()
	return err
}

// Tokens is input plus output tokens.
func (c Cost) Tokens() (int64, error) { return Add(c.InputTokens, c.OutputTokens) }

// Plus returns c+d field by field, or ErrOverflow (c is unchanged either way).
func (c Cost) Plus(d Cost) (Cost, error) {
	a, b := c.fields(), d.fields()
	var r [6]int64
	for i := range a {
		v, err := Add(a[i], b[i])
		if err != nil {
			return c, fmt.Errorf("%s: %w", costNames[i], err)
		}
		r[i] = v
	}
	return Cost{r[0], r[1], r[2], r[3], r[4], r[5]}, nil
}

// PlusSaturating returns c+d field by field, each clamped at the largest
// int64 instead of failing; clamped tells whether any field was.
func (c Cost) PlusSaturating(d Cost) (sum Cost, clamped bool) {
	a, b := c.fields(), d.fields()
	var r [6]int64
	for i := range a {
		v, cl := AddSaturating(a[i], b[i])
		r[i], clamped = v, clamped || cl
	}
	return Cost{r[0], r[1], r[2], r[3], r[4], r[5]}, clamped
}

// IsZero reports whether nothing was consumed.
func (c Cost) IsZero() bool { return c == Cost{} }

// Limits are a frame's run caps (the state schema's limits block). Zero means
// "no limit" for that dimension; negative values are invalid.
type Limits struct {
	Tokens         int64 `msgpack:"k"` // input + output tokens
	Turns          int64 `msgpack:"t"`
	SpendMicros    int64 `msgpack:"s"`
	Spawns         int64 `msgpack:"p"`
	DurationMillis int64 `msgpack:"d"`
}

// Validate rejects negative limits.
func (l Limits) Validate() error {
	for _, f := range []struct {
		n string
		v int64
	}{{"tokens", l.Tokens}, {"turns", l.Turns}, {"spend", l.SpendMicros}, {"spawns", l.Spawns}, {"duration", l.DurationMillis}} {
		if f.v < 0 {
			return fmt.Errorf("%w: %s limit is %d", ErrInvalidLimits, f.n, f.v)
		}
	}
	return nil
}

// LimitCode names the limit a frame crossed (the state schema's limit_code).
type LimitCode string

// Limit codes.
const (
	TokensExceeded   LimitCode = "tokens_exceeded"
	TurnsExceeded    LimitCode = "turns_exceeded"
	SpendExceeded    LimitCode = "spend_exceeded"
	SpawnsExceeded   LimitCode = "spawns_exceeded"
	DurationExceeded LimitCode = "duration_exceeded"
)

// Violation says which limit is crossed, with the current value and the max
// (the state schema's suspend_metadata). Spend is in micro-units.
type Violation struct {
	Code    LimitCode `msgpack:"c"`
	Current int64     `msgpack:"v"`
	Max     int64     `msgpack:"m"`
}

func (v *Violation) Error() string {
	return fmt.Sprintf("budget: limit exceeded: %s (current %d, max %d)", v.Code, v.Current, v.Max)
}

// Is makes errors.Is(v, ErrLimitExceeded) true.
func (v *Violation) Is(target error) bool { return target == ErrLimitExceeded }

// Check reports the first limit that c is over (current > max), in the order
// tokens, turns, spend, spawns, duration, or nil when all hold.
func (l Limits) Check(c Cost) *Violation {
	tokens, err := c.Tokens()
	if err != nil {
		// Token counts past int64 are over any limit.
		if l.Tokens > 0 {
			return &Violation{Code: TokensExceeded, Current: maxInt64, Max: l.Tokens}
		}
	}
	for _, d := range []struct {
		code     LimitCode
		cur, max int64
	}{
		{TokensExceeded, tokens, l.Tokens},
		{TurnsExceeded, c.Turns, l.Turns},
		{SpendExceeded, c.SpendMicros, l.SpendMicros},
		{SpawnsExceeded, c.Spawns, l.Spawns},
		{DurationExceeded, c.DurationMillis, l.DurationMillis},
	} {
		if d.max > 0 && d.cur > d.max {
			return &Violation{Code: d.code, Current: d.cur, Max: d.max}
		}
	}
	return nil
}

const maxInt64 = 1<<63 - 1

// SpendFromFloat converts currency units (dollars) to micro-units, rounding
// to the nearest micro-unit; it rejects negative, NaN and out-of-range values.
func SpendFromFloat(units float64) (int64, error) {
	if units != units || units < 0 {
		return 0, fmt.Errorf("%w: spend %v", ErrNegativeAmount, units)
	}
	m := units*MicrosPerUnit + 0.5
	if m >= 9.2e18 {
		return 0, fmt.Errorf("%w: spend %v", ErrOverflow, units)
	}
	return int64(m), nil
}

// SpendToFloat converts micro-units to currency units for display.
func SpendToFloat(micros int64) float64 { return float64(micros) / MicrosPerUnit }
