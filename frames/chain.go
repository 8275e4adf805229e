package frames

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Continuation chains (DESIGN §10).
//
// A frame that is continued (ContinueFrame, or automatically at a
// threshold) or a finished head that is resumed (ResumeChain) becomes a
// link of a chain: a list of frames standing for one logical execution,
// from its root (the first link) to its head (the last). The links point
// at each other (Frame.ContinuedFrom, Frame.ContinuedTo, Frame.ChainRoot);
// the projection keeps each chain by its root (State.Chains) and every
// link's root (State.ChainOf), so that the head of any link is found in
// O(1), and a chain's links are listed without reading the log. Chains are
// small (one entry per link) and rebuilt by replay like the rest of the
// state.

// ChainLink is one link of a chain as the projection keeps it.
type ChainLink struct {
	ID     string `msgpack:"id"`
	Status Status `msgpack:"st"` // as of its last change the chain saw (a live link reads its frame's)
	// Tokens is the link's live context tokens when it was continued or
	// finished (0 while it is live).
	Tokens      int64  `msgpack:"t,omitempty"`
	CreatedAt   int64  `msgpack:"at"`
	CompletedAt int64  `msgpack:"ca,omitempty"`
	PushSeq     int64  `msgpack:"ps"`
	To          string `msgpack:"to,omitempty"` // the next link ("" for the head)
	// EndSeq is the version of the link's frame.popped (0 while it is
	// live, or for a link that finished before it joined a chain and was
	// resumed); Summary says what the link was (its goal, status, tokens
	// and results, at most MaxLinkSummaryBytes), written when it ends.
	EndSeq  int64  `msgpack:"es,omitempty"`
	Summary string `msgpack:"sm,omitempty"`
	// Removed is set once retention removed the link's records: what is
	// left of it is this entry, its tombstone.
	Removed *LinkTombstone `msgpack:"rm,omitempty"`
}

// LinkTombstone is what retention leaves of a chain link whose records it
// removed: the range the link spanned (PushSeq..EndSeq of its ChainLink, or
// through Through when its end is unknown), and the removal's Through and
// Hash — the hex SHA-256 of the record at Through, from which the scope's
// hash chain goes on, so what was removed stays checkable against an
// archive or an export. The link's Summary stays with it.
type LinkTombstone struct {
	Through int64  `msgpack:"th"`
	Hash    string `msgpack:"h"`
	At      int64  `msgpack:"at"`
}

// MaxLinkSummaryBytes bounds a chain link's Summary.
const MaxLinkSummaryBytes = 512

// Chain is a continuation chain: its root, its head and its links, root
// first.
type Chain struct {
	Root  string      `msgpack:"r"`
	Head  string      `msgpack:"h"`
	Links []ChainLink `msgpack:"l"`
}

// Errors of chains.
var (
	// ErrFrameContinued: the frame was continued; mutations go to its
	// chain's head (ContinuedError names it).
	ErrFrameContinued = errors.New("frames: frame was continued")
	// ErrChainRunning: a chain whose head is still live cannot be resumed.
	ErrChainRunning = errors.New("frames: chain is still running")
	// ErrChainCorrupt: a chain's links do not lead from its root to its
	// head (a cycle or a dangling link in corrupted state).
	ErrChainCorrupt = errors.New("frames: continuation chain is corrupt")
	// ErrIneffective: a compaction or continuation that would free too
	// little (CheckFreed) is refused rather than looped on.
	ErrIneffective = errors.New("frames: compaction or continuation frees too little")
)

// ContinuedError is the error of a mutation that names a continued frame:
// it matches ErrFrameContinued and ErrFrameNotLive and names the chain's
// head, where the work goes on.
type ContinuedError struct {
	ID   string
	Head string
}

func (e *ContinuedError) Error() string {
	return fmt.Sprintf("%v: %q was continued; its chain's head is %q", ErrFrameContinued, e.ID, e.Head)
}

// Is makes a ContinuedError match ErrFrameContinued and ErrFrameNotLive.
func (e *ContinuedError) Is(target error) bool {
	return target == ErrFrameContinued || target == ErrFrameNotLive
}

// ChainOf returns the chain id (its root) that holds the link id, or "".
func (s *State) ChainOf(id string) string { return s.LinkRoots[id] }

// ChainHead returns the head of the chain that holds id — id itself for a
// frame in no chain — in O(1). An entry that does not lead to a chain that
// knows the link is ErrChainCorrupt.
func (s *State) ChainHead(id string) (string, error) {
	root, ok := s.LinkRoots[id]
	if !ok {
		return id, nil
	}
	c := s.Chains[root]
	if c == nil || c.Head == "" || s.LinkRoots[c.Head] != root {
		return "", fmt.Errorf("%w: link %q names chain %q, which has no head of its own", ErrChainCorrupt, id, root)
	}
	return c.Head, nil
}

// continued is the error for a mutation naming the continued frame id.
func (s *State) continued(id string) error {
	head, err := s.ChainHead(id)
	if err != nil {
		return err
	}
	return &ContinuedError{ID: id, Head: head}
}

// ChainLinks returns the links of the chain holding id, root to head,
// following the links' forward pointers from the root with a set of the
// links visited, as the seed's resolver does: a cycle, a pointer to no
// link or a walk that ends before the head is ErrChainCorrupt, never a
// hang. A frame in no chain has none (nil, "", nil).
func (s *State) ChainLinks(id string) (links []ChainLink, root string, err error) {
	root, ok := s.LinkRoots[id]
	if !ok {
		return nil, "", nil
	}
	c := s.Chains[root]
	if c == nil || len(c.Links) == 0 {
		return nil, "", fmt.Errorf("%w: link %q names chain %q, which is not kept", ErrChainCorrupt, id, root)
	}
	byID := make(map[string]int, len(c.Links))
	for i, l := range c.Links {
		byID[l.ID] = i
	}
	visited := make(map[string]bool, len(c.Links))
	for cur := c.Root; ; {
		if visited[cur] {
			return nil, "", fmt.Errorf("%w: chain %q links back to %q", ErrChainCorrupt, root, cur)
		}
		visited[cur] = true
		i, ok := byID[cur]
		if !ok {
			return nil, "", fmt.Errorf("%w: chain %q points at %q, which is none of its links", ErrChainCorrupt, root, cur)
		}
		links = append(links, c.Links[i])
		if c.Links[i].To == "" {
			if cur != c.Head {
				return nil, "", fmt.Errorf("%w: chain %q ends at %q, its head is %q", ErrChainCorrupt, root, cur, c.Head)
			}
			break
		}
		cur = c.Links[i].To
	}
	if !visited[id] {
		return nil, "", fmt.Errorf("%w: chain %q does not reach %q", ErrChainCorrupt, root, id)
	}
	for i := range links { // a live link reads its frame's status
		if f := s.Frames[links[i].ID]; f != nil {
			links[i].Status = f.Status
		}
	}
	return links, root, nil
}

// LinkPointers sets, on a finished frame read back from the log, the
// chain pointers its own records cannot hold: the chain it is a link of
// (ChainRoot) and the link after it (ContinuedTo) when it was resumed
// after it finished. A frame in no chain is left as it is.
func (s *State) LinkPointers(f *Frame) {
	root := s.LinkRoots[f.ID]
	c := s.Chains[root]
	if root == "" || c == nil || f.Status.Live() {
		return
	}
	f.ChainRoot = root
	if l := c.link(f.ID); l != nil && l.To != "" {
		f.ContinuedTo = l.To
	}
}

// chainLink returns the chain c's link id, or nil.
func (c *Chain) link(id string) *ChainLink {
	for i := len(c.Links) - 1; i >= 0; i-- { // the head is usually wanted
		if c.Links[i].ID == id {
			return &c.Links[i]
		}
	}
	return nil
}

// chainEnded records in its chain that the link f finished (f's status,
// tokens and end time are final); a frame in no chain is made the root of
// a new one when continued.
func (s *State) chainEnded(f *Frame, continuedTo string) error {
	root, ok := s.LinkRoots[f.ID]
	if !ok {
		if continuedTo == "" {
			return nil
		}
		root = f.ID
		if s.Chains == nil {
			s.Chains, s.LinkRoots = map[string]*Chain{}, map[string]string{}
		}
		s.Chains[root] = &Chain{Root: root, Head: root, Links: []ChainLink{{ID: f.ID, CreatedAt: f.CreatedAt, PushSeq: f.PushSeq}}}
		s.LinkRoots[root] = root
	}
	c := s.Chains[root]
	if c == nil {
		return inconsistent("link %q of chain %q that is not kept", f.ID, root)
	}
	l := c.link(f.ID)
	if l == nil || c.Head != f.ID {
		return inconsistent("link %q ends, chain %q's head is %q", f.ID, root, c.Head)
	}
	l.Status, l.Tokens, l.CompletedAt, l.To = f.Status, f.ContextTokens, f.CompletedAt, continuedTo
	l.EndSeq, l.Summary = s.Version+1, linkSummary(f) // Apply is folding the version after s.Version
	return nil
}

// linkSummary says what a finished link was, in at most
// MaxLinkSummaryBytes: its goal, status, context tokens and results.
func linkSummary(f *Frame) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s; %s at %d tokens", clipText(f.Goal, 160), f.Status, f.ContextTokens)
	for i, r := range f.Results {
		if i == 4 {
			fmt.Fprintf(&b, "; and %d more results", len(f.Results)-i)
			break
		}
		fmt.Fprintf(&b, "; result %s", clipText(r.Ref, 80))
		if r.Summary != "" {
			fmt.Fprintf(&b, ": %s", clipText(r.Summary, 80))
		}
	}
	return clipText(b.String(), MaxLinkSummaryBytes)
}

// clipText cuts s to at most n bytes on a UTF-8 boundary, marking the cut
// with "…".
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// checkRetentionKeepsLiveChains refuses a cut through version through that
// would remove a link of a chain whose head is live (ErrChainRunning: a
// pass that planned before a continuation or a resume made the chain live
// plans again).
func (s *State) checkRetentionKeepsLiveChains(through int64) error {
	for _, c := range s.Chains {
		if h := s.Frames[c.Head]; h == nil || !h.Status.Live() {
			continue
		}
		for _, l := range c.Links {
			if l.Removed == nil && l.ID != c.Head && l.PushSeq > s.RemovedThrough && l.PushSeq <= through {
				return fmt.Errorf("%w: retention through %d would remove link %q of chain %q, whose head %q is live", ErrChainRunning, through, l.ID, c.Root, c.Head)
			}
		}
	}
	return nil
}

// buryChainLinks leaves a tombstone for every finished chain link whose
// records a retention through e.Through removed.
func (s *State) buryChainLinks(e *RetentionApplied) {
	for _, c := range s.Chains {
		for i := range c.Links {
			l := &c.Links[i]
			if f := s.Frames[l.ID]; l.Removed != nil || l.PushSeq > e.Through || (f != nil && f.Status.Live()) {
				continue // a live link's first records may go (the snapshot holds it): it is no tombstone
			}
			l.Removed = &LinkTombstone{Through: e.Through, Hash: e.Hash, At: e.At}
		}
	}
}

// checkChainPush checks a FramePushed with ContinuedFrom against the
// chain it extends, changing nothing; cont says whether its head was
// continued in the same append (else it is a finished head resumed).
func (s *State) checkChainPush(e *FramePushed) (cont bool, err error) {
	from := e.ContinuedFrom
	if e.Resumed != nil {
		// A resume of a frame that finished in no chain: it becomes the root.
		// A state that keeps finished frames (KeepFinished) holds it.
		l := *e.Resumed
		held := s.Frames[from] != nil && !(s.KeepFinished && s.Frames[from].Status == l.Status)
		if l.ID != from || e.ChainRoot != from || s.LinkRoots[from] != "" || held || !l.Status.Terminal() ||
			l.Status == StatusContinued || l.To != "" {
			return false, inconsistent("resume of %q as a new chain (root %q, link %+v)", from, e.ChainRoot, l)
		}
		return false, nil
	}
	root := s.LinkRoots[from]
	c := s.Chains[root]
	if root == "" || root != e.ChainRoot || c == nil || c.Head != from {
		return false, inconsistent("frame %q continues %q, which is not the head of chain %q", e.Frame, from, e.ChainRoot)
	}
	head := c.link(from)
	switch {
	case head == nil || s.Frames[from] != nil && s.Frames[from].Status.Live():
		return false, inconsistent("frame %q continues %q, which is still live", e.Frame, from)
	case head.Status == StatusContinued:
		if head.To != e.Frame {
			return false, inconsistent("frame %q continues %q, which was continued to %q", e.Frame, from, head.To)
		}
		return true, nil
	case head.Status.Terminal() && head.To == "":
		return false, nil
	}
	return false, inconsistent("frame %q continues %q, which is %s", e.Frame, from, head.Status)
}

// commitChainPush links the frame e pushes after its chain's head (checked
// by checkChainPush).
func (s *State) commitChainPush(e *FramePushed, version int64) {
	from := e.ContinuedFrom
	if e.Resumed != nil {
		if s.Chains == nil {
			s.Chains, s.LinkRoots = map[string]*Chain{}, map[string]string{}
		}
		s.Chains[from] = &Chain{Root: from, Head: from, Links: []ChainLink{*e.Resumed}}
		s.LinkRoots[from] = from
	}
	root := s.LinkRoots[from]
	c := s.Chains[root]
	c.link(from).To = e.Frame
	c.Links = append(c.Links, ChainLink{ID: e.Frame, Status: StatusActive, CreatedAt: e.At, PushSeq: version})
	c.Head = e.Frame
	s.LinkRoots[e.Frame] = root
	if f := s.Frames[from]; f != nil && s.KeepFinished && !f.Status.Live() {
		// A finished head resumed, in a state that keeps finished frames:
		// its forward pointer (a continued one has it from its pop).
		f.ContinuedTo, f.ChainRoot = e.Frame, root
	}
}

// cloneChains deep-copies s's chains into c.
func (s *State) cloneChains(c *State) {
	c.Chains, c.LinkRoots = nil, nil
	if s.Chains != nil {
		c.Chains = make(map[string]*Chain, len(s.Chains))
		for r, ch := range s.Chains {
			cc := *ch
			cc.Links = append([]ChainLink(nil), ch.Links...)
			for i := range cc.Links {
				if t := cc.Links[i].Removed; t != nil {
					tc := *t
					cc.Links[i].Removed = &tc
				}
			}
			c.Chains[r] = &cc
		}
	}
	if s.LinkRoots != nil {
		c.LinkRoots = make(map[string]string, len(s.LinkRoots))
		for k, v := range s.LinkRoots {
			c.LinkRoots[k] = v
		}
	}
}
