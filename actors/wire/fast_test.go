package wire

import (
	"bytes"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// edgeInts are the integers where msgpack's encoding changes size.
var edgeInts = []int64{0, 1, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxInt64,
	-1, -32, -33, -128, -129, -32768, -32769, math.MinInt32, math.MinInt32 - 1, math.MinInt64}

// edgeStrings cross msgpack's string length classes.
var edgeStrings = []string{"", "a", strings.Repeat("s", 31), strings.Repeat("s", 32), strings.Repeat("s", 255), strings.Repeat("s", 256), strings.Repeat("s", 65536), "héllo ✓"}

func randomStack(rng *rand.Rand) *messages.GetStackReply {
	i := func() int64 { return edgeInts[rng.Intn(len(edgeInts))] }
	s := func() string {
		if rng.Intn(4) == 0 {
			return edgeStrings[rng.Intn(len(edgeStrings))]
		}
		return fmt.Sprintf("f-%d", rng.Intn(1000))
	}
	r := &messages.GetStackReply{Result: messages.Result{Version: i()}}
	if rng.Intn(3) == 0 {
		r.Position = uint64(i()) // a write's position (negative edges: beyond int64, the fallback)
	}
	if rng.Intn(5) == 0 {
		r.Err = &messages.Error{Code: messages.CodeFrameNotFound, Message: s(), Needed: i(), Available: i()}
	}
	for n := rng.Intn(20); n > 0; n-- {
		f := messages.FrameSummary{
			ID: s(), Goal: s(), Status: frames.Status(rng.Intn(256)), Depth: i(),
			Budget:  budget.TokenBudget{Total: i(), Used: i(), Reserved: i(), SubcallAllocation: i(), MaxSubframeDepth: i()},
			Limits:  budget.Limits{Tokens: i(), Turns: i(), SpendMicros: i(), Spawns: i(), DurationMillis: i()},
			Cost:    budget.Cost{InputTokens: i(), OutputTokens: i(), Turns: i(), SpendMicros: i(), Spawns: i(), DurationMillis: i()},
			Handles: int(i()), ContextTokens: i(), Results: int(i()), CreatedAt: i(),
		}
		if rng.Intn(2) == 0 {
			f.ParentID = s()
		}
		if rng.Intn(2) == 0 {
			f.CompletedAt = i()
		}
		for c := rng.Intn(3) * rng.Intn(10); c > 0; c-- {
			f.Children = append(f.Children, s())
		}
		if rng.Intn(4) == 0 {
			f.InDoubt = []frames.ToolCall{{ID: s(), Name: s(), Input: []byte(s()), StartedAt: i(), Abandoned: true}}
		}
		if rng.Intn(4) == 0 {
			f.Suspension = &frames.Suspension{Reason: frames.SuspendApproval, Note: s(), TokenID: s(), At: i(), ExpiresAt: i()}
		}
		r.Frames = append(r.Frames, f)
	}
	return r
}

func randomGetStack(rng *rand.Rand) *messages.GetStack {
	m := &messages.GetStack{Header: messages.Header{Scope: edgeStrings[rng.Intn(len(edgeStrings))]}}
	if rng.Intn(2) == 0 {
		m.RequestID = "req-1"
	}
	if rng.Intn(2) == 0 {
		v := edgeInts[rng.Intn(len(edgeInts))]
		m.IfVersion = &v
	}
	m.Reason = frames.Reason(rng.Intn(3) * rng.Intn(256) / 2)
	if rng.Intn(2) == 0 {
		m.FrameID = edgeStrings[rng.Intn(len(edgeStrings))]
	}
	return m
}

// TestFastCodecsWriteTheStoreBytes: the hand-written encoders write exactly
// what eventstore.Marshal writes (so peers of every release read them), and
// their decoders give back the value the reflection decoder gives.
func TestFastCodecsWriteTheStoreBytes(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	values := []struct {
		name string
		v    any
	}{
		{"GetStack", &messages.GetStack{}},
		{"GetStack", (*messages.GetStack)(nil)},
		{"GetStackReply", &messages.GetStackReply{}},
		{"GetStackReply", (*messages.GetStackReply)(nil)},
		{"GetStackReply", &messages.GetStackReply{Frames: []messages.FrameSummary{}}},
		{"GetStackReply", &messages.GetStackReply{Frames: make([]messages.FrameSummary, 17)}},
	}
	for n := 0; n < 400; n++ {
		values = append(values, struct {
			name string
			v    any
		}{"GetStackReply", randomStack(rng)}, struct {
			name string
			v    any
		}{"GetStack", randomGetStack(rng)})
	}
	for i, c := range values {
		t.Run(fmt.Sprintf("%s-%d", c.name, i), func(t *testing.T) {
			want, err := marshal(c.v)
			require.NoError(t, err)
			got, err := marshalWire(c.name, c.v)
			require.NoError(t, err)
			require.True(t, bytes.Equal(want, got), "the wire bytes are the store's bytes:\n% x\n% x", want, got)

			ref, ok := New(c.name)
			require.True(t, ok)
			require.NoError(t, unmarshal(want, ref))
			got2, err := unmarshalWire(c.name, want, byName[c.name].make)
			require.NoError(t, err)
			assert.Equal(t, ref, got2)
			if want[0] != 0xc0 { // a nil pointer is left to the reflection decoder
				fast, _ := New(c.name)
				require.NoError(t, fastCodecs[c.name].decode(want, fast), "the fast decoder reads what the encoder writes")
				assert.Equal(t, ref, fast)
			}
		})
	}
}

// TestFastDecoderAgreesWithReflection: on damaged or foreign encodings
// (truncations, changed bytes, other key orders and integer widths) the
// wire decoder accepts and refuses what eventstore.Unmarshal does and
// decodes the same value.
func TestFastDecoderAgreesWithReflection(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	check := func(t *testing.T, name string, data []byte) {
		t.Helper()
		byType := byName[name]
		got, gotErr := unmarshalWire(name, data, byType.make)
		want := byType.make()
		wantErr := unmarshal(data, want)
		if wantErr != nil {
			require.Error(t, gotErr, "% x", data)
			return
		}
		require.NoError(t, gotErr, "% x", data)
		require.Equal(t, want, got, "% x", data)
	}
	// Other encoders' spellings of the same values: keys out of order, wide
	// integers, a nil error, an unknown key, a repeated key.
	foreign := map[string][]byte{
		"GetStack":      {0x82, 0xa1, 'f', 0xa1, 'x', 0xa2, 's', 'c', 0xa1, 'y'},
		"GetStackReply": {0x83, 0xa2, 'f', 's', 0x90, 0xa3, 'v', 'e', 'r', 0xd3, 0, 0, 0, 0, 0, 0, 0, 7, 0xa3, 'e', 'r', 'r', 0xc0},
	}
	for name, data := range foreign {
		t.Run("foreign-"+name, func(t *testing.T) { check(t, name, data) })
	}
	t.Run("unknown key", func(t *testing.T) {
		check(t, "GetStack", []byte{0x82, 0xa2, 's', 'c', 0xa1, 'y', 0xa3, 'n', 'e', 'w', 0x01})
	})
	t.Run("repeated key", func(t *testing.T) {
		check(t, "GetStack", []byte{0x82, 0xa2, 's', 'c', 0xa1, 'y', 0xa2, 's', 'c', 0xa1, 'z'})
	})
	t.Run("mutations", func(t *testing.T) {
		for n := 0; n < 3000; n++ {
			name, v := "GetStackReply", any(randomStack(rng))
			if n%3 == 0 {
				name, v = "GetStack", randomGetStack(rng)
			}
			data, err := marshal(v)
			require.NoError(t, err)
			switch n % 4 {
			case 0:
				data = data[:rng.Intn(len(data)+1)]
			case 1:
				data[rng.Intn(len(data))] = byte(rng.Intn(256))
			case 2:
				data = append(data, byte(rng.Intn(256)))
			default:
				for k := 0; k < 3; k++ {
					data[rng.Intn(len(data))] ^= 1 << rng.Intn(8)
				}
			}
			check(t, name, data)
		}
	})
}

func FuzzFastDecode(f *testing.F) {
	rng := rand.New(rand.NewSource(3))
	for n := 0; n < 8; n++ {
		b, _ := marshal(randomStack(rng))
		f.Add(true, b)
		b, _ = marshal(randomGetStack(rng))
		f.Add(false, b)
	}
	f.Fuzz(func(t *testing.T, reply bool, data []byte) {
		name := "GetStack"
		if reply {
			name = "GetStackReply"
		}
		got, gotErr := unmarshalWire(name, data, byName[name].make)
		want := byName[name].make()
		if wantErr := unmarshal(data, want); wantErr != nil {
			require.Error(t, gotErr)
			return
		}
		require.NoError(t, gotErr)
		require.Equal(t, want, got)
	})
}

// BenchmarkGetStackReply compares the fast path with the reflection codec
// on the reply of a 3-frame stack (what BenchmarkRemote's op=get carries).
func BenchmarkGetStackReply(b *testing.B) {
	reply := &messages.GetStackReply{Result: messages.Result{Version: 12}}
	parent := ""
	for d := 0; d < 3; d++ {
		id := fmt.Sprintf("01J9Z3ZK5V8Q4T6W2X0Y%06d", d)
		reply.Frames = append(reply.Frames, messages.FrameSummary{ID: id, ParentID: parent, Goal: "benchmark", Status: frames.StatusActive, Depth: int64(d),
			Budget: budget.TokenBudget{Total: 1 << 30 >> d, Reserved: 1 << 20}, Children: []string{"01J9Z3ZK5V8Q4T6W2X0Y000009"}, CreatedAt: 1732470000000000})
		parent = id
	}
	data, err := marshal(reply)
	require.NoError(b, err)
	b.Run("encode/fast", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			_, _ = marshalWire("GetStackReply", reply)
		}
	})
	b.Run("encode/reflection", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			_, _ = marshal(reply)
		}
	})
	b.Run("decode/fast", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			_, _ = unmarshalWire("GetStackReply", data, byName["GetStackReply"].make)
		}
	})
	b.Run("decode/reflection", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			_ = unmarshal(data, &messages.GetStackReply{})
		}
	})
}
