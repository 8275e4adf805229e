package compaction

import (
	"slices"
	"strings"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tb is what both *testing.T and *rapid.T provide.
type tb interface {
	require.TestingT
	Helper()
}

func counterOr(c Counter) Counter {
	if c == nil {
		return EstimateCounter{}
	}
	return c
}

// checkFit asserts every promise Fit makes about res.
func checkFit(t tb, items []Item, budget int64, opts FitOptions, res FitResult) {
	t.Helper()
	c := counterOr(opts.Counter)
	input := map[string]Item{}
	for _, it := range items {
		input[it.ID] = it
	}
	// Recount: Tokens is the sum of the emitted contents, within the budget.
	var sum int64
	emitted := map[string]bool{}
	var summaries []Item
	for _, it := range res.Items {
		n := c.Count(it.Content)
		require.Equal(t, n, it.Tokens, "item %q Tokens is not its recount", it.ID)
		sum += n
		require.False(t, emitted[it.ID], "item %q emitted twice", it.ID)
		emitted[it.ID] = true
		in, ok := input[it.ID]
		if !ok {
			summaries = append(summaries, it)
			continue
		}
		if res.Level == LevelNone {
			assert.Equal(t, in.Content, it.Content, "LevelNone changed %q", it.ID)
		} else {
			n, _ := normalizeSpace(in.Content)
			if in.Priority == Critical || unitOf(items, it.ID).Priority == Critical {
				assert.Equal(t, n, it.Content, "Critical content %q must only be whitespace-trimmed", it.ID)
			}
		}
		assert.Equal(t, in.Priority, it.Priority)
		assert.Equal(t, in.Seq, it.Seq)
		assert.Equal(t, in.Group, it.Group)
	}
	require.Equal(t, sum, res.Tokens, "Tokens is not the recount")
	require.LessOrEqual(t, res.Tokens, budget, "pack exceeds its budget")

	// The summary: at most one, only at Moderate, covering Summarized.
	require.LessOrEqual(t, len(summaries), 1)
	if len(summaries) == 1 {
		s := summaries[0]
		require.Equal(t, LevelModerate, res.Level)
		assert.Equal(t, SummaryKind, s.Kind)
		assert.Equal(t, SummaryPriority, s.Priority)
		assert.Equal(t, res.Summarized, s.Covers)
		assert.NotEmpty(t, s.Content)
	} else {
		assert.Empty(t, res.Summarized)
	}

	// Every input id has exactly one fate, and lists are in input order.
	fate := map[string]string{}
	for _, id := range res.Dropped {
		fate[id] = "dropped"
	}
	for _, id := range res.Summarized {
		require.Empty(t, fate[id], "%q both dropped and summarized", id)
		fate[id] = "summarized"
	}
	for id := range emitted {
		if _, ok := input[id]; ok {
			require.Empty(t, fate[id], "%q emitted and %s", id, fate[id])
			fate[id] = "kept"
		}
	}
	require.Len(t, fate, len(items))
	assert.True(t, inInputOrder(items, res.Dropped))
	assert.True(t, inInputOrder(items, res.Summarized))

	// Units share one fate; Critical units are kept.
	for _, u := range Units(items) {
		f := fate[u.Items[0].ID]
		for _, it := range u.Items {
			require.Equal(t, f, fate[it.ID], "unit of %q split: %q is %s, %q is %s", u.Items[0].ID, u.Items[0].ID, f, it.ID, fate[it.ID])
		}
		if u.Priority == Critical {
			require.Equal(t, "kept", f, "Critical unit of %q not kept", u.Items[0].ID)
		}
		// Units stay together in the output.
		if f == "kept" && len(u.Items) > 1 {
			pos := slices.IndexFunc(res.Items, func(it Item) bool { return it.ID == u.Items[0].ID })
			for k, it := range u.Items {
				require.Equal(t, it.ID, res.Items[pos+k].ID, "unit of %q not contiguous", u.Items[0].ID)
			}
		}
	}

	// Output order: by unit recency, oldest first.
	recency := func(it Item) int64 {
		if _, ok := input[it.ID]; !ok {
			return it.Seq
		}
		return unitOf(items, it.ID).Seq
	}
	for k := 1; k < len(res.Items); k++ {
		require.LessOrEqual(t, recency(res.Items[k-1]), recency(res.Items[k]), "output not in recency order")
	}

	// Mandatory items are only dropped at the Critical level.
	var wantMD []string
	for _, id := range res.Dropped {
		if input[id].Mandatory {
			wantMD = append(wantMD, id)
		}
	}
	assert.Equal(t, wantMD, res.MandatoryDropped)
	if res.Level != LevelCritical {
		assert.Empty(t, res.MandatoryDropped)
	}
	if res.Level == LevelNone || res.Level == LevelLight {
		assert.Empty(t, res.Dropped)
	}
}

// checkCompact asserts every promise Compact makes about res.
func checkCompact(t tb, items []Item, opts Options, res Result) {
	t.Helper()
	c := counterOr(opts.Counter)
	var orig, final int64
	for _, it := range items {
		orig += c.Count(it.Content)
	}
	require.Equal(t, orig, res.OriginalTokens)
	kept := map[string]bool{}
	for _, it := range res.Kept {
		require.Equal(t, c.Count(it.Content), it.Tokens)
		final += it.Tokens
		kept[it.ID] = true
	}
	if res.Summary != nil {
		require.Equal(t, c.Count(res.Summary.Content), res.Summary.Tokens)
		final += res.Summary.Tokens
		assert.Len(t, res.Summary.Covers, res.ItemsSummarized)
		for _, id := range res.Summary.Covers {
			assert.Contains(t, res.Removed, id)
		}
	} else {
		assert.Zero(t, res.ItemsSummarized)
	}
	require.Equal(t, final, res.FinalTokens)
	require.Equal(t, len(res.Removed), res.ItemsRemoved+res.ItemsSummarized)
	require.Equal(t, len(items), len(res.Kept)+len(res.Removed))
	assert.True(t, inInputOrder(items, res.Removed))
	ids := make([]string, len(res.Kept))
	for k, it := range res.Kept {
		ids[k] = it.ID
	}
	assert.True(t, inInputOrder(items, ids))
	for _, u := range Units(items) {
		k := kept[u.Items[0].ID]
		for _, it := range u.Items {
			require.Equal(t, k, kept[it.ID], "unit of %q split", u.Items[0].ID)
		}
		if u.Priority == Critical {
			require.True(t, k, "Critical unit of %q removed", u.Items[0].ID)
		}
	}
	assert.Equal(t, ReductionLevel(res.OriginalTokens, res.FinalTokens), res.Level)
}

func inInputOrder(items []Item, ids []string) bool {
	k := 0
	for _, it := range items {
		if k < len(ids) && ids[k] == it.ID {
			k++
		}
	}
	return k == len(ids)
}

func unitOf(items []Item, id string) Unit {
	for _, u := range Units(items) {
		for _, it := range u.Items {
			if it.ID == id {
				return u
			}
		}
	}
	return Unit{}
}

func ids(items []Item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.ID
	}
	return out
}

// text returns a content of n bytes of prose, single-spaced.
func text(n int) string {
	const words = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(words)
	}
	return strings.TrimSpace(b.String()[:n])
}
