package compaction

import "math/bits"

// idSet maps the ids (or, with group set, the Groups) of items to input
// positions, built once per call to find duplicate ids and to gather
// groups. It is an open-addressing table over a deterministic hash: a third
// of the cost of a Go map for a thousand handles, which every pack pays.
// Keys may be chosen by clients, so a run of colliding keys could make
// probing quadratic: past maxProbe the set moves to a Go map, whose hash is
// seeded.
type idSet struct {
	items []Item
	group bool     // the key is Group, not ID
	slots []uint64 // hash>>32<<32 | index+1; 0 is empty
	mask  uint64
	n     int              // keys in the table
	buf   *[]uint64        // where slots come from and go back to; nil: no growing
	m     map[string]int32 // the fallback, when not nil
}

const maxProbe = 32

// newIDSet returns a set sized for n keys of items.
func newIDSet(items []Item, n int) *idSet {
	s := &idSet{}
	var slots []uint64
	s.reset(items, n, false, &slots)
	return s
}

// reset empties s for n keys of items, reusing *slots (and leaving there the
// memory it uses, for the next reset).
func (s *idSet) reset(items []Item, n int, group bool, slots *[]uint64) {
	size := 16
	for size < 2*n || size < cap(*slots) && size < 1<<16 { // reuse what earlier calls grew to
		size <<= 1
	}
	*slots = zeroed(*slots, size)
	*s = idSet{items: items, group: group, slots: *slots, mask: uint64(size - 1), buf: slots}
}

// grow doubles the table.
func (s *idSet) grow() {
	old := s.slots
	s.slots = make([]uint64, 2*len(old))
	s.mask = uint64(len(s.slots) - 1)
	*s.buf = s.slots
	for _, v := range old {
		if v == 0 {
			continue
		}
		p := hashString(s.key(int(v&0xffffffff)-1)) & s.mask
		for s.slots[p] != 0 {
			p = (p + 1) & s.mask
		}
		s.slots[p] = v
	}
}

func (s *idSet) key(i int) string {
	if s.group {
		return s.items[i].Group
	}
	return s.items[i].ID
}

// add records items[i] and reports false if its key is already there.
func (s *idSet) add(i int) bool {
	_, found := s.insert(i)
	return !found
}

// insert records items[i] under its key, unless the key is there already:
// then it returns the position recorded for it and true.
func (s *idSet) insert(i int) (int32, bool) {
	k := s.key(i)
	if s.m != nil {
		if j, ok := s.m[k]; ok {
			return j, true
		}
		s.m[k] = int32(i)
		return 0, false
	}
	if 2*(s.n+1) > len(s.slots) && s.buf != nil { // a table made by hand keeps its size
		s.grow()
	}
	h := hashString(k)
	tag := h >> 32 << 32
	for probe, p := 0, h&s.mask; ; probe, p = probe+1, (p+1)&s.mask {
		if probe > maxProbe {
			return s.fallback(i)
		}
		v := s.slots[p]
		if v == 0 {
			s.slots[p] = tag | uint64(i+1)
			s.n++
			return 0, false
		}
		if j := int(v&0xffffffff) - 1; v&^0xffffffff == tag && s.key(j) == k {
			return int32(j), true
		}
	}
}

// fallback moves what the table holds into a Go map, then inserts
// items[i].
func (s *idSet) fallback(i int) (int32, bool) {
	s.m = make(map[string]int32, len(s.slots)/2)
	for _, v := range s.slots {
		if v != 0 {
			j := int(v&0xffffffff) - 1
			s.m[s.key(j)] = int32(j)
		}
	}
	s.slots = nil
	return s.insert(i)
}

// lookup returns the input position recorded for key k.
func (s *idSet) lookup(k string) (int32, bool) {
	if s.m != nil {
		i, ok := s.m[k]
		return i, ok
	}
	h := hashString(k)
	tag := h >> 32 << 32
	for probe, p := 0, h&s.mask; probe <= maxProbe; probe, p = probe+1, (p+1)&s.mask {
		v := s.slots[p]
		if v == 0 {
			break
		}
		if j := int(v&0xffffffff) - 1; v&^0xffffffff == tag && s.key(j) == k {
			return int32(j), true
		}
	}
	return 0, false // insert never places a key further than maxProbe
}

// hashString is a fast deterministic string hash: sixteen bytes at a time,
// each pair of words folded by a 64×64→128-bit multiply (as wyhash does).
func hashString(s string) uint64 {
	h := uint64(len(s)) ^ 0x9e3779b97f4a7c15
	i := 0
	for ; i+16 <= len(s); i += 16 {
		h = mum(load8(s, i)^0xa0761d6478bd642f, load8(s, i+8)^h)
	}
	var a, b uint64
	switch r := len(s) - i; {
	case r > 8:
		a, b = load8(s, i), loadTail(s, i+8)
	case r == 8:
		a = load8(s, i)
	case r > 0:
		a = loadTail(s, i)
	}
	return mum(a^0xe7037ed1a0b428db, b^h^0x8ebc6af09c88c6e3)
}

// mum folds the 128-bit product of a and b.
func mum(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}
