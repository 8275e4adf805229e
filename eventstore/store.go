package eventstore

import (
	"context"
	"crypto/sha256"
)

// Expected-version sentinels for Append. Any value >= 1 means "the stream is
// at exactly this version".
const (
	// NoStream: the stream must not exist yet (its version is 0).
	NoStream int64 = 0
	// Any: append whatever the stream's version is.
	Any int64 = -1
)

// Hash is a SHA-256 digest; the zero Hash is the predecessor of version 1.
type Hash [sha256.Size]byte

// Event is what a caller appends: a type name and an opaque payload the store
// never interprets (the frames codec in this package encodes domain events).
type Event struct {
	Type string
	Data []byte
}

// Record is one stored event with its position and integrity chain.
// Data is owned by the caller once returned: the store copies it.
type Record struct {
	Stream   string
	Version  int64  // 1..n within the stream
	Seq      uint64 // global sequence across all streams, 1..n
	Type     string
	Data     []byte
	PrevHash Hash // Hash of the record before it in the stream (zero for version 1)
	Hash     Hash // SHA-256 over this record as stored (covers PrevHash)
}

// AppendResult says where an append landed.
type AppendResult struct {
	FirstVersion int64
	LastVersion  int64 // the stream's new head version
	FirstSeq     uint64
	LastSeq      uint64
	Head         Hash // the stream's new head hash
}

// StreamInfo is a stream's metadata: its head version and head hash.
type StreamInfo struct {
	Stream  string
	Version int64
	Head    Hash
}

// Snapshot is a stream's projection at a version, saved to shorten replay.
// Format is the projection format version: a reader ignores a snapshot whose
// format it does not know and replays instead.
type Snapshot struct {
	Version int64 // stream version the snapshot covers
	Format  uint32
	Data    []byte
}

// Store is a durable append-only log of streams. Implementations are safe for
// concurrent use. Every method returns an error: nothing in a store is
// infallible.
type Store interface {
	// Append atomically appends events to stream if the stream is exactly at
	// expected (NoStream, Any or a version >= 1); otherwise it fails with a
	// *ConflictError and writes nothing. It returns only after the events are
	// durable (fsynced). Concurrent appends to different streams share commits.
	// Bad input fails with the matching Err* variable and writes nothing.
	Append(ctx context.Context, stream string, expected int64, events []Event) (AppendResult, error)
	// ReadStream calls fn for each record of stream with Version >= from, in
	// order (from < 1 reads from 1). A stream that does not exist yields no
	// records and no error. An error from fn stops the walk and is returned.
	// Each record is checked against the hash chain before fn sees it; damage
	// is a *CorruptionError. fn runs outside any transaction or lock and may
	// call the store.
	ReadStream(ctx context.Context, stream string, from int64, fn func(Record) error) error
	// ReadAll calls fn for each record with Seq >= from, in global order
	// (from 0 reads from 1). fn runs outside any transaction or lock.
	ReadAll(ctx context.Context, from uint64, fn func(Record) error) error
	// Stream returns a stream's metadata; a missing stream has Version 0.
	Stream(ctx context.Context, stream string) (StreamInfo, error)
	// Streams calls fn for every stream, in name order.
	Streams(ctx context.Context, fn func(StreamInfo) error) error
	// LastSeq is the highest global sequence written (0 for an empty store).
	LastSeq(ctx context.Context) (uint64, error)
	// SaveSnapshot stores the stream's latest snapshot, replacing the one it
	// had (the last saved wins). snap.Version must be between 1 and the
	// stream's head version, else ErrInvalidSnapshotVersion. It is durable
	// like an append.
	SaveSnapshot(ctx context.Context, stream string, snap Snapshot) error
	// LoadSnapshot returns the stream's latest snapshot; ok is false if none.
	LoadSnapshot(ctx context.Context, stream string) (snap Snapshot, ok bool, err error)
	// Lookup returns the span of the stream's records that name key in
	// their metadata: FrameKey(id) for the records about a frame (its
	// frame.pushed record first), RequestKey(id) for those a request wrote.
	// ok is false when no record names it. The index is written with the
	// records, so an acknowledged append is found at once.
	Lookup(ctx context.Context, stream, key string) (span Span, ok bool, err error)
	// RemovePrefix removes the stream's records 1..through (retention,
	// destroy): afterwards the stream reads from through+1 on, its chain
	// starting from the base it records (the version and hash of the last
	// removed record), and the index forgets what only the removed records
	// named. A snapshot at or after through must exist
	// (ErrSnapshotBehind); through must not pass the head. A through at or
	// below the base changes nothing (it finishes an interrupted removal).
	// KeepRequestsSince keeps request ids as tombstones (destroy).
	RemovePrefix(ctx context.Context, stream string, through int64, opts ...RemoveOption) (RemoveResult, error)
	// StreamBase returns where the stream's stored history begins: the
	// version and hash of the last record RemovePrefix removed (zero if
	// none).
	StreamBase(ctx context.Context, stream string) (Base, error)
	// VerifyStream walks a stream's hash chain and checks it against the
	// stream's metadata; a problem is a *CorruptionError.
	VerifyStream(ctx context.Context, stream string) error
	// Close releases the store; later calls fail with ErrClosed. Close is
	// idempotent.
	Close() error
}

// AsyncAppender is implemented by stores that can report an append's
// outcome through a callback instead of blocking the caller (BoltStore,
// MemoryStore). done is called exactly once and must not block.
type AsyncAppender interface {
	AppendAsync(ctx context.Context, stream string, expected int64, events []Event, done func(AppendResult, error))
}
