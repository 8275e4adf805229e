package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"sync"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// This file holds hand-written msgpack codecs for the hottest wire types
// (GetStack and its reply: a reply of a few frame summaries costs about a
// quarter of each side's CPU through msgpack's reflection). They are wire
// fast paths only, never the store's codec:
//
//   - the encoder writes exactly the bytes eventstore.Marshal writes for the
//     same value (map-encoded structs, fields in declaration order, omitempty
//     fields left out, compact integers), so peers of any release read them
//     and tests compare the two byte for byte;
//   - the decoder reads the common shape of those bytes and, on anything
//     else (an unknown key, a nil, a duplicate key, an integer that needs a
//     conversion, a malformed or truncated value), gives up and the caller
//     decodes the whole payload with eventstore.Unmarshal, so it accepts and
//     refuses exactly what the reflection decoder does.
//
// Rare nested values (an error, in-doubt tool calls, a suspension) go
// through eventstore.Marshal/Unmarshal for their own bytes.

// fastCodec encodes and decodes one type by hand.
type fastCodec struct {
	// encode appends v's encoding to b.
	encode func(b []byte, v any) ([]byte, error)
	// decode decodes data into v (a new zero value); errFallback (or any
	// error) means: use the reflection decoder instead.
	decode func(data []byte, v any) error
}

// errFallback: the fast decoder met something it does not handle.
var errFallback = errors.New("wire: fast decoder fallback")

var fastCodecs = map[string]fastCodec{
	"GetStack": {
		encode: func(b []byte, v any) ([]byte, error) {
			if m := v.(*messages.GetStack); m != nil {
				return appendGetStack(b, m), nil
			}
			return marshal(v)
		},
		decode: func(data []byte, v any) error { return decodeWhole(data, v.(*messages.GetStack), readGetStack) },
	},
	"GetStackReply": {
		encode: func(b []byte, v any) ([]byte, error) {
			if m := v.(*messages.GetStackReply); m != nil {
				return appendGetStackReply(b, m)
			}
			return marshal(v)
		},
		decode: func(data []byte, v any) error {
			return decodeWhole(data, v.(*messages.GetStackReply), readGetStackReply)
		},
	},
}

// marshalWire encodes v, registered as name, for the wire: the same bytes
// as marshal.
func marshalWire(name string, v any) ([]byte, error) {
	c, ok := fastCodecs[name]
	if !ok {
		return marshal(v)
	}
	// Encode into a pooled buffer, then copy out exactly the bytes.
	bp := encBuf.Get().(*[]byte)
	defer encBuf.Put(bp)
	b, err := c.encode((*bp)[:0], v)
	if err != nil {
		return nil, err
	}
	if cap(b) <= maxPooledBuf {
		*bp = b
	}
	return bytes.Clone(b), nil
}

// encBuf holds encoding buffers of up to maxPooledBuf bytes.
var encBuf = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

const maxPooledBuf = 64 << 10

// unmarshalWire decodes data into a new value from newValue (the type
// registered as name), as unmarshal would.
func unmarshalWire(name string, data []byte, newValue func() any) (any, error) {
	v := newValue()
	if c, ok := fastCodecs[name]; ok {
		if tryDecode(c, data, v) == nil {
			return v, nil
		}
		v = newValue() // the fast decoder may have filled part of v
	}
	return v, unmarshal(data, v)
}

// tryDecode runs c's decoder; a panic (a bug: the decoder checks every
// length) counts as a fallback rather than reaching the connection.
func tryDecode(c fastCodec, data []byte, v any) (err error) {
	defer func() {
		if recover() != nil {
			err = errFallback
		}
	}()
	return c.decode(data, v)
}

// decodeWhole runs read over all of data.
func decodeWhole[T any](data []byte, v *T, read func(*reader, *T) error) error {
	r := &reader{all: data}
	if err := read(r, v); err != nil {
		return err
	}
	if r.left() != 0 {
		return errFallback
	}
	return nil
}

// Encoding: the msgpack rules of eventstore's encoder.

func appendMapLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x80|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xde), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, 0xdf), uint32(n))
	}
}

func appendArrayLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xdc), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, 0xdd), uint32(n))
	}
}

func appendStr(b []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n < 256:
		b = append(b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
	}
	return append(b, s...)
}

func appendUint(b []byte, n uint64) []byte {
	switch {
	case n <= math.MaxInt8:
		return append(b, byte(n))
	case n <= math.MaxUint8:
		return append(b, 0xcc, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(n))
	case n <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(n))
	default:
		return binary.BigEndian.AppendUint64(append(b, 0xcf), n)
	}
}

func appendInt(b []byte, n int64) []byte {
	switch {
	case n >= 0:
		return appendUint(b, uint64(n))
	case n >= -32:
		return append(b, byte(n))
	case n >= math.MinInt8:
		return append(b, 0xd0, byte(n))
	case n >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, 0xd1), uint16(n))
	case n >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(n))
	default:
		return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(n))
	}
}

// appendKeyInt appends a map key and an integer value.
func appendKeyInt(b []byte, key string, n int64) []byte { return appendInt(appendStr(b, key), n) }

// appendOther appends v's encoding by eventstore.Marshal (for the rare
// nested values this file does not encode by hand).
func appendOther(b []byte, key string, v any) ([]byte, error) {
	enc, err := marshal(v)
	if err != nil {
		return nil, err
	}
	return append(appendStr(b, key), enc...), nil
}

func appendGetStack(b []byte, m *messages.GetStack) []byte {
	n := 1
	if m.RequestID != "" {
		n++
	}
	if m.IfVersion != nil {
		n++
	}
	if m.Reason != 0 {
		n++
	}
	if m.FrameID != "" {
		n++
	}
	b = appendStr(appendMapLen(b, n), "sc")
	b = appendStr(b, m.Scope)
	if m.RequestID != "" {
		b = appendStr(appendStr(b, "rq"), m.RequestID)
	}
	if m.IfVersion != nil {
		b = appendKeyInt(b, "iv", *m.IfVersion)
	}
	if m.Reason != 0 {
		b = appendUint(appendStr(b, "re"), uint64(m.Reason))
	}
	if m.FrameID != "" {
		b = appendStr(appendStr(b, "f"), m.FrameID)
	}
	return b
}

func appendGetStackReply(b []byte, m *messages.GetStackReply) ([]byte, error) {
	n := 1
	if m.Err != nil {
		n++
	}
	if m.Position != 0 {
		n++
	}
	if len(m.Frames) > 0 {
		n++
	}
	if m.ChainHead != "" {
		n++
	}
	b = appendMapLen(b, n)
	var err error
	if m.Err != nil {
		if b, err = appendOther(b, "err", m.Err); err != nil {
			return nil, err
		}
	}
	b = appendKeyInt(b, "ver", m.Version)
	if m.Position != 0 {
		b = appendUint(appendStr(b, "pos"), m.Position)
	}
	if len(m.Frames) > 0 {
		b = appendArrayLen(appendStr(b, "fs"), len(m.Frames))
		for i := range m.Frames {
			if b, err = appendFrameSummary(b, &m.Frames[i]); err != nil {
				return nil, err
			}
		}
	}
	if m.ChainHead != "" {
		b = appendStr(appendStr(b, "chh"), m.ChainHead)
	}
	return b, nil
}

func appendFrameSummary(b []byte, f *messages.FrameSummary) ([]byte, error) {
	n := 11
	for _, present := range []bool{f.ParentID != "", len(f.Children) > 0, len(f.InDoubt) > 0, f.Suspension != nil, f.CompletedAt != 0} {
		if present {
			n++
		}
	}
	b = appendMapLen(b, n)
	b = appendStr(appendStr(b, "id"), f.ID)
	if f.ParentID != "" {
		b = appendStr(appendStr(b, "pa"), f.ParentID)
	}
	b = appendStr(appendStr(b, "g"), f.Goal)
	b = appendUint(appendStr(b, "st"), uint64(f.Status))
	b = appendKeyInt(b, "d", f.Depth)
	b = appendTokenBudget(appendStr(b, "b"), &f.Budget)
	b = appendLimits(appendStr(b, "l"), &f.Limits)
	b = appendCost(appendStr(b, "c"), &f.Cost)
	b = appendKeyInt(b, "h", int64(f.Handles))
	b = appendKeyInt(b, "ct", f.ContextTokens)
	b = appendKeyInt(b, "r", int64(f.Results))
	if len(f.Children) > 0 {
		b = appendArrayLen(appendStr(b, "ch"), len(f.Children))
		for _, c := range f.Children {
			b = appendStr(b, c)
		}
	}
	var err error
	if len(f.InDoubt) > 0 {
		if b, err = appendOther(b, "id2", f.InDoubt); err != nil {
			return nil, err
		}
	}
	if f.Suspension != nil {
		if b, err = appendOther(b, "su", f.Suspension); err != nil {
			return nil, err
		}
	}
	b = appendKeyInt(b, "at", f.CreatedAt)
	if f.CompletedAt != 0 {
		b = appendKeyInt(b, "ca", f.CompletedAt)
	}
	return b, nil
}

func appendTokenBudget(b []byte, t *budget.TokenBudget) []byte {
	b = appendMapLen(b, 5)
	b = appendKeyInt(b, "t", t.Total)
	b = appendKeyInt(b, "u", t.Used)
	b = appendKeyInt(b, "r", t.Reserved)
	b = appendKeyInt(b, "s", t.SubcallAllocation)
	return appendKeyInt(b, "d", t.MaxSubframeDepth)
}

func appendLimits(b []byte, l *budget.Limits) []byte {
	b = appendMapLen(b, 5)
	b = appendKeyInt(b, "k", l.Tokens)
	b = appendKeyInt(b, "t", l.Turns)
	b = appendKeyInt(b, "s", l.SpendMicros)
	b = appendKeyInt(b, "p", l.Spawns)
	return appendKeyInt(b, "d", l.DurationMillis)
}

func appendCost(b []byte, c *budget.Cost) []byte {
	b = appendMapLen(b, 6)
	b = appendKeyInt(b, "i", c.InputTokens)
	b = appendKeyInt(b, "o", c.OutputTokens)
	b = appendKeyInt(b, "t", c.Turns)
	b = appendKeyInt(b, "s", c.SpendMicros)
	b = appendKeyInt(b, "p", c.Spawns)
	return appendKeyInt(b, "d", c.DurationMillis)
}

// Decoding: only the shapes the encoder above writes; errFallback on
// anything else.

// reader reads msgpack from all[pos:] (an index, not a re-sliced slice:
// no pointer writes, so no GC write barriers). The strings it returns are
// slices of one copy of all (made on the first), so that a reply of many
// small strings costs one allocation; they keep that copy alive, which is
// no more than the decoded value holds anyway.
type reader struct {
	all []byte
	pos int
	s   string
}

// left is how many bytes are left.
func (r *reader) left() int { return len(r.all) - r.pos }

func (r *reader) byte1() (byte, error) {
	if r.pos >= len(r.all) {
		return 0, errFallback
	}
	c := r.all[r.pos]
	r.pos++
	return c, nil
}

func (r *reader) take(n int) ([]byte, error) {
	if n < 0 || n > r.left() {
		return nil, errFallback
	}
	p := r.all[r.pos : r.pos+n]
	r.pos += n
	return p, nil
}

// length reads a big-endian length of size bytes.
func (r *reader) length(size int) (int, error) {
	p, err := r.take(size)
	if err != nil {
		return 0, err
	}
	switch size {
	case 1:
		return int(p[0]), nil
	case 2:
		return int(binary.BigEndian.Uint16(p)), nil
	default:
		return int(binary.BigEndian.Uint32(p)), nil
	}
}

func (r *reader) mapLen() (int, error) {
	c, err := r.byte1()
	switch {
	case err != nil:
		return 0, err
	case c&0xf0 == 0x80:
		return int(c & 0x0f), nil
	case c == 0xde:
		return r.length(2)
	case c == 0xdf:
		return r.length(4)
	}
	return 0, errFallback
}

func (r *reader) arrayLen() (int, error) {
	c, err := r.byte1()
	switch {
	case err != nil:
		return 0, err
	case c&0xf0 == 0x90:
		return int(c & 0x0f), nil
	case c == 0xdc:
		return r.length(2)
	case c == 0xdd:
		return r.length(4)
	}
	return 0, errFallback
}

// strBytes reads a str value without copying it.
func (r *reader) strBytes() ([]byte, error) {
	c, err := r.byte1()
	if err != nil {
		return nil, err
	}
	var n int
	switch {
	case c&0xe0 == 0xa0:
		n = int(c & 0x1f)
	case c == 0xd9:
		n, err = r.length(1)
	case c == 0xda:
		n, err = r.length(2)
	case c == 0xdb:
		n, err = r.length(4)
	default:
		return nil, errFallback
	}
	if err != nil {
		return nil, err
	}
	return r.take(n)
}

func (r *reader) str() (string, error) {
	p, err := r.strBytes()
	if err != nil || len(p) == 0 {
		return "", err
	}
	if r.s == "" {
		r.s = string(r.all)
	}
	end := r.pos
	return r.s[end-len(p) : end], nil
}

// int reads any msgpack integer that fits an int64.
func (r *reader) int() (int64, error) {
	c, err := r.byte1()
	if err != nil {
		return 0, err
	}
	switch {
	case c <= 0x7f:
		return int64(c), nil
	case c >= 0xe0:
		return int64(int8(c)), nil
	}
	var size int
	switch c {
	case 0xcc, 0xd0:
		size = 1
	case 0xcd, 0xd1:
		size = 2
	case 0xce, 0xd2:
		size = 4
	case 0xcf, 0xd3:
		size = 8
	default:
		return 0, errFallback
	}
	p, err := r.take(size)
	if err != nil {
		return 0, err
	}
	switch c {
	case 0xcc:
		return int64(p[0]), nil
	case 0xcd:
		return int64(binary.BigEndian.Uint16(p)), nil
	case 0xce:
		return int64(binary.BigEndian.Uint32(p)), nil
	case 0xcf:
		u := binary.BigEndian.Uint64(p)
		if u > math.MaxInt64 {
			return 0, errFallback
		}
		return int64(u), nil
	case 0xd0:
		return int64(int8(p[0])), nil
	case 0xd1:
		return int64(int16(binary.BigEndian.Uint16(p))), nil
	case 0xd2:
		return int64(int32(binary.BigEndian.Uint32(p))), nil
	default:
		return int64(binary.BigEndian.Uint64(p)), nil
	}
}

// uint64 reads a non-negative integer (as appendUint writes it).
func (r *reader) uint64() (uint64, error) {
	c, err := r.byte1()
	if err != nil {
		return 0, err
	}
	if c <= 0x7f {
		return uint64(c), nil
	}
	var size int
	switch c {
	case 0xcc:
		size = 1
	case 0xcd:
		size = 2
	case 0xce:
		size = 4
	case 0xcf:
		size = 8
	default:
		return 0, errFallback
	}
	p, err := r.take(size)
	if err != nil {
		return 0, err
	}
	var u uint64
	for _, x := range p {
		u = u<<8 | uint64(x)
	}
	return u, nil
}

// uint8 reads an integer in 0..255.
func (r *reader) uint8() (uint8, error) {
	n, err := r.int()
	if err != nil || n < 0 || n > math.MaxUint8 {
		return 0, errFallback
	}
	return uint8(n), nil
}

// skip passes over one value of any type (at most depth levels deep) and
// returns its bytes.
func (r *reader) skip(depth int) ([]byte, error) {
	start := r.pos
	if depth <= 0 {
		return nil, errFallback
	}
	c, err := r.byte1()
	if err != nil {
		return nil, err
	}
	var n, items int
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
	case c&0xf0 == 0x80:
		items = 2 * int(c&0x0f)
	case c&0xf0 == 0x90:
		items = int(c & 0x0f)
	case c&0xe0 == 0xa0:
		n = int(c & 0x1f)
	case c == 0xc4 || c == 0xd9:
		n, err = r.length(1)
	case c == 0xc5 || c == 0xda:
		n, err = r.length(2)
	case c == 0xc6 || c == 0xdb:
		n, err = r.length(4)
	case c == 0xcc || c == 0xd0:
		n = 1
	case c == 0xcd || c == 0xd1:
		n = 2
	case c == 0xca || c == 0xce || c == 0xd2:
		n = 4
	case c == 0xcb || c == 0xcf || c == 0xd3:
		n = 8
	case c == 0xdc:
		items, err = r.length(2)
	case c == 0xdd:
		items, err = r.length(4)
	case c == 0xde:
		items, err = r.length(2)
		items *= 2
	case c == 0xdf:
		items, err = r.length(4)
		items *= 2
	default: // extensions: the reflection decoder decides
		return nil, errFallback
	}
	if err != nil {
		return nil, err
	}
	if _, err := r.take(n); err != nil {
		return nil, err
	}
	if items > r.left() {
		return nil, errFallback
	}
	for i := 0; i < items; i++ {
		if _, err := r.skip(depth - 1); err != nil {
			return nil, err
		}
	}
	return r.all[start:r.pos], nil
}

// other decodes one value by eventstore.Unmarshal (the nested values the
// encoder writes through eventstore.Marshal).
func (r *reader) other(v any) error {
	if r.left() > 0 && r.all[r.pos] == 0xc0 {
		return errFallback // nil: leave it to the reflection decoder
	}
	p, err := r.skip(64)
	if err != nil {
		return err
	}
	if eventstore.Unmarshal(p, v) != nil {
		return errFallback
	}
	return nil
}

// key reads a map key and returns it with its index by index; a key that
// is unknown or already in seen is errFallback.
func (r *reader) key(seen *uint32, index func(key []byte) int) (int, error) {
	k, err := r.strBytes()
	if err != nil {
		return 0, err
	}
	i := index(k)
	if i < 0 || *seen&(1<<i) != 0 {
		return 0, errFallback // unknown or repeated key
	}
	*seen |= 1 << i
	return i, nil
}

// fields reads a map-encoded struct: each key, once, to one of up to 32
// field readers found by index.
func (r *reader) fields(index func(key []byte) int, read func(r *reader, i int) error) error {
	n, err := r.mapLen()
	if err != nil {
		return err
	}
	var seen uint32
	for ; n > 0; n-- {
		k, err := r.strBytes()
		if err != nil {
			return err
		}
		i := index(k)
		if i < 0 || seen&(1<<i) != 0 {
			return errFallback // unknown or repeated key
		}
		seen |= 1 << i
		if err := read(r, i); err != nil {
			return err
		}
	}
	return nil
}

func readGetStack(r *reader, m *messages.GetStack) error {
	return r.fields(func(k []byte) int {
		switch string(k) {
		case "sc":
			return 0
		case "rq":
			return 1
		case "iv":
			return 2
		case "re":
			return 3
		case "f":
			return 4
		}
		return -1
	}, func(r *reader, i int) (err error) {
		switch i {
		case 0:
			m.Scope, err = r.str()
		case 1:
			m.RequestID, err = r.str()
		case 2:
			var v int64
			v, err = r.int()
			m.IfVersion = &v
		case 3:
			var v uint8
			v, err = r.uint8()
			m.Reason = frames.Reason(v)
		case 4:
			m.FrameID, err = r.str()
		}
		return err
	})
}

func readGetStackReply(r *reader, m *messages.GetStackReply) error {
	return r.fields(func(k []byte) int {
		switch string(k) {
		case "err":
			return 0
		case "ver":
			return 1
		case "fs":
			return 2
		case "chh":
			return 3
		case "pos":
			return 4
		}
		return -1
	}, func(r *reader, i int) (err error) {
		switch i {
		case 0:
			m.Err = new(messages.Error)
			return r.other(m.Err)
		case 1:
			m.Version, err = r.int()
			return err
		case 3:
			m.ChainHead, err = r.str()
			return err
		case 4:
			m.Position, err = r.uint64()
			return err
		}
		n, err := r.arrayLen()
		if err != nil {
			return err
		}
		if n > r.left() {
			return errFallback
		}
		m.Frames = make([]messages.FrameSummary, n)
		for j := range m.Frames {
			if err := readFrameSummary(r, &m.Frames[j]); err != nil {
				return err
			}
		}
		return nil
	})
}

// frameSummaryKey is the index of a FrameSummary key, -1 for none.
func frameSummaryKey(k []byte) int {
	switch string(k) {
	case "id":
		return 0
	case "pa":
		return 1
	case "g":
		return 2
	case "st":
		return 3
	case "d":
		return 4
	case "b":
		return 5
	case "l":
		return 6
	case "c":
		return 7
	case "h":
		return 8
	case "ct":
		return 9
	case "r":
		return 10
	case "ch":
		return 11
	case "id2":
		return 12
	case "su":
		return 13
	case "at":
		return 14
	case "ca":
		return 15
	}
	return -1
}

func readFrameSummary(r *reader, f *messages.FrameSummary) error {
	n, err := r.mapLen()
	if err != nil {
		return err
	}
	var seen uint32
	for ; n > 0; n-- {
		i, err := r.key(&seen, frameSummaryKey)
		if err != nil {
			return err
		}
		var v int64
		switch i {
		case 0:
			f.ID, err = r.str()
		case 1:
			f.ParentID, err = r.str()
		case 2:
			f.Goal, err = r.str()
		case 3:
			var s uint8
			s, err = r.uint8()
			f.Status = frames.Status(s)
		case 4:
			f.Depth, err = r.int()
		case 5:
			b := &f.Budget
			err = readInts(r, "turs", &b.Total, &b.Used, &b.Reserved, &b.SubcallAllocation, nil, &b.MaxSubframeDepth)
		case 6:
			l := &f.Limits
			err = readInts(r, "ktsp", &l.Tokens, &l.Turns, &l.SpendMicros, &l.Spawns, nil, &l.DurationMillis)
		case 7:
			c := &f.Cost
			err = readInts(r, "iotsp", &c.InputTokens, &c.OutputTokens, &c.Turns, &c.SpendMicros, &c.Spawns, &c.DurationMillis)
		case 8:
			v, err = r.int()
			f.Handles = int(v)
		case 9:
			f.ContextTokens, err = r.int()
		case 10:
			v, err = r.int()
			f.Results = int(v)
		case 11:
			var c int
			if c, err = r.arrayLen(); err != nil {
				return err
			}
			if c > r.left() {
				return errFallback
			}
			f.Children = make([]string, c)
			for j := range f.Children {
				if f.Children[j], err = r.str(); err != nil {
					return err
				}
			}
		case 12:
			err = r.other(&f.InDoubt)
		case 13:
			f.Suspension = new(frames.Suspension)
			err = r.other(f.Suspension)
		case 14:
			f.CreatedAt, err = r.int()
		case 15:
			f.CompletedAt, err = r.int()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// readInts reads a map-encoded struct of up to six int64 fields: keys
// names the first ones (one letter each, in order: a, b, c, d, e), "d" is
// always last; a nil field has no key.
func readInts(r *reader, keys string, a, b, c, d, e, last *int64) error {
	n, err := r.mapLen()
	if err != nil {
		return err
	}
	fields := [6]*int64{a, b, c, d, e, last}
	var seen uint32
	for ; n > 0; n-- {
		k, err := r.strBytes()
		if err != nil {
			return err
		}
		i := -1
		if len(k) == 1 {
			if k[0] == 'd' {
				i = 5
			} else if j := strings.IndexByte(keys, k[0]); j >= 0 {
				i = j
			}
		}
		if i < 0 || fields[i] == nil || seen&(1<<i) != 0 {
			return errFallback
		}
		seen |= 1 << i
		if *fields[i], err = r.int(); err != nil {
			return err
		}
	}
	return nil
}
