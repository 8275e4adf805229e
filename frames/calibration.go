package frames

import (
	"math"
	"math/big"
	"math/bits"
)

// Calibration (DESIGN §10): RecordUsage may carry, for the pack the agent
// sent, the pack's own count and the input tokens the provider reported.
// The scope keeps the last CalibrationSamples of these integer pairs (no
// floats: replay is exact), and AssemblePack fits later packs built under
// the same counter to
//
//	effective = floor(budget × min_i(pack_i / provider_i) × (1000 − margin) / 1000)
//
// capped at 2 × budget, so that the provider's count of the pack stays
// within the budget even when the counter is only an estimate.
const (
	// DefaultCalibrationSamples is how many samples a scope keeps unless
	// Config.CalibrationSamples says otherwise; MaxCalibrationSamples
	// bounds it.
	DefaultCalibrationSamples = 16
	MaxCalibrationSamples     = 1024
	// DefaultCalibrationMargin is the margin, in permille, taken off a
	// calibrated budget (3%).
	DefaultCalibrationMargin = 30
	// MaxCalibrationRatio bounds a sample: provider ÷ pack must lie within
	// [1/MaxCalibrationRatio, MaxCalibrationRatio]; anything further off is
	// a wrong report (a whole conversation's total, another pack's count),
	// not a counter's error.
	MaxCalibrationRatio = 10
	// calibrationGrowth caps an effective budget at this multiple of the
	// budget asked for (a counter that over-counts may grow a pack, never
	// past it).
	calibrationGrowth = 2
)

// CalibrationSample is one observation: a pack counted PackTokens under
// Counter, and the provider reported ProviderTokens input tokens for it.
type CalibrationSample struct {
	Counter        string `msgpack:"c"`
	PackTokens     int64  `msgpack:"p"`
	ProviderTokens int64  `msgpack:"q"`
}

// PackCalibration says how a pack was calibrated.
type PackCalibration struct {
	Counter string
	// Samples is how many of the scope's samples were of Counter.
	Samples int
	// EffectiveBudget is what the pack was fitted to under Counter.
	EffectiveBudget int64
	// MaxRatioPermille is the largest provider ÷ pack ratio among the
	// samples, ×1000, rounded up.
	MaxRatioPermille int64
	// EstimatedProviderTokens is the pack's Used scaled by that ratio,
	// rounded up: what the provider is expected to count.
	EstimatedProviderTokens int64
}

// maxCounterBytes bounds a sample's counter name on replay (Decide bounds
// it by Config.MaxIDBytes, which a later configuration may lower).
const maxCounterBytes = 4 << 10

// calibrationSamples is the window the configuration asks for (0: the
// default).
func (c Config) calibrationSamples() int64 {
	if c.CalibrationSamples <= 0 {
		return DefaultCalibrationSamples
	}
	return int64(c.CalibrationSamples)
}

func (c Config) validateCalibration() error {
	if c.CalibrationSamples < 0 || c.CalibrationSamples > MaxCalibrationSamples {
		return invalid("calibration_samples %d not in 0..%d", c.CalibrationSamples, MaxCalibrationSamples)
	}
	if c.CalibrationMargin < 0 || c.CalibrationMargin >= 1000 {
		return invalid("calibration_margin %d permille not in 0..999", c.CalibrationMargin)
	}
	return nil
}

// checkCalibration checks a sample: both counts positive, a printable
// counter name, and a ratio within MaxCalibrationRatio either way.
func checkCalibration(c *CalibrationSample, maxID int) error {
	if c.PackTokens <= 0 || c.ProviderTokens <= 0 {
		return invalid("calibration needs positive counts: pack %d tokens, provider %d input tokens", c.PackTokens, c.ProviderTokens)
	}
	if err := ValidateID("calibration counter", c.Counter, maxID); err != nil {
		return err
	}
	// provider > pack × 10 or pack > provider × 10, in 128 bits.
	if mul(c.ProviderTokens, 1).gt(mul(c.PackTokens, MaxCalibrationRatio)) ||
		mul(c.PackTokens, 1).gt(mul(c.ProviderTokens, MaxCalibrationRatio)) {
		return invalid("calibration ratio out of range: provider reported %d input tokens for a pack of %d tokens (the ratio must lie within 1/%d..%d)",
			c.ProviderTokens, c.PackTokens, MaxCalibrationRatio, MaxCalibrationRatio)
	}
	return nil
}

// addCalibration appends a sample, keeping the last keep (a new slice:
// clones and snapshot views may share the old one).
func (s *State) addCalibration(c CalibrationSample, keep int64) {
	n := int64(len(s.Calibration))
	drop := max(n+1-keep, 0)
	next := make([]CalibrationSample, 0, n+1-drop)
	next = append(next, s.Calibration[drop:]...)
	s.Calibration = append(next, c)
}

// Calibrate returns the budget a pack asked with budget fits to under the
// counter called counter, and how it was calibrated (nil, with budget
// unchanged, when the scope has no sample of that counter or counter is
// ""). It is what AssemblePack applies; EstimatedProviderTokens is
// estimated for a pack of the effective budget's size.
func Calibrate(cfg Config, s *State, counter string, budget int64) (int64, *PackCalibration) {
	eff, cal, worst := calibrate(cfg, s, counter, budget)
	if cal != nil {
		cal.EstimatedProviderTokens = worst.provider(eff)
	}
	return eff, cal
}

// provider is what the sample's provider would count for a pack of used
// tokens: ceil(used × ProviderTokens / PackTokens).
func (c CalibrationSample) provider(used int64) int64 {
	return ceilDiv(used, c.ProviderTokens, c.PackTokens)
}

// calibrate is Calibrate, with the sample of the smallest pack ÷ provider
// ratio.
func calibrate(cfg Config, s *State, counter string, budget int64) (int64, *PackCalibration, CalibrationSample) {
	if counter == "" || budget <= 0 {
		return budget, nil, CalibrationSample{}
	}
	var worst CalibrationSample // the smallest pack ÷ provider
	n := 0
	for _, c := range s.Calibration {
		if c.Counter != counter {
			continue
		}
		// c.Pack/c.Provider < worst.Pack/worst.Provider
		if n == 0 || mul(c.PackTokens, worst.ProviderTokens).lt(mul(worst.PackTokens, c.ProviderTokens)) {
			worst = c
		}
		n++
	}
	if n == 0 {
		return budget, nil, CalibrationSample{}
	}
	margin := int64(cfg.CalibrationMargin)
	if margin < 0 || margin >= 1000 {
		margin = DefaultCalibrationMargin
	}
	eff := effectiveBudget(budget, worst.PackTokens, worst.ProviderTokens, 1000-margin)
	return eff, &PackCalibration{Counter: counter, Samples: n, EffectiveBudget: eff,
		MaxRatioPermille: ceilDiv(worst.ProviderTokens, 1000, worst.PackTokens)}, worst
}

// effectiveBudget is min(floor(budget × p × k / (q × 1000)), 2 × budget)
// for positive budget, p, q and k in 1..1000, exactly, in 128-bit steps:
// budget × p = Q1 × q + R1; Q1 × k = 1000a + b; then budget×p×k / (1000q)
// = a + (b×q + R1×k) / (1000q), and that last fraction is below 2. Only
// when Q1 does not fit 64 bits is it computed in big integers.
func effectiveBudget(budget, p, q, k int64) int64 {
	limit := uint64(budget) * calibrationGrowth // < 2^64: budget < 2^63
	hi, lo := bits.Mul64(uint64(budget), uint64(p))
	if hi >= uint64(q) {
		// Q1 ≥ 2^64 (a budget near 2^63 over a ratio of several): the
		// rare way, in big integers.
		n := new(big.Int).Mul(big.NewInt(budget), big.NewInt(p))
		n.Mul(n, big.NewInt(k))
		n.Quo(n, new(big.Int).Mul(big.NewInt(q), big.NewInt(1000)))
		if !n.IsUint64() {
			return clampInt64(limit)
		}
		return clampInt64(min(n.Uint64(), limit))
	}
	q1, r1 := bits.Div64(hi, lo, uint64(q))
	hi, lo = bits.Mul64(q1, uint64(k)) // hi < k ≤ 1000
	a, b := bits.Div64(hi, lo, 1000)
	fhi, flo := bits.Mul64(b, uint64(q))
	rhi, rlo := bits.Mul64(r1, uint64(k))
	var carry uint64
	flo, carry = bits.Add64(flo, rlo, 0)
	fhi, _ = bits.Add64(fhi, rhi, carry)
	dhi, dlo := bits.Mul64(uint64(q), 1000)
	if !(u128{fhi, flo}).lt(u128{dhi, dlo}) {
		a++ // a < Q1 + 1 ≤ 2^64 − 1 here: no wrap
	}
	return clampInt64(min(a, limit))
}

// requestedFor is the smallest budget of at least MinPackBudget whose
// effective budget under counter's samples reaches need (what a
// CriticalOverflowError's Needed reports when a pack is calibrated).
func requestedFor(cfg Config, s *State, counter string, need int64) int64 {
	ok := func(b int64) bool { e, _, _ := calibrate(cfg, s, counter, b); return e >= need }
	lo, hi := int64(MinPackBudget), int64(math.MaxInt64)
	if ok(lo) {
		return lo
	}
	if !ok(hi) {
		return hi
	}
	for hi-lo > 1 { // ok(hi), !ok(lo)
		mid := lo + (hi-lo)/2
		if ok(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// ceilDiv is ceil(a × b / c) for non-negative a, b and positive c,
// saturating at MaxInt64.
func ceilDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	quo, rem := bits.Div64(hi, lo, uint64(c))
	if rem > 0 {
		quo++
	}
	return clampInt64(quo)
}

func clampInt64(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}

// u128 is an unsigned 128-bit integer, high word first.
type u128 struct{ hi, lo uint64 }

func mul(a, b int64) u128 { hi, lo := bits.Mul64(uint64(a), uint64(b)); return u128{hi, lo} }

func (x u128) lt(y u128) bool { return x.hi < y.hi || x.hi == y.hi && x.lo < y.lo }

func (x u128) gt(y u128) bool { return y.lt(x) }
