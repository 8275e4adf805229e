package frames_test

import (
	"errors"
	"math"
	mbig "math/big"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/frames"
)

func sample(counter string, pack, provider int64) *frames.CalibrationSample {
	return &frames.CalibrationSample{Counter: counter, PackTokens: pack, ProviderTokens: provider}
}

func (w *world) calibrate(frame string, c *frames.CalibrationSample) {
	w.t.Helper()
	w.must(&frames.RecordUsage{Header: w.hdr(), FrameID: frame, Cost: budget.Cost{InputTokens: c.ProviderTokens, Turns: 1}, Calibration: c})
}

// oracle is floor(budget × p × (1000 − margin) / (q × 1000)), capped at
// 2 × budget and MaxInt64, in big integers.
func oracle(budget, p, q, margin int64) int64 {
	n := new(mbig.Int).Mul(mbig.NewInt(budget), mbig.NewInt(p))
	n.Mul(n, mbig.NewInt(1000-margin))
	d := new(mbig.Int).Mul(mbig.NewInt(q), mbig.NewInt(1000))
	n.Quo(n, d)
	limit := new(mbig.Int).Mul(mbig.NewInt(budget), mbig.NewInt(2))
	if n.Cmp(limit) > 0 {
		n = limit
	}
	if !n.IsInt64() {
		return math.MaxInt64
	}
	return n.Int64()
}

// The scope keeps the last CalibrationSamples samples, oldest first, in the
// order they were recorded; replay rebuilds them; a window the
// configuration later changes does not change what replay keeps.
func TestCalibrationWindow(t *testing.T) {
	w := newWorld(t)
	w.cfg.CalibrationSamples = 3
	w.push("f", "", 1<<30)
	for i := int64(1); i <= 5; i++ {
		w.calibrate("f", sample("estimate", 100*i, 120*i))
	}
	require.Equal(t, []frames.CalibrationSample{*sample("estimate", 300, 360), *sample("estimate", 400, 480), *sample("estimate", 500, 600)},
		w.s.Calibration)
	w.cfg.CalibrationSamples = 1
	r := w.replay()
	require.True(t, reflect.DeepEqual(w.s.Clone(), r.Clone()), "replay differs")
	require.Len(t, r.Calibration, 3)
	// A clone shares nothing: a sample recorded after does not reach it.
	c := w.s.Clone()
	w.calibrate("f", sample("estimate", 7, 7))
	require.Len(t, w.s.Calibration, 1)
	require.Equal(t, int64(500), c.Calibration[2].PackTokens)
	require.Len(t, c.Calibration, 3)
	// The usage itself counted as usage.
	require.Equal(t, int64(120+240+360+480+600+7), w.s.Frame("f").Cost.InputTokens)
}

// Calibrate selects the samples of the counter asked for, takes the worst
// (smallest pack ÷ provider) of them, the margin off, and caps growth at 2×.
func TestCalibrate(t *testing.T) {
	for _, tc := range []struct {
		name          string
		samples       []*frames.CalibrationSample
		counter       string
		margin        int
		budget        int64
		want          int64
		calibrated    int // samples used; 0: uncalibrated
		ratioPermille int64
	}{
		{"no samples", nil, "est", 30, 10_000, 10_000, 0, 0},
		{"no counter name", []*frames.CalibrationSample{sample("est", 100, 150)}, "", 30, 10_000, 10_000, 0, 0},
		{"another counter's samples only", []*frames.CalibrationSample{sample("o200k_base", 100, 150)}, "est", 30, 10_000, 10_000, 0, 0},
		// 10000 × 100/150 × 0.97 = 6466.67
		{"under-count", []*frames.CalibrationSample{sample("est", 100, 150)}, "est", 30, 10_000, 6466, 1, 1500},
		{"no margin", []*frames.CalibrationSample{sample("est", 100, 150)}, "est", 0, 10_000, 6666, 1, 1500},
		// The worst of the counter's samples; the other counter's 1/10 is ignored.
		{"worst of its counter", []*frames.CalibrationSample{sample("est", 100, 110), sample("other", 10, 100), sample("est", 100, 150), sample("est", 100, 90)},
			"est", 30, 10_000, 6466, 3, 1500},
		// Over-counting grows the pack: 10000 × 120/100 × 0.97 = 11640.
		{"over-count grows", []*frames.CalibrationSample{sample("est", 120, 100)}, "est", 30, 10_000, 11640, 1, 834},
		// 10000 × 10 × 0.97 = 97000, capped at 20000.
		{"growth capped at 2x", []*frames.CalibrationSample{sample("est", 1000, 100)}, "est", 30, 10_000, 20_000, 1, 100},
		{"agreeing counts leave the margin", []*frames.CalibrationSample{sample("est", 4242, 4242)}, "est", 30, 10_000, 9700, 1, 1000},
		{"largest budget", []*frames.CalibrationSample{sample("est", 1000, 100)}, "est", 30, math.MaxInt64, math.MaxInt64, 1, 100},
		// budget × pack ÷ provider past 2^64, brought back under by a
		// margin of 99.9% (found by TestCalibrateExactAndOverflowFree).
		{"intermediate past 64 bits", []*frames.CalibrationSample{sample("est", 1048576, 104866)}, "est", 999, 3361561197471316584, 33612919289375805, 1, 101},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := frames.DefaultConfig()
			cfg.CalibrationMargin = tc.margin
			s := frames.NewState("s", 0)
			for _, c := range tc.samples {
				s.Calibration = append(s.Calibration, *c)
			}
			got, cal := frames.Calibrate(cfg, s, tc.counter, tc.budget)
			require.Equal(t, tc.want, got)
			if tc.calibrated == 0 {
				require.Nil(t, cal)
				return
			}
			require.NotNil(t, cal)
			require.Equal(t, tc.counter, cal.Counter)
			require.Equal(t, tc.calibrated, cal.Samples)
			require.Equal(t, got, cal.EffectiveBudget)
			require.Equal(t, tc.ratioPermille, cal.MaxRatioPermille)
			// A pack of the effective budget is expected within the budget
			// (the margin), unless the 2× cap bound it.
			if got < 2*tc.budget && tc.budget < math.MaxInt64/2 {
				require.LessOrEqual(t, cal.EstimatedProviderTokens, tc.budget)
			}
		})
	}
}

// The effective budget is exact integer arithmetic over the whole range:
// it equals a big-integer computation, never overflows, never exceeds 2×
// the budget.
func TestCalibrateExactAndOverflowFree(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		budget := rapid.OneOf(rapid.Int64Range(frames.MinPackBudget, 1<<20), rapid.Int64Range(1<<20, math.MaxInt64)).Draw(rt, "budget")
		p := rapid.OneOf(rapid.Int64Range(1, 1<<20), rapid.Int64Range(1, math.MaxInt64)).Draw(rt, "pack")
		// q within [p/10, 10p] as validation guarantees, clamped to int64.
		lo, hi := max(p/10, 1), p
		if p <= math.MaxInt64/10 {
			hi = p * 10
		} else {
			hi = math.MaxInt64
		}
		q := rapid.Int64Range(lo, hi).Draw(rt, "provider")
		margin := rapid.IntRange(0, 999).Draw(rt, "margin")
		cfg := frames.DefaultConfig()
		cfg.CalibrationMargin = margin
		s := frames.NewState("s", 0)
		s.Calibration = []frames.CalibrationSample{{Counter: "c", PackTokens: p, ProviderTokens: q}}
		got, cal := frames.Calibrate(cfg, s, "c", budget)
		require.Equal(t, oracle(budget, p, q, int64(margin)), got, "budget %d pack %d provider %d margin %d", budget, p, q, margin)
		require.GreaterOrEqual(t, got, int64(0))
		require.NotNil(t, cal)
	})
}

// A bad sample refuses the whole usage with a clear error naming the
// numbers, and nothing is written.
func TestBadCalibrationRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		c      *frames.CalibrationSample
		target error
		msg    string
	}{
		{"zero pack", sample("est", 0, 100), frames.ErrInvalidArgument, "pack 0 tokens, provider 100"},
		{"negative provider", sample("est", 100, -1), frames.ErrInvalidArgument, "provider -1"},
		{"provider over 10x", sample("est", 100, 1001), frames.ErrInvalidArgument, "provider reported 1001 input tokens for a pack of 100 tokens"},
		{"provider under 1/10", sample("est", 1001, 100), frames.ErrInvalidArgument, "provider reported 100 input tokens for a pack of 1001 tokens"},
		{"huge ratio without overflow", sample("est", 1, math.MaxInt64), frames.ErrInvalidArgument, "for a pack of 1 tokens"},
		{"huge pack", sample("est", math.MaxInt64, math.MaxInt64/10-1), frames.ErrInvalidArgument, "ratio out of range"},
		{"just over 10x at the top", sample("est", math.MaxInt64/10, math.MaxInt64), frames.ErrInvalidArgument, "ratio out of range"},
		{"empty counter", sample("", 100, 100), frames.ErrInvalidID, "calibration counter"},
		{"counter with a space", sample("my counter", 100, 100), frames.ErrInvalidID, "calibration counter"},
		{"counter too long", sample(strings.Repeat("c", 65), 100, 100), frames.ErrInvalidID, "calibration counter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.push("f", "", 1<<30)
			w.calibrate("f", sample("est", 100, 120))
			before := w.s.Clone()
			_, err := w.do(&frames.RecordUsage{Header: w.hdr(), FrameID: "f", Cost: budget.Cost{InputTokens: 5, Turns: 1}, Calibration: tc.c})
			require.ErrorIs(t, err, tc.target)
			require.ErrorContains(t, err, tc.msg)
			require.True(t, reflect.DeepEqual(before, w.s.Clone()), "a refused usage changed the state")
		})
	}
	// At the edges of the range the sample is taken, without overflow.
	w := newWorld(t)
	w.push("f", "", 1<<30)
	for _, c := range []*frames.CalibrationSample{sample("est", 100, 1000), sample("est", 1000, 100),
		sample("est", math.MaxInt64, math.MaxInt64/10+1), sample("est", math.MaxInt64/10+1, math.MaxInt64)} {
		w.must(&frames.RecordUsage{Header: w.hdr(), FrameID: "f", Cost: budget.Cost{Turns: 1}, Calibration: c})
	}
	require.Len(t, w.s.Calibration, 4)
	// A usage may carry nothing but a calibration sample.
	w.must(&frames.RecordUsage{Header: w.hdr(), FrameID: "f", Calibration: sample("est", 100, 100)})
	_, err := w.do(&frames.RecordUsage{Header: w.hdr(), FrameID: "f"})
	require.ErrorIs(t, err, frames.ErrInvalidArgument)
}

func TestCalibrationConfig(t *testing.T) {
	for _, tc := range []struct {
		samples, margin int
		ok              bool
	}{{16, 30, true}, {0, 0, true}, {1024, 999, true}, {-1, 30, false}, {1025, 30, false}, {16, -1, false}, {16, 1000, false}} {
		cfg := frames.DefaultConfig()
		cfg.CalibrationSamples, cfg.CalibrationMargin = tc.samples, tc.margin
		if err := cfg.Validate(); tc.ok {
			require.NoError(t, err, "%+v", tc)
		} else {
			require.ErrorIs(t, err, frames.ErrInvalidArgument, "%+v", tc)
		}
	}
	d := frames.DefaultConfig()
	require.Equal(t, frames.DefaultCalibrationSamples, d.CalibrationSamples)
	require.Equal(t, frames.DefaultCalibrationMargin, d.CalibrationMargin)
}

// Apply refuses a usage event whose calibration could not have been decided.
func TestApplyRejectsBadCalibration(t *testing.T) {
	for name, ev := range map[string]*frames.UsageRecorded{
		"no window":          {Calibration: sample("est", 100, 100)},
		"window over max":    {Calibration: sample("est", 100, 100), CalibrationKeep: frames.MaxCalibrationSamples + 1},
		"window of nothing":  {CalibrationKeep: 16},
		"ratio out of range": {Calibration: sample("est", 100, 10_000), CalibrationKeep: 16},
		"no counter":         {Calibration: sample("", 100, 100), CalibrationKeep: 16},
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			w.push("f", "", 1<<30)
			ev.Meta = frames.Meta{Scope: w.s.Scope, Frame: "f", At: w.now + 1}
			ev.Cost = budget.Cost{Turns: 1}
			before := w.s.Clone()
			require.ErrorIs(t, frames.Apply(w.s, ev), frames.ErrInconsistentEvent)
			require.True(t, reflect.DeepEqual(before, w.s.Clone()))
		})
	}
}

// AssemblePack fits to the effective budget of the query's counter, says so,
// and keeps Used ≤ EffectiveBudget exact; without samples of that counter
// the pack is what it was.
func TestAssemblePackCalibrated(t *testing.T) {
	w := newWorld(t)
	w.push("f", "", 1<<30)
	for i := 0; i < 40; i++ {
		content := strings.Repeat("word ", 100+i)
		w.must(&frames.AddContextHandle{Header: w.hdr(), FrameID: "f", Handle: frames.ContextHandle{ID: "h" + string(rune('A'+i)), Kind: "text",
			Priority: compaction.Medium, Content: content, Tokens: int64(len(content)+3) / 4, LightTokens: int64(len(content)+3) / 4}})
	}
	q := frames.PackQuery{Budget: 4000, CounterName: "est"}
	plain, err := frames.AssemblePack(w.cfg, w.s, q, nil)
	require.NoError(t, err)
	require.Nil(t, plain.Calibration)
	require.Equal(t, int64(4000), plain.EffectiveBudget)
	require.Greater(t, plain.Used, int64(3500), "the plain pack fills its budget")

	// The provider counted 3/2 of what the counter did.
	w.calibrate("f", sample("est", 1000, 1500))
	w.calibrate("f", sample("other", 1000, 9000))
	p, err := frames.AssemblePack(w.cfg, w.s, q, nil)
	require.NoError(t, err)
	want := int64(4000 * 1000 * 970 / (1500 * 1000)) // 2586
	require.Equal(t, int64(4000), p.Budget)
	require.Equal(t, want, p.EffectiveBudget)
	require.LessOrEqual(t, p.Used, want)
	require.Greater(t, p.Used, want-300, "the calibrated pack fills its effective budget")
	require.Equal(t, &frames.PackCalibration{Counter: "est", Samples: 1, EffectiveBudget: want, MaxRatioPermille: 1500,
		EstimatedProviderTokens: (p.Used*1500 + 999) / 1000}, p.Calibration)
	require.LessOrEqual(t, p.Calibration.EstimatedProviderTokens, q.Budget)

	// Another counter's pack is not calibrated by these samples.
	q2 := q
	q2.CounterName = "unknown"
	o, err := frames.AssemblePack(w.cfg, w.s, q2, nil)
	require.NoError(t, err)
	require.Nil(t, o.Calibration)
	require.Equal(t, plain.Used, o.Used)

	// Critical content over the effective budget: Needed is a budget to
	// ask for, and asking for it succeeds.
	w.must(&frames.AddContextHandle{Header: w.hdr(), FrameID: "f", Handle: frames.ContextHandle{ID: "crit", Kind: "text",
		Priority: compaction.Critical, Content: strings.Repeat("abcd", 3000), Tokens: 3000, LightTokens: 3000}})
	_, err = frames.AssemblePack(w.cfg, w.s, q, nil)
	var coe *compaction.CriticalOverflowError
	require.True(t, errors.As(err, &coe), "%v", err)
	require.Equal(t, q.Budget, coe.Budget)
	require.Greater(t, coe.Needed, int64(3000*1500/1000), "Needed is in the budget's terms, calibration included")
	q.Budget = coe.Needed
	p, err = frames.AssemblePack(w.cfg, w.s, q, nil)
	require.NoError(t, err)
	require.LessOrEqual(t, p.Used, p.EffectiveBudget)
	require.Equal(t, plain.BriefTokens+plain.CrumbTokens, p.BriefTokens+p.CrumbTokens, "at Needed nothing is cut")
	// Needed is the smallest budget whose effective budget holds the
	// Critical content and the whole brief.
	whole := int64(3000) + plain.BriefTokens + plain.CrumbTokens
	e, _ := frames.Calibrate(w.cfg, w.s, "est", coe.Needed)
	require.GreaterOrEqual(t, e, whole)
	e, _ = frames.Calibrate(w.cfg, w.s, "est", coe.Needed-1)
	require.Less(t, e, whole)
}

// Calibration samples survive replay, and a state without any reads as
// uncalibrated.
func TestCalibrationReplay(t *testing.T) {
	w := newWorld(t)
	w.push("f", "", 1<<30)
	w.calibrate("f", sample("est", 1000, 1300))
	r := w.replay()
	e1, c1 := frames.Calibrate(w.cfg, w.s, "est", 10_000)
	e2, c2 := frames.Calibrate(w.cfg, r, "est", 10_000)
	require.Equal(t, e1, e2)
	require.Equal(t, c1, c2)
	require.Less(t, e1, int64(10_000))
}

// For any samples, budget and frame, a calibrated pack keeps Used ≤
// EffectiveBudget ≤ 2 × Budget, its effective budget is Calibrate's, and a
// refusal's Needed succeeds.
func TestPropertyCalibratedPack(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		w := newWorld(t)
		w.cfg.CalibrationMargin = rapid.IntRange(0, 999).Draw(rt, "margin")
		w.push("f", "", 1<<30)
		for i, n := 0, rapid.IntRange(0, 5).Draw(rt, "samples"); i < n; i++ {
			p := rapid.Int64Range(1, 100_000).Draw(rt, "pack")
			q := rapid.Int64Range((p+9)/10, p*10).Draw(rt, "provider")
			w.calibrate("f", sample(rapid.SampledFrom([]string{"c", "d"}).Draw(rt, "counter"), p, q))
		}
		for i, n := 0, rapid.IntRange(0, 10).Draw(rt, "handles"); i < n; i++ {
			content := strings.Repeat("abcd ", rapid.IntRange(1, 400).Draw(rt, "size"))
			prio := compaction.Priority(rapid.IntRange(1, 5).Draw(rt, "prio"))
			tok := int64(len(content)+3) / 4
			w.must(&frames.AddContextHandle{Header: w.hdr(), FrameID: "f", Handle: frames.ContextHandle{ID: "h" + string(rune('a'+i)), Kind: "text",
				Priority: prio, Content: content, Tokens: tok, LightTokens: tok}})
		}
		q := frames.PackQuery{Budget: rapid.Int64Range(frames.MinPackBudget, 5000).Draw(rt, "budget"), CounterName: "c"}
		p, err := frames.AssemblePack(w.cfg, w.s, q, nil)
		if err != nil {
			var coe *compaction.CriticalOverflowError
			require.True(t, errors.As(err, &coe), "%v", err)
			q.Budget = coe.Needed
			p, err = frames.AssemblePack(w.cfg, w.s, q, nil)
			require.NoError(t, err, "Needed %d does not succeed", coe.Needed)
		}
		eff, cal := frames.Calibrate(w.cfg, w.s, "c", q.Budget)
		require.Equal(t, eff, p.EffectiveBudget)
		require.Equal(t, cal == nil, p.Calibration == nil)
		require.LessOrEqual(t, p.Used, p.EffectiveBudget)
		require.LessOrEqual(t, p.EffectiveBudget, 2*q.Budget)
		if p.Calibration != nil {
			require.Equal(t, eff, p.Calibration.EffectiveBudget)
			// Used × ratio, rounded up: between Used × (permille − 1) and
			// Used × permille, over 1000.
			est, r := p.Calibration.EstimatedProviderTokens, p.Calibration.MaxRatioPermille
			require.GreaterOrEqual(t, est*1000, p.Used*(r-1))
			require.LessOrEqual(t, est, (p.Used*r+999)/1000)
		}
	})
}
