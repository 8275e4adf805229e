package compaction

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func TestSentenceFacts(t *testing.T) {
	tests := []struct {
		s    string
		fact bool
	}{
		{"The weather was nice", false},
		{"It cost 42 dollars", true},
		{"Request 3f2c9a1e-7b4d-4c2a-9e1f-0a1b2c3d4e5f failed", true},
		{"Commit deadbeefcafe landed", true},
		{"Ticket abc-123 closed", true},
		{"Edit /etc/nginx/nginx.conf now", true},
		{`Open C:\Users\bob`, true},
		{"See https://example.com/docs", true},
		{"Changed main.go and README", true},
		{"Set user_id properly", true},
		{"Mail bob@example.com", true},
		{"A feedback loop", false}, // "feedback" is not all hex
		{"Use and / or", false},
	}
	for _, tc := range tests {
		a, b, _, fact := nextSentence(tc.s, 0)
		assert.Equal(t, tc.s, tc.s[a:b])
		assert.Equal(t, tc.fact, fact, "%q", tc.s)
	}
}

func TestSentenceSplit(t *testing.T) {
	s := "First one. Version 1.2.3 of main.go!  Third?\nFourth line \n\n  fifth"
	var got []string
	for i := 0; i < len(s); {
		a, b, next, _ := nextSentence(s, i)
		if a != b {
			got = append(got, s[a:b])
		}
		i = next
	}
	assert.Equal(t, []string{"First one.", "Version 1.2.3 of main.go!", "Third?", "Fourth line", "fifth"}, got)
}

var factItems = []Item{
	{ID: "h1", Priority: Medium, Seq: 1, Content: "We chatted about lunch plans for a while. The deploy of build 4711 to /srv/app/releases/v2.3.1 failed with exit code 137. Everyone was a bit sad about it. Logs are at https://logs.example.com/run/99 for later."},
	{ID: "h2", Priority: High, Seq: 2, Content: "Nothing much happened in the morning.\nUser abc-123 reported request 3f2c9a1e-7b4d-4c2a-9e1f-0a1b2c3d4e5f timing out.\nThe team discussed it at length and agreed to look again soon."},
	{ID: "h3", Priority: Low, Seq: 3, Content: "Commit deadbeefcafe touched internal/store/bolt.go and the tests. It was reviewed quickly and merged without much fuss."},
}

var facts = []string{"4711", "/srv/app/releases/v2.3.1", "137.", "https://logs.example.com/run/99", "abc-123", "3f2c9a1e-7b4d-4c2a-9e1f-0a1b2c3d4e5f", "deadbeefcafe", "internal/store/bolt.go"}

func TestExtractiveKeepsFactsVerbatim(t *testing.T) {
	var total int64
	for _, it := range factItems {
		total += EstimateCounter{}.Count(it.Content)
	}
	require.Equal(t, int64(128), total)
	// About 60% of the space: every fact survives, the prose does not.
	s, err := Extractive{}.Summarize(factItems, 80, nil)
	require.NoError(t, err)
	assert.LessOrEqual(t, EstimateCounter{}.Count(s), int64(80))
	for _, f := range facts {
		assert.Contains(t, s, f)
	}
	assert.NotContains(t, s, "lunch plans")
	assert.NotContains(t, s, "morning")
	lines := strings.Split(s, "\n")
	require.Len(t, lines, 4)
	assert.Equal(t, "[summary of 3 items]", lines[0])
	// One line per item, oldest first, each prefixed with its id.
	assert.True(t, strings.HasPrefix(lines[1], "[h1] "))
	assert.True(t, strings.HasPrefix(lines[2], "[h2] "))
	assert.True(t, strings.HasPrefix(lines[3], "[h3] "))
	assert.Contains(t, lines[1], "The deploy of build 4711 to /srv/app/releases/v2.3.1 failed with exit code 137.")
}

func TestExtractiveTightLimits(t *testing.T) {
	counters := map[string]Counter{
		"estimate": EstimateCounter{},
		"words":    CounterFunc(func(s string) int64 { return int64(len(strings.Fields(s))) }),
		"runes":    CounterFunc(func(s string) int64 { return int64(len([]rune(s))) }),
		"lumpy":    CounterFunc(func(s string) int64 { return int64(len(s)/3 + len(s)%5) }), // not sub-additive
	}
	for name, c := range counters {
		t.Run(name, func(t *testing.T) {
			for max := int64(0); max <= 400; max++ {
				s, err := Extractive{}.Summarize(factItems, max, c)
				require.NoError(t, err)
				require.LessOrEqual(t, c.Count(s), max, "limit %d:\n%s", max, s)
				if s != "" {
					require.True(t, strings.HasPrefix(s, "[summary of 3 items]"))
				}
				again, _ := Extractive{}.Summarize(factItems, max, c)
				require.Equal(t, s, again, "not deterministic")
			}
		})
	}
	s, err := Extractive{}.Summarize(factItems, 4, nil)
	require.NoError(t, err)
	assert.Empty(t, s, "the header alone does not fit in 4 tokens")
	s, _ = Extractive{}.Summarize(nil, 100, nil)
	assert.Empty(t, s)
}

func TestExtractivePriorityThenRecency(t *testing.T) {
	var items []Item
	for i := range 40 {
		p := Medium
		if i == 3 {
			p = High
		}
		items = append(items, Item{ID: fmt.Sprintf("h%d", i), Priority: p, Seq: int64(100 - i), Content: factText(i, 400)})
	}
	s, err := Extractive{}.Summarize(items, 60, nil)
	require.NoError(t, err)
	lines := strings.Split(s, "\n")
	require.GreaterOrEqual(t, len(lines), 2)
	// High first, then the newest (lowest index here, Seq counts down);
	// written out oldest first.
	assert.Contains(t, s, "[h3] Step 3.0 wrote /var/log/run-3.log with status 0.")
	assert.Contains(t, s, "[h0] ")
	assert.NotContains(t, s, "[h39] ")
	assert.True(t, strings.Index(s, "[h3] ") < strings.Index(s, "[h0] "), "h3 (Seq 97) is older than h0 (Seq 100)")
}

func TestExtractiveTruncatesAroundFacts(t *testing.T) {
	items := []Item{{ID: "x", Priority: Medium, Seq: 1, Content: "The build of the very long running pipeline for the frontend failed at step 12 while writing /tmp/artifact.tar after a long wait."}}
	s, err := Extractive{}.Summarize(items, 17, nil)
	require.NoError(t, err)
	assert.LessOrEqual(t, EstimateCounter{}.Count(s), int64(17))
	assert.Contains(t, s, "12")
	assert.Contains(t, s, "/tmp/artifact.tar")
	assert.Contains(t, s, "…")
}

func TestExtractiveProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := counters[rapid.IntRange(0, len(counters)-1).Draw(t, "counter")]
		items := genItems(t, c)
		if len(items) == 0 {
			return
		}
		max := rapid.Int64Range(0, 300).Draw(t, "max")
		s, err := Extractive{}.Summarize(items, max, c)
		require.NoError(t, err)
		require.LessOrEqual(t, c.Count(s), max)
		again, _ := Extractive{}.Summarize(items, max, c)
		require.Equal(t, s, again)
		if s == "" {
			return
		}
		lines := strings.Split(s, "\n")
		require.Equal(t, fmt.Sprintf("[summary of %d items]", len(items)), lines[0])
		byID := map[string]Item{}
		for _, it := range items {
			byID[it.ID] = it
		}
		seen := map[string]bool{}
		for _, line := range lines[1:] {
			id, rest, ok := strings.Cut(strings.TrimPrefix(line, "["), "] ")
			require.True(t, ok, "line %q", line)
			it, known := byID[id]
			require.True(t, known, "line %q names no item", line)
			require.False(t, seen[id], "two lines for %q", id)
			seen[id] = true
			// Every word is the item's, verbatim.
			words := strings.Fields(it.Content)
			for _, w := range strings.Fields(rest) {
				if w == "…" {
					continue
				}
				w = strings.TrimSuffix(w, "…")
				require.True(t, slices.Contains(words, w) || strings.Contains(it.Content, w), "word %q not in %q", w, it.Content)
			}
		}
	})
}

func TestExtractiveScansBoundedByShare(t *testing.T) {
	// One sentence of over a megabyte, its fact near the start.
	long := "Build 4711 started " + strings.Repeat("and went on ", 100_000)
	items := []Item{{ID: "x", Priority: Medium, Seq: 1, Content: long}}
	m := newMeter(EstimateCounter{}, 50)
	var x extractor
	l := &sumLine{}
	used := m.fill(&x, l, &items[0], 0, 200)
	require.Positive(t, used)
	assert.LessOrEqual(t, l.last.next, m.window(200), "scanned no further than its window")
	assert.True(t, strings.HasPrefix(string(l.buf), "[x] Build 4711"), string(l.buf))
	assert.True(t, strings.HasSuffix(string(l.buf), " …"), "the cut is marked")

	s, err := Extractive{}.Summarize(items, 50, nil)
	require.NoError(t, err)
	assert.Contains(t, s, "4711")
	assert.LessOrEqual(t, EstimateCounter{}.Count(s), int64(50))
}
