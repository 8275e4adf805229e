package compaction

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// Item is one piece of a frame's context as this package sees it: the
// projection of a context handle that fitting and compaction need.
//
// (Priority and Mandatory sit together only to keep the struct at 120
// bytes, with no padding but theirs: packs copy items.)
type Item struct {
	ID       string
	Kind     string
	Priority Priority
	// Role is carried through unchanged (who said it: "user", "tool", …);
	// a summary has none.
	Role string

	// Mandatory is the caller's include hint for a pack (query_hints
	// include_handles). Compact ignores it.
	Mandatory bool

	Content string

	// Seq orders items by recency: larger is newer. Ties are broken by
	// position in the input slice (later is newer).
	Seq int64

	// Group, when not empty, ties items into one unit (a tool call and its
	// result): they are kept, dropped or summarized together, never apart.
	Group string

	// Covers lists, for a summary item, the ids of the items it replaces.
	Covers []string

	// Tokens is Content's size under the counter in use, when the caller
	// already knows it (a handle records its size when it is added); 0 means
	// "count it". The value is trusted: it must be Count(Content) under the
	// same counter, or a pack's Tokens will not match a recount. Items
	// returned by Fit and Compact always carry their count here.
	Tokens int64

	// LightTokens is Content's size under the counter in use once Light has
	// normalised its whitespace (before any abbreviation): what
	// LightTokens(Content, counter) returns, recorded when a handle is added
	// so that a pack can decide whether Light content fits by adding numbers
	// instead of normalising and counting contents it will not emit. 0 means
	// "compute it". Fit recounts every content it emits (a Fitter under a
	// Named counter once per id, content and value: see Named); if an
	// emitted content's recount disagrees with its LightTokens, Fit
	// assembles the pack again trusting no LightTokens at all, so a wrong
	// value costs time, never the budget. Compact ignores it. Items returned by Fit keep it
	// where their Content is the input's, and have 0 where it was changed.
	LightTokens int64
}

// Unit is a set of items that share one fate: a single ungrouped item, or
// every item of one Group. Its Priority is the most important of its items'
// and its Seq the newest, so a Critical tool call keeps its result with it.
type Unit struct {
	Items     []Item // in input order
	Priority  Priority
	Seq       int64
	Mandatory bool // at least one item is Mandatory
}

// Units groups items into units, in order of each unit's first item. It does
// not validate: see ValidateItems.
func Units(items []Item) []Unit {
	p := &prepared{items: items, buf: &buffers{}, sortedSeq: true, contiguous: true}
	p.startLayout(0)
	for i := range items {
		p.addUnit(i, p.firstOfGroup(i, true))
	}
	p.finishLayout()
	out := make([]Unit, len(p.units))
	for u, ui := range p.units {
		its := make([]Item, 0, ui.end-ui.start)
		for k := ui.start; k < ui.end; k++ {
			its = append(its, items[p.member(k)])
		}
		out[u] = Unit{Items: its, Priority: ui.prio, Seq: ui.seq, Mandatory: ui.mandatory}
	}
	return out
}

// ValidateItems reports the first bad item: an empty or duplicate id, an
// invalid priority or a negative Tokens or LightTokens. Fit and Compact run
// the same checks.
func ValidateItems(items []Item) error {
	_, err := prepare(items, EstimateCounter{}, &buffers{}, prepareFor{budget: -1})
	return err
}

// buffers is the working memory of one call, which a Fitter keeps for the
// next. Nothing in it outlives a call's result: results are allocated
// apart.
type buffers struct {
	idSlots, groupSlots []uint64
	tok                 []int64
	unitOf              []int32
	units               []unitInfo
	members             []int32
	byRecency, rankOf   []int32
	special, clashes    []int32
	state               []uint8
	kept                []int32
	lightAt             []int32
	light               []lightEntry
	covered             []int32
	x                   extractor
	verified            verifiedSet
}

// zeroed returns s resized to n, all zero, reusing its memory if it can.
func zeroed[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// resized returns s resized to n, reusing its memory if it can; the
// contents are left as they are, for the caller to overwrite.
func resized[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// release drops what the buffers hold of a call's input, so that a kept
// Fitter does not keep the last frame's contents alive.
func (b *buffers) release() {
	clear(b.light)
	b.light = b.light[:0]
	clear(b.x.lines[:cap(b.x.lines)])
	clear(b.x.words[:cap(b.x.words)])
}

// unitInfo describes one unit of a layout: its items are
// members[start:end], in input order, or, when the layout has no members
// (every unit a run of the input), the input range [start, end).
type unitInfo struct {
	start, end int32
	seq        int64
	prio       Priority
	mandatory  bool
}

func (u *unitInfo) critical() bool { return u.prio == Critical }

// prepared is a validated, counted and (when it must be) grouped input,
// shared by Fit and Compact.
type prepared struct {
	items      []Item
	buf        *buffers
	tok        []int64 // tokens of items[i].Content; nil when every Tokens was set
	total      int64
	ids        idSet
	groups     *idSet // Group -> input index of its first item; nil without groups
	groupSet   idSet
	trustIDs   bool    // ids not checked: see prepareFor
	clashes    []int32 // with trustIDs, the items whose id may be a summary id
	sortedSeq  bool    // Seq never decreases
	contiguous bool    // the items of each group are adjacent in the input
	counts     [bucketCount]int32
	special    []int32 // the Critical or Mandatory items, in input order

	// The layout: items grouped into units, numbered in order of their
	// first item. Nil until built; see startLayout.
	unitOf    []int32 // item -> unit
	units     []unitInfo
	members   []int32 // nil: each unit is an input range
	byRecency []int32 // units oldest first, (seq, first) ascending; nil: in unit order
	rankOf    []int32 // unit -> its position in byRecency; nil with byRecency
}

// tokens returns the count of items[i].Content.
func (p *prepared) tokens(i int32) int64 {
	if p.tok != nil {
		return p.tok[i]
	}
	return p.items[i].Tokens
}

// member returns the input index of the k-th member (see unitInfo).
func (p *prepared) member(k int32) int32 {
	if p.members != nil {
		return p.members[k]
	}
	return k
}

// rec returns the unit at position r in recency order.
func (p *prepared) rec(r int) int32 {
	if p.byRecency != nil {
		return p.byRecency[r]
	}
	return int32(r)
}

// rank returns unit u's position in recency order.
func (p *prepared) rank(u int32) int32 {
	if p.rankOf != nil {
		return p.rankOf[u]
	}
	return u
}

// unitTokens returns the count of unit u's contents.
func (p *prepared) unitTokens(u int32) int64 {
	var t int64
	ui := &p.units[u]
	for k := ui.start; k < ui.end; k++ {
		t += p.tokens(p.member(k)) // bounded by the checked total
	}
	return t
}

// prepare validates, counts and indexes items in one pass. It also groups
// them into units, unless budget >= 0 and everything fits in it in input
// order: then no layout is needed, and none is built.
func prepare(items []Item, c Counter, b *buffers, pf prepareFor) (*prepared, error) {
	if len(items) > math.MaxInt32/2 {
		return nil, fmt.Errorf("%w: %d items", ErrInvalidOption, len(items))
	}
	p := &prepared{items: items, buf: b, sortedSeq: true, contiguous: true, trustIDs: pf.trustIDs}
	budget := pf.budget
	var clashLo, clashHi int // with trustIDs: id lengths that may equal a summary id
	if pf.trustIDs {
		clashLo, clashHi = len(pf.summaryID), len(pf.summaryID)+maxSuffix
		p.clashes = b.clashes[:0]
	} else {
		p.ids.reset(items, len(items), false, &b.idSlots)
	}
	// The loop works on locals, copied to p where a method needs them.
	var (
		total     int64
		prevSeq   int64
		prevGroup string
		packed    uint64 // counts by priority, 12 bits each: a register, not memory
		counts    [bucketCount]int32
		special   = b.special[:0]
		unitOf    []int32
		units     []unitInfo
	)
	for i := range items {
		it := &items[i]
		if it.ID == "" || !it.Priority.Valid() || it.Tokens < 0 || it.LightTokens < 0 || (!pf.trustIDs && !p.ids.add(i)) {
			return nil, p.badItem(i)
		}
		if l := len(it.ID); l >= clashLo && l <= clashHi && pf.trustIDs {
			p.clashes = append(p.clashes, int32(i))
		}
		packed += 1 << (12 * uint(it.Priority-Critical))
		if i&2047 == 2047 { // before a 12-bit count can overflow
			unpack(&counts, packed)
			packed = 0
		}
		t := it.Tokens
		if t == 0 && it.Content != "" {
			if t = c.Count(it.Content); t < 0 {
				return nil, fmt.Errorf("%w: counter returned %d for item %q", ErrNegativeTokens, t, it.ID)
			}
			if p.tok == nil { // counts differ from the Tokens fields from here on
				b.tok = resized(b.tok, len(items))
				p.tok = b.tok
				for k := range i {
					p.tok[k] = items[k].Tokens
				}
			}
		}
		if p.tok != nil {
			p.tok[i] = t
		}
		if t > math.MaxInt64-total {
			return nil, fmt.Errorf("%w: %d + %d", ErrOverflow, total, t)
		}
		total += t
		if it.Seq < prevSeq && i > 0 {
			p.sortedSeq = false
		}
		prevSeq = it.Seq
		first := int32(noGroup)
		if it.Group != "" {
			if it.Group == prevGroup {
				first = withPrevious
			} else {
				first = p.firstOfGroup(i, true)
			}
		}
		prevGroup = it.Group
		if it.Priority == Critical || it.Mandatory {
			special = append(special, int32(i))
		}
		if unitOf == nil {
			if budget >= 0 && total <= budget && p.sortedSeq && p.contiguous {
				continue // no layout needed so far
			}
			p.startLayout(i)
			unitOf, units = p.unitOf, p.units
		}
		if first == noGroup { // addUnit, for the usual case
			// Field by field: a struct literal is built on the stack in
			// byte stores and copied with a wide load that stalls.
			u := len(units)
			unitOf[i] = int32(u)
			units = units[:u+1] // cap is len(items)
			ui := &units[u]
			ui.start, ui.end, ui.seq, ui.prio, ui.mandatory = int32(i), int32(i)+1, it.Seq, it.Priority, it.Mandatory
			continue
		}
		p.units = units
		p.addUnit(i, first)
		units = p.units
	}
	unpack(&counts, packed)
	p.total, p.counts, p.special, b.special = total, counts, special, special
	if pf.trustIDs {
		b.clashes = p.clashes
	}
	if unitOf != nil {
		p.units = units
		p.finishLayout()
	}
	return p, nil
}

// prepareFor says what an input is prepared for.
type prepareFor struct {
	// budget: no layout is built if everything fits in it in input order;
	// < 0: a layout is always built.
	budget int64

	// trustIDs skips the duplicate id check (see FitOptions.TrustIDs); the
	// ids that might equal summaryID or a variant of it are noted instead.
	trustIDs  bool
	summaryID string
}

// maxSuffix bounds the "-N" suffixes freeSummaryID tries.
const maxSuffix = 11

// hasID reports whether an input item has id.
func (p *prepared) hasID(id string) bool {
	if !p.trustIDs {
		_, ok := p.ids.lookup(id)
		return ok
	}
	for _, i := range p.clashes {
		if p.items[i].ID == id {
			return true
		}
	}
	return false
}

// unpack adds counts packed 12 bits a priority to counts.
func unpack(counts *[bucketCount]int32, packed uint64) {
	for b := range int(Background - Critical + 1) {
		counts[b] += int32(packed >> (12 * b) & 0xfff)
	}
}

// badItem returns the error for items[i], found bad by prepare; the
// items before it are good and in the id set, it is not.
func (p *prepared) badItem(i int) error {
	it := &p.items[i]
	switch {
	case it.ID == "":
		return fmt.Errorf("%w: item %d", ErrEmptyID, i)
	case !p.trustIDs && !p.ids.add(i):
		return fmt.Errorf("%w: %q", ErrDuplicateID, it.ID)
	case !it.Priority.Valid():
		return fmt.Errorf("%w: item %q has %v", ErrInvalidPriority, it.ID, it.Priority)
	case it.Tokens < 0:
		return fmt.Errorf("%w: item %q has Tokens %d", ErrNegativeTokens, it.ID, it.Tokens)
	}
	return fmt.Errorf("%w: item %q has LightTokens %d", ErrNegativeTokens, it.ID, it.LightTokens)
}

// Values of firstOfGroup besides an input index.
const (
	noGroup      = -1
	withPrevious = -2
)

// firstOfGroup returns, for item i, noGroup, withPrevious (it shares the
// group of the item before it) or the input index of the first item of its
// group, which is i itself for a group's first item. With insert, it
// records a group it has not seen, and notes a group that comes back after
// other items.
func (p *prepared) firstOfGroup(i int, insert bool) int32 {
	g := p.items[i].Group
	if g == "" {
		return noGroup
	}
	if i > 0 && p.items[i-1].Group == g {
		return withPrevious
	}
	if p.groups == nil {
		p.groups = &p.groupSet
		p.groups.reset(p.items, 0, true, &p.buf.groupSlots)
	}
	if !insert {
		f, _ := p.groups.lookup(g)
		return f
	}
	f, found := p.groups.insert(i)
	if !found {
		return int32(i)
	}
	p.contiguous = false // the group came back after other items
	return f
}

// startLayout sets up the layout and lays out items[:i], seen already.
func (p *prepared) startLayout(i int) {
	n := len(p.items)
	b := p.buf
	b.unitOf = resized(b.unitOf, n)
	if cap(b.units) < n {
		b.units = make([]unitInfo, 0, n)
	}
	p.unitOf, p.units = b.unitOf, b.units[:0]
	for k := range i {
		p.addUnit(k, p.firstOfGroup(k, false))
	}
}

// addUnit puts item i into its unit; first is firstOfGroup(i).
func (p *prepared) addUnit(i int, first int32) {
	it := &p.items[i]
	u := int32(-1)
	switch {
	case first == withPrevious:
		u = p.unitOf[i-1]
	case first >= 0 && int(first) != i:
		u = p.unitOf[first]
	}
	if u < 0 {
		n := len(p.units)
		p.unitOf[i] = int32(n)
		p.units = p.units[:n+1] // cap is len(items)
		ui := &p.units[n]
		ui.start, ui.end, ui.seq, ui.prio, ui.mandatory = int32(i), int32(i)+1, it.Seq, it.Priority, it.Mandatory
		return
	}
	p.unitOf[i] = u
	ui := &p.units[u]
	ui.end++ // a run extended; or, for a group that came back, a count
	ui.prio = min(ui.prio, it.Priority)
	ui.seq = max(ui.seq, it.Seq)
	ui.mandatory = ui.mandatory || it.Mandatory
}

// finishLayout lays out the members of units that are not input runs and
// orders the units by recency, where either is needed: input in Seq order
// with groups adjacent (the usual case) needs neither.
func (p *prepared) finishLayout() {
	b := p.buf
	b.units = p.units
	if !p.contiguous {
		b.members = resized(b.members, len(p.items))
		p.members = b.members
		var off int32
		for u := range p.units {
			ui := &p.units[u]
			c := ui.end - ui.start
			ui.start, ui.end = off, off // end is the fill cursor
			off += c
		}
		for i, u := range p.unitOf {
			ui := &p.units[u]
			p.members[ui.end] = int32(i)
			ui.end++
		}
	}
	if p.sortedSeq && p.contiguous {
		return // units in input order are in recency order
	}
	b.byRecency = resized(b.byRecency, len(p.units))
	b.rankOf = resized(b.rankOf, len(p.units))
	p.byRecency, p.rankOf = b.byRecency, b.rankOf
	for u := range p.byRecency {
		p.byRecency[u] = int32(u)
	}
	slices.SortFunc(p.byRecency, func(a, b int32) int {
		if c := cmp.Compare(p.units[a].seq, p.units[b].seq); c != 0 {
			return c
		}
		return cmp.Compare(a, b) // units are numbered in first-item order
	})
	for r, u := range p.byRecency {
		p.rankOf[u] = int32(r)
	}
}

// materialize fills in the members and recency order a layout leaves
// implicit, for code that indexes them directly (Compact).
func (p *prepared) materialize() {
	if p.members == nil {
		p.members = make([]int32, len(p.items))
		for i := range p.members {
			p.members[i] = int32(i)
		}
	}
	if p.byRecency == nil {
		p.byRecency = make([]int32, len(p.units))
		p.rankOf = p.byRecency
		for u := range p.byRecency {
			p.byRecency[u] = int32(u)
		}
	}
}

// inOrder reports whether units in recency order, their items in input
// order, are the input order itself: Seq never decreases and each group's
// items are adjacent (a unit then stands at its last item's Seq, no later
// than the next unit's first).
func (p *prepared) inOrder() bool { return p.sortedSeq && p.contiguous }

// gather returns, in input order, the items of the units in, without
// copying when they are one run of the input.
func (p *prepared) gather(in func(u int32) bool) []Item {
	lo, hi, n := -1, -1, 0
	for i, u := range p.unitOf {
		if !in(u) {
			continue
		}
		if lo < 0 {
			lo = i
		}
		hi = i + 1
		n++
	}
	if n == 0 {
		return nil
	}
	if n == hi-lo {
		return p.items[lo:hi:hi]
	}
	out := make([]Item, 0, n)
	for i := lo; i < hi; i++ {
		if in(p.unitOf[i]) {
			out = append(out, p.items[i])
		}
	}
	return out
}

// addTokens returns a+b for non-negative counts, or ErrOverflow.
func addTokens(a, b int64) (int64, error) {
	if a > math.MaxInt64-b {
		return 0, fmt.Errorf("%w: %d + %d", ErrOverflow, a, b)
	}
	return a + b, nil
}

// summaryItem builds the item that replaces covered, with content counted
// as tokens.
func summaryItem(id, content string, tokens int64, covered itemView) Item {
	s := Item{ID: id, Kind: SummaryKind, Priority: SummaryPriority, Content: content, Tokens: tokens}
	n := covered.len()
	s.Covers = make([]string, n)
	for k := range n {
		it := covered.at(k)
		s.Covers[k] = it.ID
		if k == 0 || it.Seq > s.Seq {
			s.Seq = it.Seq
		}
	}
	return s
}

// SummaryKind is the Kind of the summary items this package creates.
const SummaryKind = "summary"

// SummaryPriority is the Priority of the summary items this package creates:
// Low, so that it ranks under the live content it sits among yet above
// Background material.
const SummaryPriority = Low
