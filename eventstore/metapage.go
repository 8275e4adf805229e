package eventstore

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"os"
)

// bbolt's meta pages: page 0 and page 1 each hold a meta record (page
// header of 16 bytes, then magic, version, page size, flags, root bucket,
// freelist, high-water page, txid and an FNV-64a checksum of the 56 bytes
// before it). bbolt opens with the valid one of the higher txid and falls
// back to the other silently; checkMetaPages makes that fall-back loud.

const (
	boltMetaMagic   = 0xED0CDAED
	metaPageHeader  = 16
	metaChecksumOff = 56
)

// metaPage validates one meta page; it returns its txid and page size.
func metaPage(buf []byte, idx uint64) (txid uint64, pageSize uint32, err error) {
	le := binary.LittleEndian
	if len(buf) < metaPageHeader+metaChecksumOff+8 {
		return 0, 0, fmt.Errorf("truncated")
	}
	if id := le.Uint64(buf[0:]); id != idx {
		return 0, 0, fmt.Errorf("it names itself page %d", id)
	}
	mb := buf[metaPageHeader:]
	if le.Uint32(mb[0:]) != boltMetaMagic {
		return 0, 0, fmt.Errorf("bad magic number")
	}
	h := fnv.New64a()
	h.Write(mb[:metaChecksumOff])
	if h.Sum64() != le.Uint64(mb[metaChecksumOff:]) {
		return 0, 0, fmt.Errorf("checksum mismatch")
	}
	return le.Uint64(mb[48:]), le.Uint32(mb[8:]), nil
}

// checkMetaPages returns a warning when one of the data file's two meta
// pages is damaged (bbolt will then open the other one's commit), "" when
// both are sound or the file cannot be read here (Open reports that).
func checkMetaPages(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	buf := make([]byte, 4096)
	if n, _ := f.ReadAt(buf, 0); n < len(buf) {
		return ""
	}
	tx0, ps, err0 := metaPage(buf, 0)
	var pageSizes []int64
	if err0 == nil {
		pageSizes = []int64{int64(ps)}
	} else {
		pageSizes = []int64{int64(os.Getpagesize()), 4096, 8192, 16384, 32768, 65536}
	}
	var err1 error
	var tx1 uint64
	for _, p := range pageSizes {
		b := make([]byte, 4096)
		if n, _ := f.ReadAt(b, p); n < len(b) {
			err1 = fmt.Errorf("cannot read it")
			continue
		}
		if tx1, _, err1 = metaPage(b, 1); err1 == nil {
			break
		}
	}
	switch {
	case err0 == nil && err1 == nil, err0 != nil && err1 != nil:
		return "" // both sound; or both bad, which Open refuses
	case err0 != nil:
		return fmt.Sprintf("bbolt meta page 0 of %s is damaged (%v); bbolt opens the commit of meta page 1 (txid %d)", path, err0, tx1)
	default:
		return fmt.Sprintf("bbolt meta page 1 of %s is damaged (%v); bbolt opens the commit of meta page 0 (txid %d)", path, err1, tx0)
	}
}
