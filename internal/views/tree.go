package views

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// ErrNoScope: the scope has no event (never written, or unknown).
var ErrNoScope = errors.New("views: no such scope")

// ScopeTree is a scope's frames as a tree, roots first in push order, with
// what is pending: what `stateindex inspect` prints and the inspector's
// scope page shows. It is read from a data file's whole log
// (TreeFromState) or from a running server (ReadScopeTree).
type ScopeTree struct {
	Scope   string
	Version int64
	// Frames counts the nodes of the tree, Live the live frames.
	Frames, Live int
	// Finished counts the frames the scope finished (all of them, shown or
	// not).
	Finished int64
	Top      string // the top of the stack ("" none)
	Roots    []*FrameNode
	// Pending is the scope's pending work (PendingTotal in all; a server
	// lists the first messages.MaxScopePending); Abandoned the tool calls
	// finished frames left open.
	Pending        []frames.PendingWork
	PendingTotal   int
	Abandoned      []frames.AbandonedCall
	AbandonedTotal int
	LastAt         int64
	Counter        string
	RemovedThrough int64
	// Notes say what the tree leaves out (finished frames past a bound,
	// the registry off, records no longer kept).
	Notes []string
}

// FrameNode is one frame of a ScopeTree.
type FrameNode struct {
	ID, ParentID, Goal string
	Status             frames.Status
	Depth              int64
	// Known says Budget, Limits, Handles and Results were read; a finished
	// frame shown from the registry alone has only its cost and the
	// tokens it used (Budget.Used).
	Known         bool
	Budget        budget.TokenBudget
	Limits        budget.Limits
	Cost          budget.Cost
	Handles       int
	ContextTokens int64
	ContextWindow int64
	Results       int
	InDoubt       []frames.ToolCall
	Abandoned     []frames.ToolCall
	Suspension    *frames.Suspension
	CreatedAt     int64
	CompletedAt   int64
	PushVersion   int64
	ChainRoot     string
	ContinuedFrom string
	ContinuedTo   string
	Reservation   string
	// Top marks the top of the stack; Orphan a frame whose parent is not
	// in the tree (not read, or removed by retention).
	Top      bool
	Orphan   bool
	Children []*FrameNode
}

// Walk calls fn for every node of the tree, depth first, parents first.
func (t *ScopeTree) Walk(fn func(n *FrameNode, depth int)) {
	var walk func(ns []*FrameNode, d int)
	walk = func(ns []*FrameNode, d int) {
		for _, n := range ns {
			fn(n, d)
			walk(n.Children, d+1)
		}
	}
	walk(t.Roots, 0)
}

// TreeFromState is the tree of a state folded with every finished frame
// (eventstore.LoadAll).
func TreeFromState(st *frames.State) *ScopeTree {
	t := &ScopeTree{Scope: st.Scope, Version: st.Version, Frames: len(st.Frames), Live: len(st.LiveFrames()), Finished: st.Finished,
		LastAt: st.LastAt, Counter: st.Counter, RemovedThrough: st.RemovedThrough, Abandoned: st.Abandoned, AbandonedTotal: len(st.Abandoned)}
	t.Pending = st.Pending()
	t.PendingTotal = len(t.Pending)
	top := st.TopOfStack()
	if top != nil {
		t.Top = top.ID
	}
	var node func(f *frames.Frame) *FrameNode
	node = func(f *frames.Frame) *FrameNode {
		n := nodeOfFrame(f)
		n.Top = f == top
		for _, id := range f.Children {
			if c := st.Frames[id]; c != nil {
				n.Children = append(n.Children, node(c))
			}
		}
		return n
	}
	for _, id := range st.Order {
		if f := st.Frames[id]; f != nil && (f.ParentID == "" || st.Frames[f.ParentID] == nil) {
			n := node(f)
			n.Orphan = f.ParentID != ""
			t.Roots = append(t.Roots, n)
		}
	}
	return t
}

func nodeOfFrame(f *frames.Frame) *FrameNode {
	n := &FrameNode{ID: f.ID, ParentID: f.ParentID, Goal: f.Goal, Status: f.Status, Depth: f.Depth, Known: true, Budget: f.Budget,
		Limits: f.Limits, Cost: f.Cost, Handles: len(f.Handles), ContextTokens: f.ContextTokens, ContextWindow: f.ContextWindow,
		Results: len(f.Results), InDoubt: f.InDoubt(), Abandoned: f.Abandoned(), CreatedAt: f.CreatedAt, CompletedAt: f.CompletedAt,
		PushVersion: f.PushSeq, ChainRoot: f.ChainRoot, ContinuedFrom: f.ContinuedFrom, ContinuedTo: f.ContinuedTo, Reservation: f.Reservation}
	if f.Suspension != nil {
		s := *f.Suspension
		n.Suspension = &s
	}
	return n
}

// TreeOptions bound what ReadScopeTree reads.
type TreeOptions struct {
	// MaxFrames bounds the frames read from the registry (live ones are
	// always shown): the newest first (0: 2,000).
	MaxFrames int
	// MaxDetails bounds the finished frames whose record is read for their
	// budget, limits and counts (0: 200; -1: none).
	MaxDetails int
}

// ReadScopeTree reads a scope's tree from a running server through c: its
// live frames and pending work (GetScope, which records nothing), its
// finished frames from the registry (ListFrames; the newest MaxFrames),
// and the records of the newest MaxDetails finished ones (GetStack). A
// scope with no event is ErrNoScope.
func ReadScopeTree(ctx context.Context, c *actors.Client, scope string, o TreeOptions) (*ScopeTree, error) {
	if o.MaxFrames <= 0 {
		o.MaxFrames = 2000
	}
	if o.MaxDetails == 0 {
		o.MaxDetails = 200
	}
	h := messages.Header{Scope: scope}
	t := &ScopeTree{Scope: scope}
	nodes := map[string]*FrameNode{}
	var after int64
	for {
		g, err := c.GetScope(ctx, &messages.GetScope{Header: h, After: after, Limit: messages.MaxScopeFrames})
		if err != nil {
			return nil, err
		}
		if after == 0 {
			if g.Version == 0 {
				return nil, fmt.Errorf("%w: %q", ErrNoScope, scope)
			}
			t.Version, t.Live, t.Finished, t.Top = g.Version, g.Live, g.Finished, g.Top
			t.Pending, t.PendingTotal, t.Abandoned, t.AbandonedTotal = g.Pending, g.PendingTotal, g.Abandoned, g.AbandonedTotal
			t.LastAt, t.Counter, t.RemovedThrough = g.LastAt, g.Counter, g.RemovedThrough
		}
		for i := range g.Frames {
			f := &g.Frames[i]
			n := nodeOfSummary(&f.FrameSummary)
			n.PushVersion, n.ContextWindow, n.ChainRoot, n.ContinuedFrom, n.Reservation = f.PushVersion, f.ContextWindow, f.ChainRoot, f.ContinuedFrom, f.Reservation
			nodes[n.ID] = n
		}
		if g.Next == 0 {
			break
		}
		after = g.Next
	}
	if t.PendingTotal > len(t.Pending) {
		t.Notes = append(t.Notes, fmt.Sprintf("%d pending items: the first %d are listed", t.PendingTotal, len(t.Pending)))
	}

	// Finished frames, from the registry, newest first.
	var finished []*FrameNode
	read, cursor := 0, ""
	for read < o.MaxFrames {
		page, err := c.ListFrames(ctx, &messages.ListFrames{InScope: scope, Limit: min(1000, o.MaxFrames-read), Cursor: cursor}, actors.ListFramesOptions{})
		if errors.Is(err, actors.ErrUnavailable) {
			t.Notes = append(t.Notes, "finished frames are not shown: the registry is off or unavailable ("+err.Error()+")")
			break
		}
		if err != nil {
			return nil, err
		}
		for _, e := range page.Frames {
			read++
			if nodes[e.FrameID] != nil {
				continue // live: GetScope has it as of a later version
			}
			st, err := frames.ParseStatus(e.Status)
			if err != nil {
				continue
			}
			n := &FrameNode{ID: e.FrameID, ParentID: e.ParentID, Goal: e.Goal, Status: st, Depth: e.Depth, Cost: e.Cost,
				CreatedAt: e.CreatedAt, CompletedAt: e.FinishedAt, PushVersion: e.PushVersion, ChainRoot: e.ChainRoot,
				ContinuedFrom: e.ContinuedFrom, ContinuedTo: e.ContinuedTo}
			n.Budget.Used = e.TokensUsed
			nodes[n.ID] = n
			finished = append(finished, n)
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if cursor != "" {
		t.Notes = append(t.Notes, fmt.Sprintf("only the newest %d frames of the registry are shown", o.MaxFrames))
	}
	// Their records (budget, limits, counts), the newest first; a frame
	// the registry still lists as live finished after GetScope read.
	skipped := 0
	for i, n := range finished {
		if (o.MaxDetails < 0 || i >= o.MaxDetails) && n.Status.Terminal() {
			skipped++
			continue
		}
		s, err := c.GetStack(ctx, &messages.GetStack{Header: h, FrameID: n.ID})
		if errors.Is(err, actors.ErrFrameNotFound) {
			continue // its records were removed: the registry's entry is all there is
		}
		if err != nil {
			return nil, err
		}
		if len(s.Frames) == 0 {
			continue
		}
		d := nodeOfSummary(&s.Frames[len(s.Frames)-1])
		d.PushVersion, d.ChainRoot, d.ContinuedFrom, d.ContinuedTo = n.PushVersion, n.ChainRoot, n.ContinuedFrom, n.ContinuedTo
		*n = *d
	}
	if skipped > 0 {
		t.Notes = append(t.Notes, fmt.Sprintf("%d finished frames are shown from the registry alone (their budgets not read)", skipped))
	}
	for _, a := range t.Abandoned {
		if n := nodes[a.FrameID]; n != nil && !containsCall(n.Abandoned, a.Call.ID) {
			n.Abandoned = append(n.Abandoned, a.Call)
		}
	}
	t.Roots = link(nodes, t.Top)
	t.Frames = len(nodes)
	return t, nil
}

func containsCall(cs []frames.ToolCall, id string) bool {
	for _, c := range cs {
		if c.ID == id {
			return true
		}
	}
	return false
}

func nodeOfSummary(s *messages.FrameSummary) *FrameNode {
	n := &FrameNode{ID: s.ID, ParentID: s.ParentID, Goal: s.Goal, Status: s.Status, Depth: s.Depth, Known: true, Budget: s.Budget,
		Limits: s.Limits, Cost: s.Cost, Handles: s.Handles, ContextTokens: s.ContextTokens, Results: s.Results,
		InDoubt: s.InDoubt, CreatedAt: s.CreatedAt, CompletedAt: s.CompletedAt}
	if s.Suspension != nil {
		sp := *s.Suspension
		n.Suspension = &sp
	}
	return n
}

// link places every node under its parent, children in push order; a
// node whose parent is not among them is a root (Orphan when it has one).
func link(nodes map[string]*FrameNode, top string) []*FrameNode {
	all := make([]*FrameNode, 0, len(nodes))
	for _, n := range nodes {
		all = append(all, n)
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].PushVersion != all[j].PushVersion {
			return all[i].PushVersion < all[j].PushVersion
		}
		return all[i].ID < all[j].ID
	})
	var roots []*FrameNode
	for _, n := range all {
		n.Top = n.ID == top && top != ""
		if p := nodes[n.ParentID]; n.ParentID != "" && p != nil {
			p.Children = append(p.Children, n)
			continue
		}
		n.Orphan = n.ParentID != ""
		roots = append(roots, n)
	}
	return roots
}
