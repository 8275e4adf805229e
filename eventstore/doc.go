// Package eventstore is StateIndex's durable, append-only event log: one
// stream per scope, records numbered 1..n per stream and by a global
// sequence across streams, optimistic concurrency on appends, snapshots to
// shorten replay, and a hash chain that makes corruption detectable. It is
// the only package that does disk I/O; everything above it folds the events
// it returns.
//
// Three backends implement Store with the same semantics, checked by the
// conformance suite in eventstore/storetest: BoltStore (a bbolt file, for
// one server), PostgresStore (a PostgreSQL database that several servers
// share, with fencing; see postgres.go) and MemoryStore (for tests).
// Records are stored byte for byte alike in all three, so hashes, chains
// and signed checkpoints carry across them.
//
// # Records and the hash chain
//
// Each record is a msgpack map inside a versioned envelope with explicit
// one-letter keys (v: envelope version, always first; q: global sequence;
// n: stream version; p: previous record's hash; s: stream; t: type;
// d: data). Record.Hash is the SHA-256 of the record's stored bytes, which
// include its predecessor's hash, its position and its stream name, so the
// chain covers everything. A stream's metadata holds its head version and
// head hash: a flipped byte anywhere, a missing record or a dropped tail
// breaks a link and is reported as a *CorruptionError naming the stream and
// version. ReadStream checks every link before handing a record out;
// VerifyStream and BoltStore.Verify walk whole chains. An unknown envelope
// version is ErrUnsupportedFormat, never a silent skip.
//
// # On-disk layout (FormatVersion 1)
//
//	meta        "format"  -> uint32 big-endian FormatVersion
//	            "lastseq" -> uint64 big-endian, the highest global sequence
//	streams     <stream>  -> nested bucket: uint64 BE version -> record envelope
//	heads       <stream>  -> [1 byte format=1][uint64 BE head version][32-byte head hash]
//	seq         uint64 BE sequence -> [uint64 BE version][stream name]
//	snapshots   <stream>  -> snapshot envelope (v, n: version, f: projection
//	                         format, c: SHA-256 of the envelope with c zeroed,
//	                         s: stream, d: data)
//	tables      <table>   -> nested bucket: key -> value (optional: Tables,
//	                         bookkeeping beside the log; see bolt_tables.go)
//	removed     <stream>  -> [uint64 BE sequence of the last removed record]
//	                         [uint64 BE the base version it belongs to]
//	                         (optional: RemovalReporter; see removed.go, which
//	                         also keeps meta "removedthrough")
//
// Append-only buckets are written with FillPercent 1.0. Open refuses a file
// whose format version it does not know with ErrUnsupportedFormat.
//
// # The write-ahead journal (on unless Options.JournalOff)
//
// A bbolt commit writes whole pages and syncs twice (data pages, then the
// meta page). With the journal, a group commit is instead one frame
// appended to a preallocated journal segment and made durable by one
// fdatasync; bbolt stays the store of record and every index, brought up
// to date in the background:
//
//	DATAFILE.journal/NNNNNNNN.seg   fixed-size segments (JournalSegmentBytes,
//	                                at most JournalSegments of them)
//	segment header (first 4096 bytes): magic "SIJRNL\x00\x01", uint32 format 1,
//	    uint64 generation, uint64 bbolt's durable last sequence when the
//	    segment was prepared, uint64 size, CRC-32C of the above
//	frame (8-byte aligned, little-endian): uint32 payload length, CRC-32C
//	    (of the length, the rest of the header and the payload), uint64 the
//	    segment's generation, uint64 first sequence, uint32 record count,
//	    uint32 kind; payload: per record a uint32 length and the record's
//	    stored bytes (the envelope below, sequence and hashes filled in)
//
// Segments are zero-filled and synced once when created, so the
// fdatasync of a later overwrite commits no file metadata. A segment is
// reused with the next generation once two durable bbolt commits cover
// every record in it (one commit late on purpose: if bbolt's newest meta
// page is found damaged at Open, that commit's records are still in the
// journal). The generation in each frame keeps a recycled segment's stale
// frames from being read as new.
//
// The committer checks a batch exactly as below, writes its frame, syncs
// it, publishes the records to an in-memory overlay and only then answers:
// every read (ReadStream, ReadAll, Stream, Streams, LastSeq, VerifyStream,
// SignCheckpoint) merges the overlay with bbolt, so an acknowledged append
// is visible at once. The applier goroutine writes overlay records to
// bbolt every ApplyInterval (100ms) or ApplyBytes (4 MiB), whichever
// comes first, in one durable transaction, then drops them from the
// overlay. Snapshots are written by the applier once bbolt covers the
// version they describe; SaveSnapshot returns after that commit.
//
// Open replays the journal after what bbolt covers before serving
// anything: frames in generation order, each checked (CRC, generation,
// sequences continuous with bbolt's, each record continuing its stream's
// chain) and applied to bbolt. A bad frame with nothing valid after it is
// a torn write of a crash (never acknowledged) and is cut, with a warning;
// a bad frame followed by a valid one is corruption: Open fails with a
// *JournalError naming the segment and offset, never dropping acknowledged
// records. A journal whose headers show bbolt once covered more than bbolt
// now has, without the records in between, is refused the same way. With
// the journal off, a journal left by an earlier run is still replayed, and
// a damaged bbolt meta page is logged loudly rather than silently served.
//
// Caveat: a damaged final frame cannot be told from a torn write: it is cut
// and reported (Warnings, the log), like the WALs of SQLite and PostgreSQL.
//
// # Durability and group commit
//
// Append returns only after its commit is fsynced (journal on: after its
// journal frame is). Appends are validated and
// encoded in the caller's goroutine, then queued to a single committer
// goroutine. The committer blocks for the first pending request, then takes
// every other request already pending — without waiting for more: there is
// no timer, so a lone writer pays one commit and never a delay — and writes
// them all in one bbolt transaction, one fsync for the whole batch. Each
// request is checked against its stream's version as updated by the earlier
// requests of the same batch, before any of its writes, so two appends at
// the same expected version in one batch resolve to one success and one
// *ConflictError that wrote nothing. Throughput therefore grows with the
// number of concurrent writers while every acknowledged event survives a
// crash. SaveSnapshot goes through the same committer.
//
// If a commit fails (journal on: the frame's write or fdatasync, or
// preparing a segment), every request of that batch fails: those whose writes
// were part of the commit with ErrCommitFailed (their outcome is unknown
// until the store is reopened and read), the others with ErrWritesDisabled.
// The store then refuses all further writes with ErrWritesDisabled until it
// is reopened; reads keep working. A failed fsync is never retried. A
// failed background bbolt commit of the applier does the same (the records
// it carried were acknowledged and stay readable from the journal; reopening
// replays them).
//
// # Caveats
//
//   - Never set Options.NoSync outside tests and benchmarks: appends are then
//     acknowledged before they are durable.
//   - Never retry a failed commit on the same store: reopen it and read what
//     is there (request ids make the retry of an uncertain append safe).
//   - Never open one data file from two stores: Open fails with ErrLocked
//     after Options.OpenTimeout; it does not wait forever.
//   - An Append whose context ends after its writes joined a commit still
//     reports the commit's real outcome, not ctx.Err().
//   - Read callbacks run outside any transaction or lock and may call the
//     store; a long walk spans several transactions (records are immutable,
//     so it still sees one consistent chain).
//   - The chain proves integrity against accidents, not against someone who
//     can rewrite the file and recompute every hash.
//   - bbolt panics on some corrupt pages; reads and commits recover those
//     panics and memory faults in the mapped file into ErrCorrupt, but a
//     damaged file can still crash the process in ways Go cannot recover
//     from. Run BoltStore.Verify on a file you doubt.
package eventstore
