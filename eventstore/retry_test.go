package eventstore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/eventstore/storetest"
)

// recordWaits is a RetryPolicy that waits for nothing and records what it
// would have waited.
func recordWaits(attempts int) (eventstore.RetryPolicy, *[]time.Duration) {
	var waits []time.Duration
	return eventstore.RetryPolicy{Attempts: attempts, Initial: 10 * time.Millisecond, Max: 25 * time.Millisecond,
		Wait: func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil }}, &waits
}

func TestRetryBackoffIsExponentialAndBounded(t *testing.T) {
	p, waits := recordWaits(5)
	calls := 0
	n, err := p.Do(t.Context(), eventstore.Retryable, func() error {
		calls++
		return eventstore.ErrTransient
	})
	require.ErrorIs(t, err, eventstore.ErrTransient)
	assert.Contains(t, err.Error(), "gave up after 5 attempts")
	assert.Equal(t, 5, n)
	assert.Equal(t, 5, calls)
	assert.Equal(t, []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 25 * time.Millisecond, 25 * time.Millisecond}, *waits)

	*waits = nil
	calls = 0
	n, err = p.Do(t.Context(), eventstore.Retryable, func() error {
		if calls++; calls < 3 {
			return eventstore.ErrTransient
		}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, 3, n)

	// A canceled context stops the waiting.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = eventstore.RetryPolicy{Attempts: 3, Initial: time.Hour}.Do(ctx, eventstore.Retryable, func() error { return eventstore.ErrTransient })
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, eventstore.ErrTransient)
}

func TestRetryNeverRetriesAFailedCommit(t *testing.T) {
	for name, err := range map[string]error{
		"commit failed":   storetestCommitFailed(t),
		"conflict":        &eventstore.ConflictError{Stream: "s", Expected: 1, Actual: 2},
		"bad input":       eventstore.ErrNoEvents,
		"plain I/O error": errors.New("EIO"),
	} {
		p, _ := recordWaits(5)
		calls := 0
		n, got := p.Do(t.Context(), eventstore.Retryable, func() error { calls++; return err })
		assert.Equal(t, 1, n, name)
		assert.Equal(t, 1, calls, name)
		assert.Equal(t, err, got, name)
	}
}

// storetestCommitFailed returns the error a Faulty store gives a failed
// fsync: it matches both ErrCommitFailed and ErrWritesDisabled.
func storetestCommitFailed(t *testing.T) error {
	f := storetest.NewFaulty(eventstore.NewMemory())
	f.Inject(storetest.Fault{Kind: storetest.SyncError})
	_, err := f.Append(t.Context(), "s", eventstore.Any, []eventstore.Event{{Type: "t"}})
	require.ErrorIs(t, err, eventstore.ErrCommitFailed)
	return err
}

func TestRetryStoreRetriesWritesBeforeTheirCommit(t *testing.T) {
	f := storetest.NewFaulty(eventstore.NewMemory())
	p, waits := recordWaits(3)
	s := eventstore.WithRetry(f, p)

	f.Inject(storetest.Fault{Kind: storetest.DiskFull, Times: 2})
	res, err := s.Append(t.Context(), "s", eventstore.NoStream, []eventstore.Event{{Type: "t"}})
	require.NoError(t, err, "third attempt succeeds")
	assert.Equal(t, int64(1), res.LastVersion)
	assert.Equal(t, 3, f.Attempts())
	assert.Len(t, *waits, 2)

	f.Inject(storetest.Fault{Kind: storetest.WriteError, Times: 3})
	_, err = s.Append(t.Context(), "s", 1, []eventstore.Event{{Type: "t"}})
	require.ErrorIs(t, err, eventstore.ErrTransient)
	assert.Contains(t, err.Error(), "gave up after 3 attempts")
	info, err := s.Stream(t.Context(), "s")
	require.NoError(t, err)
	assert.Equal(t, int64(1), info.Version, "nothing was written")

	f.Inject(storetest.Fault{Kind: storetest.SyncError})
	before := f.Attempts()
	_, err = s.Append(t.Context(), "s", 1, []eventstore.Event{{Type: "t"}})
	require.ErrorIs(t, err, eventstore.ErrCommitFailed)
	assert.Equal(t, before+1, f.Attempts(), "a failed commit is never retried")
	_, err = s.Append(t.Context(), "other", eventstore.NoStream, []eventstore.Event{{Type: "t"}})
	require.ErrorIs(t, err, eventstore.ErrWritesDisabled, "writes stay refused until reopened")
	assert.Contains(t, err.Error(), "until the store is reopened")
	f.Reopen()
	_, err = s.Append(t.Context(), "other", eventstore.NoStream, []eventstore.Event{{Type: "t"}})
	require.NoError(t, err)

	_, err = s.SignCheckpoint(t.Context(), "s", 1, eventstore.CheckpointSnapshot, signingKey(1))
	assert.ErrorIs(t, err, eventstore.ErrNoCheckpoints, "a memory store keeps no checkpoints")
}

func TestOpenWithRetry(t *testing.T) {
	dir := t.TempDir()
	p, waits := recordWaits(3)
	s, err := eventstore.OpenWithRetry(filepath.Join(dir, "a.db"), fast, p)
	require.NoError(t, err)
	assert.Empty(t, *waits)

	// A held file is final at once: no retries (Open already waited its
	// OpenTimeout).
	_, err = eventstore.OpenWithRetry(filepath.Join(dir, "a.db"), &eventstore.Options{OpenTimeout: 50 * time.Millisecond}, p)
	require.ErrorIs(t, err, eventstore.ErrLocked)
	assert.Empty(t, *waits)
	require.NoError(t, s.Close())

	// A file that is not a database: final too.
	bad := filepath.Join(dir, "bad.db")
	require.NoError(t, os.WriteFile(bad, make([]byte, 8192), 0o600))
	_, err = eventstore.OpenWithRetry(bad, fast, p)
	require.ErrorIs(t, err, eventstore.ErrCorrupt)
	assert.Empty(t, *waits)

	// A failure that may pass (here: a directory that is missing, then
	// created while the policy waits) is retried with backoff.
	late := filepath.Join(dir, "late")
	p.Wait = func(_ context.Context, d time.Duration) error {
		*waits = append(*waits, d)
		return os.MkdirAll(late, 0o700)
	}
	s, err = eventstore.OpenWithRetry(filepath.Join(late, "x.db"), fast, p)
	require.NoError(t, err)
	assert.Len(t, *waits, 1)
	require.NoError(t, s.Close())
}
