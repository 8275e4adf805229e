package eventstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// This file holds what readers of the log across streams need from a store
// (issue 13: subscriptions, the registry, hooks): tables kept beside the
// log, a signal after each durable commit, and how far removal reached.

// Tables is bookkeeping kept beside the log, in the same store: named tables
// of byte keys and values, for state about the log's readers or derived from
// the log (durable subscriptions' positions, the registry's index). A
// table's writes never touch the log, its global sequence, its hash chains
// or its snapshots; verify, retention and backup treat the log alone.
type Tables interface {
	// TableWrite applies ops to table in order, atomically (all or none),
	// durable before it returns like an append. An op with Delete removes
	// its key (a missing key is no error); otherwise it sets Key to Value.
	// A key is 1..MaxTableKey bytes, a value at most MaxTableValue; table
	// is a name of 1..64 bytes of [a-z0-9._-]. Bad input fails with
	// ErrInvalidTable and writes nothing.
	TableWrite(ctx context.Context, table string, ops []TableOp) error
	// TableGet returns key's value in table; ok is false when it has none
	// (a table never written is empty).
	TableGet(ctx context.Context, table string, key []byte) (value []byte, ok bool, err error)
	// TableScan calls fn for table's keys that start with prefix, in key
	// order (descending when reverse), beginning at from when it is set
	// (inclusive: the first key >= from, or <= from when reverse) and at
	// the prefix's first (last) key otherwise. fn returns false to stop; an
	// error from fn stops the scan and is returned. k and v are valid only
	// during the call. fn runs inside a read transaction: it must not call
	// the store.
	TableScan(ctx context.Context, table string, prefix, from []byte, reverse bool, fn func(k, v []byte) (bool, error)) error
}

// TableOp is one change of a table.
type TableOp struct {
	Key    []byte
	Value  []byte
	Delete bool
}

// Table limits.
const (
	MaxTableKey   = 1024
	MaxTableValue = 1 << 20
)

// ErrInvalidTable is bad input to a table method.
var ErrInvalidTable = errors.New("eventstore: invalid table write")

func checkTable(table string) error {
	if table == "" || len(table) > 64 {
		return fmt.Errorf("%w: table name %q must be 1..64 bytes", ErrInvalidTable, table)
	}
	for _, r := range table {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("%w: table name %q: only a-z, 0-9, '.', '_' and '-'", ErrInvalidTable, table)
		}
	}
	return nil
}

func checkTableOps(table string, ops []TableOp) error {
	if err := checkTable(table); err != nil {
		return err
	}
	for i, op := range ops {
		if len(op.Key) == 0 || len(op.Key) > MaxTableKey {
			return fmt.Errorf("%w: table %s, op %d: key of %d bytes (1..%d)", ErrInvalidTable, table, i, len(op.Key), MaxTableKey)
		}
		if len(op.Value) > MaxTableValue {
			return fmt.Errorf("%w: table %s, op %d: value of %d bytes (at most %d)", ErrInvalidTable, table, i, len(op.Value), MaxTableValue)
		}
	}
	return nil
}

// CommitWatcher is implemented by stores that signal their durable
// commits (BoltStore, MemoryStore).
type CommitWatcher interface {
	// WatchCommits calls fn with the store's last global sequence after
	// each commit that made records durable (readable by ReadAll), in
	// commit order, from the committing goroutine: fn must be quick and
	// must not block or call the store. Several commits may be reported by
	// one call (the sequence is the latest). stop unregisters fn; after
	// stop returns fn is not called again.
	WatchCommits(fn func(lastSeq uint64)) (stop func())
}

// RemovalReporter is implemented by stores that can say how far removal
// (RemovePrefix) reached in the global sequence.
type RemovalReporter interface {
	// RemovedThrough returns the highest global sequence of a record that
	// RemovePrefix removed from a stream whose name starts with prefix (the
	// stream named prefix alone when exact), 0 when none was: a reader of
	// those streams from a position above it misses nothing. It may
	// overstate (never understate) for streams whose removal predates the
	// record of it.
	RemovedThrough(ctx context.Context, prefix string, exact bool) (uint64, error)
}

// watchers is the list of CommitWatcher callbacks of a store.
type watchers struct {
	mu   sync.Mutex
	next int
	fns  map[int]func(uint64)
	last uint64 // the highest sequence reported (guarded by call)
	// call serializes notifications so they arrive in commit order, and
	// lets stop wait for a call in progress.
	call sync.Mutex
}

func (w *watchers) add(fn func(uint64)) func() {
	w.mu.Lock()
	if w.fns == nil {
		w.fns = map[int]func(uint64){}
	}
	id := w.next
	w.next++
	w.fns[id] = fn
	w.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			w.call.Lock()
			w.mu.Lock()
			delete(w.fns, id)
			w.mu.Unlock()
			w.call.Unlock()
		})
	}
}

func (w *watchers) notify(last uint64) {
	w.call.Lock()
	defer w.call.Unlock()
	last = max(last, w.last)
	w.last = last
	w.mu.Lock()
	fns := make([]func(uint64), 0, len(w.fns))
	for _, fn := range w.fns {
		fns = append(fns, fn)
	}
	w.mu.Unlock()
	for _, fn := range fns {
		fn(last)
	}
}

// memTables is MemoryStore's tables.
type memTables struct {
	mu sync.RWMutex
	t  map[string]map[string][]byte
}

var (
	_ Tables          = (*MemoryStore)(nil)
	_ CommitWatcher   = (*MemoryStore)(nil)
	_ RemovalReporter = (*MemoryStore)(nil)
)

// TableWrite implements Tables.
func (m *MemoryStore) TableWrite(ctx context.Context, table string, ops []TableOp) error {
	if err := m.rlockCheck(ctx); err != nil {
		return err
	}
	if err := checkTableOps(table, ops); err != nil {
		return err
	}
	m.tables.mu.Lock()
	defer m.tables.mu.Unlock()
	if m.tables.t == nil {
		m.tables.t = map[string]map[string][]byte{}
	}
	t := m.tables.t[table]
	if t == nil {
		t = map[string][]byte{}
		m.tables.t[table] = t
	}
	for _, op := range ops {
		if op.Delete {
			delete(t, string(op.Key))
		} else {
			t[string(op.Key)] = bytes.Clone(op.Value)
		}
	}
	return nil
}

// TableGet implements Tables.
func (m *MemoryStore) TableGet(ctx context.Context, table string, key []byte) ([]byte, bool, error) {
	if err := m.rlockCheck(ctx); err != nil {
		return nil, false, err
	}
	if err := checkTable(table); err != nil {
		return nil, false, err
	}
	m.tables.mu.RLock()
	defer m.tables.mu.RUnlock()
	v, ok := m.tables.t[table][string(key)]
	return bytes.Clone(v), ok, nil
}

// TableScan implements Tables. It sorts the table's matching keys on each
// call: the memory store is for tests.
func (m *MemoryStore) TableScan(ctx context.Context, table string, prefix, from []byte, reverse bool, fn func(k, v []byte) (bool, error)) error {
	if err := m.rlockCheck(ctx); err != nil {
		return err
	}
	if err := checkTable(table); err != nil {
		return err
	}
	m.tables.mu.RLock()
	defer m.tables.mu.RUnlock()
	t := m.tables.t[table]
	keys := make([]string, 0, len(t))
	for k := range t {
		if strings.HasPrefix(k, string(prefix)) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	if reverse {
		for i, j := 0, len(keys)-1; i < j; i, j = i+1, j-1 {
			keys[i], keys[j] = keys[j], keys[i]
		}
	}
	for _, k := range keys {
		if from != nil {
			if c := bytes.Compare([]byte(k), from); (!reverse && c < 0) || (reverse && c > 0) {
				continue
			}
		}
		more, err := fn([]byte(k), t[k])
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// WatchCommits implements CommitWatcher.
func (m *MemoryStore) WatchCommits(fn func(lastSeq uint64)) (stop func()) {
	return m.watch.add(fn)
}

// RemovedThrough implements RemovalReporter.
func (m *MemoryStore) RemovedThrough(ctx context.Context, prefix string, exact bool) (uint64, error) {
	if err := m.rlockCheck(ctx); err != nil {
		return 0, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	var hi uint64
	for name, ms := range m.streams {
		if (exact && name == prefix) || (!exact && strings.HasPrefix(name, prefix)) {
			hi = max(hi, ms.removedSeq)
		}
	}
	return hi, nil
}

func (m *MemoryStore) rlockCheck(ctx context.Context) error {
	if m.closedFlag.Load() {
		return ErrClosed
	}
	return ctx.Err()
}
