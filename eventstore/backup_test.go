package eventstore_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/eventstore"
)

// openCopy opens a backup (which has no journal of its own) and checks it.
func openCopy(t *testing.T, path string) *eventstore.BoltStore {
	t.Helper()
	require.NoDirExists(t, eventstore.JournalDir(path), "a backup carries no journal")
	c := openAt(t, path, &eventstore.Options{NoSync: true, JournalOff: true})
	require.NoError(t, c.Verify(context.Background(), func(stream string, err error) { t.Errorf("copy: %s: %v", stream, err) }))
	return c
}

// Records in bbolt and records held in the journal both reach the copy.
func TestBackupIncludesHeldJournalRecords(t *testing.T) {
	ctx := context.Background()
	for name, opts := range map[string]*eventstore.Options{
		"journal held": held,
		"journal off":  {NoSync: true, JournalOff: true},
	} {
		t.Run(name, func(t *testing.T) {
			s := openAt(t, tempPath(t), opts)
			appendN(t, s, "a", 0, 5)
			require.NoError(t, s.Flush(ctx)) // a's records are in bbolt now
			appendN(t, s, "b", 0, 3)
			appendN(t, s, "a", 5, 3)
			pending := s.JournalStats().Pending
			if !opts.JournalOff {
				require.Equal(t, 6, pending, "b's and a's last records are only in the journal")
			}
			dst := filepath.Join(t.TempDir(), "backup.db")
			info, err := s.Backup(ctx, dst)
			require.NoError(t, err)
			assert.Equal(t, eventstore.BackupInfo{Records: 11, LastSeq: 11, Bytes: fileSize(t, dst), JournalRecords: pending}, info)
			c := openCopy(t, dst)
			assert.Equal(t, allRecords(t, s), allRecords(t, c))
			for _, stream := range []string{"a", "b"} {
				want, err := s.Stream(ctx, stream)
				require.NoError(t, err)
				got, err := c.Stream(ctx, stream)
				require.NoError(t, err)
				assert.Equal(t, want, got, stream)
			}
			// The copy is a store like any: it takes appends, with a journal.
			require.NoError(t, c.Close())
			r := openAt(t, dst, fast)
			res := appendN(t, r, "b", 3, 1)
			assert.Equal(t, uint64(12), res.LastSeq)
		})
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	require.NoError(t, err)
	return st.Size()
}

// Backups taken while appends run hold exactly a prefix of the global
// order that includes every append acknowledged before Backup began.
func TestBackupWhileAppending(t *testing.T) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		opts    *eventstore.Options
		writers int
	}{
		"journal held":  {held, 4},
		"eager applier": {&eventstore.Options{NoSync: true, ApplyInterval: time.Microsecond, ApplyBytes: 1}, 4},
		"journal off":   {&eventstore.Options{NoSync: true, JournalOff: true}, 4},
	} {
		t.Run(name, func(t *testing.T) {
			s := openAt(t, tempPath(t), tc.opts)
			var mu sync.Mutex
			var acked uint64 // highest sequence acknowledged so far
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for w := 0; w < tc.writers; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					stream := fmt.Sprintf("w%d", w)
					for v := int64(0); ; v++ {
						select {
						case <-stop:
							return
						default:
						}
						res, err := s.Append(ctx, stream, v, []eventstore.Event{{Type: "t", Data: []byte(fmt.Sprintf("%s-%d", stream, v))}})
						if !assert.NoError(t, err) {
							return
						}
						mu.Lock()
						acked = max(acked, res.LastSeq)
						mu.Unlock()
					}
				}(w)
			}
			type taken struct {
				path   string
				before uint64
				info   eventstore.BackupInfo
			}
			var copies []taken
			dir := t.TempDir()
			for i := 0; i < 5; i++ {
				// Let some appends land between backups.
				for {
					mu.Lock()
					n := acked
					mu.Unlock()
					if n >= uint64(50*(i+1)) {
						break
					}
					runtime.Gosched()
				}
				mu.Lock()
				before := acked
				mu.Unlock()
				p := filepath.Join(dir, fmt.Sprintf("b%d.db", i))
				info, err := s.Backup(ctx, p)
				require.NoError(t, err)
				copies = append(copies, taken{p, before, info})
			}
			close(stop)
			wg.Wait()
			all := allRecords(t, s)
			for _, c := range copies {
				require.GreaterOrEqual(t, c.info.LastSeq, c.before, "every append acknowledged before the backup is in it")
				cs := openCopy(t, c.path)
				got := allRecords(t, cs)
				require.Len(t, got, int(c.info.LastSeq))
				require.Equal(t, all[:len(got)], got, "a prefix of the global order")
				require.NoError(t, cs.Close())
			}
		})
	}
}

// An existing target (or a journal directory where the copy's would be)
// is refused and left as it was; no temporary file stays behind.
func TestBackupRefusesExistingTarget(t *testing.T) {
	ctx := context.Background()
	s := openAt(t, tempPath(t), held)
	appendN(t, s, "a", 0, 3)
	for name, setup := range map[string]func(dir, p string) string{
		"file": func(dir, p string) string {
			require.NoError(t, os.WriteFile(p, []byte("precious"), 0o600))
			return p
		},
		"journal dir": func(dir, p string) string {
			require.NoError(t, os.Mkdir(eventstore.JournalDir(p), 0o700))
			return eventstore.JournalDir(p)
		},
		"the store itself": func(dir, p string) string { return "" },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "backup.db")
			existing := setup(dir, p)
			if existing == "" {
				p, existing = s.Path(), s.Path()
				dir = filepath.Dir(p)
			}
			before, err := os.ReadDir(dir)
			require.NoError(t, err)
			_, err = s.Backup(ctx, p)
			require.ErrorIs(t, err, fs.ErrExist)
			assert.Contains(t, err.Error(), existing)
			after, err := os.ReadDir(dir)
			require.NoError(t, err)
			assert.Equal(t, names(before), names(after), "nothing created or removed")
			if name == "file" {
				b, err := os.ReadFile(p)
				require.NoError(t, err)
				assert.Equal(t, "precious", string(b))
			}
		})
	}
	_, err := s.Backup(ctx, "")
	require.ErrorIs(t, err, eventstore.ErrInvalidOptions)
	require.NoError(t, s.Close())
	_, err = s.Backup(ctx, filepath.Join(t.TempDir(), "late.db"))
	require.ErrorIs(t, err, eventstore.ErrClosed)
}

func names(es []os.DirEntry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Name()
	}
	return out
}
