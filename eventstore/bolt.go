package eventstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"sync"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Bucket and key names of the bolt data file (see doc.go for the layout).
var (
	bucketMeta      = []byte("meta")
	bucketStreams   = []byte("streams")
	bucketHeads     = []byte("heads")
	bucketSeq       = []byte("seq")
	bucketSnapshots = []byte("snapshots")

	keyFormat  = []byte("format")
	keyLastSeq = []byte("lastseq")
)

// queueLength bounds appends waiting for the committer; a full queue makes
// Append wait (or give up with its context) rather than pile up memory.
const queueLength = 4096

// BoltStore is the durable Store: one bbolt file, one committer goroutine
// that group-commits concurrent appends. It is safe for concurrent use.
type BoltStore struct {
	db   *bolt.DB
	path string
	opts resolvedOptions

	// mu orders Close against enqueues and read transactions: both hold it
	// shared, Close takes it exclusively to mark the store closed.
	mu         sync.RWMutex
	closed     bool
	closedFlag atomic.Bool // lock-free early check of closed
	queue      chan *request
	done       chan struct{} // closed when the committer has exited
	closeOnce  sync.Once
	closeErr   error

	// failed holds the cause of the failed commit that disabled writes.
	failed atomic.Pointer[error]
	// commitHook, if set, runs inside each commit's transaction after its
	// writes; an error from it fails the commit. Tests use it to inject
	// failures.
	commitHook atomic.Pointer[func() error]
	// applyHook, if set, runs inside each of the applier's bbolt
	// transactions (journal path); an error fails it.
	applyHook atomic.Pointer[func() error]
	// tableHook, if set, runs inside each TableWrite's transaction after
	// its writes; an error from it fails the write (tests).
	tableHook atomic.Pointer[func() error]
	// watch are the CommitWatcher callbacks.
	watch watchers

	cm committer // owned by the committer goroutine

	// batchBytes caps one group commit (MaxCommitBytes; with the journal
	// also what one segment holds).
	batchBytes int

	// The journal (nil when Options.JournalOff): see journal_store.go.
	j            *journal
	over         *overlay // journaled records bbolt does not cover yet (empty without a journal)
	ap           applier
	jseq         uint64 // committer: the last sequence written to the journal
	headLimit    int    // streams whose heads the committer keeps (tests set 0)
	applied      atomic.Uint64
	applications atomic.Uint64
	frames       atomic.Uint64
	warnings     []string
	replayInfo   ReplayInfo

	// m are the store's metrics (metrics.go); nil without a MeterProvider.
	m *storeMetrics
}

var _ Store = (*BoltStore)(nil)

// Open opens (creating if needed) the data file at path. It fails with an
// error matching ErrLocked if another holder keeps the file locked for
// Options.OpenTimeout, ErrUnsupportedFormat for a file of an unknown format
// version, ErrCorrupt for a file that is not a valid database.
func Open(path string, opts *Options) (*BoltStore, error) {
	o, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	_, statErr := os.Stat(path)
	created := errors.Is(statErr, fs.ErrNotExist)
	metaWarn := ""
	if !created {
		metaWarn = checkMetaPages(path)
	}

	db, err := openBolt(path, o)
	if err != nil {
		switch {
		case errors.Is(err, berrors.ErrTimeout):
			return nil, fmt.Errorf("%w: %s is held by another process (or another Open in this process); gave up after %s",
				ErrLocked, path, o.OpenTimeout)
		case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum):
			return nil, fmt.Errorf("%w: %s is not a valid database file: %w", ErrCorrupt, path, err)
		case errors.Is(err, berrors.ErrVersionMismatch):
			return nil, fmt.Errorf("%w: %s was written by an incompatible bbolt version: %w", ErrUnsupportedFormat, path, err)
		}
		return nil, fmt.Errorf("eventstore: open %s: %w", path, err)
	}
	if created && !o.NoSync {
		// bbolt fsyncs the file but not the directory entry that names it.
		if err := syncDir(filepath.Dir(path)); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("eventstore: sync directory of %s: %w", path, err)
		}
	}
	if err := initFile(db, path); err != nil {
		_ = db.Close()
		return nil, err
	}
	s := &BoltStore{
		db:         db,
		path:       path,
		opts:       o,
		queue:      make(chan *request, queueLength),
		done:       make(chan struct{}),
		over:       newOverlay(),
		batchBytes: o.MaxCommitBytes,
		headLimit:  headCacheStreams,
	}
	s.ap.kick = make(chan struct{}, 1)
	s.ap.stop = make(chan struct{})
	s.ap.done = make(chan struct{})
	if err := s.openJournal(metaWarn); err != nil {
		if s.j != nil {
			_ = s.j.close()
		}
		_ = db.Close()
		return nil, err
	}
	s.cm.init()
	s.m = newStoreMetrics(o.MeterProvider, s, o.Logger)
	if s.j != nil {
		s.batchBytes = min(o.MaxCommitBytes, int(s.j.capacity())-frameHeaderSize-frameAlign)
		go s.applyLoop()
	} else {
		close(s.ap.done)
	}
	go s.run()
	return s, nil
}

// openBolt opens the bbolt file, turning a panic while it reads a damaged
// meta or freelist page into an error.
func openBolt(path string, o resolvedOptions) (db *bolt.DB, err error) {
	defer func() {
		if p := recover(); p != nil {
			db, err = nil, &CorruptionError{Reason: "the storage engine failed opening " + path, Err: fmt.Errorf("panic: %v", p)}
		}
	}()
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	return bolt.Open(path, o.FileMode, &bolt.Options{
		Timeout:      o.OpenTimeout,
		NoSync:       o.NoSync,
		FreelistType: bolt.FreelistMapType,
		// NoFreelistSync would save a page write per commit, but Open would
		// then rebuild the freelist by walking every page in a goroutine of
		// bbolt's own, where a damaged page crashes the process instead of
		// becoming ErrCorrupt (TestBoltSurvivesPageDamage). Kept off.
		PageSize:        o.PageSize,
		InitialMmapSize: o.InitialMmapSize,
	})
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// initFile creates the buckets of a new file, or checks the format version
// and buckets of an existing one.
func initFile(db *bolt.DB, path string) error {
	fresh := false
	err := safeView(db, func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			if k, _ := tx.Cursor().First(); k != nil {
				return fmt.Errorf("%w: %s is a bbolt file without eventstore metadata", ErrUnsupportedFormat, path)
			}
			fresh = true
			return nil
		}
		v := meta.Get(keyFormat)
		if len(v) != 4 {
			return fmt.Errorf("%w: %s: format version value is %d bytes, want 4", ErrCorrupt, path, len(v))
		}
		if f := binary.BigEndian.Uint32(v); f != FormatVersion {
			return fmt.Errorf("%w: %s has format version %d; this build reads version %d", ErrUnsupportedFormat, path, f, FormatVersion)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !fresh {
		// Files of earlier builds have no index (or one that misses what
		// an earlier build appended since): index those records now.
		if err := catchUpIndex(db, 50_000); err != nil {
			return err
		}
		return safeView(db, func(tx *bolt.Tx) error {
			_, err := openBuckets(tx)
			return err
		})
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketMeta, bucketStreams, bucketHeads, bucketSeq, bucketSnapshots, bucketIndex, bucketBases} {
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(keyFormat, binary.BigEndian.AppendUint32(nil, FormatVersion))
	})
	if err != nil {
		return fmt.Errorf("eventstore: initialise %s: %w", path, err)
	}
	return nil
}

// buckets are the top-level buckets within one transaction.
type buckets struct {
	meta, streams, heads, seq, snaps, index, bases *bolt.Bucket
}

func openBuckets(tx *bolt.Tx) (*buckets, error) {
	b := &buckets{
		meta:    tx.Bucket(bucketMeta),
		streams: tx.Bucket(bucketStreams),
		heads:   tx.Bucket(bucketHeads),
		seq:     tx.Bucket(bucketSeq),
		snaps:   tx.Bucket(bucketSnapshots),
		index:   tx.Bucket(bucketIndex),
		bases:   tx.Bucket(bucketBases),
	}
	if b.meta == nil || b.streams == nil || b.heads == nil || b.seq == nil || b.snaps == nil || b.index == nil || b.bases == nil {
		return nil, corrupt("", 0, "a top-level bucket is missing")
	}
	return b, nil
}

func readLastSeq(meta *bolt.Bucket) (uint64, error) {
	v := meta.Get(keyLastSeq)
	if v == nil {
		return 0, nil
	}
	if len(v) != 8 {
		return 0, corrupt("", 0, fmt.Sprintf("last sequence value is %d bytes, want 8", len(v)))
	}
	return binary.BigEndian.Uint64(v), nil
}

func u64key(b *[8]byte, v uint64) []byte {
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}

// safeView runs a read transaction, turning a panic of the storage engine
// (bbolt panics on some corrupt pages, and a fault in the memory map is a
// panic once SetPanicOnFault is on) into a *CorruptionError.
func safeView(db *bolt.DB, fn func(*bolt.Tx) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &CorruptionError{Reason: "the storage engine failed while reading", Err: fmt.Errorf("panic: %v", p)}
		}
	}()
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	return db.View(fn)
}

// view runs a read transaction unless the store is closed.
func (s *BoltStore) view(fn func(*bolt.Tx) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	return safeView(s.db, fn)
}

// Path returns the data file's path.
func (s *BoltStore) Path() string { return s.path }

// boltSource is a stream's records within one read transaction.
type boltSource struct {
	stream string
	key    []byte
	heads  *bolt.Bucket
	bases  *bolt.Bucket
	b      *bolt.Bucket // nil if the stream has no records bucket
	c      *bolt.Cursor
	k8     [8]byte
}

func newBoltSource(bk *buckets, stream string) *boltSource {
	s := &boltSource{stream: stream, key: []byte(stream), heads: bk.heads, bases: bk.bases}
	s.b = bk.streams.Bucket(s.key)
	return s
}

func (s *boltSource) head() (int64, Hash, bool, error) {
	v := s.heads.Get(s.key)
	if v == nil {
		return 0, Hash{}, false, nil
	}
	ver, h, err := decodeHead(s.stream, v)
	return ver, h, err == nil, err
}

func (s *boltSource) get(version int64) ([]byte, bool, error) {
	if s.b == nil {
		return nil, false, nil
	}
	v := s.b.Get(u64key(&s.k8, uint64(version)))
	return v, v != nil, nil
}

func (s *boltSource) seek(version int64) (int64, []byte, bool, error) {
	if s.b == nil {
		return 0, nil, false, nil
	}
	s.c = s.b.Cursor()
	k, v := s.c.Seek(u64key(&s.k8, uint64(version)))
	return s.entry(k, v)
}

func (s *boltSource) next() (int64, []byte, bool, error) {
	k, v := s.c.Next()
	return s.entry(k, v)
}

func (s *boltSource) entry(k, v []byte) (int64, []byte, bool, error) {
	if k == nil {
		return 0, nil, false, nil
	}
	if len(k) != 8 || v == nil {
		return 0, nil, false, corrupt(s.stream, 0, "unexpected key "+quoteBytes(k)+" in the records bucket")
	}
	ver := int64(binary.BigEndian.Uint64(k))
	if ver < 1 {
		return 0, nil, false, corrupt(s.stream, 0, fmt.Sprintf("record key for version %d", ver))
	}
	return ver, v, true, nil
}

// Append implements Store. The events are validated and encoded in the
// caller's goroutine, then handed to the committer, which commits all
// pending appends in one fsynced transaction.
//
// The context is honoured until the append is queued, and again by the
// committer just before it writes the append: an append canceled by then
// returns ctx.Err() and wrote nothing. Once its writes are part of a commit,
// Append waits for that commit (milliseconds) and reports its real outcome
// rather than ctx.Err(): returning "canceled" for events that were in fact
// committed would be a lie the caller might act on.
func (s *BoltStore) Append(ctx context.Context, stream string, expected int64, events []Event) (AppendResult, error) {
	r, err := s.newAppend(ctx, stream, expected, events)
	if err != nil {
		return AppendResult{}, err
	}
	if err := s.submit(ctx, r); err != nil {
		putRequest(r)
		return AppendResult{}, err
	}
	res, err := r.res, r.err
	putRequest(r)
	return res, err
}

// newAppend validates and encodes an append into a request, in the
// caller's goroutine.
func (s *BoltStore) newAppend(ctx context.Context, stream string, expected int64, events []Event) (*request, error) {
	if s.closedFlag.Load() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := getRequest()
	var err error
	r.buf, r.ends, err = encodeAppend(r.buf, r.ends, stream, expected, events, &s.opts.Limits)
	if err != nil {
		putRequest(r)
		return nil, err
	}
	if r.frameBytes() > s.batchBytes {
		n := r.frameBytes()
		putRequest(r)
		return nil, fmt.Errorf("%w: %d events encode to %d bytes; one journal segment holds %d (Options.JournalSegmentBytes)",
			ErrAppendTooLarge, len(events), n, s.batchBytes)
	}
	r.kind, r.ctx, r.stream, r.expected = reqAppend, ctx, stream, expected
	return r, nil
}

// AppendAsync is Append without the wait, for callers that must not block
// a goroutine per append (an actor with many scopes in flight): done is
// called exactly once with what Append would have returned — on the
// committer's goroutine after the commit, or on the caller's goroutine if
// the append is refused before it is queued. done must be quick and must
// not block or call the store: it runs while the committer waits.
func (s *BoltStore) AppendAsync(ctx context.Context, stream string, expected int64, events []Event, done func(AppendResult, error)) {
	r, err := s.newAppend(ctx, stream, expected, events)
	if err != nil {
		done(AppendResult{}, err)
		return
	}
	r.cb = done
	if err := s.enqueue(ctx, r); err != nil {
		putRequest(r)
		done(AppendResult{}, err)
	}
}

// SaveSnapshot implements Store. The snapshot goes through the committer,
// so it is durable and atomic like an append, and its version is checked
// against the stream's head as of that commit.
func (s *BoltStore) SaveSnapshot(ctx context.Context, stream string, snap Snapshot) error {
	if s.closedFlag.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkSnapshot(stream, &snap, &s.opts.Limits); err != nil {
		return err
	}
	r := getRequest()
	r.buf = encodeSnapshot(r.buf, stream, &snap)
	r.kind, r.ctx, r.stream, r.snapVersion = reqSnapshot, ctx, stream, snap.Version
	if err := s.submit(ctx, r); err != nil {
		putRequest(r)
		return err
	}
	err := r.err
	putRequest(r)
	return err
}

// submit queues r and waits for the committer's answer.
func (s *BoltStore) submit(ctx context.Context, r *request) error {
	if err := s.enqueue(ctx, r); err != nil {
		return err
	}
	<-r.done
	return nil
}

// enqueue hands r to the committer; after a nil return the committer owns
// r until it answers.
func (s *BoltStore) enqueue(ctx context.Context, r *request) error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	if cause := s.failed.Load(); cause != nil {
		s.mu.RUnlock()
		return &commitError{cause: *cause}
	}
	select {
	case s.queue <- r:
	case <-ctx.Done():
		s.mu.RUnlock()
		return ctx.Err()
	}
	s.mu.RUnlock()
	return nil
}

// ReadStream implements Store. Every record is checked before fn sees it:
// the envelope decodes, versions are contiguous and each record's hash is
// what its successor (or, for the last one, the stream metadata) recorded,
// so a flipped byte or a dropped tail is a *CorruptionError, never a
// silently wrong record. fn runs outside any transaction and may call the
// store.
func (s *BoltStore) ReadStream(ctx context.Context, stream string, from int64, fn func(Record) error) error {
	if err := checkStream(stream); err != nil {
		return err
	}
	cr := newChainReader(stream, from)
	return deliver(ctx, func(buf []Record) (chunk []Record, end bool, err error) {
		over := s.over.stream(stream) // before the transaction: see overlay.go
		err = s.view(func(tx *bolt.Tx) error {
			bk, err := openBuckets(tx)
			if err != nil {
				return err
			}
			src, err := newLayeredSource(newBoltSource(bk, stream), over)
			if err != nil {
				return err
			}
			chunk, end, err = cr.readChunk(src, buf, true, chunkRecords, chunkBytes)
			return err
		})
		return chunk, end, err
	}, fn)
}

// ReadAll implements Store. Each record is checked against its global index
// entry (stream, version and sequence agree, the envelope decodes); hash
// chains are checked by ReadStream and VerifyStream.
func (s *BoltStore) ReadAll(ctx context.Context, from uint64, fn func(Record) error) error {
	w := allWalker{next: max(from, 1)}
	return deliver(ctx, func(buf []Record) (chunk []Record, end bool, err error) {
		over, _ := s.over.view() // before the transaction: see overlay.go
		err = s.view(func(tx *bolt.Tx) error {
			bk, err := openBuckets(tx)
			if err != nil {
				return err
			}
			chunk, end, err = w.readChunk(bk, buf)
			if err == nil && end {
				chunk, end, err = w.readOverlay(over, chunk)
			}
			return err
		})
		return chunk, end, err
	}, fn)
}

// allWalker walks the global index across read transactions.
type allWalker struct {
	next  uint64
	names interner
	types interner
	k8    [8]byte
}

func (w *allWalker) readChunk(bk *buckets, out []Record) ([]Record, bool, error) {
	last, err := readLastSeq(bk.meta)
	if err != nil {
		return out, true, err
	}
	// Once history was removed (RemovePrefix), the sequence has gaps; Verify
	// checks that they add up to what was removed.
	gaps := readRemovedSeq(bk.meta) > 0
	var (
		curName   string
		curBucket *bolt.Bucket
		size      int
	)
	c := bk.seq.Cursor()
	for k, v := c.Seek(u64key(&w.k8, w.next)); k != nil; k, v = c.Next() {
		if len(out) >= chunkRecords || size >= chunkBytes {
			return out, false, nil
		}
		if len(k) != 8 || len(v) < 9 {
			return out, true, corrupt("", 0, "malformed global index entry "+quoteBytes(k))
		}
		seq := binary.BigEndian.Uint64(k)
		if seq != w.next && !gaps {
			return out, true, corrupt("", 0, fmt.Sprintf("global index is missing sequence %d", w.next))
		}
		w.next = seq
		if seq > last {
			return out, true, corrupt("", 0, fmt.Sprintf("global index has sequence %d beyond the last sequence %d", seq, last))
		}
		version := int64(binary.BigEndian.Uint64(v[:8]))
		name := v[8:]
		if curBucket == nil || string(name) != curName {
			curName = w.names.get(name)
			if curBucket = bk.streams.Bucket(name); curBucket == nil {
				return out, true, corrupt(curName, version, fmt.Sprintf("record is missing (global sequence %d points to it)", seq))
			}
		}
		raw := curBucket.Get(u64key(&w.k8, uint64(version)))
		if raw == nil {
			return out, true, corrupt(curName, version, fmt.Sprintf("record is missing (global sequence %d points to it)", seq))
		}
		var f recordFields
		if err := parseRecord(raw, &f); err != nil {
			return out, true, recordDecodeError(curName, version, err)
		}
		if string(f.stream) != curName || f.version != version || f.seq != seq || len(f.typ) == 0 {
			return out, true, corrupt(curName, version, fmt.Sprintf(
				"record (stream %s, version %d, sequence %d) disagrees with global index entry %d", quoteString(f.stream), f.version, f.seq, seq))
		}
		out = append(out, Record{
			Stream:   curName,
			Version:  version,
			Seq:      seq,
			Type:     w.types.get(f.typ),
			Data:     cloneBytes(f.data),
			PrevHash: f.prev,
			Hash:     sha256.Sum256(raw),
		})
		size += len(raw)
		w.next++
	}
	if w.next <= last {
		if !gaps {
			return out, true, corrupt("", 0, fmt.Sprintf("global index is missing sequence %d (last sequence is %d)", w.next, last))
		}
		w.next = last + 1
	}
	return out, true, nil
}

// readOverlay continues a global walk past bbolt's last sequence with the
// overlay's records.
func (w *allWalker) readOverlay(over []jrec, out []Record) ([]Record, bool, error) {
	if len(over) == 0 || w.next > over[len(over)-1].seq {
		return out, true, nil
	}
	if w.next < over[0].seq {
		return out, true, corrupt("", 0, fmt.Sprintf("sequence %d is neither in bbolt nor in the journal", w.next))
	}
	size := 0
	for i := int(w.next - over[0].seq); i < len(over); i++ {
		if len(out) >= chunkRecords || size >= chunkBytes {
			return out, false, nil
		}
		r := &over[i]
		var f recordFields
		if err := parseRecord(r.raw, &f); err != nil {
			return out, true, recordDecodeError(r.stream, r.version, err)
		}
		out = append(out, Record{
			Stream:   r.stream,
			Version:  r.version,
			Seq:      r.seq,
			Type:     w.types.get(f.typ),
			Data:     cloneBytes(f.data),
			PrevHash: f.prev,
			Hash:     r.hash,
		})
		size += len(r.raw)
		w.next = r.seq + 1
	}
	return out, true, nil
}

// Stream implements Store.
func (s *BoltStore) Stream(ctx context.Context, stream string) (StreamInfo, error) {
	if err := checkStream(stream); err != nil {
		return StreamInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		return StreamInfo{}, err
	}
	info := StreamInfo{Stream: stream}
	over := s.over.stream(stream)
	err := s.view(func(tx *bolt.Tx) error {
		bk, err := openBuckets(tx)
		if err != nil {
			return err
		}
		if v := bk.heads.Get([]byte(stream)); v != nil {
			info.Version, info.Head, err = decodeHead(stream, v)
		}
		return err
	})
	if err != nil {
		return StreamInfo{}, err
	}
	if n := len(over); n > 0 && over[n-1].version > info.Version {
		info.Version, info.Head = over[n-1].version, over[n-1].hash
	}
	return info, nil
}

// Streams implements Store. fn runs outside any transaction.
func (s *BoltStore) Streams(ctx context.Context, fn func(StreamInfo) error) error {
	var after []byte
	var chunk []StreamInfo
	over := s.over.heads() // before any transaction: see overlay.go
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		end := true
		err := s.view(func(tx *bolt.Tx) error {
			bk, err := openBuckets(tx)
			if err != nil {
				return err
			}
			chunk = chunk[:0]
			c := bk.heads.Cursor()
			k, v := c.First()
			if after != nil {
				if k, v = c.Seek(after); k != nil && string(k) == string(after) {
					k, v = c.Next()
				}
			}
			for ; k != nil; k, v = c.Next() {
				if len(chunk) >= chunkRecords {
					end = false
					break
				}
				name := string(k)
				ver, h, err := decodeHead(name, v)
				if err != nil {
					return err
				}
				chunk = append(chunk, StreamInfo{Stream: name, Version: ver, Head: h})
			}
			return nil
		})
		if err != nil {
			return err
		}
		var next []byte
		if !end && len(chunk) > 0 {
			next = []byte(chunk[len(chunk)-1].Stream)
		}
		chunk, over = mergeHeads(chunk, over, next)
		for _, info := range chunk {
			if err := fn(info); err != nil {
				return err
			}
		}
		if next == nil {
			return nil
		}
		after = next
	}
}

// mergeHeads merges into a chunk of bbolt's heads (sorted) the overlay's
// heads up to bound (all of them when bound is nil), the higher version
// winning; it returns the overlay heads left.
func mergeHeads(chunk, over []StreamInfo, bound []byte) ([]StreamInfo, []StreamInfo) {
	k := len(over)
	if bound != nil {
		k = sort.Search(len(over), func(i int) bool { return over[i].Stream > string(bound) })
	}
	if k == 0 {
		return chunk, over
	}
	merged := make([]StreamInfo, 0, len(chunk)+k)
	i, j := 0, 0
	for i < len(chunk) || j < k {
		switch {
		case j == k || (i < len(chunk) && chunk[i].Stream < over[j].Stream):
			merged = append(merged, chunk[i])
			i++
		case i == len(chunk) || over[j].Stream < chunk[i].Stream:
			merged = append(merged, over[j])
			j++
		default:
			if over[j].Version > chunk[i].Version {
				merged = append(merged, over[j])
			} else {
				merged = append(merged, chunk[i])
			}
			i++
			j++
		}
	}
	return merged, over[k:]
}

// LastSeq implements Store.
func (s *BoltStore) LastSeq(ctx context.Context) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var last uint64
	_, overLast := s.over.view()
	err := s.view(func(tx *bolt.Tx) error {
		bk, err := openBuckets(tx)
		if err != nil {
			return err
		}
		last, err = readLastSeq(bk.meta)
		return err
	})
	return max(last, overLast), err
}

// LoadSnapshot implements Store. A snapshot whose checksum fails, or that
// claims a version beyond the stream's head, is a *CorruptionError.
func (s *BoltStore) LoadSnapshot(ctx context.Context, stream string) (Snapshot, bool, error) {
	if err := checkStream(stream); err != nil {
		return Snapshot{}, false, err
	}
	if err := ctx.Err(); err != nil {
		return Snapshot{}, false, err
	}
	var snap Snapshot
	var ok bool
	err := s.view(func(tx *bolt.Tx) error {
		bk, err := openBuckets(tx)
		if err != nil {
			return err
		}
		raw := bk.snaps.Get([]byte(stream))
		if raw == nil {
			return nil
		}
		if snap, err = decodeSnapshot(stream, raw); err != nil {
			return err
		}
		head, _, _, err := newBoltSource(bk, stream).head()
		if err != nil {
			return err
		}
		if snap.Version > head {
			return corrupt(stream, 0, fmt.Sprintf("snapshot covers version %d but the stream's head is %d", snap.Version, head))
		}
		ok = true
		return nil
	})
	if err != nil {
		return Snapshot{}, false, err
	}
	return snap, ok, nil
}

// VerifyStream implements Store: it walks the whole chain in one read
// transaction, so it checks one consistent state of the stream.
func (s *BoltStore) VerifyStream(ctx context.Context, stream string) error {
	if err := checkStream(stream); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	over := s.over.stream(stream)
	return s.view(func(tx *bolt.Tx) error {
		bk, err := openBuckets(tx)
		if err != nil {
			return err
		}
		src, err := newLayeredSource(newBoltSource(bk, stream), over)
		if err != nil {
			return err
		}
		cr := newChainReader(stream, 1)
		return verifyChain(ctx, &cr, src)
	})
}

// verifyChain walks a whole chain within one transaction.
func verifyChain(ctx context.Context, cr *chainReader, src recordSource) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		_, end, err := cr.readChunk(src, nil, false, 4096, 1<<62)
		if err != nil || end {
			return err
		}
	}
}

// Close implements Store. Appends queued before Close are still committed
// (or failed, if writes are disabled) and answered; the committer then stops
// and the file is released. Close is idempotent; every later call of another
// method fails with ErrClosed.
func (s *BoltStore) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.closedFlag.Store(true)
		close(s.queue)
		s.mu.Unlock()
		<-s.done
		close(s.ap.stop) // the applier writes what is left to bbolt, then exits
		<-s.ap.done
		if s.j != nil {
			if err := s.j.close(); err != nil {
				s.closeErr = fmt.Errorf("eventstore: close journal of %s: %w", s.path, err)
			}
		}
		if err := s.db.Close(); err != nil && s.closeErr == nil {
			s.closeErr = fmt.Errorf("eventstore: close %s: %w", s.path, err)
		}
		s.m.close()
	})
	return s.closeErr
}
