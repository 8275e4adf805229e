package wire

import (
	"fmt"
	"reflect"

	"github.com/asynkron/protoactor-go/remote"
	"github.com/stateindex/stateindex/eventstore"

	"github.com/stateindex/stateindex/messages"
)

// DefaultMaxBytes bounds the encoded size of one request or reply (DESIGN §6:
// 1 MiB), well under gRPC's 4 MiB default message limit.
const DefaultMaxBytes = 1 << 20

// FailureType is the type name of a Failure.
const FailureType = "Failure"

// Failure is the reply that carries only an error: the answer to a request
// that could not be decoded (whose reply type is unknown), and the wire form
// of any error-only reply whose type is not registered.
type Failure struct {
	messages.Result `msgpack:",inline"`
}

// Message is a StateIndex request or reply on its way across remoting: the
// in-process side of an Envelope. Build one with Encode; Proto.Actor builds
// the receiving side with Envelope.Deserialize.
type Message struct {
	// Value is the request or reply (a pointer to a messages struct, or a
	// *Failure); nil when Err is set.
	Value any
	// Type is the registered name of Value's type, or the name the
	// undecodable envelope carried.
	Type string
	// Err is set when the received envelope could not be decoded: an
	// unknown type name or a corrupt payload (code bad_request).
	Err *messages.Error
	env *Envelope
}

var (
	_ remote.RootSerializable = (*Message)(nil)
	_ remote.RootSerialized   = (*Envelope)(nil)
)

// Serialize returns the envelope Encode prepared. It fails only for a
// Message not built by Encode or Deserialize, which is a programming error.
func (m *Message) Serialize() (remote.RootSerialized, error) {
	if m.env == nil {
		return nil, fmt.Errorf("wire: %s message was not built by wire.Encode", m.Type)
	}
	return m.env, nil
}

// Size is the encoded payload's length in bytes.
func (m *Message) Size() int {
	if m.env == nil {
		return 0
	}
	return len(m.env.Payload)
}

// Trace context limits: a traceparent is 55 characters in its version 00
// (W3C Trace Context), and a tracestate should be propagated up to 512.
// Longer values are not carried (a receiver reads them as absent).
const (
	maxTraceParent = 128
	maxTraceState  = 512
)

// SetTraceContext makes the message carry the W3C trace context of its
// caller (a request's traceparent and tracestate headers), outside the
// payload and its size limit; a value over its bound is not carried. Call
// it before the message is sent.
func (m *Message) SetTraceContext(traceparent, tracestate string) {
	if m.env == nil || len(traceparent) > maxTraceParent {
		return
	}
	if len(tracestate) > maxTraceState || traceparent == "" {
		tracestate = ""
	}
	m.env.Traceparent, m.env.Tracestate = traceparent, tracestate
}

// TraceContext returns the W3C trace context the message carries ("" when
// none: an envelope of an earlier release, or a caller outside any trace).
func (m *Message) TraceContext() (traceparent, tracestate string) {
	if m.env == nil || m.env.Traceparent == "" || len(m.env.Traceparent) > maxTraceParent {
		return "", ""
	}
	if len(m.env.Tracestate) > maxTraceState {
		return m.env.Traceparent, ""
	}
	return m.env.Traceparent, m.env.Tracestate
}

// IsRequest reports whether the message decoded to a request (or names a
// request type, when it did not decode).
func (m *Message) IsRequest() bool {
	if m.Value != nil {
		_, ok := m.Value.(messages.Request)
		return ok
	}
	t, ok := byName[m.Type]
	return ok && t.request
}

// Deserialize decodes the envelope. It never returns an error: Proto.Actor
// would close the whole connection. A failure is reported in Message.Err.
func (e *Envelope) Deserialize() (remote.RootSerializable, error) {
	return Decode(e), nil
}

// Encode prepares v (a request or reply of package messages) for remoting,
// checking that it is a registered type and that its encoding is at most
// limit bytes (limit <= 0 means DefaultMaxBytes). Its error is a
// *messages.Error: bad_request for a value that cannot travel, too_large
// for one over the limit.
func Encode(v any, limit int) (*Message, error) {
	if limit <= 0 {
		limit = DefaultMaxBytes
	}
	name, ok := byType[reflect.TypeOf(v)]
	if !ok {
		r, isReply := v.(messages.Reply)
		if !isReply || r == nil || r.Failure() == nil {
			return nil, messages.Errorf(messages.CodeBadRequest, "%T cannot travel over remoting: not a StateIndex message", v)
		}
		// An error-only reply of a type unknown here (for example the
		// server's answer to something it could not read) keeps its error.
		v, name = &Failure{Result: messages.Result{Err: r.Failure()}}, FailureType
	}
	payload, err := marshalWire(name, v)
	if err != nil {
		return nil, messages.Errorf(messages.CodeBadRequest, "encoding %s: %v", name, err)
	}
	if len(payload) > limit {
		kind := "reply"
		if byName[name].request {
			kind = "request"
		}
		return nil, messages.Errorf(messages.CodeTooLarge, "%s %s is %d bytes encoded, over the %d-byte limit of a remote message", kind, name, len(payload), limit)
	}
	return &Message{Value: v, Type: name, env: &Envelope{Type: name, Payload: payload}}, nil
}

// Decode turns an envelope into a Message; it never fails and never
// panics. An unknown type or a corrupt payload gives a Message whose Err
// is a bad_request error naming the problem.
func Decode(e *Envelope) *Message {
	if e == nil {
		return &Message{Err: messages.Errorf(messages.CodeBadRequest, "empty envelope")}
	}
	m := &Message{Type: e.Type, env: e}
	t, ok := byName[e.Type]
	if !ok {
		m.Err = messages.Errorf(messages.CodeBadRequest, "unknown message type %q (is the sender newer than this StateIndex?)", e.Type)
		return m
	}
	v, err := unmarshalWire(e.Type, e.Payload, t.make)
	if err != nil {
		m.Err = messages.Errorf(messages.CodeBadRequest, "corrupt %s payload (%d bytes): %v", e.Type, len(e.Payload), err)
		return m
	}
	m.Value = v
	return m
}

// Names lists the registered type names, requests first.
func Names() []string {
	return append([]string(nil), order...)
}

// New returns a zero value of the registered type name (a pointer), or
// false for an unknown name.
func New(name string) (any, bool) {
	t, ok := byName[name]
	if !ok {
		return nil, false
	}
	return t.make(), true
}

type entry struct {
	make    func() any
	request bool
}

var (
	byName = map[string]entry{}
	byType = map[reflect.Type]string{}
	order  []string
)

func register(name string, make func() any) {
	v := make()
	_, isRequest := v.(messages.Request)
	_, isReply := v.(messages.Reply)
	_, isNote := v.(messages.Notification)
	if !isRequest && !isReply && !isNote {
		panic(fmt.Sprintf("wire: %T is neither a request, a reply nor a notification", v))
	}
	if _, dup := byName[name]; dup {
		panic(fmt.Sprintf("wire: type name %q registered twice", name))
	}
	byName[name] = entry{make: make, request: isRequest}
	byType[reflect.TypeOf(v)] = name
	order = append(order, name)
}

// init registers every operation of the protocol table (messages.Operations)
// under its wire names — requests first, then replies — and Failure. The
// names are wire values: the table never renames one.
func init() {
	ops := messages.Operations()
	for _, op := range ops {
		register(op.Name, func() any { return op.NewRequest() })
	}
	for _, op := range ops {
		register(op.ReplyName, func() any { return op.NewReply() })
	}
	register(FailureType, func() any { return new(Failure) })
	// Notifications a server sends on its own (hooks) and their answers.
	register((*messages.HookNotification)(nil).NotificationName(), func() any { return new(messages.HookNotification) })
	register((*messages.HookAck)(nil).NotificationName(), func() any { return new(messages.HookAck) })
}

// marshal and unmarshal are the store's msgpack codec: compact integers,
// sorted map keys, allocation limits on, panics turned into errors, and a
// value must span all of its bytes.
var (
	marshal   = eventstore.Marshal
	unmarshal = eventstore.Unmarshal
)

// ReplyTo returns an empty reply of the type that answers the request type
// named name, or a *Failure when name is not a known request type. The
// answer to an undecodable request uses it, so that a caller waiting for a
// typed reply still gets one.
func ReplyTo(name string) messages.Reply {
	if t, ok := byName[name]; ok && t.request {
		if r := messages.ReplyFor(t.make().(messages.Request)); r != nil {
			return r
		}
	}
	return &Failure{}
}
