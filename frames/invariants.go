package frames

import "fmt"

// CheckInvariants verifies the structural rules every reachable State obeys.
// Tests call it after every Apply; verify and fuzzing call it on replayed
// state. A broken rule is an error matching ErrInvariantViolation.
func CheckInvariants(s *State) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvariantViolation}, args...)...)
	}
	if len(s.Order) != len(s.Frames) {
		return bad("%d frames but %d in push order", len(s.Frames), len(s.Order))
	}
	seen := make(map[string]bool, len(s.Order))
	for _, id := range s.Order {
		if seen[id] || s.Frames[id] == nil {
			return bad("push order lists %q wrongly", id)
		}
		seen[id] = true
	}
	for id, f := range s.Frames {
		if f.ID != id {
			return bad("frame keyed %q has id %q", id, f.ID)
		}
		if err := f.Budget.Validate(); err != nil {
			return bad("frame %q budget: %v", id, err)
		}
		if f.Status < StatusActive || f.Status > StatusContinued {
			return bad("frame %q status %d", id, f.Status)
		}
		if f.PushSeq < 1 || f.PushSeq > s.Version {
			return bad("frame %q push seq %d outside 1..%d", id, f.PushSeq, s.Version)
		}
		if f.ParentID == "" {
			if f.Depth != 0 {
				return bad("root %q at depth %d", id, f.Depth)
			}
		} else {
			p := s.Frames[f.ParentID]
			if p == nil {
				return bad("frame %q has unknown parent %q", id, f.ParentID)
			}
			if f.Depth != p.Depth+1 {
				return bad("frame %q depth %d under parent depth %d", id, f.Depth, p.Depth)
			}
			if f.Depth > p.Budget.MaxSubframeDepth {
				return bad("frame %q depth %d beyond parent's max %d", id, f.Depth, p.Budget.MaxSubframeDepth)
			}
			if s.KeepFinished && !contains(p.Children, id) {
				return bad("parent %q does not list child %q", p.ID, id)
			}
			if f.Status.Live() && !p.Status.Live() {
				return bad("live frame %q under %s parent %q", id, p.Status, p.ID)
			}
		}
		var allocated int64
		live := 0
		var descendants int64
		children := f.Children
		if !s.KeepFinished {
			children = nil
			for _, cid := range s.Order { // the live children
				if c := s.Frames[cid]; c != nil && c.ParentID == id {
					children = append(children, cid)
				}
			}
		}
		for _, cid := range children {
			c := s.Frames[cid]
			if c == nil || c.ParentID != id {
				return bad("frame %q lists child %q that is not its child", id, cid)
			}
			if c.Status.Live() {
				allocated += c.Budget.Total
				live++
			}
			if c.Status != StatusContinued { // its continuation carries its cost and counts
				descendants += 1 + c.Cost.Spawns
			}
		}
		if int64(live) != f.LiveKids {
			return bad("frame %q counts %d live children, has %d", id, f.LiveKids, live)
		}
		if allocated != f.Budget.SubcallAllocation {
			return bad("frame %q allocates %d but its live children hold %d", id, f.Budget.SubcallAllocation, allocated)
		}
		// Every descendant counts against every ancestor's spawns (a live
		// projection sees only the live ones).
		if s.KeepFinished && (descendants != f.Cost.Spawns || int64(len(children)) != f.Kids) {
			return bad("frame %q has %d descendants and %d children but %d spawns and %d kids", id, descendants, len(children), f.Cost.Spawns, f.Kids)
		}
		if descendants > f.Cost.Spawns || int64(len(children)) > f.Kids {
			return bad("frame %q has %d descendants and %d children but %d spawns and %d kids", id, descendants, len(children), f.Cost.Spawns, f.Kids)
		}
		if !s.KeepFinished && !f.Status.Live() {
			return bad("finished frame %q in a live projection", id)
		}
		switch f.Status {
		case StatusActive:
			if live > 0 {
				return bad("active frame %q has %d live children (should be waiting)", id, live)
			}
		case StatusWaiting:
			if live == 0 {
				return bad("waiting frame %q has no live children", id)
			}
		}
		if (f.Status == StatusSuspended) != (f.Suspension != nil) {
			return bad("frame %q is %s with suspension %v", id, f.Status, f.Suspension != nil)
		}
		if f.Suspension != nil {
			t := s.Tokens[f.Suspension.TokenID]
			if t == nil || t.FrameID != id || t.Used {
				return bad("frame %q suspended with an unusable token", id)
			}
		}
		for _, tc := range f.ToolCalls {
			if tc.Abandoned && (tc.Finished || f.Status.Live()) {
				return bad("frame %q is %s with tool call %q abandoned (finished %v)", id, f.Status, tc.ID, tc.Finished)
			}
			if !tc.Finished && !tc.Abandoned && !f.Status.Live() {
				return bad("ended frame %q left tool call %q open, not abandoned", id, tc.ID)
			}
		}
		var tokens int64
		hids := make(map[string]bool, len(f.Handles))
		for _, h := range f.Handles {
			if hids[h.ID] {
				return bad("frame %q has handle %q twice", id, h.ID)
			}
			hids[h.ID] = true
			tokens += h.Tokens
		}
		if tokens != f.ContextTokens {
			return bad("frame %q context tokens %d, handles sum to %d", id, f.ContextTokens, tokens)
		}
	}
	for tid, t := range s.Tokens {
		if !t.Used && s.Frames[t.FrameID] == nil {
			return bad("unused token %q names a frame that is not here", tid)
		}
	}
	for _, a := range s.Abandoned {
		if a.Call.Finished || a.Status.Live() || s.Frames[a.FrameID] != nil {
			return bad("abandoned call %q of frame %q is not one", a.Call.ID, a.FrameID)
		}
	}
	for root, c := range s.Chains {
		if c == nil || c.Root != root || len(c.Links) == 0 {
			return bad("chain %q malformed", root)
		}
		for _, l := range c.Links {
			if s.LinkRoots[l.ID] != root {
				return bad("link %q of chain %q has root %q", l.ID, root, s.LinkRoots[l.ID])
			}
		}
		if h := c.link(c.Head); h != nil && h.To != "" && s.LinkRoots[h.To] == "" {
			continue // between a continuation's pop and the push that follows it in the same append
		}
		if links, _, err := s.ChainLinks(root); err != nil || len(links) != len(c.Links) {
			return bad("chain %q: %d of %d links reachable (%v)", root, len(links), len(c.Links), err)
		}
	}
	for id, f := range s.Frames {
		if f.ChainRoot != "" && s.LinkRoots[id] != f.ChainRoot {
			return bad("frame %q of chain %q is not a link of it", id, f.ChainRoot)
		}
	}
	if err := checkLedgerInvariants(s); err != nil {
		return err
	}
	if err := checkKVInvariants(s); err != nil {
		return err
	}
	if err := checkPartialInvariants(s); err != nil {
		return err
	}
	return checkContentInvariants(s)
}

// checkKVInvariants: KVBytes is what the scope's state counts (both levels,
// a continuation's carried state included); every entry was written at or
// before the state's version, and holds a value or a list, not both; a
// finished frame holds none.
func checkKVInvariants(s *State) error {
	var total int64
	check := func(where string, m map[string]*KVEntry) error {
		for key, e := range m {
			if e == nil || e.Version <= 0 || e.Version > s.Version || (!e.List && e.Items != nil) || (e.List && e.Value != nil) ||
				e.TTL < 0 || (e.Sliding && e.TTL == 0) {
				return fmt.Errorf("%w: state key %q of %s: %+v", ErrInvariantViolation, key, where, e)
			}
			total += kvSize(key, e)
		}
		return nil
	}
	if err := check("the scope", s.KV); err != nil {
		return err
	}
	for id, f := range s.Frames {
		if !f.Status.Live() && f.KV != nil {
			return fmt.Errorf("%w: finished frame %q holds state", ErrInvariantViolation, id)
		}
		if err := check("frame "+id, f.KV); err != nil {
			return err
		}
	}
	if s.carry != nil {
		if err := check("a continuation's carry", s.carry.kv); err != nil {
			return err
		}
	}
	if total != s.KVBytes {
		return fmt.Errorf("%w: the scope's state counts %d bytes, its entries %d", ErrInvariantViolation, s.KVBytes, total)
	}
	return nil
}

// checkLedgerInvariants: every live frame's Outstanding is what its
// reservations hold, and a reservation bound to a child here names a live
// frame pushed with it or is settled.
func checkLedgerInvariants(s *State) error {
	held := map[string]int64{}
	for id, r := range s.Reservations {
		if r.ID != id || r.Amount < 0 || r.Settled < 0 || r.Held() < 0 {
			return fmt.Errorf("%w: reservation keyed %q: %+v", ErrInvariantViolation, id, *r)
		}
		held[r.Frame] += r.Held()
		if r.For == s.Scope && r.Child != "" && !r.Returned {
			c := s.Frames[r.Child]
			if c == nil && s.continuingTo(r.Child) {
				continue // between a bound child's continuation pop and the push that follows it in the same append
			}
			if c == nil || c.Reservation != id {
				return fmt.Errorf("%w: reservation %q bound to %q, which does not hold it", ErrInvariantViolation, id, r.Child)
			}
		}
	}
	for id, f := range s.Frames {
		if f.Status.Live() && f.Outstanding != held[id] {
			return fmt.Errorf("%w: frame %q has %d outstanding, its reservations hold %d", ErrInvariantViolation, id, f.Outstanding, held[id])
		}
	}
	for id, b := range s.Bindings {
		if b.Reservation != id || b.Delivered > b.Reported {
			return fmt.Errorf("%w: binding keyed %q: %+v", ErrInvariantViolation, id, *b)
		}
	}
	return nil
}

// continuingTo reports whether id is the frame a chain's head was just
// continued to, not pushed yet.
func (s *State) continuingTo(id string) bool {
	for _, c := range s.Chains {
		if h := c.link(c.Head); h != nil && h.To == id && s.LinkRoots[id] == "" {
			return true
		}
	}
	return false
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
