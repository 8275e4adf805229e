package messages

import "github.com/stateindex/stateindex/frames"

// Reading a scope as it stands, and its history, without recording
// anything: what an inspector (the web inspector of `stateindex serve
// --http`, `stateindex inspect --server`) shows. ResumeActor reports the
// same recovery state but appends actor.resumed: a tool that only looks
// must not.

// Bounds of GetScope and ReadScope pages.
const (
	// DefaultScopeFrames and MaxScopeFrames bound GetScope.Limit.
	DefaultScopeFrames = 200
	MaxScopeFrames     = 1000
	// MaxScopePending bounds the pending work and abandoned calls a
	// GetScope reply lists (PendingTotal and AbandonedTotal count them all).
	MaxScopePending = 1000
	// DefaultScopeEvents and MaxScopeEvents bound ReadScope.Limit;
	// MaxScopeEventBytes bounds the events' encoded size in one reply
	// (one event is always returned when there is one).
	DefaultScopeEvents = 100
	MaxScopeEvents     = 1000
	MaxScopeEventBytes = 512 << 10
	// ScopeEventsExamined bounds the events one ReadScope page reads when
	// it filters (by frame or reason): past it the page ends early with
	// Next set.
	ScopeEventsExamined = 100_000
)

// GetScope reads what a scope holds now: its live frames (a page of them,
// in push order, after the live frame pushed at version After), the top
// of its stack, its pending work — frames waiting on subcalls, suspended
// frames, tool calls in doubt and tool calls abandoned when their frame
// finished — as ResumeActor reports it, and counts. It is a read: it
// appends nothing. A scope that never had an event has Version 0.
type GetScope struct {
	Header `msgpack:",inline"`
	// After is a live frame's push version (ScopeFrame.PushVersion): the
	// page starts after it (0: from the first live frame).
	After int64 `msgpack:"af,omitempty"`
	// Limit is the live frames of a page (0: DefaultScopeFrames; at most
	// MaxScopeFrames).
	Limit int `msgpack:"n,omitempty"`
}

// ScopeFrame is a live frame as GetScope lists it: its summary (no
// context content) and where it sits in a continuation chain.
type ScopeFrame struct {
	FrameSummary `msgpack:",inline"`
	PushVersion  int64 `msgpack:"pv"`
	// ContextWindow is the frame's window (0: the server's default).
	ContextWindow int64  `msgpack:"cw,omitempty"`
	ChainRoot     string `msgpack:"cr,omitempty"`
	ContinuedFrom string `msgpack:"cf,omitempty"`
	// Reservation is the spend reservation the frame was pushed with;
	// Outstanding what its own reservations hold.
	Reservation string `msgpack:"rv,omitempty"`
	Outstanding int64  `msgpack:"so,omitempty"`
	// ToolCalls counts the tool calls it journalled.
	ToolCalls int `msgpack:"tc,omitempty"`
}

// GetScopeReply is the scope as of Version. Next, when not 0, is the
// After of the next page of live frames.
type GetScopeReply struct {
	Result `msgpack:",inline"`
	// Top is the top of the stack ("" when no frame is active).
	Top    string       `msgpack:"top,omitempty"`
	Frames []ScopeFrame `msgpack:"fs,omitempty"`
	Next   int64        `msgpack:"nx,omitempty"`
	// Live counts the live frames, Finished the frames that finished.
	Live     int   `msgpack:"lv"`
	Finished int64 `msgpack:"fn"`
	// Pending is the scope's pending work in push order (the first
	// MaxScopePending of PendingTotal); Abandoned the tool calls finished
	// frames left open (the first MaxScopePending of AbandonedTotal).
	Pending        []frames.PendingWork   `msgpack:"pw,omitempty"`
	PendingTotal   int                    `msgpack:"pt,omitempty"`
	Abandoned      []frames.AbandonedCall `msgpack:"ab,omitempty"`
	AbandonedTotal int                    `msgpack:"at,omitempty"`
	// Chains counts the scope's continuation chains.
	Chains int `msgpack:"ch,omitempty"`
	// RemovedThrough is the version retention removed the history
	// through; LastAt the server time of the scope's last event; Counter
	// the token counter its handles are counted under ("" the estimate).
	RemovedThrough int64  `msgpack:"rt,omitempty"`
	LastAt         int64  `msgpack:"la,omitempty"`
	Counter        string `msgpack:"cn,omitempty"`
}

// ReadScope reads a scope's events newest first, from its own log (not the
// global sequence): those at versions below Before (0: from the newest),
// Limit of them (0: DefaultScopeEvents; at most MaxScopeEvents), at most
// MaxScopeEventBytes of them, of frame FrameID only when set, and of the
// checkpoint reasons Reasons only when set (frames.ReasonImplied for the
// events whose operation implied none). A page filtering examines at most
// ScopeEventsExamined events. It is a read: it appends nothing.
type ReadScope struct {
	Header  `msgpack:",inline"`
	Before  int64           `msgpack:"bf,omitempty"`
	Limit   int             `msgpack:"n,omitempty"`
	FrameID string          `msgpack:"f,omitempty"`
	Reasons []frames.Reason `msgpack:"rs,omitempty"`
}

// ReadScopeReply carries the events read, newest first (each as a
// subscriber receives it: Decode gives its frames.Event and Meta, its
// checkpoint reason included). Next is the Before of the next page (0:
// nothing older is left); RemovedThrough is where the retained log starts.
type ReadScopeReply struct {
	Result         `msgpack:",inline"`
	Events         []SubscribedEvent `msgpack:"ev,omitempty"`
	Next           int64             `msgpack:"nx,omitempty"`
	RemovedThrough int64             `msgpack:"rt,omitempty"`
}

// Op returns OpGetScope.
func (*GetScope) Op() Op { return OpGetScope }

// Op returns OpReadScope.
func (*ReadScope) Op() Op { return OpReadScope }
