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
// (Priority and Mandatory sit together only to keep the struct at 112
// bytes: packs copy items.)
type Item struct {
	ID       string
	Kind     string
	Priority Priority

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
	l := group(items)
	out := make([]Unit, len(l.units))
	for u, ui := range l.units {
		its := make([]Item, 0, ui.end-ui.start)
		for _, i := range l.members[ui.start:ui.end] {
			its = append(its, items[i])
		}
		out[u] = Unit{Items: its, Priority: ui.prio, Seq: ui.seq, Mandatory: ui.mandatory}
	}
	return out
}

// ValidateItems reports the first bad item: an empty or duplicate id, an
// invalid priority or a negative Tokens. Fit and Compact run the same checks.
func ValidateItems(items []Item) error {
	_, err := prepare(items, EstimateCounter{})
	return err
}

// unitInfo describes one unit of a layout; its items are
// layout.members[start:end], in input order.
type unitInfo struct {
	start, end int32
	first      int32 // input index of its first item
	prio       Priority
	mandatory  bool
	seq        int64
	tokens     int64
}

func (u *unitInfo) critical() bool { return u.prio == Critical }

// layout is the grouping of an input slice into units.
type layout struct {
	unitOf  []int32 // item index -> unit index
	units   []unitInfo
	members []int32
	groups  map[string]int32 // allocated when some item has a Group
	grouped int              // how many items have a Group, if known: a size hint
}

func newLayout(n int) layout {
	idx := make([]int32, 2*n) // one allocation for both index arrays
	return layout{unitOf: idx[:n:n], members: idx[n:], units: make([]unitInfo, 0, n)}
}

// add puts items[i] (it) into its unit.
func (l *layout) add(i int, it *Item, tokens int64) {
	if it.Group != "" {
		if l.groups == nil {
			l.groups = make(map[string]int32, l.grouped/2+1)
		}
		if u, ok := l.groups[it.Group]; ok {
			l.unitOf[i] = u
			ui := &l.units[u]
			ui.end++ // a count until finish lays out the offsets
			ui.prio = min(ui.prio, it.Priority)
			ui.seq = max(ui.seq, it.Seq)
			ui.mandatory = ui.mandatory || it.Mandatory
			ui.tokens += tokens // bounded by the checked total
			return
		}
		l.groups[it.Group] = int32(len(l.units))
	}
	l.unitOf[i] = int32(len(l.units))
	l.units = append(l.units, unitInfo{end: 1, first: int32(i), prio: it.Priority, seq: it.Seq, mandatory: it.Mandatory, tokens: tokens})
}

// finish lays out members once every item is added.
func (l *layout) finish() {
	if l.groups == nil {
		for i := range l.units {
			l.units[i].start, l.units[i].end = int32(i), int32(i+1)
			l.members[i] = int32(i)
		}
		return
	}
	var off int32
	for u := range l.units {
		c := l.units[u].end
		l.units[u].start, l.units[u].end = off, off // end is the fill cursor
		off += c
	}
	for i, u := range l.unitOf {
		ui := &l.units[u]
		l.members[ui.end] = int32(i)
		ui.end++
	}
}

// group builds the layout of items, without validating them.
func group(items []Item) layout {
	l := newLayout(len(items))
	for i := range items {
		l.add(i, &items[i], 0)
	}
	l.finish()
	return l
}

// prepared is a validated, counted and grouped input, shared by Fit and
// Compact.
type prepared struct {
	items     []Item
	tok       []int64 // tokens of items[i].Content under the counter
	total     int64
	ids       *idSet
	sortedSeq bool // Seq never decreases
	grouped   int  // items with a Group
	layout
	byRecency []int32 // unit indices, oldest first: (seq, first) ascending
}

// prepare validates, counts and groups items in one pass.
func prepare(items []Item, c Counter) (*prepared, error) {
	if len(items) > math.MaxInt32/2 {
		return nil, fmt.Errorf("%w: %d items", ErrInvalidOption, len(items))
	}
	p := &prepared{items: items, tok: make([]int64, len(items)), ids: newIDSet(items), sortedSeq: true}
	for i := range items {
		it := &items[i]
		if it.ID == "" {
			return nil, fmt.Errorf("%w: item %d", ErrEmptyID, i)
		}
		if !p.ids.add(i) {
			return nil, fmt.Errorf("%w: %q", ErrDuplicateID, it.ID)
		}
		if !it.Priority.Valid() {
			return nil, fmt.Errorf("%w: item %q has %v", ErrInvalidPriority, it.ID, it.Priority)
		}
		t := it.Tokens
		if t < 0 {
			return nil, fmt.Errorf("%w: item %q has Tokens %d", ErrNegativeTokens, it.ID, t)
		}
		if t == 0 && it.Content != "" {
			if t = c.Count(it.Content); t < 0 {
				return nil, fmt.Errorf("%w: counter returned %d for item %q", ErrNegativeTokens, t, it.ID)
			}
		}
		p.tok[i] = t
		var err error
		if p.total, err = addTokens(p.total, t); err != nil {
			return nil, err
		}
		if it.Group != "" {
			p.grouped++
		}
		if i > 0 && it.Seq < items[i-1].Seq {
			p.sortedSeq = false
		}
	}
	return p, nil
}

// buildLayout groups the items into units and orders the units by recency.
func (p *prepared) buildLayout() {
	if p.units != nil {
		return
	}
	p.layout = newLayout(len(p.items))
	p.layout.grouped = p.grouped
	for i := range p.items {
		p.add(i, &p.items[i], p.tok[i])
	}
	p.finish()
	p.byRecency = make([]int32, len(p.units))
	sorted := true
	for u := range p.byRecency {
		p.byRecency[u] = int32(u)
		if u > 0 && p.units[u].seq < p.units[u-1].seq {
			sorted = false
		}
	}
	if !sorted { // input is usually in Seq order already: skip the sort then
		slices.SortFunc(p.byRecency, func(a, b int32) int {
			ua, ub := &p.units[a], &p.units[b]
			if c := cmp.Compare(ua.seq, ub.seq); c != 0 {
				return c
			}
			return cmp.Compare(ua.first, ub.first)
		})
	}
}

// plain reports whether units are the items, already in recency order.
func (p *prepared) plain() bool { return p.grouped == 0 && p.sortedSeq }

// gather returns, in input order, the items of the units in, without
// copying when they are one run of the input (the usual case for the
// oldest items).
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

// inOrder reports whether units in recency order, their items in input
// order, are the input order itself.
func (p *prepared) inOrder() bool {
	for k, u := range p.byRecency {
		if u != int32(k) {
			return false
		}
	}
	for k, i := range p.members {
		if i != int32(k) {
			return false
		}
	}
	return true
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
func summaryItem(id, content string, tokens int64, covered []Item) Item {
	s := Item{ID: id, Kind: SummaryKind, Priority: SummaryPriority, Content: content, Tokens: tokens}
	s.Covers = make([]string, len(covered))
	for i := range covered {
		s.Covers[i] = covered[i].ID
		if i == 0 || covered[i].Seq > s.Seq {
			s.Seq = covered[i].Seq
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
