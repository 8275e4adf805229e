package compaction

// idSet maps ids to input positions, built once per call to find duplicate
// ids. It is an open-addressing table over a deterministic hash: a third of
// the cost of a Go map for a thousand handles, which every pack pays. Ids
// may be chosen by clients, so a run of colliding ids could make probing
// quadratic: past maxProbe the set moves to a Go map, whose hash is seeded.
type idSet struct {
	items []Item
	slots []uint64 // hash>>32<<32 | index+1; 0 is empty
	mask  uint64
	m     map[string]int32 // the fallback, when not nil
}

const maxProbe = 32

func newIDSet(items []Item) *idSet {
	size := 16
	for size < 2*len(items) {
		size <<= 1
	}
	return &idSet{items: items, slots: make([]uint64, size), mask: uint64(size - 1)}
}

// add records items[i] and reports false if its id is already there.
func (s *idSet) add(i int) bool {
	id := s.items[i].ID
	if s.m != nil {
		if s.m[id] = int32(i); len(s.m) != i+1 {
			return false
		}
		return true
	}
	h := hashString(id)
	tag := h >> 32 << 32
	for probe, p := 0, h&s.mask; ; probe, p = probe+1, (p+1)&s.mask {
		if probe > maxProbe {
			return s.fallback(i)
		}
		v := s.slots[p]
		if v == 0 {
			s.slots[p] = tag | uint64(i+1)
			return true
		}
		if v&^0xffffffff == tag && s.items[v&0xffffffff-1].ID == id {
			return false
		}
	}
}

// fallback moves items[:i+1] into a Go map.
func (s *idSet) fallback(i int) bool {
	s.m = make(map[string]int32, len(s.items))
	s.slots = nil
	for k := 0; k < i; k++ {
		s.m[s.items[k].ID] = int32(k)
	}
	return s.add(i)
}

// lookup returns the input position of id.
func (s *idSet) lookup(id string) (int32, bool) {
	if s.m != nil {
		i, ok := s.m[id]
		return i, ok
	}
	h := hashString(id)
	tag := h >> 32 << 32
	for probe, p := 0, h&s.mask; probe <= maxProbe; probe, p = probe+1, (p+1)&s.mask {
		v := s.slots[p]
		if v == 0 {
			break
		}
		if v&^0xffffffff == tag && s.items[v&0xffffffff-1].ID == id {
			return int32(v&0xffffffff - 1), true
		}
	}
	return 0, false // add never places an id further than maxProbe
}

// hashString is a fast deterministic string hash (a multiply-xorshift mix
// over eight-byte words).
func hashString(s string) uint64 {
	h := uint64(len(s)) * 0x9e3779b97f4a7c15
	i := 0
	for ; i+8 <= len(s); i += 8 {
		h = (h ^ load8(s, i)) * 0xbf58476d1ce4e5b9
		h ^= h >> 31
	}
	if i < len(s) {
		h = (h ^ loadTail(s, i)) * 0xbf58476d1ce4e5b9
		h ^= h >> 31
	}
	h ^= h >> 29
	h *= 0x94d049bb133111eb
	return h ^ h>>32
}
