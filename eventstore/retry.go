package eventstore

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"time"
)

// Retries (state-persistence-checkpoints.md: "retry on write failure:
// max_attempts 3, backoff exponential") apply only where a retry cannot
// lie: opening the store, and a write that failed before its commit began,
// so that nothing of it reached the file. A failed commit — a failed fsync
// above all — is never retried: the kernel may already have dropped the
// dirty pages, and a retry could report success for lost data. The store
// refuses writes after one until it is reopened (ErrWritesDisabled).

// ErrTransient marks a write that failed before its commit began: nothing
// was written, and trying again may succeed (a full disk that was freed, an
// interrupted system call). Only errors matching it are retried.
var ErrTransient = errors.New("eventstore: write failed before its commit (nothing written)")

// RetryPolicy bounds retries with exponential backoff.
type RetryPolicy struct {
	// Attempts is the total number of tries, the first included (>= 1).
	Attempts int
	// Initial is the wait after the first failure; each later wait doubles,
	// up to Max.
	Initial time.Duration
	Max     time.Duration
	// Wait waits d or until ctx ends; nil uses a timer. Tests replace it.
	Wait func(ctx context.Context, d time.Duration) error
}

// DefaultRetryPolicy makes 3 attempts, waiting 50 ms and then 100 ms.
var DefaultRetryPolicy = RetryPolicy{Attempts: 3, Initial: 50 * time.Millisecond, Max: time.Second}

// Retryable reports whether err may be retried: it matches ErrTransient
// and is not a failed commit.
func Retryable(err error) bool {
	return errors.Is(err, ErrTransient) && !errors.Is(err, ErrWritesDisabled) && !errors.Is(err, ErrCommitFailed)
}

// Do runs op until it succeeds, fails with an error retryable rejects, or
// the attempts are spent; it waits with exponential backoff in between. It
// returns the number of attempts made and op's last error (wrapped with
// the attempt count when retries were spent).
func (p RetryPolicy) Do(ctx context.Context, retryable func(error) bool, op func() error) (int, error) {
	attempts := max(p.Attempts, 1)
	wait := p.Initial
	for n := 1; ; n++ {
		err := op()
		if err == nil || !retryable(err) {
			return n, err
		}
		if n >= attempts {
			return n, fmt.Errorf("gave up after %d attempts: %w", n, err)
		}
		if werr := p.wait(ctx, wait); werr != nil {
			return n, fmt.Errorf("%w (while retrying: %w)", err, werr)
		}
		wait = min(2*wait, max(p.Max, p.Initial))
	}
}

func (p RetryPolicy) wait(ctx context.Context, d time.Duration) error {
	if p.Wait != nil {
		return p.Wait(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// OpenWithRetry opens the data file at path like Open, retrying failures
// that may pass (an interrupted system call, a transient I/O error, a data
// directory not mounted yet) with the policy's backoff. A file another process holds, an unknown format,
// corruption, bad options and a permission error are final at once.
func OpenWithRetry(path string, opts *Options, p RetryPolicy) (*BoltStore, error) {
	var st *BoltStore
	transient := func(err error) bool {
		return !(errors.Is(err, ErrLocked) || errors.Is(err, ErrUnsupportedFormat) || errors.Is(err, ErrCorrupt) ||
			errors.Is(err, ErrInvalidOptions) || errors.Is(err, os.ErrPermission))
	}
	_, err := p.Do(context.Background(), transient, func() error {
		var err error
		st, err = Open(path, opts)
		return err
	})
	return st, err
}

// RetryStore is a Store whose writes are retried when they fail before
// their commit (Retryable errors). Everything else passes through.
type RetryStore struct {
	Store
	Policy RetryPolicy
}

// WithRetry wraps s so that its Append and SaveSnapshot are retried under p
// when they fail with a Retryable error.
func WithRetry(s Store, p RetryPolicy) *RetryStore {
	return &RetryStore{Store: s, Policy: p}
}

// Append implements Store.
func (r *RetryStore) Append(ctx context.Context, stream string, expected int64, events []Event) (AppendResult, error) {
	var res AppendResult
	_, err := r.Policy.Do(ctx, Retryable, func() error {
		var err error
		res, err = r.Store.Append(ctx, stream, expected, events)
		return err
	})
	return res, err
}

// SaveSnapshot implements Store.
func (r *RetryStore) SaveSnapshot(ctx context.Context, stream string, snap Snapshot) error {
	_, err := r.Policy.Do(ctx, Retryable, func() error { return r.Store.SaveSnapshot(ctx, stream, snap) })
	return err
}

// SignCheckpoint implements Checkpointer if the wrapped store does.
func (r *RetryStore) SignCheckpoint(ctx context.Context, stream string, version int64, reason CheckpointReason, key ed25519.PrivateKey) (Checkpoint, error) {
	c, ok := r.Store.(Checkpointer)
	if !ok {
		return Checkpoint{}, ErrNoCheckpoints
	}
	var cp Checkpoint
	_, err := r.Policy.Do(ctx, Retryable, func() error {
		var err error
		cp, err = c.SignCheckpoint(ctx, stream, version, reason, key)
		return err
	})
	return cp, err
}

// Checkpoints implements Checkpointer if the wrapped store does.
func (r *RetryStore) Checkpoints(ctx context.Context, stream string, fn func(Checkpoint) error) error {
	c, ok := r.Store.(Checkpointer)
	if !ok {
		return ErrNoCheckpoints
	}
	return c.Checkpoints(ctx, stream, fn)
}
