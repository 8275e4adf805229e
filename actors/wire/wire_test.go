package wire_test

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/stateindex/stateindex/actors/wire"
	"github.com/stateindex/stateindex/messages"
)

// fill sets every exported field of the value v points to to something
// non-zero, recursively, so that a field msgpack forgets shows up as a
// difference after a round trip.
func fill(v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.Pointer:
		if depth > 4 {
			return
		}
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		fill(v.Elem(), depth+1)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), depth)
			}
		}
	case reflect.Slice:
		if depth > 4 {
			return
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte{1, 2, 0xff})
			return
		}
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := 0; i < 2; i++ {
			fill(s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, depth+1)
		fill(e, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.String:
		v.SetString("v-" + v.Type().Name())
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(9)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	}
}

// onTheWire does what remoting does: protobuf-encode the envelope, decode
// it on the other side and deserialize it.
func onTheWire(t *testing.T, m *wire.Message) *wire.Message {
	t.Helper()
	ser, err := m.Serialize()
	require.NoError(t, err)
	b, err := proto.Marshal(ser.(proto.Message))
	require.NoError(t, err)
	var env wire.Envelope
	require.NoError(t, proto.Unmarshal(b, &env))
	out, err := env.Deserialize()
	require.NoError(t, err, "Deserialize never fails")
	return out.(*wire.Message)
}

func TestEveryTypeRoundTrips(t *testing.T) {
	names := wire.Names()
	require.Len(t, names, 85, "41 requests, 41 replies, Failure and 2 hook notifications")
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			v, ok := wire.New(name)
			require.True(t, ok)
			fill(reflect.ValueOf(v), 0)
			m, err := wire.Encode(v, 0)
			require.NoError(t, err)
			assert.Equal(t, name, m.Type)
			got := onTheWire(t, m)
			require.Nil(t, got.Err)
			assert.Equal(t, name, got.Type)
			assert.Equal(t, v, got.Value)
			_, isReq := v.(messages.Request)
			assert.Equal(t, isReq, got.IsRequest())
		})
	}
}

func TestEveryRequestHasARegisteredReply(t *testing.T) {
	for _, name := range wire.Names() {
		v, _ := wire.New(name)
		req, ok := v.(messages.Request)
		if !ok {
			continue
		}
		r := wire.ReplyTo(name)
		assert.Equal(t, reflect.TypeOf(messages.ReplyFor(req)), reflect.TypeOf(r), name)
		_, err := wire.Encode(r, 0)
		assert.NoError(t, err, "the reply to %s can travel", name)
	}
	assert.IsType(t, &wire.Failure{}, wire.ReplyTo("NoSuchRequest"))
	assert.IsType(t, &wire.Failure{}, wire.ReplyTo("PushFrameReply"))
}

func TestUndecodableEnvelopesBecomeErrors(t *testing.T) {
	good, err := wire.Encode(&messages.PushFrame{Header: messages.Header{Scope: "s", RequestID: "r1"}, Goal: "plan"}, 0)
	require.NoError(t, err)
	ser, err := good.Serialize()
	require.NoError(t, err)
	payload := ser.(*wire.Envelope).Payload
	flipped := bytes.Clone(payload)
	flipped[0] ^= 0xff
	cases := []struct {
		name string
		env  *wire.Envelope
		want string
		req  bool
	}{
		{"unknown type", &wire.Envelope{Type: "LaunchMissiles", Payload: payload}, "unknown message type", false},
		{"empty type", &wire.Envelope{Payload: payload}, "unknown message type", false},
		{"truncated", &wire.Envelope{Type: "PushFrame", Payload: payload[:len(payload)/2]}, "corrupt PushFrame payload", true},
		{"flipped", &wire.Envelope{Type: "PushFrame", Payload: flipped}, "corrupt PushFrame payload", true},
		{"trailing bytes", &wire.Envelope{Type: "PushFrame", Payload: append(bytes.Clone(payload), 0xc0)}, "trailing bytes", true},
		{"empty payload", &wire.Envelope{Type: "GetStack"}, "corrupt GetStack payload", true},
		{"wrong shape", &wire.Envelope{Type: "GetStack", Payload: []byte{0x93, 1, 2, 3}}, "corrupt GetStack payload", true},
		{"huge length prefix", &wire.Envelope{Type: "PushFrame", Payload: []byte{0xdf, 0xff, 0xff, 0xff, 0xff}}, "corrupt PushFrame payload", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := tc.env.Deserialize()
			require.NoError(t, err)
			m := out.(*wire.Message)
			require.NotNil(t, m.Err)
			assert.Nil(t, m.Value)
			assert.True(t, errors.Is(m.Err, messages.ErrBadRequest), m.Err.Error())
			assert.Contains(t, m.Err.Error(), tc.want)
			assert.Equal(t, tc.req, m.IsRequest())
		})
	}
	m := wire.Decode(nil)
	assert.True(t, errors.Is(m.Err, messages.ErrBadRequest))
}

func TestLimits(t *testing.T) {
	big := &messages.AddContextHandle{Header: messages.Header{Scope: "s", RequestID: "r"}, Content: strings.Repeat("x", wire.DefaultMaxBytes)}
	_, err := wire.Encode(big, 0)
	require.Error(t, err)
	assert.True(t, errors.Is(err, messages.ErrTooLarge))
	assert.Contains(t, err.Error(), "request AddContextHandle is")
	assert.Contains(t, err.Error(), "1048576-byte limit")

	_, err = wire.Encode(&messages.GetFrameReply{Result: messages.Result{Version: 3}}, 2)
	require.Error(t, err)
	assert.True(t, errors.Is(err, messages.ErrTooLarge))
	assert.Contains(t, err.Error(), "reply GetFrameReply")

	m, err := wire.Encode(big, 2*wire.DefaultMaxBytes)
	require.NoError(t, err, "the limit is configurable")
	assert.Greater(t, m.Size(), wire.DefaultMaxBytes)
}

// errorOnly is a reply type wire does not know.
type errorOnly struct{ messages.Result }

func TestWhatCannotTravel(t *testing.T) {
	for _, v := range []any{nil, "text", &struct{}{}, messages.PushFrame{}, &errorOnly{}} {
		_, err := wire.Encode(v, 0)
		require.Error(t, err, "%T", v)
		assert.True(t, errors.Is(err, messages.ErrBadRequest), "%T: %v", v, err)
	}
	// An unregistered reply that carries an error keeps the error.
	m, err := wire.Encode(&errorOnly{messages.Result{Err: messages.Errorf(messages.CodeBadRequest, "not a request")}}, 0)
	require.NoError(t, err)
	got := onTheWire(t, m)
	require.IsType(t, &wire.Failure{}, got.Value)
	assert.Equal(t, "not a request", got.Value.(*wire.Failure).Failure().Message)

	_, err = (&wire.Message{Type: "PushFrame"}).Serialize()
	assert.Error(t, err, "a Message not built by Encode")
}

func FuzzDecode(f *testing.F) {
	for _, name := range wire.Names() {
		v, _ := wire.New(name)
		fill(reflect.ValueOf(v), 0)
		m, err := wire.Encode(v, 0)
		require.NoError(f, err)
		ser, _ := m.Serialize()
		f.Add(name, ser.(*wire.Envelope).Payload)
	}
	f.Fuzz(func(t *testing.T, name string, payload []byte) {
		m := wire.Decode(&wire.Envelope{Type: name, Payload: payload})
		if (m.Err == nil) == (m.Value == nil) {
			t.Fatalf("exactly one of Err and Value must be set: %+v", m)
		}
		if m.Value != nil {
			if _, err := wire.Encode(m.Value, 1<<30); err != nil {
				t.Fatalf("a decoded value re-encodes: %v", err)
			}
		}
	})
}

// TestWireNamesNeverChange: the type names are wire values that peers of
// other releases send; the protocol table they are registered from may grow
// but never rename one (the order pinned here is only Names' order).
func TestWireNamesNeverChange(t *testing.T) {
	assert.Equal(t, []string{
		"PushFrame", "PopFrame", "UpdateFrame", "AddContextHandle", "AddResult", "RecordUsage",
		"StartToolCall", "FinishToolCall", "AssembleContextPack", "SuspendFrame", "ResumeFrame",
		"CompactContext", "ResumeActor", "GetFrame", "GetStack", "ApplyRetention", "DestroyScope", "SearchChain",
		"ContinueFrame", "GetChain", "ResumeChain", "AwaitFrame", "Subscribe", "ReadEvents", "AckEvents", "Unsubscribe", "ListFrames",
		"ReserveSpend", "RenewReservation", "ReleaseReservation", "SettleSpend", "AckSettlement", "GetLedger",
		"ChangeState", "GetState", "RangeState", "StateHistory", "ExpireState", "RecordPartialOutput",
		"GetScope", "ReadScope",
		"PushFrameReply", "PopFrameReply", "UpdateFrameReply", "AddContextHandleReply", "AddResultReply",
		"RecordUsageReply", "StartToolCallReply", "FinishToolCallReply", "ContextPack", "SuspensionToken",
		"ResumeFrameReply", "CompactionResult", "ActorResumeState", "GetFrameReply", "GetStackReply",
		"ApplyRetentionReply", "DestroyScopeReply", "SearchChainReply", "ContinueFrameReply", "GetChainReply", "ResumeChainReply", "AwaitFrameReply",
		"SubscribeReply", "ReadEventsReply", "AckEventsReply", "UnsubscribeReply", "ListFramesReply",
		"ReserveSpendReply", "RenewReservationReply", "ReleaseReservationReply", "SettleSpendReply", "AckSettlementReply", "GetLedgerReply",
		"ChangeStateReply", "GetStateReply", "RangeStateReply", "StateHistoryReply", "ExpireStateReply", "RecordPartialOutputReply",
		"GetScopeReply", "ReadScopeReply",
		wire.FailureType,
		"HookNotification", "HookAck",
	}, wire.Names())
}
