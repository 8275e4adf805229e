package compaction

import (
	"fmt"
	"math/bits"
	"slices"
)

// Strategy is how Compact shrinks a frame's context (addendum §2, Compaction
// Strategies). The family is closed: PriorityBased, SummarizeOldest,
// TruncateAt, and Custom for anything else.
type Strategy interface {
	// Name is the strategy's snake_case name, recorded in frame.compacted.
	Name() string

	apply(c *compactor) error
}

// PriorityBased drops non-Critical units, lowest priority first and, within
// a priority, oldest first, until the total is at most the target (or only
// Critical units remain). It does nothing when the items already fit.
type PriorityBased struct{}

// Name returns "priority_based".
func (PriorityBased) Name() string { return "priority_based" }

// SummarizeOldest keeps the KeepRecent newest units and every Critical unit
// intact and replaces all other units with one summary item, written by the
// Summarizer into what the kept units leave of the target. It applies
// whatever the current total: it is a request to summarize. If the kept
// units leave no room, or the Summarizer writes nothing, it fails with
// ErrTargetTooSmall.
type SummarizeOldest struct {
	// KeepRecent is how many of the newest units stay intact; 0 means
	// DefaultKeepRecent.
	KeepRecent int
}

// Name returns "summarize_oldest".
func (SummarizeOldest) Name() string { return "summarize_oldest" }

// TruncateAt keeps the MessageCount newest units and every Critical unit and
// removes the rest, without a summary. The target plays no part.
type TruncateAt struct {
	MessageCount int
}

// Name returns "truncate_at".
func (TruncateAt) Name() string { return "truncate_at" }

// Custom is a caller's compaction: given a copy of the items and the target,
// it returns what should remain. Compact checks the result: it may only
// remove items (returning the others unchanged, in any order) and add at most
// one summary item, a new item with Covers naming removed items. Groups must
// stay whole and Critical items must stay. The summary's ID may be left
// empty for Options.SummaryID, its Kind empty for SummaryKind and its
// Priority zero for SummaryPriority; its Tokens is recounted. A panic in the
// function is returned as ErrCustomStrategyFail.
type Custom func(items []Item, target int64) ([]Item, error)

// Name returns "custom".
func (Custom) Name() string { return "custom" }

// Options tunes Compact. The zero value means defaults, but for SummaryID,
// which a strategy that adds a summary needs.
type Options struct {
	// SummaryID is the id of the summary item, minted by the caller (ids
	// never come from this package). Required when a summary is made.
	SummaryID string

	// Counter measures contents; nil means EstimateCounter.
	Counter Counter

	// Summarizer writes SummarizeOldest's summary; nil means Extractive.
	Summarizer Summarizer
}

// Result is what Compact decided. Applying it to the frame means removing
// Removed and adding Summary.
type Result struct {
	// Kept is the items that stay, in input order, each with Tokens set.
	Kept []Item

	// Removed lists, in input order, the ids that leave the live context:
	// those dropped and those the summary covers.
	Removed []string

	// Summary is the item added, or nil.
	Summary *Item

	// OriginalTokens is the items' total; FinalTokens that of Kept plus
	// Summary.
	OriginalTokens, FinalTokens int64

	// Level is ReductionLevel(OriginalTokens, FinalTokens).
	Level Level

	// ItemsRemoved counts the removed items not covered by the summary;
	// ItemsSummarized those it covers. They add up to len(Removed).
	ItemsRemoved, ItemsSummarized int
}

// Compact applies s to items so that, where s is target-driven, they total
// at most target tokens under opts.Counter. Critical items are never
// removed; a unit (see Units) is removed whole or not at all. Bad input, a
// nil strategy or a negative target is an error and nothing is decided.
// Compact is deterministic and does not modify items.
func Compact(items []Item, target int64, s Strategy, opts Options) (res Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			res, err = Result{}, fmt.Errorf("%w: %v", ErrPanic, r)
		}
	}()
	if target < 0 {
		return Result{}, fmt.Errorf("%w: target %d", ErrNegativeBudget, target)
	}
	if isNil(s) {
		return Result{}, fmt.Errorf("%w: nil", ErrInvalidStrategy)
	}
	if opts.Counter == nil {
		opts.Counter = EstimateCounter{}
	}
	if opts.Summarizer == nil {
		opts.Summarizer = Extractive{}
	}
	p, err := prepare(items, opts.Counter, &buffers{}, prepareFor{budget: -1})
	if err != nil {
		return Result{}, err
	}
	p.materialize()
	c := &compactor{prepared: p, o: opts, target: target, removed: make([]bool, len(p.units))}
	if err := s.apply(c); err != nil {
		return Result{}, err
	}
	return c.result(), nil
}

// isNil reports a nil Strategy, including a typed nil pointer, whose value
// methods would panic.
func isNil(s Strategy) bool {
	switch v := s.(type) {
	case nil:
		return true
	case *PriorityBased:
		return v == nil
	case *SummarizeOldest:
		return v == nil
	case *TruncateAt:
		return v == nil
	case *Custom:
		return v == nil
	}
	return false
}

type compactor struct {
	*prepared
	o       Options
	target  int64
	removed []bool // per unit
	summary *Item
}

func (PriorityBased) apply(c *compactor) error {
	cur := c.total
	for p := Background; p > Critical && cur > c.target; p-- {
		for _, u := range c.byRecency {
			if cur <= c.target {
				break
			}
			if c.units[u].prio == p {
				c.removed[u] = true
				cur -= c.unitTokens(u)
			}
		}
	}
	return nil
}

func (s SummarizeOldest) apply(c *compactor) error {
	k := s.KeepRecent
	switch {
	case k < 0:
		return fmt.Errorf("%w: SummarizeOldest.KeepRecent %d", ErrInvalidStrategy, k)
	case k == 0:
		k = DefaultKeepRecent
	}
	c.removeOlder(k)
	covered := c.gather(func(u int32) bool { return c.removed[u] })
	if len(covered) == 0 {
		return nil
	}
	if c.o.SummaryID == "" {
		return ErrSummaryIDRequired
	}
	if _, taken := c.ids.lookup(c.o.SummaryID); taken {
		return fmt.Errorf("%w: SummaryID %q is an input item's", ErrDuplicateID, c.o.SummaryID)
	}
	var kept int64
	for u := range c.units {
		if !c.removed[u] {
			kept += c.unitTokens(int32(u))
		}
	}
	left := c.target - kept
	if left <= 0 {
		return fmt.Errorf("%w: the kept units need %d tokens, target is %d", ErrTargetTooSmall, kept, c.target)
	}
	text, t, err := summarize(c.o.Summarizer, covered, left, c.o.Counter)
	if err != nil {
		return err
	}
	if text == "" {
		return fmt.Errorf("%w: no summary of %d items fits in %d tokens", ErrTargetTooSmall, len(covered), left)
	}
	sum := summaryItem(c.o.SummaryID, text, t, itemView{items: covered})
	c.summary = &sum
	return nil
}

func (s TruncateAt) apply(c *compactor) error {
	if s.MessageCount < 0 {
		return fmt.Errorf("%w: TruncateAt.MessageCount %d", ErrInvalidStrategy, s.MessageCount)
	}
	c.removeOlder(s.MessageCount)
	return nil
}

// removeOlder marks removed every non-Critical unit but the keep newest.
func (c *compactor) removeOlder(keep int) {
	n := len(c.byRecency)
	for r, u := range c.byRecency {
		if r < n-keep && !c.units[u].critical() {
			c.removed[u] = true
		}
	}
}

func (fn Custom) apply(c *compactor) error {
	if fn == nil {
		return fmt.Errorf("%w: nil Custom", ErrInvalidStrategy)
	}
	in := make([]Item, len(c.items))
	for i, it := range c.items {
		it.Covers = slices.Clone(it.Covers)
		it.Tokens = c.tokens(int32(i))
		in[i] = it
	}
	out, err := callCustom(fn, in, c.target)
	if err != nil {
		return err
	}
	kept := make([]bool, len(c.items))
	for k := range out {
		it := &out[k]
		if i, ok := c.ids.lookup(it.ID); ok {
			if kept[i] {
				return fmt.Errorf("%w: item %q returned twice", ErrCustomOutput, it.ID)
			}
			if !sameItem(it, &c.items[i]) {
				return fmt.Errorf("%w: item %q was modified", ErrCustomOutput, it.ID)
			}
			kept[i] = true
			continue
		}
		if c.summary != nil {
			return fmt.Errorf("%w: more than one new item", ErrCustomOutput)
		}
		s, err := c.customSummary(*it)
		if err != nil {
			return err
		}
		c.summary = &s
	}
	for u := range c.units {
		ui := &c.units[u]
		first := kept[c.members[ui.start]]
		for _, i := range c.members[ui.start:ui.end] {
			if kept[i] != first {
				return fmt.Errorf("%w: group %q split", ErrCustomOutput, c.items[i].Group)
			}
		}
		if !first && ui.critical() {
			return fmt.Errorf("%w: Critical item %q removed", ErrCustomOutput, c.items[c.members[ui.start]].ID)
		}
		c.removed[u] = !first
	}
	if c.summary != nil {
		seen := make(map[string]bool, len(c.summary.Covers))
		for _, id := range c.summary.Covers {
			i, ok := c.ids.lookup(id)
			switch {
			case !ok:
				return fmt.Errorf("%w: summary covers unknown id %q", ErrCustomOutput, id)
			case kept[i]:
				return fmt.Errorf("%w: summary covers kept item %q", ErrCustomOutput, id)
			case seen[id]:
				return fmt.Errorf("%w: summary covers %q twice", ErrCustomOutput, id)
			}
			seen[id] = true
		}
	}
	return nil
}

func callCustom(fn Custom, items []Item, target int64) (out []Item, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("%w: panic: %v", ErrCustomStrategyFail, r)
		}
	}()
	out, err = fn(items, target)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCustomStrategyFail, err)
	}
	return out, nil
}

// customSummary checks and completes the new item a Custom returned.
func (c *compactor) customSummary(s Item) (Item, error) {
	if len(s.Covers) == 0 {
		return Item{}, fmt.Errorf("%w: new item %q has no Covers", ErrCustomOutput, s.ID)
	}
	if s.ID == "" {
		if c.o.SummaryID == "" {
			return Item{}, ErrSummaryIDRequired
		}
		if _, taken := c.ids.lookup(c.o.SummaryID); taken {
			return Item{}, fmt.Errorf("%w: SummaryID %q is an input item's", ErrDuplicateID, c.o.SummaryID)
		}
		s.ID = c.o.SummaryID
	}
	if s.Group != "" {
		return Item{}, fmt.Errorf("%w: summary %q has a Group", ErrCustomOutput, s.ID)
	}
	if s.Kind == "" {
		s.Kind = SummaryKind
	}
	if s.Priority == 0 {
		s.Priority = SummaryPriority
	}
	if !s.Priority.Valid() {
		return Item{}, fmt.Errorf("%w: summary %q has %v", ErrInvalidPriority, s.ID, s.Priority)
	}
	s.Covers = slices.Clone(s.Covers)
	s.Tokens = c.o.Counter.Count(s.Content)
	if s.Tokens < 0 {
		return Item{}, fmt.Errorf("%w: counter returned %d for the summary", ErrNegativeTokens, s.Tokens)
	}
	if _, err := addTokens(c.total, s.Tokens); err != nil {
		return Item{}, err
	}
	return s, nil
}

func sameItem(a, b *Item) bool {
	return a.ID == b.ID && a.Kind == b.Kind && a.Priority == b.Priority && a.Content == b.Content &&
		a.Seq == b.Seq && a.Group == b.Group && a.Mandatory == b.Mandatory && slices.Equal(a.Covers, b.Covers)
}

func (c *compactor) result() Result {
	res := Result{OriginalTokens: c.total, Summary: c.summary}
	for i := range c.items {
		if c.removed[c.unitOf[i]] {
			res.Removed = append(res.Removed, c.items[i].ID)
			continue
		}
		it := c.items[i]
		it.Tokens = c.tokens(int32(i))
		res.Kept = append(res.Kept, it)
		res.FinalTokens += it.Tokens // bounded by c.total
	}
	if c.summary != nil {
		res.ItemsSummarized = len(c.summary.Covers)
		res.FinalTokens += c.summary.Tokens // checked against total when made
	}
	res.ItemsRemoved = len(res.Removed) - res.ItemsSummarized
	res.Level = ReductionLevel(res.OriginalTokens, res.FinalTokens)
	return res
}

// ReductionLevel names how hard a compaction squeezed, from the share of
// tokens it removed: none → LevelNone; up to 10% → LevelLight; up to 40% →
// LevelModerate; up to 70% → LevelAggressive; more → LevelCritical. A
// compaction that grew the total (a summary larger than what it replaced)
// is LevelNone.
func ReductionLevel(original, final int64) Level {
	if original <= 0 || final >= original {
		return LevelNone
	}
	reduced := uint64(original - max(final, 0))
	atMost := func(pct uint64) bool { // reduced/original <= pct/100
		h1, l1 := bits.Mul64(reduced, 100)
		h2, l2 := bits.Mul64(uint64(original), pct)
		return h1 < h2 || (h1 == h2 && l1 <= l2)
	}
	switch {
	case atMost(10):
		return LevelLight
	case atMost(40):
		return LevelModerate
	case atMost(70):
		return LevelAggressive
	}
	return LevelCritical
}
