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

// frameItems: 90 tokens; the tool call and its result form one Medium unit
// of 40 tokens whose recency is the result's (Seq 5).
func frameItems() []Item {
	return []Item{
		{ID: "sys", Priority: Critical, Seq: 1, Content: blob(10)},
		{ID: "a", Priority: High, Seq: 2, Content: pad("Run 2 wrote /var/log/run-2.log.", 40)},
		{ID: "call", Kind: "tool_call", Priority: Medium, Seq: 3, Content: blob(10), Group: "t1"},
		{ID: "b", Priority: Low, Seq: 4, Content: pad("Ticket abc-123 closed.", 40)},
		{ID: "res", Kind: "tool_result", Priority: Background, Seq: 5, Content: blob(30), Group: "t1"},
		{ID: "c", Priority: Background, Seq: 6, Content: blob(10)},
		{ID: "d", Priority: Medium, Seq: 7, Content: blob(10)},
	}
}

// pad extends s to n bytes with a filler word.
func pad(s string, n int) string { return s + " " + strings.Repeat("z", n-len(s)-1) }

func keptIDs(r Result) []string { return ids(r.Kept) }

func TestCompactStrategies(t *testing.T) {
	items := frameItems()
	var total int64
	for _, it := range items {
		total += EstimateCounter{}.Count(it.Content)
	}
	require.Equal(t, int64(90), total)

	tests := []struct {
		name    string
		target  int64
		s       Strategy
		kept    []string
		removed []string
		summary []string // the summary's Covers; nil: no summary
		level   Level
	}{
		{"priority: already fits", 90, PriorityBased{}, ids(items), nil, nil, LevelNone},
		{"priority: background, low, then oldest medium", 60, PriorityBased{}, []string{"sys", "a", "d"}, []string{"call", "b", "res", "c"}, nil, LevelAggressive},
		{"priority: one background is enough", 85, PriorityBased{}, []string{"sys", "a", "call", "b", "res", "d"}, []string{"c"}, nil, LevelModerate}, // 11% removed
		{"priority: only critical left", 0, PriorityBased{}, []string{"sys"}, []string{"a", "call", "b", "res", "c", "d"}, nil, LevelCritical},
		{"summarize oldest", 60, SummarizeOldest{KeepRecent: 2}, []string{"sys", "c", "d"}, []string{"a", "call", "b", "res"}, []string{"a", "call", "b", "res"}, LevelModerate},
		{"summarize oldest: nothing old enough", 60, SummarizeOldest{KeepRecent: 100}, ids(items), nil, nil, LevelNone},
		{"truncate at 2", 0, TruncateAt{MessageCount: 2}, []string{"sys", "c", "d"}, []string{"a", "call", "b", "res"}, nil, LevelAggressive},
		{"truncate at 0", 1000, TruncateAt{}, []string{"sys"}, []string{"a", "call", "b", "res", "c", "d"}, nil, LevelCritical},
		{"truncate at 3 keeps the tool unit", 1000, TruncateAt{MessageCount: 3}, []string{"sys", "call", "res", "c", "d"}, []string{"a", "b"}, nil, LevelModerate},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{SummaryID: "sum-1"}
			res, err := Compact(items, tc.target, tc.s, opts)
			require.NoError(t, err)
			checkCompact(t, items, opts, res)
			assert.Equal(t, tc.kept, keptIDs(res))
			assert.Equal(t, tc.removed, res.Removed)
			assert.Equal(t, tc.level, res.Level)
			if tc.summary == nil {
				assert.Nil(t, res.Summary)
				assert.Equal(t, len(tc.removed), res.ItemsRemoved)
				return
			}
			require.NotNil(t, res.Summary)
			assert.Equal(t, tc.summary, res.Summary.Covers)
			assert.Equal(t, "sum-1", res.Summary.ID)
			assert.Equal(t, SummaryKind, res.Summary.Kind)
			assert.Equal(t, SummaryPriority, res.Summary.Priority)
			assert.Equal(t, int64(5), res.Summary.Seq)
			assert.Equal(t, len(tc.summary), res.ItemsSummarized)
			assert.Zero(t, res.ItemsRemoved)
			assert.LessOrEqual(t, res.FinalTokens, tc.target)
			assert.Contains(t, res.Summary.Content, "[a] Run 2 wrote /var/log/run-2.log.")
		})
	}
}

func TestCompactGroupsAndCriticalInEveryStrategy(t *testing.T) {
	items := frameItems()
	items = append(items,
		Item{ID: "ccall", Priority: Critical, Seq: 8, Content: blob(3), Group: "t2"},
		Item{ID: "cres", Priority: Background, Seq: 9, Content: factText(9, 80), Group: "t2"},
	)
	strategies := []Strategy{PriorityBased{}, TruncateAt{}, TruncateAt{MessageCount: 1}, TruncateAt{MessageCount: 4}}
	for k := 1; k <= 8; k++ {
		strategies = append(strategies, SummarizeOldest{KeepRecent: k})
	}
	for _, s := range strategies {
		for target := int64(0); target <= 140; target += 5 {
			opts := Options{SummaryID: "s"}
			res, err := Compact(items, target, s, opts)
			if errors.Is(err, ErrTargetTooSmall) {
				continue
			}
			require.NoError(t, err, "%s %+v target %d", s.Name(), s, target)
			checkCompact(t, items, opts, res)
		}
	}
}

func TestCompactSummarizeOldestErrors(t *testing.T) {
	items := frameItems()
	_, err := Compact(items, 60, SummarizeOldest{KeepRecent: 2}, Options{})
	assert.ErrorIs(t, err, ErrSummaryIDRequired)
	_, err = Compact(items, 60, SummarizeOldest{KeepRecent: 2}, Options{SummaryID: "a"})
	assert.ErrorIs(t, err, ErrDuplicateID)
	_, err = Compact(items, 30, SummarizeOldest{KeepRecent: 2}, Options{SummaryID: "s"})
	assert.ErrorIs(t, err, ErrTargetTooSmall, "the kept units take the whole target")
	_, err = Compact(items, 32, SummarizeOldest{KeepRecent: 2}, Options{SummaryID: "s"})
	assert.ErrorIs(t, err, ErrTargetTooSmall, "no summary fits in 2 tokens")
	_, err = Compact(items, 60, SummarizeOldest{KeepRecent: -1}, Options{SummaryID: "s"})
	assert.ErrorIs(t, err, ErrInvalidStrategy)
	_, err = Compact(items, 60, SummarizeOldest{KeepRecent: 2}, Options{SummaryID: "s",
		Summarizer: fakeSummarizer(func([]Item, int64, Counter) (string, error) { return blob(1000), nil })})
	assert.ErrorIs(t, err, ErrSummaryOverBudget)
}

func TestCompactCustom(t *testing.T) {
	items := frameItems()
	drop := func(ids ...string) func([]Item) []Item {
		return func(in []Item) []Item {
			return slices.DeleteFunc(in, func(it Item) bool { return slices.Contains(ids, it.ID) })
		}
	}
	custom := func(f func([]Item) []Item) Custom {
		return func(in []Item, _ int64) ([]Item, error) { return f(in), nil }
	}

	t.Run("remove and summarize", func(t *testing.T) {
		var gotTarget int64
		s := Custom(func(in []Item, target int64) ([]Item, error) {
			gotTarget = target
			out := drop("b", "c")(in)
			slices.Reverse(out) // order does not matter
			return append(out, Item{Content: "b and c were noise", Covers: []string{"b", "c"}}), nil
		})
		opts := Options{SummaryID: "s9"}
		res, err := Compact(items, 77, s, opts)
		require.NoError(t, err)
		checkCompact(t, items, opts, res)
		assert.Equal(t, int64(77), gotTarget)
		assert.Equal(t, []string{"sys", "a", "call", "res", "d"}, keptIDs(res))
		assert.Equal(t, []string{"b", "c"}, res.Removed)
		require.NotNil(t, res.Summary)
		assert.Equal(t, Item{ID: "s9", Kind: SummaryKind, Priority: SummaryPriority, Content: "b and c were noise", Covers: []string{"b", "c"}, Tokens: 5}, *res.Summary)
		assert.Equal(t, 2, res.ItemsSummarized)
		assert.Equal(t, "custom", s.Name())
	})
	t.Run("may not touch the caller's items", func(t *testing.T) {
		before := fmt.Sprintf("%#v", items)
		_, err := Compact(items, 0, Custom(func(in []Item, _ int64) ([]Item, error) {
			for i := range in {
				in[i].Content = "mutated"
				if len(in[i].Covers) > 0 {
					in[i].Covers[0] = "x"
				}
			}
			return in, nil
		}), Options{})
		assert.ErrorIs(t, err, ErrCustomOutput)
		assert.Equal(t, before, fmt.Sprintf("%#v", items))
	})

	bad := []struct {
		name string
		s    Custom
		want error
	}{
		{"modified item", custom(func(in []Item) []Item { in[1].Content = "changed"; return in }), ErrCustomOutput},
		{"split group", custom(drop("res")), ErrCustomOutput},
		{"critical removed", custom(drop("sys")), ErrCustomOutput},
		{"item returned twice", custom(func(in []Item) []Item { return append(in, in[1]) }), ErrCustomOutput},
		{"new item without covers", custom(func(in []Item) []Item { return append(in, Item{ID: "n", Content: "x"}) }), ErrCustomOutput},
		{"two summaries", custom(func(in []Item) []Item {
			return append(drop("b", "c")(in), Item{ID: "n1", Covers: []string{"b"}}, Item{ID: "n2", Covers: []string{"c"}})
		}), ErrCustomOutput},
		{"covers unknown", custom(func(in []Item) []Item { return append(drop("b")(in), Item{ID: "n", Covers: []string{"zz"}}) }), ErrCustomOutput},
		{"covers kept", custom(func(in []Item) []Item { return append(drop("b")(in), Item{ID: "n", Covers: []string{"a"}}) }), ErrCustomOutput},
		{"covers twice", custom(func(in []Item) []Item { return append(drop("b")(in), Item{ID: "n", Covers: []string{"b", "b"}}) }), ErrCustomOutput},
		{"summary in a group", custom(func(in []Item) []Item { return append(drop("b")(in), Item{ID: "n", Group: "g", Covers: []string{"b"}}) }), ErrCustomOutput},
		{"summary bad priority", custom(func(in []Item) []Item {
			return append(drop("b")(in), Item{ID: "n", Priority: 9, Covers: []string{"b"}})
		}), ErrInvalidPriority},
		{"summary without id", custom(func(in []Item) []Item { return append(drop("b")(in), Item{Covers: []string{"b"}}) }), ErrSummaryIDRequired},
		{"error", func([]Item, int64) ([]Item, error) { return nil, errors.New("nope") }, ErrCustomStrategyFail},
		{"panic", func([]Item, int64) ([]Item, error) { panic("boom") }, ErrCustomStrategyFail},
		{"nil", nil, ErrInvalidStrategy},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Compact(items, 50, tc.s, Options{})
			assert.ErrorIs(t, err, tc.want)
			assert.Zero(t, res)
		})
	}
}

func TestCompactBadInput(t *testing.T) {
	items := frameItems()
	_, err := Compact(items, -1, PriorityBased{}, Options{})
	assert.ErrorIs(t, err, ErrNegativeBudget)
	_, err = Compact(items, 10, nil, Options{})
	assert.ErrorIs(t, err, ErrInvalidStrategy)
	_, err = Compact(items, 10, TruncateAt{MessageCount: -1}, Options{})
	assert.ErrorIs(t, err, ErrInvalidStrategy)
	_, err = Compact(append(items, items[0]), 10, PriorityBased{}, Options{})
	assert.ErrorIs(t, err, ErrDuplicateID)
	_, err = Compact([]Item{{ID: "x"}}, 10, PriorityBased{}, Options{})
	assert.ErrorIs(t, err, ErrInvalidPriority)
	var nilPtr *TruncateAt
	_, err = Compact(items, 10, nilPtr, Options{})
	assert.ErrorIs(t, err, ErrInvalidStrategy)
	res, err := Compact(items, 10, &TruncateAt{MessageCount: 1}, Options{})
	require.NoError(t, err)
	assert.Equal(t, []string{"sys", "d"}, keptIDs(res))

	res, err = Compact(nil, 0, PriorityBased{}, Options{})
	require.NoError(t, err)
	assert.Equal(t, Result{Level: LevelNone}, res)
}

func TestStrategyNames(t *testing.T) {
	assert.Equal(t, "priority_based", PriorityBased{}.Name())
	assert.Equal(t, "summarize_oldest", SummarizeOldest{}.Name())
	assert.Equal(t, "truncate_at", TruncateAt{}.Name())
	assert.Equal(t, "truncate_at", (&TruncateAt{}).Name())
}

func TestReductionLevel(t *testing.T) {
	tests := []struct {
		orig, final int64
		want        Level
	}{
		{0, 0, LevelNone},
		{100, 100, LevelNone},
		{100, 120, LevelNone},
		{100, 99, LevelLight},
		{100, 90, LevelLight},
		{100, 89, LevelModerate},
		{100, 60, LevelModerate},
		{100, 59, LevelAggressive},
		{100, 30, LevelAggressive},
		{100, 29, LevelCritical},
		{100, 0, LevelCritical},
		{math.MaxInt64, math.MaxInt64 / 2, LevelAggressive},
		{math.MaxInt64, math.MaxInt64 - 1, LevelLight},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, ReductionLevel(tc.orig, tc.final), "%d -> %d", tc.orig, tc.final)
	}
}
