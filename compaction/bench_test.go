package compaction

import (
	"fmt"
	"strings"
	"testing"
)

// benchItems is a frame of n handles of about 200 tokens (800 bytes) each,
// counted when added (Tokens set, as frames does): a Critical system prompt,
// then a mix of priorities, every tenth pair a tool call and its result.
func benchItems(n int) []Item {
	prios := []Priority{High, Medium, Medium, Low, Background}
	items := make([]Item, n)
	for i := range items {
		var b strings.Builder
		for k := 0; b.Len() < 800; k++ {
			if k%3 == 0 {
				fmt.Fprintf(&b, "Tool run %d.%d wrote /var/log/app/run-%d.log and exited with status %d. ", i, k, i, k%7)
			} else {
				b.WriteString("The agent considered the options at some length and then chose to continue. ")
			}
		}
		content := b.String()[:800]
		it := Item{ID: fmt.Sprintf("h%d", i), Kind: "message", Priority: prios[i%len(prios)], Seq: int64(i + 1), Content: content}
		if i == 0 {
			it.Priority = Critical
		}
		if i%10 == 1 || i%10 == 2 {
			it.Group = fmt.Sprintf("t%d", i/10)
		}
		it.Tokens = EstimateCounter{}.Count(content)
		items[i] = it
	}
	return items
}

func BenchmarkFit(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		items := benchItems(n)
		b.Run(fmt.Sprintf("items=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var res FitResult
			for b.Loop() {
				var err error
				if res, err = Fit(items, 8000, FitOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(res.Level), "level")
			b.ReportMetric(float64(len(res.Items)), "items/pack")
			b.ReportMetric(float64(res.Tokens), "tokens/pack")
		})
	}
}

// BenchmarkFitLevel runs 1,000 handles of 200 tokens at budgets that stop
// at each level: the cost of a pack is set by the level it needs.
func BenchmarkFitLevel(b *testing.B) {
	items := benchItems(1000)
	for _, tc := range []struct {
		level  Level
		budget int64
		opts   FitOptions
	}{
		{LevelNone, 200_000, FitOptions{}},
		{LevelLight, 199_000, FitOptions{AbbreviateOver: 100}},
		{LevelModerate, 8000, FitOptions{}},
		{LevelAggressive, 8000, FitOptions{MinLevel: LevelAggressive}},
		{LevelCritical, 8000, FitOptions{MinLevel: LevelCritical}},
	} {
		b.Run("level="+tc.level.String(), func(b *testing.B) {
			b.ReportAllocs()
			var res FitResult
			for b.Loop() {
				var err error
				if res, err = Fit(items, tc.budget, tc.opts); err != nil {
					b.Fatal(err)
				}
			}
			if res.Level != tc.level {
				b.Fatalf("level %v, want %v", res.Level, tc.level)
			}
		})
	}
}

func BenchmarkCompact(b *testing.B) {
	for _, n := range []int{1000} {
		items := benchItems(n)
		for _, s := range []Strategy{PriorityBased{}, SummarizeOldest{}, TruncateAt{MessageCount: 50}} {
			b.Run(fmt.Sprintf("strategy=%s/items=%d", s.Name(), n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := Compact(items, 8000, s, Options{SummaryID: "s"}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkExtractive(b *testing.B) {
	items := benchItems(1000)[1:990]
	for _, max := range []int64{500, 6000} {
		b.Run(fmt.Sprintf("items=989/max=%d", max), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(max * 4) // output size, the cost driver
			for b.Loop() {
				if _, err := (Extractive{}).Summarize(items, max, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkNormalizeSpace(b *testing.B) {
	s := benchItems(10)[5].Content
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		normalizeSpace(s)
	}
}
