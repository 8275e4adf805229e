package eventstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The journal path of BoltStore: the committer writes each group commit as
// one journal frame (one fdatasync), publishes its records to the overlay
// and answers; the applier goroutine writes them to bbolt in large
// durable transactions and recycles the journal segments bbolt covers.

// applyMaxBytes bounds the records one application writes to bbolt.
const applyMaxBytes = 64 << 20

// replayCommitBytes bounds the records one replay commit writes at Open.
const replayCommitBytes = 16 << 20

// headCacheStreams bounds the stream heads the committer keeps.
const headCacheStreams = 1 << 16

// applier is the state of the applier goroutine.
type applier struct {
	kick    chan struct{} // buffered(1): something to look at
	stop    chan struct{} // closed by Close
	done    chan struct{} // closed when the applier has exited
	mu      sync.Mutex
	waiting []*request // snapshots and flushes waiting for bbolt to cover needSeq

	// owned by the applier goroutine
	applied     uint64 // bbolt covers every sequence up to applied
	prevApplied uint64 // ... as of the commit before the latest
	arena
	buckets map[string]*bolt.Bucket
	heads   map[string]*jrec
	idx     indexer
	key     []byte
	k8      [8]byte
}

func (a *applier) signal() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// frameBytes is what an append adds to a journal frame.
func (r *request) frameBytes() int { return len(r.buf) + 4*len(r.ends) }

// commitJournal checks a batch like commit does, writes its records as one
// journal frame with one fdatasync, publishes them and answers.
func (s *BoltStore) commitJournal(batch []*request) {
	if cause := s.failed.Load(); cause != nil {
		for _, r := range batch {
			r.err = &commitError{cause: *cause}
			r.answer()
		}
		return
	}
	c := &s.cm
	start := time.Now()
	defer func() {
		clear(c.states)
		if c.rtx != nil {
			_ = c.rtx.Rollback()
			c.rtx, c.rbk = nil, nil
		}
	}()
	lastSeq := s.jseq // the committer alone writes the journal: no overlay read needed
	startSeq := lastSeq
	capHint := 2*frameHeaderSize + frameAlign // header, padding, zero trailer
	for _, r := range batch {
		if r.kind == reqAppend {
			capHint += r.frameBytes()
		}
	}
	frame := make([]byte, frameHeaderSize, capHint)
	recs := c.jrecs[:0]
	var snaps []*request
	for _, r := range batch {
		r.err, r.wrote = nil, false
		if err := r.ctx.Err(); err != nil {
			r.err = err
			continue
		}
		st, err := s.jstate(r.stream)
		if err != nil {
			r.err = err
			continue
		}
		if r.err = r.check(st.version, lastSeq); r.err != nil {
			continue
		}
		if r.kind == reqSnapshot {
			snaps = append(snaps, r) // the applier writes it once bbolt covers the batch
			continue
		}
		res := AppendResult{FirstVersion: st.version + 1, FirstSeq: lastSeq + 1}
		start := 0
		for _, end := range r.ends {
			l := end - start
			frame = binary.LittleEndian.AppendUint32(frame, uint32(l))
			off := len(frame)
			frame = append(frame, r.buf[start:end]...)
			start = end
			rec := frame[off : off+l : off+l]
			st.version++
			lastSeq++
			patchRecord(rec, lastSeq, st.version, &st.head)
			st.head = sha256.Sum256(rec)
			recs = append(recs, jrec{stream: r.stream, version: st.version, seq: lastSeq, raw: rec, hash: st.head})
		}
		res.LastVersion, res.LastSeq, res.Head = st.version, lastSeq, st.head
		r.res = res
		r.wrote = true
		c.states[r.stream] = st
	}
	if c.rtx != nil {
		_ = c.rtx.Rollback()
		c.rtx, c.rbk = nil, nil
	}
	if len(recs) > 0 {
		payload := len(frame) - frameHeaderSize
		frame = frame[:frameSize(payload)] // zero padding: capHint leaves room
		var err error
		if hook := s.commitHook.Load(); hook != nil {
			err = (*hook)()
		}
		var gen uint64
		if err == nil {
			gen, err = s.j.room(int64(len(frame)))
		}
		if err == nil {
			sealFrame(frame[:frameHeaderSize+payload], gen, startSeq+1, len(recs))
			ws := time.Now()
			err = s.j.write(frame, lastSeq)
			s.m.synced(time.Since(ws), err)
		}
		s.m.committed(true, len(batch), len(recs), time.Since(start), err)
		if err != nil {
			s.failCommit(batch, fmt.Errorf("eventstore: journal write of %d requests for %s failed: %w", len(batch), s.path, err))
			for _, r := range batch {
				r.answer()
			}
			clear(recs)
			c.jrecs = recs[:0]
			s.ap.signal()
			return
		}
		s.jseq = lastSeq
		s.frames.Add(1)
		s.over.publish(recs)
		// The committer is the only writer: the heads it wrote stay true,
		// and hot streams need no bbolt read in the next batch.
		if c.heads == nil {
			c.heads = make(map[string]streamState)
		}
		for name, st := range c.states {
			if s.headLimit == 0 {
				break
			}
			if len(c.heads) >= s.headLimit {
				if _, ok := c.heads[name]; !ok {
					for k := range c.heads { // evict an arbitrary one
						delete(c.heads, k)
						break
					}
				}
			}
			c.heads[name] = streamState{version: st.version, head: st.head}
		}
	}
	published := len(recs) > 0
	clear(recs)
	c.jrecs = recs[:0]
	for _, r := range batch {
		if r.kind == reqSnapshot && r.err == nil {
			continue // the applier answers it, once bbolt covers lastSeq
		}
		r.answer()
	}
	if published {
		// Synced in the journal and published to the overlay, which every
		// read takes before its bbolt transaction: ReadAll sees them.
		s.watch.notify(lastSeq)
	}
	if len(snaps) > 0 {
		s.ap.mu.Lock()
		for _, r := range snaps {
			r.needSeq = lastSeq
			s.ap.waiting = append(s.ap.waiting, r)
		}
		s.ap.mu.Unlock()
	}
	s.ap.signal()
}

// jstate is a stream's head for the committer on the journal path: as
// updated by this batch, else the overlay's, else bbolt's.
func (s *BoltStore) jstate(stream string) (st streamState, err error) {
	c := &s.cm
	if st, ok := c.states[stream]; ok {
		return st, nil
	}
	if st, ok := c.heads[stream]; ok {
		c.states[stream] = st
		return st, nil
	}
	if recs := s.over.stream(stream); len(recs) > 0 {
		r := &recs[len(recs)-1]
		st = streamState{version: r.version, head: r.hash}
		c.states[stream] = st
		return st, nil
	}
	defer func() {
		if p := recover(); p != nil {
			err = &CorruptionError{Stream: stream, Reason: "the storage engine failed while reading the stream's head", Err: fmt.Errorf("panic: %v", p)}
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	// The overlay missed: the stream's records are in bbolt — but maybe in
	// a commit newer than the read transaction this batch opened for an
	// earlier stream. The applier counts a commit before it drops its
	// records from the overlay, so a changed count means: read again.
	if c.rtx != nil && s.applications.Load() != c.rtxApps {
		_ = c.rtx.Rollback()
		c.rtx, c.rbk = nil, nil
	}
	if c.rtx == nil {
		c.rtxApps = s.applications.Load()
		tx, err := s.db.Begin(false)
		if err != nil {
			return st, err
		}
		bk, err := openBuckets(tx)
		if err != nil {
			_ = tx.Rollback()
			return st, err
		}
		c.rtx, c.rbk = tx, bk
	}
	st, err = c.state(c.rbk, stream)
	st.bucket = nil
	return st, err
}

// applyLoop is the applier goroutine.
func (s *BoltStore) applyLoop() {
	a := &s.ap
	defer close(a.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	armed := false
	for {
		stopping, fired := false, false
		select {
		case <-a.kick:
		case <-timer.C:
			armed, fired = false, true
		case <-a.stop:
			stopping = true
		}
		if s.failed.Load() == nil {
			n, bytes, _ := s.over.pending()
			a.mu.Lock()
			waiters := len(a.waiting)
			a.mu.Unlock()
			urgent := stopping || fired || bytes >= int64(s.opts.ApplyBytes) || waiters > 0 || s.j.starved()
			switch {
			case n > 0 && urgent:
				s.applyPending(stopping)
			case n == 0 && waiters > 0:
				s.applyPending(false) // snapshots of streams bbolt already covers
			case n > 0 && !armed:
				timer.Reset(s.opts.ApplyInterval)
				armed = true
			}
			if s.failed.Load() == nil && s.j.starved() && a.prevApplied < a.applied {
				// Sealed segments wait for a second commit covering them.
				s.applyPending(false)
			}
			if s.j.needsSpare() {
				if err := s.j.prepareSpare(); err != nil {
					cause := err
					s.failed.CompareAndSwap(nil, &cause)
				}
			}
		}
		if cause := s.failed.Load(); cause != nil {
			s.j.fail(*cause)
			s.failWaiters()
		}
		if stopping {
			return
		}
	}
}

// applyPending writes the overlay's records to bbolt in commits of at most
// applyMaxBytes (all of them when drain is set, else one commit), then
// answers the snapshots and flushes it covered.
func (s *BoltStore) applyPending(drain bool) {
	a := &s.ap
	for {
		all, _ := s.over.view()
		size, k := 0, 0
		for k < len(all) && (k == 0 || size+len(all[k].raw) <= applyMaxBytes) {
			size += len(all[k].raw)
			k++
		}
		recs := all[:k]
		through := a.applied
		if k > 0 {
			through = recs[k-1].seq
		}
		a.mu.Lock()
		var snaps, rest []*request
		for _, r := range a.waiting {
			if r.needSeq <= through {
				snaps = append(snaps, r)
			} else {
				rest = append(rest, r)
			}
		}
		a.waiting = rest
		a.mu.Unlock()
		ws := time.Now()
		err := a.write(s.update, recs, snaps, through, s.applyHook.Load())
		s.m.applied(len(recs), time.Since(ws), err)
		if err != nil {
			cause := fmt.Errorf("eventstore: applying %d journaled records to %s failed: %w", len(recs), s.path, err)
			s.failed.CompareAndSwap(nil, &cause)
			for _, r := range snaps {
				r.err = &commitError{cause: cause, inBatch: r.kind == reqSnapshot}
				r.answer()
			}
			return
		}
		a.prevApplied, a.applied = a.applied, through
		s.applications.Add(1)
		s.applied.Store(through)
		s.over.removeThrough(through)
		s.j.coveredThrough(a.prevApplied, a.applied)
		for _, r := range snaps {
			r.err = nil
			r.answer()
		}
		if !drain || k == len(all) {
			return
		}
	}
}

// failWaiters answers every waiting snapshot or flush with the failure that
// disabled writes.
func (s *BoltStore) failWaiters() {
	cause := s.failed.Load()
	s.ap.mu.Lock()
	waiting := s.ap.waiting
	s.ap.waiting = nil
	s.ap.mu.Unlock()
	for _, r := range waiting {
		r.err = &commitError{cause: *cause}
		r.answer()
	}
}

// write runs apply in one transaction of update and readies the applier
// for the next (the arena's values and the buckets belong to that
// transaction).
func (a *applier) write(update func(func(*bolt.Tx) error) error, recs []jrec, snaps []*request, through uint64, hook *func() error) error {
	err := update(func(tx *bolt.Tx) error { return a.apply(tx, recs, snaps, through, hook) })
	a.arena.reset()
	clear(a.buckets)
	clear(a.heads)
	return err
}

// apply writes records (in sequence order, each continuing its stream) and
// snapshots in one bbolt transaction and records through as bbolt's last
// sequence.
func (a *applier) apply(tx *bolt.Tx, recs []jrec, snaps []*request, through uint64, hook *func() error) error {
	bk, err := openBuckets(tx)
	if err != nil {
		return err
	}
	bk.seq.FillPercent = 1.0
	a.idx.reset()
	if a.buckets == nil {
		a.buckets = make(map[string]*bolt.Bucket)
		a.heads = make(map[string]*jrec)
	}
	for i := range recs {
		r := &recs[i]
		b := a.buckets[r.stream]
		if b == nil {
			a.key = append(a.key[:0], r.stream...)
			if b = bk.streams.Bucket(a.key); b == nil {
				if b, err = bk.streams.CreateBucket(a.key); err != nil {
					return err
				}
			}
			b.FillPercent = 1.0
			a.buckets[r.stream] = b
		}
		if err := putRecord(bk, b, &a.arena, &a.idx, &a.k8, r.stream, r.version, r.seq, r.raw); err != nil {
			return err
		}
		a.heads[r.stream] = r
	}
	for stream, r := range a.heads {
		a.key = append(a.key[:0], stream...)
		if err := putHead(bk, &a.arena, a.key, r.version, &r.hash); err != nil {
			return err
		}
	}
	for _, r := range snaps {
		if r.kind != reqSnapshot {
			continue
		}
		a.key = append(a.key[:0], r.stream...)
		if below, err := belowBase(bk, r); err != nil {
			return err
		} else if below {
			continue
		}
		if err := bk.snaps.Put(a.key, r.buf); err != nil {
			return err
		}
	}
	if err := putLastSeq(bk, &a.arena, through); err != nil {
		return err
	}
	if hook != nil {
		return (*hook)()
	}
	return nil
}

// Flush waits until bbolt covers every append acknowledged before the call
// (with the journal off, every append already is). It fails like a write
// once writes are disabled.
func (s *BoltStore) Flush(ctx context.Context) error {
	if s.opts.JournalOff {
		if s.closedFlag.Load() {
			return ErrClosed
		}
		return nil
	}
	_, last := s.over.view()
	if s.applied.Load() >= last {
		return nil
	}
	r := getRequest()
	r.kind, r.ctx, r.needSeq = reqFlush, ctx, last
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		putRequest(r)
		return ErrClosed
	}
	if cause := s.failed.Load(); cause != nil {
		s.mu.RUnlock()
		putRequest(r)
		return &commitError{cause: *cause}
	}
	s.ap.mu.Lock()
	s.ap.waiting = append(s.ap.waiting, r)
	s.ap.mu.Unlock()
	s.mu.RUnlock()
	s.ap.signal()
	<-r.done
	err := r.err
	putRequest(r)
	return err
}

// JournalStats reports the journal's size and what is pending.
func (s *BoltStore) JournalStats() JournalStats {
	if s.opts.JournalOff {
		return JournalStats{}
	}
	n, bytes, _ := s.over.pending()
	s.j.mu.Lock()
	segs := len(s.j.segs)
	s.j.mu.Unlock()
	return JournalStats{
		Enabled:      true,
		Dir:          s.j.dir,
		Segments:     segs,
		SegmentBytes: s.j.segSize,
		MaxBytes:     s.j.segSize * int64(s.j.maxSegs),
		Bytes:        s.j.segSize * int64(segs),
		Pending:      n,
		PendingBytes: bytes,
		Applied:      s.applied.Load(),
		Applications: s.applications.Load(),
		Frames:       s.frames.Load(),
	}
}

// ---- opening: replay ----

// ReplayInfo says what Open found in the journal.
type ReplayInfo struct {
	Segments  int    // segment files
	Frames    int    // valid frames found
	Records   int    // records applied to bbolt (those it did not cover)
	FromSeq   uint64 // first sequence applied (0: none)
	ToSeq     uint64
	TornBytes int64 // bytes of a torn final frame that were cut
	// Applied says the records were written to bbolt during Open (journal
	// off, or no segment free); otherwise they were loaded for every read
	// at once and the applier writes them to bbolt in the background.
	Applied  bool
	Warnings []string // what was noticed and logged
}

// openJournal replays the journal into bbolt (records after what bbolt
// covers, checked frame by frame and against bbolt's chains), then readies
// the writer. Any doubt is a refusal that says where.
func (s *BoltStore) openJournal(metaWarn string) error {
	dir := JournalDir(s.path)
	exists := true
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		exists = false
	}
	if s.opts.JournalOff && !exists {
		if metaWarn != "" {
			s.warn(metaWarn + "; bbolt serves its previous commit and, with no journal, nothing shows whether the newest was acknowledged")
		}
		return nil
	}
	segs, err := listSegments(dir, s.opts.FileMode)
	if err != nil {
		return fmt.Errorf("eventstore: open journal %s: %w", dir, err)
	}
	j := &journal{
		dir: dir, segSize: int64(s.opts.JournalSegmentBytes), maxSegs: s.opts.JournalSegments,
		noSync: s.opts.NoSync, fileMode: s.opts.FileMode, segs: segs, nextGen: 1,
		kick: s.ap.signal,
	}
	j.cond = sync.NewCond(&j.mu)
	s.j = j
	if !exists && !s.opts.NoSync {
		if err := syncDir(filepath.Dir(s.path)); err != nil {
			return err
		}
	}
	var bboltLast uint64
	if err := safeView(s.db, func(tx *bolt.Tx) error {
		bk, err := openBuckets(tx)
		if err != nil {
			return err
		}
		bboltLast, err = readLastSeq(bk.meta)
		return err
	}); err != nil {
		return err
	}
	info, err := s.safeReplay(segs, bboltLast, metaWarn)
	s.replayInfo = info
	if err != nil {
		return err
	}
	if s.opts.JournalOff {
		err := j.close()
		s.j = nil
		return err
	}
	// Segments holding records bbolt lacks (replayed into the overlay) stay
	// sealed, oldest first, until the applier covers them; the others are
	// free, and free files beyond the bound go. Writing resumes in a fresh
	// segment, never after a cut tail.
	sort.Slice(segs, func(a, b int) bool { return segs[a].gen < segs[b].gen })
	var kept []*segment
	for _, seg := range segs {
		switch {
		case seg.lastSeq > s.ap.applied:
			j.sealed = append(j.sealed, seg)
			kept = append(kept, seg)
		case len(kept) >= j.maxSegs:
			_ = seg.f.Close()
			if err := os.Remove(seg.path); err != nil {
				return fmt.Errorf("eventstore: remove journal segment %s: %w", seg.path, err)
			}
		default:
			seg.lastSeq = 0
			j.free = append(j.free, seg)
			kept = append(kept, seg)
		}
	}
	j.segs = kept
	j.covered = s.ap.applied
	j.wantSpare = true
	if err := j.prepareSpare(); err != nil {
		return err
	}
	j.active, j.spare = j.spare, nil
	j.off = segHeaderSize
	return nil
}

// safeReplay is replay with a panic of the storage engine (a damaged page)
// turned into a *CorruptionError.
func (s *BoltStore) safeReplay(segs []*segment, bboltLast uint64, metaWarn string) (info ReplayInfo, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &CorruptionError{Reason: "the storage engine failed while replaying the journal", Err: fmt.Errorf("panic: %v", p)}
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return s.replay(segs, bboltLast, metaWarn)
}

// continued says whether the frames of scanned[i], a segment a later one
// followed, lose nothing bbolt lacks. The writer moves on when a frame does
// not fit, so a recycled segment ends in the stale bytes of an earlier
// generation — not at a frame boundary of that generation, so they need
// not look blank. If the next segment with frames begins with the very
// sequence after this one's last frame, or every sequence between is one
// bbolt covers (the segments that held them were recycled since), no
// needed frame is missing: what follows is stale. A damaged last frame
// holding records bbolt lacks leaves a gap and is corruption.
func continued(scanned []*scannedSegment, i, lastWithFrames int, bboltLast uint64) bool {
	sc := scanned[i]
	after := bboltLast // the sequence after which records must be found
	if len(sc.frames) > 0 {
		last := sc.frames[len(sc.frames)-1]
		after = max(after, last.firstSeq+uint64(last.count)-1)
	}
	for _, next := range scanned[i+1 : lastWithFrames+1] {
		if len(next.frames) > 0 {
			return next.frames[0].firstSeq <= after+1
		}
	}
	return false
}

// replay reads every segment, checks the frames and applies to bbolt the
// records it does not cover.
func (s *BoltStore) replay(segs []*segment, bboltLast uint64, metaWarn string) (ReplayInfo, error) {
	info := ReplayInfo{Segments: len(segs)}
	var scanned []*scannedSegment
	var maxGen, maxCovered uint64
	for _, seg := range segs {
		data := make([]byte, seg.size)
		if _, err := seg.f.ReadAt(data, 0); err != nil {
			return info, fmt.Errorf("eventstore: read journal segment %s: %w", seg.path, err)
		}
		sc := &scannedSegment{seg: seg}
		sc.hdr, sc.hdrErr = decodeSegHeader(data)
		if errors.Is(sc.hdrErr, ErrUnsupportedFormat) {
			return info, fmt.Errorf("journal segment %s: %w", seg.path, sc.hdrErr)
		}
		if sc.hdrErr != nil {
			// A header torn while the segment was being prepared holds no
			// records bbolt lacks; a damaged header of a segment that
			// does is corruption.
			// (A file cut short — a crash while it was being created — has
			// no frame at all.)
			if len(data) < segHeaderSize+frameHeaderSize {
				info.Warnings = append(info.Warnings, fmt.Sprintf("journal segment %s is %d bytes, a file whose creation a crash interrupted: it will be prepared again", seg.path, len(data)))
				continue
			}
			if g := binary.LittleEndian.Uint64(data[segHeaderSize+8 : segHeaderSize+16]); g != 0 {
				if payload, _, count, _, ok := frameAt(data, segHeaderSize, g); ok {
					needed := false
					_ = splitFrame(payload, count, func(raw []byte) error {
						var f recordFields
						if parseRecord(raw, &f) == nil && f.seq > bboltLast {
							needed = true
						}
						return nil
					})
					if needed {
						return info, &JournalError{Segment: seg.path, Offset: 0, Reason: "the segment header is damaged (" + sc.hdrErr.Error() + ") and the segment holds records bbolt does not have"}
					}
				}
			}
			info.Warnings = append(info.Warnings, fmt.Sprintf("journal segment %s has no valid header (%v): it holds nothing bbolt lacks and will be reused", seg.path, sc.hdrErr))
			continue
		}
		seg.gen = sc.hdr.gen
		maxGen = max(maxGen, sc.hdr.gen)
		maxCovered = max(maxCovered, sc.hdr.covered)
		if err := scanSegment(sc, data); err != nil {
			return info, err
		}
		scanned = append(scanned, sc)
	}
	s.j.nextGen = maxGen + 1
	sort.Slice(scanned, func(a, b int) bool { return scanned[a].hdr.gen < scanned[b].hdr.gen })
	// Only the newest segment with frames may end in a torn frame.
	lastWithFrames := -1
	for i, sc := range scanned {
		if len(sc.frames) > 0 {
			lastWithFrames = i
		}
	}
	for i, sc := range scanned {
		if sc.torn && i < lastWithFrames && !continued(scanned, i, lastWithFrames, bboltLast) {
			return info, &JournalError{Segment: sc.seg.path, Offset: sc.end,
				Reason: "a damaged frame ends this segment but a later segment holds records: the journal is corrupt"}
		}
		if sc.torn && i < lastWithFrames {
			sc.torn = false // stale bytes of an earlier generation after the last frame
		}
		if sc.torn && i >= lastWithFrames {
			info.TornBytes = sc.seg.size - sc.end
		}
	}

	// Note each segment's last sequence. Records bbolt lacks go to the
	// overlay (the applier writes them to bbolt in the background) unless
	// every segment holds such records — there would be no room to write
	// in — or the journal is off: then they are applied to bbolt here.
	needed := 0
	for _, sc := range scanned {
		if n := len(sc.frames); n > 0 {
			last := sc.frames[n-1]
			sc.seg.lastSeq = last.firstSeq + uint64(last.count) - 1
			if sc.seg.lastSeq > bboltLast {
				needed++
			}
		}
	}
	toOverlay := !s.opts.JournalOff && needed < s.opts.JournalSegments
	info.Applied = !toOverlay

	// Walk the records in order, replaying those bbolt lacks.
	heads := map[string]streamState{}
	next := bboltLast + 1
	var pending []jrec
	pendingBytes := 0
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		through := pending[len(pending)-1].seq
		if err := s.ap.write(s.update, pending, nil, through, nil); err != nil {
			return fmt.Errorf("eventstore: replaying the journal into %s: %w", s.path, err)
		}
		pending, pendingBytes = pending[:0], 0
		return nil
	}
	var headTx *bolt.Tx
	defer func() {
		if headTx != nil {
			_ = headTx.Rollback()
		}
	}()
	for _, sc := range scanned {
		for _, fr := range sc.frames {
			info.Frames++
			i := 0
			err := splitFrame(fr.payload, fr.count, func(raw []byte) error {
				var f recordFields
				if err := parseRecord(raw, &f); err != nil {
					return &JournalError{Segment: sc.seg.path, Offset: fr.off, Reason: fmt.Sprintf("record %d of the frame does not decode: %v", i, err)}
				}
				if f.seq != fr.firstSeq+uint64(i) {
					return &JournalError{Segment: sc.seg.path, Offset: fr.off, Reason: fmt.Sprintf("record %d has sequence %d, the frame says %d", i, f.seq, fr.firstSeq+uint64(i))}
				}
				i++
				switch {
				case f.seq < next:
					return nil // bbolt has it (or an earlier frame did)
				case f.seq > next:
					return &JournalError{Segment: sc.seg.path, Offset: fr.off, Reason: fmt.Sprintf(
						"the journal jumps to sequence %d but bbolt and the journal before it end at %d: sequences %d..%d are lost", f.seq, next-1, next, f.seq-1)}
				}
				stream := string(f.stream)
				st, ok := heads[stream]
				if !ok {
					if headTx == nil {
						tx, err := s.db.Begin(false)
						if err != nil {
							return err
						}
						headTx = tx
					}
					bk, err := openBuckets(headTx)
					if err != nil {
						return err
					}
					if v := bk.heads.Get([]byte(stream)); v != nil {
						if st.version, st.head, err = decodeHead(stream, v); err != nil {
							return err
						}
					}
				}
				if f.version != st.version+1 || f.prev != st.head {
					return &JournalError{Segment: sc.seg.path, Offset: fr.off, Reason: fmt.Sprintf(
						"record %s version %d (sequence %d) does not continue the stream's chain in bbolt (head version %d)", quoteString(stream), f.version, f.seq, st.version)}
				}
				h := Hash(sha256.Sum256(raw))
				st.version, st.head = f.version, h
				heads[stream] = st
				pending = append(pending, jrec{stream: stream, version: f.version, seq: f.seq, raw: raw, hash: h})
				pendingBytes += len(raw)
				next++
				if info.FromSeq == 0 {
					info.FromSeq = f.seq
				}
				info.ToSeq = f.seq
				info.Records++
				return nil
			})
			if err != nil {
				var je *JournalError
				if !errors.As(err, &je) {
					err = &JournalError{Segment: sc.seg.path, Offset: fr.off, Reason: err.Error()}
				}
				return info, err
			}
			if !toOverlay && pendingBytes >= replayCommitBytes {
				if headTx != nil {
					_ = headTx.Rollback()
					headTx = nil
				}
				if err := flush(); err != nil {
					return info, err
				}
			}
		}
	}
	if headTx != nil {
		_ = headTx.Rollback()
		headTx = nil
	}
	inBbolt := next - 1
	if toOverlay {
		s.over.publish(pending)
		inBbolt = bboltLast
	} else if err := flush(); err != nil {
		return info, err
	}
	covered := next - 1
	if maxCovered > covered {
		return info, &JournalError{Segment: s.j.dir, Offset: -1, Reason: fmt.Sprintf(
			"bbolt covers sequences up to %d, but the journal shows bbolt once covered %d and no longer holds the records between: "+
				"bbolt's newest commit was lost (a damaged meta page?); refusing to serve a store that lost acknowledged records", bboltLast, maxCovered)}
	}
	// A second commit, so both of bbolt's meta pages cover what it has and
	// the journal's lag rule starts from there.
	if err := s.update(func(tx *bolt.Tx) error {
		bk, err := openBuckets(tx)
		if err != nil {
			return err
		}
		var ar arena // one value, kept until the commit ends
		return putLastSeq(bk, &ar, inBbolt)
	}); err != nil {
		return info, fmt.Errorf("eventstore: replaying the journal into %s: %w", s.path, err)
	}
	s.ap.applied, s.ap.prevApplied = inBbolt, inBbolt
	s.applied.Store(inBbolt)
	s.jseq = covered
	if info.TornBytes > 0 {
		info.Warnings = append(info.Warnings, fmt.Sprintf(
			"journal: a torn final frame (a crash in the middle of its write, never acknowledged) was cut after sequence %d", covered))
	}
	if metaWarn != "" {
		if info.Records > 0 {
			info.Warnings = append(info.Warnings, metaWarn+fmt.Sprintf(
				"; the journal held everything after bbolt's surviving commit (sequences %d..%d) and it was recovered from there", info.FromSeq, info.ToSeq))
		} else {
			info.Warnings = append(info.Warnings, metaWarn+"; the journal holds nothing beyond bbolt's surviving commit, so no acknowledged record was lost")
		}
	}
	for _, w := range info.Warnings {
		s.warn(w)
	}
	return info, nil
}

func (s *BoltStore) warn(msg string) {
	s.warnings = append(s.warnings, msg)
	s.opts.Logger.Warn("eventstore: "+msg, "data", s.path)
}

// Warnings returns what Open noticed and logged loudly: a damaged bbolt
// meta page, a torn journal tail that was cut, a segment reinitialised.
func (s *BoltStore) Warnings() []string { return append([]string(nil), s.warnings...) }

// Replay returns what Open found in the journal.
func (s *BoltStore) Replay() ReplayInfo { return s.replayInfo }
