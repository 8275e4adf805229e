package compaction

import (
	"cmp"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// Summarizer condenses items into one text of at most maxTokens tokens under
// c. It must be deterministic (the same items, limit and counter give the
// same text: summaries are recorded in events and must replay) and must not
// exceed maxTokens: Fit and Compact check and return ErrSummaryOverBudget.
// An empty text means "nothing worth keeping fits"; Fit then tries the next
// level. Items arrive in input order, never empty.
type Summarizer interface {
	Summarize(items []Item, maxTokens int64, c Counter) (string, error)
}

// Extractive is the default Summarizer. It writes no prose of its own: it
// copies whole sentences out of the items, preferring those that hold exact
// facts (numbers, ids such as hex strings, UUIDs or abc-123, file paths,
// URLs, snake_case names, e-mail addresses), because those are what an agent
// cannot reconstruct and what lossy summaries lose. Sentences are kept
// verbatim but for runs of whitespace, which become one space.
//
// The output is a header line "[summary of N items]" followed by one line
// per item that earned space, "[id] sentence sentence…", in recency order
// (oldest first). Items are visited by priority, then recency (newest
// first), in three passes: fact sentences, each item offered an even share
// of what is left (at least about 32 tokens, so that under a tight limit the
// important, recent items keep their facts rather than everyone keeping a
// few words); then fact sentences again, with whatever is left; then the
// other sentences, shared out the same way. Within an item sentences keep
// their order, facts before the rest. Once an item's line has begun it stops
// at the first sentence that does not fit, and once less than a share is
// left the visit ends after 16 items in a row got nothing. An item with
// nothing yet skips other sentences to find its first fact; a fact sentence
// too long for it keeps its fact words and as many others as fit, gaps
// marked "…". If not even the header fits, the result is "".
//
// The work is bounded by the output, not the input: an item is scanned only
// a few times its share ahead of where its line stands (a sentence running
// past that is judged on its part within: it is too long to take whole, and
// only its facts there can be kept, followed by "…"), and all the scanning
// of one summary is capped at a fixed multiple of its limit, after which
// the items not yet visited get nothing.
//
// Sentences end at a newline or at '.', '!' or '?' followed by whitespace.
// Under EstimateCounter the packing is exact (it works in bytes). Under
// another counter it packs to a cheap prediction of the tokens (the pieces
// a byte-level BPE splits text into, at a rate calibrated on the items'
// own Tokens: nothing is counted for it), and counts the finished text
// once; only if that count is over the limit, or well under it, does it
// pack again at the rate it measured and count again, at most three counts
// in all (a BPE counter costs about half a microsecond a token: counting
// each sentence and word as they were packed cost a pack of 1,000 handles
// 120× its goal). Should no count fit, it packs in tokens, adding up the
// pieces' counts, and drops the lines that earned their space last until
// the whole fits. Whatever the counter, the text returned has been counted
// whole under it (line by line under a LineAdditive counter) and fits.
type Extractive struct{}

// minShareTokens is the least space an item is offered while space remains.
const minShareTokens = 32

// minTruncTokens is the least room worth shortening a sentence into.
const minTruncTokens = 3

// maxMisses bounds the work once space runs low: after this many items in a
// row got nothing, the rest is not visited.
const maxMisses = 16

// Scan bounds, in bytes. One fill of a line looks at most
// windowPerToken×(its room in tokens)+windowSlack bytes ahead; one summary
// scans at most scanPerToken×maxTokens+scanSlack bytes in all, each item
// visited counting visitCost more.
const (
	windowPerToken = 16
	windowSlack    = 256
	scanPerToken   = 64
	scanSlack      = 16 << 10
	visitCost      = 64
	roomSlack      = 8 // leading blanks a sentence that fits may have
)

// sumLine is one item's line being built.
type sumLine struct {
	idx       int32  // input index
	rank      int32  // visit order: lower earned its space first
	pos       [2]int // where each kind's scan resumes: [0] facts, [1] the rest
	buf       []byte
	started   bool
	exhausted [2]bool // no more sentences of that kind
	seenPlain bool    // the facts scan has passed a sentence of the other kind
	last      sentence
}

// sentence caches the last sentence scanned in a line's content, so that
// one a pass could not take is not scanned again by the next.
type sentence struct {
	start, a, b, next, lim int
	clipped                bool
	fact                   int8 // 0 unknown, 1 no, 2 yes
	irregular              int8 // the same, for irregular whitespace
	ok                     bool
}

// scan returns the sentence starting at pos in s, looking no further than
// lim, from the cache if it is there; it charges m for the bytes scanned.
func (l *sumLine) scan(m *meter, s string, pos, lim int) *sentence {
	c := &l.last
	if !c.ok || c.start != pos || (c.clipped && c.lim != lim) {
		a, b, next, clipped := scanSentenceUpTo(s, pos, lim)
		m.scanLeft -= int64(next - pos)
		c.start, c.a, c.b, c.next, c.lim = pos, a, b, next, lim // field by field: see addUnit
		c.clipped, c.fact, c.irregular, c.ok = clipped, 0, 0, true
	}
	return c
}

// isIrregular reports whether the sentence has whitespace that
// appendCollapsed rewrites, checked on first use.
func (sn *sentence) isIrregular(s string) bool {
	if sn.irregular == 0 {
		sn.irregular = 1
		if irregularSpace(s[sn.a:sn.b], false) {
			sn.irregular = 2
		}
	}
	return sn.irregular == 2
}

func (sn *sentence) isFact(s string) bool {
	if sn.fact == 0 {
		sn.fact = 1
		if hasFact(s[sn.a:sn.b]) {
			sn.fact = 2
		}
	}
	return sn.fact == 2
}

// Summarize implements Summarizer.
func (Extractive) Summarize(items []Item, maxTokens int64, c Counter) (string, error) {
	var x extractor
	text, _ := x.summarize(itemView{items: items}, maxTokens, c, nil)
	return text, nil
}

// itemView is a list of items: items itself, or the items at idx (input
// order kept), so that a subset is summarized without copying items.
type itemView struct {
	items []Item
	idx   []int32 // nil: all of items
}

func (v *itemView) len() int {
	if v.idx != nil {
		return len(v.idx)
	}
	return len(v.items)
}

func (v *itemView) at(k int) *Item {
	if v.idx != nil {
		return &v.items[v.idx[k]]
	}
	return &v.items[k]
}

// slice returns the items as a slice, copying them if they are a subset.
func (v *itemView) slice() []Item {
	if v.idx == nil {
		return v.items
	}
	out := make([]Item, len(v.idx))
	for k, i := range v.idx {
		out[k] = v.items[i]
	}
	return out
}

// extractor holds Extractive's working memory, which a caller summarizing
// repeatedly may keep and reuse.
type extractor struct {
	lines []sumLine
	arena []byte
	out   []int32
	words []word
	known lineCounts
}

// lineCounts remembers the counts of summary lines under a LineAdditive
// counter called name: those of the last summary (cur) and of this one
// (next), so that it holds no more than two summaries' lines.
type lineCounts struct {
	name      string
	cur, next map[string]int64
}

// count returns Count(text) under c: line by line, each line's count taken
// from those remembered where it is known, if c is LineAdditive.
func (x *extractor) count(c Counter, text string) int64 {
	la, ok := c.(LineAdditive)
	if !ok || la.Name() == "" {
		return c.Count(text)
	}
	k := &x.known
	if name := la.Name(); name != k.name {
		clear(k.cur)
		clear(k.next)
		k.name = name
	}
	if k.next == nil {
		k.next = map[string]int64{}
	}
	var total int64
	for text != "" {
		seg := text
		if i := strings.Index(text, "\n["); i >= 0 {
			seg = text[:i+1]
		}
		text = text[len(seg):]
		n, hit := k.next[seg]
		if !hit {
			if n, hit = k.cur[seg]; !hit {
				if n = c.Count(seg); n < 0 {
					return n
				}
			}
			k.next[seg] = n
		}
		total += n
	}
	return total
}

// rotate ends a summary: its lines are the ones the next may find.
func (k *lineCounts) rotate() {
	clear(k.cur)
	k.cur, k.next = k.next, k.cur
}

// orderHint is what a caller may already know of the items to summarize:
// whether they are in recency order and how many have each priority.
type orderHint struct {
	sorted bool
	counts [bucketCount]int32
}

// summarize writes the summary of items in at most maxTokens under c and
// returns it with its count under c (0 for ""), which is over maxTokens or
// negative only if c misbehaves (it is not deterministic, or negative).
//
// Under EstimateCounter (or a counter embedding it) the meter works in
// bytes and is exact. Under any other counter it works in predicted
// tokens (see units) and the text is then counted; only if that count is
// over, or well under, does it pack and count again (see summarizeScaled),
// falling back after a few counts to the exact, slow meter that counts
// every piece. Whatever the path, the result is counted whole under c
// before it is returned.
func (x *extractor) summarize(items itemView, maxTokens int64, c Counter, hint *orderHint) (string, int64) {
	if c == nil {
		c = EstimateCounter{}
	}
	if items.len() == 0 || maxTokens <= 0 {
		return "", 0
	}
	header := "[summary of " + strconv.Itoa(items.len()) + " items]"
	defer x.known.rotate()
	if t := x.count(c, header); t < 0 || t > maxTokens {
		return "", 0
	}
	if isEstimate(c) {
		x.build(items, header, newByteMeter(maxTokens, satMul(maxTokens, 4), 4), hint)
		return x.finish(header, maxTokens, c)
	}
	if text, t, ok := x.summarizeScaled(items, header, maxTokens, c, hint); ok {
		return text, t
	}
	x.build(items, header, newTokenMeter(c, maxTokens), hint)
	return x.finish(header, maxTokens, c)
}

// Bounds of summarizeScaled: the real counts it may make, the builds
// between two counts, the headroom it leaves below the limit when it
// rescales and the margin it adds to a density it has measured (both in
// parts per thousand), and how much of the limit a text that fits must use
// for it not to try a larger one (in parts per thousand).
const (
	scaledCounts   = 3
	scaledBuilds   = 3
	scaledHeadroom = 20
	scaledMeasured = 20
	scaledEnough   = 800
	maxUnit        = 1 << 24
)

// summarizeScaled builds the summary under a counter other than the
// estimate with a meter that predicts tokens as k × units (see units),
// where k, tokens per unit, comes from the items' own Tokens (counted when
// they were added: nothing is counted here) with a margin (see
// tokensPerUnit). The finished text is counted once. Only if that count is
// over, or under scaledEnough of the limit, is k recalibrated on the text
// itself and the whole repeated, at most scaledCounts counts in all; the
// largest text that fitted is kept. ok is false if no count fitted (or the
// counter returned a negative count): the caller then takes the exact
// path.
func (x *extractor) summarizeScaled(items itemView, header string, maxTokens int64, c Counter, hint *orderHint) (best string, bestTokens int64, ok bool) {
	defer x.release()
	// Rates are integers (millionths of a token a unit), so that the text
	// is the same on every platform (floating point may be fused).
	k := tokensPerUnit(items)
	for range scaledCounts {
		text := ""
		kb := k
		for b := 0; ; b++ {
			x.build(items, header, newUnitMeter(maxTokens, milli(kb)), hint)
			cand := joinSummary(header, x.lines, x.out)
			if len(x.out) == 0 && text != "" {
				break // shrunk past the last line: count the text before
			}
			text = cand
			// The meter adds up pieces; the text as a whole may hold a
			// few units more where pieces meet.
			pred := predict(k, units(text))
			if pred <= maxTokens || b+1 == scaledBuilds || len(x.out) == 0 {
				break
			}
			kb = mulDiv(mulDiv(kb, pred, maxTokens), 1000+scaledHeadroom, 1000)
		}
		if ok && text == best {
			break // the same text again: the content ran out, not the room
		}
		t := x.count(c, text)
		if t < 0 {
			break
		}
		if t <= maxTokens && (!ok || t > bestTokens) {
			best, bestTokens, ok = text, t, true
		}
		if ok && bestTokens >= mulDiv(maxTokens, scaledEnough, 1000) {
			break
		}
		// Over, or well under: this text's own density is now known.
		next := mulDiv(t, 1000*(1000+scaledMeasured), max(units(text), 1))
		if t > maxTokens {
			next = max(next, mulDiv(mulDiv(k, t, maxTokens), 1000+scaledHeadroom, 1000))
		}
		k = next
	}
	return best, bestTokens, ok
}

// milli returns k, in millionths, in thousandths rounded up, between 1 and
// maxUnit.
func milli(k int64) int64 {
	m := k / 1000
	if k%1000 != 0 {
		m++
	}
	return min(max(m, 1), maxUnit)
}

// predict returns the tokens u units make at k millionths of a token a
// unit, rounded up, or MaxInt64 (k, u ≥ 0).
func predict(k, u int64) int64 {
	hi, lo := bits.Mul64(uint64(k), uint64(u))
	if hi >= 1_000_000 {
		return math.MaxInt64
	}
	q, r := bits.Div64(hi, lo, 1_000_000)
	if r > 0 {
		q++
	}
	return int64(min(q, math.MaxInt64))
}

// mulDiv returns a × b ÷ c, rounded down, or MaxInt64 if that is larger
// (a, b ≥ 0, c > 0).
func mulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int64(min(q, math.MaxInt64))
}

// unitMargin is how much more densely a summary may tokenize than the
// items it is cut from, per unit, before a first count comes out over (in
// parts per thousand): fact sentences, ids and "…" marks run a few percent
// denser than the prose around them.
const unitMargin = 150

// tokensSample bounds the items tokensPerUnit looks at: at most this many,
// each of at most tokensSampleBytes, until it has seen tokensSampleTotal
// bytes.
const (
	tokensSample      = 8
	tokensSampleBytes = 8 << 10
	tokensSampleTotal = 4 << 10
)

// tokensPerUnit estimates tokens per unit (see units), in millionths, for
// text cut from items, from up to tokensSample of them (spread over the
// list) whose Tokens are known, plus unitMargin; one token a unit if none
// is known. Nothing is counted.
func tokensPerUnit(items itemView) int64 {
	n := items.len()
	step := max(n/tokensSample, 1)
	var tokens, u int64
	seen := 0
	for k := 0; k < n && seen < tokensSampleTotal; k += step {
		it := items.at(k)
		if it.Tokens <= 0 || len(it.Content) > tokensSampleBytes {
			continue
		}
		tokens = satAdd(tokens, it.Tokens)
		u += units(it.Content)
		seen += len(it.Content)
	}
	if tokens == 0 || u == 0 {
		return 1_000_000
	}
	return mulDiv(tokens, 1000*(1000+unitMargin), u)
}

// satAdd returns a + b, or MaxInt64 if that overflows (a, b ≥ 0).
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// units is a cheap stand-in for a byte-level BPE's token count, used only
// to predict one: it counts the pieces such tokenizers split text into
// before merging (a run of ASCII letters, one token per 8 letters more; up
// to three digits; a run of punctuation, one more per two; a run of
// whitespace, but a single space before a word or punctuation is part of
// it; a non-ASCII character). It is never more than len(s).
func units[S ~string | ~[]byte](s S) int64 {
	var u int64
	for i := 0; i < len(s); {
		c := s[i]
		j := i + 1
		switch cl := byteKind[c]; cl {
		case bkLetter, bkDigit, bkPunct:
			for j < len(s) && byteKind[s[j]] == cl {
				j++
			}
			switch cl {
			case bkLetter:
				u += 1 + int64(j-i)/8
			case bkDigit:
				u += int64(j-i+2) / 3
			default:
				u += 1 + int64(j-i-1)/2
			}
		case bkSpace:
			if c == ' ' && j < len(s) && byteKind[s[j]] != bkSpace {
				break // a single space goes with what follows
			}
			for j < len(s) && byteKind[s[j]] == bkSpace {
				j++
			}
			u++
		default: // a non-ASCII character
			for j < len(s) && s[j]&0xC0 == 0x80 {
				j++
			}
			u++
		}
		i = j
	}
	return u
}

// Byte kinds for units.
const (
	bkOther = iota // non-ASCII
	bkLetter
	bkDigit
	bkSpace
	bkPunct
)

var byteKind = func() (t [256]uint8) {
	for c := 0; c < 0x80; c++ {
		t[c] = bkPunct
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = bkLetter, bkLetter
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = bkDigit
	}
	for _, c := range " \t\n\r\v\f" {
		t[c] = bkSpace
	}
	return t
}()

// isEstimate reports whether c is EstimateCounter or embeds it (as the
// tokenizer package's estimate does), so that it counts ceil(len/4). A
// counter that embeds it yet counts otherwise costs time, never the
// budget: the result is counted under c before it is returned.
func isEstimate(c Counter) bool {
	_, ok := c.(interface{ bytesDiv4() })
	return ok
}

func (EstimateCounter) bytesDiv4() {}

// satMul returns a × b, or MaxInt64 if that overflows (a, b ≥ 0).
func satMul(a, b int64) int64 {
	if b != 0 && a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

// build fills x.lines and x.out (the lines to write, oldest first) with
// the summary of items under meter m, header included in its budget.
func (x *extractor) build(items itemView, header string, m *meter, hint *orderHint) {
	left := m.budget - m.cost(header)
	ord := newVisitOrder(items, hint)
	minShare := minShareTokens * m.perToken
	lines := x.lines[:0]
	// Lines are written into one arena as pass 1 finishes each; a line
	// that grows later moves out on its own.
	arena := x.arena[:0]
	if want := int(min(m.maxTokens, 1<<16)) * 4; cap(arena) < want {
		arena = make([]byte, 0, want)
	}
	misses := 0               // items in a row that got nothing
	for rank := 0; ; rank++ { // pass 1: facts, fair shares
		if left <= m.nl || (left < minShare && misses >= maxMisses) || m.scanLeft <= 0 {
			break // what is left goes to the lines already started
		}
		i, ok := ord.next()
		if !ok {
			break
		}
		m.scanLeft -= visitCost
		share := min(max(left/int64(items.len()-rank), minShare), left)
		// The line is written at the end of the arena; should it outgrow
		// the arena, append moves it out.
		if len(lines) == cap(lines) {
			lines = slices.Grow(lines, 1)
		}
		lines = lines[:len(lines)+1]
		l := &lines[len(lines)-1]
		*l = sumLine{} // zeroed in place, then set field by field: see addUnit
		l.idx, l.rank, l.buf = i, int32(rank), arena[len(arena):len(arena)]
		left -= m.fill(x, l, items.at(int(l.idx)), 0, share)
		misses++
		if !l.started {
			l.buf = nil
			continue
		}
		misses = 0
		if n := len(l.buf); n <= cap(arena)-len(arena) && &l.buf[0] == &arena[len(arena):cap(arena)][0] {
			arena = arena[:len(arena)+n]
			l.buf = l.buf[:n:n] // a later append moves it out
		}
	}
	for k := range lines { // pass 2: facts, what is left
		if left <= m.nl || m.scanLeft <= 0 {
			break
		}
		left -= m.fill(x, &lines[k], items.at(int(lines[k].idx)), 0, left)
	}
	for k := range lines { // pass 3: the other sentences, fair shares
		if left <= m.nl || m.scanLeft <= 0 {
			break
		}
		share := min(max(left/int64(len(lines)-k), minShare), left)
		left -= m.fill(x, &lines[k], items.at(int(lines[k].idx)), 1, share)
	}
	// Write the lines out oldest first.
	out := x.out[:0]
	for k := range lines {
		if lines[k].started {
			out = append(out, int32(k))
		}
	}
	if ord.sorted { // input index is recency
		slices.SortFunc(out, func(a, b int32) int { return cmp.Compare(lines[a].idx, lines[b].idx) })
	} else {
		slices.SortFunc(out, func(a, b int32) int {
			ia, ib := lines[a].idx, lines[b].idx
			if c := cmp.Compare(items.at(int(ia)).Seq, items.at(int(ib)).Seq); c != 0 {
				return c
			}
			return cmp.Compare(ia, ib)
		})
	}
	x.lines, x.arena, x.out = lines, arena, out
}

// finish joins the lines build left and counts the text under c: should
// it count more than maxTokens (the meter is exact for the estimate and
// close for sub-additive tokenizers; the final count is the word), the
// lines that earned their space last are dropped until it fits.
func (x *extractor) finish(header string, maxTokens int64, c Counter) (string, int64) {
	lines, out := x.lines, x.out
	text := joinSummary(header, lines, out)
	t := x.count(c, text)
	for t > maxTokens && len(out) > 0 {
		worst := 0
		for k := range out {
			if lines[out[k]].rank > lines[out[worst]].rank {
				worst = k
			}
		}
		out = slices.Delete(out, worst, worst+1)
		text = joinSummary(header, lines, out)
		t = x.count(c, text)
	}
	x.out = out
	x.release()
	return text, t // t < 0 or > maxTokens: the caller reports the counter
}

// release keeps the buffers, dropping references to the items' memory.
func (x *extractor) release() {
	clear(x.lines)
	x.lines, x.arena, x.out = x.lines[:0], x.arena[:0], x.out[:0]
}

func joinSummary(header string, lines []sumLine, out []int32) string {
	n := len(header)
	for _, k := range out {
		n += 1 + len(lines[k].buf)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(header)
	for _, k := range out {
		b.WriteByte('\n')
		b.Write(lines[k].buf)
	}
	return b.String()
}

// meter measures text in the summarizer's working unit: bytes under
// EstimateCounter, where ceil(len/4) <= max exactly when len <= 4*max (so
// packing is exact), tokens under any other counter, where the pieces'
// counts are added up and the final text is recounted.
type meter struct {
	c         Counter
	bytes     bool
	unit      int64 // > 0: the working unit is a predicted milli-token, unit a unit (see units)
	budget    int64 // in working units
	perToken  int64 // working units per token, about
	maxTokens int64
	nl        int64 // cost of the newline between lines
	sp        int64 // cost of the space between sentences
	scanLeft  int64 // bytes the summary may still scan
}

func scanBudget(maxTokens int64) int64 {
	if maxTokens <= (math.MaxInt64-scanSlack)/scanPerToken {
		return maxTokens*scanPerToken + scanSlack
	}
	return math.MaxInt64
}

// newMeter is the meter Summarize uses for c: in bytes under the estimate
// (4 a token), in tokens otherwise.
func newMeter(c Counter, maxTokens int64) *meter {
	if isEstimate(c) {
		return newByteMeter(maxTokens, satMul(maxTokens, 4), 4)
	}
	return newTokenMeter(c, maxTokens)
}

// newByteMeter measures in bytes, budget of them for a summary of at most
// maxTokens tokens, at about per bytes a token (≥ 1).
func newByteMeter(maxTokens, budget, per int64) *meter {
	return &meter{bytes: true, budget: budget, perToken: per, maxTokens: maxTokens, nl: 1, sp: 1, scanLeft: scanBudget(maxTokens)}
}

// newUnitMeter measures in predicted milli-tokens, unit of them a unit
// (see units), for a summary of at most maxTokens tokens.
func newUnitMeter(maxTokens, unit int64) *meter {
	return &meter{unit: unit, budget: satMul(maxTokens, 1000), perToken: 1000, maxTokens: maxTokens,
		nl: unit, sp: 0, scanLeft: scanBudget(maxTokens)}
}

// newTokenMeter measures in tokens under c, adding up the pieces' counts.
func newTokenMeter(c Counter, maxTokens int64) *meter {
	return &meter{c: c, budget: maxTokens, perToken: 1, maxTokens: maxTokens,
		nl: max(c.Count("\n"), 0), sp: max(c.Count(" "), 0), scanLeft: scanBudget(maxTokens)}
}

func (m *meter) cost(s string) int64 {
	switch {
	case m.bytes:
		return int64(len(s))
	case m.unit > 0:
		return units(s) * m.unit
	}
	return max(m.c.Count(s), 0)
}

func (m *meter) costBytes(b []byte) int64 {
	switch {
	case m.bytes:
		return int64(len(b))
	case m.unit > 0:
		return units(b) * m.unit
	}
	return max(m.c.Count(string(b)), 0)
}

// openCost is what starting a line for it costs: "[" id "] " and the
// newline.
func (m *meter) openCost(it *Item) int64 {
	switch {
	case m.bytes:
		return int64(len(it.ID)) + 3 + m.nl
	case m.unit > 0:
		return (units(it.ID)+2)*m.unit + m.nl
	}
	return max(m.c.Count("["+it.ID+"] "), 0) + m.nl
}

// window is how many bytes one fill of room working units looks ahead.
func (m *meter) window(room int64) int {
	tokens := room / m.perToken
	if tokens >= (1<<40)/windowPerToken {
		return 1 << 40
	}
	return int(tokens*windowPerToken + windowSlack)
}

// bucketCount is the number of priority buckets: the five priorities and
// one for anything invalid.
const bucketCount = int(Background) + 1

// bucket maps a priority to 0 (Critical) … 4 (Background), and anything
// invalid to 5.
func bucket(p Priority) int {
	if p.Valid() {
		return int(p - Critical)
	}
	return int(Background)
}

// visitOrder yields item indices by priority (most important first), then
// recency (newest first). Items in recency order (the usual case) are not
// sorted: each priority is walked from the newest item back, lazily, so
// that the work follows the visit, which stops early.
type visitOrder struct {
	items  itemView
	sorted bool
	counts [bucketCount]int32 // items of each bucket not yet yielded
	b      int                // current bucket
	i      int                // next position to look at in it, going down
	order  []int32            // the sorted order, when not sorted
}

func newVisitOrder(items itemView, hint *orderHint) *visitOrder {
	n := items.len()
	o := &visitOrder{items: items, i: n - 1}
	if hint != nil {
		o.sorted, o.counts = hint.sorted, hint.counts
	} else {
		o.sorted = true
		for k := range n {
			it := items.at(k)
			o.counts[bucket(it.Priority)]++
			if k > 0 && it.Seq < items.at(k-1).Seq {
				o.sorted = false
			}
		}
	}
	if !o.sorted {
		o.order = make([]int32, n)
		for k := range o.order {
			o.order[k] = int32(k)
		}
		slices.SortFunc(o.order, func(a, b int32) int {
			ia, ib := items.at(int(a)), items.at(int(b))
			if c := cmp.Compare(bucket(ia.Priority), bucket(ib.Priority)); c != 0 {
				return c
			}
			if c := cmp.Compare(ib.Seq, ia.Seq); c != 0 {
				return c
			}
			return cmp.Compare(b, a)
		})
	}
	return o
}

func (o *visitOrder) next() (int32, bool) {
	if o.order != nil {
		if len(o.order) == 0 {
			return 0, false
		}
		k := o.order[0]
		o.order = o.order[1:]
		return k, true
	}
	for o.b < bucketCount {
		if o.counts[o.b] > 0 {
			for ; o.i >= 0; o.i-- {
				if bucket(o.items.at(o.i).Priority) == o.b {
					o.counts[o.b]--
					k := o.i
					o.i--
					return int32(k), true
				}
			}
		}
		o.b++
		o.i = o.items.len() - 1
	}
	return 0, false
}

// fill appends to l the sentences of one kind (0 facts, 1 the rest) of
// its content, from where the last fill of that kind stopped, while they
// fit in budget working units; it returns the units used. The first sentence
// of a line also pays for the "[id] " prefix and the newline. Once the line
// has begun, it stops at the first sentence of either kind that does not
// fit (so it rarely classifies what it cannot take); an empty line skips
// other sentences to find its first fact, and shortens that fact sentence
// around its facts if it is too long. It looks no further than m.window
// ahead: a sentence running past that is too long to take whole.
func (m *meter) fill(x *extractor, l *sumLine, it *Item, kind int, budget int64) int64 {
	s := it.Content
	var used int64
	lim := len(s)
	if w := m.window(budget); l.pos[kind] < len(s)-w {
		lim = l.pos[kind] + w
	}
	for !l.exhausted[kind] {
		pos := l.pos[kind]
		if pos >= len(s) {
			l.exhausted[kind] = true
			break
		}
		if pos >= lim || m.scanLeft <= 0 {
			break // looked far enough for this room
		}
		end := lim
		if m.bytes && (l.started || kind == 1) {
			// Here a sentence that does not fit ends the fill: no need to
			// look further than the room (leading blanks aside) to know.
			if room := int(budget-used-m.sp) + roomSlack; room >= 0 && pos < end-room {
				end = pos + room
			}
		}
		sn := l.scan(m, s, pos, end)
		if sn.a == sn.b && !sn.clipped {
			l.pos[kind] = sn.next
			continue
		}
		raw := s[sn.a:sn.b]
		open := m.sp
		if !l.started {
			open = m.openCost(it)
		}
		if sn.clipped {
			// Too long to take whole with this room: an empty line keeps
			// the facts within the window, and the item is done.
			if !l.started && kind == 0 && end == lim && sn.isFact(s) {
				if t := m.truncated(x, l, it, raw, budget-used, open, true); t > 0 {
					l.exhausted = [2]bool{true, true}
					used += t
				}
			}
			return used
		}
		// What the sentence costs, known before copying unless whitespace
		// must be collapsed.
		cost := open + m.cost(raw)
		if used+cost > budget && !(m.bytes && sn.isIrregular(s)) {
			if l.started || kind == 1 {
				return used
			}
			if sn.isFact(s) {
				if t := m.truncated(x, l, it, raw, budget-used, open, false); t > 0 {
					l.pos[kind] = sn.next
					used += t
				}
				return used
			}
			// An empty line keeps looking for its first fact.
			if !l.seenPlain {
				l.seenPlain = true
				l.pos[1] = sn.start
			}
			l.pos[kind] = sn.next
			continue
		}
		if sn.isFact(s) != (kind == 0) {
			// The facts scan meets the other sentences first, in order:
			// the later scan for them can start at the first one.
			if kind == 0 && !l.seenPlain {
				l.seenPlain = true
				l.pos[1] = sn.start
			}
			l.pos[kind] = sn.next
			continue
		}
		mark := len(l.buf)
		l.openLine(it)
		irregular := sn.isIrregular(s)
		l.buf = appendCollapsed(l.buf, raw, irregular)
		if m.bytes && irregular { // now measured exactly
			cost = int64(len(l.buf)-mark) + m.nl*b2i(!l.started)
			if used+cost > budget {
				l.buf = l.buf[:mark]
				if !l.started && kind == 0 {
					if t := m.truncated(x, l, it, raw, budget-used, open, false); t > 0 {
						l.pos[kind] = sn.next
						used += t
					}
				}
				return used
			}
		}
		used += cost
		l.started = true
		l.pos[kind] = sn.next
		if kind == 0 && !l.seenPlain {
			l.pos[1] = sn.next // all before is taken: the other scan starts here
		}
	}
	return used
}

// openLine appends the separator before a sentence: the "[id] " prefix on
// an empty line, a space otherwise.
func (l *sumLine) openLine(it *Item) {
	if l.started {
		l.buf = append(l.buf, ' ')
		return
	}
	l.buf = append(l.buf, '[')
	l.buf = append(l.buf, it.ID...)
	l.buf = append(l.buf, "] "...)
}

// truncated starts l with a shortened form of a fact sentence too long for
// left units, and returns the units used, or 0 if nothing fits. clipped
// says raw is only the start of the sentence.
func (m *meter) truncated(x *extractor, l *sumLine, it *Item, raw string, left, open int64, clipped bool) int64 {
	if left-open < minTruncTokens*m.perToken {
		return 0 // no room for a fact worth keeping
	}
	mark := len(l.buf)
	l.openLine(it)
	body := len(l.buf)
	l.buf = x.appendTruncated(l.buf, raw, left-open, m, clipped)
	if len(l.buf) == body {
		l.buf = l.buf[:mark]
		return 0
	}
	l.started = true
	if m.bytes {
		return int64(len(l.buf)-mark) + m.nl
	}
	return open + m.costBytes(l.buf[body:])
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// word is a word of a sentence being shortened.
type word struct {
	s    string
	fact bool
	u    int64 // units(s), under a unit meter
}

// appendTruncated appends a shortened form of a sentence too long for its
// share, costing at most left. Facts come first: every word holding one is
// kept verbatim, with as many of the other words, from the start, as fit;
// each run of words left out becomes "…". If the fact words alone do not
// fit, as many as fit are kept, in order, followed by "…". clipped says the
// sentence goes on beyond sentence: its end is marked "…" too.
func (x *extractor) appendTruncated(buf []byte, sentence string, left int64, m *meter, clipped bool) []byte {
	words := x.words[:0]
	nonFacts := 0
	for i := 0; i < len(sentence); {
		for i < len(sentence) && isSpace[sentence[i]] {
			i++
		}
		j := i
		for j < len(sentence) && !isSpace[sentence[j]] {
			j++
		}
		if j > i {
			fact := hasFact(sentence[i:j])
			var u int64
			if m.unit > 0 {
				u = units(sentence[i:j])
			}
			words = append(words, word{sentence[i:j], fact, u})
			if !fact {
				nonFacts++
			}
		}
		i = j
	}
	defer func() { clear(words); x.words = words[:0] }()
	mark := len(buf)
	// build appends the words kept when the first k non-fact words are, and
	// at most maxFacts fact words; it reports whether the result fits.
	// Under a unit meter the cost is added up as the words are: a word
	// after a space begins its own pieces, so units add over words, and
	// each "…" is one unit.
	build := func(k, maxFacts int) bool {
		buf = buf[:mark]
		var u int64
		seenNon, seenFacts, gap := 0, 0, false
		for _, w := range words {
			keep := false
			if w.fact {
				keep = seenFacts < maxFacts
				seenFacts++
			} else {
				keep = seenNon < k
				seenNon++
			}
			if !keep {
				gap = true
				continue
			}
			if len(buf) > mark {
				buf = append(buf, ' ')
			}
			if gap {
				buf = append(buf, "… "...)
				gap = false
				u++
			}
			buf = append(buf, w.s...)
			u += w.u
		}
		if len(buf) == mark {
			return false // nothing kept
		}
		if gap || clipped {
			buf = append(buf, " …"...)
			u++
		}
		if m.unit > 0 {
			return u*m.unit <= left
		}
		return m.costBytes(buf[mark:]) <= left
	}
	facts := len(words) - nonFacts
	if build(0, facts) {
		lo, hi := 0, nonFacts // build(lo, facts) fits; find the largest such lo
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if build(mid, facts) {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		build(lo, facts)
		return buf
	}
	lo, hi := 0, facts // fact words alone do not fit: keep a prefix of them
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if build(0, mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if lo == 0 {
		return buf[:mark]
	}
	build(0, lo)
	return buf
}

// appendCollapsed appends s with each whitespace run turned into one space.
// irregular is false only if s is known to need no collapsing.
func appendCollapsed(buf []byte, s string, irregular bool) []byte {
	if !irregular {
		return append(buf, s...)
	}
	start := 0
	for i := 0; i < len(s); i++ {
		if !isSpace[s[i]] {
			continue
		}
		if s[i] == ' ' && (i+1 == len(s) || !isSpace[s[i+1]]) {
			continue // a lone space stays as is
		}
		buf = append(buf, s[start:i]...)
		buf = append(buf, ' ')
		for i+1 < len(s) && isSpace[s[i+1]] {
			i++
		}
		start = i + 1
	}
	return append(buf, s[start:]...)
}

// Character classes for sentence scanning.
const (
	clDigit = 1 << iota
	clHexLetter
	clLetter
	clJoin // '/', '\\', '_', '@': joins two alphanumerics into a path or id
	clDot
	clEnd // '!', '?'
)

var class = func() (t [256]uint8) {
	for c := '0'; c <= '9'; c++ {
		t[c] = clDigit
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = clLetter
		t[c-'a'+'A'] = clLetter
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] |= clHexLetter
		t[c-'a'+'A'] |= clHexLetter
	}
	for _, c := range "/\\_@" {
		t[c] = clJoin
	}
	t['.'] = clDot
	t['!'] = clEnd
	t['?'] = clEnd
	return t
}()

// minHexRun is how long a digit-free hex word must be to count as an id.
const minHexRun = 8

// nextSentence scans s from i: the sentence s[a:b] (see scanSentence),
// where the next one starts, and whether it holds a fact (see hasFact).
func nextSentence(s string, i int) (a, b, next int, fact bool) {
	a, b, next, _ = scanSentence(s, i)
	return a, b, next, hasFact(s[a:b])
}

func trimEnd(s string, a, b int) int {
	for b > a && isSpace[s[b-1]] {
		b--
	}
	return b
}
