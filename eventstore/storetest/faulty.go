package storetest

import (
	"context"
	"fmt"
	"sync"
	"syscall"

	"github.com/stateindex/stateindex/eventstore"
)

// Faulty wraps a Store and fails its writes on demand the way a disk does,
// with the semantics BoltStore gives each failure:
//
//   - WriteError and DiskFull fail a write before its commit: nothing is
//     written, the error matches eventstore.ErrTransient (so a RetryStore
//     retries it) and the store stays writable.
//   - SyncError fails the commit itself (its fsync): the error matches
//     eventstore.ErrCommitFailed, nothing of it becomes visible, and every
//     later write fails with eventstore.ErrWritesDisabled until Reopen.
//   - SyncErrorAfterWrite is SyncError after the events reached the file
//     (bbolt wrote the meta page, then its fsync failed): reads see them,
//     whether they are durable is unknown.
//
// Reads always pass through. Faulty is safe for concurrent use.
type Faulty struct {
	eventstore.Store

	mu       sync.Mutex
	plan     []Fault
	disabled error
	attempts int
}

// FaultKind is a kind of write failure.
type FaultKind int

// Fault kinds.
const (
	WriteError FaultKind = iota + 1
	DiskFull
	SyncError
	SyncErrorAfterWrite
)

func (k FaultKind) String() string {
	switch k {
	case WriteError:
		return "write error"
	case DiskFull:
		return "disk full"
	case SyncError:
		return "fsync error"
	case SyncErrorAfterWrite:
		return "fsync error after write"
	}
	return fmt.Sprintf("fault(%d)", int(k))
}

// FaultOp selects the writes a fault applies to.
type FaultOp int

// Write operations.
const (
	AnyWrite FaultOp = iota
	Appends
	Snapshots
)

// Fault is one planned failure.
type Fault struct {
	Kind   FaultKind
	Op     FaultOp
	Stream string // "" matches every stream
	Times  int    // how many matching writes fail; 0 means 1
}

// NewFaulty wraps s.
func NewFaulty(s eventstore.Store) *Faulty { return &Faulty{Store: s} }

// Inject plans a failure for the next matching writes.
func (f *Faulty) Inject(ft Fault) {
	if ft.Times <= 0 {
		ft.Times = 1
	}
	f.mu.Lock()
	f.plan = append(f.plan, ft)
	f.mu.Unlock()
}

// Reopen forgets a failed commit, as reopening the file would: writes are
// accepted again. Pending planned faults stay.
func (f *Faulty) Reopen() {
	f.mu.Lock()
	f.disabled = nil
	f.mu.Unlock()
}

// Attempts is the number of writes tried so far (Append and SaveSnapshot),
// failed ones included.
func (f *Faulty) Attempts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.attempts
}

// next returns the fault for this write, if any, and the error of a store
// whose writes are disabled.
func (f *Faulty) next(op FaultOp, stream string) (FaultKind, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts++
	if f.disabled != nil {
		return 0, f.disabled
	}
	for i := range f.plan {
		p := &f.plan[i]
		if (p.Op == AnyWrite || p.Op == op) && (p.Stream == "" || p.Stream == stream) {
			kind := p.Kind
			if p.Times--; p.Times == 0 {
				f.plan = append(f.plan[:i], f.plan[i+1:]...)
			}
			return kind, nil
		}
	}
	return 0, nil
}

func (f *Faulty) fail(kind FaultKind, stream string) error {
	switch kind {
	case WriteError:
		return &transientFault{stream: stream, errno: syscall.EIO}
	case DiskFull:
		return &transientFault{stream: stream, errno: syscall.ENOSPC}
	}
	cause := fmt.Errorf("storetest: injected fsync failure committing stream %q: %w", stream, syscall.EIO)
	f.mu.Lock()
	f.disabled = &commitFault{cause: cause}
	f.mu.Unlock()
	return &commitFault{cause: cause, inBatch: true}
}

// Append implements eventstore.Store.
func (f *Faulty) Append(ctx context.Context, stream string, expected int64, events []eventstore.Event) (eventstore.AppendResult, error) {
	kind, err := f.next(Appends, stream)
	if err != nil {
		return eventstore.AppendResult{}, err
	}
	switch kind {
	case 0:
		return f.Store.Append(ctx, stream, expected, events)
	case SyncErrorAfterWrite:
		if _, err := f.Store.Append(ctx, stream, expected, events); err != nil {
			return eventstore.AppendResult{}, err
		}
	}
	return eventstore.AppendResult{}, f.fail(kind, stream)
}

// SaveSnapshot implements eventstore.Store.
func (f *Faulty) SaveSnapshot(ctx context.Context, stream string, snap eventstore.Snapshot) error {
	kind, err := f.next(Snapshots, stream)
	if err != nil {
		return err
	}
	switch kind {
	case 0:
		return f.Store.SaveSnapshot(ctx, stream, snap)
	case SyncErrorAfterWrite:
		if err := f.Store.SaveSnapshot(ctx, stream, snap); err != nil {
			return err
		}
	}
	return f.fail(kind, stream)
}

// transientFault is a write refused before its commit.
type transientFault struct {
	stream string
	errno  syscall.Errno
}

func (e *transientFault) Error() string {
	return fmt.Sprintf("storetest: injected failure writing stream %q before its commit (nothing written): %v", e.stream, e.errno)
}

func (e *transientFault) Is(target error) bool { return target == eventstore.ErrTransient }
func (e *transientFault) Unwrap() error        { return e.errno }

// commitFault is a failed commit, or a write refused after one.
type commitFault struct {
	cause   error
	inBatch bool
}

func (e *commitFault) Error() string {
	if e.inBatch {
		return "storetest: commit failed; writes are disabled until the store is reopened, and whether these events were written is unknown until then: " + e.cause.Error()
	}
	return "storetest: writes disabled until the store is reopened (an earlier commit failed): " + e.cause.Error()
}

func (e *commitFault) Is(target error) bool {
	return target == eventstore.ErrWritesDisabled || (e.inBatch && target == eventstore.ErrCommitFailed)
}

func (e *commitFault) Unwrap() error { return e.cause }

var _ eventstore.Store = (*Faulty)(nil)
