package eventstore

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.opentelemetry.io/otel/metric"
)

// Defaults for Limits and Options.
const (
	// DefaultMaxRecordBytes leaves room for a 1 MiB payload (the largest
	// request the protocol accepts) plus its envelope.
	DefaultMaxRecordBytes = 1<<20 + 64<<10
	// DefaultMaxAppendBytes bounds the memory one Append can pin in the
	// commit queue (and, with the journal, must fit one journal segment).
	DefaultMaxAppendBytes = 8 << 20
	// DefaultMaxSnapshotBytes bounds one encoded snapshot.
	DefaultMaxSnapshotBytes = 64 << 20
	// DefaultOpenTimeout is how long Open waits for another holder of the
	// data file to let go before failing with ErrLocked.
	DefaultOpenTimeout = 2 * time.Second
	// DefaultMaxCommitBytes is the size at which the committer stops adding
	// pending appends to one transaction (a single larger append still
	// commits alone).
	DefaultMaxCommitBytes = 32 << 20
	// DefaultJournalSegmentBytes is the size of one preallocated journal
	// segment.
	DefaultJournalSegmentBytes = 16 << 20
	// DefaultJournalSegments bounds the journal: at most this many segments
	// exist, so the journal never holds more than
	// DefaultJournalSegments × DefaultJournalSegmentBytes (64 MiB).
	DefaultJournalSegments = 4
	// DefaultApplyInterval is the longest an acknowledged record waits in
	// the journal before the background applier writes it to bbolt.
	DefaultApplyInterval = 100 * time.Millisecond
	// DefaultApplyBytes is the amount of journaled records that makes the
	// applier write them to bbolt at once rather than wait for the interval.
	DefaultApplyBytes = 4 << 20
	// DefaultFileMode is the permission of a newly created data file.
	DefaultFileMode os.FileMode = 0o600
)

// Limits bound what one call may write. A zero field takes its default.
// Both store backends enforce the same limits so a test against the memory
// store predicts the bolt store.
type Limits struct {
	// MaxRecordBytes is the largest encoded size of one event's record
	// (payload, type, stream name and a 60-odd byte envelope).
	MaxRecordBytes int
	// MaxAppendBytes is the largest encoded size of all events of one Append.
	MaxAppendBytes int
	// MaxSnapshotBytes is the largest encoded size of one snapshot.
	MaxSnapshotBytes int
}

func (l Limits) resolve() (Limits, error) {
	if l.MaxRecordBytes < 0 || l.MaxAppendBytes < 0 || l.MaxSnapshotBytes < 0 {
		return l, fmt.Errorf("%w: negative limit %+v", ErrInvalidOptions, l)
	}
	if l.MaxRecordBytes == 0 {
		l.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if l.MaxAppendBytes == 0 {
		l.MaxAppendBytes = DefaultMaxAppendBytes
	}
	if l.MaxSnapshotBytes == 0 {
		l.MaxSnapshotBytes = DefaultMaxSnapshotBytes
	}
	if l.MaxRecordBytes > bolt.MaxValueSize || l.MaxSnapshotBytes > bolt.MaxValueSize {
		return l, fmt.Errorf("%w: a record or snapshot limit above %d bytes cannot be stored", ErrInvalidOptions, bolt.MaxValueSize)
	}
	return l, nil
}

// Options configure Open. A nil *Options means all defaults; a zero field
// takes its default.
type Options struct {
	Limits

	// OpenTimeout is how long Open waits for the file lock (default 2s).
	// bbolt would otherwise wait forever for a file another process holds.
	OpenTimeout time.Duration

	// NoSync skips fsync on commit. Only for tests and CPU benchmarks: an
	// append is then acknowledged before it is durable, and a machine crash
	// can lose acknowledged events or corrupt the file. Never set it in
	// production.
	NoSync bool

	// FileMode is the permission of a newly created data file (default 0600).
	FileMode os.FileMode

	// PageSize is the page size of a newly created file (default: the OS
	// page size). Larger pages (16 KiB) store events more compactly; it has
	// no effect on an existing file.
	PageSize int

	// InitialMmapSize is the initial size of the memory map. A commit that
	// grows the file past the mapping waits for open read transactions and
	// copies every page it has changed out of the old mapping; mapping
	// generously up front avoids both, but bbolt then grows the file in
	// 16 MiB steps instead of doubling it from 32 KiB.
	InitialMmapSize int

	// MaxCommitBytes is the size at which the committer stops adding pending
	// appends to one transaction (default 32 MiB).
	MaxCommitBytes int

	// JournalOff turns the write-ahead journal off: every group commit is
	// then a bbolt transaction with its two fsyncs (the path before the
	// journal existed). With the journal on (the default), an append is
	// durable once its record is in the journal — one fdatasync per group
	// commit — and bbolt is brought up to date in the background. A journal
	// left by an earlier run is replayed at Open either way.
	JournalOff bool

	// JournalSegmentBytes is the size of one journal segment (default
	// 16 MiB, a multiple of 4096). One append must fit in a segment: a
	// larger one fails with ErrAppendTooLarge.
	JournalSegmentBytes int

	// JournalSegments is the most segments the journal keeps (default 4,
	// at least 2): the journal never exceeds
	// JournalSegments × JournalSegmentBytes on disk. When every segment
	// holds records bbolt does not cover yet, appends wait for the applier.
	JournalSegments int

	// ApplyInterval is the longest an acknowledged record waits before the
	// background applier writes it to bbolt (default 100ms).
	ApplyInterval time.Duration

	// ApplyBytes is the amount of journaled records that starts an
	// application at once (default 4 MiB).
	ApplyBytes int

	// Logger receives loud warnings (a damaged bbolt meta page, a torn
	// journal tail that was cut). nil logs to slog.Default().
	Logger *slog.Logger

	// MeterProvider, if set, receives the store's metrics: group commit
	// sizes and durations, journal fdatasync and applier durations
	// (metrics.go). nil records none.
	MeterProvider metric.MeterProvider
}

type resolvedOptions struct {
	Options
}

func (o *Options) resolve() (resolvedOptions, error) {
	var r resolvedOptions
	if o != nil {
		r.Options = *o
	}
	lim, err := r.Limits.resolve()
	if err != nil {
		return r, err
	}
	r.Limits = lim
	if r.OpenTimeout < 0 || r.PageSize < 0 || r.InitialMmapSize < 0 || r.MaxCommitBytes < 0 {
		return r, fmt.Errorf("%w: negative value in %+v", ErrInvalidOptions, r.Options)
	}
	if r.OpenTimeout == 0 {
		r.OpenTimeout = DefaultOpenTimeout
	}
	if r.FileMode == 0 {
		r.FileMode = DefaultFileMode
	}
	if r.MaxCommitBytes == 0 {
		r.MaxCommitBytes = DefaultMaxCommitBytes
	}
	if r.JournalSegmentBytes < 0 || r.JournalSegments < 0 || r.ApplyInterval < 0 || r.ApplyBytes < 0 {
		return r, fmt.Errorf("%w: negative journal setting in %+v", ErrInvalidOptions, r.Options)
	}
	if r.JournalSegmentBytes == 0 {
		r.JournalSegmentBytes = DefaultJournalSegmentBytes
	}
	if r.JournalSegments == 0 {
		r.JournalSegments = DefaultJournalSegments
	}
	if r.ApplyInterval == 0 {
		r.ApplyInterval = DefaultApplyInterval
	}
	if r.ApplyBytes == 0 {
		r.ApplyBytes = DefaultApplyBytes
	}
	if r.Logger == nil {
		r.Logger = slog.Default()
	}
	if !r.JournalOff {
		if r.JournalSegments < 2 {
			return r, fmt.Errorf("%w: the journal needs at least 2 segments, got %d", ErrInvalidOptions, r.JournalSegments)
		}
		if r.JournalSegmentBytes < minSegmentBytes || r.JournalSegmentBytes > maxSegmentBytes {
			return r, fmt.Errorf("%w: a journal segment must be %d to %d bytes, got %d", ErrInvalidOptions, minSegmentBytes, maxSegmentBytes, r.JournalSegmentBytes)
		}
		if r.JournalSegmentBytes%4096 != 0 {
			return r, fmt.Errorf("%w: a journal segment's size must be a multiple of 4096, got %d", ErrInvalidOptions, r.JournalSegmentBytes)
		}
	}
	return r, nil
}
