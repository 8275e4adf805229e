package compaction

import (
	"cmp"
	"errors"
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
	DefaultSummaryShare   = 0.25
)

// MinSummaryReserve is the least room, in tokens, Moderate sets aside for
// its summary (when the kept units leave that much): a summary of a few
// dozen tokens would name too few facts to be worth its header.
const MinSummaryReserve = 256

// FitOptions tunes Fit. The zero value means defaults.
type FitOptions struct {
	// Counter measures contents; nil means EstimateCounter.
	Counter Counter

	// Summarizer writes the Moderate level's summary; nil means Extractive.
	Summarizer Summarizer

	// KeepRecent is how many of the newest units Moderate keeps verbatim
	// whatever happens; 0 means DefaultKeepRecent.
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

	// TrustIDs skips the check that ids are distinct, for a caller that
	// guarantees it (the frames core refuses a duplicate handle id when
	// the handle is added): on large frames the check is the largest part
	// of Fit's cost that does not depend on what is emitted. Empty ids are
	// still refused. If ids do repeat, the pack repeats them too, and
	// Dropped or Summarized may name an id that is also emitted; the budget
	// and the other promises hold.
	TrustIDs bool

	// SummaryShare is the share of the budget Moderate reserves for its
	// summary, in (0, 1]: the reserve is SummaryShare×budget tokens (rounded
	// down), at least MinSummaryReserve, at most what the units kept
	// regardless leave. The rest goes to recent units kept verbatim. 0 means
	// DefaultSummaryShare. A larger share covers old content in more detail
	// and keeps less of the recent conversation word for word; the cost of
	// a Moderate pack grows with the summary, not with what it covers.
	SummaryShare float64
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
	switch {
	case !(o.SummaryShare >= 0 && o.SummaryShare <= 1): // NaN too
		return o, fmt.Errorf("%w: SummaryShare %v", ErrInvalidOption, o.SummaryShare)
	case o.SummaryShare == 0:
		o.SummaryShare = DefaultSummaryShare
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
	// emitted content's count. Items share their strings with the input;
	// when the pack is the input itself (LevelNone, every Tokens set,
	// already in this order) Items is the input slice, capacity capped,
	// not a copy: treat it as read-only.
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
//     non-Critical content whose trimmed form is over AbbreviateOver tokens
//     keeps its head and tail around "…[N tokens elided]…". Critical
//     content is never abbreviated, only whitespace-trimmed.
//   - Moderate: Light, but older content is summarized. Every Critical and
//     every Mandatory unit and the newest KeepRecent units are kept; if they
//     do not fit, neither does this level. Of the room they leave, a reserve
//     of SummaryShare×budget tokens (at least MinSummaryReserve, at most
//     that room) is set aside for the summary. Further units are then kept
//     newest first while each fits in what is left beyond the reserve; the
//     first that does not ends the fill. All the units not kept (none of
//     them Critical or Mandatory) are replaced by one summary item (Kind
//     SummaryKind, Priority SummaryPriority, Covers their ids) that the
//     Summarizer writes into the reserve plus whatever the fill left over.
//     An empty summary means this level does not fit; if every unit was
//     kept, there is no summary item.
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
// Cost: one pass over the items validates, counts what Item.Tokens does not
// give and (only if the pack must shrink) groups them into units; when
// everything fits in order, that is all, and nothing is copied. Light works
// newest first and gives up as soon as the budget is passed; with
// Item.LightTokens set it adds numbers, and only the contents emitted are
// normalised (and recounted, to check them). Moderate touches the units it
// keeps and writes the summary, whose cost is bounded by its size rather
// than by what it covers; listing what the summary covers is the one other
// cost that grows with the input. Aggressive looks at the Light size of
// every candidate; Critical at the Critical units only. A Fitter reused
// from call to call allocates little beyond the result.
func Fit(items []Item, budget int64, opts FitOptions) (FitResult, error) {
	return fit(items, budget, opts, &buffers{})
}

// A Fitter is Fit with memory: it keeps its working buffers from one call
// to the next, so that a caller assembling packs over and over (the actor
// shell) allocates little beyond the results, and the garbage collector has
// little to do. Its results are those of Fit, byte for byte, and share
// nothing with it. The zero value is ready to use. A Fitter is not safe for
// concurrent use, and holds memory in proportion to the largest input it
// has fitted (50 to 75 bytes an item, and up to 256 KiB for summaries),
// none of it referring to the inputs once a call returns.
type Fitter struct {
	buf buffers
}

// Fit is Fit, reusing f's buffers.
func (f *Fitter) Fit(items []Item, budget int64, opts FitOptions) (FitResult, error) {
	return fit(items, budget, opts, &f.buf)
}

func fit(items []Item, budget int64, opts FitOptions, b *buffers) (res FitResult, err error) {
	defer func() {
		b.release()
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
	fitsAt := budget
	if o.MinLevel != LevelNone {
		fitsAt = -1 // a layout is needed whatever the total
	}
	p, err := prepare(items, o.Counter, b, prepareFor{budget: fitsAt, trustIDs: o.TrustIDs, summaryID: o.SummaryID})
	if err != nil {
		return FitResult{}, err
	}
	if p.unitOf == nil {
		// The common case: everything fits, already in output order.
		res = FitResult{Level: LevelNone, Tokens: p.total}
		if p.tok == nil {
			res.Items = items[:len(items):len(items)] // see FitResult.Items
			return res, nil
		}
		res.Items = slices.Clone(items)
		for i := range res.Items {
			res.Items[i].Tokens = p.tok[i]
		}
		return res, nil
	}
	b.verified.start(o.Counter)
	res, err = newFitter(p, o, budget, true).run()
	if err == errDistrust {
		// A LightTokens disagreed with a recount: start over, counting.
		res, err = newFitter(p, o, budget, false).run()
	}
	if err == nil {
		b.verified.done()
	}
	return res, err
}

// errDistrust reports, inside Fit, that a precomputed LightTokens was found
// wrong: the pack is assembled again without trusting any.
var errDistrust = errors.New("compaction: LightTokens disagrees with a recount")

// Unit states during a try.
const (
	stDropped uint8 = iota
	stKept
	stSummarized
)

// lightEntry is an item's Light form. Its content is produced on first use:
// an entry made from a trusted LightTokens has only its size until the item
// is emitted.
type lightEntry struct {
	content string
	tokens  int64
	ready   bool // content is set (and tokens is its count)
}

// fitter tries the levels over a prepared input. It touches the units it
// keeps, not all of them, wherever the level allows: Light, Moderate and
// the Critical level cost what they emit (and summarize), not the input.
type fitter struct {
	*prepared
	o       FitOptions
	budget  int64
	trust   bool         // use Item.LightTokens
	trusted bool         // some Light size came from Item.LightTokens
	lightAt []int32      // per item: 1 + its index in light, 0 if not computed
	light   []lightEntry // computed on first use (few items, on large inputs)

	// A try's outcome.
	state     []uint8 // per unit; valid unless allKept
	allKept   bool    // every unit kept (None, Light)
	kept      []int32 // the units kept, in the order kept (unless allKept)
	keptItems int
	dropped   bool // some unit is stDropped
	useLight  bool
	summary   *Item
	summaryIt Item
}

func newFitter(p *prepared, o FitOptions, budget int64, trust bool) *fitter {
	b := p.buf
	b.state = resized(b.state, len(p.units))
	clear(b.light)
	b.light = b.light[:0]
	return &fitter{prepared: p, o: o, budget: budget, trust: trust, state: b.state, kept: b.kept[:0]}
}

// run tries the levels from MinLevel on.
func (f *fitter) run() (FitResult, error) {
	for lvl := f.o.MinLevel; lvl <= LevelCritical; lvl++ {
		var ok bool
		var err error
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
		f.buf.kept = f.kept[:0]
		if err != nil {
			var over *CriticalOverflowError
			if f.trusted && errors.As(err, &over) {
				return FitResult{}, errDistrust // Needed must be exact: recount
			}
			return FitResult{}, err
		}
		if ok {
			return f.result(lvl)
		}
	}
	panic("no level chosen") // unreachable: the Critical level fits or errs
}

// reset starts a try with every unit in state s.
func (f *fitter) reset(s uint8) {
	if len(f.state) > 0 { // fill by doubling copies: memmove speed
		f.state[0] = s
		for k := 1; k < len(f.state); k *= 2 {
			copy(f.state[k:], f.state[:k])
		}
	}
	f.allKept, f.kept, f.keptItems, f.dropped = false, f.kept[:0], 0, s == stDropped
	f.summary = nil
	f.useLight = true
}

// keepAll records that every unit is kept.
func (f *fitter) keepAll() {
	f.reset(stKept)
	f.allKept, f.keptItems = true, len(f.items)
}

// lightOf returns item i's Light token count. Its Light content is made
// now only if it must be counted (no LightTokens to trust) or abbreviated;
// else at emission (see emit). Critical units are only whitespace-trimmed.
func (f *fitter) lightOf(i int32) (int64, error) {
	if f.lightAt == nil {
		f.buf.lightAt = zeroed(f.buf.lightAt, len(f.items))
		f.lightAt, f.light = f.buf.lightAt, f.buf.light[:0]
	}
	if k := f.lightAt[i]; k != 0 {
		return f.light[k-1].tokens, nil
	}
	it := &f.items[i]
	raw := f.tokens(i)
	var e lightEntry
	if f.trust && it.LightTokens > 0 {
		f.trusted = true
		e.tokens = it.LightTokens
	} else {
		s, changed := normalizeSpace(it.Content)
		t := raw
		if changed {
			if t = f.o.Counter.Count(s); t < 0 {
				return 0, fmt.Errorf("%w: counter returned %d for item %q", ErrNegativeTokens, t, it.ID)
			}
		}
		e = lightEntry{content: s, tokens: t, ready: true}
	}
	if !f.units[f.unitOf[i]].critical() {
		if s, t, ok := abbreviate(it.Content, raw, e.tokens, f.o.AbbreviateOver, f.o.Counter); ok {
			e = lightEntry{content: s, tokens: t, ready: true}
		}
	}
	f.light = append(f.light, e)
	f.buf.light = f.light
	f.lightAt[i] = int32(len(f.light))
	return e.tokens, nil
}

// emit returns item i's Light content and its count, making the content
// if only its size was known, and reports errDistrust if the recount
// disagrees with the LightTokens trusted so far.
func (f *fitter) emit(i int32) (string, int64, error) {
	e := &f.light[f.lightAt[i]-1]
	if !e.ready {
		it := &f.items[i]
		if v, ok := f.buf.verified.get(it); ok && v.light == e.tokens {
			e.content, e.ready = v.normal, true
			f.buf.verified.keep(it, v)
			return e.content, e.tokens, nil
		}
		s, changed := normalizeSpace(it.Content)
		t := f.tokens(i)
		if changed {
			t = f.o.Counter.Count(s)
		}
		if t != e.tokens {
			return "", 0, errDistrust
		}
		e.content, e.ready = s, true
		if changed {
			f.buf.verified.keep(it, verifiedLight{content: it.Content, normal: s, light: t})
		}
	}
	return e.content, e.tokens, nil
}

// verifiedLight is an item whose LightTokens a recount confirmed: Light
// made normal of content, and normal counts light.
type verifiedLight struct {
	content, normal string
	light           int64
}

// verifiedSet holds the items a Fitter's last Fit (cur) and its current
// one (next) confirmed, by id, under the counter called name. An entry
// matches only the same content (compared whole: the same string in
// memory compares in O(1)); each Fit keeps what it emitted, so the set
// holds no more than two packs' worth.
type verifiedSet struct {
	name      string
	cur, next map[string]verifiedLight
}

// start begins a Fit under c: nothing is remembered for a counter without
// a name, or across a change of name.
func (v *verifiedSet) start(c Counter) {
	n, ok := c.(Named)
	name := ""
	if ok {
		name = n.Name()
	}
	if !ok || name == "" || name != v.name {
		clear(v.cur)
		v.name = name
	}
	clear(v.next) // left by a Fit that failed
}

func (v *verifiedSet) get(it *Item) (verifiedLight, bool) {
	if v.name == "" {
		return verifiedLight{}, false
	}
	e, ok := v.cur[it.ID]
	if !ok || e.content != it.Content {
		return verifiedLight{}, false
	}
	return e, true
}

func (v *verifiedSet) keep(it *Item, e verifiedLight) {
	if v.name == "" {
		return
	}
	if v.next == nil {
		v.next = map[string]verifiedLight{}
	}
	v.next[it.ID] = e
}

// done ends a Fit that succeeded: what it confirmed is what the next Fit
// may trust.
func (v *verifiedSet) done() {
	if v.name == "" {
		return
	}
	clear(v.cur)
	v.cur, v.next = v.next, v.cur
}

// unitLight returns the Light tokens of unit u, stopping early (and
// reporting false) once they pass limit.
func (f *fitter) unitLight(u int32, limit int64) (int64, bool, error) {
	ui := &f.units[u]
	var sum int64
	for k := ui.start; k < ui.end; k++ {
		t, err := f.lightOf(f.member(k))
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
// limit.
func (f *fitter) keep(u int32, used *int64, limit int64) (bool, error) {
	t, ok, err := f.unitLight(u, limit-*used)
	if !ok || err != nil {
		return false, err
	}
	*used += t
	f.state[u] = stKept
	f.kept = append(f.kept, u)
	f.keptItems += int(f.units[u].end - f.units[u].start)
	return true, nil
}

func (f *fitter) tryNone() bool {
	if f.total > f.budget {
		return false
	}
	f.keepAll()
	f.useLight = false
	return true
}

func (f *fitter) tryLight() (bool, error) {
	// Newest first: if Light does not fit, the Light sizes computed before
	// giving up are the ones Moderate and Aggressive keep first.
	var used int64
	for r := len(f.units) - 1; r >= 0; r-- {
		t, ok, err := f.unitLight(f.rec(r), f.budget-used)
		if !ok || err != nil {
			return false, err
		}
		used += t
	}
	f.keepAll()
	return true, nil
}

func (f *fitter) tryModerate() (bool, error) {
	f.reset(stSummarized)
	// Kept whatever happens: Critical and Mandatory units, the newest ones.
	var used int64
	for _, i := range f.special {
		if u := f.unitOf[i]; f.state[u] != stKept {
			if ok, err := f.keep(u, &used, f.budget); !ok || err != nil {
				return false, err
			}
		}
	}
	n := len(f.units)
	for r := n - 1; r >= 0 && r >= n-f.o.KeepRecent; r-- {
		if u := f.rec(r); f.state[u] != stKept {
			if ok, err := f.keep(u, &used, f.budget); !ok || err != nil {
				return false, err
			}
		}
	}
	// Then newest first, verbatim, while they fit beside the reserve.
	room := f.budget - used
	fill := used + room - f.summaryReserve(room)
	last := n - 1 - f.o.KeepRecent // the newest unit that may be summarized
	for ; last >= 0; last-- {
		if u := f.rec(last); f.state[u] != stKept {
			ok, err := f.keep(u, &used, fill)
			if err != nil {
				return false, err
			}
			if !ok {
				break
			}
		}
	}
	if last < 0 {
		return true, nil // everything kept: nothing to summarize
	}
	covered := f.covered(last)
	if covered.len() == 0 {
		return true, nil
	}
	text, t, err := f.summarize(covered, f.budget-used)
	if err != nil || text == "" {
		return false, err
	}
	f.summaryIt = summaryItem(f.freeSummaryID(), text, t, covered)
	f.summary = &f.summaryIt
	return true, nil
}

// covered returns the items Moderate summarizes: those of the units not
// kept, all of them no newer than the unit at recency position last. They
// are one run of the input, but for Critical or Mandatory units among them,
// in the usual case (input in Seq order, groups adjacent); then finding
// them costs what is kept, not what is covered.
func (f *fitter) covered(last int) itemView {
	if f.members != nil || f.byRecency != nil {
		idx := f.buf.covered[:0]
		for i, u := range f.unitOf {
			if f.state[u] == stSummarized {
				idx = append(idx, int32(i))
			}
		}
		f.buf.covered = idx
		return itemView{items: f.items, idx: idx}
	}
	// Units are input runs in recency order: the candidates are the input
	// up to the end of unit last (not kept), less the special units among
	// them.
	end := f.units[f.rec(last)].end
	lo, hi := int32(0), end // the run, while the special units are at its start
	idx := f.buf.covered[:0]
	listed := false
	for _, i := range f.special {
		if i >= end {
			break
		}
		ui := &f.units[f.unitOf[i]]
		switch {
		case listed:
		case ui.start <= lo:
			lo = max(lo, ui.end) // at the start: the run begins after it
		default: // in the middle: list the run's items one by one
			if !listed {
				listed = true
				for k := lo; k < hi; k++ {
					if f.state[f.unitOf[k]] == stSummarized {
						idx = append(idx, k)
					}
				}
			}
		}
	}
	f.buf.covered = idx
	if listed {
		return itemView{items: f.items, idx: idx}
	}
	if lo >= hi {
		return itemView{}
	}
	return itemView{items: f.items[lo:hi:hi]}
}

// summaryReserve is the room Moderate sets aside for its summary when room
// is what the units kept regardless leave.
func (f *fitter) summaryReserve(room int64) int64 {
	share := float64(f.budget) * f.o.SummaryShare
	if share >= float64(room) {
		return room
	}
	return min(room, max(MinSummaryReserve, int64(share)))
}

// summarize writes the summary of covered, the items of the units in
// state stSummarized, in at most maxTokens. Extractive runs in the fitter's
// buffers, told what the fitter knows of the items' order.
func (f *fitter) summarize(covered itemView, maxTokens int64) (string, int64, error) {
	if _, ok := f.o.Summarizer.(Extractive); !ok {
		return summarize(f.o.Summarizer, covered.slice(), maxTokens, f.o.Counter)
	}
	hint := &orderHint{sorted: f.sortedSeq, counts: f.counts}
	for _, u := range f.kept {
		ui := &f.units[u]
		for k := ui.start; k < ui.end; k++ {
			hint.counts[bucket(f.items[f.member(k)].Priority)]--
		}
	}
	// Extractive has counted its text under the counter, once: it is not
	// counted again.
	text, t := f.buf.x.summarize(covered, maxTokens, f.o.Counter, hint)
	return checkCounted(text, t, maxTokens)
}

// summarize runs s and checks its contract.
func summarize(s Summarizer, items []Item, maxTokens int64, c Counter) (string, int64, error) {
	text, err := s.Summarize(items, maxTokens, c)
	return checkSummary(text, err, maxTokens, c)
}

// checkSummary checks what a Summarizer returned against its contract.
func checkSummary(text string, err error, maxTokens int64, c Counter) (string, int64, error) {
	if err != nil {
		return "", 0, fmt.Errorf("%w: %w", ErrSummarizerFailed, err)
	}
	if text == "" {
		return "", 0, nil
	}
	return checkCounted(text, c.Count(text), maxTokens)
}

// checkCounted checks a summary and its count t against maxTokens.
func checkCounted(text string, t, maxTokens int64) (string, int64, error) {
	if text == "" {
		return "", 0, nil
	}
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
		if !f.hasID(id) {
			return id
		}
		id = f.o.SummaryID + "-" + strconv.Itoa(k)
	}
}

func (f *fitter) tryAggressive() (bool, error) {
	f.reset(stDropped)
	var used int64
	for pass := 0; pass < 2; pass++ { // Critical units, then Mandatory ones
		for _, i := range f.special {
			u := f.unitOf[i]
			ui := &f.units[u]
			if f.state[u] != stKept && ((pass == 0 && ui.critical()) || (pass == 1 && ui.mandatory)) {
				if ok, err := f.keep(u, &used, f.budget); !ok || err != nil {
					return false, err
				}
			}
		}
	}
	for p := High; p <= Medium; p++ {
		for r := len(f.units) - 1; r >= 0; r-- {
			u := f.rec(r)
			if f.state[u] == stDropped && f.units[u].prio == p {
				if _, err := f.keep(u, &used, f.budget); err != nil {
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
	for _, i := range f.special {
		u := f.unitOf[i]
		if f.state[u] == stKept || !f.units[u].critical() {
			continue
		}
		t, ok, err := f.unitLight(u, math.MaxInt64-need)
		if err != nil {
			return false, err
		}
		if !ok {
			return false, fmt.Errorf("%w: Critical content", ErrOverflow)
		}
		need += t
		f.state[u] = stKept
		f.kept = append(f.kept, u)
		f.keptItems += int(f.units[u].end - f.units[u].start)
	}
	if need > f.budget {
		return false, &CriticalOverflowError{Needed: need, Budget: f.budget}
	}
	return true, nil
}

// result lays out the chosen units in FitResult order.
func (f *fitter) result(lvl Level) (FitResult, error) {
	res := FitResult{Level: lvl}
	n := f.keptItems
	if f.summary != nil {
		n++
	}
	res.Items = make([]Item, n)
	k := 0
	summaryDone := f.summary == nil
	emitUnit := func(u int32) error {
		ui := &f.units[u]
		if !summaryDone && ui.seq > f.summary.Seq {
			res.Items[k] = *f.summary
			k++
			summaryDone = true
		}
		for m := ui.start; m < ui.end; m++ {
			i := f.member(m)
			it := &res.Items[k]
			*it = f.items[i]
			if f.useLight {
				s, t, err := f.emit(i)
				if err != nil {
					return err
				}
				if s != it.Content {
					it.Content, it.LightTokens = s, 0
				}
				it.Tokens = t
			} else {
				it.Tokens = f.tokens(i)
			}
			k++
			res.Tokens += it.Tokens // bounded by the budget: cannot overflow
		}
		return nil
	}
	if f.allKept {
		for r := range f.units {
			if err := emitUnit(f.rec(r)); err != nil {
				return FitResult{}, err
			}
		}
	} else {
		slices.SortFunc(f.kept, func(a, b int32) int { return cmp.Compare(f.rank(a), f.rank(b)) })
		for _, u := range f.kept {
			if err := emitUnit(u); err != nil {
				return FitResult{}, err
			}
		}
	}
	if !summaryDone {
		res.Items[k] = *f.summary
	}
	if f.summary != nil {
		res.Tokens += f.summary.Tokens
		res.Summarized = f.summary.Covers
	}
	if f.dropped {
		for i := range f.items {
			if f.state[f.unitOf[i]] == stDropped {
				res.Dropped = append(res.Dropped, f.items[i].ID)
				if f.items[i].Mandatory {
					res.MandatoryDropped = append(res.MandatoryDropped, f.items[i].ID)
				}
			}
		}
	}
	if res.Tokens > f.budget { // an invariant, not an input error
		panic(fmt.Sprintf("pack of %d tokens exceeds budget %d", res.Tokens, f.budget))
	}
	return res, nil
}
