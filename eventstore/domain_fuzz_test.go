package eventstore_test

import (
	"bytes"
	"testing"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
)

var eventTypes = []string{
	frames.TypeFramePushed, frames.TypeFrameUpdated, frames.TypeFramePopped, frames.TypeFrameSuspended,
	frames.TypeFrameResumed, frames.TypeHandleAdded, frames.TypeResultAdded, frames.TypeFrameCompacted,
	frames.TypeActorResumed, frames.TypeUsageRecorded, frames.TypeToolStarted, frames.TypeToolFinished,
}

// FuzzDecodeDomain: the domain codec — an event payload of any type, a
// snapshot's state — never panics on any bytes; what it accepts
// round-trips, and a decoded state can be checked and folded into without
// a panic.
func FuzzDecodeDomain(f *testing.F) {
	for _, e := range sampleEvents() {
		enc, err := eventstore.EncodeFrameEvent(e)
		if err != nil {
			f.Fatal(err)
		}
		for j, typ := range eventTypes {
			if typ == enc.Type {
				f.Add(byte(j), enc.Data)
			}
		}
	}
	st := frames.NewState("s", 0)
	for _, e := range sampleEvents()[:3] {
		_ = frames.Apply(st, e)
	}
	snap, err := eventstore.EncodeState(st)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(byte(255), snap.Data)
	f.Add(byte(0), []byte{0xde, 0xff, 0xff})
	f.Add(byte(5), []byte{0xdf, 0x7f, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, kind byte, data []byte) {
		if kind == 255 {
			s, ok, err := eventstore.DecodeState("s", eventstore.Snapshot{Version: 1, Format: frames.StateFormat, Data: data})
			if err != nil || !ok {
				return
			}
			_ = frames.CheckInvariants(s)
			for _, e := range sampleEvents() {
				_ = frames.Apply(s, e)
			}
			return
		}
		typ := eventTypes[int(kind)%len(eventTypes)]
		e, err := eventstore.DecodeFrameEvent(eventstore.Record{Stream: "s", Version: 1, Type: typ, Data: data})
		if err != nil {
			return
		}
		enc, err := eventstore.EncodeFrameEvent(e)
		if err != nil {
			t.Fatalf("a decoded %s does not encode: %v", typ, err)
		}
		again, err := eventstore.DecodeFrameEvent(eventstore.Record{Stream: "s", Version: 1, Type: typ, Data: enc.Data})
		if err != nil {
			t.Fatalf("a re-encoded %s does not decode: %v", typ, err)
		}
		// Decoding may normalise (an empty byte string where the encoder
		// omits one); after that the encoding is a fixed point.
		enc2, err := eventstore.EncodeFrameEvent(again)
		if err != nil || !bytes.Equal(enc.Data, enc2.Data) {
			t.Fatalf("%s is not stable through a re-encoding (%v):\n%x\n%x", typ, err, enc.Data, enc2.Data)
		}
		_ = frames.Apply(frames.NewState("s", 0), e)
	})
}
