package wire_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/stateindex/stateindex/actors/wire"
	"github.com/stateindex/stateindex/messages"
)

const (
	parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	state  = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
)

// oldEnvelope is the Envelope of the releases before the trace context:
// type (1) and payload (2) only, as a dynamic message.
func oldEnvelope(t *testing.T) *dynamicpb.Message {
	t.Helper()
	str, byt := descriptorpb.FieldDescriptorProto_TYPE_STRING, descriptorpb.FieldDescriptorProto_TYPE_BYTES
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name:    proto.String("old_wire.proto"),
		Package: proto.String("stateindex.wire.old"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("Envelope"),
			Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("type"), Number: proto.Int32(1), Type: &str, Label: &opt, JsonName: proto.String("type")},
				{Name: proto.String("payload"), Number: proto.Int32(2), Type: &byt, Label: &opt, JsonName: proto.String("payload")},
			},
		}},
	}, nil)
	require.NoError(t, err)
	return dynamicpb.NewMessage(fd.Messages().ByName("Envelope"))
}

func marshalled(t *testing.T, m *wire.Message) []byte {
	t.Helper()
	ser, err := m.Serialize()
	require.NoError(t, err)
	b, err := proto.Marshal(ser.(proto.Message))
	require.NoError(t, err)
	return b
}

func TestTraceContextTravelsAndOldPeersSkipIt(t *testing.T) {
	req := &messages.PushFrame{Header: messages.Header{Scope: "s", RequestID: "r1"}, Goal: "g"}
	m, err := wire.Encode(req, 0)
	require.NoError(t, err)
	p, s := m.TraceContext()
	assert.Empty(t, p+s, "none until set")
	m.SetTraceContext(parent, state)
	b := marshalled(t, m)

	// A peer of this release reads the trace context and the request.
	got := onTheWire(t, m)
	require.Nil(t, got.Err)
	assert.Equal(t, req, got.Value)
	p, s = got.TraceContext()
	assert.Equal(t, parent, p)
	assert.Equal(t, state, s)

	// A peer of an earlier release skips the fields it does not know.
	old := oldEnvelope(t)
	require.NoError(t, proto.Unmarshal(b, old))
	fields := old.Descriptor().Fields()
	assert.Equal(t, "PushFrame", old.Get(fields.ByName("type")).String())
	payload := old.Get(fields.ByName("payload")).Bytes()
	back := wire.Decode(&wire.Envelope{Type: "PushFrame", Payload: payload})
	require.Nil(t, back.Err)
	assert.Equal(t, req, back.Value, "the payload is untouched by the trace context")

	// An envelope of an earlier release (its own fields only) has no
	// parent here.
	require.NotEmpty(t, old.GetUnknown(), "it kept the fields it does not know")
	old.SetUnknown(nil)
	ob, err := proto.Marshal(old)
	require.NoError(t, err)
	var env wire.Envelope
	require.NoError(t, proto.Unmarshal(ob, &env))
	plain := wire.Decode(&env)
	require.Nil(t, plain.Err)
	assert.Equal(t, req, plain.Value)
	p, s = plain.TraceContext()
	assert.Empty(t, p+s, "absent: no parent")
}

func TestTraceContextOverItsBoundIsNotCarried(t *testing.T) {
	m, err := wire.Encode(&messages.GetStack{Header: messages.Header{Scope: "s"}}, 0)
	require.NoError(t, err)
	m.SetTraceContext(parent, strings.Repeat("k=v,", 200))
	p, s := onTheWire(t, m).TraceContext()
	assert.Equal(t, parent, p, "the parent travels")
	assert.Empty(t, s, "a tracestate over 512 bytes does not")

	m, err = wire.Encode(&messages.GetStack{Header: messages.Header{Scope: "s"}}, 0)
	require.NoError(t, err)
	m.SetTraceContext(strings.Repeat("0", 200), state)
	p, s = onTheWire(t, m).TraceContext()
	assert.Empty(t, p+s, "an oversized traceparent is not carried")

	// An envelope a hostile peer filled is read as no trace context.
	got := wire.Decode(&wire.Envelope{Type: "GetStack", Payload: mustPayload(t), Traceparent: strings.Repeat("x", 4096), Tracestate: state})
	p, s = got.TraceContext()
	assert.Empty(t, p+s)
}

func mustPayload(t *testing.T) []byte {
	t.Helper()
	m, err := wire.Encode(&messages.GetStack{Header: messages.Header{Scope: "s"}}, 0)
	require.NoError(t, err)
	ser, err := m.Serialize()
	require.NoError(t, err)
	return ser.(*wire.Envelope).Payload
}
