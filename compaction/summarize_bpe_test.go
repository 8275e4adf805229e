package compaction

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// bpeLike counts roughly the way a byte-level BPE does, without being one:
// text splits into pieces (a run of letters, one more token per five
// letters; two digits; each byte of punctuation; each byte of a non-ASCII
// character, so CJK costs three tokens a character, far more than bytes/4;
// a run of whitespace, but a single space joins what follows). Like BPE it
// is not additive (Count("ab") < Count("a")+Count("b")), and it is denser
// on digits and punctuation than units assumes, so a summary of facts
// predicted from prose comes out over on its first count.
var bpeLike = CounterFunc(func(s string) int64 {
	var t int64
	for i := 0; i < len(s); {
		j := i + 1
		switch k := byteKind[s[i]]; k {
		case bkLetter, bkDigit:
			for j < len(s) && byteKind[s[j]] == k {
				j++
			}
			if k == bkLetter {
				t += 1 + int64(j-i-1)/5
			} else {
				t += int64(j-i+1) / 2
			}
		case bkSpace:
			if s[i] == ' ' && j < len(s) && byteKind[s[j]] != bkSpace {
				break
			}
			for j < len(s) && byteKind[s[j]] == bkSpace {
				j++
			}
			t++
		default:
			t++
		}
		i = j
	}
	return t
})

// countingCounter counts the calls of c on texts longer than long: the
// ones that cost under a real tokenizer.
type countingCounter struct {
	c     Counter
	long  int
	calls atomic.Int64
}

func (cc *countingCounter) Count(s string) int64 {
	if len(s) > cc.long {
		cc.calls.Add(1)
	}
	return cc.c.Count(s)
}

func TestBPELikeCounter(t *testing.T) {
	assert.Equal(t, int64(1), bpeLike.Count("word"))
	assert.Equal(t, int64(1), bpeLike.Count(" word"), "a single space joins the word")
	assert.Equal(t, int64(3), bpeLike.Count("12345"))
	assert.Equal(t, int64(6), bpeLike.Count("日本"), "more tokens than bytes/4")
	assert.Less(t, bpeLike.Count("ab cd"), bpeLike.Count("ab ")+bpeLike.Count("cd")+bpeLike.Count(" "), "not additive")
}

// benchItemsUnder is benchItems with Tokens counted under c, as a shell
// configured with c records them.
func benchItemsUnder(n int, c Counter) []Item {
	items := benchItems(n, false)
	for i := range items {
		items[i].Tokens = c.Count(items[i].Content)
		items[i].LightTokens = LightTokens(items[i].Content, c)
	}
	return items
}

// TestExtractiveUnderBPELike: under a counter other than the estimate the
// summary is built in bytes and counted as a whole, a bounded number of
// times (not per sentence or word, which cost 120× the pack goal under
// o200k), never exceeds its limit, keeps its facts verbatim, uses most of
// its limit, and is the same text every time.
func TestExtractiveUnderBPELike(t *testing.T) {
	for _, tc := range []struct {
		name  string
		c     Counter
		items []Item
	}{
		{"bench/bpeLike", bpeLike, benchItemsUnder(1000, bpeLike)[1:990]},
		{"bench/words", counters[1], benchItemsUnder(1000, counters[1])[1:990]},
		{"facts/bpeLike/not precounted", bpeLike, factItems},
		{"cjk/bpeLike", bpeLike, []Item{{ID: "zh", Priority: Medium, Seq: 1, Content: strings.Repeat("构建 4711 在 /srv/app/releases/v2.3.1 失败。\n", 40)}}},
	} {
		for _, max := range []int64{40, 300, 2000, 6000} {
			t.Run(fmt.Sprintf("%s/max=%d", tc.name, max), func(t *testing.T) {
				cc := &countingCounter{c: tc.c, long: 64}
				s, err := Extractive{}.Summarize(tc.items, max, cc)
				require.NoError(t, err)
				n := tc.c.Count(s)
				require.LessOrEqual(t, n, max, "over its limit")
				require.NotEmpty(t, s)
				assert.LessOrEqual(t, cc.calls.Load(), int64(scaledCounts), "counted whole, at most %d times", scaledCounts)
				again, err := Extractive{}.Summarize(tc.items, max, tc.c)
				require.NoError(t, err)
				require.Equal(t, s, again, "deterministic")
				if max >= 300 && len(tc.items) > 100 {
					// Plenty to say: most of the limit is used.
					assert.Greater(t, n*10, max*7, "%d of %d tokens used", n, max)
					assert.True(t, strings.Contains(s, "] Observation ") || strings.Contains(s, "] … 9"), "facts kept")
					if max >= 2000 {
						assert.True(t, strings.Contains(s, " service-"), "facts kept")
					}
				}
				t.Logf("%d of %d tokens, %d bytes, %d whole counts", n, max, len(s), cc.calls.Load())
			})
		}
	}
}

// TestExtractiveFactsUnderBPELike is TestExtractiveKeepsFactsVerbatim
// under bpeLike: with room, every fact is there verbatim.
func TestExtractiveFactsUnderBPELike(t *testing.T) {
	s, err := Extractive{}.Summarize(factItems, 400, bpeLike)
	require.NoError(t, err)
	require.LessOrEqual(t, bpeLike.Count(s), int64(400))
	for _, f := range facts {
		assert.Contains(t, s, f)
	}
}

// TestExtractiveHostileCounters: counters the prediction cannot follow
// (more tokens than bytes, which no byte-level BPE has; a count that jumps
// at the first line; one that grows with the square of the length) still
// get a summary within the limit, the same every time; a counter that
// turns negative on long texts makes the scaled path give up, and the
// exact path's count reports it.
func TestExtractiveHostileCounters(t *testing.T) {
	items := benchItemsUnder(50, EstimateCounter{}) // Tokens of another counter: a wrong hint costs time only
	for name, c := range map[string]Counter{
		"double":  CounterFunc(func(s string) int64 { return 2 * int64(len(s)) }),
		"newline": CounterFunc(func(s string) int64 { return int64(len(s)) + 250*int64(strings.Count(s, "\n")) }),
		"square":  CounterFunc(func(s string) int64 { return int64(len(s)) * int64(len(s)) / 64 }),
	} {
		for _, max := range []int64{60, 300, 1000} {
			t.Run(fmt.Sprintf("%s/max=%d", name, max), func(t *testing.T) {
				s, err := Extractive{}.Summarize(items, max, c)
				require.NoError(t, err)
				require.LessOrEqual(t, c.Count(s), max)
				again, _ := Extractive{}.Summarize(items, max, c)
				require.Equal(t, s, again)
			})
		}
	}
	negative := CounterFunc(func(s string) int64 {
		if len(s) > 100 {
			return -1
		}
		return int64(len(s))
	})
	var x extractor
	_, _, ok := x.summarizeScaled(itemView{items: items}, "[summary of 50 items]", 1000, negative, nil)
	require.False(t, ok, "a negative count ends the scaled path")
	_, err := Fit(items, 2000, FitOptions{Counter: negative, MinLevel: LevelModerate})
	require.ErrorIs(t, err, ErrNegativeTokens)
}

// TestFitUnderBPELike: a Moderate pack under bpeLike fits, its Tokens are
// the recount of what it emits, and its summary was counted once.
func TestFitUnderBPELike(t *testing.T) {
	items := benchItemsUnder(1000, bpeLike)
	cc := &countingCounter{c: bpeLike, long: 2000}
	var f Fitter
	for _, budget := range []int64{2000, 8000, 30000} {
		opts := FitOptions{Counter: cc, TrustIDs: true}
		res, err := f.Fit(items, budget, opts)
		require.NoError(t, err)
		if budget >= 8000 {
			require.Equal(t, LevelModerate, res.Level, "budget %d", budget)
		}
		checkFit(t, items, budget, FitOptions{Counter: bpeLike, TrustIDs: true}, res)
		var sum int64
		for _, it := range res.Items {
			sum += bpeLike.Count(it.Content)
		}
		require.Equal(t, sum, res.Tokens)
		require.LessOrEqual(t, res.Tokens, budget)
	}
	assert.LessOrEqual(t, cc.calls.Load(), int64(3*scaledCounts))
}

// namedCounter is countingCounter with a name (see Named).
type namedCounter struct {
	countingCounter
	name string
}

func (n *namedCounter) Name() string { return n.name }

// TestFitterRemembersVerifiedLight: a Fitter under a named counter counts
// a kept item's Light content (to check its LightTokens) in the first
// pack only; a later pack of the same items counts nothing but its
// summary, and its Tokens are still the recount of what it emits. A
// changed content, a wrong LightTokens, another counter name or a counter
// without a name are counted again (and a wrong LightTokens is still
// caught).
func TestFitterRemembersVerifiedLight(t *testing.T) {
	items := benchItemsUnder(1000, bpeLike) // trailing spaces: Light changes every content
	opts := func(c Counter) FitOptions { return FitOptions{Counter: c, TrustIDs: true} }
	named := &namedCounter{countingCounter{c: bpeLike, long: 64}, "bpe-like"}
	var f Fitter
	first, err := f.Fit(items, 8000, opts(named))
	require.NoError(t, err)
	require.Equal(t, LevelModerate, first.Level)
	checkFit(t, items, 8000, opts(bpeLike), first)
	kept := int64(len(first.Items) - 1)
	require.Greater(t, named.calls.Load(), kept, "the first pack counts each kept Light content, and the summary")

	named.calls.Store(0)
	again, err := f.Fit(items, 8000, opts(named))
	require.NoError(t, err)
	require.Equal(t, first, again)
	require.LessOrEqual(t, named.calls.Load(), int64(scaledCounts), "only the summary is counted")

	// A changed content with the same id, and a wrong LightTokens, are
	// counted again; the wrong one is caught.
	changed := slices.Clone(items)
	last := len(changed) - 1
	changed[last].Content += " Extra words here. "
	changed[last].Tokens = bpeLike.Count(changed[last].Content)
	changed[last].LightTokens = LightTokens(changed[last].Content, bpeLike)
	changed[last-1].LightTokens++
	named.calls.Store(0)
	res, err := f.Fit(changed, 8000, opts(named))
	require.NoError(t, err)
	checkFit(t, changed, 8000, opts(bpeLike), res)
	require.Greater(t, named.calls.Load(), int64(2), "the changed and the wrong items are counted")

	// Another name, or none: nothing is remembered.
	other := &namedCounter{countingCounter{c: bpeLike, long: 64}, "other"}
	anonymous := &countingCounter{c: bpeLike, long: 64}
	for _, tc := range []struct {
		c     Counter
		calls *atomic.Int64
	}{{other, &other.calls}, {anonymous, &anonymous.calls}, {other, &other.calls}} {
		tc.calls.Store(0)
		res, err := f.Fit(items, 8000, opts(tc.c))
		require.NoError(t, err)
		require.Equal(t, first, res)
		require.Greater(t, tc.calls.Load(), kept, "counted again")
	}
}

// lineCounter is a named bpeLike that promises LineAdditive, which bpeLike
// keeps: a newline is a piece of its own and "[" begins one.
type lineCounter struct{ namedCounter }

func (*lineCounter) CountsAddOverLines() {}

// TestFitterRemembersSummaryLines: under a LineAdditive counter the same
// pack again counts nothing at all (its kept contents were checked, its
// summary's lines are known), a pack after one more handle counts a few
// lines, and both are the packs a counter without the promise gives,
// their Tokens the recount of what they emit.
func TestFitterRemembersSummaryLines(t *testing.T) {
	items := benchItemsUnder(1000, bpeLike)
	lc := &lineCounter{namedCounter{countingCounter{c: bpeLike, long: -1}, "bpe-like"}}
	opts := FitOptions{Counter: lc, TrustIDs: true}
	plain := FitOptions{Counter: bpeLike, TrustIDs: true}
	var f Fitter
	first, err := f.Fit(items, 8000, opts)
	require.NoError(t, err)
	want, err := Fit(items, 8000, plain)
	require.NoError(t, err)
	require.Equal(t, want, first)
	summary := first.Items[slices.IndexFunc(first.Items, func(it Item) bool { return it.Kind == SummaryKind })].Content
	lines := int64(strings.Count(summary, "\n"))
	require.Greater(t, lines, int64(20))

	lc.calls.Store(0)
	again, err := f.Fit(items, 8000, opts)
	require.NoError(t, err)
	require.Equal(t, first, again)
	require.Zero(t, lc.calls.Load(), "nothing counted: the same pack")

	grown := append(slices.Clone(items), Item{ID: "new", Priority: Medium, Seq: 1001, Content: benchContent(1000)})
	grown[len(grown)-1].Tokens = bpeLike.Count(grown[len(grown)-1].Content)
	grown[len(grown)-1].LightTokens = LightTokens(grown[len(grown)-1].Content, bpeLike)
	lc.calls.Store(0)
	res, err := f.Fit(grown, 8000, opts)
	require.NoError(t, err)
	want, err = Fit(grown, 8000, plain)
	require.NoError(t, err)
	require.Equal(t, want, res)
	checkFit(t, grown, 8000, plain, res)
	require.NotEqual(t, summary, res.Items[slices.IndexFunc(res.Items, func(it Item) bool { return it.Kind == SummaryKind })].Content)
	require.Positive(t, lc.calls.Load(), "the new lines are counted")
	require.Less(t, lc.calls.Load()*4, lines, "a few lines counted, not the summary: %d calls", lc.calls.Load())
	t.Logf("summary of %d lines; one handle later, %d counts", lines, lc.calls.Load())
}

// TestAppendTruncatedUnits: under a unit meter a shortened sentence adds
// up its words' units instead of scanning what it built; the sum must be
// the units of the text, so the text never costs more than it was given.
func TestAppendTruncatedUnits(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		sentence := genContent(t)
		left := rapid.Int64Range(0, 40_000).Draw(t, "left")
		clipped := rapid.Bool().Draw(t, "clipped")
		m := newUnitMeter(100, rapid.Int64Range(1, 3000).Draw(t, "unit"))
		var x extractor
		buf := x.appendTruncated(nil, sentence, left, m, clipped)
		if len(buf) > 0 {
			require.LessOrEqual(t, units(buf)*m.unit, left, "%q", buf)
		}
	})
}

func TestScaledArithmetic(t *testing.T) {
	require.Equal(t, int64(3), predict(2_500_000, 1), "rounded up")
	require.Equal(t, int64(5), predict(2_500_000, 2))
	require.Equal(t, int64(math.MaxInt64), predict(math.MaxInt64, math.MaxInt64), "saturates")
	require.Equal(t, int64(6), mulDiv(4, 3, 2))
	require.Equal(t, int64(math.MaxInt64), mulDiv(math.MaxInt64, 4, 2), "saturates")
	require.Equal(t, int64(1), milli(0))
	require.Equal(t, int64(2), milli(1001))
	require.Equal(t, int64(maxUnit), milli(math.MaxInt64))
	require.Equal(t, int64(1_000_000), tokensPerUnit(itemView{items: []Item{{Content: "no tokens known"}}}))
}
