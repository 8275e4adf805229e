package eventstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// The write-ahead journal: a bounded set of preallocated segment files in
// DATAFILE.journal/, written sequentially, one frame per group commit, one
// fdatasync per frame. See doc.go for the layout and the rules.

const (
	segHeaderSize   = 4096 // the first block of a segment: its header
	frameHeaderSize = 32
	frameAlign      = 8
	minSegmentBytes = 64 << 10
	maxSegmentBytes = 1 << 30

	segmentFormat = 1
	frameRecords  = 1 // frame kind: a group commit's records

	journalSuffix = ".journal"
	segmentExt    = ".seg"
)

var segMagic = [8]byte{'S', 'I', 'J', 'R', 'N', 'L', 0, 1}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// JournalDir is the directory of the journal of the data file at path.
func JournalDir(path string) string { return path + journalSuffix }

// segment is one preallocated journal file.
type segment struct {
	slot    int
	path    string
	f       *os.File
	size    int64
	gen     uint64 // generation of its current use; 0: none (a fresh file)
	lastSeq uint64 // highest sequence written in this generation (0: none)
}

// segHeader is a segment's first block.
type segHeader struct {
	gen     uint64
	covered uint64 // bbolt's durable last sequence when the segment was prepared
	size    uint64
}

func encodeSegHeader(h segHeader) []byte {
	b := make([]byte, segHeaderSize)
	copy(b, segMagic[:])
	binary.LittleEndian.PutUint32(b[8:], segmentFormat)
	binary.LittleEndian.PutUint64(b[16:], h.gen)
	binary.LittleEndian.PutUint64(b[24:], h.covered)
	binary.LittleEndian.PutUint64(b[32:], h.size)
	binary.LittleEndian.PutUint32(b[40:], crc32.Checksum(b[:40], castagnoli))
	return b
}

func decodeSegHeader(b []byte) (segHeader, error) {
	if len(b) < 44 {
		return segHeader{}, errors.New("header is truncated")
	}
	if [8]byte(b[:8]) != segMagic {
		return segHeader{}, errors.New("not a journal segment (bad magic)")
	}
	if crc32.Checksum(b[:40], castagnoli) != binary.LittleEndian.Uint32(b[40:]) {
		return segHeader{}, errors.New("header checksum mismatch")
	}
	if f := binary.LittleEndian.Uint32(b[8:]); f != segmentFormat {
		return segHeader{}, fmt.Errorf("%w: segment format %d; this build reads %d", ErrUnsupportedFormat, f, segmentFormat)
	}
	return segHeader{
		gen:     binary.LittleEndian.Uint64(b[16:]),
		covered: binary.LittleEndian.Uint64(b[24:]),
		size:    binary.LittleEndian.Uint64(b[32:]),
	}, nil
}

// Frame header, little-endian:
//
//	[0:4]   payload length
//	[4:8]   CRC-32C of [0:4], [8:32] and the payload
//	[8:16]  the segment's generation
//	[16:24] the first record's global sequence
//	[24:28] the number of records
//	[28:32] the frame kind
//
// The payload is the records, each a 4-byte length and the record's stored
// bytes (stream, version, sequence and predecessor hash included); the
// frame is padded with zeros to a multiple of 8 bytes.

func frameSize(payload int) int {
	n := frameHeaderSize + payload
	return (n + frameAlign - 1) &^ (frameAlign - 1)
}

func frameCRC(b []byte, payloadLen int) uint32 {
	c := crc32.Update(0, castagnoli, b[0:4])
	return crc32.Update(c, castagnoli, b[8:frameHeaderSize+payloadLen])
}

// sealFrame fills the header of a frame whose payload is in place.
func sealFrame(b []byte, gen, firstSeq uint64, count int) {
	payload := len(b) - frameHeaderSize
	binary.LittleEndian.PutUint32(b[0:], uint32(payload))
	binary.LittleEndian.PutUint64(b[8:], gen)
	binary.LittleEndian.PutUint64(b[16:], firstSeq)
	binary.LittleEndian.PutUint32(b[24:], uint32(count))
	binary.LittleEndian.PutUint32(b[28:], frameRecords)
	binary.LittleEndian.PutUint32(b[4:], frameCRC(b, payload))
}

// frameAt checks the frame at off of seg's bytes. ok is false when there is
// no valid frame of generation gen there.
func frameAt(data []byte, off int64, gen uint64) (payload []byte, firstSeq uint64, count int, size int64, ok bool) {
	if off+frameHeaderSize > int64(len(data)) {
		return nil, 0, 0, 0, false
	}
	h := data[off : off+frameHeaderSize]
	if binary.LittleEndian.Uint64(h[8:]) != gen {
		return nil, 0, 0, 0, false
	}
	n := int64(binary.LittleEndian.Uint32(h[0:]))
	if n == 0 || off+frameHeaderSize+n > int64(len(data)) {
		return nil, 0, 0, 0, false
	}
	b := data[off : off+frameHeaderSize+n]
	if frameCRC(b, int(n)) != binary.LittleEndian.Uint32(h[4:]) || binary.LittleEndian.Uint32(h[28:]) != frameRecords {
		return nil, 0, 0, 0, false
	}
	return b[frameHeaderSize:], binary.LittleEndian.Uint64(h[16:]), int(binary.LittleEndian.Uint32(h[24:])), int64(frameSize(int(n))), true
}

// isBlank says whether a frame position holds nothing written in this
// generation: zeros (a fresh segment) or a frame of an earlier generation
// (a recycled segment's stale bytes). A header that is neither — a
// generation of zero or above this one with other fields set, or an
// earlier generation that claims the very sequence expected next — is a
// damaged frame of this generation.
func isBlank(data []byte, off int64, gen, nextSeq uint64) bool {
	if off+frameHeaderSize > int64(len(data)) {
		return true
	}
	h := data[off : off+frameHeaderSize]
	g := binary.LittleEndian.Uint64(h[8:])
	switch {
	case g == gen:
		return false
	case g == 0:
		for _, b := range h {
			if b != 0 {
				return false
			}
		}
		return true
	case g > gen:
		return false
	}
	return nextSeq == 0 || binary.LittleEndian.Uint64(h[16:]) != nextSeq
}

// splitFrame cuts a frame's payload into its records.
func splitFrame(payload []byte, count int, fn func(raw []byte) error) error {
	for i := 0; i < count; i++ {
		if len(payload) < 4 {
			return errors.New("frame payload ends inside a record length")
		}
		n := int(binary.LittleEndian.Uint32(payload))
		if n <= 0 || 4+n > len(payload) {
			return fmt.Errorf("record %d of the frame has length %d beyond the frame", i, n)
		}
		if err := fn(payload[4 : 4+n]); err != nil {
			return err
		}
		payload = payload[4+n:]
	}
	return nil
}

// segmentSlot parses a segment file name ("00000003.seg").
func segmentSlot(name string) (int, bool) {
	base, ok := strings.CutSuffix(name, segmentExt)
	if !ok || len(base) != 8 {
		return 0, false
	}
	n, err := strconv.Atoi(base)
	return n, err == nil && n >= 0
}

func segmentPath(dir string, slot int) string {
	return filepath.Join(dir, fmt.Sprintf("%08d%s", slot, segmentExt))
}

// JournalError is damage found in the journal: the store refuses to open
// rather than drop or misread acknowledged records. It matches ErrCorrupt.
type JournalError struct {
	Segment string // file path
	Offset  int64  // byte offset in the segment (-1: the whole segment)
	Reason  string
}

func (e *JournalError) Error() string {
	if e.Offset < 0 {
		return fmt.Sprintf("eventstore: journal %s: %s", e.Segment, e.Reason)
	}
	return fmt.Sprintf("eventstore: journal %s at offset %d: %s", e.Segment, e.Offset, e.Reason)
}

func (e *JournalError) Is(target error) bool { return target == ErrCorrupt }

// scannedSegment is what the replay learned about one segment file.
type scannedSegment struct {
	seg    *segment
	hdr    segHeader
	hdrErr error
	frames []scannedFrame
	end    int64 // offset after the last valid frame
	torn   bool  // a bad frame at end with nothing valid after it
}

type scannedFrame struct {
	off      int64
	firstSeq uint64
	count    int
	payload  []byte
}

// scanSegment reads a segment's frames of its generation, stopping at the
// first position that holds none. A bad frame followed by a valid one of
// the same generation is corruption; a bad frame with nothing valid after
// it is a torn write, cut.
func scanSegment(s *scannedSegment, data []byte) error {
	off := int64(segHeaderSize)
	gen := s.hdr.gen
	var nextSeq uint64
	for {
		payload, first, count, size, ok := frameAt(data, off, gen)
		if ok {
			s.frames = append(s.frames, scannedFrame{off: off, firstSeq: first, count: count, payload: payload})
			off += size
			nextSeq = first + uint64(count)
			continue
		}
		s.end = off
		blank := isBlank(data, off, gen, nextSeq)
		// Anything valid of this generation further on means the frame here
		// was damaged after it was written: never cut acknowledged records.
		for p := off + frameAlign; p+frameHeaderSize <= int64(len(data)); p += frameAlign {
			if _, _, _, _, ok := frameAt(data, p, gen); ok {
				what := "a damaged frame"
				if blank {
					what = "a frame whose generation field is damaged"
				}
				return &JournalError{Segment: s.seg.path, Offset: off, Reason: fmt.Sprintf(
					"%s is followed by a valid frame at offset %d: the journal is corrupt (refusing to drop acknowledged records)", what, p)}
			}
		}
		s.torn = !blank
		return nil
	}
}

// journal is the writer's state. The committer goroutine owns active and
// off; everything else is guarded by mu.
type journal struct {
	dir      string
	segSize  int64
	maxSegs  int
	noSync   bool
	fileMode fs.FileMode
	fault    func(op string) error // test hook: an error fails the operation

	active *segment
	off    int64

	mu        sync.Mutex
	cond      *sync.Cond
	segs      []*segment // every segment file, by slot
	sealed    []*segment // full segments still needed, oldest first
	free      []*segment // segments bbolt covers, ready to be prepared
	spare     *segment   // prepared: new generation, header synced
	nextGen   uint64
	failed    error
	closed    bool
	wantSpare bool
	covered   uint64 // bbolt's durable last sequence, as last reported
	kick      func() // asks the applier goroutine to run
}

func (j *journal) inject(op string) error {
	if j.fault != nil {
		return j.fault(op)
	}
	return nil
}

// Capacity is the most frame bytes one segment holds.
func (j *journal) capacity() int64 { return j.segSize - segHeaderSize }

// write appends one sealed frame to the active segment and makes it
// durable. The caller fills the generation with j.gen() after room() said
// where the frame goes.
func (j *journal) write(frame []byte, lastSeq uint64) error {
	if err := j.inject("write"); err != nil {
		return err
	}
	// The frame goes out with a zeroed frame header after it (overwritten
	// by the next frame), so what follows the last frame on disk is blank
	// — never the stale bytes of an earlier generation, which could look
	// like a torn frame — unless a write really was torn.
	out := frame
	if j.off+int64(len(frame))+frameHeaderSize <= j.segSize && cap(frame)-len(frame) >= frameHeaderSize {
		out = frame[:len(frame)+frameHeaderSize]
		clear(out[len(frame):])
	}
	if _, err := j.active.f.WriteAt(out, j.off); err != nil {
		return err
	}
	if err := j.inject("sync"); err != nil {
		return err
	}
	if !j.noSync {
		if err := Fdatasync(j.active.f); err != nil {
			return err
		}
	}
	j.off += int64(len(frame))
	j.mu.Lock()
	j.active.lastSeq = lastSeq
	if j.spare == nil && !j.wantSpare && j.off > j.segSize/2 {
		j.wantSpare = true
		j.mu.Unlock()
		j.kick()
		return nil
	}
	j.mu.Unlock()
	return nil
}

// room makes sure the active segment has n more bytes, moving to the spare
// segment (waiting for the applier to prepare one) when it has not. It
// returns the generation the frame must carry.
func (j *journal) room(n int64) (uint64, error) {
	if j.off+n <= j.segSize {
		return j.active.gen, nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for j.spare == nil {
		if j.failed != nil {
			return 0, j.failed
		}
		if j.closed {
			return 0, ErrClosed
		}
		j.wantSpare = true
		j.mu.Unlock()
		j.kick()
		j.mu.Lock()
		if j.spare != nil || j.failed != nil || j.closed {
			continue
		}
		j.cond.Wait()
	}
	if j.active.lastSeq > 0 {
		j.sealed = append(j.sealed, j.active)
	} else {
		j.free = append(j.free, j.active)
	}
	j.active, j.spare = j.spare, nil
	j.off = segHeaderSize
	return j.active.gen, nil
}

// coveredThrough records that bbolt durably covers every sequence up to
// prev as of the commit before its latest one, and frees the sealed
// segments that hold nothing later. The lag of one commit keeps the
// records of bbolt's newest commit in the journal, so a damaged newest
// meta page is recovered from the journal.
func (j *journal) coveredThrough(prev, latest uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.covered = latest
	k := 0
	for k < len(j.sealed) && j.sealed[k].lastSeq <= prev {
		j.free = append(j.free, j.sealed[k])
		k++
	}
	if k > 0 {
		j.sealed = append(j.sealed[:0], j.sealed[k:]...)
	}
}

// needsSpare says whether the applier should prepare a spare segment now.
func (j *journal) needsSpare() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.spare == nil && j.wantSpare && j.failed == nil && !j.closed
}

// waiting says whether the committer waits for a segment that only an
// application of the journal can free.
func (j *journal) starved() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.spare == nil && j.wantSpare && len(j.free) == 0 && len(j.segs) >= j.maxSegs
}

// prepareSpare readies the next segment: a free one gets a new generation
// in its header, or a new file is created (zero-filled, synced) while the
// journal has fewer than maxSegs. It runs on the applier's goroutine.
func (j *journal) prepareSpare() error {
	j.mu.Lock()
	if j.spare != nil || j.failed != nil || j.closed {
		j.mu.Unlock()
		return nil
	}
	var seg *segment
	created := false
	switch {
	case len(j.free) > 0:
		seg = j.free[0]
		j.free = append(j.free[:0], j.free[1:]...)
	case len(j.segs) < j.maxSegs:
		slot := 0
		for _, s := range j.segs {
			slot = max(slot, s.slot+1)
		}
		seg = &segment{slot: slot, path: segmentPath(j.dir, slot)}
		j.segs = append(j.segs, seg)
		created = true
	default:
		j.mu.Unlock()
		return nil // nothing to prepare until bbolt covers a sealed segment
	}
	gen := j.nextGen
	j.nextGen++
	covered := j.covered
	j.mu.Unlock()

	err := j.prepare(seg, gen, covered, created)
	j.mu.Lock()
	defer j.mu.Unlock()
	if err != nil {
		j.failed = fmt.Errorf("eventstore: preparing journal segment %s: %w", seg.path, err)
		j.cond.Broadcast()
		return j.failed
	}
	j.spare = seg
	j.wantSpare = false
	j.cond.Broadcast()
	return nil
}

// prepare writes seg's header for generation gen (creating and zero-filling
// the file first if needed) and syncs it.
func (j *journal) prepare(seg *segment, gen, covered uint64, created bool) error {
	if err := j.inject("prepare"); err != nil {
		return err
	}
	if seg.f == nil || seg.size != j.segSize {
		if seg.f != nil {
			_ = seg.f.Close()
			seg.f = nil
		}
		f, err := os.OpenFile(seg.path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, j.fileMode)
		if err != nil {
			return err
		}
		seg.f = f
		// Write zeros: the blocks are then allocated and written, so a
		// later fdatasync of an overwrite commits no file metadata.
		zeros := make([]byte, 1<<20)
		for off := int64(0); off < j.segSize; off += int64(len(zeros)) {
			n := min(int64(len(zeros)), j.segSize-off)
			if _, err := f.WriteAt(zeros[:n], off); err != nil {
				return err
			}
		}
		seg.size = j.segSize
		created = true
	}
	// The header, and a blank frame header where the first frame goes: a
	// recycled segment's stale first frame is never the first thing read.
	hdr := append(encodeSegHeader(segHeader{gen: gen, covered: covered, size: uint64(j.segSize)}), make([]byte, frameHeaderSize)...)
	if _, err := seg.f.WriteAt(hdr, 0); err != nil {
		return err
	}
	if !j.noSync {
		if created {
			if err := seg.f.Sync(); err != nil {
				return err
			}
			if err := syncDir(j.dir); err != nil {
				return err
			}
		} else if err := Fdatasync(seg.f); err != nil {
			return err
		}
	}
	seg.gen, seg.lastSeq = gen, 0
	return nil
}

// fail makes a committer waiting for a segment give up with err (the
// store has stopped taking writes).
func (j *journal) fail(err error) {
	j.mu.Lock()
	if j.failed == nil {
		j.failed = err
	}
	j.cond.Broadcast()
	j.mu.Unlock()
}

// close marks the journal closed (waking a waiting committer) and closes
// its files.
func (j *journal) close() error {
	j.mu.Lock()
	j.closed = true
	j.cond.Broadcast()
	segs := j.segs
	j.mu.Unlock()
	var first error
	for _, s := range segs {
		if s.f != nil {
			if err := s.f.Close(); err != nil && first == nil {
				first = err
			}
			s.f = nil
		}
	}
	return first
}

// JournalStats describe the journal of an open store.
type JournalStats struct {
	Enabled      bool
	Dir          string
	Segments     int   // segment files
	SegmentBytes int64 // size of one segment
	MaxBytes     int64 // the bound: Segments never exceeds JournalSegments
	Bytes        int64 // bytes on disk (Segments × SegmentBytes)
	Pending      int   // acknowledged records not yet in bbolt
	PendingBytes int64
	Applied      uint64 // bbolt covers every sequence up to Applied
	Applications uint64 // bbolt commits made by the applier
	Frames       uint64 // journal frames written (one fdatasync each)
}

// listSegments opens every segment file of dir, creating dir if needed.
func listSegments(dir string, mode fs.FileMode) ([]*segment, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var segs []*segment
	for _, e := range entries {
		slot, ok := segmentSlot(e.Name())
		if !ok || e.IsDir() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		f, err := os.OpenFile(p, os.O_RDWR, mode)
		if err != nil {
			return nil, err
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		segs = append(segs, &segment{slot: slot, path: p, f: f, size: st.Size()})
	}
	sort.Slice(segs, func(a, b int) bool { return segs[a].slot < segs[b].slot })
	return segs, nil
}
