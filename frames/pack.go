package frames

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/stateindex/stateindex/compaction"
)

// MinPackBudget is the smallest budget a context pack may be asked for.
const MinPackBudget = 500

// Goals are cut short in the brief and the breadcrumbs so that neither can
// crowd out the segments.
const (
	briefGoalBytes = 1024
	crumbGoalBytes = 120
)

// BudgetTooSmallError refuses a pack budget under MinPackBudget; it matches
// ErrBudgetTooSmall.
type BudgetTooSmallError struct {
	Budget int64
	Needed int64 // MinPackBudget
}

func (e *BudgetTooSmallError) Error() string {
	return fmt.Sprintf("%v: budget %d is under the minimum of %d tokens", ErrBudgetTooSmall, e.Budget, e.Needed)
}

// Is matches ErrBudgetTooSmall.
func (e *BudgetTooSmallError) Is(target error) bool { return target == ErrBudgetTooSmall }

// PackQuery asks for a frame's context fitted to a budget.
type PackQuery struct {
	FrameID  string // "" is the top of the stack
	Budget   int64
	Role     string // "" is DefaultRole
	Include  []string
	Exclude  []string
	MinLevel compaction.Level
	// Counter counts what the pack emits (nil: compaction.EstimateCounter);
	// Summarizer writes the Moderate level's summary (nil: Extractive).
	Counter    compaction.Counter
	Summarizer compaction.Summarizer
	// CounterName names Counter as calibration samples do (the pack's
	// metadata): the scope's samples of that counter calibrate the pack
	// (Calibrate). "" calibrates nothing.
	CounterName string
}

// Breadcrumb is one ancestor of the packed frame, root first.
type Breadcrumb struct {
	FrameID string
	Depth   int64
	Status  Status
	Text    string // what is emitted and counted
}

// Pack is a frame's context fitted to a budget: a brief, breadcrumbs of the
// frame's ancestry and the frame's handles as compaction.Fit chose them.
// Used is every emitted part counted under the query's counter, never more
// than EffectiveBudget: Budget, or what calibration made of it
// (Calibration, nil when the scope has no sample of the query's counter).
// Segments share their strings with the state.
type Pack struct {
	Scope           string
	Version         int64
	FrameID         string
	Brief           string
	Breadcrumbs     []Breadcrumb
	Segments        []compaction.Item
	Budget          int64
	EffectiveBudget int64
	Calibration     *PackCalibration
	Used            int64
	BriefTokens     int64
	CrumbTokens     int64
	// SegmentTokens is the sum of the segments' Tokens.
	SegmentTokens int64
	Level         compaction.Level
	Dropped       []string
	Summarized    []string
}

// PackBuffers are the working memory of AssemblePack, kept by a caller that
// assembles pack after pack (one actor shard) so that it allocates little.
// The zero value is ready; it is not safe for concurrent use.
type PackBuffers struct {
	Fitter compaction.Fitter
	items  []compaction.Item
	heads  headCounts
}

// headCounts remembers the counts of the last pack's brief and breadcrumbs
// (cur) and this pack's (next) under a counter that says its name
// (compaction.Named): between two packs of a frame they are the same
// texts, and a BPE counter costs about half a microsecond a token.
type headCounts struct {
	name      string
	cur, next map[string]int64
}

// start begins a pack under c.
func (h *headCounts) start(c compaction.Counter) {
	name := ""
	if n, ok := c.(compaction.Named); ok {
		name = n.Name()
	}
	if name != h.name {
		clear(h.cur)
		h.name = name
	}
	clear(h.next)
}

// count returns c.Count(s), remembered.
func (h *headCounts) count(c compaction.Counter, s string) int64 {
	if h.name == "" {
		return c.Count(s)
	}
	if t, ok := h.next[s]; ok {
		return t
	}
	t, ok := h.cur[s]
	if !ok {
		t = c.Count(s)
	}
	if h.next == nil {
		h.next = map[string]int64{}
	}
	h.next[s] = t
	return t
}

// done ends a pack: its texts are what the next may find.
func (h *headCounts) done() {
	clear(h.cur)
	h.cur, h.next = h.next, h.cur
}

// AssemblePack builds the context pack q asks of s. The rules:
//
//   - The budget is at least MinPackBudget (else *BudgetTooSmallError).
//   - The pack is fitted to the effective budget: the budget calibrated by
//     the scope's samples of q.CounterName (Calibrate; the budget itself
//     when there are none). Everything below speaks of that budget, except
//     a CriticalOverflowError's Needed and Budget, which are budgets to ask
//     for.
//   - The brief names the role, the scope and the frame's goal; breadcrumbs
//     name the frame's ancestors, root first. Both are counted as emitted.
//   - Only Critical content must fit. When the brief and breadcrumbs leave
//     too little room for it they yield: breadcrumbs go from the root side
//     (the frame's own last), then the brief is cut, then dropped.
//   - If the Critical content alone exceeds the budget, the error is a
//     *compaction.CriticalOverflowError whose Needed is a budget that
//     succeeds with nothing cut: the Critical content at its most compact
//     plus the whole brief and breadcrumbs. (Any budget of at least the
//     Critical content and MinPackBudget succeeds, the head cut to fit.)
//   - Include names handles that must be in the pack if anything but
//     Critical content fits (an unknown one is an error); Exclude leaves
//     handles out. A tool call and its result are one unit: naming either
//     half includes or excludes both.
//
// buf may be nil. AssemblePack never changes s.
func AssemblePack(cfg Config, s *State, q PackQuery, buf *PackBuffers) (Pack, error) {
	if q.Budget < MinPackBudget {
		return Pack{}, &BudgetTooSmallError{Budget: q.Budget, Needed: MinPackBudget}
	}
	if !q.MinLevel.Valid() {
		return Pack{}, invalid("min compaction level %d", q.MinLevel)
	}
	if err := checkText("role", q.Role, cfg.MaxNameBytes); err != nil {
		return Pack{}, err
	}
	f, err := LookupFrame(cfg, s, q.FrameID)
	if err != nil {
		return Pack{}, err
	}
	hints, err := packHints(cfg, f, q.Include, q.Exclude)
	if err != nil {
		return Pack{}, err
	}
	if buf == nil {
		buf = &PackBuffers{}
	}
	c := q.Counter
	if c == nil {
		c = compaction.EstimateCounter{}
	}
	budget, cal, worst := calibrate(cfg, s, q.CounterName, q.Budget)
	role := q.Role
	if role == "" {
		role = DefaultRole
	}
	buf.heads.start(c)
	defer buf.heads.done()
	head := newPackHead(c, &buf.heads, "Role: "+role+"\nScope: "+s.Scope+"\nGoal: "+cut(f.Goal, briefGoalBytes), s.Ancestry(f.ID))

	buf.items = handleItems(buf.items, f.Handles, hints)
	defer clear(buf.items) // drop references to contents until the next pack
	opts := compaction.FitOptions{Counter: c, Summarizer: q.Summarizer, MinLevel: q.MinLevel, TrustIDs: true}
	var fit compaction.FitResult
	var coe *compaction.CriticalOverflowError
	fitted := false
	if room := budget - head.tokens(); room >= 0 {
		fit, err = buf.Fitter.Fit(buf.items, room, opts)
		if err != nil && !errors.As(err, &coe) {
			return Pack{}, err
		}
		fitted = err == nil
	}
	if !fitted {
		// The brief and breadcrumbs yield to the Critical content.
		var need int64
		if coe != nil {
			need = coe.Needed
		} else if need, err = criticalNeed(&buf.Fitter, buf.items, opts); err != nil {
			return Pack{}, err
		}
		if need > budget {
			// Needed: the Critical content with the whole brief and
			// breadcrumbs, so that asking again cuts nothing.
			needed, calibrated := max(need+head.tokens(), MinPackBudget), ""
			if cal != nil {
				needed = requestedFor(cfg, s, q.CounterName, need+head.tokens())
				calibrated = fmt.Sprintf(" (calibrated budget %d)", budget)
			}
			return Pack{}, fmt.Errorf("frame %q: critical content needs %d tokens and the brief and breadcrumbs %d%s: %w",
				f.ID, need, head.tokens(), calibrated, &compaction.CriticalOverflowError{Needed: needed, Budget: q.Budget})
		}
		head.squeeze(budget - need)
		if fit, err = buf.Fitter.Fit(buf.items, budget-head.tokens(), opts); err != nil {
			return Pack{}, err
		}
	}
	used := head.tokens() + fit.Tokens
	if used > budget {
		return Pack{}, fmt.Errorf("%w: pack of %d tokens over budget %d", ErrInvariantViolation, used, budget)
	}
	if cal != nil {
		cal.EstimatedProviderTokens = worst.provider(used)
	}
	return Pack{
		Scope: s.Scope, Version: s.Version, FrameID: f.ID,
		Brief: head.brief, Breadcrumbs: head.crumbs, Segments: append([]compaction.Item(nil), fit.Items...),
		Budget: q.Budget, EffectiveBudget: budget, Calibration: cal, Used: used, BriefTokens: head.briefTokens, CrumbTokens: head.crumbTotal, SegmentTokens: fit.Tokens,
		Level: fit.Level, Dropped: fit.Dropped, Summarized: fit.Summarized,
	}, nil
}

// criticalNeed is what the Critical content needs at its most compact (0
// when there is none).
func criticalNeed(fitter *compaction.Fitter, items []compaction.Item, opts compaction.FitOptions) (int64, error) {
	opts.MinLevel = compaction.LevelCritical
	_, err := fitter.Fit(items, 0, opts)
	var coe *compaction.CriticalOverflowError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &coe):
		return coe.Needed, nil
	}
	return 0, err
}

// packHead is a pack's brief and breadcrumbs with their token counts.
type packHead struct {
	c           compaction.Counter
	brief       string
	briefTokens int64
	crumbs      []Breadcrumb
	crumbTokens []int64
	crumbTotal  int64
}

func newPackHead(c compaction.Counter, memo *headCounts, brief string, ancestry []*Frame) *packHead {
	h := &packHead{c: c, brief: brief, briefTokens: memo.count(c, brief),
		crumbs: make([]Breadcrumb, len(ancestry)), crumbTokens: make([]int64, len(ancestry))}
	for i, a := range ancestry {
		h.crumbs[i] = Breadcrumb{FrameID: a.ID, Depth: a.Depth, Status: a.Status,
			Text: strconv.FormatInt(a.Depth, 10) + ". [" + a.Status.String() + "] " + cut(a.Goal, crumbGoalBytes)}
		h.crumbTokens[i] = memo.count(c, h.crumbs[i].Text)
		h.crumbTotal += h.crumbTokens[i]
	}
	return h
}

func (h *packHead) tokens() int64 { return h.briefTokens + h.crumbTotal }

// squeeze shrinks the head to at most allow tokens: breadcrumbs go from the
// root side, the frame's own last; then the brief is cut; then dropped.
func (h *packHead) squeeze(allow int64) {
	for len(h.crumbs) > 0 && h.tokens() > allow {
		h.crumbTotal -= h.crumbTokens[0]
		h.crumbs, h.crumbTokens = h.crumbs[1:], h.crumbTokens[1:]
	}
	if len(h.crumbs) == 0 {
		h.crumbs, h.crumbTokens = nil, nil
	}
	if h.briefTokens <= allow {
		return
	}
	// The longest cut that fits (counters grow with the text; the result
	// is checked, not assumed).
	lo, hi := 0, len(h.brief) // cut at lo fits (empty), at hi does not
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if h.c.Count(cut(h.brief, mid)) <= allow {
			lo = mid
		} else {
			hi = mid
		}
	}
	h.brief = cut(h.brief, lo)
	if h.brief == "" {
		h.briefTokens = 0
		return
	}
	if h.briefTokens = h.c.Count(h.brief); h.briefTokens > allow {
		h.brief, h.briefTokens = "", 0
	}
}

// hints are a pack's include and exclude lists as the pack applies them.
type hints struct {
	include map[string]bool
	exclude map[string]bool
	groups  map[string]bool // groups excluded whole
}

// packHints checks and collects include and exclude ids: an included id
// must name a handle of f; an excluded one that names half of a tool call
// excludes its group.
func packHints(cfg Config, f *Frame, include, exclude []string) (hints, error) {
	var hs hints
	if len(exclude) > 0 {
		hs.exclude = make(map[string]bool, len(exclude))
		for _, id := range exclude {
			if err := ValidateID("excluded handle id", id, cfg.MaxIDBytes); err != nil {
				return hints{}, err
			}
			hs.exclude[id] = true
			if h := f.Handle(id); h != nil && h.Group != "" {
				if hs.groups == nil {
					hs.groups = map[string]bool{}
				}
				hs.groups[h.Group] = true
			}
		}
	}
	if len(include) > 0 {
		hs.include = make(map[string]bool, len(include))
		for _, id := range include {
			if err := ValidateID("included handle id", id, cfg.MaxIDBytes); err != nil {
				return hints{}, err
			}
			h := f.Handle(id)
			if h == nil {
				return hints{}, fmt.Errorf("%w: %q", ErrHandleNotFound, id)
			}
			if hs.exclude[id] || (h.Group != "" && hs.groups[h.Group]) {
				return hints{}, invalid("handle %q is both included and excluded", id)
			}
			hs.include[id] = true
		}
	}
	return hs, nil
}

// handleItems appends a frame's handles to buf as compaction items; hints
// mark mandatory handles and leave excluded ones out.
func handleItems(buf []compaction.Item, hs []ContextHandle, x hints) []compaction.Item {
	items := buf[:0]
	for i := range hs {
		hd := &hs[i]
		if x.exclude != nil && (x.exclude[hd.ID] || (hd.Group != "" && x.groups[hd.Group])) {
			continue
		}
		items = append(items, compaction.Item{ID: hd.ID, Kind: hd.Kind, Role: string(hd.Role), Priority: hd.Priority, Content: hd.Content,
			Seq: hd.Seq, Group: hd.Group, Mandatory: x.include[hd.ID], Covers: hd.Covers, Tokens: hd.Tokens, LightTokens: hd.LightTokens})
	}
	return items
}

// cut shortens s to at most n bytes on a rune boundary, marking the cut;
// under room for the mark it is empty.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n - len("…")
	if i <= 0 {
		return ""
	}
	for i > 0 && s[i]&0xC0 == 0x80 {
		i--
	}
	if i == 0 {
		return ""
	}
	return s[:i] + "…"
}
