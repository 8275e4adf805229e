package eventstore

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strings"
	"unicode/utf8"
)

// Stored values. Records and snapshots are msgpack maps with one-letter
// keys (the schemas are recordEnvelope and snapshotEnvelope). The encoder
// writes them in one canonical layout whose fixed-width fields sit at fixed
// offsets, so a caller can encode an event before the committer knows its
// sequence, version and predecessor, and the committer only patches those
// bytes in. The decoder is strict: the envelope version must be the first
// field, every field must be present exactly once, no unknown field and no
// trailing byte is accepted; it accepts any msgpack width for numbers.

const (
	// FormatVersion is the on-disk format of a bolt data file, stored in its
	// meta bucket. Open refuses any other value with ErrUnsupportedFormat.
	FormatVersion uint32 = 1

	// recordEnvelopeVersion is the "v" field of every record.
	recordEnvelopeVersion = 1
	// snapshotEnvelopeVersion is the "v" field of every snapshot.
	snapshotEnvelopeVersion = 1
	// headFormat is the first byte of a stream's head metadata value.
	headFormat = 1

	// MaxStreamBytes is the longest stream name accepted.
	MaxStreamBytes = 128
	// MaxEventTypeBytes is the longest event type accepted.
	MaxEventTypeBytes = 255
)

// recordEnvelope documents the schema of a stored record. The store encodes
// and decodes it by hand (see appendRecord and parseRecord); tests check that
// the msgpack library reads the same bytes into this struct.
type recordEnvelope struct {
	V       uint8  `msgpack:"v"` // envelope version, always the first field
	Seq     uint64 `msgpack:"q"` // global sequence
	Version int64  `msgpack:"n"` // stream version
	Prev    []byte `msgpack:"p"` // 32-byte hash of the previous record of the stream
	Stream  string `msgpack:"s"`
	Type    string `msgpack:"t"`
	Data    []byte `msgpack:"d"`
}

// snapshotEnvelope documents the schema of a stored snapshot. Checksum is
// the SHA-256 of the stored bytes with the checksum bytes zeroed.
type snapshotEnvelope struct {
	V        uint8  `msgpack:"v"`
	Version  int64  `msgpack:"n"`
	Format   uint32 `msgpack:"f"`
	Checksum []byte `msgpack:"c"`
	Stream   string `msgpack:"s"`
	Data     []byte `msgpack:"d"`
}

// Canonical record layout:
//
//	0x87                      fixmap, 7 entries
//	a1 'v' 01                 envelope version
//	a1 'q' cf <8 bytes>       seq (uint64)      at recOffSeq
//	a1 'n' d3 <8 bytes>       version (int64)   at recOffVersion
//	a1 'p' c4 20 <32 bytes>   prev hash (bin8)  at recOffPrev
//	a1 's' <str>              stream
//	a1 't' <str>              type
//	a1 'd' <bin>              data
const (
	recOffSeq     = 7
	recOffVersion = 18
	recOffPrev    = 30
	recFixedLen   = 62
)

var recordHeader = func() []byte {
	b := make([]byte, 0, recFixedLen)
	b = append(b, 0x87, 0xa1, 'v', recordEnvelopeVersion)
	b = append(b, 0xa1, 'q', 0xcf, 0, 0, 0, 0, 0, 0, 0, 0)
	b = append(b, 0xa1, 'n', 0xd3, 0, 0, 0, 0, 0, 0, 0, 0)
	b = append(b, 0xa1, 'p', 0xc4, sha256.Size)
	b = append(b, make([]byte, sha256.Size)...)
	return b
}()

// Canonical snapshot layout:
//
//	0x86
//	a1 'v' 01
//	a1 'n' d3 <8 bytes>       version           at snapOffVersion
//	a1 'f' ce <4 bytes>       format (uint32)   at snapOffFormat
//	a1 'c' c4 20 <32 bytes>   checksum          at snapOffChecksum
//	a1 's' <str>
//	a1 'd' <bin>
const (
	snapOffVersion  = 7
	snapOffFormat   = 18
	snapOffChecksum = 26
	snapFixedLen    = 58
)

var snapshotHeader = func() []byte {
	b := make([]byte, 0, snapFixedLen)
	b = append(b, 0x86, 0xa1, 'v', snapshotEnvelopeVersion)
	b = append(b, 0xa1, 'n', 0xd3, 0, 0, 0, 0, 0, 0, 0, 0)
	b = append(b, 0xa1, 'f', 0xce, 0, 0, 0, 0)
	b = append(b, 0xa1, 'c', 0xc4, sha256.Size)
	b = append(b, make([]byte, sha256.Size)...)
	return b
}()

func strHeaderLen(n int) int {
	switch {
	case n < 32:
		return 1
	case n < 1<<8:
		return 2
	case n < 1<<16:
		return 3
	default:
		return 5
	}
}

func binHeaderLen(n int) int {
	switch {
	case n < 1<<8:
		return 2
	case n < 1<<16:
		return 3
	default:
		return 5
	}
}

func appendStr(b []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n < 1<<8:
		b = append(b, 0xd9, byte(n))
	case n < 1<<16:
		b = append(b, 0xda, byte(n>>8), byte(n))
	default:
		b = append(b, 0xdb, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(b, s...)
}

func appendBin(b []byte, p []byte) []byte {
	n := len(p)
	switch {
	case n < 1<<8:
		b = append(b, 0xc4, byte(n))
	case n < 1<<16:
		b = append(b, 0xc5, byte(n>>8), byte(n))
	default:
		b = append(b, 0xc6, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(b, p...)
}

// recordSize is the encoded size of a record; it does not depend on the
// sequence, version or predecessor.
func recordSize(streamLen, typeLen, dataLen int) int {
	return recFixedLen +
		2 + strHeaderLen(streamLen) + streamLen +
		2 + strHeaderLen(typeLen) + typeLen +
		2 + binHeaderLen(dataLen) + dataLen
}

// appendRecord encodes a record with zero sequence, version and predecessor;
// patchRecord fills them in once they are known.
func appendRecord(b []byte, stream, typ string, data []byte) []byte {
	b = append(b, recordHeader...)
	b = append(b, 0xa1, 's')
	b = appendStr(b, stream)
	b = append(b, 0xa1, 't')
	b = appendStr(b, typ)
	b = append(b, 0xa1, 'd')
	return appendBin(b, data)
}

func patchRecord(rec []byte, seq uint64, version int64, prev *Hash) {
	binary.BigEndian.PutUint64(rec[recOffSeq:], seq)
	binary.BigEndian.PutUint64(rec[recOffVersion:], uint64(version))
	copy(rec[recOffPrev:recOffPrev+sha256.Size], prev[:])
}

// snapshotSize is the encoded size of a snapshot.
func snapshotSize(streamLen, dataLen int) int {
	return snapFixedLen + 2 + strHeaderLen(streamLen) + streamLen + 2 + binHeaderLen(dataLen) + dataLen
}

// encodeSnapshot encodes a snapshot into dst (reusing its capacity) and
// seals it with its checksum.
func encodeSnapshot(dst []byte, stream string, snap *Snapshot) []byte {
	b := dst[:0]
	if n := snapshotSize(len(stream), len(snap.Data)); cap(b) < n {
		b = make([]byte, 0, n)
	}
	b = append(b, snapshotHeader...)
	binary.BigEndian.PutUint64(b[snapOffVersion:], uint64(snap.Version))
	binary.BigEndian.PutUint32(b[snapOffFormat:], snap.Format)
	b = append(b, 0xa1, 's')
	b = appendStr(b, stream)
	b = append(b, 0xa1, 'd')
	b = appendBin(b, snap.Data)
	sum := sha256.Sum256(b) // checksum bytes are still zero here
	copy(b[snapOffChecksum:], sum[:])
	return b
}

// errEnvelopeVersion is returned by the parsers for an envelope version this
// build does not know.
type errEnvelopeVersion struct{ got uint64 }

func (e errEnvelopeVersion) Error() string {
	return fmt.Sprintf("envelope version %d is unknown", e.got)
}

// mpReader reads the msgpack subset the envelopes use. It never panics and
// never allocates: every length is checked against the bytes left.
type mpReader struct {
	b   []byte
	off int
}

var errTruncated = errors.New("truncated msgpack value")

func (r *mpReader) code() (byte, error) {
	if r.off >= len(r.b) {
		return 0, errTruncated
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *mpReader) take(n int) ([]byte, error) {
	if n < 0 || n > len(r.b)-r.off {
		return nil, errTruncated
	}
	p := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return p, nil
}

func (r *mpReader) be(n int) (uint64, error) {
	p, err := r.take(n)
	if err != nil {
		return 0, err
	}
	var v uint64
	for _, c := range p {
		v = v<<8 | uint64(c)
	}
	return v, nil
}

func (r *mpReader) mapLen() (int, error) {
	c, err := r.code()
	if err != nil {
		return 0, err
	}
	switch {
	case c >= 0x80 && c <= 0x8f:
		return int(c & 0x0f), nil
	case c == 0xde:
		n, err := r.be(2)
		return int(n), err
	case c == 0xdf:
		n, err := r.be(4)
		return int(n), err
	}
	return 0, fmt.Errorf("msgpack code 0x%02x where a map was expected", c)
}

func (r *mpReader) str() ([]byte, error) {
	c, err := r.code()
	if err != nil {
		return nil, err
	}
	var n uint64
	switch {
	case c >= 0xa0 && c <= 0xbf:
		n = uint64(c & 0x1f)
	case c == 0xd9:
		n, err = r.be(1)
	case c == 0xda:
		n, err = r.be(2)
	case c == 0xdb:
		n, err = r.be(4)
	default:
		return nil, fmt.Errorf("msgpack code 0x%02x where a string was expected", c)
	}
	if err != nil {
		return nil, err
	}
	return r.take(int(n))
}

func (r *mpReader) bin() ([]byte, error) {
	c, err := r.code()
	if err != nil {
		return nil, err
	}
	var n uint64
	switch c {
	case 0xc4:
		n, err = r.be(1)
	case 0xc5:
		n, err = r.be(2)
	case 0xc6:
		n, err = r.be(4)
	default:
		return nil, fmt.Errorf("msgpack code 0x%02x where binary data was expected", c)
	}
	if err != nil {
		return nil, err
	}
	return r.take(int(n))
}

// integer reads any msgpack integer as a sign and a magnitude-preserving
// 64-bit pattern: neg reports a negative value (v then holds its two's
// complement).
func (r *mpReader) integer() (v uint64, neg bool, err error) {
	c, err := r.code()
	if err != nil {
		return 0, false, err
	}
	switch {
	case c <= 0x7f:
		return uint64(c), false, nil
	case c >= 0xe0:
		return uint64(int64(int8(c))), true, nil
	}
	switch c {
	case 0xcc, 0xcd, 0xce, 0xcf:
		v, err = r.be(1 << (c - 0xcc))
		return v, false, err
	case 0xd0, 0xd1, 0xd2, 0xd3:
		width := 1 << (c - 0xd0)
		v, err = r.be(width)
		if err != nil {
			return 0, false, err
		}
		shift := 64 - 8*uint(width)
		s := int64(v<<shift) >> shift // sign-extend
		return uint64(s), s < 0, nil
	}
	return 0, false, fmt.Errorf("msgpack code 0x%02x where an integer was expected", c)
}

func (r *mpReader) uint() (uint64, error) {
	v, neg, err := r.integer()
	if err == nil && neg {
		err = errors.New("negative integer where an unsigned one was expected")
	}
	return v, err
}

func (r *mpReader) int() (int64, error) {
	v, neg, err := r.integer()
	if err == nil && !neg && v > math.MaxInt64 {
		err = errors.New("integer overflows int64")
	}
	return int64(v), err
}

// envelopeVersion reads the map header and the leading "v" field.
func (r *mpReader) envelopeVersion() (fields int, v uint64, err error) {
	n, err := r.mapLen()
	if err != nil {
		return 0, 0, err
	}
	if n < 1 {
		return 0, 0, errors.New("envelope is an empty map")
	}
	k, err := r.str()
	if err != nil {
		return 0, 0, err
	}
	if len(k) != 1 || k[0] != 'v' {
		return 0, 0, errors.New("envelope does not start with its version field")
	}
	v, err = r.uint()
	return n, v, err
}

// recordFields is a decoded record; the byte slices alias the stored value.
type recordFields struct {
	seq     uint64
	version int64
	prev    Hash
	stream  []byte
	typ     []byte
	data    []byte
}

// envelope walks a canonical stored envelope: a map whose first field is
// the envelope version, then single-letter fields, each exactly once, and no
// trailing byte. The parser loops on next, decodes the value of key with r,
// and reports the key's bit (0: not a field of this envelope) to mark; done
// checks that every field was seen. A plain loop rather than a callback, so
// that decoding a record allocates nothing.
type envelope struct {
	r    mpReader
	what string // names the envelope in errors
	n, i int
	key  []byte
	seen uint8
	err  error
}

func openEnvelope(b []byte, what string, version uint64) (envelope, error) {
	e := envelope{r: mpReader{b: b}, what: what, i: 1}
	n, v, err := e.r.envelopeVersion()
	if err != nil {
		return e, err
	}
	if v != version {
		return e, errEnvelopeVersion{got: v}
	}
	e.n = n
	return e, nil
}

// next reads the next key; false at the end or on an error.
func (e *envelope) next() bool {
	if e.err != nil || e.i >= e.n {
		return false
	}
	e.i++
	if e.key, e.err = e.r.str(); e.err != nil {
		return false
	}
	if len(e.key) != 1 {
		e.err = fmt.Errorf("unknown %s field %s", e.what, quoteString(e.key))
		return false
	}
	return true
}

// mark records the outcome of decoding the current key's value.
func (e *envelope) mark(bit uint8, err error) {
	switch {
	case err != nil:
		e.err = fmt.Errorf("field %s: %w", quoteString(e.key), err)
	case bit == 0:
		e.err = fmt.Errorf("unknown %s field %s", e.what, quoteString(e.key))
	case e.seen&bit != 0:
		e.err = fmt.Errorf("duplicate %s field %s", e.what, quoteString(e.key))
	default:
		e.seen |= bit
	}
}

// done reports the walk's first error, a missing field or trailing bytes.
func (e *envelope) done(all uint8) error {
	if e.err != nil {
		return e.err
	}
	if e.seen != all {
		return fmt.Errorf("%s fields missing (have mask %0*b)", e.what, bits.Len8(all), e.seen)
	}
	if e.r.off != len(e.r.b) {
		return fmt.Errorf("%d trailing bytes after the %s", len(e.r.b)-e.r.off, e.what)
	}
	return nil
}

// parseRecord decodes a stored record without copying. It returns an
// errEnvelopeVersion for an unknown envelope version and a plain error for
// anything else that is wrong.
func parseRecord(b []byte, f *recordFields) error {
	e, err := openEnvelope(b, "record", recordEnvelopeVersion)
	if err != nil {
		return err
	}
	for e.next() {
		r := &e.r
		switch e.key[0] {
		case 'q':
			f.seq, err = r.uint()
			e.mark(1, err)
		case 'n':
			f.version, err = r.int()
			e.mark(2, err)
		case 'p':
			var p []byte
			if p, err = r.bin(); err == nil && len(p) != sha256.Size {
				err = fmt.Errorf("prev hash is %d bytes, want %d", len(p), sha256.Size)
			}
			copy(f.prev[:], p)
			e.mark(4, err)
		case 's':
			f.stream, err = r.str()
			e.mark(8, err)
		case 't':
			f.typ, err = r.str()
			e.mark(16, err)
		case 'd':
			f.data, err = r.bin()
			e.mark(32, err)
		default:
			e.mark(0, nil)
		}
	}
	return e.done(63)
}

// snapshotFields is a decoded snapshot; the byte slices alias the stored value.
type snapshotFields struct {
	version     int64
	format      uint32
	checksum    Hash
	checksumOff int
	stream      []byte
	data        []byte
}

func parseSnapshot(b []byte, f *snapshotFields) error {
	e, err := openEnvelope(b, "snapshot", snapshotEnvelopeVersion)
	if err != nil {
		return err
	}
	for e.next() {
		r := &e.r
		switch e.key[0] {
		case 'n':
			f.version, err = r.int()
			e.mark(1, err)
		case 'f':
			var u uint64
			if u, err = r.uint(); err == nil && u > math.MaxUint32 {
				err = errors.New("format overflows uint32")
			}
			f.format = uint32(u)
			e.mark(2, err)
		case 'c':
			var p []byte
			if p, err = r.bin(); err == nil && len(p) != sha256.Size {
				err = fmt.Errorf("checksum is %d bytes, want %d", len(p), sha256.Size)
			}
			copy(f.checksum[:], p)
			f.checksumOff = r.off - len(p)
			e.mark(4, err)
		case 's':
			f.stream, err = r.str()
			e.mark(8, err)
		case 'd':
			f.data, err = r.bin()
			e.mark(16, err)
		default:
			e.mark(0, nil)
		}
	}
	if err := e.done(31); err != nil {
		return err
	}
	var zero Hash
	h := sha256.New()
	h.Write(b[:f.checksumOff])
	h.Write(zero[:])
	h.Write(b[f.checksumOff+sha256.Size:])
	var sum Hash
	h.Sum(sum[:0])
	if sum != f.checksum {
		return errors.New("snapshot checksum mismatch")
	}
	return nil
}

// decodeSnapshot turns a stored snapshot into a Snapshot owned by the caller,
// checking that it belongs to stream.
func decodeSnapshot(stream string, b []byte) (Snapshot, error) {
	var f snapshotFields
	if err := parseSnapshot(b, &f); err != nil {
		var ev errEnvelopeVersion
		if errors.As(err, &ev) {
			return Snapshot{}, fmt.Errorf("%w: snapshot of stream %q: envelope version %d (this build reads %d)",
				ErrUnsupportedFormat, stream, ev.got, snapshotEnvelopeVersion)
		}
		return Snapshot{}, &CorruptionError{Stream: stream, Reason: "undecodable snapshot", Err: err}
	}
	if string(f.stream) != stream {
		return Snapshot{}, corrupt(stream, 0, "snapshot names stream "+quoteString(f.stream))
	}
	if f.version < 1 {
		return Snapshot{}, corrupt(stream, 0, fmt.Sprintf("snapshot has version %d", f.version))
	}
	return Snapshot{Version: f.version, Format: f.format, Data: cloneBytes(f.data)}, nil
}

// Head metadata of a stream: [headFormat][version BE 8][hash 32].
const headLen = 1 + 8 + sha256.Size

func appendHead(b []byte, version int64, h *Hash) []byte {
	b = append(b, headFormat)
	b = binary.BigEndian.AppendUint64(b, uint64(version))
	return append(b, h[:]...)
}

func decodeHead(stream string, b []byte) (int64, Hash, error) {
	var h Hash
	if len(b) > 0 && b[0] != headFormat {
		return 0, h, fmt.Errorf("%w: metadata of stream %q has format %d (this build reads %d)",
			ErrUnsupportedFormat, stream, b[0], headFormat)
	}
	if len(b) != headLen {
		return 0, h, corrupt(stream, 0, fmt.Sprintf("stream metadata is %d bytes, want %d", len(b), headLen))
	}
	v := int64(binary.BigEndian.Uint64(b[1:9]))
	if v < 1 {
		return 0, h, corrupt(stream, 0, fmt.Sprintf("stream metadata has head version %d", v))
	}
	copy(h[:], b[9:])
	return v, h, nil
}

// Global index value: [version BE 8][stream name].
func appendIndexValue(b []byte, version int64, stream string) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(version))
	return append(b, stream...)
}

func cloneBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

// interner reuses the string of a byte sequence seen before, so a replay of
// a stream allocates each event type once rather than once per record.
type interner struct{ m map[string]string }

func (in *interner) get(b []byte) string {
	if s, ok := in.m[string(b)]; ok {
		return s
	}
	s := string(b)
	if in.m == nil {
		in.m = make(map[string]string)
	}
	if len(in.m) < 1024 {
		in.m[s] = s
	}
	return s
}

// checkStream validates a stream name.
func checkStream(s string) error {
	if s == "" {
		return ErrEmptyStream
	}
	if len(s) > MaxStreamBytes {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidStream, len(s), MaxStreamBytes)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %q is not valid UTF-8", ErrInvalidStream, s)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("%w: %q contains a NUL byte", ErrInvalidStream, s)
	}
	return nil
}

func checkEventType(i int, t string) error {
	if t == "" {
		return fmt.Errorf("%w (event %d)", ErrEmptyEventType, i)
	}
	if len(t) > MaxEventTypeBytes {
		return fmt.Errorf("%w (event %d): %d bytes, at most %d", ErrInvalidEventType, i, len(t), MaxEventTypeBytes)
	}
	if !utf8.ValidString(t) || strings.IndexByte(t, 0) >= 0 {
		return fmt.Errorf("%w (event %d): %q is not valid UTF-8 without NUL", ErrInvalidEventType, i, t)
	}
	return nil
}

func checkExpected(expected int64) error {
	if expected < Any {
		return fmt.Errorf("%w: %d (use NoStream, Any or a version >= 1)", ErrInvalidExpectedVersion, expected)
	}
	return nil
}

// encodeAppend validates an append and encodes its events back to back
// into buf (reusing its capacity); ends receives each record's end offset.
// It runs in the caller's goroutine so that the CPU work of encoding is
// spread over callers rather than serialised in the committer.
func encodeAppend(buf []byte, ends []int, stream string, expected int64, events []Event, lim *Limits) ([]byte, []int, error) {
	if err := checkStream(stream); err != nil {
		return buf, ends, err
	}
	if err := checkExpected(expected); err != nil {
		return buf, ends, err
	}
	if len(events) == 0 {
		return buf, ends, ErrNoEvents
	}
	total := 0
	for i := range events {
		ev := &events[i]
		if err := checkEventType(i, ev.Type); err != nil {
			return buf, ends, err
		}
		n := recordSize(len(stream), len(ev.Type), len(ev.Data))
		if n > lim.MaxRecordBytes {
			return buf, ends, fmt.Errorf("%w: event %d (%s) encodes to %d bytes, limit %d",
				ErrRecordTooLarge, i, ev.Type, n, lim.MaxRecordBytes)
		}
		total += n
		if total > lim.MaxAppendBytes {
			return buf, ends, fmt.Errorf("%w: %d events encode to more than %d bytes",
				ErrAppendTooLarge, len(events), lim.MaxAppendBytes)
		}
	}
	if cap(buf) < total {
		buf = make([]byte, 0, total)
	}
	buf = buf[:0]
	ends = ends[:0]
	for i := range events {
		buf = appendRecord(buf, stream, events[i].Type, events[i].Data)
		ends = append(ends, len(buf))
	}
	return buf, ends, nil
}

// checkSnapshot validates a snapshot's input; the version's upper bound (the
// head) is checked where the head is known.
func checkSnapshot(stream string, snap *Snapshot, lim *Limits) error {
	if err := checkStream(stream); err != nil {
		return err
	}
	if snap.Version < 1 {
		return fmt.Errorf("%w: %d (must be between 1 and the stream's head)", ErrInvalidSnapshotVersion, snap.Version)
	}
	if n := snapshotSize(len(stream), len(snap.Data)); n > lim.MaxSnapshotBytes {
		return fmt.Errorf("%w: encodes to %d bytes, limit %d", ErrSnapshotTooLarge, n, lim.MaxSnapshotBytes)
	}
	return nil
}

func snapshotBeyondHead(stream string, version, head int64) error {
	return fmt.Errorf("%w: %d, stream %q is at version %d", ErrInvalidSnapshotVersion, version, stream, head)
}
