package eventstore

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
)

// MemoryStore is a Store held in memory, for tests and for tools that need
// a throwaway log. It has the same semantics as BoltStore — versions,
// sequences, the hash chain (records are encoded exactly as on disk, so
// hashes are identical), snapshots, limits and errors — except durability:
// nothing survives the process. It is safe for concurrent use.
type MemoryStore struct {
	lim Limits

	mu         sync.RWMutex
	closed     bool
	closedFlag atomic.Bool // lock-free early check of closed
	streams    map[string]*memStream
	index      []memIndexEntry // index[seq-1]
	snaps      map[string][]byte
	tables     memTables
	watch      watchers
	// owners are the streams' fences (Fencer) and keys the shared keys
	// (KeyKeeper), under mu.
	owners map[string]Fence
	keys   map[string][]byte
}

type memStream struct {
	recs [][]byte // recs[version-1], as encoded on disk; nil once removed
	head Hash
	base Base
	idx  overlayIndex // the stream's index (one entry: this stream)
	// removedSeq is the highest global sequence RemovePrefix removed.
	removedSeq uint64
}

type memIndexEntry struct {
	stream  string
	version int64
}

var (
	_ Store     = (*MemoryStore)(nil)
	_ Fencer    = (*MemoryStore)(nil)
	_ KeyKeeper = (*MemoryStore)(nil)
)

// NewMemory returns an empty MemoryStore with default limits.
func NewMemory() *MemoryStore {
	m, _ := NewMemoryWithLimits(Limits{})
	return m
}

// NewMemoryWithLimits returns an empty MemoryStore with the given limits
// (zero fields take their defaults).
func NewMemoryWithLimits(l Limits) (*MemoryStore, error) {
	lim, err := l.resolve()
	if err != nil {
		return nil, err
	}
	return &MemoryStore{
		lim:     lim,
		streams: make(map[string]*memStream),
		snaps:   make(map[string][]byte),
		owners:  make(map[string]Fence),
		keys:    make(map[string][]byte),
	}, nil
}

// Append implements Store. The memory store is not durable; otherwise it
// behaves as BoltStore.Append. An append whose ctx carries a fence
// (WithFence) is checked against the stream's owner under the same lock
// as the write (Fencer).
func (m *MemoryStore) Append(ctx context.Context, stream string, expected int64, events []Event) (AppendResult, error) {
	res, err := m.append(ctx, stream, expected, events)
	if err == nil {
		m.watch.notify(res.LastSeq)
	}
	return res, err
}

func (m *MemoryStore) append(ctx context.Context, stream string, expected int64, events []Event) (AppendResult, error) {
	if m.closedFlag.Load() {
		return AppendResult{}, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return AppendResult{}, err
	}
	buf, ends, err := encodeAppend(nil, nil, stream, expected, events, &m.lim)
	if err != nil {
		return AppendResult{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return AppendResult{}, ErrClosed
	}
	if held, ok := FenceFrom(ctx); ok {
		if cur := m.owners[stream]; cur != held {
			return AppendResult{}, &FencedError{Stream: stream, Held: held, Current: cur}
		}
	}
	ms := m.streams[stream]
	var version int64
	var head Hash
	if ms != nil {
		version, head = int64(len(ms.recs)), ms.head
	}
	if expected != Any && expected != version {
		return AppendResult{}, &ConflictError{Stream: stream, Expected: expected, Actual: version}
	}
	seq := uint64(len(m.index))
	if version > math.MaxInt64-int64(len(ends)) {
		return AppendResult{}, fmt.Errorf("eventstore: stream %q: version would overflow", stream)
	}
	if ms == nil {
		ms = &memStream{}
		m.streams[stream] = ms
	}
	res := AppendResult{FirstVersion: version + 1, FirstSeq: seq + 1}
	start := 0
	for _, end := range ends {
		rec := buf[start:end:end]
		start = end
		version++
		seq++
		patchRecord(rec, seq, version, &head)
		head = sha256.Sum256(rec)
		ms.recs = append(ms.recs, rec)
		m.index = append(m.index, memIndexEntry{stream: stream, version: version})
		if ms.idx == nil {
			ms.idx = make(overlayIndex, 1)
		}
		ms.idx.add(&jrec{stream: stream, version: version, raw: rec})
	}
	ms.head = head
	res.LastVersion, res.LastSeq, res.Head = version, seq, head
	return res, nil
}

// Lookup implements Store.
func (m *MemoryStore) Lookup(ctx context.Context, stream, key string) (Span, bool, error) {
	if err := checkStream(stream); err != nil {
		return Span{}, false, err
	}
	if err := ctx.Err(); err != nil {
		return Span{}, false, err
	}
	if err := m.rlock(); err != nil {
		return Span{}, false, err
	}
	defer m.mu.RUnlock()
	ms := m.streams[stream]
	if ms == nil {
		return Span{}, false, nil
	}
	sp, ok := ms.idx[stream][key]
	return sp, ok, nil
}

// StreamBase implements Store.
func (m *MemoryStore) StreamBase(ctx context.Context, stream string) (Base, error) {
	if err := checkStream(stream); err != nil {
		return Base{}, err
	}
	if err := m.rlock(); err != nil {
		return Base{}, err
	}
	defer m.mu.RUnlock()
	if ms := m.streams[stream]; ms != nil {
		return ms.base, nil
	}
	return Base{}, nil
}

// RemovePrefix implements Store.
func (m *MemoryStore) RemovePrefix(ctx context.Context, stream string, through int64, opts ...RemoveOption) (RemoveResult, error) {
	var res RemoveResult
	var o removeOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := checkStream(stream); err != nil {
		return res, err
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if through < 1 {
		return res, fmt.Errorf("%w: remove through version %d", ErrInvalidSnapshotVersion, through)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return res, ErrClosed
	}
	ms := m.streams[stream]
	if ms == nil || through > int64(len(ms.recs)) {
		return res, fmt.Errorf("%w: remove through %d beyond the stream's head", ErrInvalidSnapshotVersion, through)
	}
	if through <= ms.base.Version {
		res.Base = ms.base
		return res, nil
	}
	snap, ok := m.snaps[stream]
	var f snapshotFields
	if !ok || parseSnapshot(snap, &f) != nil || f.version < through {
		return res, fmt.Errorf("%w: stream %q, through %d", ErrSnapshotBehind, stream, through)
	}
	old := ms.base
	at := func(v int64) int64 {
		var f recordFields
		if v < 1 || v > int64(len(ms.recs)) || ms.recs[v-1] == nil || parseRecord(ms.recs[v-1], &f) != nil {
			return 0
		}
		return metaAt(f.data)
	}
	for k, sp := range ms.idx[stream] {
		if (sp.Last <= through || (k[0] == 'r' && sp.First <= through)) && !o.keeps([]byte(k), sp, old, through, at) {
			delete(ms.idx[stream], k)
		}
	}
	ms.base = Base{Version: through, Hash: sha256.Sum256(ms.recs[through-1])}
	for i := len(m.index) - 1; i >= 0; i-- {
		if e := m.index[i]; e.stream == stream && e.version <= through {
			ms.removedSeq = max(ms.removedSeq, uint64(i+1))
			break
		}
	}
	for v := int64(1); v <= through; v++ {
		if ms.recs[v-1] != nil {
			ms.recs[v-1] = nil
			res.Removed++
		}
	}
	res.Base = ms.base
	return res, nil
}

// memSource is a stream's records while the read lock is held.
type memSource struct {
	ms  *memStream
	pos int64
}

func (s *memSource) head() (int64, Hash, bool, error) {
	if s.ms == nil || len(s.ms.recs) == 0 {
		return 0, Hash{}, false, nil
	}
	return int64(len(s.ms.recs)), s.ms.head, true, nil
}

func (s *memSource) get(version int64) ([]byte, bool, error) {
	if s.ms == nil || version <= s.ms.base.Version || version > int64(len(s.ms.recs)) {
		return nil, false, nil
	}
	return s.ms.recs[version-1], true, nil
}

func (s *memSource) base() (Base, error) {
	if s.ms == nil {
		return Base{}, nil
	}
	return s.ms.base, nil
}

func (s *memSource) seek(version int64) (int64, []byte, bool, error) {
	s.pos = max(version, 1)
	if s.ms != nil {
		s.pos = max(s.pos, s.ms.base.Version+1)
	}
	raw, ok, err := s.get(s.pos)
	return s.pos, raw, ok, err
}

func (s *memSource) next() (int64, []byte, bool, error) {
	s.pos++
	raw, ok, err := s.get(s.pos)
	return s.pos, raw, ok, err
}

// rlock takes the read lock unless the store is closed.
func (m *MemoryStore) rlock() error {
	m.mu.RLock()
	if m.closed {
		m.mu.RUnlock()
		return ErrClosed
	}
	return nil
}

// ReadStream implements Store, with the same checks as BoltStore.ReadStream.
// fn runs without the store's lock held.
func (m *MemoryStore) ReadStream(ctx context.Context, stream string, from int64, fn func(Record) error) error {
	if err := checkStream(stream); err != nil {
		return err
	}
	cr := newChainReader(stream, from)
	return deliver(ctx, func(buf []Record) ([]Record, bool, error) {
		if err := m.rlock(); err != nil {
			return nil, false, err
		}
		defer m.mu.RUnlock()
		return cr.readChunk(&memSource{ms: m.streams[stream]}, buf, true, chunkRecords, chunkBytes)
	}, fn)
}

// ReadAll implements Store. fn runs without the store's lock held.
func (m *MemoryStore) ReadAll(ctx context.Context, from uint64, fn func(Record) error) error {
	next := max(from, 1)
	var types interner
	return deliver(ctx, func(chunk []Record) ([]Record, bool, error) {
		if err := m.rlock(); err != nil {
			return nil, false, err
		}
		defer m.mu.RUnlock()
		for next <= uint64(len(m.index)) && len(chunk) < chunkRecords {
			e := m.index[next-1]
			raw := m.streams[e.stream].recs[e.version-1]
			if raw == nil { // removed (RemovePrefix)
				next++
				continue
			}
			var f recordFields
			if err := parseRecord(raw, &f); err != nil {
				return nil, false, recordDecodeError(e.stream, e.version, err)
			}
			chunk = append(chunk, Record{
				Stream:   e.stream,
				Version:  e.version,
				Seq:      f.seq,
				Type:     types.get(f.typ),
				Data:     cloneBytes(f.data),
				PrevHash: f.prev,
				Hash:     sha256.Sum256(raw),
			})
			next++
		}
		return chunk, next > uint64(len(m.index)), nil
	}, fn)
}

// Stream implements Store.
func (m *MemoryStore) Stream(ctx context.Context, stream string) (StreamInfo, error) {
	if err := checkStream(stream); err != nil {
		return StreamInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		return StreamInfo{}, err
	}
	if err := m.rlock(); err != nil {
		return StreamInfo{}, err
	}
	defer m.mu.RUnlock()
	info := StreamInfo{Stream: stream}
	if ms := m.streams[stream]; ms != nil {
		info.Version, info.Head = int64(len(ms.recs)), ms.head
	}
	return info, nil
}

// Streams implements Store. fn runs without the store's lock held.
func (m *MemoryStore) Streams(ctx context.Context, fn func(StreamInfo) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := m.rlock(); err != nil {
		return err
	}
	infos := make([]StreamInfo, 0, len(m.streams))
	for name, ms := range m.streams {
		infos = append(infos, StreamInfo{Stream: name, Version: int64(len(ms.recs)), Head: ms.head})
	}
	m.mu.RUnlock()
	sort.Slice(infos, func(i, j int) bool { return infos[i].Stream < infos[j].Stream })
	for _, info := range infos {
		if err := fn(info); err != nil {
			return err
		}
	}
	return nil
}

// LastSeq implements Store.
func (m *MemoryStore) LastSeq(ctx context.Context) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := m.rlock(); err != nil {
		return 0, err
	}
	defer m.mu.RUnlock()
	return uint64(len(m.index)), nil
}

// SaveSnapshot implements Store.
func (m *MemoryStore) SaveSnapshot(ctx context.Context, stream string, snap Snapshot) error {
	if m.closedFlag.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkSnapshot(stream, &snap, &m.lim); err != nil {
		return err
	}
	raw := encodeSnapshot(nil, stream, &snap)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	var head int64
	if ms := m.streams[stream]; ms != nil {
		head = int64(len(ms.recs))
	}
	if snap.Version > head {
		return snapshotBeyondHead(stream, snap.Version, head)
	}
	m.snaps[stream] = raw
	return nil
}

// LoadSnapshot implements Store.
func (m *MemoryStore) LoadSnapshot(ctx context.Context, stream string) (Snapshot, bool, error) {
	if err := checkStream(stream); err != nil {
		return Snapshot{}, false, err
	}
	if err := ctx.Err(); err != nil {
		return Snapshot{}, false, err
	}
	if err := m.rlock(); err != nil {
		return Snapshot{}, false, err
	}
	raw, ok := m.snaps[stream]
	m.mu.RUnlock()
	if !ok {
		return Snapshot{}, false, nil
	}
	snap, err := decodeSnapshot(stream, raw)
	if err != nil {
		return Snapshot{}, false, err
	}
	return snap, true, nil
}

// VerifyStream implements Store.
func (m *MemoryStore) VerifyStream(ctx context.Context, stream string) error {
	if err := checkStream(stream); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := m.rlock(); err != nil {
		return err
	}
	defer m.mu.RUnlock()
	cr := newChainReader(stream, 1)
	return verifyChain(ctx, &cr, &memSource{ms: m.streams[stream]})
}

// Close implements Store. It is idempotent.
func (m *MemoryStore) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	m.closedFlag.Store(true)
	return nil
}

// AppendAsync implements AsyncAppender: the memory store appends at once
// and calls done before returning.
func (m *MemoryStore) AppendAsync(ctx context.Context, stream string, expected int64, events []Event, done func(AppendResult, error)) {
	done(m.Append(ctx, stream, expected, events))
}

// AcquireOwner implements Fencer: the stream's next epoch, for owner.
func (m *MemoryStore) AcquireOwner(ctx context.Context, stream, owner string) (Fence, error) {
	if err := checkStream(stream); err != nil {
		return Fence{}, err
	}
	if err := CheckOwner(owner); err != nil {
		return Fence{}, err
	}
	if err := ctx.Err(); err != nil {
		return Fence{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return Fence{}, ErrClosed
	}
	cur := m.owners[stream]
	if cur.Epoch == math.MaxUint64 {
		return Fence{}, fmt.Errorf("eventstore: stream %q: owner epoch would overflow", stream)
	}
	f := Fence{Owner: owner, Epoch: cur.Epoch + 1}
	m.owners[stream] = f
	return f, nil
}

// Owner implements Fencer.
func (m *MemoryStore) Owner(ctx context.Context, stream string) (Fence, error) {
	if err := checkStream(stream); err != nil {
		return Fence{}, err
	}
	if err := ctx.Err(); err != nil {
		return Fence{}, err
	}
	if err := m.rlock(); err != nil {
		return Fence{}, err
	}
	defer m.mu.RUnlock()
	return m.owners[stream], nil
}

// SharedKey implements KeyKeeper. generate runs without the store's lock
// held; of two callers racing to create a key, the first to store it wins
// and both get its bytes.
func (m *MemoryStore) SharedKey(ctx context.Context, name string, generate func() ([]byte, error)) ([]byte, error) {
	if err := checkKeyName(name); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := m.rlock(); err != nil {
		return nil, err
	}
	k, ok := m.keys[name]
	m.mu.RUnlock()
	if ok {
		return cloneBytes(k), nil
	}
	if generate == nil {
		return nil, fmt.Errorf("%w: no key %q stored and nothing to generate it", ErrInvalidKeyName, name)
	}
	gen, err := generate()
	if err != nil {
		return nil, fmt.Errorf("eventstore: generating shared key %q: %w", name, err)
	}
	if err := checkSharedKey(name, gen); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if k, ok := m.keys[name]; ok {
		return cloneBytes(k), nil
	}
	m.keys[name] = cloneBytes(gen)
	return cloneBytes(gen), nil
}
