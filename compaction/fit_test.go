package compaction

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// blob is content of exactly n tokens under EstimateCounter, with no
// whitespace, so Light leaves it alone below AbbreviateOver.
func blob(n int) string { return strings.Repeat("abcd", n) }

// factText is about n bytes of sentences full of exact facts.
func factText(id, n int) string {
	var b strings.Builder
	for k := 0; b.Len() < n; k++ {
		fmt.Fprintf(&b, "Step %d.%d wrote /var/log/run-%d.log with status %d. ", id, k, id, k)
	}
	return strings.TrimSpace(b.String())
}

func TestFitLevels(t *testing.T) {
	padded := func(n int) string { return "  " + blob(n) + strings.Repeat(" \n\t ", 100) }
	var moderate []Item
	for i := range 20 {
		moderate = append(moderate, Item{ID: fmt.Sprintf("m%d", i), Priority: Medium, Seq: int64(i), Content: factText(i, 200)})
	}
	aggressive := []Item{{ID: "c1", Priority: Critical, Seq: 0, Content: blob(10)}}
	for i := 1; i <= 5; i++ {
		aggressive = append(aggressive, Item{ID: fmt.Sprintf("h%d", i), Priority: High, Seq: int64(i), Content: blob(10)})
	}
	for i := 1; i <= 5; i++ {
		aggressive = append(aggressive, Item{ID: fmt.Sprintf("l%d", i), Priority: Low, Seq: int64(5 + i), Content: blob(10)})
	}

	tests := []struct {
		name    string
		items   []Item
		budget  int64
		opts    FitOptions
		level   Level
		kept    []string // ids in output order, summary included
		dropped []string
		summed  []string
	}{
		{
			name:   "none: everything fits as is",
			items:  []Item{{ID: "a", Priority: High, Seq: 1, Content: blob(60)}, {ID: "b", Priority: Low, Seq: 2, Content: blob(40)}},
			budget: 100, level: LevelNone, kept: []string{"a", "b"},
		},
		{
			name:   "light: whitespace collapsed",
			items:  []Item{{ID: "a", Priority: Medium, Seq: 1, Content: padded(10)}, {ID: "b", Priority: Medium, Seq: 2, Content: padded(10)}},
			budget: 20, level: LevelLight, kept: []string{"a", "b"},
		},
		{
			name:   "light: long content abbreviated",
			items:  []Item{{ID: "a", Priority: Medium, Seq: 1, Content: text(8000)}},
			budget: 600, level: LevelLight, kept: []string{"a"},
		},
		{
			name:   "moderate: older units summarized",
			items:  moderate,
			budget: 3*50 + 200, opts: FitOptions{KeepRecent: 3}, level: LevelModerate,
			kept:   []string{"pack-summary", "m17", "m18", "m19"},
			summed: ids(moderate[:17]),
		},
		{
			name:   "aggressive: Low dropped, High filled newest first",
			items:  aggressive,
			budget: 50, opts: FitOptions{KeepRecent: 5}, level: LevelAggressive,
			kept:    []string{"c1", "h2", "h3", "h4", "h5"},
			dropped: []string{"h1", "l1", "l2", "l3", "l4", "l5"},
		},
		{
			name: "critical: a Mandatory unit does not fit",
			items: []Item{
				{ID: "c", Priority: Critical, Seq: 1, Content: blob(10)},
				{ID: "m", Priority: Medium, Seq: 2, Content: blob(50), Mandatory: true},
				{ID: "x", Priority: High, Seq: 3, Content: blob(5)},
			},
			budget: 40, level: LevelCritical, kept: []string{"c"}, dropped: []string{"m", "x"},
		},
		{
			name: "min level: Aggressive even though everything fits",
			items: []Item{
				{ID: "a", Priority: High, Seq: 1, Content: blob(5)},
				{ID: "b", Priority: Low, Seq: 2, Content: blob(5)},
				{ID: "c", Priority: Background, Seq: 3, Content: blob(5), Mandatory: true},
			},
			budget: 1000, opts: FitOptions{MinLevel: LevelAggressive}, level: LevelAggressive,
			kept: []string{"a", "c"}, dropped: []string{"b"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Fit(tc.items, tc.budget, tc.opts)
			require.NoError(t, err)
			checkFit(t, tc.items, tc.budget, tc.opts, res)
			assert.Equal(t, tc.level, res.Level)
			assert.Equal(t, tc.kept, ids(res.Items))
			assert.Equal(t, tc.dropped, res.Dropped)
			assert.Equal(t, tc.summed, res.Summarized)
		})
	}
}

func TestFitLightAbbreviates(t *testing.T) {
	long := "HEAD-START " + text(8000) + " TAIL-END"
	res, err := Fit([]Item{{ID: "a", Priority: Medium, Seq: 1, Content: long}}, 600, FitOptions{})
	require.NoError(t, err)
	require.Equal(t, LevelLight, res.Level)
	got := res.Items[0]
	assert.True(t, strings.HasPrefix(got.Content, "HEAD-START "))
	assert.True(t, strings.HasSuffix(got.Content, " TAIL-END"))
	assert.Contains(t, got.Content, " tokens elided]…")
	assert.LessOrEqual(t, got.Tokens, int64(DefaultAbbreviateOver))

	// Critical content is never abbreviated: the pack fails instead.
	_, err = Fit([]Item{{ID: "a", Priority: Critical, Seq: 1, Content: long}}, 600, FitOptions{})
	var over *CriticalOverflowError
	require.ErrorAs(t, err, &over)
	assert.Equal(t, EstimateCounter{}.Count(long), over.Needed)
}

func TestFitCriticalOverflow(t *testing.T) {
	items := []Item{
		{ID: "sys", Priority: Critical, Seq: 1, Content: "  " + blob(30) + "   "}, // 30 once trimmed
		{ID: "call", Priority: Critical, Seq: 2, Content: blob(20), Group: "t1"},  // a Critical call…
		{ID: "result", Priority: Low, Seq: 3, Content: blob(15), Group: "t1"},     // …keeps its result
		{ID: "other", Priority: High, Seq: 4, Content: blob(1)},
	}
	_, err := Fit(items, 64, FitOptions{})
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrCriticalExceedsBudget)
	var over *CriticalOverflowError
	require.ErrorAs(t, err, &over)
	assert.Equal(t, &CriticalOverflowError{Needed: 65, Budget: 64}, over)
	assert.Contains(t, err.Error(), "needs 65 tokens, budget is 64")

	res, err := Fit(items, 65, FitOptions{})
	require.NoError(t, err)
	checkFit(t, items, 65, FitOptions{}, res)
	assert.Equal(t, LevelAggressive, res.Level, "\"other\" does not fit: Aggressive skips it")
	assert.Equal(t, []string{"sys", "call", "result"}, ids(res.Items))
}

func TestFitGroupsStayWhole(t *testing.T) {
	// A High tool call with a large Low result: the unit is High.
	items := []Item{
		{ID: "sys", Priority: Critical, Seq: 1, Content: blob(10)},
		{ID: "call", Kind: "tool_call", Priority: High, Seq: 2, Content: blob(5), Group: "t1"},
		{ID: "note", Priority: Medium, Seq: 3, Content: blob(5)},
		{ID: "result", Kind: "tool_result", Priority: Low, Seq: 4, Content: blob(40), Group: "t1"},
		{ID: "bg", Priority: Background, Seq: 5, Content: blob(5)},
	}
	for _, budget := range []int64{10, 15, 20, 55, 60, 64, 65, 100} {
		for lvl := LevelNone; lvl <= LevelCritical; lvl++ {
			for _, keep := range []int{1, 2, 10} {
				opts := FitOptions{MinLevel: lvl, KeepRecent: keep}
				res, err := Fit(items, budget, opts)
				require.NoError(t, err, "budget %d", budget)
				checkFit(t, items, budget, opts, res)
			}
		}
	}
	// At Aggressive, the Low result rides with its High call.
	res, err := Fit(items, 60, FitOptions{MinLevel: LevelAggressive})
	require.NoError(t, err)
	assert.Equal(t, []string{"sys", "note", "call", "result"}, ids(res.Items), "the unit stands where it completed")
	assert.Equal(t, []string{"bg"}, res.Dropped)
}

func TestFitMandatory(t *testing.T) {
	items := []Item{
		{ID: "c", Priority: Critical, Seq: 1, Content: blob(10)},
		{ID: "old-low", Priority: Low, Seq: 2, Content: factText(1, 200), Mandatory: true},
		{ID: "h1", Priority: High, Seq: 3, Content: blob(30)},
		{ID: "h2", Priority: High, Seq: 4, Content: blob(30)},
	}
	t.Run("kept at aggressive despite Low priority", func(t *testing.T) {
		opts := FitOptions{MinLevel: LevelAggressive}
		res, err := Fit(items, 110, opts)
		require.NoError(t, err)
		checkFit(t, items, 110, opts, res)
		assert.Equal(t, []string{"c", "old-low", "h2"}, ids(res.Items))
		assert.Equal(t, []string{"h1"}, res.Dropped)
		assert.Empty(t, res.MandatoryDropped)
	})
	t.Run("never summarized at moderate", func(t *testing.T) {
		opts := FitOptions{KeepRecent: 1, MinLevel: LevelModerate}
		res, err := Fit(items, 120, opts)
		require.NoError(t, err)
		checkFit(t, items, 120, opts, res)
		assert.Equal(t, LevelModerate, res.Level)
		assert.Equal(t, []string{"h1"}, res.Summarized)
		assert.Contains(t, ids(res.Items), "old-low")
	})
	t.Run("dropped and recorded at critical", func(t *testing.T) {
		res, err := Fit(items, 40, FitOptions{})
		require.NoError(t, err)
		checkFit(t, items, 40, FitOptions{}, res)
		assert.Equal(t, LevelCritical, res.Level)
		assert.Equal(t, []string{"old-low"}, res.MandatoryDropped)
		assert.Equal(t, []string{"old-low", "h1", "h2"}, res.Dropped)
	})
}

func TestFitOutputOrder(t *testing.T) {
	items := []Item{
		{ID: "l-new", Priority: Low, Seq: 9, Content: "x"},
		{ID: "h-old", Priority: High, Seq: 1, Content: "x"},
		{ID: "c", Priority: Critical, Seq: 5, Content: "x"},
		{ID: "h-new", Priority: High, Seq: 7, Content: "x"},
		{ID: "g-call", Priority: Medium, Seq: 8, Content: "x", Group: "g"},
		{ID: "h-tie", Priority: High, Seq: 7, Content: "x"},
		{ID: "g-result", Priority: Background, Seq: 2, Content: "x", Group: "g"},
	}
	res, err := Fit(items, 100, FitOptions{})
	require.NoError(t, err)
	// Conversation order: by Seq, ties by input position; the group stands
	// at its newest Seq (8).
	assert.Equal(t, []string{"h-old", "c", "h-new", "h-tie", "g-call", "g-result", "l-new"}, ids(res.Items))
}

func TestFitSummary(t *testing.T) {
	var items []Item
	items = append(items, Item{ID: "pack-summary", Priority: Critical, Seq: 0, Content: "system"})
	for i := 1; i <= 30; i++ {
		items = append(items, Item{ID: fmt.Sprintf("h%d", i), Priority: Medium, Seq: int64(i), Content: factText(i, 300)})
	}
	opts := FitOptions{KeepRecent: 2}
	res, err := Fit(items, 400, opts)
	require.NoError(t, err)
	checkFit(t, items, 400, opts, res)
	require.Equal(t, LevelModerate, res.Level)
	// The summary takes a free id, stands before the newer kept items and
	// keeps facts.
	s := res.Items[1]
	assert.Equal(t, "pack-summary-2", s.ID)
	assert.Equal(t, int64(28), s.Seq)
	assert.Equal(t, ids(items[1:29]), s.Covers)
	assert.Contains(t, s.Content, "[h28] Step 28.0 wrote /var/log/run-28.log with status 0.")
	assert.Equal(t, []string{"pack-summary", "pack-summary-2", "h29", "h30"}, ids(res.Items))
}

type fakeSummarizer func(items []Item, max int64, c Counter) (string, error)

func (f fakeSummarizer) Summarize(items []Item, max int64, c Counter) (string, error) {
	return f(items, max, c)
}

func TestFitSummarizerContract(t *testing.T) {
	var items []Item
	for i := range 10 {
		items = append(items, Item{ID: fmt.Sprintf("h%d", i), Priority: High, Seq: int64(i), Content: blob(10)})
	}
	opts := func(s Summarizer) FitOptions { return FitOptions{KeepRecent: 2, Summarizer: s} }

	boom := errors.New("boom")
	_, err := Fit(items, 50, opts(fakeSummarizer(func([]Item, int64, Counter) (string, error) { return "", boom })))
	assert.ErrorIs(t, err, ErrSummarizerFailed)
	assert.ErrorIs(t, err, boom)

	_, err = Fit(items, 50, opts(fakeSummarizer(func(_ []Item, max int64, _ Counter) (string, error) {
		return blob(int(max) + 1), nil
	})))
	assert.ErrorIs(t, err, ErrSummaryOverBudget)

	// An empty summary: Moderate does not fit, Aggressive fills by recency.
	res, err := Fit(items, 50, opts(fakeSummarizer(func([]Item, int64, Counter) (string, error) { return "", nil })))
	require.NoError(t, err)
	assert.Equal(t, LevelAggressive, res.Level)
	assert.Equal(t, []string{"h5", "h6", "h7", "h8", "h9"}, ids(res.Items))

	// The summarizer sees the covered items, in input order, and what is left.
	var seen []string
	var limit int64
	res, err = Fit(items, 50, opts(fakeSummarizer(func(its []Item, max int64, _ Counter) (string, error) {
		seen, limit = ids(its), max
		return "sum", nil
	})))
	require.NoError(t, err)
	assert.Equal(t, ids(items[:8]), seen)
	assert.Equal(t, int64(30), limit)
	assert.Equal(t, LevelModerate, res.Level)
	assert.Equal(t, int64(21), res.Tokens)
}

func TestFitPrecomputedTokens(t *testing.T) {
	calls := 0
	c := CounterFunc(func(s string) int64 { calls++; return EstimateCounter{}.Count(s) })
	items := []Item{
		{ID: "a", Priority: High, Seq: 1, Content: blob(10), Tokens: 10},
		{ID: "b", Priority: High, Seq: 2, Content: blob(10)},
		{ID: "c", Priority: High, Seq: 3, Content: ""},
	}
	res, err := Fit(items, 100, FitOptions{Counter: c})
	require.NoError(t, err)
	assert.Equal(t, 1, calls, "only b needs counting")
	assert.Equal(t, int64(20), res.Tokens)
	assert.Equal(t, []int64{10, 10, 0}, []int64{res.Items[0].Tokens, res.Items[1].Tokens, res.Items[2].Tokens})

	// Light recounts only what it changed.
	calls = 0
	items[1].Content = blob(5) + "         " + blob(5) // 13 tokens, 11 once trimmed
	items[1].Tokens = 0
	res, err = Fit(items, 21, FitOptions{Counter: c})
	require.NoError(t, err)
	assert.Equal(t, LevelLight, res.Level)
	assert.Equal(t, 2, calls, "b counted, then recounted once trimmed")
}

func TestFitEmptyAndZero(t *testing.T) {
	res, err := Fit(nil, 0, FitOptions{MinLevel: LevelCritical})
	require.NoError(t, err)
	assert.Equal(t, FitResult{Level: LevelNone}, res)

	items := []Item{{ID: "a", Priority: High, Seq: 1, Content: "x"}, {ID: "e", Priority: Medium, Seq: 2}}
	res, err = Fit(items, 0, FitOptions{})
	require.NoError(t, err)
	checkFit(t, items, 0, FitOptions{}, res)
	assert.Equal(t, []string{"e"}, ids(res.Items))
}

func TestFitBadInput(t *testing.T) {
	ok := Item{ID: "a", Priority: High, Seq: 1, Content: "x"}
	tests := []struct {
		name   string
		items  []Item
		budget int64
		opts   FitOptions
		want   error
	}{
		{"negative budget", []Item{ok}, -1, FitOptions{}, ErrNegativeBudget},
		{"empty id", []Item{{Priority: High}}, 10, FitOptions{}, ErrEmptyID},
		{"duplicate id", []Item{ok, ok}, 10, FitOptions{}, ErrDuplicateID},
		{"zero priority", []Item{{ID: "a"}}, 10, FitOptions{}, ErrInvalidPriority},
		{"priority out of range", []Item{{ID: "a", Priority: Background + 1}}, 10, FitOptions{}, ErrInvalidPriority},
		{"negative tokens", []Item{{ID: "a", Priority: High, Tokens: -1}}, 10, FitOptions{}, ErrNegativeTokens},
		{"negative KeepRecent", []Item{ok}, 10, FitOptions{KeepRecent: -1}, ErrInvalidOption},
		{"negative AbbreviateOver", []Item{ok}, 10, FitOptions{AbbreviateOver: -1}, ErrInvalidOption},
		{"invalid MinLevel", []Item{ok}, 10, FitOptions{MinLevel: LevelCritical + 1}, ErrInvalidLevel},
		{"negative LightTokens", []Item{{ID: "a", Priority: High, LightTokens: -1}}, 10, FitOptions{}, ErrNegativeTokens},
		{"negative SummaryShare", []Item{ok}, 10, FitOptions{SummaryShare: -0.1}, ErrInvalidOption},
		{"SummaryShare over 1", []Item{ok}, 10, FitOptions{SummaryShare: 1.5}, ErrInvalidOption},
		{"NaN SummaryShare", []Item{ok}, 10, FitOptions{SummaryShare: math.NaN()}, ErrInvalidOption},
		{"empty id, trusted", []Item{{Priority: High}}, 10, FitOptions{TrustIDs: true}, ErrEmptyID},
		{"negative counter", []Item{ok}, 10, FitOptions{Counter: CounterFunc(func(string) int64 { return -1 })}, ErrNegativeTokens},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Fit(tc.items, tc.budget, tc.opts)
			assert.ErrorIs(t, err, tc.want)
			assert.Zero(t, res)
		})
	}
}

func TestFitDoesNotModifyInput(t *testing.T) {
	items := []Item{
		{ID: "a", Priority: High, Seq: 2, Content: "  spaced   out  ", Covers: []string{"z"}},
		{ID: "b", Priority: Low, Seq: 1, Content: text(4000)},
	}
	before := fmt.Sprintf("%#v", items)
	for lvl := LevelNone; lvl <= LevelCritical; lvl++ {
		_, err := Fit(items, 5, FitOptions{MinLevel: lvl, KeepRecent: 1})
		require.NoError(t, err)
	}
	assert.Equal(t, before, fmt.Sprintf("%#v", items))
}

func TestNoPanicReachesTheCaller(t *testing.T) {
	boom := CounterFunc(func(string) int64 { panic("counter bug") })
	items := []Item{{ID: "a", Priority: High, Seq: 1, Content: "x"}}
	_, err := Fit(items, 10, FitOptions{Counter: boom})
	assert.ErrorIs(t, err, ErrPanic)
	assert.Contains(t, err.Error(), "counter bug")
	_, err = Compact(items, 10, PriorityBased{}, Options{Counter: boom})
	assert.ErrorIs(t, err, ErrPanic)

	var many []Item
	for i := range 20 {
		many = append(many, Item{ID: fmt.Sprintf("h%d", i), Priority: Medium, Seq: int64(i), Content: blob(10)})
	}
	bad := fakeSummarizer(func([]Item, int64, Counter) (string, error) { panic("summarizer bug") })
	_, err = Fit(many, 100, FitOptions{KeepRecent: 2, Summarizer: bad})
	assert.ErrorIs(t, err, ErrPanic)
	_, err = Compact(many, 100, SummarizeOldest{KeepRecent: 2}, Options{SummaryID: "s", Summarizer: bad})
	assert.ErrorIs(t, err, ErrPanic)
}

func TestFitModerateReserve(t *testing.T) {
	// 40 units of the same size; the newest 3 are kept whatever happens.
	var items []Item
	for i := 10; i < 50; i++ {
		items = append(items, Item{ID: fmt.Sprintf("m%d", i), Priority: Medium, Seq: int64(i), Content: factText(i, 200)})
	}
	tok := EstimateCounter{}.Count(items[0].Content)
	tests := []struct {
		name    string
		budget  int64
		share   float64
		reserve int64 // what the summary is sure to get
	}{
		{"a quarter of the budget", 2000, 0, 500},
		{"at least MinSummaryReserve", 2000, 0.1, MinSummaryReserve}, // 10% is 200
		{"SummaryShare", 2000, 0.5, 1000},
		{"no more than what is left", 400, 0, 400 - 3*tok}, // the 3 leave less than a quarter... of the rest
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := FitOptions{KeepRecent: 3, SummaryShare: tc.share}
			res, err := Fit(items, tc.budget, opts)
			require.NoError(t, err)
			checkFit(t, items, tc.budget, opts, res)
			require.Equal(t, LevelModerate, res.Level)
			// Units are kept newest first while they fit beside the reserve.
			verbatim := int((tc.budget - tc.reserve) / tok)
			verbatim = max(verbatim, 3)
			n := len(items)
			assert.Equal(t, ids(items[:n-verbatim]), res.Summarized, "everything older is summarized")
			assert.Equal(t, append([]string{DefaultPackSummaryID}, ids(items[n-verbatim:])...), ids(res.Items))
			s := res.Items[0]
			left := tc.budget - int64(verbatim)*tok
			assert.LessOrEqual(t, s.Tokens, left, "the summary fits beside the units")
			assert.Greater(t, s.Tokens, left-tok, "and uses its room: the reserve and what the fill left")
		})
	}
}

func TestFitModerateFillStopsAtFirstMisfit(t *testing.T) {
	items := []Item{
		{ID: "old", Priority: Medium, Seq: 1, Content: factText(1, 400)},
		{ID: "small", Priority: Medium, Seq: 2, Content: blob(10)},
		{ID: "big", Priority: Medium, Seq: 3, Content: blob(900)},
		{ID: "new", Priority: Medium, Seq: 4, Content: blob(10)},
	}
	// KeepRecent 1 keeps "new"; 256 of the 990 left are reserved: "big"
	// does not fit beside the reserve, so the fill ends there and "small",
	// though it would fit, is summarized with the rest.
	opts := FitOptions{KeepRecent: 1, AbbreviateOver: 1000}
	res, err := Fit(items, 1000, opts)
	require.NoError(t, err)
	checkFit(t, items, 1000, opts, res)
	require.Equal(t, LevelModerate, res.Level)
	assert.Equal(t, []string{"old", "small", "big"}, res.Summarized)
	assert.Equal(t, []string{DefaultPackSummaryID, "new"}, ids(res.Items))
}

func TestFitModerateAroundKeptUnits(t *testing.T) {
	// Critical and Mandatory units among the old ones stay, in place; the
	// summary covers the rest and stands after the newest it covers.
	var items []Item
	for i := range 30 {
		it := Item{ID: fmt.Sprintf("h%d", i), Priority: Low, Seq: int64(i), Content: factText(i, 200)}
		switch i {
		case 0:
			it.Priority = Critical
		case 7:
			it.Mandatory = true
		case 11, 12:
			it.Group = "call"
			if i == 12 {
				it.Priority = Critical
			}
		}
		items = append(items, it)
	}
	for _, f := range []*Fitter{nil, new(Fitter)} {
		fit := Fit
		if f != nil {
			fit = f.Fit
		}
		opts := FitOptions{KeepRecent: 2}
		res, err := fit(items, 600, opts)
		require.NoError(t, err)
		checkFit(t, items, 600, opts, res)
		require.Equal(t, LevelModerate, res.Level)
		var want []string
		for i := 1; i < 28; i++ {
			if i != 7 && i != 11 && i != 12 {
				want = append(want, fmt.Sprintf("h%d", i))
			}
		}
		assert.Equal(t, want, res.Summarized)
		assert.Equal(t, []string{"h0", "h7", "h11", "h12", DefaultPackSummaryID, "h28", "h29"}, ids(res.Items))
	}
}

func TestFitLightTokens(t *testing.T) {
	var items []Item
	for i := range 50 {
		content := "  " + factText(i, 400) + " \n"
		items = append(items, Item{ID: fmt.Sprintf("h%d", i), Priority: Medium, Seq: int64(i), Content: content,
			Tokens: EstimateCounter{}.Count(content), LightTokens: LightTokens(content, nil)})
	}
	var counted []string
	c := CounterFunc(func(s string) int64 { counted = append(counted, s); return EstimateCounter{}.Count(s) })
	opts := FitOptions{Counter: c, KeepRecent: 2, MinLevel: LevelLight}

	t.Run("only emitted contents are normalized and recounted", func(t *testing.T) {
		counted = nil
		aggressive := opts
		aggressive.MinLevel = LevelAggressive // no summary: the summarizer counts too
		res, err := Fit(items, 2000, aggressive)
		require.NoError(t, err)
		assert.Less(t, len(res.Items), len(items))
		assert.Len(t, counted, len(res.Items), "one count per emitted content, none for the others")
		for _, s := range counted {
			assert.False(t, strings.HasPrefix(s, " "), "what is counted is the normalized content")
		}
		checkFit(t, items, 2000, aggressive, res)
	})

	t.Run("the same pack as without them", func(t *testing.T) {
		plain := slices.Clone(items)
		for i := range plain {
			plain[i].LightTokens = 0
		}
		for _, budget := range []int64{500, 2000, 5000, 6000} {
			want, err := Fit(plain, budget, opts)
			require.NoError(t, err)
			got, err := Fit(items, budget, opts)
			require.NoError(t, err)
			assert.Equal(t, ids(want.Items), ids(got.Items))
			assert.Equal(t, want.Tokens, got.Tokens)
			assert.Equal(t, want.Level, got.Level)
		}
	})

	t.Run("a wrong value costs time, never the budget", func(t *testing.T) {
		for _, delta := range []int64{-20, -1, 1, 20} {
			wrong := slices.Clone(items)
			for i := range wrong {
				wrong[i].LightTokens = max(1, wrong[i].LightTokens+delta)
			}
			for _, budget := range []int64{500, 2000, 5000} {
				res, err := Fit(wrong, budget, opts)
				require.NoError(t, err)
				checkFit(t, wrong, budget, opts, res) // recounts every item against the budget
			}
		}
	})

	t.Run("the Critical overflow names what is really needed", func(t *testing.T) {
		crit := []Item{{ID: "sys", Priority: Critical, Seq: 1, Content: "  " + blob(30) + "  ", LightTokens: 99}}
		_, err := Fit(crit, 40, FitOptions{})
		var over *CriticalOverflowError
		require.NoError(t, err, "a wrong LightTokens must not make a fitting pack fail")
		crit[0].LightTokens = 1
		_, err = Fit(crit, 20, FitOptions{})
		require.ErrorAs(t, err, &over)
		assert.Equal(t, int64(30), over.Needed)
	})
}

func TestLightTokens(t *testing.T) {
	c := EstimateCounter{}
	for _, s := range []string{"", "plain", "  lead and trail \n", "a \t b\n\n c", strings.Repeat("x ", 1000)} {
		n, _ := normalizeSpace(s)
		assert.Equal(t, c.Count(n), LightTokens(s, c), "%q", s)
		assert.Equal(t, c.Count(n), LightTokens(s, nil), "nil means EstimateCounter")
	}
}

func TestFitTrustIDs(t *testing.T) {
	items := []Item{
		{ID: DefaultPackSummaryID, Priority: Critical, Seq: 0, Content: "system"},
		{ID: DefaultPackSummaryID + "-2", Priority: Medium, Seq: 1, Content: factText(1, 300)},
	}
	for i := 2; i < 30; i++ {
		items = append(items, Item{ID: fmt.Sprintf("h%d", i), Priority: Medium, Seq: int64(i), Content: factText(i, 300)})
	}
	opts := FitOptions{KeepRecent: 2}
	want, err := Fit(items, 400, opts)
	require.NoError(t, err)
	opts.TrustIDs = true
	got, err := Fit(items, 400, opts)
	require.NoError(t, err)
	checkFit(t, items, 400, opts, got)
	assert.Equal(t, want, got)
	assert.Equal(t, DefaultPackSummaryID+"-3", got.Items[1].ID, "the summary id still avoids the input's")

	// Without the check a duplicate goes through; the budget still holds.
	dup := append(slices.Clone(items), items[5])
	dup[len(dup)-1].Seq = 99
	_, err = Fit(dup, 400, FitOptions{KeepRecent: 2})
	assert.ErrorIs(t, err, ErrDuplicateID)
	res, err := Fit(dup, 400, opts)
	require.NoError(t, err)
	assert.LessOrEqual(t, res.Tokens, int64(400))
}

func TestFitReturnsTheInputWhenNothingChanges(t *testing.T) {
	items := []Item{
		{ID: "a", Priority: High, Seq: 1, Content: "x", Tokens: 1},
		{ID: "b", Priority: Low, Seq: 2, Content: "y", Tokens: 1},
	}
	res, err := Fit(items, 10, FitOptions{})
	require.NoError(t, err)
	assert.Equal(t, items, res.Items)
	assert.Same(t, &items[0], &res.Items[0], "documented: no copy when the pack is the input")
	res.Items = append(res.Items, Item{ID: "c"}) // capacity is capped: the input is safe
	assert.Len(t, items, 2)

	items[1].Tokens = 0 // counted here: then a copy carries the count
	res, err = Fit(items, 10, FitOptions{})
	require.NoError(t, err)
	assert.NotSame(t, &items[0], &res.Items[0])
	assert.Equal(t, int64(1), res.Items[1].Tokens)
	assert.Zero(t, items[1].Tokens)
}
