package frames

import (
	"fmt"

	"github.com/stateindex/stateindex/budget"
)

// A scope's counter: the token counter its live handles' Tokens (and
// LightTokens, and so its frames' ContextTokens) are under. State.Counter
// names it; "" is the estimate, as every scope written before the field
// existed reads. Changing it is one event, scope.counter_changed, that
// carries every live handle's count under the new counter, so that a scope
// never holds handles counted under two counters.

// EstimateCounterName is the canonical name of compaction.EstimateCounter,
// the counter of a scope whose State.Counter is "".
const EstimateCounterName = "estimate_bytes_div_4"

// TypeCounterChanged is the type of CounterChanged.
const TypeCounterChanged = "scope.counter_changed"

// CanonicalCounter is a counter name as State.Counter compares it: "" and
// the estimate's alias "estimate" read as EstimateCounterName.
func CanonicalCounter(name string) string {
	switch name {
	case "", "estimate":
		return EstimateCounterName
	}
	return name
}

// SameCounter reports whether two counter names name the same counter.
func SameCounter(a, b string) bool { return CanonicalCounter(a) == CanonicalCounter(b) }

// CounterOf is the canonical name of the counter s's handles are under.
func (s *State) CounterOf() string { return CanonicalCounter(s.Counter) }

// HandleCount is one live handle's size under a counter.
type HandleCount struct {
	Frame  string `msgpack:"f"`
	Handle string `msgpack:"h"`
	Tokens int64  `msgpack:"t"`
	Light  int64  `msgpack:"lt,omitempty"`
}

// ChangeCounter moves a scope to the counter named To: Counts must hold
// exactly one count for every live handle of every live frame (the shell
// counted them, off its shard's goroutine).
type ChangeCounter struct {
	Header
	To     string
	Counts []HandleCount
}

// CounterChanged: the scope's handles are counted under To from now on
// (From was the counter before, canonical). Counts is every live handle's
// new size; each frame's ContextTokens is their sum.
type CounterChanged struct {
	Meta   `msgpack:",inline"`
	From   string        `msgpack:"fm"`
	To     string        `msgpack:"to"`
	Counts []HandleCount `msgpack:"cn,omitempty"`
}

// EventType names the event.
func (e *CounterChanged) EventType() string { return TypeCounterChanged }

// LiveHandle is a live handle's place and content, as a recount needs it.
type LiveHandle struct {
	Frame, Handle, Content string
}

// LiveHandles lists every live handle of every live frame, frames in push
// order, handles in their order: what a recount counts.
func (s *State) LiveHandles() []LiveHandle {
	var out []LiveHandle
	for _, id := range s.Order {
		f := s.Frames[id]
		if f == nil || !f.Status.Live() {
			continue
		}
		for i := range f.Handles {
			out = append(out, LiveHandle{Frame: f.ID, Handle: f.Handles[i].ID, Content: f.Handles[i].Content})
		}
	}
	return out
}

// HasLiveHandles reports whether a live frame of s holds a handle.
func (s *State) HasLiveHandles() bool {
	for _, f := range s.Frames {
		if f.Status.Live() && len(f.Handles) > 0 {
			return true
		}
	}
	return false
}

func (d decider) changeCounter(c *ChangeCounter) ([]Event, error) {
	to := CanonicalCounter(c.To)
	if err := ValidateID("counter name", to, d.cfg.MaxIDBytes); err != nil {
		return nil, err
	}
	from := d.s.CounterOf()
	if to == from {
		return nil, invalid("scope %q is already counted under %q", d.s.Scope, to)
	}
	if err := checkCounts(d.s, c.Counts); err != nil {
		return nil, fmt.Errorf("%w: counter change to %q: %v", ErrInvalidArgument, to, err)
	}
	counts := append([]HandleCount(nil), c.Counts...)
	return []Event{&CounterChanged{Meta: d.meta("", ReasonImplied), From: from, To: to, Counts: counts}}, nil
}

// checkCounts checks that counts holds exactly one non-negative count for
// every live handle of s and nothing else, and that no frame's sum
// overflows.
func checkCounts(s *State, counts []HandleCount) error {
	type key struct{ f, h string }
	seen := make(map[key]bool, len(counts))
	sums := map[string]int64{}
	for _, c := range counts {
		k := key{c.Frame, c.Handle}
		if seen[k] {
			return fmt.Errorf("handle %q of frame %q counted twice", c.Handle, c.Frame)
		}
		seen[k] = true
		if c.Tokens < 0 || c.Light < 0 {
			return fmt.Errorf("handle %q of frame %q has a negative count", c.Handle, c.Frame)
		}
		f := s.Frames[c.Frame]
		if f == nil || !f.Status.Live() || f.Handle(c.Handle) == nil {
			return fmt.Errorf("handle %q of frame %q is not a live handle", c.Handle, c.Frame)
		}
		var err error
		if sums[c.Frame], err = budget.Add(sums[c.Frame], c.Tokens); err != nil {
			return fmt.Errorf("context tokens of frame %q: %v", c.Frame, err)
		}
	}
	for _, id := range s.Order {
		f := s.Frames[id]
		if f == nil || !f.Status.Live() {
			continue
		}
		for i := range f.Handles {
			if !seen[key{f.ID, f.Handles[i].ID}] {
				return fmt.Errorf("live handle %q of frame %q has no count", f.Handles[i].ID, f.ID)
			}
		}
	}
	return nil
}

func applyCounterChanged(s *State, e *CounterChanged) error {
	if CanonicalCounter(e.From) != s.CounterOf() || CanonicalCounter(e.To) == s.CounterOf() {
		return inconsistent("counter changed from %q to %q on a scope counted under %q", e.From, e.To, s.CounterOf())
	}
	if err := checkCounts(s, e.Counts); err != nil {
		return inconsistent("counter changed: %v", err)
	}
	sums := map[string]int64{}
	for _, c := range e.Counts {
		f := s.Frames[c.Frame]
		h := f.Handle(c.Handle)
		h.Tokens, h.LightTokens = c.Tokens, c.Light
		sums[c.Frame] += c.Tokens
	}
	for _, f := range s.Frames {
		if f.Status.Live() {
			f.ContextTokens = sums[f.ID]
		}
	}
	s.Counter = CanonicalCounter(e.To)
	return nil
}
