package eventstore

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
)

// Errors returned for bad input. Each one means the call changed nothing.
var (
	// ErrEmptyStream is returned when a stream name is empty.
	ErrEmptyStream = errors.New("eventstore: empty stream name")
	// ErrInvalidStream is returned when a stream name is longer than
	// MaxStreamBytes, is not valid UTF-8 or contains a NUL byte.
	ErrInvalidStream = errors.New("eventstore: invalid stream name")
	// ErrNoEvents is returned by Append when it is given no events: an empty
	// append would move nothing yet look like a successful write.
	ErrNoEvents = errors.New("eventstore: no events to append")
	// ErrEmptyEventType is returned when an event has no type name.
	ErrEmptyEventType = errors.New("eventstore: empty event type")
	// ErrInvalidEventType is returned when an event type is longer than
	// MaxEventTypeBytes, is not valid UTF-8 or contains a NUL byte.
	ErrInvalidEventType = errors.New("eventstore: invalid event type")
	// ErrInvalidExpectedVersion is returned when the expected version is
	// below Any (-1).
	ErrInvalidExpectedVersion = errors.New("eventstore: invalid expected version")
	// ErrRecordTooLarge is returned when one event encodes to more than
	// Limits.MaxRecordBytes.
	ErrRecordTooLarge = errors.New("eventstore: record too large")
	// ErrAppendTooLarge is returned when the events of one Append together
	// encode to more than Limits.MaxAppendBytes.
	ErrAppendTooLarge = errors.New("eventstore: append too large")
	// ErrSnapshotTooLarge is returned when a snapshot encodes to more than
	// Limits.MaxSnapshotBytes.
	ErrSnapshotTooLarge = errors.New("eventstore: snapshot too large")
	// ErrInvalidSnapshotVersion is returned when a snapshot's version is not
	// between 1 and the stream's head version: a snapshot must cover events
	// that exist.
	ErrInvalidSnapshotVersion = errors.New("eventstore: invalid snapshot version")
	// ErrInvalidOptions is returned by Open for options out of range.
	ErrInvalidOptions = errors.New("eventstore: invalid options")
)

// Errors about the state of the store.
var (
	// ErrConflict is what a *ConflictError matches with errors.Is: the stream
	// was not at the expected version, and nothing was written.
	ErrConflict = errors.New("eventstore: version conflict")
	// ErrClosed is returned by every method of a closed store.
	ErrClosed = errors.New("eventstore: store closed")
	// ErrWritesDisabled is returned by every write after a commit failed. A
	// failed fsync is never retried (the kernel may already have dropped the
	// dirty pages, so a retry could report success for lost data): the store
	// refuses writes until it is reopened, and keeps serving reads.
	ErrWritesDisabled = errors.New("eventstore: writes disabled until the store is reopened")
	// ErrCommitFailed is returned to the appends whose own commit failed.
	// Whether their events reached the disk is unknown until the store is
	// reopened and read; the error also matches ErrWritesDisabled.
	ErrCommitFailed = errors.New("eventstore: commit failed")
	// ErrLocked is returned by Open when another process (or another Open in
	// this process) holds the data file and did not release it within
	// Options.OpenTimeout.
	ErrLocked = errors.New("eventstore: data file locked")
	// ErrCorrupt is what a *CorruptionError matches with errors.Is; Open
	// also returns it for a file that is not a valid database.
	ErrCorrupt = errors.New("eventstore: data corrupt")
	// ErrUnsupportedFormat is returned for a data file whose format version,
	// or a record whose envelope version, this build does not know. Nothing
	// is skipped silently: upgrade the binary or migrate the file.
	ErrUnsupportedFormat = errors.New("eventstore: unsupported format")
	// ErrUnreachable is returned by OpenPostgres when no connection to the
	// database could be made within the connect timeout.
	ErrUnreachable = errors.New("eventstore: database unreachable")
	// ErrReadOnly is returned by OpenPostgres for a database that cannot
	// take writes: a standby in recovery, or read-only sessions.
	ErrReadOnly = errors.New("eventstore: database is read-only")
	// ErrInvalidOwner and ErrInvalidKeyName: see fence.go.
)

// ConflictError says a stream was not at the version an Append or a guarded
// write expected. Callers use Actual to re-read and decide again.
type ConflictError struct {
	Stream   string
	Expected int64 // what the caller expected: NoStream or a version >= 1
	Actual   int64 // the stream's version when the append was checked
}

// Error implements error.
func (e *ConflictError) Error() string {
	want := "no stream"
	if e.Expected != NoStream {
		want = "version " + strconv.FormatInt(e.Expected, 10)
	}
	return fmt.Sprintf("eventstore: version conflict on stream %q: expected %s, stream is at version %d",
		e.Stream, want, e.Actual)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// CorruptionError reports stored data that fails a check: an undecodable
// record, a broken hash chain, a missing record, metadata that disagrees with
// the records. Stream is empty for problems outside a stream (the file, the
// global index); Version is 0 when no single record is to blame.
type CorruptionError struct {
	Stream  string
	Version int64
	Reason  string
	Err     error // underlying cause, if any (a decoder error, a panic value)
}

// Error implements error. What it quotes of stored data is bounded (see
// quoteString): a damaged name can be megabytes long.
func (e *CorruptionError) Error() string {
	var msg string
	reason := clipText(e.Reason, maxReasonBytes)
	switch {
	case e.Stream != "" && e.Version > 0:
		msg = fmt.Sprintf("eventstore: corrupt record: stream %s version %d: %s", quoteString(e.Stream), e.Version, reason)
	case e.Stream != "":
		msg = fmt.Sprintf("eventstore: corrupt stream %s: %s", quoteString(e.Stream), reason)
	default:
		msg = "eventstore: corrupt data: " + reason
	}
	if e.Err != nil {
		msg += ": " + clipText(e.Err.Error(), maxReasonBytes)
	}
	return msg
}

// Errors quote at most maxQuoted bytes of a stored value, and a reason or a
// cause at most maxReasonBytes: a corrupted length once made one read error
// quote about 7 MB of hex.
const (
	maxQuoted      = 64
	maxReasonBytes = 1024
)

// quoteBytes hex-encodes at most maxQuoted bytes of b, saying how many
// there were when it stops short.
func quoteBytes(b []byte) string {
	if len(b) <= maxQuoted {
		return hex.EncodeToString(b)
	}
	return hex.EncodeToString(b[:maxQuoted]) + "…(" + strconv.Itoa(len(b)) + " bytes)"
}

// quoteString is %q of at most maxQuoted bytes of s, saying how many there
// were when it stops short.
func quoteString[T ~string | ~[]byte](s T) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(string(s))
	}
	return strconv.Quote(string(s[:maxQuoted])) + "…(" + strconv.Itoa(len(s)) + " bytes)"
}

// clipText keeps at most max bytes of an already formatted message.
func clipText(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return s[:max] + "…(" + strconv.Itoa(len(s)) + " bytes)"
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptionError) Is(target error) bool { return target == ErrCorrupt }

// Unwrap returns the underlying cause.
func (e *CorruptionError) Unwrap() error { return e.Err }

func corrupt(stream string, version int64, reason string) *CorruptionError {
	return &CorruptionError{Stream: stream, Version: version, Reason: reason}
}

// commitError is the error of a write refused or lost because a commit
// failed. inBatch marks the appends of the failing commit itself, whose
// outcome is unknown.
type commitError struct {
	cause   error
	inBatch bool
}

func (e *commitError) Error() string {
	if e.inBatch {
		return "eventstore: commit failed; writes are disabled until the store is reopened, " +
			"and whether these events were written is unknown until then: " + e.cause.Error()
	}
	return "eventstore: writes disabled until the store is reopened (an earlier commit failed): " + e.cause.Error()
}

func (e *commitError) Is(target error) bool {
	return target == ErrWritesDisabled || (e.inBatch && target == ErrCommitFailed)
}

func (e *commitError) Unwrap() error { return e.cause }
