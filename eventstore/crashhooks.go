package eventstore

import (
	"crypto/sha256"
	"fmt"
)

// DecodeStoredRecord decodes a record from its stored bytes, as an archive
// carries them (the "raw" field of its record lines): its stream, version,
// global sequence, type, payload and predecessor's hash, and its own hash
// (the SHA-256 of raw). It checks the envelope only; VerifyArchive checks
// an archive's chain.
func DecodeStoredRecord(raw []byte) (Record, error) {
	var f recordFields
	if err := parseRecord(raw, &f); err != nil {
		return Record{}, fmt.Errorf("%w: stored record: %v", ErrCorrupt, err)
	}
	return Record{Stream: string(f.stream), Version: f.version, Seq: f.seq, Type: string(f.typ),
		Data: append([]byte(nil), f.data...), PrevHash: f.prev, Hash: Hash(sha256.Sum256(raw))}, nil
}

// SetRemovalBatches is a hook for crash tests in other packages (the child
// process of internal/crashtest kills itself between removal transactions):
// RemovePrefix then deletes at most batch records per transaction and calls
// between after each transaction that leaves records to delete. batch <= 0
// restores the default (and no hook). Call it before the store is opened,
// never while a removal runs; a production server never calls it.
func SetRemovalBatches(batch int64, between func()) {
	if batch <= 0 {
		removeBatch, removeInterrupt = 20_000, nil
		return
	}
	removeBatch, removeInterrupt = batch, nil
	if between != nil {
		removeInterrupt = func() error { between(); return nil }
	}
}
