package actors

import (
	"context"
	"errors"
	"fmt"

	"github.com/stateindex/stateindex/eventstore"
)

// Fencing: servers sharing one store (DESIGN §13).
//
// With Config.Owner set (and a store that is an eventstore.Fencer), a
// server that loads a scope into its cache — for any request, a read too —
// first takes the scope's next owner epoch (AcquireOwner), then reads the
// state, and keeps the fence with the cached scope. Every append of the
// scope carries it (appendContext): batches, single writes, and the
// server's own writes (continuations, outbox deliveries, retention and
// state-expiry records, recounts), which all go through the shards as
// requests. Once another server has taken the scope, the store refuses
// this one's appends (*eventstore.FencedError) and writes nothing. The
// shard then drops the scope from its cache, fails every request of the
// batch whose append was refused — its writes and the replies decided in
// between — with scope_moved (naming the new owner and epoch), and logs
// one line. Nothing the deposed server decided is acknowledged. The
// Client resends a scope_moved request with the same request id
// (moveRetries), so that a caller sees it applied once, by whichever
// server holds the scope then; the request id makes the resend safe:
// the server that takes the request reads the scope after taking its
// epoch, so it sees every write any earlier owner made, request ids
// included.
//
// Epochs are taken per activation, not per server: a server that dropped
// a scope (deposed, or evicted from its LRU) and loads it again takes a new
// epoch, deposing whoever had it meanwhile. Which server should serve a
// scope is placement's business (the cluster's); fencing only makes two
// servers that both believe they do safe: the later activation wins every
// write, and the earlier learns it at its next append.
//
// Reads are not fenced. A server that has been deposed and has not yet
// written to the scope again answers reads from the state it cached:
// reads on it may miss writes the new owner made since it took over —
// the stale read window, which lasts until this server's next write to
// the scope (refused: the scope is then reloaded) or until it evicts the
// scope. Writes, and reads decided in a batch with writes, are never
// stale: they are refused with the batch. With placement that sends each
// scope's requests to one member, the window is only the requests routed
// by a stale view of the membership while it changes.

// appendContext is the context of an append of e's events: the scope's
// fence when fencing is on. It is not a request's context, on purpose:
// a batch carries the writes of several requests, decided and applied to
// the cached state already, and must end in one outcome the store
// decided (durable, or refused whole) — a caller's deadline that ends
// while it is in flight answers that caller ErrTimeout ("resend with the
// same request id"), never a half-known append.
func appendContext(e *entry) context.Context {
	if e.fence.Epoch == 0 {
		return context.Background()
	}
	return eventstore.WithFence(context.Background(), e.fence)
}

// acquire takes scope's next owner epoch for this server (the zero Fence
// when fencing is off).
func (h *handler) acquire(scope string) (eventstore.Fence, error) {
	if h.fencer == nil {
		return eventstore.Fence{}, nil
	}
	f, err := h.fencer.AcquireOwner(context.Background(), scope, h.cfg.Owner)
	if err != nil {
		return eventstore.Fence{}, fmt.Errorf("taking ownership of scope %q: %w", scope, err)
	}
	return f, nil
}

// deposed logs, once per refused batch, that the store refused b's append
// because another server owns the scope now.
func (h *handler) deposed(b *batch, err error) {
	n := len(b.items)
	if b.tail != nil {
		n++
	}
	var fe *eventstore.FencedError
	if !errors.As(err, &fe) {
		h.log.Warn("stateindex: deposed: another server owns the scope now; dropped it, its batch refused with scope_moved",
			"scope", b.e.st.Scope, "requests", n, "error", err)
		return
	}
	h.log.Warn("stateindex: deposed: another server owns the scope now; dropped it, its batch refused with scope_moved",
		"scope", fe.Stream, "held_epoch", fe.Held.Epoch, "owner", fe.Current.Owner, "epoch", fe.Current.Epoch, "requests", n)
}

// errNotFencer is Start's error for an Owner with a store of one server.
func errNotFencer(owner string, store eventstore.Store) error {
	return fmt.Errorf("actors: Owner %q turns fencing on, but the store (%T) is not one servers share (no eventstore.Fencer); "+
		"leave Owner empty for a store of one server", owner, store)
}
