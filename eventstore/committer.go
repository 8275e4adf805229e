package eventstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"runtime/debug"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

type reqKind uint8

const (
	reqAppend reqKind = iota
	reqSnapshot
	reqFlush // journal: wait until bbolt covers needSeq
)

// request is one Append or SaveSnapshot waiting for the committer. The
// caller fills it, queues it and waits on done; the committer fills res and
// err and signals done exactly once, after which it never touches it again.
type request struct {
	kind        reqKind
	ctx         context.Context
	stream      string
	expected    int64  // appends
	snapVersion int64  // snapshots
	needSeq     uint64 // journal: the applier answers once bbolt covers it
	buf         []byte
	ends        []int // end offset in buf of each record (appends)

	res   AppendResult
	err   error
	wrote bool // the request's writes are part of the transaction
	done  chan struct{}
	// cb, when set, is called with the outcome instead of signalling done
	// (AppendAsync); the request is recycled before cb runs.
	cb func(AppendResult, error)
}

// answer hands the outcome to whoever waits for it. The committer never
// touches r afterwards.
func (r *request) answer() {
	if cb := r.cb; cb != nil {
		res, err := r.res, r.err
		putRequest(r)
		cb(res, err)
		return
	}
	r.done <- struct{}{}
}

// maxPooledBuf keeps unusually large encode buffers out of the pool.
const maxPooledBuf = 64 << 10

var requestPool = sync.Pool{New: func() any { return &request{done: make(chan struct{}, 1)} }}

func getRequest() *request { return requestPool.Get().(*request) }

func putRequest(r *request) {
	buf, ends, done := r.buf, r.ends, r.done
	if cap(buf) > maxPooledBuf {
		buf = nil
	}
	*r = request{buf: buf[:0], ends: ends[:0], done: done}
	requestPool.Put(r)
}

// committer is the state of the committer goroutine, reused across batches
// so that a commit allocates little.
type committer struct {
	batch  []*request
	states map[string]streamState
	arena         // values handed to bbolt, valid until the commit ends
	key    []byte // scratch key: bbolt copies keys, not values
	k8     [8]byte
	idx    indexer

	// journal path
	rtx     *bolt.Tx // read transaction for heads bbolt holds, per batch
	rtxApps uint64   // the applier's commit count when rtx began
	rbk     *buckets
	jrecs   []jrec
	heads   map[string]streamState // heads the committer wrote (bounded cache)

	// committed is the last sequence the latest apply wrote (0: none).
	committed uint64
}

// streamState is a stream's head as updated by earlier requests of the
// batch being committed.
type streamState struct {
	version int64
	head    Hash
	bucket  *bolt.Bucket
	dirty   bool
}

func (c *committer) init() {
	c.states = make(map[string]streamState)
}

// arena hands out the values given to bbolt in one write transaction:
// bbolt keeps references to values (not keys) until the commit ends.
type arena struct{ buf []byte }

// alloc returns n bytes that stay untouched until reset.
func (a *arena) alloc(n int) []byte {
	if len(a.buf)+n > cap(a.buf) {
		a.buf = make([]byte, 0, max(64<<10, n))
	}
	l := len(a.buf)
	a.buf = a.buf[:l+n]
	return a.buf[l : l+n : l+n]
}

// reset makes the space reusable once the transaction has ended.
func (a *arena) reset() { a.buf = a.buf[:0] }

// putRecord stores one record in its stream's bucket and its entry in the
// global index.
func putRecord(bk *buckets, b *bolt.Bucket, ar *arena, x *indexer, k8 *[8]byte, stream string, version int64, seq uint64, raw []byte) error {
	if err := b.Put(u64key(k8, uint64(version)), raw); err != nil {
		return err
	}
	if err := bk.seq.Put(u64key(k8, seq), appendIndexValue(ar.alloc(8 + len(stream))[:0], version, stream)); err != nil {
		return err
	}
	return x.put(bk, ar, stream, version, raw)
}

// putHead stores a stream's head metadata.
func putHead(bk *buckets, ar *arena, key []byte, version int64, head *Hash) error {
	return bk.heads.Put(key, appendHead(ar.alloc(headLen)[:0], version, head))
}

// putLastSeq stores the highest global sequence in the file.
// The per-stream index is written with the records, so it covers the same.
func putLastSeq(bk *buckets, ar *arena, seq uint64) error {
	v := ar.alloc(8)
	binary.BigEndian.PutUint64(v, seq)
	if err := bk.meta.Put(keyLastSeq, v); err != nil {
		return err
	}
	return bk.meta.Put(keyIndexSeq, appendIndexSeq(ar.alloc(12)[:0], seq))
}

func (c *committer) streamKey(stream string) []byte {
	c.key = append(c.key[:0], stream...)
	return c.key
}

// run is the committer goroutine. It blocks for the first pending request,
// then takes everything else already pending without waiting — no timer:
// batches form only from requests that queued up while the previous commit
// was fsyncing, so a lone writer pays one fsync and never a delay — and
// commits them in one transaction. It exits once the queue is closed and
// drained.
func (s *BoltStore) run() {
	defer close(s.done)
	var carry *request
	for {
		first := carry
		carry = nil
		if first == nil {
			r, ok := <-s.queue
			if !ok {
				return
			}
			first = r
		}
		batch := append(s.cm.batch[:0], first)
		size := first.frameBytes()
	drain:
		for size < s.batchBytes {
			select {
			case r, ok := <-s.queue:
				if !ok {
					break drain
				}
				if size+r.frameBytes() > s.batchBytes {
					carry = r
					break drain
				}
				batch = append(batch, r)
				size += r.frameBytes()
			default:
				break drain
			}
		}
		if s.j != nil {
			s.commitJournal(batch)
		} else {
			s.commit(batch)
		}
		clear(batch)
		s.cm.batch = batch[:0]
	}
}

// commit writes a batch in one transaction and answers every request.
func (s *BoltStore) commit(batch []*request) {
	if cause := s.failed.Load(); cause != nil {
		for _, r := range batch {
			r.err = &commitError{cause: *cause}
			r.answer()
		}
		return
	}
	s.cm.committed = 0
	start := time.Now()
	err := s.update(func(tx *bolt.Tx) error { return s.cm.apply(tx, batch, s.commitHook.Load()) })
	clear(s.cm.states)
	s.cm.arena.reset()
	if err != nil {
		s.failCommit(batch, fmt.Errorf("eventstore: commit of %d requests to %s failed: %w", len(batch), s.path, err))
	}
	if s.m != nil {
		s.m.committed(false, len(batch), appendedRecords(batch), time.Since(start), err)
	}
	for _, r := range batch {
		r.answer()
	}
	if err == nil && s.cm.committed > 0 {
		s.watch.notify(s.cm.committed) // durable, and readable by every read transaction begun from now
	}
}

// failCommit disables writes with cause and gives every request of the
// failed batch its outcome: unknown for those whose writes were part of
// it, nothing written for the others. Never retry: after a failed fsync
// the kernel may have dropped the dirty pages, and a retry could
// "succeed" without them.
func (s *BoltStore) failCommit(batch []*request, cause error) {
	s.failed.Store(&cause)
	for _, r := range batch {
		switch {
		case r.wrote:
			r.err = &commitError{cause: cause, inBatch: true}
		case r.err != nil && r.err == r.ctx.Err():
			// canceled before its writes: it wrote nothing, say so
		default:
			r.err = &commitError{cause: cause}
		}
	}
}

// update runs a write transaction, turning a panic of the storage engine
// into an error (which then disables writes).
func (s *BoltStore) update(fn func(*bolt.Tx) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("storage engine panicked: %v", p)
		}
	}()
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	return s.db.Update(fn)
}

// apply writes the batch. Each request is checked completely before any of
// its writes, so one that fails (a conflict, a canceled context, a corrupt
// stream) writes nothing while the others proceed. An error returned from
// here is a storage failure and fails the whole transaction.
func (c *committer) apply(tx *bolt.Tx, batch []*request, hook *func() error) error {
	bk, err := openBuckets(tx)
	if err != nil {
		return err
	}
	bk.seq.FillPercent = 1.0 // keys only ever grow: pack pages full
	c.idx.reset()
	lastSeq, err := readLastSeq(bk.meta)
	if err != nil {
		return err
	}
	startSeq := lastSeq
	for _, r := range batch {
		r.err, r.wrote = nil, false
		if err := r.ctx.Err(); err != nil {
			r.err = err
			continue
		}
		st, err := c.state(bk, r.stream)
		if err != nil {
			r.err = err
			continue
		}
		if r.err = r.check(st.version, lastSeq); r.err != nil {
			continue
		}
		if r.kind == reqSnapshot {
			if below, err := belowBase(bk, r); err != nil || !below {
				if err == nil {
					err = bk.snaps.Put(c.streamKey(r.stream), r.buf)
				}
				if err != nil {
					return err
				}
			}
			r.wrote = true
			continue
		}
		if st.bucket == nil {
			if st.bucket, err = bk.streams.CreateBucket(c.streamKey(r.stream)); err != nil {
				return err
			}
		}
		st.bucket.FillPercent = 1.0
		res := AppendResult{FirstVersion: st.version + 1, FirstSeq: lastSeq + 1}
		start := 0
		for _, end := range r.ends {
			rec := r.buf[start:end]
			start = end
			st.version++
			lastSeq++
			patchRecord(rec, lastSeq, st.version, &st.head)
			st.head = sha256.Sum256(rec)
			if err := putRecord(bk, st.bucket, &c.arena, &c.idx, &c.k8, r.stream, st.version, lastSeq, rec); err != nil {
				return err
			}
		}
		st.dirty = true
		res.LastVersion, res.LastSeq, res.Head = st.version, lastSeq, st.head
		r.res = res
		r.wrote = true
		c.states[r.stream] = st
	}
	for stream, st := range c.states {
		if !st.dirty {
			continue
		}
		if err := putHead(bk, &c.arena, c.streamKey(stream), st.version, &st.head); err != nil {
			return err
		}
	}
	if lastSeq != startSeq {
		if err := putLastSeq(bk, &c.arena, lastSeq); err != nil {
			return err
		}
		c.committed = lastSeq
	}
	if hook != nil {
		return (*hook)()
	}
	return nil
}

// check says whether r can be written to a stream at version with the
// global sequence at lastSeq: a snapshot must not be beyond the head, an
// append must find the version it expects and not overflow.
func (r *request) check(version int64, lastSeq uint64) error {
	if r.kind == reqSnapshot {
		if r.snapVersion > version {
			return snapshotBeyondHead(r.stream, r.snapVersion, version)
		}
		return nil
	}
	if r.expected != Any && r.expected != version {
		return &ConflictError{Stream: r.stream, Expected: r.expected, Actual: version}
	}
	n := int64(len(r.ends))
	if version > math.MaxInt64-n || lastSeq > math.MaxUint64-uint64(n) {
		return fmt.Errorf("eventstore: stream %q: version or sequence would overflow", r.stream)
	}
	return nil
}

// state returns a stream's head as of the batch so far, loading it from the
// file the first time. A stream whose metadata disagrees with its records
// (a dropped tail, say) is refused: appending would bury the damage.
func (c *committer) state(bk *buckets, stream string) (streamState, error) {
	if st, ok := c.states[stream]; ok {
		return st, nil
	}
	var st streamState
	key := c.streamKey(stream)
	if v := bk.heads.Get(key); v != nil {
		var err error
		if st.version, st.head, err = decodeHead(stream, v); err != nil {
			return st, err
		}
	}
	st.bucket = bk.streams.Bucket(key)
	var last int64
	if st.bucket != nil {
		if k, _ := st.bucket.Cursor().Last(); len(k) == 8 {
			last = int64(binary.BigEndian.Uint64(k))
		}
	}
	if last < st.version { // every record up to the head removed (RemovePrefix)?
		if bv := bk.bases.Get(key); bv != nil {
			base, err := decodeBase(stream, bv)
			if err != nil {
				return st, err
			}
			last = max(last, base.Version)
		}
	}
	if last != st.version {
		return st, corrupt(stream, 0, fmt.Sprintf(
			"stream metadata says the head is version %d but the last record is version %d; refusing to append", st.version, last))
	}
	c.states[stream] = st
	return st, nil
}
