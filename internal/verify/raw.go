package verify

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"sort"
)

// The page-level check reads the data file with plain file reads and a
// bounds-checked parser of bbolt's layout (go.etcd.io/bbolt v1.5, the
// version this module pins; little-endian, as bbolt writes on the
// platforms Go supports here). It runs before the storage engine touches
// the file, because bbolt trusts its pages: a damaged one can make it panic,
// fault in its memory map, loop or recurse without end. This pass cannot:
// every offset is checked against the bytes read, every page is visited at
// most once.
//
// What it proves about the file: both meta pages are intact (bbolt silently
// falls back to the older one when the newer is damaged, losing the last
// commit); every page reachable from the current meta lies below the high
// water mark, names itself, has a valid type and is referenced once; each
// page's elements, keys and values tile it exactly, with nothing but zero
// bytes after them (bbolt writes pages from zeroed buffers); keys are in
// order within and across pages; every bucket header is well formed, with
// a zero sequence (StateIndex never uses bucket sequences); the freelist is
// sorted, in range, and together with the reachable pages covers every page
// below the high water mark exactly once; the buckets are the ones this
// build knows, holding buckets or values where they should. Free pages and
// bytes beyond the high water mark hold no data: a change there alters
// nothing any read returns, and bbolt keeps no checksum over them, so
// nothing can see it — and nothing needs to.

// bbolt's layout constants (go.etcd.io/bbolt/internal/common).
const (
	pageHeaderSize    = 16
	branchElementSize = 16
	leafElementSize   = 16
	bucketHeaderSize  = 16
	metaSize          = 64 // magic, version, page size, flags, root bucket (16), freelist, pgid, txid, checksum
	metaChecksumOff   = 56

	flagBranch   = 0x01
	flagLeaf     = 0x02
	flagMeta     = 0x04
	flagFreelist = 0x10

	leafFlagBucket = 0x01

	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	pgidNoFreelist = ^uint64(0)
)

// knownBuckets are the top-level buckets a StateIndex data file may hold,
// and whether each holds nested buckets (one per stream) or plain values.
// A bucket added to the file format must be added here, or verify reports
// it as unknown.
var knownBuckets = map[string]bool{
	"meta":        false,
	"streams":     true,
	"heads":       false,
	"seq":         false,
	"snapshots":   false,
	"checkpoints": false,
	"identity":    false,
	"index":       true,
	"bases":       false,
	"tables":      true, // one nested bucket per table (eventstore.Tables)
}

// Range is a span of bytes in the data file.
type Range struct {
	Off, Len int64
}

type rawChecker struct {
	f        io.ReaderAt
	size     int64
	ps       int64
	hwm      uint64
	reached  map[uint64]bool
	free     map[uint64]bool
	live     []Range
	problems []Problem
}

func (c *rawChecker) bad(format string, args ...any) {
	if len(c.problems) < maxProblems {
		c.problems = append(c.problems, Problem{What: fmt.Sprintf(format, args...)})
	}
}

// pageAt names a page for reports.
func (c *rawChecker) pageAt(id uint64) string {
	return fmt.Sprintf("page %d (offset %d)", id, id*uint64(c.ps))
}

// CheckPages runs the page-level check on the data file at path and
// returns what it found wrong, and the byte ranges that hold the file's
// content (meta pages, the freelist and every reachable page, whole), for
// damage tests. It does not lock the file: see File.
func CheckPages(path string) ([]Problem, []Range, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	c := &rawChecker{f: f, size: fi.Size(), reached: map[uint64]bool{}, free: map[uint64]bool{}}
	c.run()
	return c.problems, c.live, nil
}

type meta struct {
	pageSize uint32
	root     uint64
	rootSeq  uint64
	freelist uint64
	pgid     uint64
	txid     uint64
}

// readMeta reads and validates meta page idx with page size ps.
func (c *rawChecker) readMeta(idx, ps int64) (meta, error) {
	var m meta
	buf := make([]byte, ps)
	if n, err := c.f.ReadAt(buf, idx*ps); int64(n) != ps {
		return m, fmt.Errorf("cannot read it: %v", err)
	}
	le := binary.LittleEndian
	if id := le.Uint64(buf[0:]); id != uint64(idx) {
		return m, fmt.Errorf("it names itself page %d", id)
	}
	if fl, cnt, ov := le.Uint16(buf[8:]), le.Uint16(buf[10:]), le.Uint32(buf[12:]); fl != flagMeta || cnt != 0 || ov != 0 {
		return m, fmt.Errorf("page header flags %#x count %d overflow %d, want a meta page", fl, cnt, ov)
	}
	mb := buf[pageHeaderSize : pageHeaderSize+metaSize]
	if le.Uint32(mb[0:]) != boltMagic {
		return m, errors.New("bad magic number")
	}
	if v := le.Uint32(mb[4:]); v != boltVersion {
		return m, fmt.Errorf("bbolt format version %d, want %d", v, boltVersion)
	}
	h := fnv.New64a()
	h.Write(mb[:metaChecksumOff])
	if h.Sum64() != le.Uint64(mb[metaChecksumOff:]) {
		return m, errors.New("checksum mismatch")
	}
	if !allZero(buf[pageHeaderSize+metaSize:]) {
		return m, errors.New("non-zero bytes after the meta record")
	}
	m.pageSize = le.Uint32(mb[8:])
	m.root, m.rootSeq = le.Uint64(mb[16:]), le.Uint64(mb[24:])
	m.freelist, m.pgid, m.txid = le.Uint64(mb[32:]), le.Uint64(mb[40:]), le.Uint64(mb[48:])
	if int64(m.pageSize) != ps {
		return m, fmt.Errorf("page size %d, but the file's pages are %d bytes", m.pageSize, ps)
	}
	return m, nil
}

func (c *rawChecker) run() {
	if c.size < 2*1024 {
		c.bad("the file is %d bytes: too short to be a database", c.size)
		return
	}
	// The page size: the one meta page 0 states, or else the one meta page 1
	// validates with.
	var metas [2]meta
	var errs [2]error
	ps := int64(0)
	for _, cand := range pageSizes() {
		if cand*2 > c.size {
			continue
		}
		m0, e0 := c.readMeta(0, cand)
		m1, e1 := c.readMeta(1, cand)
		if e0 == nil || e1 == nil {
			ps, metas, errs = cand, [2]meta{m0, m1}, [2]error{e0, e1}
			break
		}
	}
	if ps == 0 {
		c.bad("both meta pages are damaged (or this is not a bbolt file): the database cannot be opened")
		return
	}
	c.ps = ps
	c.live = append(c.live, Range{0, 2 * ps})
	cur := -1
	for i := range 2 {
		if errs[i] != nil {
			c.bad("meta page %d is damaged (%v): bbolt falls back to the other one and loses the commit it recorded", i, errs[i])
			continue
		}
		if cur < 0 || metas[i].txid > metas[cur].txid {
			cur = i
		}
	}
	m := metas[cur]
	c.hwm = m.pgid
	if c.hwm < 2 || m.root < 2 || m.root >= c.hwm {
		c.bad("meta page %d: root page %d outside 2..%d", cur, m.root, c.hwm)
		return
	}
	if c.size < int64(c.hwm)*ps {
		c.bad("the file is truncated: %d bytes, but its pages reach %d", c.size, int64(c.hwm)*ps)
		return
	}
	c.reached[0], c.reached[1] = true, true
	if m.freelist != pgidNoFreelist {
		c.readFreelist(m.freelist)
	}
	c.reach(m.root, "root bucket")
	c.walk(m.root, nil, nil, nil, 0)
	if m.freelist == pgidNoFreelist {
		return // no freelist on disk: unreachable pages are free by definition
	}
	for id := uint64(2); id < c.hwm; id++ {
		r, fr := c.reached[id], c.free[id]
		switch {
		case r && fr:
			c.bad("%s is in use and also listed as free: a later commit would overwrite live data", c.pageAt(id))
		case !r && !fr:
			c.bad("%s is neither reachable nor free: data that was there is lost, or a reference to it was damaged", c.pageAt(id))
		}
	}
}

func pageSizes() []int64 {
	s := []int64{int64(os.Getpagesize())}
	for _, p := range []int64{4096, 8192, 16384, 32768, 65536, 1024, 2048} {
		if p != s[0] {
			s = append(s, p)
		}
	}
	return s
}

// readPage reads page id and its overflow pages. ok is false (and a
// problem reported) when the page cannot be a valid page at all.
func (c *rawChecker) readPage(id uint64, want string) ([]byte, bool) {
	if id < 2 || id >= c.hwm {
		c.bad("a reference to page %d (%s) is outside 2..%d", id, want, c.hwm)
		return nil, false
	}
	hdr := make([]byte, pageHeaderSize)
	if _, err := c.f.ReadAt(hdr, int64(id)*c.ps); err != nil {
		c.bad("%s (%s) cannot be read: %v", c.pageAt(id), want, err)
		return nil, false
	}
	ov := uint64(binary.LittleEndian.Uint32(hdr[12:]))
	if ov >= c.hwm-id {
		c.bad("%s (%s) claims %d overflow pages, beyond the high water mark %d", c.pageAt(id), want, ov, c.hwm)
		return nil, false
	}
	buf := make([]byte, int64(ov+1)*c.ps)
	if n, err := c.f.ReadAt(buf, int64(id)*c.ps); n != len(buf) {
		c.bad("%s (%s) cannot be read: %v", c.pageAt(id), want, err)
		return nil, false
	}
	if got := binary.LittleEndian.Uint64(buf); got != id {
		c.bad("%s (%s) names itself page %d", c.pageAt(id), want, got)
		return nil, false
	}
	c.live = append(c.live, Range{int64(id) * c.ps, int64(len(buf))})
	return buf, true
}

// reach marks a page (and its overflow) as referenced; false if it already
// was (a second reference: the walk does not descend again).
func (c *rawChecker) reach(id uint64, what string) bool {
	if c.reached[id] {
		c.bad("%s is referenced twice (again as %s)", c.pageAt(id), what)
		return false
	}
	c.reached[id] = true
	return true
}

func (c *rawChecker) readFreelist(id uint64) {
	if !c.reach(id, "the freelist") {
		return
	}
	buf, ok := c.readPage(id, "the freelist")
	if !ok {
		return
	}
	le := binary.LittleEndian
	for i := uint64(1); i < uint64(len(buf))/uint64(c.ps); i++ {
		c.reach(id+i, "the freelist's overflow")
	}
	if fl := le.Uint16(buf[8:]); fl != flagFreelist {
		c.bad("%s should be the freelist but has page flags %#x", c.pageAt(id), fl)
		return
	}
	n, start := uint64(le.Uint16(buf[10:])), uint64(pageHeaderSize)
	if n == 0xFFFF {
		n, start = le.Uint64(buf[pageHeaderSize:]), pageHeaderSize+8
	}
	if n > (uint64(len(buf))-start)/8 {
		c.bad("%s (the freelist) lists %d pages, more than it can hold", c.pageAt(id), n)
		return
	}
	end := start + 8*n
	prev := uint64(0)
	for off := start; off < end; off += 8 {
		p := le.Uint64(buf[off:])
		switch {
		case p < 2 || p >= c.hwm:
			c.bad("the freelist (%s) lists page %d, outside 2..%d", c.pageAt(id), p, c.hwm)
		case p <= prev:
			c.bad("the freelist (%s) is not sorted at page %d (after %d)", c.pageAt(id), p, prev)
		}
		c.free[p] = true
		prev = p
	}
	if !allZero(buf[end:]) {
		c.bad("%s (the freelist) has non-zero bytes after its %d entries", c.pageAt(id), n)
	}
}

// bucketKind is what a bucket holds, by its path.
func bucketKind(path []string) (holdsBuckets, known bool) {
	switch len(path) {
	case 0:
		return true, true
	case 1:
		hb, ok := knownBuckets[path[0]]
		return hb, ok
	case 2:
		return false, path[0] == "streams" || path[0] == "index" || path[0] == "tables"
	}
	return false, false
}

func pathString(path []string) string {
	if len(path) == 0 {
		return "the root bucket"
	}
	var b bytes.Buffer
	b.WriteString("bucket ")
	for i, p := range path {
		if i > 0 {
			b.WriteByte('/')
		}
		fmt.Fprintf(&b, "%q", p)
	}
	return b.String()
}

// walk checks the subtree of bucket path rooted at page id; keys must lie
// in [minKey, maxKey). It returns the largest key in the subtree.
func (c *rawChecker) walk(id uint64, path []string, minKey, maxKey []byte, depth int) []byte {
	where := pathString(path)
	if depth > 64 {
		c.bad("%s: the tree under %s is deeper than any real one", c.pageAt(id), where)
		return nil
	}
	buf, ok := c.readPage(id, where)
	if !ok {
		return nil
	}
	for i := uint64(1); i < uint64(len(buf))/uint64(c.ps); i++ {
		c.reach(id+i, where+" (overflow)")
	}
	le := binary.LittleEndian
	switch fl := le.Uint16(buf[8:]); fl {
	case flagBranch:
		keys, kids, ok := c.branch(buf, id, where)
		if !ok {
			return nil
		}
		running := minKey
		var maxIn []byte
		for i, k := range keys {
			c.keyOrder(id, where, i, k, running, maxKey)
			next := maxKey
			if i+1 < len(keys) {
				next = keys[i+1]
			}
			if !c.reach(kids[i], where) {
				continue
			}
			maxIn = c.walk(kids[i], path, k, next, depth+1)
			running = maxIn
		}
		return maxIn
	case flagLeaf:
		return c.leaf(buf, int64(id)*c.ps, id, path, minKey, maxKey, false, depth)
	default:
		c.bad("%s (%s) has page flags %#x, want a branch or leaf page", c.pageAt(id), where, fl)
	}
	return nil
}

// keyOrder applies bbolt's key-order rules (tx_check.go) to key i of a page.
func (c *rawChecker) keyOrder(id uint64, where string, i int, key, prev, maxKey []byte) {
	switch {
	case i == 0 && prev != nil && bytes.Compare(prev, key) > 0:
		c.bad("%s (%s): first key %x is below the key %x its parent places it under", c.pageAt(id), where, key, prev)
	case i > 0 && bytes.Compare(prev, key) >= 0:
		c.bad("%s (%s): key %d (%x) does not sort after the key before it (%x)", c.pageAt(id), where, i, key, prev)
	}
	if maxKey != nil && bytes.Compare(key, maxKey) >= 0 {
		c.bad("%s (%s): key %d (%x) is not below the next key %x of its parent", c.pageAt(id), where, i, key, maxKey)
	}
}

// branch parses a branch page: its keys and child page ids.
func (c *rawChecker) branch(buf []byte, id uint64, where string) ([][]byte, []uint64, bool) {
	le := binary.LittleEndian
	n := int(le.Uint16(buf[10:]))
	if n == 0 {
		c.bad("%s (%s) is a branch page without elements", c.pageAt(id), where)
		return nil, nil, false
	}
	data := pageHeaderSize + n*branchElementSize
	if data > len(buf) {
		c.bad("%s (%s) claims %d elements, more than the page holds", c.pageAt(id), where, n)
		return nil, nil, false
	}
	keys := make([][]byte, n)
	kids := make([]uint64, n)
	off := data
	for i := range n {
		e := buf[pageHeaderSize+i*branchElementSize:]
		pos, ksize := int(le.Uint32(e[0:])), int(le.Uint32(e[4:]))
		if pos != off-(pageHeaderSize+i*branchElementSize) || ksize == 0 || ksize > len(buf)-off {
			c.bad("%s (%s): element %d (position %d, key size %d) does not follow the previous one; the page's layout is damaged",
				c.pageAt(id), where, i, pos, ksize)
			return nil, nil, false
		}
		keys[i] = buf[off : off+ksize]
		kids[i] = le.Uint64(e[8:])
		off += ksize
	}
	if !allZero(buf[off:]) {
		c.bad("%s (%s) has non-zero bytes after its last element's data (a damaged element count or size)", c.pageAt(id), where)
	}
	return keys, kids, true
}

// leaf checks a leaf page (inline pages too: a bucket's root stored inside
// its parent's value, at file offset base).
func (c *rawChecker) leaf(buf []byte, base int64, id uint64, path []string, minKey, maxKey []byte, inline bool, depth int) []byte {
	le := binary.LittleEndian
	where := pathString(path)
	at := c.pageAt(id)
	if inline {
		at = fmt.Sprintf("the inline page at offset %d", base)
	}
	n := int(le.Uint16(buf[10:]))
	data := pageHeaderSize + n*leafElementSize
	if data > len(buf) {
		c.bad("%s (%s) claims %d elements, more than the page holds", at, where, n)
		return nil
	}
	holdsBuckets, known := bucketKind(path)
	if !known {
		c.bad("%s: %s is not a bucket a StateIndex file has", at, where)
	}
	off := data
	var prev []byte
	for i := range n {
		e := buf[pageHeaderSize+i*leafElementSize:]
		flags, pos := le.Uint32(e[0:]), int(le.Uint32(e[4:]))
		ksize, vsize := int(le.Uint32(e[8:])), int(le.Uint32(e[12:]))
		if pos != off-(pageHeaderSize+i*leafElementSize) || ksize == 0 || ksize > len(buf)-off || vsize > len(buf)-off-ksize {
			c.bad("%s (%s): element %d (position %d, key size %d, value size %d) does not follow the previous one; the page's layout is damaged",
				at, where, i, pos, ksize, vsize)
			return prev
		}
		if flags&^leafFlagBucket != 0 {
			c.bad("%s (%s): element %d has unknown flags %#x", at, where, i, flags)
		}
		key, val := buf[off:off+ksize], buf[off+ksize:off+ksize+vsize]
		c.keyOrder(id, where, i, key, prevOr(prev, minKey, i), maxKey)
		isBucket := flags&leafFlagBucket != 0
		switch {
		case len(path) == 0 && !knownBucketName(key):
			c.bad("%s: the file holds an unknown top-level bucket %q", at, key)
		case isBucket && !holdsBuckets:
			c.bad("%s (%s): %q is a nested bucket where a value belongs", at, where, key)
		case !isBucket && holdsBuckets:
			c.bad("%s (%s): %q is a plain value where a bucket belongs", at, where, key)
		}
		if isBucket {
			c.bucket(val, base+int64(off+ksize), append(path[:len(path):len(path)], string(key)), depth)
		}
		prev = key
		off += ksize + vsize
	}
	switch {
	case inline && off != len(buf):
		c.bad("%s (%s): %d bytes after its last element (a damaged element count or size)", at, where, len(buf)-off)
	case !inline && !allZero(buf[off:]):
		c.bad("%s (%s) has non-zero bytes after its last element's data (a damaged element count or size)", at, where)
	}
	return prev
}

func prevOr(prev, minKey []byte, i int) []byte {
	if i == 0 {
		return minKey
	}
	return prev
}

func knownBucketName(k []byte) bool {
	_, ok := knownBuckets[string(k)]
	return ok
}

// bucket checks a bucket header value and walks the bucket it roots.
func (c *rawChecker) bucket(val []byte, base int64, path []string, depth int) {
	where := pathString(path)
	if len(val) < bucketHeaderSize {
		c.bad("%s: its header is %d bytes, want %d (at offset %d)", where, len(val), bucketHeaderSize, base)
		return
	}
	le := binary.LittleEndian
	root, seq := le.Uint64(val[0:]), le.Uint64(val[8:])
	if seq != 0 {
		c.bad("%s: its sequence is %d, but StateIndex never uses bucket sequences (a damaged bucket header at offset %d)", where, seq, base)
	}
	if root != 0 {
		if len(val) != bucketHeaderSize {
			c.bad("%s: its header points to page %d but is followed by %d more bytes (a damaged header at offset %d)", where, root, len(val)-bucketHeaderSize, base)
			return
		}
		if c.reach(root, where) {
			c.walk(root, path, nil, nil, depth+1)
		}
		return
	}
	page := val[bucketHeaderSize:]
	if len(page) < pageHeaderSize {
		c.bad("%s: its inline page is %d bytes (at offset %d)", where, len(page), base)
		return
	}
	id, fl, ov := le.Uint64(page[0:]), le.Uint16(page[8:]), le.Uint32(page[12:])
	if id != 0 || fl != flagLeaf || ov != 0 {
		c.bad("%s: its inline page header (id %d, flags %#x, overflow %d) is damaged (at offset %d)", where, id, fl, ov, base+bucketHeaderSize)
		return
	}
	c.leaf(page, base+bucketHeaderSize, 0, path, nil, nil, true, depth)
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// mergeRanges sorts and merges overlapping ranges.
func mergeRanges(rs []Range) []Range {
	sort.Slice(rs, func(i, j int) bool { return rs[i].Off < rs[j].Off })
	var out []Range
	for _, r := range rs {
		if n := len(out); n > 0 && r.Off <= out[n-1].Off+out[n-1].Len {
			if end := r.Off + r.Len; end > out[n-1].Off+out[n-1].Len {
				out[n-1].Len = end - out[n-1].Off
			}
			continue
		}
		out = append(out, r)
	}
	return out
}
