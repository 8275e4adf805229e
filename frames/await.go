package frames

import "fmt"

// Waiting on a frame (DESIGN §11): a waiter names a frame and is answered
// when the head of the frame's continuation chain reaches a terminal
// status, with that head's final record. Which frame that is, whether it
// has ended and what it ended with is decided here, from the scope's state
// and the events of the write just applied; the shell only parks waiters
// and reads the final record from the log when the state no longer holds
// it.

// MaxAwaitWait caps how long one wait may last (10 minutes): a longer wait
// is cut to it, and its caller awaits again.
const MaxAwaitWait int64 = 10 * 60 * 1e9

// AwaitWait checks a wait's length in nanoseconds: negative is refused,
// more than max (MaxAwaitWait when max <= 0) is cut to max.
func AwaitWait(wait, max int64) (int64, error) {
	if max <= 0 {
		max = MaxAwaitWait
	}
	if wait < 0 {
		return 0, invalid("negative wait %d ns", wait)
	}
	return min(wait, max), nil
}

// AwaitOutcome is what a wait on a frame learns from its scope.
type AwaitOutcome struct {
	// Frame is the frame asked for; Head the last link of its chain
	// (Frame itself for a frame in no chain), which the answer is about.
	Frame, Head string
	// Status is the head's status; Terminal whether it has ended
	// (completed, failed or cancelled: a head is never continued).
	Status   Status
	Terminal bool
	// Record is the ended head's final record when it is known without
	// the log: from the events that ended it, or from a state that keeps
	// finished frames; nil otherwise (the shell reads it from the head's
	// frame.popped). A live head has none.
	Record *FrameRecord
	// Summary says what the ended head was: its chain link's summary, or
	// one made from its record (see SetRecord).
	Summary string
}

// SetRecord gives an ended outcome its head's final record, and a summary
// made from it when the chain kept none.
func (o *AwaitOutcome) SetRecord(r *FrameRecord) {
	o.Record = r
	if r != nil && o.Summary == "" {
		o.Summary = linkSummary(FromRecord(r))
	}
}

// AwaitOutcome resolves a wait on frame id: the head of its chain (followed
// through the chain's links, which a continuation moves in the same append
// that ends the link it continues), and whether and how that head ended.
// recent are the events of the write just applied, if any: the record of
// a head they ended is taken from them, and a scope they destroyed knows
// the frame no more (ErrFrameNotFound, as a retried wait would learn). An
// empty id is refused (a wait names its frame: the top of the stack moves),
// and a frame the scope never had is ErrFrameNotFound. It changes nothing;
// it reads the state's history only for a frame in no chain that left the
// projection.
func (s *State) AwaitOutcome(cfg Config, id string, recent []Event) (AwaitOutcome, error) {
	if err := ValidateID("frame id", id, cfg.MaxIDBytes); err != nil {
		return AwaitOutcome{}, err
	}
	for _, ev := range recent {
		if _, ok := ev.(*ScopeDestroyed); ok {
			return AwaitOutcome{}, fmt.Errorf("%w: %q (its scope was destroyed)", ErrFrameNotFound, id)
		}
	}
	head, err := s.ChainHead(id)
	if err != nil {
		return AwaitOutcome{}, err
	}
	o := AwaitOutcome{Frame: id, Head: head}
	if f := s.Frames[head]; f != nil {
		o.Status, o.Terminal = f.Status, !f.Status.Live()
		if o.Terminal { // a state that keeps finished frames
			r := RecordOf(f)
			o.SetRecord(&r)
		}
		return o, nil
	}
	for _, ev := range recent {
		if p, ok := ev.(*FramePopped); ok && p.Frame == head && p.Status != StatusContinued {
			o.Status, o.Terminal = p.Status, true
			o.linkSummary(s)
			o.SetRecord(p.Final)
			return o, nil
		}
	}
	if root := s.LinkRoots[head]; root != "" {
		l := s.Chains[root].link(head)
		if l == nil || !l.Status.Terminal() || l.Status == StatusContinued {
			return AwaitOutcome{}, fmt.Errorf("%w: head %q of chain %q is neither live nor ended", ErrChainCorrupt, head, root)
		}
		o.Status, o.Terminal, o.Summary = l.Status, true, l.Summary
		return o, nil
	}
	status, ok, err := s.finished(head)
	switch {
	case err != nil:
		return AwaitOutcome{}, err
	case !ok:
		return AwaitOutcome{}, fmt.Errorf("%w: %q", ErrFrameNotFound, id)
	case status == StatusContinued:
		return AwaitOutcome{}, fmt.Errorf("%w: %q was continued and is in no chain", ErrChainCorrupt, head)
	}
	o.Status, o.Terminal = status, true
	return o, nil
}

// linkSummary takes the ended head's chain link summary, if it has one.
func (o *AwaitOutcome) linkSummary(s *State) {
	if root := s.LinkRoots[o.Head]; root != "" && s.Chains[root] != nil {
		if l := s.Chains[root].link(o.Head); l != nil {
			o.Summary = l.Summary
		}
	}
}

// AwaitEnded reports what of evs can change a wait's outcome: the frames
// they end (finished or continued), and whether they destroy the scope.
// A write that ends no frame and destroys nothing leaves every wait as it
// was, so the shell re-checks only the waits whose head is among ended.
func AwaitEnded(evs []Event) (ended []string, destroyed bool) {
	for _, ev := range evs {
		switch e := ev.(type) {
		case *FramePopped:
			ended = append(ended, e.Frame)
		case *ScopeDestroyed:
			destroyed = true
		}
	}
	return ended, destroyed
}
