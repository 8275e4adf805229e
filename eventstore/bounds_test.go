package eventstore_test

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
)

// Regression test for what FuzzDecodeDomain found: a few bytes claiming a
// huge array of structs made the msgpack decoder allocate gigabytes (ten
// million context handles from 15 bytes: 2.4 GB; 0x7fffffff of them: an
// out-of-memory crash of the process). Such input is now refused before
// the decoder sees it, allocating next to nothing.
func TestDecodeRefusesLengthsTheInputCannotHold(t *testing.T) {
	for name, data := range map[string][]byte{
		// {"fr": {"a": {"h": array32(n)}}}: a snapshot whose frame claims n handles
		"ten million handles":   {0x81, 0xa2, 'f', 'r', 0x81, 0xa1, 'a', 0x81, 0xa1, 'h', 0xdd, 0x00, 0x98, 0x96, 0x80},
		"2^31-1 handles":        {0x81, 0xa2, 'f', 'r', 0x81, 0xa1, 'a', 0x81, 0xa1, 'h', 0xdd, 0x7f, 0xff, 0xff, 0xff},
		"2^31-1 frames":         {0x81, 0xa2, 'f', 'r', 0xdf, 0x7f, 0xff, 0xff, 0xff},
		"2^31-1 requests":       {0x81, 0xa2, 'r', 'q', 0xdd, 0x7f, 0xff, 0xff, 0xff},
		"a string past the end": {0x81, 0xa2, 's', 'c', 0xdb, 0x7f, 0xff, 0xff, 0xff, 'x'},
		"deep nesting":          append(append([]byte{0x81, 0xa1, 'z'}, repeat(0x91, 100_000)...), 0xc0),
	} {
		t.Run(name, func(t *testing.T) {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			before := ms.TotalAlloc
			_, _, err := eventstore.DecodeState("s", eventstore.Snapshot{Version: 1, Format: frames.StateFormat, Data: data})
			require.ErrorIs(t, err, eventstore.ErrCorrupt)
			runtime.ReadMemStats(&ms)
			assert.Less(t, ms.TotalAlloc-before, uint64(1<<20), "allocated %d bytes", ms.TotalAlloc-before)
		})
	}
}

func repeat(b byte, n int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = b
	}
	return out
}

// Everything the codec writes passes the check.
func TestCheckEncodingAcceptsWhatTheCodecWrites(t *testing.T) {
	st := frames.NewState("s", 0)
	for _, e := range sampleEvents() {
		enc, err := eventstore.EncodeFrameEvent(e)
		require.NoError(t, err)
		require.NoError(t, eventstore.CheckEncoding(enc.Data), e.EventType())
		_ = frames.Apply(st, e)
	}
	snap, err := eventstore.EncodeState(st)
	require.NoError(t, err)
	require.NoError(t, eventstore.CheckEncoding(snap.Data))
	for _, v := range []any{nil, true, -1, 1 << 40, -1 << 40, 3.5, float32(2), "", "x", []byte{}, make([]byte, 70000),
		map[string]any{"a": []any{1, "b", nil, map[string]int{"c": 3}}}, []int{}, make([]string, 70000)} {
		b, err := eventstore.Marshal(v)
		require.NoError(t, err)
		require.NoError(t, eventstore.CheckEncoding(b), "%T", v)
	}
}
