package eventstore_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/eventstore/storetest"
	"github.com/stateindex/stateindex/internal/verify"
)

// boltModes are the two ways a BoltStore commits: through the journal
// (held: nothing reaches bbolt until Close) and straight to bbolt.
var boltModes = []struct {
	name string
	opts *eventstore.Options
}{
	{"journal", &eventstore.Options{ApplyInterval: time.Hour, ApplyBytes: 1 << 30}},
	{"direct", &eventstore.Options{JournalOff: true}},
}

func tableOps(n int, prefix string) []eventstore.TableOp {
	ops := make([]eventstore.TableOp, n)
	for i := range ops {
		ops[i] = eventstore.TableOp{Key: fmt.Appendf(nil, "%s%04d", prefix, i), Value: fmt.Appendf(nil, "v%d", i)}
	}
	return ops
}

func wantTable(n int, prefix string) map[string]string {
	out := map[string]string{}
	for i := range n {
		out[fmt.Sprintf("%s%04d", prefix, i)] = fmt.Sprintf("v%d", i)
	}
	return out
}

// Tables survive Close and reopen, Compact and Backup, leave Verify and
// the page-level check clean, and never touch the log.
func TestBoltTablesSurvive(t *testing.T) {
	for _, m := range boltModes {
		t.Run(m.name, func(t *testing.T) {
			ctx := t.Context()
			path := tempPath(t)
			s, err := eventstore.Open(path, m.opts)
			require.NoError(t, err)
			appendN(t, s, "a", 0, 3)
			require.NoError(t, s.TableWrite(ctx, "subs", tableOps(50, "k")))
			require.NoError(t, s.TableWrite(ctx, "subs", []eventstore.TableOp{{Key: []byte("k0000"), Delete: true}}))
			require.NoError(t, s.TableWrite(ctx, "reg", []eventstore.TableOp{{Key: []byte("x"), Value: []byte("y")}}))
			appendN(t, s, "b", 0, 2)
			want := wantTable(50, "k")
			delete(want, "k0000")

			// A backup of the live store carries the tables.
			bk := filepath.Join(t.TempDir(), "backup.db")
			_, err = s.Backup(ctx, bk)
			require.NoError(t, err)
			require.NoError(t, s.Close())

			for _, p := range []string{path, bk} {
				r := openAt(t, p, m.opts)
				assert.Equal(t, want, storetest.TableContents(t, r, "subs"), p)
				assert.Equal(t, map[string]string{"x": "y"}, storetest.TableContents(t, r, "reg"), p)
				last, err := r.LastSeq(ctx)
				require.NoError(t, err)
				assert.Equal(t, uint64(5), last, "tables take no sequence")
				require.NoError(t, r.Verify(ctx, nil))
				require.NoError(t, r.Close())
				problems, _, err := verify.CheckPages(p)
				require.NoError(t, err)
				assert.Empty(t, problems, "the page-level check knows the tables bucket")
			}

			res, err := eventstore.Compact(ctx, path, eventstore.CompactOptions{})
			require.NoError(t, err)
			assert.Equal(t, uint64(5), res.LastSeq)
			r := openAt(t, path, m.opts)
			assert.Equal(t, want, storetest.TableContents(t, r, "subs"), "compaction keeps the tables")
			assert.Len(t, records(t, r, "a"), 3)
			require.NoError(t, r.TableWrite(ctx, "subs", []eventstore.TableOp{{Key: []byte("after"), Value: []byte("c")}}))
			want["after"] = "c"
			assert.Equal(t, want, storetest.TableContents(t, r, "subs"))
		})
	}
}

// A table write is durable at once, whatever the journal holds: a copy of
// the files taken right after it (what a crash leaves) has it, and the
// journal's replay is not confused by the tables bucket.
func TestBoltTablesCrashCopy(t *testing.T) {
	ctx := t.Context()
	path := tempPath(t)
	s := openAt(t, path, held)
	appendN(t, s, "a", 0, 4) // in the journal only
	require.NoError(t, s.TableWrite(ctx, "subs", tableOps(10, "k")))
	appendN(t, s, "a", 4, 2)
	cp := copyStore(t, path)
	r := openAt(t, cp, held)
	assert.Equal(t, wantTable(10, "k"), storetest.TableContents(t, r, "subs"))
	assert.Equal(t, 6, r.Replay().Records)
	assert.Len(t, records(t, r, "a"), 6)
}

// A failed table commit disables writes like a failed append commit:
// appends and table writes are refused until the store is reopened, and
// reads go on. The failed write wrote nothing.
func TestBoltTablesWriteFailure(t *testing.T) {
	for _, m := range boltModes {
		t.Run(m.name, func(t *testing.T) {
			ctx := t.Context()
			path := tempPath(t)
			s := openAt(t, path, m.opts)
			require.NoError(t, s.TableWrite(ctx, "t", tableOps(2, "k")))
			boom := errors.New("injected fsync failure")
			eventstore.SetTableHook(s, func() error { return boom })
			err := s.TableWrite(ctx, "t", tableOps(5, "z"))
			require.ErrorIs(t, err, eventstore.ErrCommitFailed)
			require.ErrorIs(t, err, boom)
			eventstore.SetTableHook(s, nil)

			err = s.TableWrite(ctx, "t", tableOps(1, "y"))
			require.ErrorIs(t, err, eventstore.ErrWritesDisabled)
			assert.NotErrorIs(t, err, eventstore.ErrCommitFailed)
			_, err = s.Append(ctx, "a", eventstore.Any, []eventstore.Event{{Type: "t"}})
			require.ErrorIs(t, err, eventstore.ErrWritesDisabled)
			assert.Equal(t, wantTable(2, "k"), storetest.TableContents(t, s, "t"), "reads go on; the failed write left nothing")
			require.NoError(t, s.Close())

			r := openAt(t, path, m.opts)
			assert.Equal(t, wantTable(2, "k"), storetest.TableContents(t, r, "t"))
			require.NoError(t, r.TableWrite(ctx, "t", tableOps(1, "y")), "a reopened store writes again")
		})
	}
}

// Concurrent table writes and appends: every write lands, atomically.
func TestBoltTablesConcurrent(t *testing.T) {
	for _, m := range boltModes {
		t.Run(m.name, func(t *testing.T) {
			ctx := context.Background()
			s := openAt(t, tempPath(t), &eventstore.Options{NoSync: true, JournalOff: m.opts.JournalOff})
			const writers, writes = 4, 20
			errs := make(chan error, 2*writers)
			for w := range writers {
				go func() {
					var err error
					for i := 0; i < writes && err == nil; i++ {
						err = s.TableWrite(ctx, "t", tableOps(3, fmt.Sprintf("w%d-%d-", w, i)))
					}
					errs <- err
				}()
				go func() {
					var err error
					for i := 0; i < writes && err == nil; i++ {
						_, err = s.Append(ctx, fmt.Sprintf("s%d", w), int64(i), []eventstore.Event{{Type: "t"}})
					}
					errs <- err
				}()
			}
			for range 2 * writers {
				require.NoError(t, <-errs)
			}
			assert.Len(t, storetest.TableContents(t, s, "t"), writers*writes*3)
			last, err := s.LastSeq(ctx)
			require.NoError(t, err)
			assert.Equal(t, uint64(writers*writes), last)
		})
	}
}
