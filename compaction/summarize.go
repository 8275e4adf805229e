package compaction

import (
	"cmp"
	"math"
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
// left the visit ends after 16 items in a row got nothing: the work is
// bounded by the output, not the input. An item with nothing yet skips
// other sentences to find its first fact; a fact sentence too long for it
// keeps its fact words and as many others as fit, gaps marked "…". If not
// even the header fits, the result is "".
//
// Sentences end at a newline or at '.', '!' or '?' followed by whitespace.
// Under EstimateCounter the packing is exact (it works in bytes); under
// another counter it adds up the pieces' counts and, should the whole count
// more, drops the lines that earned their space last until it fits.
type Extractive struct{}

// minShareTokens is the least space an item is offered while space remains.
const minShareTokens = 32

// minTruncTokens is the least room worth shortening a sentence into.
const minTruncTokens = 3

// maxMisses bounds the work once space runs low: after this many items in a
// row got nothing, the rest is not visited.
const maxMisses = 16

// sumLine is one item's line being built.
type sumLine struct {
	idx       int // input index
	rank      int // visit order: lower earned its space first
	buf       []byte
	started   bool
	pos       [2]int  // where each kind's scan resumes: [0] facts, [1] the rest
	exhausted [2]bool // no more sentences of that kind
	seenPlain bool    // the facts scan has passed a sentence of the other kind
	last      sentence
}

// sentence caches the last sentence scanned in a line's content, so that
// one a pass could not take is not scanned again by the next.
type sentence struct {
	start, a, b, next int
	irregular         bool
	fact              int8 // 0 unknown, 1 no, 2 yes
	ok                bool
}

// scan returns the sentence starting at pos in s, from the cache if it is
// there.
func (l *sumLine) scan(s string, pos int) *sentence {
	if !l.last.ok || l.last.start != pos {
		a, b, next, irr := scanSentence(s, pos)
		l.last = sentence{start: pos, a: a, b: b, next: next, irregular: irr, ok: true}
	}
	return &l.last
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
	if c == nil {
		c = EstimateCounter{}
	}
	if len(items) == 0 || maxTokens <= 0 {
		return "", nil
	}
	header := "[summary of " + strconv.Itoa(len(items)) + " items]"
	if t := c.Count(header); t < 0 || t > maxTokens {
		return "", nil
	}
	m := newMeter(c, maxTokens)
	left := m.budget - m.cost(header)
	order, chrono := summaryOrder(items)
	minShare := minShareTokens * m.perToken
	lines := make([]sumLine, 0, min(len(order), int(min(m.budget/minShare, 1<<16))+maxMisses+1))
	// Lines are written into one arena as pass 1 finishes each; a line
	// that grows later moves out on its own.
	arena := make([]byte, 0, int(min(maxTokens, 1<<16))*4)
	var scratch []byte
	misses := 0                  // items in a row that got nothing
	for rank, i := range order { // pass 1: facts, fair shares
		if left <= m.nl || (left < minShare && misses >= maxMisses) {
			break // what is left goes to the lines already started
		}
		share := min(max(left/int64(len(order)-rank), minShare), left)
		lines = append(lines, sumLine{idx: int(i), rank: rank, buf: scratch[:0]})
		l := &lines[len(lines)-1]
		left -= m.fill(l, &items[l.idx], 0, share)
		scratch = l.buf
		misses++
		if !l.started {
			l.buf = nil
			continue
		}
		misses = 0
		if n := len(l.buf); len(arena)+n <= cap(arena) {
			arena = append(arena, l.buf...)
			l.buf = arena[len(arena)-n : len(arena) : len(arena)]
		} else {
			l.buf = slices.Clone(l.buf)
		}
	}
	for k := range lines { // pass 2: facts, what is left
		if left <= m.nl {
			break
		}
		left -= m.fill(&lines[k], &items[lines[k].idx], 0, left)
	}
	for k := range lines { // pass 3: the other sentences, fair shares
		if left <= m.nl {
			break
		}
		share := min(max(left/int64(len(lines)-k), minShare), left)
		left -= m.fill(&lines[k], &items[lines[k].idx], 1, share)
	}
	// Write the lines out oldest first.
	var out []int32 // indices into lines
	if chrono {     // the input is in recency order: no sort
		at := make([]int32, len(items))
		for k := range lines {
			if lines[k].started {
				at[lines[k].idx] = int32(k) + 1
			}
		}
		for _, k := range at {
			if k != 0 {
				out = append(out, k-1)
			}
		}
	} else {
		for k := range lines {
			if lines[k].started {
				out = append(out, int32(k))
			}
		}
		slices.SortFunc(out, func(a, b int32) int {
			ia, ib := lines[a].idx, lines[b].idx
			if c := cmp.Compare(items[ia].Seq, items[ib].Seq); c != 0 {
				return c
			}
			return cmp.Compare(ia, ib)
		})
	}
	text := joinSummary(header, lines, out)
	// The meter is exact for EstimateCounter and close for sub-additive
	// tokenizers; the final count is the word. Drop the lines that earned
	// their space last until it fits.
	for c.Count(text) > maxTokens && len(out) > 0 {
		worst := 0
		for k := range out {
			if lines[out[k]].rank > lines[out[worst]].rank {
				worst = k
			}
		}
		out = slices.Delete(out, worst, worst+1)
		text = joinSummary(header, lines, out)
	}
	return text, nil
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
	c        Counter
	bytes    bool
	budget   int64 // in working units
	perToken int64 // working units per token
	nl       int64 // cost of the newline between lines
	sp       int64 // cost of the space between sentences
}

func newMeter(c Counter, maxTokens int64) *meter {
	if _, ok := c.(EstimateCounter); ok {
		b := int64(math.MaxInt64)
		if maxTokens <= math.MaxInt64/4 {
			b = maxTokens * 4
		}
		return &meter{c: c, bytes: true, budget: b, perToken: 4, nl: 1, sp: 1}
	}
	return &meter{c: c, budget: maxTokens, perToken: 1, nl: max(c.Count("\n"), 0), sp: max(c.Count(" "), 0)}
}

func (m *meter) cost(s string) int64 {
	if m.bytes {
		return int64(len(s))
	}
	return max(m.c.Count(s), 0)
}

func (m *meter) costBytes(b []byte) int64 {
	if m.bytes {
		return int64(len(b))
	}
	return max(m.c.Count(string(b)), 0)
}

// summaryOrder returns item indices by priority (most important first), then
// recency (newest first), and whether the input is already in recency
// order.
func summaryOrder(items []Item) ([]int32, bool) {
	order := make([]int32, 0, len(items))
	sorted := true
	for i := 1; i < len(items); i++ {
		if items[i].Seq < items[i-1].Seq {
			sorted = false
			break
		}
	}
	if sorted { // the usual case: a counting sort by priority, no comparisons
		var start [Background + 2]int32
		for i := range items {
			start[bucket(items[i].Priority)+1]++
		}
		for p := 1; p < len(start); p++ {
			start[p] += start[p-1]
		}
		order = order[:len(items)]
		for i := len(items) - 1; i >= 0; i-- { // newest first within a bucket
			b := bucket(items[i].Priority)
			order[start[b]] = int32(i)
			start[b]++
		}
		return order, true
	}
	for i := range items {
		order = append(order, int32(i))
	}
	slices.SortFunc(order, func(a, b int32) int {
		if c := cmp.Compare(items[a].Priority, items[b].Priority); c != 0 {
			return c
		}
		if c := cmp.Compare(items[b].Seq, items[a].Seq); c != 0 {
			return c
		}
		return cmp.Compare(b, a)
	})
	return order, false
}

// bucket maps a priority to 0 (Critical) … 4 (Background), and anything
// invalid to 5.
func bucket(p Priority) int {
	if p.Valid() {
		return int(p - Critical)
	}
	return int(Background)
}

// fill appends to l the sentences of one kind (0 facts, 1 the rest) of
// its content, from where the last fill of that kind stopped, while they
// fit in budget working units; it returns the units used. The first sentence
// of a line also pays for the "[id] " prefix and the newline. Once the line
// has begun, it stops at the first sentence of either kind that does not
// fit (so it rarely classifies what it cannot take); an empty line skips
// other sentences to find its first fact, and shortens that fact sentence
// around its facts if it is too long.
func (m *meter) fill(l *sumLine, it *Item, kind int, budget int64) int64 {
	s := it.Content
	var used int64
	for !l.exhausted[kind] {
		if l.pos[kind] >= len(s) {
			l.exhausted[kind] = true
			break
		}
		sn := l.scan(s, l.pos[kind])
		if sn.a == sn.b {
			l.pos[kind] = sn.next
			continue
		}
		raw := s[sn.a:sn.b]
		open := m.sp
		if !l.started {
			if m.bytes {
				open = int64(len(it.ID)) + 3 + m.nl // "[" id "] " and the newline
			} else {
				open = max(m.c.Count("["+it.ID+"] "), 0) + m.nl
			}
		}
		// What the sentence costs, known before copying unless whitespace
		// must be collapsed.
		cost := open
		if m.bytes {
			cost += int64(len(raw))
		} else {
			cost += max(m.c.Count(raw), 0)
		}
		if used+cost > budget && !(m.bytes && sn.irregular) {
			if l.started || kind == 1 {
				return used
			}
			if sn.isFact(s) {
				if t := m.truncated(l, it, raw, budget-used, open); t > 0 {
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
		l.buf = appendCollapsed(l.buf, raw, sn.irregular)
		if m.bytes && sn.irregular { // now measured exactly
			cost = int64(len(l.buf)-mark) + m.nl*b2i(!l.started)
			if used+cost > budget {
				l.buf = l.buf[:mark]
				if !l.started && kind == 0 {
					if t := m.truncated(l, it, raw, budget-used, open); t > 0 {
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
// left units, and returns the units used, or 0 if nothing fits.
func (m *meter) truncated(l *sumLine, it *Item, raw string, left, open int64) int64 {
	if left-open < minTruncTokens*m.perToken {
		return 0 // no room for a fact worth keeping
	}
	mark := len(l.buf)
	l.openLine(it)
	body := len(l.buf)
	l.buf = appendTruncated(l.buf, raw, left-open, m)
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

// appendTruncated appends a shortened form of a sentence too long for its
// share, costing at most left. Facts come first: every word holding one is
// kept verbatim, with as many of the other words, from the start, as fit;
// each run of words left out becomes "…". If the fact words alone do not
// fit, as many as fit are kept, in order, followed by "…".
func appendTruncated(buf []byte, sentence string, left int64, m *meter) []byte {
	type word struct {
		s    string
		fact bool
	}
	var words []word
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
			words = append(words, word{sentence[i:j], fact})
			if !fact {
				nonFacts++
			}
		}
		i = j
	}
	mark := len(buf)
	// build appends the words kept when the first k non-fact words are, and
	// at most maxFacts fact words; it reports whether the result fits.
	build := func(k, maxFacts int) bool {
		buf = buf[:mark]
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
			}
			buf = append(buf, w.s...)
		}
		if len(buf) == mark {
			return false // nothing kept
		}
		if gap {
			buf = append(buf, " …"...)
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
