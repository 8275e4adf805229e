package messages

import "github.com/stateindex/stateindex/budget"

// ListFrames lists frames across scopes from the registry, an index the
// server maintains from the log (not a scan of it): newest first (by
// creation time, then scope, then frame id), one page of at most Limit
// entries (0: 100; at most 1000), the next page from Cursor (the previous
// reply's NextCursor, opaque). It is a Global operation: its Header names
// no scope.
//
// Filters combine (all must hold): Statuses (any of them; names as
// frames.Status prints them: active, waiting, suspended, completed,
// failed, cancelled, continued), GoalPrefix, ScopePrefix, Scope (exact),
// ParentID and ChainRoot (both need Scope: frame ids are a scope's),
// CreatedAfter <= created < CreatedBefore and FinishedAfter <= finished <
// FinishedBefore (unix ns, 0: unbounded; a finished bound leaves live
// frames out).
//
// MinPosition asks for an answer that reflects at least that global
// position (a write's Result.Position: read-your-writes): the request is
// held until the index reaches it, for at most WaitMillis (the Client
// sets it from the context's deadline), then fails unavailable naming both
// positions.
//
// A page examines a bounded number of index entries: a page may hold fewer
// than Limit entries and still have a NextCursor; "" means the end.
type ListFrames struct {
	Header         `msgpack:",inline"`
	Statuses       []string `msgpack:"sts,omitempty"`
	GoalPrefix     string   `msgpack:"gp,omitempty"`
	ScopePrefix    string   `msgpack:"spx,omitempty"`
	InScope        string   `msgpack:"isc,omitempty"`
	ParentID       string   `msgpack:"pa,omitempty"`
	ChainRoot      string   `msgpack:"cr,omitempty"`
	CreatedAfter   int64    `msgpack:"ca,omitempty"`
	CreatedBefore  int64    `msgpack:"cb,omitempty"`
	FinishedAfter  int64    `msgpack:"fa,omitempty"`
	FinishedBefore int64    `msgpack:"fb,omitempty"`
	Limit          int      `msgpack:"lm,omitempty"`
	Cursor         string   `msgpack:"cu,omitempty"`
	MinPosition    uint64   `msgpack:"mp,omitempty"`
	WaitMillis     int64    `msgpack:"wm,omitempty"`
}

// FrameEntry is what the registry records about a frame.
type FrameEntry struct {
	Scope         string `msgpack:"sc"`
	FrameID       string `msgpack:"f"`
	ParentID      string `msgpack:"pa,omitempty"`
	Goal          string `msgpack:"g"`
	Status        string `msgpack:"st"`
	Depth         int64  `msgpack:"d,omitempty"`
	ChainRoot     string `msgpack:"cr,omitempty"`
	ContinuedFrom string `msgpack:"cf,omitempty"`
	ContinuedTo   string `msgpack:"cto,omitempty"`
	CreatedAt     int64  `msgpack:"at"`
	FinishedAt    int64  `msgpack:"fi,omitempty"`
	// PushVersion is the scope version of the frame's frame.pushed.
	PushVersion int64 `msgpack:"pv"`
	// TokensUsed and Cost are what the frame used, recorded when it ended
	// (0 while it is live).
	TokensUsed int64       `msgpack:"tu,omitempty"`
	Cost       budget.Cost `msgpack:"co,omitempty"`
	// SuspendReason is why a suspended frame is suspended.
	SuspendReason string `msgpack:"sr,omitempty"`
	// Member is the cluster member that holds the frame (set by a cluster
	// Client; "" otherwise).
	Member string `msgpack:"mb,omitempty"`
}

// ListFramesReply is one page. Position is the global position the answer
// reflects (at least); a cluster Client's merged reply has Positions, one
// per member, instead.
type ListFramesReply struct {
	Result     `msgpack:",inline"`
	Frames     []FrameEntry      `msgpack:"fs,omitempty"`
	NextCursor string            `msgpack:"nc,omitempty"`
	Position   uint64            `msgpack:"ip"`
	Positions  map[string]uint64 `msgpack:"ips,omitempty"`
}

// Op returns OpListFrames.
func (*ListFrames) Op() Op { return OpListFrames }
