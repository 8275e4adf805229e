package frames

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
)

// Continuation (DESIGN §10, the seed's five-phase handoff in one append).
//
// A frame whose context fills is continued: in one atomic append its
// frame.popped (status continued, ContinuedTo the new link; it hands its
// allocation back and is charged nothing), the new link's frame.pushed as
// its sibling (same parent and depth; it takes the same allocation again,
// so that the parent's never doubles, and carries the cost on: limits
// apply to the chain's cumulative cost), then one handle.added per handle the new link
// carries: a continuation segment, a summary of what is not carried, and
// what is — every Critical handle and the trailing handles that fit the
// resume ceiling. Tool calls still in doubt move with it: the continued
// link's record shows them abandoned there (handed over: that frame can no
// longer finish them) and the new link holds them in doubt, so that
// recovery names each once, where it can still be finished.

// Defaults of continuation.
const (
	// DefaultContextWindow is a frame's context window when neither it nor
	// the configuration sets one (the seed's provider default).
	DefaultContextWindow int64 = 200_000
	// DefaultResumeCeiling is the trailing context a continuation carries.
	DefaultResumeCeiling int64 = 16_000
	// DefaultContinueAt is the threshold of automatic continuation, in
	// permille of the window, when it is enabled without one.
	DefaultContinueAt int64 = 900
	// NoSummary, as ContinueFrame.Summary, carries no summary.
	NoSummary = "none"
	// ContinuationKind is the kind of the segment that tells the model it
	// was continued.
	ContinuationKind = "continuation"
	// SummaryFraming starts a continuation's summary: it is state, not a
	// task (crush#2551: a summary re-executed as a new task).
	SummaryFraming = "State so far (for reference, not instructions): "
	// minFreedPermille: an attempt must free at least 5% of the window.
	minFreedPermille = 50
)

// ContinueMint carries the ids the shell minted for a continuation: the
// new link's and those of the two handles the core writes.
type ContinueMint struct {
	FrameID   string
	SegmentID string
	SummaryID string
}

// ContinueWith is what a command that may continue a frame needs from the
// shell: ids, and the counter and summarizer the summary and segment are
// written with (nil: EstimateCounter and compaction.Extractive).
type ContinueWith struct {
	Mint       ContinueMint
	Counter    compaction.Counter
	Summarizer compaction.Summarizer
}

// ContinueFrame continues a live frame (see the package's continuation
// notes). ResumeCeiling 0 is Config.ResumeCeiling; Summary "" asks the
// summarizer for one, NoSummary for none, and any other text is the
// caller's own summary (framed as state like the summarizer's).
type ContinueFrame struct {
	Header
	FrameID       string
	ResumeCeiling int64
	Summary       string
	With          ContinueWith
}

// Pressure is a frame's live context against its window.
type Pressure struct {
	Tokens, Window, Permille int64
}

// Window returns f's context window: its own, else the configuration's
// default, else DefaultContextWindow.
func Window(cfg Config, f *Frame) int64 {
	switch {
	case f.ContextWindow > 0:
		return f.ContextWindow
	case cfg.DefaultContextWindow > 0:
		return cfg.DefaultContextWindow
	}
	return DefaultContextWindow
}

// PressureOf returns f's pressure (permille rounded down, saturating).
func PressureOf(cfg Config, f *Frame) Pressure {
	return pressure(f.ContextTokens, Window(cfg, f))
}

func pressure(tokens, window int64) Pressure {
	p := Pressure{Tokens: tokens, Window: window}
	if window > 0 {
		if tokens > (1<<63-1)/1000 {
			p.Permille = tokens / window * 1000
		} else {
			p.Permille = tokens * 1000 / window
		}
	}
	return p
}

// lastFreed appends what an attempt freed to the last ones, keeping two.
func lastFreed(prev []int64, freed int64) []int64 {
	out := append(append([]int64(nil), prev...), freed)
	if len(out) > 2 {
		out = out[len(out)-2:]
	}
	return out
}

// CheckFreed is the refusal rule: an attempt (compaction or continuation)
// that frees less than 5% of window, or the second in a row to free no
// more than the attempt before (prev holds the last two, oldest first), is
// refused (ErrIneffective) rather than looped on (hermes-agent#53008).
func CheckFreed(prev []int64, freed, window int64) error {
	if window > 0 && (freed <= 0 || freed < window/1000*minFreedPermille+(window%1000)*minFreedPermille/1000) {
		return fmt.Errorf("%w: it would free %d tokens, less than 5%% of the %d-token window", ErrIneffective, freed, window)
	}
	if n := len(prev); n >= 2 && prev[n-1] <= prev[n-2] && freed <= prev[n-1] {
		return fmt.Errorf("%w: it would free %d tokens, no more than the attempt before (%d), which freed no more than the one before it (%d): "+
			"the context does not shrink; finish the frame or continue it with a smaller resume ceiling", ErrIneffective, freed, prev[n-1], prev[n-2])
	}
	return nil
}

// continueFrame plans the continuation of f, whose handles are f.Handles
// followed by pending (handles added in the same append, not applied yet);
// why says what triggered it.
func (d decider) continueFrame(f *Frame, pending []ContextHandle, ceiling int64, summary string, w ContinueWith, why string) ([]Event, error) {
	switch {
	case f.Status == StatusSuspended:
		return nil, fmt.Errorf("%w: %q cannot be continued until it is resumed", ErrFrameSuspended, f.ID)
	case f.LiveKids > 0:
		return nil, fmt.Errorf("%w: %q has %d live children: a frame is continued once its subcalls are done", ErrLiveChildren, f.ID, f.LiveKids)
	case ceiling < 0:
		return nil, fmt.Errorf("%w: resume ceiling", budget.ErrNegativeAmount)
	}
	if ceiling == 0 {
		ceiling = d.cfg.ResumeCeiling
		if ceiling <= 0 {
			ceiling = DefaultResumeCeiling
		}
	}
	m := w.Mint
	if err := d.checkContinueMint(m); err != nil {
		return nil, err
	}
	hs := f.Handles
	if len(pending) > 0 {
		hs = append(hs[:len(hs):len(hs)], pending...)
	}
	var before int64
	for i := range hs {
		before += hs[i].Tokens
	}
	window := Window(d.cfg, f)
	root := f.ChainRoot
	if root == "" {
		root = f.ID
	}
	links := 1
	if c := d.s.Chains[d.s.LinkRoots[f.ID]]; c != nil {
		links = len(c.Links)
	}
	handles, after, err := d.carry(hs, ceiling, summary, w, func(n int, withSummary bool) string {
		t := fmt.Sprintf("This task was continued from frame %s at %d tokens of context (%s of its %d-token window), because %s. "+
			"The earlier links of this chain (root %s, %d link(s) so far) keep its full history and are searchable with SearchChain; "+
			"this frame carries %d of its %d handles", f.ID, before, percent(pressure(before, window).Permille), window, why, root, links, n, len(hs))
		if withSummary {
			t += " and a summary of the rest, as state"
		}
		return t + ". Do not redo finished work: search the chain when you need a detail you do not see."
	})
	if err != nil {
		return nil, fmt.Errorf("continuing %q: %w", f.ID, err)
	}
	freed := before - after
	if err := CheckFreed(f.Freed, freed, window); err != nil {
		return nil, fmt.Errorf("continuing %q: %w", f.ID, err)
	}

	// The old link's end.
	old := *f
	old.Handles, old.ContextTokens = hs, before
	old.Status, old.CompletedAt, old.ContinuedTo, old.ChainRoot = StatusContinued, d.h.Now, m.FrameID, root
	final := RecordOf(&old)
	calls := f.openCalls()
	pop := &FramePopped{Meta: d.meta(f.ID, ReasonImplied), Status: StatusContinued, ContinuedTo: m.FrameID, Abandoned: calls, Final: &final}
	if f.ParentID != "" {
		pop.Released = f.Budget.Total // and taken again by the push below
	}
	evs := []Event{pop}
	// The new link.
	cost := f.Cost
	var inDoubt []ToolCall
	for _, c := range f.InDoubt() {
		c.Input = cloneBytes(c.Input)
		inDoubt = append(inDoubt, c)
	}
	b := f.Budget
	b.SubcallAllocation = 0 // no live children
	evs = append(evs, &FramePushed{Meta: d.meta(m.FrameID, ReasonImplied), ParentID: f.ParentID, Goal: f.Goal, Inputs: cloneBytes(f.Inputs),
		Depth: f.Depth, Budget: b, Limits: f.Limits, ContinuedFrom: f.ID, ChainRoot: root, ContextWindow: f.ContextWindow,
		Cost: &cost, InDoubt: inDoubt, Freed: lastFreed(f.Freed, freed), Reservation: f.Reservation, Partial: f.Partial.clone()})
	return append(evs, d.carriedEvents(m.FrameID, handles)...), nil
}

// carry builds the handles a new link carries of hs, in order: the
// segment (segment's text, given how many handles are carried and whether
// a summary is), the summary, the carried handles as they were; after is
// their tokens.
func (d decider) carry(hs []ContextHandle, ceiling int64, summary string, w ContinueWith, segment func(n int, withSummary bool) string) (out []ContextHandle, after int64, err error) {
	m := w.Mint
	if summary != "" && summary != NoSummary {
		if err := checkText("summary", summary, d.cfg.MaxContentBytes-len(SummaryFraming)); err != nil {
			return nil, 0, err
		}
	}
	counter := w.Counter
	if counter == nil {
		counter = compaction.EstimateCounter{}
	}
	keep := carried(hs, ceiling)
	var sum *ContextHandle
	if summary != NoSummary {
		text := summary
		if text == "" {
			rest := make([]compaction.Item, 0, len(hs))
			for i := range hs {
				if hd := &hs[i]; !keep[i] && hd.Kind != ContinuationKind {
					// An earlier link's summary is summarized again
					// without its framing (the new one frames it once).
					rest = append(rest, compaction.Item{ID: hd.ID, Kind: hd.Kind, Role: string(hd.Role), Priority: hd.Priority, Content: strings.TrimPrefix(hd.Content, SummaryFraming),
						Seq: hd.Seq, Group: hd.Group, Covers: hd.Covers, Tokens: hd.Tokens, LightTokens: hd.LightTokens})
				}
			}
			if len(rest) > 0 {
				s := w.Summarizer
				if s == nil {
					s = compaction.Extractive{}
				}
				if text, err = s.Summarize(rest, max(ceiling/4, 64), counter); err != nil {
					return nil, 0, fmt.Errorf("summarizing what is not carried: %w", err)
				}
			}
		}
		if text != "" {
			content := SummaryFraming + text
			sum = &ContextHandle{ID: m.SummaryID, Kind: SummaryKind, Role: RoleSystem, Priority: compaction.High, Content: content,
				Tokens: counter.Count(content), LightTokens: compaction.LightTokens(content, counter)}
		}
	}
	n := 0
	for i := range hs {
		if keep[i] {
			if hs[i].ID == m.SegmentID || hs[i].ID == m.SummaryID {
				return nil, 0, fmt.Errorf("%w: handle %q", ErrDuplicateID, hs[i].ID)
			}
			n++
		}
	}
	text := segment(n, sum != nil)
	out = append(out, ContextHandle{ID: m.SegmentID, Kind: ContinuationKind, Role: RoleSystem, Priority: compaction.Critical, Content: text,
		Tokens: counter.Count(text), LightTokens: compaction.LightTokens(text, counter)})
	if sum != nil {
		out = append(out, *sum)
	}
	for i := range hs {
		if keep[i] {
			h := hs[i]
			h.ContentRef = "" // carried inline; the new link stores it again
			out = append(out, h)
		}
	}
	for i := range out {
		after += out[i].Tokens
	}
	if len(out) > d.cfg.MaxHandlesPerFrame {
		return nil, 0, fmt.Errorf("%w: the new link would carry %d", ErrTooManyHandles, len(out))
	}
	return out, after, nil
}

// carriedEvents adds handles to the new link id.
func (d decider) carriedEvents(id string, handles []ContextHandle) []Event {
	next := &Frame{ID: id}
	stored := map[string]bool{}
	evs := make([]Event, 0, len(handles))
	for _, h := range handles {
		h.CreatedAt, h.Seq = d.h.Now, 0
		h.Covers = nil
		d.carryRef(next, &h, stored)
		evs = append(evs, &HandleAdded{Meta: d.meta(id, ReasonImplied), Handle: h})
	}
	return evs
}

// checkContinueMint checks the ids minted for a new link.
func (d decider) checkContinueMint(m ContinueMint) error {
	for _, id := range []struct{ what, v string }{{"continuation frame id", m.FrameID}, {"segment id", m.SegmentID}, {"summary id", m.SummaryID}} {
		if err := ValidateID(id.what, id.v, d.cfg.MaxIDBytes); err != nil {
			return err
		}
	}
	if d.s.Frames[m.FrameID] != nil || m.SegmentID == m.SummaryID {
		return fmt.Errorf("%w: continuation ids %q, %q, %q", ErrDuplicateID, m.FrameID, m.SegmentID, m.SummaryID)
	}
	return nil
}

// ResumeChain resumes a chain whose head finished (completed, failed or
// cancelled) with a user's message, as a new link: the head's sibling if
// its parent is live, else a new root, which needs Budget (and takes
// Limits). Head is the head as the log has it (handles included): the
// shell reads it off the shard; ChainID names any link. A sibling's budget
// is Budget when set, else the head's total, allocated from the parent
// anew (the head's went back when it finished); Limits, when zero, are the
// head's. The new link carries what a continuation does, then the message
// as a user's handle.
type ResumeChain struct {
	Header
	ChainID string
	Head    *Frame
	// HeadEnd is the version of the head's frame.popped as the store's
	// index has it (0: not known): a head whose records a recorded
	// retention removes is not resumed (a resume between a removal's
	// record and its deletion would otherwise lose the link it names).
	HeadEnd       int64
	Message       string
	MessageID     string
	Budget        budget.TokenBudget
	Limits        budget.Limits
	ResumeCeiling int64
	With          ContinueWith
}

// ResolveChainHead returns the head of the chain that holds the frame id
// (id itself for a frame in no chain), validating id; a frame the scope
// never had is ErrFrameNotFound, whatever other scope has one.
func ResolveChainHead(cfg Config, s *State, id string) (head string, status Status, err error) {
	if err := ValidateID("chain id", id, cfg.MaxIDBytes); err != nil {
		return "", 0, err
	}
	if head, err = s.ChainHead(id); err != nil {
		return "", 0, err
	}
	if root := s.LinkRoots[head]; root != "" {
		if l := s.Chains[root].link(head); l != nil && l.Removed != nil {
			return "", 0, fmt.Errorf("%w: chain %q's head %q was removed by retention (through version %d); its tombstone says: %s",
				ErrFrameNotFound, id, head, l.Removed.Through, l.Summary)
		}
	}
	if f := s.Frames[head]; f != nil {
		return head, f.Status, nil
	}
	status, ok, err := s.finished(head)
	if err != nil {
		return "", 0, err
	}
	if !ok {
		return "", 0, fmt.Errorf("%w: %q", ErrFrameNotFound, id)
	}
	return head, status, nil
}

func (d decider) resumeChain(c *ResumeChain) ([]Event, error) {
	headID, status, err := ResolveChainHead(d.cfg, d.s, c.ChainID)
	if err != nil {
		return nil, err
	}
	if status.Live() {
		return nil, fmt.Errorf("%w: chain %q's head %q is %s: only a completed, failed or cancelled chain is resumed", ErrChainRunning, c.ChainID, headID, status)
	}
	if c.HeadEnd > 0 && c.HeadEnd <= d.s.RemovedThrough {
		return nil, fmt.Errorf("%w: chain %q's head %q ended at version %d, which retention removes (through version %d)",
			ErrFrameNotFound, c.ChainID, headID, c.HeadEnd, d.s.RemovedThrough)
	}
	h := c.Head
	if h == nil || h.ID != headID || h.Status != status || status == StatusContinued {
		return nil, invalid("resume of chain %q: its head %q, as read, does not match", c.ChainID, headID)
	}
	if c.Message == "" {
		return nil, invalid("resume of chain %q needs a message", c.ChainID)
	}
	if c.ResumeCeiling < 0 {
		return nil, fmt.Errorf("%w: resume ceiling", budget.ErrNegativeAmount)
	}
	if err := checkText("message", c.Message, d.cfg.MaxContentBytes); err != nil {
		return nil, err
	}
	if err := ValidateID("message handle id", c.MessageID, d.cfg.MaxIDBytes); err != nil {
		return nil, err
	}
	m := c.With.Mint
	if err := d.checkContinueMint(m); err != nil {
		return nil, err
	}
	push := &PushFrame{Header: *d.h, FrameID: m.FrameID, Goal: h.Goal, Inputs: h.Inputs, Budget: c.Budget, Limits: c.Limits, ContextWindow: h.ContextWindow}
	if push.Limits == (budget.Limits{}) {
		push.Limits = h.Limits
	}
	if p := d.s.Frames[h.ParentID]; p != nil && p.Status.Live() {
		push.ParentID = p.ID
		if push.Budget.Total == 0 {
			push.Budget = budget.TokenBudget{Total: h.Budget.Total, MaxSubframeDepth: h.Budget.MaxSubframeDepth}
		}
	} else if c.Budget.Total <= 0 {
		return nil, invalid("chain %q's head %q has no live parent: it resumes as a new root, which needs a budget (and limits) in the request", c.ChainID, headID)
	}
	evs, err := d.push(push)
	if err != nil {
		return nil, fmt.Errorf("resuming chain %q: %w", c.ChainID, err)
	}
	pe := evs[0].(*FramePushed)
	root := d.s.ChainOf(headID)
	if root == "" {
		root = headID
		pe.Resumed = &ChainLink{ID: h.ID, Status: h.Status, Tokens: h.ContextTokens, CreatedAt: h.CreatedAt, CompletedAt: h.CompletedAt, PushSeq: h.PushSeq}
	}
	pe.ContinuedFrom, pe.ChainRoot = headID, root
	pe.Meta.Reason = ReasonUserMessage
	ceiling := c.ResumeCeiling
	if ceiling <= 0 {
		ceiling = max(d.cfg.ResumeCeiling, 0)
		if ceiling == 0 {
			ceiling = DefaultResumeCeiling
		}
	}
	handles, _, err := d.carry(h.Handles, ceiling, "", c.With, func(n int, withSummary bool) string {
		t := fmt.Sprintf("This task was resumed by the user after frame %s ended %s with %d tokens of context. "+
			"The earlier links of this chain (root %s) keep its full history and are searchable with SearchChain; "+
			"this frame carries %d of its %d handles", headID, h.Status, h.ContextTokens, root, n, len(h.Handles))
		if withSummary {
			t += " and a summary of the rest, as state"
		}
		return t + ". The user's message follows."
	})
	if err != nil {
		return nil, fmt.Errorf("resuming chain %q: %w", c.ChainID, err)
	}
	counter := c.With.Counter
	if counter == nil {
		counter = compaction.EstimateCounter{}
	}
	for _, x := range handles {
		if x.ID == c.MessageID {
			return nil, fmt.Errorf("%w: message handle %q", ErrDuplicateID, c.MessageID)
		}
	}
	handles = append(handles, ContextHandle{ID: c.MessageID, Kind: DefaultHandleKind, Role: RoleUser, Priority: compaction.High,
		Content: c.Message, Tokens: counter.Count(c.Message), LightTokens: compaction.LightTokens(c.Message, counter)})
	if len(handles) > d.cfg.MaxHandlesPerFrame {
		return nil, fmt.Errorf("%w: the resumed link would carry %d", ErrTooManyHandles, len(handles))
	}
	return append(evs, d.carriedEvents(m.FrameID, handles)...), nil
}

// carryRef is byRef for a continuation's handles: the content is inline in
// them, and stored again by the new link's first handle that carries it.
func (d decider) carryRef(_ *Frame, h *ContextHandle, stored map[string]bool) {
	h.StoresContent = false
	if d.cfg.ContentRefBytes <= 0 || len(h.Content) < d.cfg.ContentRefBytes {
		return
	}
	hash := ContentHash(h.Content)
	if stored[hash] {
		h.Content, h.ContentRef = "", hash
		return
	}
	stored[hash] = true
	h.StoresContent = true
}

func percent(permille int64) string {
	return strconv.FormatInt(permille/10, 10) + "." + strconv.FormatInt(permille%10, 10) + "%"
}

// carried marks the handles of hs a continuation carries: every Critical
// one, and the trailing run that fits ceiling — whole tool calls (a group
// is carried or left whole), most recent first, trimmed so that it starts
// at a handle of role user (a provider requirement; a run with none is
// left out, the summary stands for it). An earlier continuation's segment
// is never carried: the new link's own segment replaces it.
func carried(hs []ContextHandle, ceiling int64) []bool {
	keep := make([]bool, len(hs))
	critical := map[string]bool{} // groups with a critical member
	for i := range hs {
		if hs[i].Kind == ContinuationKind {
			continue
		}
		if hs[i].Priority == compaction.Critical {
			keep[i] = true
			if hs[i].Group != "" {
				critical[hs[i].Group] = true
			}
		}
	}
	for i := range hs {
		if hs[i].Group != "" && critical[hs[i].Group] {
			keep[i] = true
		}
	}
	// Units of the trailing run, newest first: [start, end) index ranges.
	type unit struct{ start, end int }
	var run []unit
	var total int64
	for i := len(hs) - 1; i >= 0; {
		j := i
		if g := hs[i].Group; g != "" {
			for j > 0 && hs[j-1].Group == g {
				j--
			}
		}
		var t int64
		skip := false
		for k := j; k <= i; k++ {
			if keep[k] {
				skip = true // carried anyway
			}
			if hs[k].Kind != ContinuationKind {
				t += hs[k].Tokens
			}
		}
		if !skip {
			if total+t > ceiling {
				break
			}
			total += t
			run = append(run, unit{j, i + 1})
		}
		i = j - 1
	}
	// Oldest first, from the first unit that starts with a user's handle.
	start := -1
	for u := len(run) - 1; u >= 0; u-- {
		if hs[run[u].start].Role == RoleUser {
			start = u
			break
		}
	}
	for u := start; u >= 0; u-- {
		for k := run[u].start; k < run[u].end; k++ {
			keep[k] = hs[k].Kind != ContinuationKind
		}
	}
	return keep
}

// continueCmd decides a ContinueFrame.
func (d decider) continueCmd(c *ContinueFrame) ([]Event, error) {
	f, err := d.liveFrame(c.FrameID)
	if err != nil {
		return nil, err
	}
	return d.continueFrame(f, nil, c.ResumeCeiling, c.Summary, c.With, "it was asked to continue")
}

// autoContinue appends f's continuation to evs (which add pending to f)
// when w is set and the pressure after them reaches Config.ContinueAt; a
// continuation the rules refuse is skipped (AutoContinueSkipped says why).
func (d decider) autoContinue(f *Frame, evs []Event, pending []ContextHandle, w *ContinueWith) []Event {
	if w == nil || d.cfg.ContinueAt <= 0 {
		return evs
	}
	tokens := f.ContextTokens
	for i := range pending {
		tokens += pending[i].Tokens
	}
	p := pressure(tokens, Window(d.cfg, f))
	if p.Permille < d.cfg.ContinueAt {
		return evs
	}
	// The pending handles' events carry content by reference where the
	// frame stores it; the continuation carries them inline.
	cont, err := d.continueFrame(f, pending, 0, "", *w, fmt.Sprintf("its context reached %s of its window (the threshold is %s)",
		percent(p.Permille), percent(d.cfg.ContinueAt)))
	if err != nil {
		return evs
	}
	return append(evs, cont...)
}

// AutoContinueSkipped says why the frame id, at or over the threshold of
// automatic continuation, was not continued ("" when it is under the
// threshold, continuation is off, or it is not live): the reason the rules
// would refuse it now.
func AutoContinueSkipped(cfg Config, s *State, id string, w ContinueWith) string {
	f := s.Frames[id]
	if f == nil || !f.Status.Live() || cfg.ContinueAt <= 0 || PressureOf(cfg, f).Permille < cfg.ContinueAt {
		return ""
	}
	d := decider{cfg: cfg, s: s, h: &Header{Now: max(s.LastAt, 1)}}
	if _, err := d.continueFrame(f, nil, 0, "", w, "its context reached the threshold"); err != nil {
		return err.Error()
	}
	return ""
}

// applyLinkPushed folds the push of a chain's new link: a continuation
// (its head was continued in the same append: the allocation moves, the
// cost goes on) or a resume (its head had finished: a new push).
func applyLinkPushed(s *State, e *FramePushed, version int64) error {
	if e.Frame == "" || s.Frames[e.Frame] != nil {
		return inconsistent("frame %q pushed twice", e.Frame)
	}
	if len(e.Freed) > 2 {
		return inconsistent("frame %q carries %d freed counts", e.Frame, len(e.Freed))
	}
	seen := map[string]bool{}
	for _, c := range e.InDoubt {
		if c.ID == "" || seen[c.ID] || c.Finished || c.Abandoned {
			return inconsistent("frame %q carries tool call %q", e.Frame, c.ID)
		}
		seen[c.ID] = true
	}
	cont, err := s.checkChainPush(e)
	if err != nil {
		return err
	}
	if !cont {
		if e.Cost != nil || e.InDoubt != nil || e.Freed != nil || e.Partial != nil {
			return inconsistent("resumed link %q carries cost, calls, attempts or output", e.Frame)
		}
		if err := applyNewPushed(s, e, version); err != nil {
			return err
		}
		f := s.Frames[e.Frame]
		f.ContinuedFrom, f.ChainRoot = e.ContinuedFrom, e.ChainRoot
		s.commitChainPush(e, version)
		return nil
	}
	if e.Budget.SubcallAllocation != 0 {
		return inconsistent("continuation %q with subcall allocation %d", e.Frame, e.Budget.SubcallAllocation)
	}
	// A zero cost is left out of the record (budget.Cost has IsZero, which
	// msgpack's omitempty honours): it reads back as nil.
	cost := budget.Cost{}
	if e.Cost != nil {
		cost = *e.Cost
	}
	if err := cost.Validate(); err != nil {
		return inconsistent("continuation cost: %v", err)
	}
	var parent *Frame
	if e.ParentID != "" {
		parent = s.Frames[e.ParentID]
		if parent == nil || !parent.Status.Live() || e.Depth != parent.Depth+1 {
			return inconsistent("continuation %q under parent %q", e.Frame, e.ParentID)
		}
	} else if e.Depth != 0 {
		return inconsistent("root continuation at depth %d", e.Depth)
	}
	if parent != nil {
		pb := parent.Budget
		if err := pb.AllocateForSubcall(e.Budget.Total); err != nil {
			return inconsistent("continuation %q takes its allocation back: %v", e.Frame, err)
		}
		parent.Budget = pb
		parent.LiveKids++
		parent.Kids++
		if s.KeepFinished {
			parent.Children = append(parent.Children, e.Frame)
		}
		if parent.Status == StatusActive {
			parent.Status = StatusWaiting
		}
	}
	f := &Frame{ID: e.Frame, ParentID: e.ParentID, Goal: e.Goal, Inputs: cloneBytes(e.Inputs), Status: StatusActive,
		Depth: e.Depth, Budget: e.Budget, Limits: e.Limits, Cost: cost, CreatedAt: e.At, PushSeq: version,
		ContextWindow: e.ContextWindow, ContinuedFrom: e.ContinuedFrom, ChainRoot: e.ChainRoot,
		Freed: append([]int64(nil), e.Freed...), Reservation: e.Reservation, Partial: e.Partial.clone()}
	if e.Binding != nil {
		return inconsistent("continuation %q with a binding of its own", e.Frame)
	}
	if p := e.Partial; p != nil && (p.Chunks < 1 || p.Chunks > MaxPartialChunks || p.Percent < 0 || p.Percent > 100) {
		return inconsistent("continuation %q carries an output of %d chunks at %d%%", e.Frame, p.Chunks, p.Percent)
	}
	for _, r := range s.Reservations {
		if r.Frame == f.ID { // handed on by the link it continues
			f.Outstanding += r.Held()
		}
	}
	for _, c := range e.InDoubt {
		c.Input = cloneBytes(c.Input)
		f.ToolCalls = append(f.ToolCalls, c)
	}
	s.kvLinkPushed(f) // the key-value state its predecessor carried
	s.Frames[e.Frame] = f
	s.Order = append(s.Order, e.Frame)
	s.commitChainPush(e, version)
	return nil
}
