package compaction

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

var pieces = []string{
	"word", "lorem ipsum dolor", "  ", "\n", "\t", " \r\n\n ", ". ", "! ",
	"42", "v1.2.3", "/tmp/run-7.log", "abc-123", "deadbeefcafe", "https://example.com/p?q=1",
	"main.go", "user_id", "日本語", "3f2c9a1e-7b4d-4c2a-9e1f-0a1b2c3d4e5f",
}

var counters = []Counter{
	EstimateCounter{},
	CounterFunc(func(s string) int64 { return int64(len(strings.Fields(s))) }),
	// Lumpy: not monotone in length, so trimming can raise a count.
	CounterFunc(func(s string) int64 { return int64(len(s)/3 + len(s)%5) }),
	bpeLike,
}

func genContent(t *rapid.T) string {
	var b strings.Builder
	n := rapid.IntRange(0, 30).Draw(t, "pieces")
	for range n {
		p := rapid.SampledFrom(pieces).Draw(t, "piece")
		if rapid.IntRange(0, 20).Draw(t, "long") == 0 {
			p = strings.Repeat(p+" ", rapid.IntRange(10, 200).Draw(t, "repeat"))
		}
		b.WriteString(p)
		if rapid.Bool().Draw(t, "space") {
			b.WriteByte(' ')
		}
	}
	return b.String()
}

func genItems(t *rapid.T, c Counter) []Item {
	n := rapid.IntRange(0, 30).Draw(t, "n")
	items := make([]Item, n)
	for i := range items {
		it := Item{
			ID:        fmt.Sprintf("h%d", i),
			Priority:  Priority(rapid.IntRange(int(Critical), int(Background)).Draw(t, "priority")),
			Seq:       rapid.Int64Range(0, 40).Draw(t, "seq"),
			Mandatory: rapid.IntRange(0, 5).Draw(t, "mandatory") == 0,
			Content:   genContent(t),
		}
		if rapid.IntRange(0, 2).Draw(t, "grouped") == 0 {
			it.Group = fmt.Sprintf("g%d", rapid.IntRange(0, 5).Draw(t, "group"))
		}
		if it.Priority == Critical && rapid.Bool().Draw(t, "shrink critical") {
			it.Content = it.Content[:min(len(it.Content), 20)]
		}
		if rapid.Bool().Draw(t, "precounted") {
			it.Tokens = c.Count(it.Content)
		}
		switch rapid.IntRange(0, 5).Draw(t, "light") {
		case 0, 1: // recorded, as the shell does
			it.LightTokens = LightTokens(it.Content, c)
		case 2: // recorded wrong: too small, too large, or with another counter
			it.LightTokens = max(0, LightTokens(it.Content, c)+rapid.Int64Range(-50, 50).Draw(t, "light error"))
		}
		items[i] = it
	}
	return items
}

// criticalNeed is what the Critical level must emit: every item of a
// Critical unit, whitespace-trimmed, counted.
func criticalNeed(items []Item, c Counter) int64 {
	var need int64
	for _, u := range Units(items) {
		if u.Priority != Critical {
			continue
		}
		for _, it := range u.Items {
			n, _ := normalizeSpace(it.Content)
			need += c.Count(n)
		}
	}
	return need
}

func TestFitProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ci := rapid.IntRange(0, len(counters)-1).Draw(t, "counter")
		c := counters[ci]
		items := genItems(t, c)
		budget := rapid.Int64Range(0, 600).Draw(t, "budget")
		opts := FitOptions{
			Counter:        c,
			KeepRecent:     rapid.IntRange(0, 6).Draw(t, "keep"),
			MinLevel:       Level(rapid.IntRange(0, int(LevelCritical)).Draw(t, "minLevel")),
			AbbreviateOver: rapid.SampledFrom([]int64{0, 4, 16, 64}).Draw(t, "abbrev"),
			SummaryShare:   rapid.SampledFrom([]float64{0, 0.1, 0.5, 1}).Draw(t, "share"),
			TrustIDs:       rapid.Bool().Draw(t, "trust ids"),
		}
		if rapid.Bool().Draw(t, "summary id clash") && len(items) > 0 {
			items[0].ID = DefaultPackSummaryID
		}
		res, err := Fit(items, budget, opts)
		need := criticalNeed(items, c)
		if err != nil {
			var over *CriticalOverflowError
			require.ErrorAs(t, err, &over, "only the overflow error is expected")
			require.Equal(t, need, over.Needed)
			require.Equal(t, budget, over.Budget)
			require.Greater(t, need, budget)
			return
		}
		checkFit(t, items, budget, opts, res)

		again, err := Fit(items, budget, opts)
		require.NoError(t, err)
		require.Equal(t, res, again, "not deterministic")

		// A reused Fitter gives the very same pack, whatever it did before.
		again, err = sharedFitter.Fit(items, budget, opts)
		require.NoError(t, err)
		require.Equal(t, res, again, "a reused Fitter differs from Fit")

		// LightTokens only saves work: when every recorded value is right,
		// the pack is the one made without them.
		if allLightRight(items, c) {
			plain := slices.Clone(items)
			for i := range plain {
				plain[i].LightTokens = 0
			}
			want, err := Fit(plain, budget, opts)
			require.NoError(t, err)
			for i := range want.Items { // the only difference: kept where unchanged
				if k := slices.IndexFunc(items, func(it Item) bool { return it.ID == want.Items[i].ID }); k >= 0 && items[k].Content == want.Items[i].Content {
					want.Items[i].LightTokens = items[k].LightTokens
				}
			}
			require.Equal(t, want, res, "LightTokens changed the pack")
		}
	})
}

// sharedFitter is reused by every case of TestFitProperties, as the shell
// reuses one.
var sharedFitter Fitter

// allLightRight reports whether every recorded LightTokens is what
// LightTokens computes.
func allLightRight(items []Item, c Counter) bool {
	for _, it := range items {
		if it.LightTokens != 0 && it.LightTokens != LightTokens(it.Content, c) {
			return false
		}
	}
	return true
}

func TestCompactProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := counters[rapid.IntRange(0, len(counters)-1).Draw(t, "counter")]
		items := genItems(t, c)
		target := rapid.Int64Range(0, 600).Draw(t, "target")
		var s Strategy
		switch rapid.IntRange(0, 2).Draw(t, "strategy") {
		case 0:
			s = PriorityBased{}
		case 1:
			s = SummarizeOldest{KeepRecent: rapid.IntRange(0, 6).Draw(t, "keep")}
		case 2:
			s = TruncateAt{MessageCount: rapid.IntRange(0, 6).Draw(t, "count")}
		}
		opts := Options{SummaryID: "summary", Counter: c}
		res, err := Compact(items, target, s, opts)
		if err != nil {
			_, ok := s.(SummarizeOldest)
			require.True(t, ok && errors.Is(err, ErrTargetTooSmall), "unexpected error %v", err)
			return
		}
		checkCompact(t, items, opts, res)
		switch s.(type) {
		case PriorityBased:
			if res.FinalTokens > target { // only Critical units can remain
				for _, it := range res.Kept {
					require.Equal(t, Critical, unitOf(items, it.ID).Priority)
				}
			}
		case SummarizeOldest:
			if res.Summary != nil {
				require.LessOrEqual(t, res.FinalTokens, target)
			}
		}
		again, err := Compact(items, target, s, opts)
		require.NoError(t, err)
		require.Equal(t, res, again, "not deterministic")
	})
}
