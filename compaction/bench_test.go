package compaction

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// benchContent is the content of handle i: ~690 bytes (~170 tokens) of
// agent-like notes, a few exact facts (numbers, ids, paths) among mostly
// prose, single-spaced with a trailing space. It is the actors package's
// benchContent, so that these figures predict AssembleContextPack's.
func benchContent(i int) string {
	return fmt.Sprintf("Observation %d: the build of service-%d took %d.%d s on runner ci-%d. ", i, i%37, i%9+1, i%10, i%4) +
		"The cache was warm and most of the time went into linking the final binary. " +
		fmt.Sprintf("Logs for this run are kept in /var/log/build/%d.log for a week. ", i) +
		"Nothing in the dependency graph changed since the previous run, so the difference comes from the runner itself. " +
		"A second run on the same runner was about as slow, which rules out a cold disk. " +
		"The team suspects the new virtualization layer, but nobody has measured it yet. " +
		"Until then the slow runners stay in the pool, with a note on the dashboard. " +
		strings.Repeat("More details follow in the attached report. ", 3)
}

// benchItems is a frame of n handles of benchContent, counted when added
// (Tokens set, as frames does): a Critical system prompt, then a mix of
// priorities, every tenth pair a tool call and its result. With light, each
// also carries its LightTokens, as the shell records them when a handle is
// added.
func benchItems(n int, light bool) []Item {
	prios := []Priority{High, Medium, Medium, Low, Background}
	items := make([]Item, n)
	for i := range items {
		content := benchContent(i)
		it := Item{ID: benchID(i), Kind: "message", Priority: prios[i%len(prios)], Seq: int64(i + 1), Content: content}
		if i == 0 {
			it.Priority = Critical
		}
		if i%10 == 1 || i%10 == 2 {
			it.Group = fmt.Sprintf("t%d", i/10)
		}
		it.Tokens = EstimateCounter{}.Count(content)
		if light {
			it.LightTokens = LightTokens(content, EstimateCounter{})
		}
		items[i] = it
	}
	return items
}

// benchID is a handle id like the actor's: 32 hex digits, random-looking
// (a splitmix64 of i, so the same every run).
func benchID(i int) string {
	x := uint64(i) + 0x9e3779b97f4a7c15
	mix := func() uint64 {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		return z ^ z>>31
	}
	return fmt.Sprintf("%016x%016x", mix(), mix())
}

// BenchmarkFit is AssembleContextPack's case: a budget of 8,000 tokens over
// frames of 100 to 10,000 handles. "tokens": Tokens recorded, as frames
// does today; "light": LightTokens recorded too; "+fitter": a Fitter reused
// from call to call; "+trust": TrustIDs set. "light+fitter+trust" is how
// the actor shell can call it.
func BenchmarkFit(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		for _, mode := range []string{"tokens", "light", "light+fitter", "light+fitter+trust"} {
			items := benchItems(n, mode != "tokens")
			fit := newBenchFit(mode)
			b.Run(fmt.Sprintf("handles=%d/%s", n, mode), func(b *testing.B) {
				b.ReportAllocs()
				var res FitResult
				start := cpuTime()
				for b.Loop() {
					var err error
					if res, err = fit(items, 8000, FitOptions{}); err != nil {
						b.Fatal(err)
					}
				}
				reportCPU(b, start)
				b.ReportMetric(float64(res.Level), "level")
				b.ReportMetric(float64(len(res.Items)), "items/pack")
				b.ReportMetric(float64(res.Tokens), "tokens/pack")
			})
		}
	}
}

// reportCPU reports the CPU time per operation since start (see cpuTime).
func reportCPU(b *testing.B, start time.Duration) {
	if d := cpuTime() - start; d > 0 && b.N > 0 {
		b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

// newBenchFit returns Fit, a reused Fitter's Fit for "…+fitter" modes, with
// TrustIDs set for "…+trust" modes.
func newBenchFit(mode string) func([]Item, int64, FitOptions) (FitResult, error) {
	fit := Fit
	if strings.Contains(mode, "+fitter") {
		fit = new(Fitter).Fit
	}
	if !strings.Contains(mode, "+trust") {
		return fit
	}
	return func(items []Item, budget int64, o FitOptions) (FitResult, error) {
		o.TrustIDs = true
		return fit(items, budget, o)
	}
}

// BenchmarkFitLevel runs 1,000 handles at budgets that stop at each level:
// the cost of a pack is set by the level it needs.
func BenchmarkFitLevel(b *testing.B) {
	for _, mode := range []string{"tokens", "light+fitter+trust"} {
		items := benchItems(1000, mode != "tokens")
		fit := newBenchFit(mode)
		var total int64
		for _, it := range items {
			total += it.Tokens
		}
		for _, tc := range []struct {
			level  Level
			budget int64
			opts   FitOptions
		}{
			{LevelNone, total, FitOptions{}},
			{LevelLight, total - 1, FitOptions{}},
			{LevelLight, total / 2, FitOptions{AbbreviateOver: 64}},
			{LevelModerate, 8000, FitOptions{}},
			{LevelAggressive, 8000, FitOptions{MinLevel: LevelAggressive}},
			{LevelCritical, 8000, FitOptions{MinLevel: LevelCritical}},
		} {
			name := fmt.Sprintf("level=%v/%s", tc.level, mode)
			if tc.opts.AbbreviateOver != 0 {
				name = fmt.Sprintf("level=%v-abbreviated/%s", tc.level, mode)
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				var res FitResult
				start := cpuTime()
				for b.Loop() {
					var err error
					if res, err = fit(items, tc.budget, tc.opts); err != nil {
						b.Fatal(err)
					}
				}
				reportCPU(b, start)
				if res.Level != tc.level {
					b.Fatalf("level %v, want %v", res.Level, tc.level)
				}
			})
		}
	}
}

func BenchmarkCompact(b *testing.B) {
	for _, n := range []int{1000} {
		items := benchItems(n, false)
		for _, s := range []Strategy{PriorityBased{}, SummarizeOldest{}, TruncateAt{MessageCount: 50}} {
			b.Run(fmt.Sprintf("strategy=%s/items=%d", s.Name(), n), func(b *testing.B) {
				b.ReportAllocs()
				start := cpuTime()
				for b.Loop() {
					if _, err := Compact(items, 8000, s, Options{SummaryID: "s"}); err != nil {
						b.Fatal(err)
					}
				}
				reportCPU(b, start)
			})
		}
	}
}

func BenchmarkExtractive(b *testing.B) {
	items := benchItems(1000, false)[1:990]
	for _, max := range []int64{500, 2000, 6000} {
		b.Run(fmt.Sprintf("items=989/max=%d", max), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(max * 4) // output size, the cost driver
			start := cpuTime()
			for b.Loop() {
				if _, err := (Extractive{}).Summarize(items, max, nil); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, start)
		})
	}
}

func BenchmarkNormalizeSpace(b *testing.B) {
	s := benchItems(10, false)[5].Content
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		normalizeSpace(s)
	}
}
