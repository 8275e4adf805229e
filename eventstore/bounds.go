package eventstore

import (
	"encoding/binary"
	"fmt"
)

// maxEncodingDepth bounds how deeply msgpack values may nest.
const maxEncodingDepth = 128

// CheckEncoding walks msgpack data without decoding it, and fails if a
// length prefix claims more than the bytes after it could hold (every
// array element takes at least one byte, every map entry two), if values
// nest deeper than 128 levels, or if a value is truncated. Decoding only
// what passes it keeps allocation proportional to the input.
//
// It exists because the msgpack library (v5.4.1) does not apply its own
// allocation limit to slices of structs (decodeSliceValue tests its flag
// against 1 instead of 0): fifteen bytes claiming an array of ten million
// context handles made it allocate 2.4 GB, and a larger claim ends the
// process with an out-of-memory error no recover can catch (found by
// FuzzDecodeDomain). Unmarshal calls it; so should any decoder of bytes
// that crossed a trust boundary.
func CheckEncoding(data []byte) error {
	w := boundsWalker{b: data}
	if err := w.value(0); err != nil {
		return fmt.Errorf("%w: malformed msgpack: %v", ErrCorrupt, err)
	}
	return nil
}

type boundsWalker struct {
	b   []byte
	off int
}

func (w *boundsWalker) left() int { return len(w.b) - w.off }

func (w *boundsWalker) skip(n uint64) error {
	if n > uint64(w.left()) {
		return fmt.Errorf("a length of %d at offset %d, but %d bytes follow", n, w.off, w.left())
	}
	w.off += int(n)
	return nil
}

func (w *boundsWalker) uint(width int) (uint64, error) {
	if w.left() < width {
		return 0, fmt.Errorf("truncated length at offset %d", w.off)
	}
	p := w.b[w.off : w.off+width]
	w.off += width
	switch width {
	case 1:
		return uint64(p[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(p)), nil
	}
	return uint64(binary.BigEndian.Uint32(p)), nil
}

// items walks n values (n counted after the header), each at least one byte.
func (w *boundsWalker) items(n uint64, depth int) error {
	if n > uint64(w.left()) {
		return fmt.Errorf("%d values claimed at offset %d, but %d bytes follow", n, w.off, w.left())
	}
	for range n {
		if err := w.value(depth + 1); err != nil {
			return err
		}
	}
	return nil
}

func (w *boundsWalker) value(depth int) error {
	if depth > maxEncodingDepth {
		return fmt.Errorf("values nest deeper than %d levels", maxEncodingDepth)
	}
	if w.left() < 1 {
		return fmt.Errorf("truncated value at offset %d", w.off)
	}
	c := w.b[w.off]
	w.off++
	switch {
	case c <= 0x7f, c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3: // fixint, nil, bool
		return nil
	case c >= 0x80 && c <= 0x8f: // fixmap
		return w.items(2*uint64(c&0x0f), depth)
	case c >= 0x90 && c <= 0x9f: // fixarray
		return w.items(uint64(c&0x0f), depth)
	case c >= 0xa0 && c <= 0xbf: // fixstr
		return w.skip(uint64(c & 0x1f))
	}
	switch c {
	case 0xc4, 0xd9: // bin8, str8
		n, err := w.uint(1)
		if err != nil {
			return err
		}
		return w.skip(n)
	case 0xc5, 0xda:
		n, err := w.uint(2)
		if err != nil {
			return err
		}
		return w.skip(n)
	case 0xc6, 0xdb:
		n, err := w.uint(4)
		if err != nil {
			return err
		}
		return w.skip(n)
	case 0xc7, 0xc8, 0xc9: // ext8/16/32: length, type, data
		n, err := w.uint(1 << (c - 0xc7))
		if err != nil {
			return err
		}
		return w.skip(n + 1)
	case 0xcc, 0xd0:
		return w.skip(1)
	case 0xcd, 0xd1:
		return w.skip(2)
	case 0xca, 0xce, 0xd2:
		return w.skip(4)
	case 0xcb, 0xcf, 0xd3:
		return w.skip(8)
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1..16, plus the type byte
		return w.skip(1 + 1<<(c-0xd4))
	case 0xdc, 0xde:
		n, err := w.uint(2)
		if err != nil {
			return err
		}
		if c == 0xde {
			n *= 2
		}
		return w.items(n, depth)
	case 0xdd, 0xdf:
		n, err := w.uint(4)
		if err != nil {
			return err
		}
		if c == 0xdf {
			n *= 2
		}
		return w.items(n, depth)
	}
	return fmt.Errorf("msgpack code 0x%02x at offset %d is never used", c, w.off-1)
}
