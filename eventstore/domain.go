package eventstore

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/stateindex/stateindex/frames"
)

// This file is the codec between the domain (package frames) and stored
// bytes: events as msgpack payloads of Records, states as snapshot data.

var encPool = sync.Pool{New: func() any {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	enc.SetSortMapKeys(true) // deterministic bytes for maps
	return &pooledEncoder{buf: &buf, enc: enc}
}}

type pooledEncoder struct {
	buf *bytes.Buffer
	enc *msgpack.Encoder
}

// Marshal encodes v as compact msgpack with sorted map keys, so equal values
// give equal bytes (request digests rely on it).
func Marshal(v any) (b []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			b, err = nil, fmt.Errorf("encoder panic: %v", r)
		}
	}()
	pe := encPool.Get().(*pooledEncoder)
	defer encPool.Put(pe)
	pe.buf.Reset()
	if err := pe.enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.Clone(pe.buf.Bytes()), nil
}

// Unmarshal decodes msgpack into v. The decoder's allocation limits stay on:
// a corrupt length prefix cannot make it allocate gigabytes.
func Unmarshal(data []byte, v any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: decoder panic: %v", ErrCorrupt, r)
		}
	}()
	if err := CheckEncoding(data); err != nil {
		return err // before the decoder can over-allocate (see CheckEncoding)
	}
	r := bytes.NewReader(data)
	dec := msgpack.GetDecoder()
	defer msgpack.PutDecoder(dec)
	dec.Reset(r)
	if err := dec.Decode(v); err != nil {
		return err
	}
	if r.Len() != 0 {
		return fmt.Errorf("%d trailing bytes after value", r.Len())
	}
	return nil
}

// EncodeFrameEvent turns a domain event into an Event for Append.
func EncodeFrameEvent(e frames.Event) (Event, error) {
	data, err := Marshal(e)
	if err != nil {
		return Event{}, fmt.Errorf("eventstore: encode %s: %w", e.EventType(), err)
	}
	return Event{Type: e.EventType(), Data: data}, nil
}

// DecodeFrameEvent decodes a Record's payload into its domain event. An
// unknown type or undecodable payload is a *CorruptionError.
func DecodeFrameEvent(r Record) (frames.Event, error) {
	e, err := frames.NewEvent(r.Type)
	if err != nil {
		return nil, &CorruptionError{Stream: r.Stream, Version: r.Version, Reason: "unknown event type " + quoteString(r.Type)}
	}
	if err := Unmarshal(r.Data, e); err != nil {
		return nil, &CorruptionError{Stream: r.Stream, Version: r.Version, Reason: fmt.Sprintf("undecodable %s payload: %v", r.Type, err)}
	}
	return e, nil
}

// EncodeState encodes a scope's projection for a snapshot: content stored
// by reference is not in it, only its hash and the version of its record
// (LoadState reads it back).
func EncodeState(s *frames.State) (Snapshot, error) {
	data, err := Marshal(s.SnapshotView())
	if err != nil {
		return Snapshot{}, fmt.Errorf("eventstore: encode state: %w", err)
	}
	return Snapshot{Version: s.Version, Format: frames.StateFormat, Data: data}, nil
}

// DecodeState decodes a snapshot's projection. ok is false (with a nil
// error) for a snapshot of another projection format: replay instead.
// Format 3 is read as it is: format 4 only added fields it leaves empty
// (content by reference), and a scope whose history retention removed
// cannot be replayed from its start.
func DecodeState(stream string, snap Snapshot) (s *frames.State, ok bool, err error) {
	if snap.Format != frames.StateFormat && snap.Format != 3 {
		return nil, false, nil
	}
	s = &frames.State{}
	if err := Unmarshal(snap.Data, s); err != nil {
		return nil, false, &CorruptionError{Stream: stream, Version: snap.Version, Reason: fmt.Sprintf("undecodable snapshot: %v", err)}
	}
	s.Normalize()
	if s.Scope != stream || s.Version != snap.Version {
		return nil, false, &CorruptionError{Stream: stream, Version: snap.Version,
			Reason: fmt.Sprintf("snapshot is of %s at %d", quoteString(s.Scope), s.Version)}
	}
	return s, true, nil
}
