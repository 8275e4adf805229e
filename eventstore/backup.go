package eventstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"
)

// BackupInfo says what Backup wrote.
type BackupInfo struct {
	Records        uint64 // records in the copy: bbolt's plus the journal's tail
	LastSeq        uint64 // the copy holds sequences 1..LastSeq
	Bytes          int64  // size of the copy
	JournalRecords int    // records taken from the journal (acknowledged, not yet in bbolt)
}

// Backup writes a consistent, standalone copy of the live store to path: a
// data file holding every record acknowledged before the call (and maybe
// some acknowledged during it: always a prefix of the global order), with
// no journal of its own — a server started on it creates a fresh one.
//
// It takes the journal's view first and then a bbolt read transaction
// (the order every reader uses: see overlay.go), copies that transaction
// to a temporary file next to path, applies to the copy the journaled
// records it lacks, syncs it and links it into place. An existing path (or
// a journal directory beside it) is refused with an error matching
// fs.ErrExist and nothing is changed. Appends go on meanwhile; a bbolt
// commit that must grow the file waits for the copy's read transaction.
func (s *BoltStore) Backup(ctx context.Context, path string) (BackupInfo, error) {
	var info BackupInfo
	if path == "" {
		return info, fmt.Errorf("%w: empty backup path", ErrInvalidOptions)
	}
	for _, p := range []string{path, JournalDir(path)} {
		if _, err := os.Lstat(p); err == nil {
			return info, fmt.Errorf("eventstore: backup target %s: %w (refusing to overwrite)", p, fs.ErrExist)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return info, fmt.Errorf("eventstore: backup target %s: %w", p, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return info, err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return info, fmt.Errorf("eventstore: backup to %s: %w", path, err)
	}
	tmpName := tmp.Name()
	done := false
	defer func() {
		if !done {
			_ = tmp.Close()
			_ = os.Remove(tmpName)
		}
	}()
	if err := tmp.Chmod(s.opts.FileMode); err != nil {
		return info, fmt.Errorf("eventstore: backup to %s: %w", path, err)
	}

	// The journal's view first, then bbolt's transaction: whatever the
	// applier removed from the view in between is in the transaction.
	over, _ := s.over.view()
	var baseLast uint64
	err = s.view(func(tx *bolt.Tx) error {
		bk, err := openBuckets(tx)
		if err != nil {
			return err
		}
		if baseLast, err = readLastSeq(bk.meta); err != nil {
			return err
		}
		_, err = tx.WriteTo(tmp)
		return err
	})
	if err != nil {
		return info, fmt.Errorf("eventstore: backup of %s: copying bbolt's read transaction: %w", s.path, err)
	}
	if err := tmp.Sync(); err != nil {
		return info, fmt.Errorf("eventstore: backup to %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return info, fmt.Errorf("eventstore: backup to %s: %w", path, err)
	}
	if err := ctx.Err(); err != nil {
		return info, err
	}

	// The journal's records the transaction did not cover, in order.
	k := 0
	for k < len(over) && over[k].seq <= baseLast {
		k++
	}
	tail := over[k:]
	if len(tail) > 0 && tail[0].seq != baseLast+1 {
		return info, fmt.Errorf("eventstore: backup of %s: bbolt ends at sequence %d but the journal's tail starts at %d", s.path, baseLast, tail[0].seq)
	}
	last := baseLast
	if len(tail) > 0 {
		last = tail[len(tail)-1].seq
		if err := applyToCopy(tmpName, s.opts, tail, last); err != nil {
			return info, fmt.Errorf("eventstore: backup to %s: applying %d journaled records: %w", path, len(tail), err)
		}
	}
	st, err := os.Stat(tmpName)
	if err != nil {
		return info, err
	}
	// Link, not rename: a target created meanwhile is never overwritten.
	if err := os.Link(tmpName, path); err != nil {
		return info, fmt.Errorf("eventstore: backup to %s: %w", path, err)
	}
	done = true
	_ = os.Remove(tmpName)
	if err := syncDir(dir); err != nil {
		return info, fmt.Errorf("eventstore: backup to %s: sync directory: %w", path, err)
	}
	info = BackupInfo{Records: last, LastSeq: last, Bytes: st.Size(), JournalRecords: len(tail)}
	return info, nil
}

// applyToCopy opens the copied file with bbolt and writes the journal's
// tail to it in one durable transaction, as the applier would.
func applyToCopy(path string, o resolvedOptions, tail []jrec, through uint64) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &CorruptionError{Reason: "the storage engine failed while writing the backup", Err: fmt.Errorf("panic: %v", p)}
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	db, err := bolt.Open(path, o.FileMode, &bolt.Options{Timeout: o.OpenTimeout, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return err
	}
	var a applier
	err = a.write(db.Update, tail, nil, through, nil)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	return err
}
