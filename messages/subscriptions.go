package messages

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
)

// Subscriptions (DESIGN §11) read the store's global sequence: every event
// of every scope has a position (its Seq, 1..n, in commit order). They are
// pull-based: a subscriber long-polls ReadEvents from a position and gets
// the matching events after it, durable, in order; nothing is buffered for
// it on the server, so a slow subscriber only lags and catches up from the
// log. A durable named subscription (Subscribe) stores its acknowledged
// position (AckEvents) so that it resumes there after a restart of either
// side: delivery is at least once.
//
// A position is always "the next sequence to read": a subscription at
// position p has processed every matching event below p. In a node-local
// cluster each member has its own sequence; the Client keeps one position
// per member.

// Subscription limits.
const (
	// MaxSubscriptionName bounds a durable subscription's name (1..128).
	MaxSubscriptionName = 128
	// DefaultReadEvents and MaxReadEvents bound ReadEvents.Max.
	DefaultReadEvents = 256
	MaxReadEvents     = 4096
	// DefaultReadBytes and MaxReadBytes bound ReadEvents.MaxBytes, the
	// encoded size of the events of one reply: under the 1 MiB wire limit.
	DefaultReadBytes = 512 << 10
	MaxReadBytes     = 900 << 10
	// MaxReadWait bounds ReadEvents.Wait, a long poll's wait.
	MaxReadWait = 30 * time.Second
	// MaxFilterKinds bounds EventFilter.Kinds.
	MaxFilterKinds = 32
)

// CodePositionRemoved: the position read from is at or below what
// retention removed from the filter's scopes; the message names the
// oldest position still available (Error.Version holds it too).
const CodePositionRemoved Code = "position_removed"

// CodeSubscriptionNotFound: ReadEvents or AckEvents named a durable
// subscription that does not exist.
const CodeSubscriptionNotFound Code = "subscription_not_found"

// EventFilter selects events: of the scope Scope exactly, or of the
// scopes whose names start with Prefix (at most one of the two; neither:
// every scope), of the event types Kinds (names like "frame.popped";
// empty: every type).
type EventFilter struct {
	Scope  string   `msgpack:"sc,omitempty"`
	Prefix string   `msgpack:"px,omitempty"`
	Kinds  []string `msgpack:"k,omitempty"`
}

// Check validates the filter.
func (f *EventFilter) Check() *Error {
	if f.Scope != "" && f.Prefix != "" {
		return Errorf(CodeInvalidArgument, "a filter takes a scope or a prefix, not both (scope %q, prefix %q)", f.Scope, f.Prefix)
	}
	for _, s := range []string{f.Scope, f.Prefix} {
		if len(s) > 1024 || !utf8.ValidString(s) {
			return Errorf(CodeInvalidArgument, "filter scope or prefix must be valid UTF-8 of at most 1024 bytes")
		}
	}
	if len(f.Kinds) > MaxFilterKinds {
		return Errorf(CodeInvalidArgument, "a filter names at most %d kinds, got %d", MaxFilterKinds, len(f.Kinds))
	}
	for _, k := range f.Kinds {
		if _, err := frames.NewEvent(k); err != nil {
			return Errorf(CodeInvalidArgument, "filter kind %q is not an event type (e.g. %q, %q)", trunc(k), frames.TypeFramePopped, frames.TypeFrameSuspended)
		}
	}
	return nil
}

// Matches reports whether a record of stream (a scope) and type typ passes
// the filter.
func (f *EventFilter) Matches(stream, typ string) bool {
	switch {
	case f.Scope != "" && stream != f.Scope:
		return false
	case f.Prefix != "" && !strings.HasPrefix(stream, f.Prefix):
		return false
	}
	if len(f.Kinds) == 0 {
		return true
	}
	for _, k := range f.Kinds {
		if k == typ {
			return true
		}
	}
	return false
}

// Equal reports whether two filters select the same events (kinds in any
// order, repeats ignored).
func (f EventFilter) Equal(g EventFilter) bool {
	if f.Scope != g.Scope || f.Prefix != g.Prefix {
		return false
	}
	return subset(f.Kinds, g.Kinds) && subset(g.Kinds, f.Kinds)
}

func subset(a, b []string) bool {
	for _, k := range a {
		if !slices.Contains(b, k) {
			return false
		}
	}
	return true
}

// String describes the filter.
func (f EventFilter) String() string {
	var b strings.Builder
	switch {
	case f.Scope != "":
		fmt.Fprintf(&b, "scope %q", f.Scope)
	case f.Prefix != "":
		fmt.Fprintf(&b, "prefix %q", f.Prefix)
	default:
		b.WriteString("every scope")
	}
	if len(f.Kinds) > 0 {
		fmt.Fprintf(&b, ", kinds %s", strings.Join(f.Kinds, ","))
	}
	return b.String()
}

// CheckSubscriptionName validates a durable subscription's name.
func CheckSubscriptionName(name string) *Error {
	if name == "" || len(name) > MaxSubscriptionName || !utf8.ValidString(name) {
		return Errorf(CodeInvalidArgument, "a subscription name is 1..%d bytes of UTF-8, got %d bytes", MaxSubscriptionName, len(name))
	}
	return nil
}

func trunc(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// Subscribe creates the durable subscription Name, or opens it when it
// exists. A new one starts at From (a position: the next sequence to
// deliver; 0 and not FromNow: the beginning of the log) or, with FromNow,
// after the last event durable now. An existing one keeps its position;
// asking for another filter is refused (invalid_argument) unless Reset,
// which replaces its filter and its position as for a new one.
type Subscribe struct {
	Header  `msgpack:",inline"`
	Name    string      `msgpack:"n"`
	Filter  EventFilter `msgpack:"fl"`
	From    uint64      `msgpack:"fr,omitempty"`
	FromNow bool        `msgpack:"now,omitempty"`
	Reset   bool        `msgpack:"rs,omitempty"`
}

// SubscribeReply is the subscription as stored: its filter and its
// acknowledged position (the next sequence to deliver). Created says it
// was created (or reset) by this request; Head is the store's last
// durable sequence.
type SubscribeReply struct {
	Result   `msgpack:",inline"`
	Name     string      `msgpack:"n"`
	Filter   EventFilter `msgpack:"fl"`
	Position uint64      `msgpack:"p"`
	Created  bool        `msgpack:"cr,omitempty"`
	Head     uint64      `msgpack:"hd"`
}

// ReadEvents reads the events after a position: of the durable
// subscription Name (from From, or from its acknowledged position when
// From is 0), or of an ad-hoc Filter from From (0: the beginning). It
// returns at most Max events (0: DefaultReadEvents; at most MaxReadEvents)
// of at most MaxBytes (0: DefaultReadBytes; at most MaxReadBytes; one
// event is always returned when there is one). With Wait, a read that
// finds nothing waits up to Wait (at most MaxReadWait) for a matching
// event to be committed (a long poll) before it answers with none. A
// position at or below what retention removed from the filter's scopes
// is position_removed, naming the oldest position available.
type ReadEvents struct {
	Header   `msgpack:",inline"`
	Name     string        `msgpack:"n,omitempty"`
	Filter   *EventFilter  `msgpack:"fl,omitempty"`
	From     uint64        `msgpack:"fr,omitempty"`
	Max      int           `msgpack:"mx,omitempty"`
	MaxBytes int           `msgpack:"mb,omitempty"`
	Wait     time.Duration `msgpack:"w,omitempty"`
	// FromNow reads nothing: the reply's Next is the position after the
	// last durable event, where a subscription from now starts.
	FromNow bool `msgpack:"now,omitempty"`
}

// SubscribedEvent is one event as a subscriber receives it: its position
// (Seq), scope and version, type, frame and time (Meta), and Data, the
// stored msgpack payload of its frames.Event (Decode). In process, the
// subscribers of one filter may share Data's bytes: treat them as
// read-only.
type SubscribedEvent struct {
	Seq     uint64 `msgpack:"q"`
	Scope   string `msgpack:"s"`
	Version int64  `msgpack:"v"`
	Type    string `msgpack:"t"`
	Frame   string `msgpack:"f,omitempty"`
	At      int64  `msgpack:"at"`
	Data    []byte `msgpack:"d"`
}

// Decode decodes the event's payload into its frames.Event.
func (e *SubscribedEvent) Decode() (frames.Event, error) {
	return eventstore.DecodeFrameEvent(eventstore.Record{Stream: e.Scope, Version: e.Version, Seq: e.Seq, Type: e.Type, Data: e.Data})
}

// ReadEventsReply carries the events read, in order, and Next: the
// position to read from next (past everything the read scanned, matched
// or not). Head is the store's last durable sequence when the read ended.
type ReadEventsReply struct {
	Result `msgpack:",inline"`
	Events []SubscribedEvent `msgpack:"ev,omitempty"`
	Next   uint64            `msgpack:"nx"`
	Head   uint64            `msgpack:"hd"`
}

// AckEvents records that the durable subscription Name processed every
// matching event below Position (Position is the next one it needs). Acks
// are monotonic: one below the stored position changes nothing. The
// position is durable (written to the store's tables) when the reply
// comes; a lost ack only means the events after the previous one are
// delivered again.
type AckEvents struct {
	Header   `msgpack:",inline"`
	Name     string `msgpack:"n"`
	Position uint64 `msgpack:"p"`
}

// AckEventsReply is the stored position after the ack.
type AckEventsReply struct {
	Result   `msgpack:",inline"`
	Position uint64 `msgpack:"p"`
}

// Unsubscribe deletes the durable subscription Name (Existed says whether
// there was one).
type Unsubscribe struct {
	Header `msgpack:",inline"`
	Name   string `msgpack:"n"`
}

// UnsubscribeReply answers Unsubscribe.
type UnsubscribeReply struct {
	Result  `msgpack:",inline"`
	Existed bool `msgpack:"ex,omitempty"`
}

// Op returns OpSubscribe.
func (*Subscribe) Op() Op { return OpSubscribe }

// Op returns OpReadEvents.
func (*ReadEvents) Op() Op { return OpReadEvents }

// Op returns OpAckEvents.
func (*AckEvents) Op() Op { return OpAckEvents }

// Op returns OpUnsubscribe.
func (*Unsubscribe) Op() Op { return OpUnsubscribe }
