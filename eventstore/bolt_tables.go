package eventstore

import (
	"bytes"
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Tables on bbolt (see tables.go for the contract).
//
// Layout: an optional top-level bucket "tables" holding one nested bucket
// per table name, whose keys and values are the table's. A table write is
// one bbolt transaction of its own, synced like every bbolt commit (bbolt
// is opened with Options.NoSync in both modes: the journal carries the
// log's records, never a table's, so a table write does not wait for it
// and is durable by bbolt's own fsync). Files without the bucket (every
// file written before it existed) stay valid: readers that do not know it
// ignore it, Compact copies it like every bucket, Backup copies bbolt's
// whole transaction.

var bucketTables = []byte("tables")

var _ Tables = (*BoltStore)(nil)

// TableWrite implements Tables. It is refused like an append once writes
// are disabled (ErrWritesDisabled), and a failure of its own commit
// disables writes the same way (ErrCommitFailed: a failed fsync is never
// retried).
func (s *BoltStore) TableWrite(ctx context.Context, table string, ops []TableOp) error {
	if s.closedFlag.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkTableOps(table, ops); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	if err := s.writeErr(); err != nil {
		return err
	}
	if len(ops) == 0 {
		return nil
	}
	hook := s.tableHook.Load()
	err := s.update(func(tx *bolt.Tx) error {
		root, err := tx.CreateBucketIfNotExists(bucketTables)
		if err != nil {
			return err
		}
		b, err := root.CreateBucketIfNotExists([]byte(table))
		if err != nil {
			return err
		}
		for _, op := range ops {
			if op.Delete {
				err = b.Delete(op.Key)
			} else {
				// bbolt keeps a reference to the value until the commit
				// ends: the caller's slice is copied.
				err = b.Put(op.Key, bytes.Clone(op.Value))
			}
			if err != nil {
				return err
			}
		}
		if hook != nil {
			return (*hook)()
		}
		return nil
	})
	if err != nil {
		cause := fmt.Errorf("eventstore: table write of %d ops to %s in %s failed: %w", len(ops), table, s.path, err)
		s.failed.CompareAndSwap(nil, &cause)
		s.ap.signal() // the applier fails the journal and its waiters
		return &commitError{cause: cause, inBatch: true}
	}
	return nil
}

// tableBucket returns table's bucket in tx, nil when it was never written.
func tableBucket(tx *bolt.Tx, table string) *bolt.Bucket {
	root := tx.Bucket(bucketTables)
	if root == nil {
		return nil
	}
	return root.Bucket([]byte(table))
}

// TableGet implements Tables.
func (s *BoltStore) TableGet(ctx context.Context, table string, key []byte) ([]byte, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	if err := checkTable(table); err != nil {
		return nil, false, err
	}
	var (
		val []byte
		ok  bool
	)
	err := s.view(func(tx *bolt.Tx) error {
		if b := tableBucket(tx, table); b != nil && len(key) > 0 {
			if v := b.Get(key); v != nil {
				val, ok = bytes.Clone(v), true
				if val == nil {
					val = []byte{}
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return val, ok, nil
}

// TableScan implements Tables: one read transaction, a cursor from the
// first (last, when reverse) key in range.
func (s *BoltStore) TableScan(ctx context.Context, table string, prefix, from []byte, reverse bool, fn func(k, v []byte) (bool, error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkTable(table); err != nil {
		return err
	}
	return s.view(func(tx *bolt.Tx) error {
		b := tableBucket(tx, table)
		if b == nil {
			return nil
		}
		c := b.Cursor()
		var k, v []byte
		if reverse {
			k, v = seekLast(c, prefix, from)
		} else {
			start := prefix
			if from != nil && bytes.Compare(from, prefix) > 0 {
				start = from
			}
			k, v = c.Seek(start)
		}
		for n := 0; k != nil && bytes.HasPrefix(k, prefix); n++ {
			if n%1024 == 1023 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			more, err := fn(k, v)
			if err != nil || !more {
				return err
			}
			if reverse {
				k, v = c.Prev()
			} else {
				k, v = c.Next()
			}
		}
		return nil
	})
}

// seekLast positions c at the last key that is at most from (when set)
// and below every key past prefix's range: the start of a reverse scan. A
// key it returns outside prefix's range lies below it (the scan is empty).
func seekLast(c *bolt.Cursor, prefix, from []byte) ([]byte, []byte) {
	end := prefixEnd(prefix) // nil: no key is past the range
	if from == nil || (end != nil && bytes.Compare(from, end) >= 0) {
		if end == nil {
			return c.Last()
		}
		if k, _ := c.Seek(end); k == nil {
			return c.Last()
		}
		return c.Prev()
	}
	k, v := c.Seek(from)
	switch {
	case k == nil:
		return c.Last()
	case !bytes.Equal(k, from):
		return c.Prev()
	}
	return k, v
}

// prefixEnd is the least key greater than every key starting with prefix,
// nil when there is none (prefix is empty or all 0xff).
func prefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

var _ CommitWatcher = (*BoltStore)(nil)

// WatchCommits implements CommitWatcher. fn runs on the committer's
// goroutine after each commit that wrote records (journal on: once the
// frame is synced and its records are in the overlay; off: once the bbolt
// transaction is), after that commit's appends were answered; it delays
// the next commit, so it must be quick.
func (s *BoltStore) WatchCommits(fn func(lastSeq uint64)) (stop func()) {
	return s.watch.add(fn)
}
