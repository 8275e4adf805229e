package frames

// Recovery is what a scope holds for an actor that (re)starts: where it
// was, what is still live and what is unfinished.
type Recovery struct {
	// Current is the top of the stack, nil if no frame is active; Stack is
	// its path from the root.
	Current *Frame
	Stack   []*Frame
	// Live is every live frame, in push order.
	Live []*Frame
	// Pending is the unfinished work (see State.Pending): frames waiting on
	// subcalls, suspended frames and tool calls in doubt.
	Pending []PendingWork
	// InDoubt counts the tool calls started and never finished: they may or
	// may not have run, and must never be re-run blindly.
	InDoubt int
	// Outputs are the live frames' outputs in progress (or complete and
	// not yet recorded as a turn), in push order: what the model had said
	// when the actor stopped (see InterruptedOutputs).
	Outputs []InterruptedOutput
}

// Recover reports what s holds for a restarting actor. An empty scope
// reports nothing.
func Recover(s *State) Recovery {
	var r Recovery
	if s.Version == 0 {
		return r
	}
	if top := s.TopOfStack(); top != nil {
		r.Current, r.Stack = top, s.Ancestry(top.ID)
	}
	r.Live = s.LiveFrames()
	r.Outputs = InterruptedOutputs(r.Live)
	r.Pending = s.Pending()
	for _, p := range r.Pending {
		if p.Kind == PendingToolInDoubt {
			r.InDoubt++
		}
	}
	return r
}

// Command is the ResumeActor command that records this recovery in the
// scope's log; lastSeq is the store's last sequence number.
func (r Recovery) Command(hdr Header, lastSeq uint64) *ResumeActor {
	return &ResumeActor{Header: hdr, FramesRecovered: int64(len(r.Live)), PendingItems: int64(len(r.Pending)), LastSeq: lastSeq}
}
