package eventstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/stateindex/stateindex/eventstore"
)

// storeState is everything a reader can see of a store.
type storeState struct {
	LastSeq   uint64
	Records   []eventstore.Record
	Streams   []eventstore.StreamInfo
	Snapshots map[string]eventstore.Snapshot
	Identity  eventstore.Identity
	HasID     bool
}

func stateOf(t *testing.T, s *eventstore.BoltStore) storeState {
	t.Helper()
	ctx := context.Background()
	st := storeState{Records: allRecords(t, s), Snapshots: map[string]eventstore.Snapshot{}}
	var err error
	st.LastSeq, err = s.LastSeq(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Streams(ctx, func(info eventstore.StreamInfo) error {
		st.Streams = append(st.Streams, info)
		snap, ok, err := s.LoadSnapshot(ctx, info.Stream)
		if ok {
			st.Snapshots[info.Stream] = snap
		}
		return err
	}))
	st.Identity, st.HasID, err = s.Identity(ctx)
	require.NoError(t, err)
	for _, info := range st.Streams { // every stream reads on its own too
		require.Len(t, records(t, s, info.Stream), int(info.Version))
	}
	return st
}

// fragment fills a store with large snapshots and then replaces them with
// small ones: the file keeps the size the large ones needed, most of it
// free pages.
func fragment(t *testing.T, s *eventstore.BoltStore, streams int) {
	t.Helper()
	ctx := context.Background()
	big := bytes.Repeat([]byte("x"), 1<<20)
	for i := 0; i < streams; i++ {
		name := fmt.Sprintf("scope-%d", i)
		appendN(t, s, name, 0, 20)
		for round := 0; round < 3; round++ {
			big[0] = byte(round)
			require.NoError(t, s.SaveSnapshot(ctx, name, eventstore.Snapshot{Version: int64(10 + round), Format: 1, Data: big}))
		}
		require.NoError(t, s.SaveSnapshot(ctx, name, eventstore.Snapshot{Version: 20, Format: 2, Data: []byte("small-" + name)}))
	}
}

// Compaction gives the free pages back and changes nothing a reader sees;
// the compacted file verifies, opens with the journal on (the old
// segments still there) and takes appends.
func TestCompactShrinksAndKeepsEverything(t *testing.T) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		opts        *eventstore.Options // the store that writes the file
		journalTail bool                // leave records only in the journal, as a crash would
		txBytes     int64
	}{
		"journal tail left":         {opts: fast, journalTail: true},
		"journal applied":           {opts: fast},
		"journal off":               {opts: &eventstore.Options{NoSync: true, JournalOff: true}},
		"small copy transactions":   {opts: fast, journalTail: true, txBytes: 4096},
		"16 KiB pages, journal off": {opts: &eventstore.Options{NoSync: true, JournalOff: true, PageSize: 16 << 10}},
	} {
		t.Run(name, func(t *testing.T) {
			path := tempPath(t)
			s := openAt(t, path, tc.opts)
			require.NoError(t, s.ClaimIdentity(ctx, eventstore.Identity{Cluster: "c", Member: "m1", Members: []string{"m1", "m2"}, Shards: 4}))
			fragment(t, s, 4)
			appendN(t, s, "empty-snapshotless", 0, 3)
			require.NoError(t, s.Close())
			if tc.journalTail {
				h := openAt(t, path, held)
				appendN(t, h, "scope-0", 20, 4)
				appendN(t, h, "late", 0, 2)
				require.Equal(t, 6, h.JournalStats().Pending)
				path = copyStore(t, path) // a crash: the journal holds them, bbolt not
			}
			want := func() storeState {
				r := openAt(t, copyStore2(t, path), &eventstore.Options{NoSync: true, JournalOff: true})
				defer r.Close()
				return stateOf(t, r)
			}()
			require.NoError(t, os.Chmod(path, 0o666)) // wider than any umask lets a new file be

			res, err := eventstore.Compact(ctx, path, eventstore.CompactOptions{TxBytes: tc.txBytes})
			require.NoError(t, err)
			if tc.journalTail {
				assert.Equal(t, 6, res.Replay.Records, "the journal's tail was applied before the copy")
			} else {
				assert.Zero(t, res.Replay.Records)
			}
			assert.Equal(t, fileSize(t, path), res.AfterBytes)
			assert.Less(t, res.AfterBytes*3, res.BeforeBytes, "most of the file was free pages")
			assert.Positive(t, res.FreePages)
			assert.Equal(t, int64(res.FreePages)*int64(res.PageSize), res.FreeBytes)
			assert.Less(t, res.BeforeBytes-res.FreeBytes-res.TailBytes, res.BeforeBytes/2, "free pages and the tail are most of the file")
			assert.Less(t, res.TailBytes, res.BeforeBytes)
			if tc.opts.PageSize != 0 {
				assert.Equal(t, tc.opts.PageSize, res.PageSize, "the page size is kept")
			}
			assert.Equal(t, want.LastSeq, res.LastSeq)
			assert.Equal(t, len(want.Streams), res.Streams)
			assert.False(t, res.RemovedTemp)
			assert.NoFileExists(t, eventstore.CompactTempPath(path))
			assert.NoDirExists(t, eventstore.JournalDir(eventstore.CompactTempPath(path)), "checking the copy made no journal")
			fi, err := os.Stat(path)
			require.NoError(t, err)
			assert.Equal(t, fs.FileMode(0o666), fi.Mode().Perm(), "the file mode is kept")

			off := openAt(t, path, &eventstore.Options{NoSync: true, JournalOff: true})
			assert.Equal(t, want, stateOf(t, off))
			require.NoError(t, off.Verify(ctx, func(stream string, err error) { t.Errorf("%s: %v", stream, err) }))
			require.NoError(t, off.Close())

			if tc.opts.JournalOff {
				require.NoDirExists(t, eventstore.JournalDir(path))
			} else {
				require.NotEmpty(t, segments(t, path), "the old segments are still there")
			}
			on := openAt(t, path, fast)
			assert.Zero(t, on.Replay().Records, "the leftover segments hold nothing bbolt lacks")
			assert.Equal(t, want, stateOf(t, on))
			res2 := appendN(t, on, "scope-1", 20, 2)
			assert.Equal(t, want.LastSeq+2, res2.LastSeq)
			assert.Equal(t, int64(22), res2.LastVersion)
			require.NoError(t, on.SaveSnapshot(ctx, "scope-1", eventstore.Snapshot{Version: 22, Format: 2, Data: []byte("after")}))
			require.NoError(t, on.Verify(ctx, func(stream string, err error) { t.Errorf("%s: %v", stream, err) }))
		})
	}
}

// copyStore2 is copyStore for a closed store without a journal directory.
func copyStore2(t *testing.T, path string) string {
	t.Helper()
	if _, err := os.Stat(eventstore.JournalDir(path)); err == nil {
		return copyStore(t, path)
	}
	dst := tempPath(t)
	copyFile(t, path, dst)
	return dst
}

// An empty store compacts to a valid empty store.
func TestCompactEmptyStore(t *testing.T) {
	path := tempPath(t)
	require.NoError(t, openAt(t, path, fast).Close())
	res, err := eventstore.Compact(t.Context(), path, eventstore.CompactOptions{})
	require.NoError(t, err)
	assert.Zero(t, res.LastSeq)
	assert.Zero(t, res.Streams)
	s := openAt(t, path, fast)
	require.NoError(t, s.Verify(t.Context(), nil))
	assert.Equal(t, uint64(1), appendN(t, s, "a", 0, 1).LastSeq)
}

// A file a server holds is refused within the timeout; nothing changes.
func TestCompactRefusesLockedFile(t *testing.T) {
	path := tempPath(t)
	s := openAt(t, path, fast)
	fragment(t, s, 1)
	before := stateOf(t, s)

	start := time.Now()
	_, err := eventstore.Compact(t.Context(), path, eventstore.CompactOptions{OpenTimeout: 200 * time.Millisecond})
	require.ErrorIs(t, err, eventstore.ErrLocked)
	assert.Contains(t, err.Error(), path)
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.NoFileExists(t, eventstore.CompactTempPath(path))

	assert.Equal(t, before, stateOf(t, s), "the holder is unaffected")
	appendN(t, s, "scope-0", 20, 1)
}

// Bad input changes nothing.
func TestCompactBadInput(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		path string
		opts eventstore.CompactOptions
		want error
	}{
		"empty path":       {"", eventstore.CompactOptions{}, eventstore.ErrInvalidOptions},
		"negative tx size": {dir + "/x.db", eventstore.CompactOptions{TxBytes: -1}, eventstore.ErrInvalidOptions},
		"negative timeout": {dir + "/x.db", eventstore.CompactOptions{OpenTimeout: -1}, eventstore.ErrInvalidOptions},
		"no such file":     {dir + "/missing.db", eventstore.CompactOptions{}, fs.ErrNotExist},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := eventstore.Compact(t.Context(), tc.path, tc.opts)
			require.ErrorIs(t, err, tc.want)
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			assert.Empty(t, entries, "no file was created")
		})
	}
}

// A crash before the rename leaves the old file and a temporary one: Open
// ignores the temporary file and the next Compact removes it. (After the
// rename the new file is complete: it was synced first.)
func TestCompactCrashedRunsTempFile(t *testing.T) {
	for name, leftover := range map[string]func(t *testing.T, path string) []byte{
		"garbage": func(*testing.T, string) []byte { return bytes.Repeat([]byte{0xa5}, 10000) },
		"a partial copy": func(t *testing.T, path string) []byte {
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			return b[:len(b)/2]
		},
	} {
		t.Run(name, func(t *testing.T) {
			path := tempPath(t)
			s := openAt(t, path, fast)
			fragment(t, s, 2)
			require.NoError(t, s.Close())
			tmp := eventstore.CompactTempPath(path)
			require.NoError(t, os.WriteFile(tmp, leftover(t, path), 0o600))

			r := openAt(t, path, fast) // the server does not care
			want := stateOf(t, r)
			require.NoError(t, r.Close())

			res, err := eventstore.Compact(t.Context(), path, eventstore.CompactOptions{})
			require.NoError(t, err)
			assert.True(t, res.RemovedTemp)
			assert.NoFileExists(t, tmp)
			c := openAt(t, path, fast)
			assert.Equal(t, want, stateOf(t, c))
			require.NoError(t, c.Verify(t.Context(), nil))
		})
	}
}

// A copy that does not match the original is never renamed into place:
// Verify catches a damaged record, the key-by-key comparison anything else.
func TestCompactRefusesABadCopy(t *testing.T) {
	for name, tc := range map[string]struct {
		damage func(tx *bolt.Tx) error
		want   string
	}{
		"a damaged record": {func(tx *bolt.Tx) error {
			b := tx.Bucket(eventstore.BucketStreams).Bucket([]byte("scope-0"))
			v := bytes.Clone(b.Get(versionKey(5)))
			v[len(v)-1] ^= 1
			return b.Put(versionKey(5), v)
		}, "scope-0"},
		"a stray key": {func(tx *bolt.Tx) error {
			return tx.Bucket(eventstore.BucketMeta).Put([]byte("stray"), []byte("x"))
		}, `"stray"`},
		"a changed identity": {func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("identity"))
			if b == nil {
				return errors.New("no identity bucket")
			}
			return b.Put([]byte("member"), []byte("other"))
		}, "another value"},
	} {
		t.Run(name, func(t *testing.T) {
			path := tempPath(t)
			s := openAt(t, path, fast)
			require.NoError(t, s.ClaimIdentity(t.Context(), eventstore.Identity{Member: "m", Members: []string{"m"}, Shards: 1}))
			fragment(t, s, 1)
			require.NoError(t, s.Close())
			before := func() storeState {
				r := openAt(t, copyStore2(t, path), &eventstore.Options{NoSync: true, JournalOff: true})
				defer r.Close()
				return stateOf(t, r)
			}()

			eventstore.SetCompactWritten(func(tmp string) error {
				rawUpdate(t, tmp, tc.damage)
				return nil
			})
			t.Cleanup(func() { eventstore.SetCompactWritten(nil) })
			size := fileSize(t, path)
			_, err := eventstore.Compact(t.Context(), path, eventstore.CompactOptions{})
			require.Error(t, err)
			assert.Contains(t, err.Error(), "the data file is unchanged")
			assert.Contains(t, err.Error(), tc.want)
			assert.NoFileExists(t, eventstore.CompactTempPath(path))
			assert.Equal(t, size, fileSize(t, path), "the old file is still in place")
			r := openAt(t, path, fast)
			assert.Equal(t, before, stateOf(t, r))
			require.NoError(t, r.Verify(t.Context(), nil))
		})
	}
}
