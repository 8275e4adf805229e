package actors

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// StateClient is what a StateHandle needs of a StateIndex; *Client has
// these methods. A wrapper can count, log or inject faults.
type StateClient interface {
	ChangeState(ctx context.Context, req *messages.ChangeState) (*messages.ChangeStateReply, error)
	RangeState(ctx context.Context, req *messages.RangeState) (*messages.RangeStateReply, error)
	StateHistory(ctx context.Context, req *messages.StateHistory) (*messages.StateHistoryReply, error)
}

// State returns a handle on a scope's own key-value state (it lives until
// deleted, expired or the scope is destroyed). Nothing is read until the
// handle's first read.
func (c *Client) State(scope string) *StateHandle { return NewStateHandle(c, scope, "") }

// FrameState returns a handle on a live frame's key-value state (it ends
// with the frame and moves to its continuation).
func (c *Client) FrameState(scope, frameID string) *StateHandle {
	return NewStateHandle(c, scope, frameID)
}

// NewStateHandle returns a handle on the state of scope's level frameID
// ("": the scope's own) through sc.
func NewStateHandle(sc StateClient, scope, frameID string) *StateHandle {
	return &StateHandle{sc: sc, scope: scope, frame: frameID, pageSize: frames.MaxStateOps}
}

// StateHandle is one level of a scope's key-value state as the seed's
// thread state presents it: reads are answered from a view loaded on first
// use, writes are recorded and sent together by Flush.
//
// Loading. The first read (Get, List, Has, Keys, Entries, Size and the
// typed getters) loads the whole level, a RangeState page at a time, at one
// scope version (a load that sees the scope move between its pages starts
// over, a few times, then fails with ErrVersionConflict); later reads
// answer from the view without a request. Loaded reports whether it has
// been read; Reload reads it again. The view does not expire keys by itself
// and does not see other writers: Reload does.
//
// Writing. Set, Delete, Clear, ClearPrefix, Push and Touch record a change
// and never read: a handle that is only written sends one ChangeState at
// Flush and no read at all (the seed's write-only merge). On a loaded
// handle a change also shows in the view at once (its Version is 0 until
// flushed). Dirty reports whether changes are waiting. At most
// frames.MaxStateOps (1,000) changes fit in one Flush.
//
// Flush sends the pending changes as one ChangeState: all of them apply,
// or none. When it fails the handle is as before it: the changes are still
// pending (the view shows them as such, at version 0) — Flush again, or
// Discard them. With
// IfUnchanged every key the changes write is conditional on the version
// this handle read (compare-and-set): a key another writer changed since
// makes the whole Flush fail with ErrStateConflict.
//
// Outcome unknown. When a Flush fails without the server's refusal
// (ErrTimeout, ErrUnavailable, ErrStoreFailed, ErrInternal) its changes may
// have been applied. The handle keeps that request, request id included,
// and sends it again, unchanged, before anything else — at the next Flush
// or the next load — so it applies at most once; changes recorded
// meanwhile follow in a second request.
//
// Concurrency. A StateHandle is not safe for concurrent use: it belongs to
// one goroutine, typically one actor, whose Receive Proto.Actor runs one
// message at a time — keep the handle in the actor's struct, as raft keeps
// its RawNode. Flush and loads block that goroutine for one request each.
// Share the Client, never the handle; two handles on one level are two
// writers, and IfUnchanged is how they avoid losing each other's updates.
type StateHandle struct {
	sc    StateClient
	scope string
	frame string

	loaded   bool
	seen     int64                        // the newest scope version the view holds (its load's or a flush's)
	version  int64                        // the last load's or Flush's
	base     map[string]frames.StateEntry // as read, and as this handle's flushes left it
	view     map[string]frames.StateEntry // base with the pending changes applied
	pageSize int                          // RangeState's page; halved when a page is too large to travel

	pending []messages.StateOp
	bad     error // an option's error: Flush refuses until Discard
	// doubt is a request whose outcome is unknown, covering pending[:doubtN].
	doubt  *messages.ChangeState
	doubtN int
}

// Bounds of the handle's requests.
const (
	// stateLoadTries is how many times a load starts over when the scope
	// moves between its pages.
	stateLoadTries = 4
	// historyPage is the changes a History page asks for.
	historyPage = 100
)

// Scope returns the handle's scope.
func (h *StateHandle) Scope() string { return h.scope }

// FrameID returns the handle's frame ("": the scope's own state).
func (h *StateHandle) FrameID() string { return h.frame }

// Loaded reports whether the level has been read (the seed's loaded).
func (h *StateHandle) Loaded() bool { return h.loaded }

// Dirty reports whether changes wait for a Flush (the seed's dirty).
func (h *StateHandle) Dirty() bool { return len(h.pending) > 0 }

// Version returns the scope version the handle last saw: its last
// Flush's (a replayed Flush: the original's) or, after it, its last load's
// (0: neither yet).
func (h *StateHandle) Version() int64 { return h.version }

// Pending returns how many changes wait for a Flush.
func (h *StateHandle) Pending() int { return len(h.pending) }

// Load reads the level now, if it has not been read.
func (h *StateHandle) Load(ctx context.Context) error {
	if h.loaded {
		return nil
	}
	return h.Reload(ctx)
}

// Reload reads the level again; the pending changes stay pending and are
// applied to the new view.
func (h *StateHandle) Reload(ctx context.Context) error {
	if h.doubt != nil { // the view must know whether it was applied
		if err := h.send(ctx, h.doubt, h.doubtN); err != nil {
			return err
		}
	}
	for range stateLoadTries {
		m, at, ok, err := h.readLevel(ctx)
		if err != nil {
			return err
		}
		if ok {
			h.base, h.seen, h.loaded, h.version = m, at, true, at
			h.rebuild()
			return nil
		}
	}
	return fmt.Errorf("%w: the state of scope %q changed while it was read, %d times; nothing loaded", ErrVersionConflict, h.scope, stateLoadTries)
}

// readLevel reads every page of the level; ok is false when the scope's
// version moved between pages.
func (h *StateHandle) readLevel(ctx context.Context) (m map[string]frames.StateEntry, at int64, ok bool, err error) {
	m = map[string]frames.StateEntry{}
	after, first := "", true
	for {
		r, err := h.sc.RangeState(ctx, &messages.RangeState{Header: messages.Header{Scope: h.scope}, FrameID: h.frame, After: after, Limit: h.pageSize})
		if errors.Is(err, ErrTooLarge) && h.pageSize > 1 { // a page too large for a remote message
			h.pageSize /= 2
			continue
		}
		if err != nil {
			return nil, 0, false, err
		}
		if first {
			at, first = r.Version, false
		} else if r.Version != at {
			return nil, 0, false, nil
		}
		for _, e := range r.Entries {
			m[e.Key] = e
		}
		if r.Next == "" {
			return m, at, true, nil
		}
		after = r.Next
	}
}

// rebuild makes the view: base with the pending changes applied.
func (h *StateHandle) rebuild() {
	h.view = maps.Clone(h.base)
	if h.view == nil {
		h.view = map[string]frames.StateEntry{}
	}
	for _, op := range h.pending {
		applyStateOp(h.view, op, 0)
	}
}

// entry returns key's entry in the view, loading it first.
func (h *StateHandle) entry(ctx context.Context, key string) (frames.StateEntry, bool, error) {
	if err := h.Load(ctx); err != nil {
		return frames.StateEntry{}, false, err
	}
	e, ok := h.view[key]
	return e, ok, nil
}

// Get returns the value of key, set with Set (ok false: absent). A key
// that holds a list (Push) is an ErrInvalidArgument: read it with List.
func (h *StateHandle) Get(ctx context.Context, key string) ([]byte, bool, error) {
	e, ok, err := h.entry(ctx, key)
	if err != nil || !ok {
		return nil, false, err
	}
	if e.List {
		return nil, false, fmt.Errorf("%w: state key %q holds a list: read it with List", ErrInvalidArgument, key)
	}
	return bytes.Clone(e.Value), true, nil
}

// List returns the items of the list at key (Push), oldest first. A key
// set with Set is an ErrInvalidArgument: read it with Get.
func (h *StateHandle) List(ctx context.Context, key string) ([][]byte, bool, error) {
	e, ok, err := h.entry(ctx, key)
	if err != nil || !ok {
		return nil, false, err
	}
	if !e.List {
		return nil, false, fmt.Errorf("%w: state key %q holds a value, not a list: read it with Get", ErrInvalidArgument, key)
	}
	items := make([][]byte, len(e.Items))
	for i, it := range e.Items {
		items[i] = bytes.Clone(it)
	}
	return items, true, nil
}

// Has reports whether key is present.
func (h *StateHandle) Has(ctx context.Context, key string) (bool, error) {
	_, ok, err := h.entry(ctx, key)
	return ok, err
}

// Keys returns the keys starting with prefix ("": all), sorted.
func (h *StateHandle) Keys(ctx context.Context, prefix string) ([]string, error) {
	if err := h.Load(ctx); err != nil {
		return nil, err
	}
	var keys []string
	for k := range h.view {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys, nil
}

// Entries returns the entries of the keys starting with prefix ("": all),
// sorted by key: a value in Value, a list in Items. Version is the scope
// version that last wrote the key (0: changed here, not yet flushed);
// ExpiresAt is as read (0 for a key this handle gave a TTL: Reload to see
// it).
func (h *StateHandle) Entries(ctx context.Context, prefix string) ([]frames.StateEntry, error) {
	keys, err := h.Keys(ctx, prefix)
	if err != nil {
		return nil, err
	}
	out := make([]frames.StateEntry, len(keys))
	for i, k := range keys {
		e := h.view[k]
		e.Value = bytes.Clone(e.Value)
		if e.Items != nil {
			e.Items = slices.Clone(e.Items)
			for j := range e.Items {
				e.Items[j] = bytes.Clone(e.Items[j])
			}
		}
		out[i] = e
	}
	return out, nil
}

// Size returns the number of keys (the seed's size).
func (h *StateHandle) Size(ctx context.Context) (int, error) {
	if err := h.Load(ctx); err != nil {
		return 0, err
	}
	return len(h.view), nil
}

// A StateOption sets the expiry of the key a Set, Push or Touch writes.
// Without one a write keeps the key's own rule: a sliding TTL is pushed
// back, a fixed one kept.
type StateOption func(*messages.StateOp) error

// WithTTL makes the key expire d after this write (at least 1 ms; d must
// be positive).
func WithTTL(d time.Duration) StateOption { return ttlOption(d, false) }

// WithSlidingTTL makes the key expire d after its last write (every write,
// and Touch, pushes it back; reads do not).
func WithSlidingTTL(d time.Duration) StateOption { return ttlOption(d, true) }

// WithoutTTL removes the key's expiry.
func WithoutTTL() StateOption {
	return func(op *messages.StateOp) error { op.TTLMillis, op.Sliding = -1, false; return nil }
}

func ttlOption(d time.Duration, sliding bool) StateOption {
	return func(op *messages.StateOp) error {
		if d <= 0 {
			return fmt.Errorf("%w: state key %q: a TTL of %v (positive; WithoutTTL removes one)", ErrInvalidArgument, op.Key, d)
		}
		op.TTLMillis, op.Sliding = int64((d+time.Millisecond-1)/time.Millisecond), sliding
		return nil
	}
}

// record adds a change: to the pending changes, and to the view if loaded.
func (h *StateHandle) record(op messages.StateOp, opts []StateOption) {
	for _, o := range opts {
		if err := o(&op); err != nil && h.bad == nil {
			h.bad = err
		}
	}
	h.pending = append(h.pending, op)
	if h.loaded {
		applyStateOp(h.view, op, 0)
	}
}

// Set records that key takes value.
func (h *StateHandle) Set(key string, value []byte, opts ...StateOption) {
	h.record(messages.StateOp{Kind: frames.StateSet, FrameID: h.frame, Key: key, Value: bytes.Clone(value)}, opts)
}

// Delete records that key is removed (absent: nothing to do).
func (h *StateHandle) Delete(key string) {
	h.record(messages.StateOp{Kind: frames.StateDelete, FrameID: h.frame, Key: key}, nil)
}

// Clear records that every key of the level is removed. It is never
// conditional, IfUnchanged or not.
func (h *StateHandle) Clear() { h.ClearPrefix("") }

// ClearPrefix records that the keys starting with prefix are removed.
func (h *StateHandle) ClearPrefix(prefix string) {
	h.record(messages.StateOp{Kind: frames.StateClear, FrameID: h.frame, Prefix: prefix}, nil)
}

// Push records that value is appended to the list at key (a new list if
// absent), which then keeps its last keep items (0: all) — the seed's
// push(key, value, maxRecords). Pushing to a key set with Set is refused
// at Flush.
func (h *StateHandle) Push(key string, value []byte, keep int, opts ...StateOption) {
	if value == nil {
		value = []byte{}
	}
	h.record(messages.StateOp{Kind: frames.StatePush, FrameID: h.frame, Key: key, Value: bytes.Clone(value), Keep: int64(keep)}, opts)
}

// Touch records a write that pushes key's sliding TTL back (or, with an
// option, sets its expiry anew). It is a durable write: refreshing a key
// on every read costs a write per read. An absent key is refused at Flush
// (ErrStateKeyNotFound).
func (h *StateHandle) Touch(key string, opts ...StateOption) {
	h.record(messages.StateOp{Kind: frames.StateTouch, FrameID: h.frame, Key: key}, opts)
}

// Discard drops the pending changes and the loaded view: the handle is as
// new, and its next read loads again. After a Flush whose outcome was
// unknown, its changes may have been applied all the same.
func (h *StateHandle) Discard() {
	h.pending, h.bad, h.doubt, h.doubtN = nil, nil, nil, 0
	h.loaded, h.base, h.view = false, nil, nil
}

// A FlushOption changes how Flush sends the pending changes.
type FlushOption func(*flushOptions)

type flushOptions struct {
	ifUnchanged bool
	requestID   string
}

// IfUnchanged makes the Flush conditional (compare-and-set): every key the
// changes set, delete, push or touch must still be at the version this
// handle read (absent if it was absent), else nothing applies and Flush
// fails with ErrStateConflict naming the key and both versions. It needs a
// loaded handle: a Flush of one never read is refused (ErrInvalidArgument).
// The first change of each key carries the condition; a key a Clear
// earlier in the same Flush removed carries none.
func IfUnchanged() FlushOption { return func(o *flushOptions) { o.ifUnchanged = true } }

// WithRequestID gives the Flush's request this id instead of a fresh one:
// a program that replays its steps after a crash (examples/agent) names
// each step's changes, and the server answers a Flush it already applied
// from its log, applying nothing twice — provided the changes are the
// same. The handle leaves a replayed Flush's changes out of its view when
// the view already holds them (loaded after the original, or flushed by
// this handle).
func WithRequestID(id string) FlushOption { return func(o *flushOptions) { o.requestID = id } }

// Flush sends the pending changes as one ChangeState, all or none. On
// success they are the view's, at the reply's version; on an error the
// handle is as it was (nothing applied to the view, the changes still
// pending) — see StateHandle for an outcome unknown.
func (h *StateHandle) Flush(ctx context.Context, opts ...FlushOption) error {
	var o flushOptions
	for _, f := range opts {
		f(&o)
	}
	if h.doubt != nil {
		if err := h.send(ctx, h.doubt, h.doubtN); err != nil {
			return err
		}
	}
	if len(h.pending) == 0 {
		return nil
	}
	if h.bad != nil {
		return h.bad
	}
	if o.ifUnchanged && !h.loaded {
		return fmt.Errorf("%w: a Flush IfUnchanged of state that was never read (load it first)", ErrInvalidArgument)
	}
	req := &messages.ChangeState{Header: messages.Header{Scope: h.scope, RequestID: o.requestID}, Ops: slices.Clone(h.pending)}
	if o.ifUnchanged {
		h.condition(req.Ops)
	}
	return h.send(ctx, req, len(h.pending))
}

// condition makes the first change of each key conditional on the version
// read (0: absent), unless a Clear before it in the request removed it.
func (h *StateHandle) condition(ops []messages.StateOp) {
	seen := map[string]bool{}
	var cleared []string
	for i := range ops {
		op := &ops[i]
		if op.Kind == frames.StateClear {
			cleared = append(cleared, op.Prefix)
			continue
		}
		if seen[op.Key] || slices.ContainsFunc(cleared, func(p string) bool { return strings.HasPrefix(op.Key, p) }) {
			continue
		}
		seen[op.Key] = true
		v := h.base[op.Key].Version
		op.IfVersion = &v
	}
}

// send sends req, which covers pending[:n], and commits it on success.
func (h *StateHandle) send(ctx context.Context, req *messages.ChangeState, n int) error {
	r, err := h.sc.ChangeState(ctx, req)
	if err != nil {
		if outcomeUnknown(err) {
			h.doubt, h.doubtN = req, n // the Client wrote its request id into req
		} else {
			h.doubt, h.doubtN = nil, 0
		}
		return err
	}
	h.doubt, h.doubtN, h.version = nil, 0, r.Version
	done := h.pending[:n]
	h.pending = slices.Clone(h.pending[n:])
	if h.loaded {
		if r.Version > h.seen { // else a replay of changes the view holds
			for _, op := range done {
				applyStateOp(h.base, op, r.Version)
			}
			h.seen = r.Version
		}
		h.rebuild()
	}
	return nil
}

// outcomeUnknown reports whether a failed request may have been applied:
// everything but the server's refusal.
func outcomeUnknown(err error) bool {
	var e *messages.Error
	if !errors.As(err, &e) {
		return true // ErrTimeout, a context's error
	}
	switch e.Code {
	case messages.CodeUnavailable, messages.CodeStoreFailed, messages.CodeInternal:
		return true
	}
	return false
}

// applyStateOp applies a change to a view as the server would (an
// operation it will refuse changes nothing); version is the key's new
// version (0: pending). A TTL set here leaves ExpiresAt 0: the server's
// time decides it.
func applyStateOp(m map[string]frames.StateEntry, op messages.StateOp, version int64) {
	cur, had := m[op.Key]
	expiry := func(next *frames.StateEntry) {
		switch {
		case op.TTLMillis > 0:
			next.ExpiresAt, next.Sliding = 0, op.Sliding
		case op.TTLMillis == -1:
			next.ExpiresAt, next.Sliding = 0, false
		case had && cur.Sliding:
			next.ExpiresAt, next.Sliding = 0, true
		case had:
			next.ExpiresAt = cur.ExpiresAt
		}
	}
	switch op.Kind {
	case frames.StateSet:
		next := frames.StateEntry{Key: op.Key, Value: op.Value, Version: version}
		expiry(&next)
		m[op.Key] = next
	case frames.StateDelete:
		delete(m, op.Key)
	case frames.StateClear:
		for k := range m {
			if strings.HasPrefix(k, op.Prefix) {
				delete(m, k)
			}
		}
	case frames.StatePush:
		if had && !cur.List {
			return
		}
		items := append(cur.Items[:len(cur.Items):len(cur.Items)], op.Value)
		if op.Keep > 0 && int64(len(items)) > op.Keep {
			items = items[int64(len(items))-op.Keep:]
		}
		next := frames.StateEntry{Key: op.Key, Items: items, List: true, Version: version}
		expiry(&next)
		m[op.Key] = next
	case frames.StateTouch:
		if !had {
			return
		}
		next := cur
		next.Version = version
		expiry(&next)
		m[op.Key] = next
	}
}

// History walks key's past changes, newest first, a StateHistory page at
// a time, as far back as the scope's retention keeps its log (a page
// examines at most 100,000 events; the walk goes on past such a page by
// itself). It reads the server's log: changes not flushed are not in it.
// It stops at the first error, which it yields.
func (h *StateHandle) History(ctx context.Context, key string) iter.Seq2[messages.StateChangeRecord, error] {
	return func(yield func(messages.StateChangeRecord, error) bool) {
		var before int64
		for {
			r, err := h.sc.StateHistory(ctx, &messages.StateHistory{Header: messages.Header{Scope: h.scope}, FrameID: h.frame,
				Key: key, Before: before, Limit: historyPage})
			if err != nil {
				yield(messages.StateChangeRecord{}, err)
				return
			}
			for _, c := range r.Changes {
				if !yield(c, nil) {
					return
				}
			}
			if r.Next == 0 {
				return
			}
			before = r.Next
		}
	}
}
