package actors

import (
	"errors"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// Batches: one scope's requests share an append.
//
// A scope has at most one append in flight, and its requests wait
// meanwhile (per-scope order is request order). Without more, a busy scope
// — a parent frame that 64 agents reserve spend on, a scope many workers
// write to — makes one fsync per request however many wait. So when a
// scope's requests are taken up again, the ones waiting are decided one
// after another, each write's events applied to the cached state as soon
// as it is decided (handler.speculate) so that the next is decided after
// it, exactly as if the writes had gone one by one; their events go to the
// store in one append, and the store's group commit makes that one fsync.
// Nothing is visible before it is durable: the scope stays busy until the
// append returns, and every reply of the batch — the writes', and the
// reads' and refusals' decided in between — leaves after it, in request
// order. If the append fails, nothing of the batch was written: its writes
// fail with the error, the scope is dropped from the cache (it is loaded
// again from the store), and the requests answered from its state in
// between are handled again. A first outcome that is neither a write nor
// a reply (a job, a parked wait), a write with work to do after it (an
// entry's after, a reply built from the state) or a batch at its bounds
// ends the batch; what ended it is carried out once the batch is durable.

const (
	// maxBatchWrites and maxBatchBytes bound a batch (the store's
	// MaxAppendBytes is 8 MiB by default; one request's events are at most
	// about its 1 MiB message).
	maxBatchWrites = 256
	maxBatchBytes  = 2 << 20
)

// batch is one scope's writes on their way to the store together, with
// the replies decided in between, in request order.
type batch struct {
	e      *entry
	writes []*write
	items  []batchItem
	size   int64
	// broken says the last write's events did not apply: it is not
	// appended, and the state is dropped once the others are durable.
	broken bool
	// tail is the outcome that ended the batch, carried out after it.
	tail *batchItem
}

// batchItem is a reply of the batch: a write's (w), or one decided from
// the state between its writes (reply); as a tail, any outcome (o).
type batchItem struct {
	req   messages.Request
	to    replyTo
	w     *write
	reply messages.Reply
	o     outcome
}

// events are the batch's events, in order.
func (b *batch) events() []frames.Event {
	var evs []frames.Event
	for _, w := range b.writes {
		evs = append(evs, w.evs...)
	}
	return evs
}

// batchable reports whether a write may share a batch: its reply is built
// from its events and nothing runs after it. A recount's write that a
// request waits for is not (that request is decided after it, before the
// scope's later ones).
func batchable(w *write) bool {
	if rc, ok := w.req.(*recountReq); ok && rc.then != nil {
		return false
	}
	return w.d != nil && w.d.after == nil && w.d.state == nil
}

// add applies w and adds it to the batch; false if its events did not
// apply (the batch is then broken and takes nothing more).
func (b *batch) add(h *handler, req messages.Request, to replyTo, w *write) bool {
	ok := h.speculate(w)
	b.items = append(b.items, batchItem{req: req, to: to, w: w})
	if !ok {
		b.broken = true
		return false
	}
	b.writes = append(b.writes, w)
	b.size += w.size
	return true
}

// appendBatch appends a batch's events (in one store append) and calls
// done with the outcome, on another goroutine or the store's. The append
// carries the scope's fence (appendContext).
func (h *handler) appendBatch(b *batch, done func(eventstore.AppendResult, error)) {
	ctx := appendContext(b.e)
	if len(b.writes) == 1 {
		w := b.writes[0]
		if a, ok := h.store.(eventstore.AsyncAppender); ok {
			a.AppendAsync(ctx, w.e.st.Scope, w.expected, w.enc, done)
			return
		}
		go func() { done(h.store.Append(ctx, w.e.st.Scope, w.expected, w.enc)) }()
		return
	}
	var enc []eventstore.Event
	for _, w := range b.writes {
		enc = append(enc, w.enc...)
	}
	scope, expected := b.e.st.Scope, b.writes[0].expected
	if a, ok := h.store.(eventstore.AsyncAppender); ok {
		a.AppendAsync(ctx, scope, expected, enc, done)
		return
	}
	go func() { done(h.store.Append(ctx, scope, expected, enc)) }()
}

// commitNow runs a single write to the end on the caller's goroutine (for
// tools and tests that drive a handler without a shard) and returns its
// reply.
func (h *handler) commitNow(req messages.Request, w *write) messages.Reply {
	b := &batch{e: w.e}
	if !b.add(h, req, replyTo{}, w) {
		h.settle(b, eventstore.AppendResult{}, nil)
		return w.reply
	}
	res, err := h.store.Append(appendContext(w.e), w.e.st.Scope, w.expected, w.enc)
	h.settle(b, res, err)
	return w.reply
}

// committed reports a batch's append outcome to its shard.
type committed struct {
	b   *batch
	res eventstore.AppendResult
	err error
}

// write starts a batch with w, extends it with the scope's waiting
// requests (s.backlog) and appends it; it reports whether the scope is
// busy (false only when w's own events did not apply).
func (s *shard) write(c actor.Context, req messages.Request, to replyTo, w *write) bool {
	b := &batch{e: w.e}
	if b.add(s.h, req, to, w) && batchable(w) {
		s.extend(b, w.e.st.Scope)
	}
	if len(b.writes) == 0 { // w's events did not apply: nothing to append
		s.h.settle(b, eventstore.AppendResult{}, nil)
		s.reply(c, to, req, w.reply)
		return false
	}
	self, root := c.Self(), c.ActorSystem().Root
	obs := s.h.cfg.obs
	mark := obs.appending(b)
	s.h.appendBatch(b, func(res eventstore.AppendResult, err error) {
		obs.appended(mark, b, res, err)
		root.Send(self, &committed{b: b, res: res, err: err})
	})
	return true
}

// extend decides the scope's waiting requests into the batch, up to its
// bounds, until one comes to something other than a batchable write or a
// reply: that one becomes the batch's tail.
func (s *shard) extend(b *batch, scope string) {
	for len(s.backlog) > 0 && len(b.writes) < maxBatchWrites && b.size < maxBatchBytes && !b.broken {
		env := s.backlog[0]
		s.backlog = s.backlog[1:]
		o := s.h.handle(env.req)
		req := env.req
		if o.req != nil {
			req = o.req
		}
		switch {
		case o.w != nil && batchable(o.w) && b.size+o.w.size <= maxBatchBytes:
			b.add(s.h, req, env.to, o.w)
		case o.w == nil && o.job == nil && o.park == nil:
			b.items = append(b.items, batchItem{req: req, to: env.to, reply: o.reply})
		default:
			b.tail = &batchItem{req: env.req, to: env.to, o: o}
			return
		}
	}
}

// committed finishes a batch once its append returned: replies in request
// order, then its tail; or, when the cached state was dropped, the
// requests answered from it are handled again.
func (s *shard) committed(c actor.Context, m *committed) {
	b := m.b
	scope := b.e.st.Scope
	kept := s.h.settle(b, m.res, m.err)
	// A deposed owner (fence.go) fails the batch whole: the replies decided
	// in between, and what ended it, were decided on a state the scope's
	// new owner may have moved past, and are not handled again here.
	moved := errors.Is(m.err, eventstore.ErrFenced)
	if kept {
		// Its waits may have ended (checked against the batch's own state,
		// which the cache may have evicted since).
		s.awaitWrite(c, b.e.st, b.events())
	}
	var again []envelope
	busy := false
	for _, it := range b.items {
		switch {
		case it.w != nil && m.err == nil:
			// Durable (the writes before a broken one too). What follows
			// it is carried out like any outcome: an entry's after job, or
			// the request that waited for a recount (a batch of this write
			// alone), which may come to a write or a job of its own.
			if s.run(c, scope, it.req, it.to, s.h.afterWrite(it.w, it.w.reply)) {
				busy = true
			}
		case it.w != nil:
			s.reply(c, it.to, it.req, it.w.reply) // the append's error
		case kept:
			s.reply(c, it.to, it.req, it.reply)
		case moved:
			s.reply(c, it.to, it.req, failure(it.req, toWire(m.err)))
		default:
			again = append(again, envelope{it.req, it.to})
		}
	}
	if t := b.tail; t != nil {
		switch {
		case kept:
			busy = s.run(c, scope, t.req, t.to, t.o)
		default:
			if t.o.w != nil {
				s.h.abandon(t.o.w)
			}
			if moved {
				s.reply(c, t.to, t.req, failure(t.req, toWire(m.err)))
			} else {
				again = append(again, envelope{t.req, t.to})
			}
		}
	}
	if len(again) > 0 {
		// Decided on a state that was dropped: handled again, first.
		s.waiting[scope] = append(again, s.waiting[scope]...)
		s.held += len(again)
	}
	if !busy {
		s.resume(c, scope)
	}
}

// abandon forgets a write that was decided but will not be appended.
func (h *handler) abandon(w *write) {
	scope := w.e.st.Scope
	if h.inFlight[scope]--; h.inFlight[scope] <= 0 {
		delete(h.inFlight, scope)
	}
}
