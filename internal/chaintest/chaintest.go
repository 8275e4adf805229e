// Package chaintest builds continuation chains in a store for tests and
// benchmarks, without ContinueFrame: the links are ordinary frames whose
// chain fields the builder sets (on the frame.pushed events, and in the
// state so that the frame.popped records carry them), the way a
// continuation records them.
package chaintest

import (
	"context"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
)

// Builder decides, appends and applies commands to one scope.
type Builder struct {
	Store eventstore.Store
	St    *frames.State
	Now   int64
	Cfg   frames.Config
	// Batch > 0 queues appends and writes them Batch events at a time
	// (Flush writes the rest): for building large logs fast.
	Batch int

	queued []eventstore.Event
	from   int64 // the version before the first queued event
}

// New returns a builder of scope in store (an empty scope).
func New(store eventstore.Store, scope string) *Builder {
	return &Builder{Store: store, St: frames.NewState(scope, 0), Now: 1_700_000_000_000_000_000, Cfg: frames.DefaultConfig()}
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

// Start pushes link id, continuing prev ("" for the root) of the chain
// rooted at root: the frame.pushed carries the pointers.
func (b *Builder) Start(id, prev, root, goal string, budgetTotal int64) error {
	evs, err := frames.Decide(b.Cfg, b.St, &frames.PushFrame{Header: b.hdr(), FrameID: id, Goal: goal,
		Budget: budget.TokenBudget{Total: budgetTotal}})
	if err != nil {
		return err
	}
	p := evs[0].(*frames.FramePushed)
	if prev != "" {
		p.ContinuedFrom, p.ChainRoot = prev, root
	}
	return b.Append(evs...)
}

// Continue ends link id as continued by next: the frame.popped carries
// the pointer, and its record (Final) the chain fields as far as the fold
// keeps them (set on the record when the fold accepts them, left as the
// fold has them otherwise).
func (b *Builder) Continue(id, next string) error {
	evs, err := frames.Decide(b.Cfg, b.St, &frames.PopFrame{Header: b.hdr(), FrameID: id, Status: frames.StatusCompleted})
	if err != nil {
		return err
	}
	p := evs[0].(*frames.FramePopped)
	p.Status, p.ContinuedTo = frames.StatusContinued, next
	p.Final.Status = frames.StatusContinued
	plain := *p.Final
	p.Final.ContinuedTo = next
	if p.Final.ChainRoot == "" {
		p.Final.ChainRoot = b.root(id)
	}
	if frames.Apply(b.St.Clone(), evs[0]) != nil {
		p.Final = &plain
	}
	return b.Append(evs...)
}

// root is the chain root id's frame.pushed named (id itself for a root).
func (b *Builder) root(id string) string {
	if f := b.St.Frame(id); f != nil && f.ChainRoot != "" {
		return f.ChainRoot
	}
	var root string
	_ = b.Flush()
	_ = b.Store.ReadStream(context.Background(), b.St.Scope, 1, func(r eventstore.Record) error {
		if r.Type != frames.TypeFramePushed {
			return nil
		}
		ev, err := eventstore.DecodeFrameEvent(r)
		if err == nil && ev.EventMeta().Frame == id {
			root = ev.(*frames.FramePushed).ChainRoot
		}
		return nil
	})
	if root == "" {
		return id
	}
	return root
}

// Add adds a handle with role and content to frame.
func (b *Builder) Add(frame, id string, role frames.Role, content string) error {
	_, err := b.Do(&frames.AddContextHandle{Header: b.hdr(), FrameID: frame, Handle: frames.ContextHandle{
		ID: id, Kind: "text", Role: role, Priority: compaction.Medium, Content: content, Tokens: int64(len(content)/4 + 1)}})
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
