package eventstore

import (
	"context"
	"errors"

	bolt "go.etcd.io/bbolt"
)

// Reading one record. ReadStream copies records out of its transaction in
// chunks of up to chunkRecords (1 MiB): right for a walk, wasteful for the
// single record an index lookup names. readVersion reads that one record
// with the same checks (its envelope, its predecessor's hash, and the
// record after it vouching for its hash) and nothing more.

// versionReader is implemented by the stores that can read one record
// cheaply.
type versionReader interface {
	readVersion(ctx context.Context, stream string, version int64) ([]Record, error)
}

func (s *BoltStore) readVersion(ctx context.Context, stream string, version int64) ([]Record, error) {
	if err := checkStream(stream); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cr := newChainReader(stream, version)
	var out []Record
	over := s.over.stream(stream)
	err := s.view(func(tx *bolt.Tx) error {
		bk, err := openBuckets(tx)
		if err != nil {
			return err
		}
		src, err := newLayeredSource(newBoltSource(bk, stream), over)
		if err != nil {
			return err
		}
		out, _, err = cr.readChunk(src, nil, true, 1, chunkBytes)
		return err
	})
	return out, err
}

func (m *MemoryStore) readVersion(ctx context.Context, stream string, version int64) ([]Record, error) {
	if err := checkStream(stream); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := m.rlock(); err != nil {
		return nil, err
	}
	defer m.mu.RUnlock()
	cr := newChainReader(stream, version)
	out, _, err := cr.readChunk(&memSource{ms: m.streams[stream]}, nil, true, 1, chunkBytes)
	return out, err
}

// ReadRecord returns the stream's record at version, checked as ReadStream
// checks it, without reading past it; ok is false when the stream does not
// hold that version (beyond its head, or removed).
func ReadRecord(ctx context.Context, store Store, stream string, version int64) (rec Record, ok bool, err error) {
	if vr, is := store.(versionReader); is {
		recs, err := vr.readVersion(ctx, stream, version)
		if err != nil || len(recs) == 0 || recs[0].Version != version {
			return Record{}, false, err
		}
		return recs[0], true, nil
	}
	err = store.ReadStream(ctx, stream, version, func(r Record) error {
		rec, ok = r, r.Version == version
		return errStopRead
	})
	if errors.Is(err, errStopRead) {
		err = nil
	}
	if err != nil || !ok {
		return Record{}, false, err
	}
	return rec, true, nil
}
