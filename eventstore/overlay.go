package eventstore

import (
	"sort"
	"sync"
)

// jrec is an acknowledged record that is in the journal but maybe not yet
// in bbolt. raw is its stored bytes (owned by the overlay, never changed).
type jrec struct {
	stream  string
	version int64
	seq     uint64
	raw     []byte
	hash    Hash
}

// overlay holds the journaled records bbolt does not cover yet, so that
// every read sees every acknowledged append at once (read-your-writes).
// The committer appends to it after the journal's fsync and before
// answering; the applier removes what a durable bbolt commit covers, after
// that commit. A reader takes the overlay's view first and opens its bbolt
// transaction after: whatever the applier removed in between is then in
// bbolt, so the two together never miss a record.
//
// Slices are only ever appended to or cut at the front, so a reader's copy
// of a slice header stays valid without the lock.
type overlay struct {
	mu      sync.RWMutex
	all     []jrec // by sequence
	streams map[string][]jrec
	idx     overlayIndex
	last    uint64 // highest sequence published
	bytes   int64
}

func newOverlay() *overlay {
	return &overlay{streams: make(map[string][]jrec), idx: make(overlayIndex)}
}

// publish adds a committed batch (in sequence order).
func (o *overlay) publish(recs []jrec) {
	if len(recs) == 0 {
		return
	}
	o.mu.Lock()
	o.all = append(o.all, recs...)
	for i := range recs {
		o.streams[recs[i].stream] = append(o.streams[recs[i].stream], recs[i])
		o.idx.add(&recs[i])
		o.bytes += int64(len(recs[i].raw))
	}
	o.last = recs[len(recs)-1].seq
	o.mu.Unlock()
}

// removeThrough drops the records bbolt now covers (sequence <= seq).
func (o *overlay) removeThrough(seq uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	k := sort.Search(len(o.all), func(i int) bool { return o.all[i].seq > seq })
	if k == 0 {
		return
	}
	touched := map[string]bool{}
	for i := 0; i < k; i++ {
		r := &o.all[i]
		o.bytes -= int64(len(r.raw))
		touched[r.stream] = true
	}
	for stream := range touched {
		recs := o.streams[stream]
		n := sort.Search(len(recs), func(i int) bool { return recs[i].seq > seq })
		if n == len(recs) {
			delete(o.streams, stream)
			delete(o.idx, stream)
		} else {
			o.streams[stream] = recs[n:]
			o.idx.rebuild(stream, recs[n:])
		}
	}
	if k == len(o.all) {
		o.all = nil // let the old array (and the frames it holds) go
	} else {
		o.all = o.all[k:]
	}
}

// stream returns a view of a stream's records (version order).
func (o *overlay) stream(name string) []jrec {
	o.mu.RLock()
	recs := o.streams[name]
	o.mu.RUnlock()
	return recs
}

// lookup returns the span of key among a stream's overlay records.
func (o *overlay) lookup(stream, key string) (Span, bool) {
	o.mu.RLock()
	sp, ok := o.idx[stream][key]
	o.mu.RUnlock()
	return sp, ok
}

// view returns the records by sequence and the last published sequence.
func (o *overlay) view() ([]jrec, uint64) {
	o.mu.RLock()
	all, last := o.all, o.last
	o.mu.RUnlock()
	return all, last
}

// heads returns every stream's overlay head, sorted by name.
func (o *overlay) heads() []StreamInfo {
	o.mu.RLock()
	out := make([]StreamInfo, 0, len(o.streams))
	for name, recs := range o.streams {
		r := &recs[len(recs)-1]
		out = append(out, StreamInfo{Stream: name, Version: r.version, Head: r.hash})
	}
	o.mu.RUnlock()
	sort.Slice(out, func(a, b int) bool { return out[a].Stream < out[b].Stream })
	return out
}

func (o *overlay) pending() (n int, bytes int64, last uint64) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return len(o.all), o.bytes, o.last
}

// layeredSource is a stream's records in bbolt (base, one read transaction)
// followed by those only in the overlay (versions above bbolt's head).
type layeredSource struct {
	src      *boltSource
	over     []jrec
	baseHead int64 // bbolt's head version in base's transaction
	baseOK   bool
	baseHash Hash
	inOver   bool
	pos      int // index in over while inOver
}

func newLayeredSource(base *boltSource, over []jrec) (*layeredSource, error) {
	l := &layeredSource{src: base}
	v, h, ok, err := base.head()
	if err != nil {
		return nil, err
	}
	l.baseHead, l.baseHash, l.baseOK = v, h, ok
	// Keep only what bbolt's transaction does not have.
	k := sort.Search(len(over), func(i int) bool { return over[i].version > v })
	l.over = over[k:]
	return l, nil
}

func (l *layeredSource) head() (int64, Hash, bool, error) {
	if len(l.over) > 0 {
		r := &l.over[len(l.over)-1]
		return r.version, r.hash, true, nil
	}
	return l.baseHead, l.baseHash, l.baseOK, nil
}

func (l *layeredSource) overIndex(version int64) (int, bool) {
	if len(l.over) == 0 || version < l.over[0].version {
		return 0, false
	}
	i := int(version - l.over[0].version)
	return i, i < len(l.over)
}

func (l *layeredSource) get(version int64) ([]byte, bool, error) {
	if len(l.over) > 0 && version >= l.over[0].version {
		if i, ok := l.overIndex(version); ok {
			return l.over[i].raw, true, nil
		}
		return nil, false, nil
	}
	return l.src.get(version)
}

func (l *layeredSource) seek(version int64) (int64, []byte, bool, error) {
	if len(l.over) > 0 && version >= l.over[0].version {
		return l.fromOver(max(version, l.over[0].version))
	}
	l.inOver = false
	k, raw, ok, err := l.src.seek(version)
	if err != nil || ok {
		return k, raw, ok, err
	}
	return l.fromOver(version)
}

func (l *layeredSource) fromOver(version int64) (int64, []byte, bool, error) {
	l.inOver = true
	if len(l.over) == 0 {
		return 0, nil, false, nil
	}
	i, ok := l.overIndex(max(version, l.over[0].version))
	if !ok {
		l.pos = len(l.over)
		return 0, nil, false, nil
	}
	l.pos = i
	r := &l.over[i]
	return r.version, r.raw, true, nil
}

func (l *layeredSource) next() (int64, []byte, bool, error) {
	if !l.inOver {
		k, raw, ok, err := l.src.next()
		if err != nil || ok {
			return k, raw, ok, err
		}
		return l.fromOver(0)
	}
	l.pos++
	if l.pos >= len(l.over) {
		return 0, nil, false, nil
	}
	r := &l.over[l.pos]
	return r.version, r.raw, true, nil
}
