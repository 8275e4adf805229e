package eventstore

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
)

// Read chunking: reads copy at most this much out of one transaction (or one
// hold of the memory store's lock) before handing records to the caller's
// function, which therefore never runs inside a transaction or a lock and
// may call the store again.
const (
	chunkRecords = 512
	chunkBytes   = 1 << 20
)

// recordSource is one stream's stored records as a backend holds them, for
// the duration of one read transaction. Byte slices it returns are only
// valid during that transaction.
type recordSource interface {
	// head returns the stream's metadata; ok is false if it has none.
	head() (version int64, h Hash, ok bool, err error)
	// get returns the stored record at version.
	get(version int64) (raw []byte, ok bool, err error)
	// seek positions at the first record with a version >= v.
	seek(v int64) (version int64, raw []byte, ok bool, err error)
	// next moves to the following record.
	next() (version int64, raw []byte, ok bool, err error)
	// base returns where the stream's stored history begins (RemovePrefix).
	base() (Base, error)
}

// chainReader walks a stream in version order and checks everything it
// reads: each envelope decodes, names this stream and its own version,
// versions are contiguous, sequences increase, each PrevHash is the hash of
// the record before, and the last record matches the head metadata. A walk
// may span several read transactions: the reader carries the chain's state
// from one chunk to the next. It never hands out a record before it has
// checked that record's successor (or the head) vouches for its hash.
type chainReader struct {
	stream  string
	next    int64 // version expected next
	prev    Hash  // hash of version next-1
	lastSeq uint64
	primed  bool
	types   interner
	// visit, if set, is called for every record checked (Verify uses it to
	// cross-check the global index).
	visit func(version int64, seq uint64) error
}

func newChainReader(stream string, from int64) chainReader {
	if from < 1 {
		from = 1
	}
	return chainReader{stream: stream, next: from}
}

// readChunk checks records from c.next on until maxRecs records or maxBytes
// stored bytes were read or the stream ends (end is then true). With emit it
// appends a caller-owned Record for each to out.
func (c *chainReader) readChunk(src recordSource, out []Record, emit bool, maxRecs, maxBytes int) (_ []Record, end bool, err error) {
	// History removed from the stream's front (before this read, or
	// between two of its chunks) is skipped: the chain then starts from
	// the base's hash.
	base, err := src.base()
	if err != nil {
		return out, true, err
	}
	if c.next <= base.Version {
		c.next, c.prev, c.primed = base.Version+1, base.Hash, true
	}
	if !c.primed {
		if done, err := c.prime(src); err != nil || done {
			return out, true, err
		}
	}
	k, raw, ok, err := src.seek(c.next)
	n, size := 0, 0
	for ; ok && err == nil; k, raw, ok, err = src.next() {
		if n >= maxRecs || size >= maxBytes {
			return out, false, c.checkSuccessor(k, raw)
		}
		var f recordFields
		if err := c.checkRecord(k, raw, &f); err != nil {
			return out, true, err
		}
		h := Hash(sha256.Sum256(raw))
		if emit {
			out = append(out, Record{
				Stream:   c.stream,
				Version:  k,
				Seq:      f.seq,
				Type:     c.types.get(f.typ),
				Data:     cloneBytes(f.data),
				PrevHash: f.prev,
				Hash:     h,
			})
		}
		c.prev = h
		c.next++
		c.lastSeq = f.seq
		n++
		size += len(raw)
	}
	if err != nil {
		return out, true, err
	}
	return out, true, c.checkHead(src)
}

// prime loads the hash of the record before the first one to read, so that
// a read from the middle of a stream checks the chain from its first record.
func (c *chainReader) prime(src recordSource) (done bool, err error) {
	c.primed = true
	if c.next == 1 {
		return false, nil
	}
	before := c.next - 1
	if base, err := src.base(); err != nil {
		return true, err
	} else if base.Version == before {
		c.prev = base.Hash
		return false, nil
	}
	raw, ok, err := src.get(before)
	if err != nil {
		return true, err
	}
	if !ok {
		hv, _, _, err := src.head()
		if err != nil {
			return true, err
		}
		if before >= hv {
			return true, nil // reading past the head: nothing to read
		}
		return true, corrupt(c.stream, before, "record is missing")
	}
	var f recordFields
	if err := parseRecord(raw, &f); err != nil {
		return true, recordDecodeError(c.stream, before, err)
	}
	c.prev = sha256.Sum256(raw)
	c.lastSeq = f.seq
	return false, nil
}

func (c *chainReader) checkRecord(k int64, raw []byte, f *recordFields) error {
	if k != c.next {
		return corrupt(c.stream, c.next, fmt.Sprintf("record is missing (the next stored version is %d)", k))
	}
	if err := parseRecord(raw, f); err != nil {
		return recordDecodeError(c.stream, k, err)
	}
	switch {
	case string(f.stream) != c.stream:
		return corrupt(c.stream, k, "record names stream "+quoteString(f.stream))
	case f.version != k:
		return corrupt(c.stream, k, fmt.Sprintf("record says it is version %d", f.version))
	case len(f.typ) == 0:
		return corrupt(c.stream, k, "record has an empty event type")
	case f.seq == 0 || f.seq <= c.lastSeq:
		return corrupt(c.stream, k, fmt.Sprintf("global sequence %d does not follow %d", f.seq, c.lastSeq))
	case f.prev != c.prev:
		return c.brokenLink(k)
	}
	if c.visit != nil {
		return c.visit(k, f.seq)
	}
	return nil
}

// checkSuccessor checks that the record after the last one read vouches for
// its hash, without consuming it.
func (c *chainReader) checkSuccessor(k int64, raw []byte) error {
	if k != c.next {
		return corrupt(c.stream, c.next, fmt.Sprintf("record is missing (the next stored version is %d)", k))
	}
	var f recordFields
	if err := parseRecord(raw, &f); err != nil {
		return recordDecodeError(c.stream, k, err)
	}
	if f.prev != c.prev {
		return c.brokenLink(k)
	}
	return nil
}

// brokenLink reports that record k's PrevHash differs from the hash of the
// record before it. Either record may have been altered; the earlier one is
// named, since its content is what no longer matches.
func (c *chainReader) brokenLink(k int64) error {
	if k == 1 {
		return corrupt(c.stream, 1, "version 1 has a non-zero prev hash")
	}

	return corrupt(c.stream, k-1, fmt.Sprintf(
		"its hash does not match the prev hash stored in version %d (one of the two records was altered)", k))
}

// checkHead compares the end of the walk with the stream's metadata: a
// dropped or truncated tail, or a record beyond the head, is corruption.
func (c *chainReader) checkHead(src recordSource) error {
	hv, hh, hok, err := src.head()
	if err != nil {
		return err
	}
	last := c.next - 1
	switch {
	case !hok && last > 0:
		return corrupt(c.stream, 0, "records exist but the stream has no metadata")
	case hv > last:
		return corrupt(c.stream, last+1, fmt.Sprintf(
			"record is missing: the stream metadata says the head is version %d but the records end at version %d", hv, last))
	case hv < last:
		return corrupt(c.stream, last, fmt.Sprintf("record is beyond the head version %d in the stream metadata", hv))
	case hv > 0 && hh != c.prev:
		return corrupt(c.stream, last,
			"its hash does not match the head hash in the stream metadata (the record or the metadata was altered)")
	}
	return nil
}

func recordDecodeError(stream string, version int64, err error) error {
	var ev errEnvelopeVersion
	if errors.As(err, &ev) {
		return fmt.Errorf("%w: stream %q version %d: record envelope version %d is unknown to this build, which reads %d (a newer format, or a corrupt byte)",
			ErrUnsupportedFormat, stream, version, ev.got, recordEnvelopeVersion)
	}
	return &CorruptionError{Stream: stream, Version: version, Reason: "undecodable record", Err: err}
}

// deliver is the read loop every store's ReadStream and ReadAll share:
// read fetches the next chunk of records into buf (under the store's lock or
// inside a read transaction) and says whether it was the last; fn then sees
// each record with no lock held, so it may call the store.
func deliver(ctx context.Context, read func(buf []Record) (chunk []Record, end bool, err error), fn func(Record) error) error {
	var chunk []Record
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		var end bool
		var err error
		if chunk, end, err = read(chunk[:0]); err != nil {
			return err
		}
		for i := range chunk {
			if err := fn(chunk[i]); err != nil {
				return err
			}
		}
		clear(chunk)
		if end {
			return nil
		}
	}
}
