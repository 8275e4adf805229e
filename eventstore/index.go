package eventstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"
)

// The per-stream index.
//
// Every record of the frames codec names, in its metadata, the frame it is
// about and the request that caused it. The store indexes both, per stream:
// for each key, the versions of the first and the last record that named
// it. A finished frame is then found on disk (its frame.pushed and
// frame.popped records) without the projection keeping it, and a request id
// is answered from the log without the projection keeping every id of the
// idempotency horizon. The index is derived from the records alone, so it
// is written in the same transaction as they are, rebuilt by journal replay
// like them, and caught up at Open for records an older build wrote
// without it (meta "indexseq" is the last sequence the index covers).

// Span is where the records that name an index key are: the versions of
// the first and the last of them.
type Span struct {
	First, Last int64
}

// FrameKey is the index key of a frame id; RequestKey that of a request id.
func FrameKey(id string) string   { return "f" + id }
func RequestKey(id string) string { return "r" + id }

var (
	bucketIndex = []byte("index")
	keyIndexSeq = []byte("indexseq")
)

// recordKeys returns the frame and request ids a stored record's payload
// names (either may be nil). A payload that is not an event of the frames
// codec names none; parsing never fails and never allocates.
func recordKeys(raw []byte) (frame, request []byte) {
	if len(raw) < recFixedLen {
		return nil, nil
	}
	r := mpReader{b: raw, off: recFixedLen}
	var data []byte
	for _, want := range []byte{'s', 't', 'd'} {
		k, err := r.str()
		if err != nil || len(k) != 1 || k[0] != want {
			return nil, nil
		}
		if want == 'd' {
			if data, err = r.bin(); err != nil {
				return nil, nil
			}
		} else if _, err = r.str(); err != nil {
			return nil, nil
		}
	}
	return metaKeys(data)
}

// metaKeys reads the "_f" (frame) and "_q" (request) fields of an event's
// inlined metadata, which the encoder writes first: _s, _f, _t, _q, _h, _r
// in that order, the optional ones only when set.
func metaKeys(data []byte) (frame, request []byte) {
	r := mpReader{b: data}
	n, err := r.mapLen()
	if err != nil {
		return nil, nil
	}
	for i := 0; i < n; i++ {
		k, err := r.str()
		if err != nil || len(k) != 2 || k[0] != '_' {
			return frame, request
		}
		switch k[1] {
		case 'f':
			if frame, err = r.str(); err != nil {
				return nil, nil
			}
		case 'q':
			if request, err = r.str(); err != nil {
				return nil, nil
			}
		case 's':
			if _, err = r.str(); err != nil {
				return nil, nil
			}
		case 't', 'r':
			if _, _, err = r.integer(); err != nil {
				return nil, nil
			}
		case 'h':
			if _, err = r.bin(); err != nil {
				return nil, nil
			}
		default:
			return frame, request
		}
	}
	return frame, request
}

// spanValue encodes a span as two uvarints.
func appendSpan(b []byte, sp Span) []byte {
	b = binary.AppendUvarint(b, uint64(sp.First))
	return binary.AppendUvarint(b, uint64(sp.Last))
}

func decodeSpan(stream string, v []byte) (Span, error) {
	first, n := binary.Uvarint(v)
	if n <= 0 {
		return Span{}, corrupt(stream, 0, "undecodable index entry")
	}
	last, m := binary.Uvarint(v[n:])
	if m <= 0 || n+m != len(v) || first < 1 || last < first || last > 1<<63-1 {
		return Span{}, corrupt(stream, 0, "undecodable index entry")
	}
	return Span{First: int64(first), Last: int64(last)}, nil
}

// widen returns sp grown to cover version (a zero sp covers only version).
func (sp Span) widen(version int64) Span {
	if sp.First == 0 || version < sp.First {
		sp.First = version
	}
	if version > sp.Last {
		sp.Last = version
	}
	return sp
}

// indexer writes index entries within one bbolt write transaction.
type indexer struct {
	buckets map[string]*bolt.Bucket // per stream, valid for one transaction
	key     []byte
}

// reset forgets the buckets of the ended transaction.
func (x *indexer) reset() { clear(x.buckets) }

// put indexes one stored record of stream at version.
func (x *indexer) put(bk *buckets, ar *arena, stream string, version int64, raw []byte) error {
	frame, request := recordKeys(raw)
	if frame == nil && request == nil {
		return nil
	}
	b := x.buckets[stream]
	if b == nil {
		var err error
		if b, err = bk.index.CreateBucketIfNotExists([]byte(stream)); err != nil {
			return err
		}
		// Request ids (UUIDv7) grow with time: pack pages nearly full; frame
		// ids are random and split pages wherever they land.
		b.FillPercent = 0.9
		if x.buckets == nil {
			x.buckets = make(map[string]*bolt.Bucket)
		}
		x.buckets[stream] = b
	}
	for _, k := range [2]struct {
		prefix byte
		id     []byte
	}{{'f', frame}, {'r', request}} {
		if len(k.id) == 0 {
			continue
		}
		x.key = append(append(x.key[:0], k.prefix), k.id...)
		var sp Span
		if v := b.Get(x.key); v != nil {
			var err error
			if sp, err = decodeSpan(stream, v); err != nil {
				return err
			}
		}
		sp = sp.widen(version)
		if err := b.Put(x.key, appendSpan(ar.alloc(2 * binary.MaxVarintLen64)[:0], sp)); err != nil {
			return err
		}
	}
	return nil
}

// catchUpIndex indexes the records of a file that the index does not cover
// yet (all of them in a file written before the index existed), in
// transactions of at most batch records.
func catchUpIndex(db *bolt.DB, batch int) error {
	// Most opens find the index current: look first, without a write.
	current := false
	if err := safeView(db, func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if tx.Bucket(bucketIndex) == nil || tx.Bucket(bucketBases) == nil || meta == nil {
			return nil
		}
		last, err := readLastSeq(meta)
		if err != nil {
			return err
		}
		seq, ok, err := readIndexSeq(meta)
		current = ok && seq == last
		return err
	}); err != nil || current {
		return err
	}
	for {
		done := false
		err := safeUpdate(db, func(tx *bolt.Tx) error {
			// Buckets later builds added.
			for _, name := range [][]byte{bucketIndex, bucketBases} {
				if tx.Bucket(name) == nil {
					if _, err := tx.CreateBucket(name); err != nil {
						return err
					}
				}
			}
			bk, err := openBuckets(tx)
			if err != nil {
				return err
			}
			last, err := readLastSeq(bk.meta)
			if err != nil {
				return err
			}
			from, known, err := readIndexSeq(bk.meta)
			if err != nil {
				return err
			}
			if from >= last {
				done = true
				if from != last {
					return corrupt("", 0, fmt.Sprintf("the index says it covers sequence %d, beyond the last sequence %d", from, last))
				}
				if !known {
					return bk.meta.Put(keyIndexSeq, appendIndexSeq(nil, last))
				}
				return nil
			}
			var x indexer
			var ar arena
			var k8 [8]byte
			c := bk.seq.Cursor()
			n, through := 0, from
			for k, v := c.Seek(u64key(&k8, from+1)); k != nil && n < batch; k, v = c.Next() {
				if len(k) != 8 || len(v) < 8 {
					return corrupt("", 0, "a global index entry is malformed")
				}
				version := int64(binary.BigEndian.Uint64(v[:8]))
				stream := string(v[8:])
				sb := bk.streams.Bucket(v[8:])
				if sb == nil {
					return corrupt(stream, version, "the global index names a stream that does not exist")
				}
				raw := sb.Get(u64key(&k8, uint64(version)))
				if raw == nil {
					return corrupt(stream, version, "the global index names a record that does not exist")
				}
				if err := x.put(bk, &ar, stream, version, raw); err != nil {
					return err
				}
				through = binary.BigEndian.Uint64(k)
				n++
			}
			if n < batch {
				through, done = last, true
			}
			return bk.meta.Put(keyIndexSeq, appendIndexSeq(nil, through))
		})
		if err != nil {
			return fmt.Errorf("eventstore: index the records an earlier build wrote: %w", err)
		}
		if done {
			return nil
		}
	}
}

// overlayIndex is the index of the records in the overlay, per stream.
type overlayIndex map[string]map[string]Span

func (oi overlayIndex) add(r *jrec) {
	frame, request := recordKeys(r.raw)
	if frame == nil && request == nil {
		return
	}
	m := oi[r.stream]
	if m == nil {
		m = make(map[string]Span)
		oi[r.stream] = m
	}
	if frame != nil {
		k := FrameKey(string(frame))
		m[k] = m[k].widen(r.version)
	}
	if request != nil {
		k := RequestKey(string(request))
		m[k] = m[k].widen(r.version)
	}
}

// rebuild recomputes a stream's entries from the records left.
func (oi overlayIndex) rebuild(stream string, recs []jrec) {
	delete(oi, stream)
	for i := range recs {
		oi.add(&recs[i])
	}
}

// Lookup implements Store.
func (s *BoltStore) Lookup(ctx context.Context, stream, key string) (Span, bool, error) {
	if err := checkStream(stream); err != nil {
		return Span{}, false, err
	}
	if err := ctx.Err(); err != nil {
		return Span{}, false, err
	}
	over, inOver := s.over.lookup(stream, key)
	var base Span
	var inBase bool
	err := s.view(func(tx *bolt.Tx) error {
		ib := tx.Bucket(bucketIndex)
		if ib == nil {
			return corrupt("", 0, "the index bucket is missing")
		}
		b := ib.Bucket([]byte(stream))
		if b == nil {
			return nil
		}
		v := b.Get([]byte(key))
		if v == nil {
			return nil
		}
		var err error
		base, err = decodeSpan(stream, v)
		inBase = err == nil
		return err
	})
	if err != nil {
		return Span{}, false, err
	}
	switch {
	case inBase && inOver:
		return Span{First: min(base.First, over.First), Last: max(base.Last, over.Last)}, true, nil
	case inBase:
		return base, true, nil
	case inOver:
		return over, true, nil
	}
	return Span{}, false, nil
}

// safeUpdate is db.Update with a storage-engine panic (a damaged page met
// while writing) turned into an error.
func safeUpdate(db *bolt.DB, fn func(*bolt.Tx) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &CorruptionError{Reason: "the storage engine failed while writing", Err: fmt.Errorf("panic: %v", p)}
		}
	}()
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	return db.Update(fn)
}

// The index's sequence is stored with a CRC-32C: a damaged value would
// otherwise pass for one an earlier build left behind.
func appendIndexSeq(b []byte, seq uint64) []byte {
	b = binary.BigEndian.AppendUint64(b, seq)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[len(b)-8:], castagnoli))
}

// readIndexSeq returns the last sequence the index covers; ok is false for
// a file no build with the index wrote to.
func readIndexSeq(meta *bolt.Bucket) (seq uint64, ok bool, err error) {
	v := meta.Get(keyIndexSeq)
	if v == nil {
		return 0, false, nil
	}
	if len(v) != 12 || crc32.Checksum(v[:8], castagnoli) != binary.BigEndian.Uint32(v[8:]) {
		return 0, false, corrupt("", 0, "the index's sequence in the meta bucket is damaged")
	}
	return binary.BigEndian.Uint64(v[:8]), true, nil
}
