package eventstore

import (
	"bytes"
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

func sampleRecord(stream, typ string, data []byte, seq uint64, version int64, prev Hash) []byte {
	b := appendRecord(nil, stream, typ, data)
	patchRecord(b, seq, version, &prev)
	return b
}

// The hand-written layout is real msgpack: the library reads it into the
// documented schema.
func TestRecordLayoutIsMsgpack(t *testing.T) {
	prev := Hash(sha256.Sum256([]byte("prev")))
	cases := []struct {
		name, stream, typ string
		data              []byte
	}{
		{"Small", "s", "t", []byte("data")},
		{"Empty", "scope-1", "frame.pushed", nil},
		{"Str8", strings.Repeat("s", 100), strings.Repeat("t", 40), bytes.Repeat([]byte{1}, 300)},
		{"Bin16", strings.Repeat("s", 128), strings.Repeat("t", 255), bytes.Repeat([]byte{2}, 70000)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := sampleRecord(tc.stream, tc.typ, tc.data, 1<<40+3, 1<<33+5, prev)
			require.Equal(t, recordSize(len(tc.stream), len(tc.typ), len(tc.data)), len(b))

			var env recordEnvelope
			require.NoError(t, msgpack.Unmarshal(b, &env))
			assert.Equal(t, uint8(recordEnvelopeVersion), env.V)
			assert.Equal(t, uint64(1<<40+3), env.Seq)
			assert.Equal(t, int64(1<<33+5), env.Version)
			assert.Equal(t, prev[:], env.Prev)
			assert.Equal(t, tc.stream, env.Stream)
			assert.Equal(t, tc.typ, env.Type)
			assert.True(t, bytes.Equal(tc.data, env.Data))

			var f recordFields
			require.NoError(t, parseRecord(b, &f))
			assert.Equal(t, env.Seq, f.seq)
			assert.Equal(t, env.Version, f.version)
			assert.Equal(t, prev, f.prev)
			assert.Equal(t, tc.stream, string(f.stream))
			assert.Equal(t, tc.typ, string(f.typ))
			assert.True(t, bytes.Equal(tc.data, f.data))
		})
	}
}

// The parser accepts any valid msgpack encoding of the schema (compact
// integers, another field order), not only its own canonical bytes.
func TestParseRecordAcceptsLibraryEncoding(t *testing.T) {
	prev := Hash{9}
	env := recordEnvelope{V: 1, Seq: 7, Version: 2, Prev: prev[:], Stream: "s", Type: "t", Data: []byte("d")}
	b, err := msgpack.Marshal(&env)
	require.NoError(t, err)
	var f recordFields
	require.NoError(t, parseRecord(b, &f))
	assert.Equal(t, uint64(7), f.seq)
	assert.Equal(t, int64(2), f.version)
	assert.Equal(t, prev, f.prev)
	assert.Equal(t, "d", string(f.data))
}

func TestParseRecordRejects(t *testing.T) {
	good := sampleRecord("s", "t", []byte("d"), 1, 1, Hash{})
	enc := func(m map[string]any) []byte {
		b, err := msgpack.Marshal(m)
		require.NoError(t, err)
		return b
	}
	base := func() map[string]any {
		return map[string]any{"q": 1, "n": 1, "p": make([]byte, 32), "s": "s", "t": "t", "d": []byte("d")}
	}
	withV := func(m map[string]any, v any) []byte {
		// "v" must come first: build the map by hand.
		b := []byte{0x80 | byte(len(m)+1), 0xa1, 'v'}
		vb, err := msgpack.Marshal(v)
		require.NoError(t, err)
		b = append(b, vb...)
		for _, k := range []string{"q", "n", "p", "s", "t", "d", "x"} {
			if val, ok := m[k]; ok {
				kb, _ := msgpack.Marshal(k)
				vb, err := msgpack.Marshal(val)
				require.NoError(t, err)
				b = append(append(b, kb...), vb...)
			}
		}
		return b
	}
	without := func(k string) map[string]any { m := base(); delete(m, k); return m }
	with := func(k string, v any) map[string]any { m := base(); m[k] = v; return m }
	cases := []struct {
		name string
		b    []byte
	}{
		{"Empty", nil},
		{"NotAMap", []byte{0x01}},
		{"EmptyMap", []byte{0x80}},
		{"VersionNotFirst", enc(map[string]any{"q": 1, "v": 1})},
		{"MissingField", withV(without("t"), 1)},
		{"UnknownField", withV(with("x", 1), 1)},
		{"ShortPrev", withV(with("p", []byte{1, 2}), 1)},
		{"NegativeSeq", withV(with("q", -1), 1)},
		{"StringData", withV(with("d", "text"), 1)},
		{"Truncated", good[:len(good)-1]},
		{"Trailing", append(bytes.Clone(good), 0)},
		{"HugeLength", append(bytes.Clone(good[:recFixedLen]), 0xa1, 's', 0xdb, 0xff, 0xff, 0xff, 0xff)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var f recordFields
			err := parseRecord(tc.b, &f)
			require.Error(t, err)
			var ev errEnvelopeVersion
			assert.NotErrorAs(t, err, &ev)
		})
	}
	t.Run("UnknownVersion", func(t *testing.T) {
		var f recordFields
		err := parseRecord(withV(base(), 2), &f)
		var ev errEnvelopeVersion
		require.ErrorAs(t, err, &ev)
		assert.Equal(t, uint64(2), ev.got)
	})
	t.Run("Duplicate", func(t *testing.T) {
		b := bytes.Clone(good)
		b[0] = 0x88
		b = append(b, 0xa1, 't', 0xa1, 'u')
		var f recordFields
		require.ErrorContains(t, parseRecord(b, &f), "duplicate")
	})
}

func TestSnapshotRoundTripAndChecksum(t *testing.T) {
	snap := Snapshot{Version: 12, Format: 3, Data: []byte("projection")}
	b := encodeSnapshot(nil, "scope", &snap)
	require.Equal(t, snapshotSize(len("scope"), len(snap.Data)), len(b))
	var env snapshotEnvelope
	require.NoError(t, msgpack.Unmarshal(b, &env))
	assert.Equal(t, int64(12), env.Version)
	assert.Equal(t, uint32(3), env.Format)
	assert.Equal(t, "scope", env.Stream)

	got, err := decodeSnapshot("scope", b)
	require.NoError(t, err)
	assert.Equal(t, snap, got)

	for i := range b {
		d := bytes.Clone(b)
		d[i] ^= 0x20
		_, err := decodeSnapshot("scope", d)
		require.Error(t, err, "flipping byte %d is detected", i)
	}
	_, err = decodeSnapshot("other", b)
	require.ErrorIs(t, err, ErrCorrupt, "a snapshot names its stream")
}

func TestHeadValue(t *testing.T) {
	h := Hash{1, 2, 3}
	b := appendHead(nil, 42, &h)
	v, got, err := decodeHead("s", b)
	require.NoError(t, err)
	assert.Equal(t, int64(42), v)
	assert.Equal(t, h, got)
	_, _, err = decodeHead("s", b[:10])
	require.ErrorIs(t, err, ErrCorrupt)
	b[0] = 2
	_, _, err = decodeHead("s", b)
	require.ErrorIs(t, err, ErrUnsupportedFormat)
}

// The committer patches records in place: nothing but the three patched
// fields may depend on position.
func TestPatchOffsets(t *testing.T) {
	b := appendRecord(nil, "s", "t", []byte("d"))
	before := bytes.Clone(b)
	prev := Hash{0xee}
	patchRecord(b, 0x0102030405060708, 0x1112131415161718, &prev)
	var f recordFields
	require.NoError(t, parseRecord(b, &f))
	assert.Equal(t, uint64(0x0102030405060708), f.seq)
	assert.Equal(t, int64(0x1112131415161718), f.version)
	assert.Equal(t, prev, f.prev)
	assert.Equal(t, before[recOffPrev+sha256.Size:], b[recOffPrev+sha256.Size:])
}

func FuzzParseRecord(f *testing.F) {
	f.Add(sampleRecord("s", "t", []byte("d"), 1, 1, Hash{}))
	f.Add(sampleRecord(strings.Repeat("x", 40), "type", bytes.Repeat([]byte{0xc4}, 300), 99, 7, Hash{1}))
	env, _ := msgpack.Marshal(&recordEnvelope{V: 1, Seq: 1, Version: 1, Prev: make([]byte, 32), Stream: "s", Type: "t"})
	f.Add(env)
	f.Fuzz(func(t *testing.T, b []byte) {
		var rf recordFields
		if err := parseRecord(b, &rf); err != nil {
			return
		}
		// Whatever the parser accepts, the msgpack library reads the same.
		var env recordEnvelope
		require.NoError(t, msgpack.Unmarshal(b, &env))
		assert.Equal(t, rf.seq, env.Seq)
		assert.Equal(t, rf.version, env.Version)
		assert.Equal(t, string(rf.stream), env.Stream)
		assert.Equal(t, string(rf.typ), env.Type)
		assert.True(t, bytes.Equal(rf.data, env.Data))
	})
}

func FuzzParseSnapshot(f *testing.F) {
	f.Add(encodeSnapshot(nil, "s", &Snapshot{Version: 1, Format: 1, Data: []byte("x")}))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = decodeSnapshot("s", b) // must not panic
	})
}
