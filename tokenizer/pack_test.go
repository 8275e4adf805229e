package tokenizer

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/stateindex/stateindex/compaction"
)

// corpusItems cuts the corpus samples into handles of about 700 bytes at
// line ends (compact JSON, one line, at commas), each counted under c when
// added, as the server does (Tokens and LightTokens), followed by n
// handles of agent notes with hex ids, numbers and paths.
func corpusItems(tb testing.TB, c Counter, n int) []compaction.Item {
	var contents []string
	for _, name := range corpus {
		text := readCorpus(tb, name)
		sep := "\n"
		if name == "compact.json" {
			sep = ","
		}
		var cur strings.Builder
		for _, piece := range strings.SplitAfter(text, sep) {
			cur.WriteString(piece)
			if cur.Len() >= 700 {
				contents = append(contents, cur.String())
				cur.Reset()
			}
		}
		if cur.Len() > 0 {
			contents = append(contents, cur.String())
		}
	}
	for i := range n {
		contents = append(contents, fmt.Sprintf("Observation %d: the build of service-%d took %d.%d s on runner ci-%d. ", i, i%37, i%9+1, i%10, i%4)+
			fmt.Sprintf("Logs for this run are kept in /var/log/build/%d.log for a week. ", i)+
			"The cache was warm and most of the time went into linking the final binary. ")
	}
	prios := []compaction.Priority{compaction.High, compaction.Medium, compaction.Medium, compaction.Low, compaction.Background}
	items := make([]compaction.Item, len(contents))
	for i, s := range contents {
		items[i] = compaction.Item{ID: fmt.Sprintf("%016x%016x", uint64(i)*0x9e3779b97f4a7c15, uint64(i+1)*0xbf58476d1ce4e5b9),
			Priority: prios[i%len(prios)], Seq: int64(i + 1), Content: s, Tokens: c.Count(s), LightTokens: compaction.LightTokens(s, c)}
	}
	return items
}

// TestPacksUnderBPE: packs fitted under o200k_base and cl100k_base over
// the corpus (English, Go, compact JSON, Chinese) and agent notes never
// exceed their budget, their Tokens are the recount of every content they
// emit, one at a time, under the same counter, the summary's words are its
// items' verbatim, and a second pack from the same Fitter (which then
// counts only the summary) is the same pack.
func TestPacksUnderBPE(t *testing.T) {
	for _, name := range []string{O200kBase, Cl100kBase} {
		c := MustNew(name)
		items := corpusItems(t, c, 400)
		byID := map[string]string{}
		for _, it := range items {
			byID[it.ID] = it.Content
		}
		for _, budget := range []int64{600, 2000, 8000, 20000} {
			t.Run(fmt.Sprintf("%s/budget=%d", name, budget), func(t *testing.T) {
				var f compaction.Fitter
				opts := compaction.FitOptions{Counter: c, TrustIDs: true}
				res, err := f.Fit(items, budget, opts)
				require.NoError(t, err)
				var recount int64
				summaries := 0
				for _, it := range res.Items {
					n := c.Count(it.Content)
					require.Equal(t, n, it.Tokens, "item %s", it.ID)
					recount += n
					if it.Kind != compaction.SummaryKind {
						continue
					}
					summaries++
					for _, line := range strings.Split(it.Content, "\n")[1:] {
						id, rest, ok := strings.Cut(strings.TrimPrefix(line, "["), "] ")
						require.True(t, ok, "line %q", line)
						src, known := byID[id]
						require.True(t, known, "line %q names no item", line)
						for _, w := range strings.Fields(rest) {
							if w != "…" {
								require.Contains(t, src, w, "word of line %q", line)
							}
						}
					}
				}
				require.Equal(t, recount, res.Tokens, "Tokens is the recount of what the pack emits")
				require.LessOrEqual(t, res.Tokens, budget)
				if budget >= 2000 {
					require.Equal(t, compaction.LevelModerate, res.Level)
					require.Equal(t, 1, summaries)
				}
				again, err := f.Fit(items, budget, opts)
				require.NoError(t, err)
				require.Equal(t, res, again, "deterministic")
				// Counted whole (the counter without its LineAdditive
				// promise), the summary is counted at most three times,
				// almost always once, and the pack is the same.
				whole := &wholeCounts{c: c}
				var g compaction.Fitter
				res, err = g.Fit(items, budget, compaction.FitOptions{Counter: whole, TrustIDs: true})
				require.NoError(t, err)
				require.Equal(t, again, res)
				require.LessOrEqual(t, whole.summaries, 3)
				t.Logf("summary counted %d times", whole.summaries)
				t.Logf("level %v, %d of %d tokens, %d items", res.Level, res.Tokens, budget, len(res.Items))
			})
		}
	}
}

// TestExtractiveUnderBPE: the extractive summary of the corpus items,
// under each encoding and a range of limits, fits its limit as the
// encoding counts it and uses most of it (there is more to say).
func TestExtractiveUnderBPE(t *testing.T) {
	for _, name := range []string{O200kBase, Cl100kBase} {
		c := MustNew(name)
		items := corpusItems(t, c, 60)
		for _, max := range []int64{20, 100, 500, 1500, 4000} {
			t.Run(fmt.Sprintf("%s/max=%d", name, max), func(t *testing.T) {
				s, err := compaction.Extractive{}.Summarize(items, max, c)
				require.NoError(t, err)
				n := c.Count(s)
				require.LessOrEqual(t, n, max)
				if max >= 100 {
					require.Greater(t, n*10, max*7, "%d of %d tokens used", n, max)
				}
				t.Logf("%d of %d tokens", n, max)
			})
		}
	}
}

// TestCountsAddOverLines checks the promise compaction.LineAdditive makes
// for both encodings: a text split after a newline that "[" follows
// counts as its two parts. The left parts end in every kind of piece the
// pre-tokenizers have (words, digits, punctuation that absorbs newlines,
// slashes, runs of blanks and newlines, CJK, an unfinished UTF-8
// sequence), the right ones begin with "[" followed by each of those, and
// the corpus lines are tried in every pairing of neighbours.
func TestCountsAddOverLines(t *testing.T) {
	lefts := []string{"", "word", "x 42", "end.", "a …", "path/", "a/b//", "?!", "  ", "\t", "x \n", "\n\n", "\r", "日本語", "\xe6\x97", "'s", "[id]", "…", "---"}
	rights := []string{"", "x", "/", "//a", "\n", " ", "  a", "…", "42", "日本", "'s", "]", "[", "\r\n"}
	for _, name := range []string{O200kBase, Cl100kBase} {
		c := MustNew(name)
		require.Implements(t, (*compaction.LineAdditive)(nil), c)
		check := func(a, b string) {
			require.Equal(t, c.Count(a+b), c.Count(a)+c.Count(b), "%s: %q + %q", name, a, b)
		}
		for _, l := range lefts {
			for _, nl := range []string{"\n", "\r\n", " \n", "\n\n", "…\n", "/\n", "\n\r\n"} {
				for _, r := range rights {
					check(l+nl, "["+r)
				}
			}
		}
		for _, sample := range corpus {
			lines := strings.SplitAfter(readCorpus(t, sample), "\n")
			for i := 0; i+1 < len(lines); i++ {
				check(lines[i], "["+lines[i+1])
				check(strings.Join(lines[max(0, i-3):i+1], ""), "[0] "+strings.Join(lines[i+1:min(len(lines), i+4)], ""))
			}
		}
	}
}

// TestCountsAddOverLinesRandom is TestCountsAddOverLines on random texts
// of tricky pieces.
func TestCountsAddOverLinesRandom(t *testing.T) {
	pieces := []string{"a", "Word", " ", "  ", "\t", "\n", "\r\n", "\n\n", "…", "/", "//", ".", "?!", "42", "1234567", "日本", "語", "'s", "'LL", "[", "]", "-", "_x", "\u00a0", "\u3000", "é", "\xe6"}
	counters := []Counter{MustNew(O200kBase), MustNew(Cl100kBase)}
	rapid.Check(t, func(t *rapid.T) {
		gen := func(label string) string {
			var b strings.Builder
			for range rapid.IntRange(0, 12).Draw(t, label+" pieces") {
				b.WriteString(rapid.SampledFrom(pieces).Draw(t, label))
			}
			return b.String()
		}
		a, b := gen("left")+"\n", "["+gen("right")
		for _, c := range counters {
			if c.Count(a+b) != c.Count(a)+c.Count(b) {
				t.Fatalf("%s: %q + %q: %d != %d + %d", c.Name(), a, b, c.Count(a+b), c.Count(a), c.Count(b))
			}
		}
	})
}

// BenchmarkFitBPE is AssembleContextPack's compaction step at 1,000
// handles and a budget of 8,000 under each encoding, the handles counted
// when added (Tokens and LightTokens), through one Fitter as the server
// keeps one: "cold", a new Fitter every pack (every kept Light content
// checked, every summary line counted: a frame's first pack); "same", the
// same frame again (nothing counted); "turn", one handle more each pack,
// the oldest leaving (what changes between two turns of an agent).
// cpu-ns/op is the process's CPU time per pack, steadier than ns/op on a
// shared machine.
func BenchmarkFitBPE(b *testing.B) {
	const n, window = 1000, 4000
	for _, name := range []string{O200kBase, Cl100kBase} {
		c := MustNew(name)
		prios := []compaction.Priority{compaction.High, compaction.Medium, compaction.Medium, compaction.Low, compaction.Background}
		all := make([]compaction.Item, n+window)
		for i := range all {
			s := fmt.Sprintf("Observation %d: the build of service-%d took %d.%d s on runner ci-%d. ", i, i%37, i%9+1, i%10, i%4) +
				"The cache was warm and most of the time went into linking the final binary. " +
				fmt.Sprintf("Logs for this run are kept in /var/log/build/%d.log for a week. ", i) +
				"Nothing in the dependency graph changed since the previous run, so the difference comes from the runner itself. " +
				"A second run on the same runner was about as slow, which rules out a cold disk. " +
				"The team suspects the new virtualization layer, but nobody has measured it yet. " +
				"Until then the slow runners stay in the pool, with a note on the dashboard. " +
				strings.Repeat("More details follow in the attached report. ", 3)
			all[i] = compaction.Item{ID: fmt.Sprintf("%016x%016x", uint64(i)*0x9e3779b97f4a7c15, uint64(i+1)*0xbf58476d1ce4e5b9),
				Priority: prios[i%len(prios)], Seq: int64(i + 1), Content: s, Tokens: c.Count(s), LightTokens: compaction.LightTokens(s, c)}
		}
		opts := compaction.FitOptions{Counter: c, TrustIDs: true}
		for _, mode := range []string{"cold", "same", "turn"} {
			b.Run(name+"/"+mode, func(b *testing.B) {
				var f compaction.Fitter
				k := 0
				b.ReportAllocs()
				start := cpuTime()
				for b.Loop() {
					if mode == "cold" {
						f = compaction.Fitter{}
					}
					items := all[:n]
					if mode == "turn" {
						k = (k + 1) % window
						items = all[k : k+n]
					}
					res, err := f.Fit(items, 8000, opts)
					if err != nil || res.Tokens > 8000 || res.Level != compaction.LevelModerate {
						b.Fatal(err, res.Tokens, res.Level)
					}
				}
				if d := cpuTime() - start; d > 0 {
					b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "cpu-ns/op")
				}
			})
		}
	}
}

// wholeCounts is a counter without the LineAdditive promise that counts
// its calls on summaries.
type wholeCounts struct {
	c         Counter
	summaries int
}

func (w *wholeCounts) Count(s string) int64 {
	if strings.HasPrefix(s, "[summary of ") && strings.Contains(s, "\n") {
		w.summaries++
	}
	return w.c.Count(s)
}
