package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/stateindex/stateindex/eventstore"
)

const (
	dbFile  = "stateindex.db"
	keyFile = "server.key"
	keySize = 32
)

// openStore opens DIR/stateindex.db. create says whether a missing file may
// be created (serve) or is an error (inspect). journalOff opens it without
// a write-ahead journal (Options.JournalOff): a journal left by a server is
// still replayed into bbolt, but none is created; the offline tools use it.
// Transient failures are retried with exponential backoff; a file another
// process holds, an unknown format or corruption are not transient.
func openStore(dir string, create bool, timeout time.Duration, journalOff bool) (*eventstore.BoltStore, error) {
	return openStoreWith(dir, create, eventstore.Options{OpenTimeout: timeout, JournalOff: journalOff})
}

// openStoreWith is openStore with every option given (serve passes its
// configuration's journal settings).
func openStoreWith(dir string, create bool, opts eventstore.Options) (*eventstore.BoltStore, error) {
	path := filepath.Join(dir, dbFile)
	if !create {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("no data file at %s: %w", path, err)
		}
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		st, err := eventstore.Open(path, &opts)
		if err == nil {
			return st, nil
		}
		permanent := errors.Is(err, eventstore.ErrLocked) || errors.Is(err, eventstore.ErrUnsupportedFormat) ||
			errors.Is(err, eventstore.ErrCorrupt) || errors.Is(err, eventstore.ErrInvalidOptions) || errors.Is(err, os.ErrPermission)
		if permanent || attempt == 3 {
			return nil, err
		}
		time.Sleep(backoff)
		backoff *= 2
	}
}

// loadKey reads DIR/server.key, creating it (32 random bytes, mode 0600,
// written atomically) on first use. Suspension tokens are signed with it, so
// it must survive restarts.
func loadKey(dir string) ([]byte, error) {
	path := filepath.Join(dir, keyFile)
	key, err := os.ReadFile(path)
	if err == nil {
		if len(key) < keySize {
			return nil, fmt.Errorf("%s holds %d bytes, want at least %d", path, len(key), keySize)
		}
		return key, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	key = make([]byte, keySize)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(dir, keyFile+".tmp-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return nil, err
	}
	if _, err := tmp.Write(key); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, os.ErrExist) { // another process won the race
			return loadKey(dir)
		}
		return nil, err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return key, nil
}
