package eventstore

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"testing"
)

func fuzzRecord(stream, typ string, data []byte, seq uint64, version int64, prev Hash) []byte {
	b := appendRecord(nil, stream, typ, data)
	patchRecord(b, seq, version, &prev)
	return b
}

// FuzzRecordEnvelope: the record decoder never panics, reads nothing past
// its input, and what it accepts re-encodes (canonically) to a record that
// decodes to the same fields; an unknown envelope version is reported as
// such, never as garbage.
func FuzzRecordEnvelope(f *testing.F) {
	prev := Hash(sha256.Sum256([]byte("x")))
	f.Add(fuzzRecord("s", "frame.pushed", []byte{0x81, 0xa1, 'a', 1}, 1, 1, Hash{}))
	f.Add(fuzzRecord("agent-7", "usage.recorded", bytes.Repeat([]byte{7}, 300), 1<<40, 1<<33, prev))
	f.Add(fuzzRecord(string(bytes.Repeat([]byte{'n'}, 100)), "t", nil, 9, 9, prev))
	f.Add([]byte{0x87, 0xa1, 'v', 2})
	f.Add([]byte{0x81, 0xa1, 'v', 0xcf, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Fuzz(func(t *testing.T, b []byte) {
		var fl recordFields
		err := parseRecord(b, &fl)
		if err != nil {
			var ev errEnvelopeVersion
			if errors.As(err, &ev) && ev.got == recordEnvelopeVersion {
				t.Fatalf("the known envelope version reported as unknown")
			}
			return
		}
		again := fuzzRecord(string(fl.stream), string(fl.typ), fl.data, fl.seq, fl.version, fl.prev)
		var g recordFields
		if err := parseRecord(again, &g); err != nil {
			t.Fatalf("a re-encoded record does not decode: %v", err)
		}
		if string(g.stream) != string(fl.stream) || string(g.typ) != string(fl.typ) || !bytes.Equal(g.data, fl.data) ||
			g.seq != fl.seq || g.version != fl.version || g.prev != fl.prev {
			t.Fatalf("fields changed through a re-encoding")
		}
	})
}

// FuzzStoredValues: the decoders of every other stored value — snapshot
// envelopes, stream heads, checkpoints — never panic, and what they accept
// re-encodes to the same bytes or decodes to the same value.
func FuzzStoredValues(f *testing.F) {
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{3}, ed25519.SeedSize))
	cp := Checkpoint{Stream: "s", Version: 4, Head: sha256.Sum256([]byte("h")), Reason: CheckpointSnapshot}
	cp.Sign(key)
	h := Hash(sha256.Sum256([]byte("head")))
	f.Add(byte(0), encodeSnapshot(nil, "s", &Snapshot{Version: 3, Format: 1, Data: []byte("state")}))
	f.Add(byte(0), encodeSnapshot(nil, "s", &Snapshot{Version: 1 << 40, Format: 7, Data: bytes.Repeat([]byte{1}, 300)}))
	f.Add(byte(1), appendHead(nil, 12, &h))
	f.Add(byte(2), append(checkpointKey("s", 4), encodeCheckpoint(&cp)...))
	f.Add(byte(2), []byte{1})
	f.Fuzz(func(t *testing.T, kind byte, b []byte) {
		switch kind % 3 {
		case 0:
			snap, err := decodeSnapshot("s", b)
			if err != nil {
				return
			}
			again, err := decodeSnapshot("s", encodeSnapshot(nil, "s", &snap))
			if err != nil || again.Version != snap.Version || again.Format != snap.Format || !bytes.Equal(again.Data, snap.Data) {
				t.Fatalf("snapshot changed through a re-encoding: %v", err)
			}
		case 1:
			v, hh, err := decodeHead("s", b)
			if err != nil {
				return
			}
			if !bytes.Equal(appendHead(nil, v, &hh), b) {
				t.Fatalf("head re-encodes differently")
			}
		case 2:
			// b is key || value: split where a checkpoint value would start.
			if len(b) < checkpointLen {
				_, _ = decodeCheckpoint(b, nil)
				return
			}
			k, v := b[:len(b)-checkpointLen], b[len(b)-checkpointLen:]
			c, err := decodeCheckpoint(k, v)
			if err != nil {
				return
			}
			if !bytes.Equal(append(checkpointKey(c.Stream, c.Version), encodeCheckpoint(&c)...), b) {
				t.Fatalf("checkpoint re-encodes differently")
			}
		}
	})
}
