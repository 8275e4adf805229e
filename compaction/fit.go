package compaction

import (
	"fmt"
	"math"
	"slices"
	"strconv"
)

// Defaults for FitOptions.
const (
	DefaultKeepRecent     = 10
	DefaultAbbreviateOver = 512
	DefaultPackSummaryID  = "pack-summary"
)

// FitOptions tunes Fit. The zero value means defaults.
type FitOptions struct {
	// Counter measures contents; nil means EstimateCounter.
	Counter Counter

	// Summarizer writes the Moderate level's summary; nil means Extractive.
	Summarizer Summarizer

	// KeepRecent is how many of the newest units Moderate leaves out of the
	// summary; 0 means DefaultKeepRecent.
	KeepRecent int

	// MinLevel is the first level tried (a request's min_compaction).
	MinLevel Level

	// AbbreviateOver is the size, in tokens, above which Light abbreviates a
	// non-Critical content to its head and tail; 0 means
	// DefaultAbbreviateOver.
	AbbreviateOver int64

	// SummaryID is the id of the Moderate summary item; "" means
	// DefaultPackSummaryID. If an input item already has it, "-2", "-3", …
	// is appended until it is free.
	SummaryID string
}

func (o FitOptions) withDefaults() (FitOptions, error) {
	if o.Counter == nil {
		o.Counter = EstimateCounter{}
	}
	if o.Summarizer == nil {
		o.Summarizer = Extractive{}
	}
	switch {
	case o.KeepRecent < 0:
		return o, fmt.Errorf("%w: KeepRecent %d", ErrInvalidOption, o.KeepRecent)
	case o.KeepRecent == 0:
		o.KeepRecent = DefaultKeepRecent
	}
	switch {
	case o.AbbreviateOver < 0:
		return o, fmt.Errorf("%w: AbbreviateOver %d", ErrInvalidOption, o.AbbreviateOver)
	case o.AbbreviateOver == 0:
		o.AbbreviateOver = DefaultAbbreviateOver
	}
	if !o.MinLevel.Valid() {
		return o, fmt.Errorf("%w: MinLevel %v", ErrInvalidLevel, o.MinLevel)
	}
	if o.SummaryID == "" {
		o.SummaryID = DefaultPackSummaryID
	}
	return o, nil
}

// FitResult is what Fit chose.
type FitResult struct {
	// Items is the pack's content in conversation order: units oldest
	// first by their recency (a unit's newest Seq; ties by input position),
	// the items of a unit together and in input order, so a tool call is
	// followed by its result. A summary item stands where the content it
	// covers ended: after the kept units no newer than its Seq (the newest
	// Seq it covers). Priority decides what is kept, not where it goes: a
	// prompt reads as the conversation happened. Every item's Tokens is its
	// emitted content's count.
	Items []Item

	// Level is the level at which everything chosen fit.
	Level Level

	// Tokens is the sum of Items' Tokens: the recount of every emitted
	// content under the counter, and never more than the budget.
	Tokens int64

	// Dropped lists, in input order, the ids neither emitted nor covered by
	// the summary.
	Dropped []string

	// Summarized lists, in input order, the ids the summary item covers:
	// it is that item's Covers (the same slice).
	Summarized []string

	// MandatoryDropped lists, in input order, the dropped ids whose item was
	// Mandatory. Only the Critical level drops them.
	MandatoryDropped []string
}

// Fit chooses what of items goes into a pack of at most budget tokens under
// opts.Counter, trying the levels in order from opts.MinLevel and stopping
// at the first where everything it keeps fits (addendum §2, Compaction
// Flow):
//
//   - None: every item as is.
//   - Light: every item, whitespace runs collapsed and ends trimmed; a
//     non-Critical content over AbbreviateOver tokens keeps its head and
//     tail around "…[N tokens elided]…". Critical content is never
//     abbreviated, only whitespace-trimmed.
//   - Moderate: Light, but the units older than the newest KeepRecent that
//     are neither Critical nor Mandatory are replaced by one summary item
//     (Kind SummaryKind, Priority SummaryPriority, Covers their ids) that the
//     Summarizer writes into whatever the kept units leave. An empty summary
//     means this level does not fit.
//   - Aggressive: Light; Low and Background units are dropped unless
//     Mandatory; every Critical and then every Mandatory unit is kept; the
//     rest is filled by priority, then recency (newest first), skipping
//     what does not fit. It fits whenever the Critical and Mandatory units do.
//   - Critical: only the Critical units, Light-trimmed. Mandatory units are
//     dropped and listed in MandatoryDropped.
//
// A unit (see Units) is never split. If the Critical units alone exceed the
// budget, the error is a *CriticalOverflowError naming the tokens needed.
// Empty input gives an empty result at LevelNone. Fit is deterministic and
// does not modify items.
//
// Cost: each content is counted at most once (not at all when Item.Tokens
// is set) and recounted only if Light changed it. When everything fits in
// order, Fit validates and copies. Light scans contents newest first and
// gives up as soon as the budget is passed; Moderate's cost is that of
// writing the summary, bounded by its size rather than by what it covers;
// Aggressive scans the contents of the candidates it considers.
func Fit(items []Item, budget int64, opts FitOptions) (res FitResult, err error) {
	defer func() {
		if r := recover(); r != nil {
			res, err = FitResult{}, fmt.Errorf("%w: %v", ErrPanic, r)
		}
	}()
	if budget < 0 {
		return FitResult{}, fmt.Errorf("%w: %d", ErrNegativeBudget, budget)
	}
	o, err := opts.withDefaults()
	if err != nil {
		return FitResult{}, err
	}
	if len(items) == 0 {
		return FitResult{Level: LevelNone}, nil
	}
	p, err := prepare(items, o.Counter)
	if err != nil {
		return FitResult{}, err
	}
	fitsAsIs := o.MinLevel == LevelNone && p.total <= budget
	if !fitsAsIs || !p.plain() {
		p.buildLayout()
	}
	if fitsAsIs && (p.plain() || p.inOrder()) {
		// The common case: everything fits, already in output order.
		res = FitResult{Level: LevelNone, Items: slices.Clone(items), Tokens: p.total}
		for i := range res.Items {
			res.Items[i].Tokens = p.tok[i]
		}
		return res, nil
	}
	f := &fitter{prepared: p, o: o, budget: budget, state: make([]uint8, len(p.units))}
	for lvl := o.MinLevel; lvl <= LevelCritical; lvl++ {
		var ok bool
		switch lvl {
		case LevelNone:
			ok = f.tryNone()
		case LevelLight:
			ok, err = f.tryLight()
		case LevelModerate:
			ok, err = f.tryModerate()
		case LevelAggressive:
			ok, err = f.tryAggressive()
		case LevelCritical:
			ok, err = f.tryCritical()
		}
		if err != nil {
			return FitResult{}, err
		}
		if ok {
			return f.result(lvl)
		}
	}
	panic("no level chosen") // unreachable: the Critical level fits or errs
}

// Unit states during a try.
const (
	stDropped uint8 = iota
	stKept
	stSummarized
)

type lightEntry struct {
	content string
	tokens  int64
}

type fitter struct {
	*prepared
	o        FitOptions
	budget   int64
	lightAt  []int32      // per item: 1 + its index in light, 0 if not computed
	light    []lightEntry // computed on first use (few items, on large inputs)
	state    []uint8      // per unit
	useLight bool
	summary  *Item
}

func (f *fitter) reset(s uint8) {
	for u := range f.state {
		f.state[u] = s
	}
	f.summary = nil
	f.useLight = true
}

// lightOf returns item i's Light token count, computing its Light content
// once. Critical units are only whitespace-trimmed.
func (f *fitter) lightOf(i int32) (int64, error) {
	if f.lightAt == nil {
		f.lightAt = make([]int32, len(f.items))
	}
	if k := f.lightAt[i]; k != 0 {
		return f.light[k-1].tokens, nil
	}
	s, t := f.items[i].Content, f.tok[i]
	if n, changed := normalizeSpace(s); changed {
		s, t = n, f.o.Counter.Count(n)
		if t < 0 {
			return 0, fmt.Errorf("%w: counter returned %d for item %q", ErrNegativeTokens, t, f.items[i].ID)
		}
	}
	if !f.units[f.unitOf[i]].critical() {
		s, t = abbreviate(s, t, f.o.AbbreviateOver, f.o.Counter)
	}
	f.light = append(f.light, lightEntry{content: s, tokens: t})
	f.lightAt[i] = int32(len(f.light))
	return t, nil
}

// unitLight returns the Light tokens of unit u, stopping early (and
// reporting false) once they pass limit.
func (f *fitter) unitLight(u int32, limit int64) (int64, bool, error) {
	ui := &f.units[u]
	var sum int64
	for _, i := range f.members[ui.start:ui.end] {
		t, err := f.lightOf(i)
		if err != nil {
			return 0, false, err
		}
		if t > limit-sum {
			return 0, false, nil
		}
		sum += t
	}
	return sum, true, nil
}

// keep marks unit u kept if its Light tokens fit in what *used leaves of
// the budget.
func (f *fitter) keep(u int32, used *int64) (bool, error) {
	t, ok, err := f.unitLight(u, f.budget-*used)
	if !ok || err != nil {
		return false, err
	}
	*used += t
	f.state[u] = stKept
	return true, nil
}

func (f *fitter) tryNone() bool {
	if f.total > f.budget {
		return false
	}
	f.reset(stKept)
	f.useLight = false
	return true
}

func (f *fitter) tryLight() (bool, error) {
	// Newest first: if Light does not fit, the trimmed contents computed
	// before giving up are the ones Moderate and Aggressive keep first.
	var used int64
	for r := len(f.byRecency) - 1; r >= 0; r-- {
		t, ok, err := f.unitLight(f.byRecency[r], f.budget-used)
		if !ok || err != nil {
			return false, err
		}
		used += t
	}
	f.reset(stKept)
	return true, nil
}

func (f *fitter) tryModerate() (bool, error) {
	f.reset(stSummarized)
	n := len(f.byRecency)
	for r := n - 1; r >= 0 && r >= n-f.o.KeepRecent; r-- {
		f.state[f.byRecency[r]] = stKept
	}
	var used int64
	for u := range f.units {
		ui := &f.units[u]
		if f.state[u] == stKept || ui.critical() || ui.mandatory {
			if ok, err := f.keep(int32(u), &used); !ok || err != nil {
				return false, err
			}
		}
	}
	covered := f.gather(func(u int32) bool { return f.state[u] == stSummarized })
	if len(covered) == 0 {
		return true, nil // nothing old enough to summarize
	}
	left := f.budget - used
	text, t, err := summarize(f.o.Summarizer, covered, left, f.o.Counter)
	if err != nil || text == "" {
		return false, err
	}
	s := summaryItem(f.freeSummaryID(), text, t, covered)
	f.summary = &s
	return true, nil
}

// summarize runs s and checks its contract.
func summarize(s Summarizer, items []Item, maxTokens int64, c Counter) (string, int64, error) {
	text, err := s.Summarize(items, maxTokens, c)
	if err != nil {
		return "", 0, fmt.Errorf("%w: %w", ErrSummarizerFailed, err)
	}
	if text == "" {
		return "", 0, nil
	}
	t := c.Count(text)
	if t < 0 {
		return "", 0, fmt.Errorf("%w: counter returned %d for the summary", ErrNegativeTokens, t)
	}
	if t > maxTokens {
		return "", 0, fmt.Errorf("%w: %d tokens, limit %d", ErrSummaryOverBudget, t, maxTokens)
	}
	return text, t, nil
}

func (f *fitter) freeSummaryID() string {
	id := f.o.SummaryID
	for k := 2; ; k++ {
		if _, taken := f.ids.lookup(id); !taken {
			return id
		}
		id = f.o.SummaryID + "-" + strconv.Itoa(k)
	}
}

func (f *fitter) tryAggressive() (bool, error) {
	f.reset(stDropped)
	var used int64
	for pass := 0; pass < 2; pass++ { // Critical units, then Mandatory ones
		for u := range f.units {
			ui := &f.units[u]
			if (pass == 0 && ui.critical()) || (pass == 1 && ui.mandatory && !ui.critical()) {
				if ok, err := f.keep(int32(u), &used); !ok || err != nil {
					return false, err
				}
			}
		}
	}
	for p := High; p <= Medium; p++ {
		for r := len(f.byRecency) - 1; r >= 0; r-- {
			u := f.byRecency[r]
			if f.state[u] == stDropped && f.units[u].prio == p {
				if _, err := f.keep(u, &used); err != nil {
					return false, err
				}
			}
		}
	}
	return true, nil
}

func (f *fitter) tryCritical() (bool, error) {
	f.reset(stDropped)
	var need int64
	for u := range f.units {
		if !f.units[u].critical() {
			continue
		}
		t, ok, err := f.unitLight(int32(u), math.MaxInt64-need)
		if err != nil {
			return false, err
		}
		if !ok {
			return false, fmt.Errorf("%w: Critical content", ErrOverflow)
		}
		need += t
		f.state[u] = stKept
	}
	if need > f.budget {
		return false, &CriticalOverflowError{Needed: need, Budget: f.budget}
	}
	return true, nil
}

// result lays out the chosen units in FitResult order.
func (f *fitter) result(lvl Level) (FitResult, error) {
	res := FitResult{Level: lvl}
	n := 0
	for u := range f.units {
		if f.state[u] == stKept {
			n += int(f.units[u].end - f.units[u].start)
		}
	}
	if f.summary != nil {
		n++
	}
	res.Items = make([]Item, n)
	k := 0
	summaryDone := f.summary == nil
	for _, u := range f.byRecency {
		if f.state[u] != stKept {
			continue
		}
		ui := &f.units[u]
		if !summaryDone && ui.seq > f.summary.Seq {
			res.Items[k] = *f.summary
			k++
			summaryDone = true
		}
		for _, i := range f.members[ui.start:ui.end] {
			it := &res.Items[k]
			*it = f.items[i]
			if f.useLight {
				e := &f.light[f.lightAt[i]-1]
				it.Content, it.Tokens = e.content, e.tokens
			} else {
				it.Tokens = f.tok[i]
			}
			k++
			res.Tokens += it.Tokens // bounded by the budget: cannot overflow
		}
	}
	if !summaryDone {
		res.Items[k] = *f.summary
	}
	if f.summary != nil {
		res.Tokens += f.summary.Tokens
		res.Summarized = f.summary.Covers
	}
	for i := range f.items {
		if f.state[f.unitOf[i]] == stDropped {
			res.Dropped = append(res.Dropped, f.items[i].ID)
			if f.items[i].Mandatory {
				res.MandatoryDropped = append(res.MandatoryDropped, f.items[i].ID)
			}
		}
	}
	if res.Tokens > f.budget { // an invariant, not an input error
		panic(fmt.Sprintf("pack of %d tokens exceeds budget %d", res.Tokens, f.budget))
	}
	return res, nil
}
