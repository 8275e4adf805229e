// Package chaintest builds continuation chains in a store for tests and
// benchmarks with the core's own commands: a link is continued with
// frames.ContinueFrame and a finished chain resumed with
// frames.ResumeChain, decided against the builder's state, appended and
// folded as a server does, so that the store holds real chains (the fold
// checks every chain event).
package chaintest

import (
	"context"
	"fmt"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
)

// DefaultWindow is a builder's Window unless set.
const DefaultWindow int64 = 10_000

// Builder decides, appends and applies commands to one scope.
type Builder struct {
	Store eventstore.Store
	St    *frames.State
	Now   int64
	Cfg   frames.Config
	// Batch > 0 queues appends and writes them Batch events at a time
	// (Flush writes the rest): for building large logs fast.
	Batch int
	// Window is the context window of the roots Start pushes (a
	// continuation's link inherits it): small enough that a continuation
	// of a test's few handles frees the 5% the core asks for.
	Window int64
	// Ceiling and Summary are the resume ceiling and the summary ("": the
	// extractive summarizer's; frames.NoSummary: none) of Continue and
	// Resume.
	Ceiling int64
	Summary string

	queued []eventstore.Event
	from   int64 // the version before the first queued event
}

// New returns a builder of scope in store (an empty scope).
func New(store eventstore.Store, scope string) *Builder {
	return &Builder{Store: store, St: frames.NewState(scope, 0), Now: 1_700_000_000_000_000_000, Cfg: frames.DefaultConfig(),
		Window: DefaultWindow}
}

func (b *Builder) hdr() frames.Header {
	b.Now += 1000
	return frames.Header{Now: b.Now}
}

// Do decides cmd, appends its events and applies them.
func (b *Builder) Do(cmd frames.Command) ([]frames.Event, error) {
	evs, err := frames.Decide(b.Cfg, b.St, cmd)
	if err != nil {
		return nil, err
	}
	return evs, b.Append(evs...)
}

// Append appends events as they are and applies them.
func (b *Builder) Append(evs ...frames.Event) error {
	recs := make([]eventstore.Event, len(evs))
	for i, e := range evs {
		var err error
		if recs[i], err = eventstore.EncodeFrameEvent(e); err != nil {
			return err
		}
	}
	if b.Batch > 0 {
		if len(b.queued) == 0 {
			b.from = b.St.Version
		}
		b.queued = append(b.queued, recs...)
	} else if _, err := b.Store.Append(context.Background(), b.St.Scope, b.St.Version, recs); err != nil {
		return err
	}
	for _, e := range evs {
		if err := frames.Apply(b.St, e); err != nil {
			return err
		}
	}
	if b.Batch > 0 && len(b.queued) >= b.Batch {
		return b.Flush()
	}
	return nil
}

// Flush writes the queued events.
func (b *Builder) Flush() error {
	if len(b.queued) == 0 {
		return nil
	}
	_, err := b.Store.Append(context.Background(), b.St.Scope, b.from, b.queued)
	b.queued = b.queued[:0]
	return err
}

// Start starts link id of the chain rooted at root. A root (prev "")
// is pushed, with the builder's Window as its context window. Any other
// link was already pushed by the continuation or resume that made it
// (Continue, Resume): Start checks that it continues prev in the chain of
// root and, when goal is not the one it took over, sets it with an
// UpdateFrame; budgetTotal is then unused (a continuation's allocation is
// its predecessor's).
func (b *Builder) Start(id, prev, root, goal string, budgetTotal int64) error {
	if prev == "" {
		_, err := b.Do(&frames.PushFrame{Header: b.hdr(), FrameID: id, Goal: goal, Budget: budget.TokenBudget{Total: budgetTotal},
			ContextWindow: b.Window})
		return err
	}
	f := b.St.Frame(id)
	switch {
	case f == nil:
		return fmt.Errorf("chaintest: link %q was not pushed: continue or resume %q first", id, prev)
	case f.ContinuedFrom != prev || f.ChainRoot != root:
		return fmt.Errorf("chaintest: link %q continues %q in chain %q, not %q in %q", id, f.ContinuedFrom, f.ChainRoot, prev, root)
	case f.Goal == goal:
		return nil
	}
	_, err := b.Do(&frames.UpdateFrame{Header: b.hdr(), FrameID: id, Goal: &goal})
	return err
}

// Mint returns the ids a continuation or resume that makes link next
// mints: the link, its segment (NEXT-seg) and its summary (NEXT-sum).
func Mint(next string) frames.ContinueMint {
	return frames.ContinueMint{FrameID: next, SegmentID: next + "-seg", SummaryID: next + "-sum"}
}

// Continue continues link id as next with the core's ContinueFrame (the
// builder's Ceiling and Summary; ids from Mint): one append holds id's
// frame.popped, next's frame.pushed and the handles next carries.
func (b *Builder) Continue(id, next string) error {
	_, err := b.Do(&frames.ContinueFrame{Header: b.hdr(), FrameID: id, ResumeCeiling: b.Ceiling, Summary: b.Summary,
		With: frames.ContinueWith{Mint: Mint(next)}})
	return err
}

// Pop ends link id with status.
func (b *Builder) Pop(id string, status frames.Status) error {
	_, err := b.Do(&frames.PopFrame{Header: b.hdr(), FrameID: id, Status: status})
	return err
}

// Resume resumes the finished chain holding link chain with the user's
// message (handle msgID) as link next (ResumeChain, ids from Mint), the
// head read from the log as a server reads it; budgetTotal is the budget
// of a new root (0: the head's parent's allocation).
func (b *Builder) Resume(chain, next, msgID, message string, budgetTotal int64) error {
	if err := b.Flush(); err != nil {
		return err
	}
	b.St.SetHistory(eventstore.History(b.Store, b.St.Scope)) // finished links are read from the log
	head, _, err := frames.ResolveChainHead(b.Cfg, b.St, chain)
	if err != nil {
		return err
	}
	f, err := eventstore.LoadFinishedFrame(context.Background(), b.Store, b.St.Scope, head)
	if err != nil {
		return err
	}
	_, err = b.Do(&frames.ResumeChain{Header: b.hdr(), ChainID: chain, Head: f, Message: message, MessageID: msgID,
		Budget: budget.TokenBudget{Total: budgetTotal}, ResumeCeiling: b.Ceiling, With: frames.ContinueWith{Mint: Mint(next)}})
	return err
}

// Add adds a handle with role and content to frame.
func (b *Builder) Add(frame, id string, role frames.Role, content string) error {
	_, err := b.Do(&frames.AddContextHandle{Header: b.hdr(), FrameID: frame, Handle: frames.ContextHandle{
		ID: id, Kind: "text", Role: role, Priority: compaction.Medium, Content: content, Tokens: int64(len(content)/4 + 1)}})
	return err
}

// AddHandle adds h to frame as it is (Kind "text" and Tokens len/4+1
// when unset): for a priority or a token count of the test's choosing.
func (b *Builder) AddHandle(frame string, h frames.ContextHandle) error {
	if h.Kind == "" {
		h.Kind = "text"
	}
	if h.Tokens == 0 {
		h.Tokens = int64(len(h.Content)/4 + 1)
	}
	_, err := b.Do(&frames.AddContextHandle{Header: b.hdr(), FrameID: frame, Handle: h})
	return err
}

// Tool starts and finishes a tool call.
func (b *Builder) Tool(frame, call, name, input, output string) error {
	if _, err := b.Do(&frames.StartToolCall{Header: b.hdr(), FrameID: frame, CallID: call, Name: name}); err != nil {
		return err
	}
	_, err := b.Do(&frames.FinishToolCall{Header: b.hdr(), FrameID: frame, CallID: call,
		CallHandle:   frames.ContextHandle{ID: call + "-c", Kind: "tool_call", Priority: compaction.Medium, Content: input, Tokens: int64(len(input)/4 + 1)},
		ResultHandle: frames.ContextHandle{ID: call + "-r", Kind: "tool_result", Priority: compaction.Medium, Content: output, Tokens: int64(len(output)/4 + 1)}})
	return err
}

// Usage records usage on frame.
func (b *Builder) Usage(frame string, c budget.Cost) error {
	_, err := b.Do(&frames.RecordUsage{Header: b.hdr(), FrameID: frame, Cost: c})
	return err
}

// Result adds a result to frame.
func (b *Builder) Result(frame, id, ref, summary string) error {
	_, err := b.Do(&frames.AddResult{Header: b.hdr(), FrameID: frame, Result: frames.ResultRef{ID: id, Kind: "file", Ref: ref, Summary: summary}})
	return err
}
