package messages

import "github.com/stateindex/stateindex/frames"

// Scope state: durable key-value state at two levels, the scope's own and a
// frame's (frames/kv.go has the rules). Values are bytes; the Go Client
// adds typed helpers (actors.StateHandle).

// StateOp is one operation of a ChangeState. Kind is "set", "delete",
// "clear", "push" or "touch". FrameID names the level: "" the scope's own
// state (it lives until deleted, expired or the scope is destroyed), else a
// live frame's (it ends with the frame, and moves to its continuation).
//
//   - set: Key takes Value.
//   - delete: Key is removed (absent: nothing to do).
//   - clear: every key of the level starting with Prefix ("" all) is removed.
//   - push: Value is appended to Key's list (a new list if absent), which
//     then keeps its last Keep items (0: all).
//   - touch: Key's TTL is pushed back (a sliding one by its TTL, or TTLMillis
//     set anew): a write, so refreshing a key on reads costs a durable
//     write per read — the reads themselves never write.
//
// IfVersion makes set, delete, push and touch conditional: the key must be
// at that version (0: absent, or expired), else the whole request is
// refused state_conflict. TTLMillis > 0 (with Sliding: pushed back by every
// write to the key) sets the key's expiry; 0 keeps the key's own rule (a
// sliding TTL is pushed back, a fixed one kept); -1 removes it.
type StateOp struct {
	Kind      string `msgpack:"k"`
	FrameID   string `msgpack:"f,omitempty"`
	Key       string `msgpack:"key,omitempty"`
	Prefix    string `msgpack:"px,omitempty"`
	Value     []byte `msgpack:"v,omitempty"`
	IfVersion *int64 `msgpack:"iv,omitempty"`
	TTLMillis int64  `msgpack:"ttl,omitempty"`
	Sliding   bool   `msgpack:"sl,omitempty"`
	Keep      int64  `msgpack:"kp,omitempty"`
}

// ChangeState applies its operations to the scope's state in one append:
// all of them or none. At most 1,000 operations. A write that would take a
// value past the per-value limit or the scope's state past its limit is
// refused state_too_large, naming the key, the size and the limit.
type ChangeState struct {
	Header `msgpack:",inline"`
	Ops    []StateOp `msgpack:"ops"`
}

// ChangeStateReply: the keys written are at Version (the scope's version
// after the change); Expired counts the keys of the touched levels that had
// expired and were removed with it.
type ChangeStateReply struct {
	Result  `msgpack:",inline"`
	Expired int `msgpack:"ex,omitempty"`
}

// GetState reads keys of a level (FrameID "": the scope's own). Keys that
// are absent or expired are listed in the reply's Missing.
type GetState struct {
	Header  `msgpack:",inline"`
	FrameID string   `msgpack:"f,omitempty"`
	Keys    []string `msgpack:"ks"`
}

// GetStateReply carries the entries found, in the order asked, and the
// keys missing; Now is the server time the read was made at (expiry).
type GetStateReply struct {
	Result  `msgpack:",inline"`
	Entries []frames.StateEntry `msgpack:"es,omitempty"`
	Missing []string            `msgpack:"mi,omitempty"`
	Now     int64               `msgpack:"now"`
}

// RangeState lists a level's live keys starting with Prefix, sorted, after
// the key After (a cursor: the reply's Next), Limit of them (0: 100; at
// most 1,000).
type RangeState struct {
	Header  `msgpack:",inline"`
	FrameID string `msgpack:"f,omitempty"`
	Prefix  string `msgpack:"px,omitempty"`
	After   string `msgpack:"af,omitempty"`
	Limit   int    `msgpack:"n,omitempty"`
}

// RangeStateReply is a page of entries, Next the cursor of the next page
// ("" at the end), and Size the level's size (its live keys and their
// bytes) with the whole scope's total and limit.
type RangeStateReply struct {
	Result  `msgpack:",inline"`
	Entries []frames.StateEntry `msgpack:"es,omitempty"`
	Next    string              `msgpack:"nx,omitempty"`
	Size    frames.StateSize    `msgpack:"sz"`
	Now     int64               `msgpack:"now"`
}

// StateHistory reads a key's past values from the scope's log, newest
// first, as far back as retention keeps them: the changes to the key
// (sets, pushes, touches, deletes, clears and expiries) at versions below
// Before (0: from the newest), Limit of them (0: 20; at most 1,000). A page
// examines at most 100,000 events: Next, when not 0, is where to go on.
type StateHistory struct {
	Header  `msgpack:",inline"`
	FrameID string `msgpack:"f,omitempty"`
	Key     string `msgpack:"key"`
	Before  int64  `msgpack:"bf,omitempty"`
	Limit   int    `msgpack:"n,omitempty"`
}

// StateChangeRecord is one past change of a key: the scope version and
// time of the event, the operation ("set", "push", "touch", "delete",
// "clear", "expired") and the entry it left (for a push, the pushed item
// alone in Items).
type StateChangeRecord struct {
	Version int64             `msgpack:"ver"`
	At      int64             `msgpack:"at"`
	Kind    string            `msgpack:"k"`
	Entry   frames.StateEntry `msgpack:"e"`
}

// StateHistoryReply lists the changes, newest first. Next is the version to
// pass as Before for the next page (0: none left); RemovedThrough is where
// the retained log starts (the history goes no further back).
type StateHistoryReply struct {
	Result         `msgpack:",inline"`
	Changes        []StateChangeRecord `msgpack:"ch,omitempty"`
	Next           int64               `msgpack:"nx,omitempty"`
	RemovedThrough int64               `msgpack:"rt,omitempty"`
}

// ExpireState removes the scope's expired keys from its state (the
// server's background pass sends it; a request that finds none writes
// nothing). Reads never show an expired key in the meantime.
type ExpireState struct {
	Header `msgpack:",inline"`
}

// ExpireStateReply says how many keys it removed.
type ExpireStateReply struct {
	Result  `msgpack:",inline"`
	Removed int `msgpack:"rm"`
}

// Op returns OpChangeState.
func (*ChangeState) Op() Op { return OpChangeState }

// Op returns OpGetState.
func (*GetState) Op() Op { return OpGetState }

// Op returns OpRangeState.
func (*RangeState) Op() Op { return OpRangeState }

// Op returns OpStateHistory.
func (*StateHistory) Op() Op { return OpStateHistory }

// Op returns OpExpireState.
func (*ExpireState) Op() Op { return OpExpireState }

// Mut returns the header of a mutating request.
func (r *ChangeState) Mut() *Header { return &r.Header }

// Mut returns the header of a mutating request.
func (r *ExpireState) Mut() *Header { return &r.Header }
