package inspector

import (
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/internal/views"
	"github.com/stateindex/stateindex/messages"
)

// The pages: each reads what it shows through the Client and returns its
// template's name and data.

// maxQueryBytes bounds a text parameter (a scope, a prefix, a frame id).
const maxQueryBytes = 1024

// param reads a text parameter: valid UTF-8 of at most maxQueryBytes.
func param(r *http.Request, name string) (string, error) {
	v := r.URL.Query().Get(name)
	if len(v) > maxQueryBytes || !utf8.ValidString(v) {
		return "", badRequest("parameter %s: at most %d bytes of UTF-8", name, maxQueryBytes)
	}
	return v, nil
}

// scopeParam reads the scope (s), required.
func scopeParam(r *http.Request) (string, error) {
	s, err := param(r, "s")
	if err != nil {
		return "", err
	}
	if s == "" {
		return "", badRequest("which scope? give ?s=SCOPE")
	}
	return s, nil
}

// intParam reads an integer parameter in [lo, hi] (absent: def).
func intParam(r *http.Request, name string, def, lo, hi int64) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, badRequest("parameter %s: want an integer from %d to %d, got %q", name, lo, hi, views.Clip(v, 40))
	}
	return n, nil
}

// link builds a page's URL with its query.
func link(path string, kv ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			q.Add(kv[i], kv[i+1])
		}
	}
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

// ---- frames across scopes (the registry) ----

type framesPage struct {
	Statuses    []string // every status, for the filter
	Status      map[string]bool
	Goal, Scope string
	Limit       int64
	Entries     []messages.FrameEntry
	Scopes      []scopeCount
	Position    uint64
	Next        string
	Unavailable string
}

type scopeCount struct {
	Scope       string
	Live, Ended int
}

func (framesPage) head() (string, string, string) {
	return "Frames across scopes — StateIndex", "", ""
}

func (in *Inspector) frames(r *http.Request) (string, any, error) {
	p := framesPage{Status: map[string]bool{}}
	for s := frames.StatusActive; s <= frames.StatusContinued; s++ {
		p.Statuses = append(p.Statuses, s.String())
	}
	var req messages.ListFrames
	for _, s := range r.URL.Query()["status"] {
		if _, err := frames.ParseStatus(s); err != nil {
			return "", nil, badRequest("status %q: want one of %s", views.Clip(s, 40), strings.Join(p.Statuses, ", "))
		}
		p.Status[s] = true
		req.Statuses = append(req.Statuses, s)
	}
	var err error
	if p.Goal, err = param(r, "goal"); err != nil {
		return "", nil, err
	}
	if p.Scope, err = param(r, "scope"); err != nil {
		return "", nil, err
	}
	cursor, err := param(r, "cursor")
	if err != nil {
		return "", nil, err
	}
	if p.Limit, err = intParam(r, "limit", 100, 1, 1000); err != nil {
		return "", nil, err
	}
	req.GoalPrefix, req.ScopePrefix, req.Cursor, req.Limit = p.Goal, p.Scope, cursor, int(p.Limit)
	reply, err := in.c.ListFrames(r.Context(), &req)
	switch {
	case errors.Is(err, actors.ErrUnavailable):
		p.Unavailable = err.Error()
		return "frames", p, nil
	case err != nil:
		return "", nil, err
	}
	p.Entries, p.Position = reply.Frames, reply.Position
	counts := map[string]*scopeCount{}
	for _, e := range reply.Frames {
		c := counts[e.Scope]
		if c == nil {
			c = &scopeCount{Scope: e.Scope}
			counts[e.Scope] = c
			p.Scopes = append(p.Scopes, scopeCount{Scope: e.Scope})
		}
		if st, err := frames.ParseStatus(e.Status); err == nil && st.Live() {
			c.Live++
		} else {
			c.Ended++
		}
	}
	for i := range p.Scopes {
		p.Scopes[i] = *counts[p.Scopes[i].Scope]
	}
	if reply.NextCursor != "" {
		kv := []string{"goal", p.Goal, "scope", p.Scope, "limit", strconv.FormatInt(p.Limit, 10), "cursor", reply.NextCursor}
		for _, s := range req.Statuses {
			kv = append(kv, "status", s)
		}
		p.Next = link("/", kv...)
	}
	return "frames", p, nil
}

// ---- a scope: its tree ----

type scopePage struct {
	Tree    *views.ScopeTree
	InDoubt []callRow
	Chains  []chainView
}

type callRow struct {
	Frame string
	Goal  string
	Call  frames.ToolCall
}

type chainView struct {
	Root  string
	Links []*views.FrameNode
}

func (p scopePage) head() (string, string, string) {
	return "Scope " + p.Tree.Scope + " — StateIndex", p.Tree.Scope, "tree"
}

func (in *Inspector) scope(r *http.Request) (string, any, error) {
	s, err := scopeParam(r)
	if err != nil {
		return "", nil, err
	}
	t, err := views.ReadScopeTree(r.Context(), in.c, s, views.TreeOptions{})
	if errors.Is(err, views.ErrNoScope) {
		return "", nil, notFound("no scope named %q: it has no event", s)
	}
	if err != nil {
		return "", nil, err
	}
	p := scopePage{Tree: t}
	chains := map[string]*chainView{}
	t.Walk(func(n *views.FrameNode, _ int) {
		for _, c := range n.InDoubt {
			p.InDoubt = append(p.InDoubt, callRow{Frame: n.ID, Goal: n.Goal, Call: c})
		}
		if n.ChainRoot != "" {
			cv := chains[n.ChainRoot]
			if cv == nil {
				cv = &chainView{Root: n.ChainRoot}
				chains[n.ChainRoot] = cv
			}
			cv.Links = append(cv.Links, n)
		}
	})
	for _, cv := range chains {
		sort.Slice(cv.Links, func(i, j int) bool { return cv.Links[i].PushVersion < cv.Links[j].PushVersion })
		p.Chains = append(p.Chains, *cv)
	}
	sort.Slice(p.Chains, func(i, j int) bool { return p.Chains[i].Links[0].PushVersion < p.Chains[j].Links[0].PushVersion })
	return "scope", p, nil
}

// ---- a scope's timeline ----

type timelinePage struct {
	Scope          string
	Version        int64
	Reasons        []string
	Reason, Frame  string
	Events         []views.TimelineEvent
	Counts         []reasonCount
	Next           string
	RemovedThrough int64
}

type reasonCount struct {
	Reason string
	N      int
}

func (p timelinePage) head() (string, string, string) {
	return "Timeline of " + p.Scope + " — StateIndex", p.Scope, "timeline"
}

func (in *Inspector) timeline(r *http.Request) (string, any, error) {
	s, err := scopeParam(r)
	if err != nil {
		return "", nil, err
	}
	p := timelinePage{Scope: s, Reasons: views.Reasons()}
	req := messages.ReadScope{Header: messages.Header{Scope: s}}
	if p.Reason, err = param(r, "reason"); err != nil {
		return "", nil, err
	}
	if p.Reason != "" {
		reason, ok := views.ParseReason(p.Reason)
		if !ok {
			return "", nil, badRequest("reason %q: want one of %s", views.Clip(p.Reason, 40), strings.Join(p.Reasons, ", "))
		}
		req.Reasons = []frames.Reason{reason}
	}
	if p.Frame, err = param(r, "frame"); err != nil {
		return "", nil, err
	}
	req.FrameID = p.Frame
	if req.Before, err = intParam(r, "before", 0, 0, 1<<62); err != nil {
		return "", nil, err
	}
	limit, err := intParam(r, "limit", 100, 1, messages.MaxScopeEvents)
	if err != nil {
		return "", nil, err
	}
	req.Limit = int(limit)
	reply, err := in.c.ReadScope(r.Context(), &req)
	if err != nil {
		return "", nil, err
	}
	if reply.Version == 0 {
		return "", nil, notFound("no scope named %q: it has no event", s)
	}
	p.Version, p.RemovedThrough = reply.Version, reply.RemovedThrough
	p.Events = views.Timeline(reply.Events)
	n := map[string]int{}
	for _, e := range p.Events {
		n[e.Reason]++
	}
	for _, name := range p.Reasons {
		if n[name] > 0 {
			p.Counts = append(p.Counts, reasonCount{name, n[name]})
		}
	}
	if reply.Next != 0 {
		p.Next = link("/scope/timeline", "s", s, "reason", p.Reason, "frame", p.Frame, "limit", strconv.FormatInt(limit, 10),
			"before", strconv.FormatInt(reply.Next, 10))
	}
	return "timeline", p, nil
}

// ---- a scope's key-value state ----

type statePage struct {
	Scope, Frame, Prefix string
	Version              int64
	Size                 frames.StateSize
	Keys                 []views.StateKey
	Next                 string
}

func (p statePage) head() (string, string, string) {
	return "State of " + p.Scope + " — StateIndex", p.Scope, "state"
}

func (in *Inspector) state(r *http.Request) (string, any, error) {
	s, err := scopeParam(r)
	if err != nil {
		return "", nil, err
	}
	p := statePage{Scope: s}
	if p.Frame, err = param(r, "frame"); err != nil {
		return "", nil, err
	}
	if p.Prefix, err = param(r, "prefix"); err != nil {
		return "", nil, err
	}
	after, err := param(r, "after")
	if err != nil {
		return "", nil, err
	}
	reply, err := in.c.RangeState(r.Context(), &messages.RangeState{Header: messages.Header{Scope: s}, FrameID: p.Frame, Prefix: p.Prefix, After: after, Limit: 100})
	if err != nil {
		return "", nil, err
	}
	if reply.Version == 0 {
		return "", nil, notFound("no scope named %q: it has no event", s)
	}
	p.Version, p.Size = reply.Version, reply.Size
	for _, e := range reply.Entries {
		p.Keys = append(p.Keys, views.StateKeyOf(e))
	}
	if reply.Next != "" {
		p.Next = link("/scope/state", "s", s, "frame", p.Frame, "prefix", p.Prefix, "after", reply.Next)
	}
	return "state", p, nil
}

// ---- a scope's spend ledger ----

type ledgerPage struct {
	Scope, Frame string
	Tree         *views.LedgerTree
}

func (p ledgerPage) head() (string, string, string) {
	return "Ledger of " + p.Scope + " — StateIndex", p.Scope, "ledger"
}

func (in *Inspector) ledger(r *http.Request) (string, any, error) {
	s, err := scopeParam(r)
	if err != nil {
		return "", nil, err
	}
	frame, err := param(r, "frame")
	if err != nil {
		return "", nil, err
	}
	t, err := views.ReadLedger(r.Context(), in.c, s, frame, views.DefaultLedgerDepth)
	if err != nil {
		return "", nil, err
	}
	return "ledger", ledgerPage{Scope: s, Frame: frame, Tree: t}, nil
}

// ---- a frame ----

type framePage struct {
	Scope     string
	Frame     *frames.Frame
	ChainHead string
	Chain     *messages.GetChainReply
	Version   int64
	Budget    int64 // the pack preview's default budget
	Levels    []string
}

func (p framePage) head() (string, string, string) {
	return "Frame " + views.Short(p.Frame.ID) + " of " + p.Scope + " — StateIndex", p.Scope, "tree"
}

func (in *Inspector) frame(r *http.Request) (string, any, error) {
	s, err := scopeParam(r)
	if err != nil {
		return "", nil, err
	}
	id, err := param(r, "f")
	if err != nil {
		return "", nil, err
	}
	if id == "" {
		return "", nil, badRequest("which frame? give &f=FRAME")
	}
	g, err := in.c.GetFrame(r.Context(), &messages.GetFrame{Header: messages.Header{Scope: s}, FrameID: id, WithHandles: true})
	if err != nil {
		return "", nil, err
	}
	p := framePage{Scope: s, Frame: g.Frame, ChainHead: g.ChainHead, Version: g.Version, Budget: defaultPackBudget(g.Frame), Levels: levels()}
	if g.Frame.ChainRoot != "" {
		if p.Chain, err = in.c.GetChain(r.Context(), &messages.GetChain{Header: messages.Header{Scope: s}, FrameID: id}); err != nil {
			return "", nil, err
		}
	}
	return "frame", p, nil
}

// defaultPackBudget is what a preview asks for at first: the frame's
// context and a little more, within MinPackBudget and its window.
func defaultPackBudget(f *frames.Frame) int64 {
	b := max(frames.MinPackBudget, f.ContextTokens+f.ContextTokens/4+200)
	if f.ContextWindow > 0 {
		b = min(b, max(frames.MinPackBudget, f.ContextWindow))
	}
	return b
}

func levels() []string {
	var out []string
	for l := compaction.LevelNone; l <= compaction.LevelCritical; l++ {
		out = append(out, l.String())
	}
	return out
}

// ---- a pack preview ----

type packPage struct {
	Scope, FrameID, Role, MinLevel string
	Budget                         int64
	Pack                           *messages.ContextPack
	Frame                          *frames.Frame
	Rows                           []packRow
	Levels                         []string
	Moved                          bool // the scope moved between the pack and the frame's read
	FrameVersion                   int64
}

// packRow is one of the frame's live handles and what the pack did with it.
type packRow struct {
	ID, Kind, Role string
	Priority       compaction.Priority
	Tokens         int64
	State          string // in, summarized, dropped
	Why            string
	Content        string
}

func (p packPage) head() (string, string, string) {
	return "Pack preview of " + views.Short(p.FrameID) + " — StateIndex", p.Scope, "tree"
}

func (in *Inspector) pack(r *http.Request) (string, any, error) {
	s, err := scopeParam(r)
	if err != nil {
		return "", nil, err
	}
	p := packPage{Scope: s, Levels: levels()}
	if p.FrameID, err = param(r, "f"); err != nil {
		return "", nil, err
	}
	if p.FrameID == "" {
		return "", nil, badRequest("which frame? give &f=FRAME")
	}
	if p.Role, err = param(r, "role"); err != nil {
		return "", nil, err
	}
	if p.Budget, err = intParam(r, "budget", 4000, frames.MinPackBudget, 1<<40); err != nil {
		return "", nil, err
	}
	req := messages.AssembleContextPack{Header: messages.Header{Scope: s}, FrameID: p.FrameID, BudgetTokens: p.Budget, Role: p.Role}
	if p.MinLevel, err = param(r, "min"); err != nil {
		return "", nil, err
	}
	if p.MinLevel != "" {
		l, ok := parseLevel(p.MinLevel)
		if !ok {
			return "", nil, badRequest("min %q: want one of %s", views.Clip(p.MinLevel, 40), strings.Join(p.Levels, ", "))
		}
		req.MinCompaction = l
	}
	pack, err := in.c.AssembleContextPack(r.Context(), &req)
	if err != nil {
		return "", nil, err
	}
	g, err := in.c.GetFrame(r.Context(), &messages.GetFrame{Header: messages.Header{Scope: s}, FrameID: p.FrameID, WithHandles: true})
	if err != nil {
		return "", nil, err
	}
	p.Pack, p.Frame, p.Moved, p.FrameVersion = pack, g.Frame, g.Version != pack.Version, g.Version
	p.Rows = packRows(pack, g.Frame)
	return "pack", p, nil
}

func parseLevel(s string) (compaction.Level, bool) {
	for l := compaction.LevelNone; l <= compaction.LevelCritical; l++ {
		if l.String() == s {
			return l, true
		}
	}
	return 0, false
}

// packRows places each of the frame's handles: in the pack, summarized or
// dropped, and why (compaction.LeftOutReason: the rule that did it).
func packRows(pack *messages.ContextPack, f *frames.Frame) []packRow {
	in, sum, drop := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, sg := range pack.Segments {
		in[sg.HandleID] = true
	}
	for _, id := range pack.Summarized {
		sum[id] = true
	}
	for _, id := range pack.Dropped {
		drop[id] = true
	}
	lvl := pack.TokenSummary.CompactionLevel
	var rows []packRow
	for _, h := range f.Handles {
		row := packRow{ID: h.ID, Kind: h.Kind, Role: string(h.Role), Priority: h.Priority, Tokens: h.Tokens, Content: h.Content}
		switch {
		case in[h.ID]:
			row.State = "in"
			if lvl >= compaction.LevelLight {
				row.Why = "in, whitespace trimmed (" + lvl.String() + " level)"
			} else {
				row.Why = "in, whole"
			}
		case sum[h.ID]:
			row.State, row.Why = "summarized", compaction.LeftOutReason(lvl, h.Priority, true)
		case drop[h.ID]:
			row.State, row.Why = "dropped", compaction.LeftOutReason(lvl, h.Priority, false)
		default:
			row.State, row.Why = "absent", "not in this pack's answer (the frame changed since the pack was assembled)"
		}
		rows = append(rows, row)
	}
	return rows
}

// ---- template helpers ----

// barView is a budget as a bar: each part in thousandths of the total.
type barView struct {
	Used, Reserved, Alloc, Avail int64 // widths, 0..1000
	X2, X3, X4                   int64 // where each part starts
	Title                        string
	Known                        bool
}

func bar(b budget.TokenBudget, known bool) barView {
	v := barView{Known: known}
	if !known {
		v.Title = fmt.Sprintf("used %d tokens (total not read)", b.Used)
		return v
	}
	v.Title = fmt.Sprintf("total %d: used %d, reserved %d, allocated to children %d, available %d", b.Total, b.Used, b.Reserved, b.SubcallAllocation, b.Available())
	if b.Total <= 0 {
		return v
	}
	w := func(n int64) int64 { return min(1000, max(0, n*1000/b.Total)) }
	v.Used, v.Reserved, v.Alloc = w(b.Used), w(b.Reserved), w(b.SubcallAllocation)
	v.X2 = min(1000, v.Used)
	v.X3 = min(1000, v.X2+v.Reserved)
	v.X4 = min(1000, v.X3+v.Alloc)
	v.Avail = 1000 - v.X4
	return v
}

func when(ns int64) string {
	if ns == 0 {
		return "-"
	}
	return time.Unix(0, ns).UTC().Format("2006-01-02 15:04:05Z")
}

var funcs = template.FuncMap{
	"short":   views.Short,
	"clip":    views.Clip,
	"dollars": views.Dollars,
	"when":    when,
	"bar":     bar,
	"link":    link,
	"itoa":    func(n int64) string { return strconv.FormatInt(n, 10) },
	"limit": func(n int64) string {
		if n == 0 {
			return "none"
		}
		return strconv.FormatInt(n, 10)
	},
	"duration": func(ms int64) string {
		if ms == 0 {
			return "none"
		}
		return (time.Duration(ms) * time.Millisecond).String()
	},
	"text": func(b []byte) string {
		if utf8.Valid(b) {
			return string(b)
		}
		return fmt.Sprintf("(%d bytes, not UTF-8)", len(b))
	},
	"clipv":   clipValue,
	"nodeOf":  func(scope string, n *views.FrameNode) treeNode { return treeNode{scope, n} },
	"lnodeOf": func(scope string, n *views.LedgerNode) ledgerNode { return ledgerNode{scope, n} },
}

// treeNode and ledgerNode carry the page's scope into the recursive node
// templates.
type treeNode struct {
	Scope string
	Node  *views.FrameNode
}

type ledgerNode struct {
	Scope string
	Node  *views.LedgerNode
}

// valuePreview bounds a value or a handle's content shown in a page.
const valuePreview = 4000

// clipValue shows at most valuePreview bytes of s (on a rune boundary),
// saying how much was left out.
func clipValue(s string) string {
	if len(s) <= valuePreview {
		return s
	}
	i := valuePreview
	for i > 0 && s[i]&0xC0 == 0x80 {
		i--
	}
	return s[:i] + fmt.Sprintf("… (%d more bytes)", len(s)-i)
}
