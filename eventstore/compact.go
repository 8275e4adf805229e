package eventstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
)

// bbolt never shrinks its file: the pages a removal frees are reused by
// later commits, but the file keeps the size it once reached. Compact
// rewrites the file without them, offline.

// DefaultCompactTxBytes is how many bytes of keys and values Compact writes
// to the new file per bbolt transaction.
const DefaultCompactTxBytes = 64 << 20

// compactSuffix names the temporary file Compact writes next to the data
// file. A crash leaves it behind; the next Compact removes it (no Open
// ever reads it, and it may be deleted by hand).
const compactSuffix = ".compact.tmp"

// CompactTempPath is where Compact writes the new file of the data file at
// path before renaming it into place.
func CompactTempPath(path string) string { return path + compactSuffix }

// compactWritten, if set, runs after the copy is written and before it is
// checked; tests use it to damage the copy.
var compactWritten func(tmp string) error

// CompactOptions configure Compact. A zero field takes its default.
type CompactOptions struct {
	// OpenTimeout is how long to wait for the data file's lock (default
	// DefaultOpenTimeout); a file a server holds is ErrLocked.
	OpenTimeout time.Duration
	// TxBytes bounds the keys and values written per transaction of the
	// copy (default DefaultCompactTxBytes): the memory the copy needs.
	TxBytes int64
}

// CompactResult says what Compact did.
type CompactResult struct {
	BeforeBytes int64 // size of the data file before (after the journal was applied)
	AfterBytes  int64 // size of the compacted file
	PageSize    int
	FreePages   int   // free pages of the old file, which the new one does not have
	FreeBytes   int64 // FreePages × PageSize
	TailBytes   int64 // the old file's end beyond its last page, which bbolt had preallocated
	LastSeq     uint64
	Streams     int
	// Replay is what opening the file applied from the journal first;
	// Warnings what that Open noticed (see BoltStore.Warnings).
	Replay   ReplayInfo
	Warnings []string
	// RemovedTemp says a temporary file a crashed Compact left was removed.
	RemovedTemp bool
}

// Compact rewrites the data file at path without its free pages, offline.
//
// It opens the store like Open with Options.JournalOff — holding the
// file's lock throughout, so a running server (or one starting meanwhile)
// is refused with ErrLocked, and applying to bbolt any journal a stopped
// server left — and copies every bucket, key, value and bucket sequence
// into CompactTempPath(path) with the same page size. The copy is synced,
// opened and checked (Verify: chains, indexes, snapshots, pages) and
// compared key by key with the original; only then is it renamed over
// path, keeping the original's permissions (and owner, where it can),
// and the directory synced. A crash before the rename leaves the old file
// (and a temporary file the next Compact removes), after it the new one:
// never a mix. Any failure leaves the data file as it was.
//
// The journal directory stays: its segments hold only records bbolt now
// covers, which the next Open skips and recycles. Compact needs free disk
// space about the size of the live data.
func Compact(ctx context.Context, path string, opts CompactOptions) (CompactResult, error) {
	var res CompactResult
	if path == "" {
		return res, fmt.Errorf("%w: empty data file path", ErrInvalidOptions)
	}
	if opts.OpenTimeout < 0 || opts.TxBytes < 0 {
		return res, fmt.Errorf("%w: negative compact option %+v", ErrInvalidOptions, opts)
	}
	if opts.TxBytes == 0 {
		opts.TxBytes = DefaultCompactTxBytes
	}
	if opts.OpenTimeout == 0 {
		opts.OpenTimeout = DefaultOpenTimeout
	}
	if _, err := os.Stat(path); err != nil {
		return res, fmt.Errorf("eventstore: compact: no data file at %s: %w", path, err)
	}
	src, err := Open(path, &Options{OpenTimeout: opts.OpenTimeout, JournalOff: true})
	if err != nil {
		return res, fmt.Errorf("eventstore: compact: %w", err)
	}
	defer src.Close()
	res.Replay, res.Warnings = src.Replay(), src.Warnings()

	// The lock is ours: a temporary file here is a crashed run's.
	tmp := CompactTempPath(path)
	switch err := os.Remove(tmp); {
	case err == nil:
		res.RemovedTemp = true
	case !errors.Is(err, fs.ErrNotExist):
		return res, fmt.Errorf("eventstore: compact: removing a crashed run's %s: %w", tmp, err)
	}

	fi, err := os.Stat(path)
	if err != nil {
		return res, err
	}
	res.BeforeBytes = fi.Size()
	res.PageSize = src.db.Info().PageSize
	st := src.db.Stats()
	res.FreePages = st.FreePageN + st.PendingPageN
	res.FreeBytes = int64(res.FreePages) * int64(res.PageSize)
	if err := src.view(func(tx *bolt.Tx) error {
		bk, err := openBuckets(tx)
		if err != nil {
			return err
		}
		if res.LastSeq, err = readLastSeq(bk.meta); err != nil {
			return err
		}
		res.Streams = bk.heads.Stats().KeyN
		res.TailBytes = max(0, res.BeforeBytes-tx.Size())
		return nil
	}); err != nil {
		return res, fmt.Errorf("eventstore: compact %s: %w", path, err)
	}

	done := false
	defer func() {
		if !done {
			_ = os.Remove(tmp)
		}
	}()
	if err := writeCompacted(ctx, src, tmp, fi, opts); err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			err = fmt.Errorf("%w (compaction needs free space about the size of the live data, next to the data file)", err)
		}
		return res, fmt.Errorf("eventstore: compact %s: writing the copy: %w; the data file is unchanged", path, err)
	}
	if compactWritten != nil {
		if err := compactWritten(tmp); err != nil {
			return res, err
		}
	}
	if err := checkCompacted(ctx, src, tmp, opts); err != nil {
		return res, fmt.Errorf("eventstore: compact %s: the compacted copy failed its check, the data file is unchanged (run verify on it): %w", path, err)
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	// Still holding the old file's lock: no server opened it meanwhile.
	if err := os.Rename(tmp, path); err != nil {
		return res, fmt.Errorf("eventstore: compact %s: %w", path, err)
	}
	done = true
	if err := syncDir(filepath.Dir(path)); err != nil {
		return res, fmt.Errorf("eventstore: compact %s: the compacted file is in place but syncing its directory failed: %w", path, err)
	}
	nfi, err := os.Stat(path)
	if err != nil {
		return res, err
	}
	res.AfterBytes = nfi.Size()
	return res, nil
}

// writeCompacted copies src's every bucket into a new bbolt file at tmp,
// with the original's page size and mode, and syncs it.
func writeCompacted(ctx context.Context, src *BoltStore, tmp string, fi fs.FileInfo, opts CompactOptions) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &CorruptionError{Reason: "the storage engine failed while copying " + src.path, Err: fmt.Errorf("panic: %v", p)}
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	mode := fi.Mode().Perm()
	dst, err := bolt.Open(tmp, mode, &bolt.Options{
		Timeout:      opts.OpenTimeout,
		PageSize:     src.db.Info().PageSize,
		FreelistType: bolt.FreelistMapType,
		NoSync:       true, // one sync at the end
		NoGrowSync:   true,
	})
	if err != nil {
		return err
	}
	closed := false
	defer func() {
		if !closed {
			_ = dst.Close()
		}
	}()
	if err := os.Chmod(tmp, mode); err != nil { // the umask narrowed it
		return err
	}
	if err := keepOwner(tmp, fi); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	src.mu.RLock()
	err = bolt.Compact(dst, src.db, opts.TxBytes)
	src.mu.RUnlock()
	if err != nil {
		return err
	}
	closed = true
	if err := dst.Close(); err != nil {
		return err
	}
	f, err := os.OpenFile(tmp, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// checkCompacted opens the copy as a store, runs Verify on it and compares
// it with the original bucket by bucket, key by key.
func checkCompacted(ctx context.Context, src *BoltStore, tmp string, opts CompactOptions) error {
	c, err := Open(tmp, &Options{OpenTimeout: opts.OpenTimeout, JournalOff: true})
	if err != nil {
		return err
	}
	defer c.Close()
	var first error
	if err := c.Verify(ctx, func(stream string, err error) {
		if first == nil {
			first = err
		}
	}); err != nil {
		if first != nil {
			return fmt.Errorf("%w (first problem: %v)", err, first)
		}
		return err
	}
	return sameContents(ctx, src, c)
}

// sameContents compares two stores' files: the same buckets with the same
// sequences, keys and values, in the same order.
func sameContents(ctx context.Context, a, b *BoltStore) error {
	return a.view(func(ta *bolt.Tx) error {
		return b.view(func(tb *bolt.Tx) error {
			var n int
			return sameCursors(ctx, "", ta.Cursor(), tb.Cursor(), &n)
		})
	})
}

// sameCursors compares the keys and values under two cursors, descending
// into nested buckets (the root's keys are all buckets).
func sameCursors(ctx context.Context, where string, ca, cb *bolt.Cursor, n *int) error {
	ka, va := ca.First()
	kb, vb := cb.First()
	for ; ka != nil || kb != nil; ka, va, kb, vb = nextPair(ca, cb) {
		if *n++; *n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if ka == nil || kb == nil || !bytes.Equal(ka, kb) {
			return fmt.Errorf("bucket %s: the original has key %s where the copy has %s", where, keyName(ka), keyName(kb))
		}
		if (va == nil) != (vb == nil) {
			return fmt.Errorf("bucket %s: key %s is a bucket in one file and a value in the other", where, keyName(ka))
		}
		if va != nil {
			if !bytes.Equal(va, vb) {
				return fmt.Errorf("bucket %s: key %s has another value in the copy", where, keyName(ka))
			}
			continue
		}
		sa, sb := ca.Bucket().Bucket(ka), cb.Bucket().Bucket(kb)
		inner := where + "/" + keyName(ka)
		if sa == nil || sb == nil {
			return fmt.Errorf("bucket %s cannot be opened", inner)
		}
		if sa.Sequence() != sb.Sequence() {
			return fmt.Errorf("bucket %s: sequence %d in the original, %d in the copy", inner, sa.Sequence(), sb.Sequence())
		}
		if err := sameCursors(ctx, inner, sa.Cursor(), sb.Cursor(), n); err != nil {
			return err
		}
	}
	return nil
}

func nextPair(ca, cb *bolt.Cursor) (ka, va, kb, vb []byte) {
	ka, va = ca.Next()
	kb, vb = cb.Next()
	return ka, va, kb, vb
}

func keyName(k []byte) string {
	if k == nil {
		return "(none)"
	}
	return quoteString(k)
}
