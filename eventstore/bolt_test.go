package eventstore_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
	"pgregory.net/rapid"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/eventstore/storetest"
)

// fast are options for tests where durability is not under test.
var fast = &eventstore.Options{NoSync: true}

func openAt(t testing.TB, path string, opts *eventstore.Options) *eventstore.BoltStore {
	t.Helper()
	s, err := eventstore.Open(path, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func tempPath(t testing.TB) string {
	return filepath.Join(t.TempDir(), "events.db")
}

func TestBoltConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) eventstore.Store { return openAt(t, tempPath(t), fast) })
}

// The suite once more with fsync on: the real configuration.
func TestBoltConformanceDurable(t *testing.T) {
	if testing.Short() {
		t.Skip("fsync-heavy")
	}
	storetest.Run(t, func(t *testing.T) eventstore.Store { return openAt(t, tempPath(t), nil) })
}

func appendN(t testing.TB, s eventstore.Store, stream string, from, n int) eventstore.AppendResult {
	t.Helper()
	var res eventstore.AppendResult
	for i := from; i < from+n; i++ {
		var err error
		res, err = s.Append(context.Background(), stream, int64(i), []eventstore.Event{{Type: "t", Data: []byte(fmt.Sprintf("%s-%d", stream, i+1))}})
		require.NoError(t, err)
	}
	return res
}

func records(t testing.TB, s eventstore.Store, stream string) []eventstore.Record {
	t.Helper()
	var out []eventstore.Record
	require.NoError(t, s.ReadStream(context.Background(), stream, 1, func(r eventstore.Record) error {
		out = append(out, r)
		return nil
	}))
	return out
}

func TestBoltReopenContinues(t *testing.T) {
	path := tempPath(t)
	s, err := eventstore.Open(path, nil)
	require.NoError(t, err)
	appendN(t, s, "a", 0, 3)
	headB := appendN(t, s, "b", 0, 2)
	require.NoError(t, s.SaveSnapshot(t.Context(), "a", eventstore.Snapshot{Version: 3, Format: 2, Data: []byte("snap")}))
	before := records(t, s, "a")
	require.NoError(t, s.Close())

	s = openAt(t, path, nil)
	assert.Equal(t, before, records(t, s, "a"), "records survive a reopen byte for byte")
	info, err := s.Stream(t.Context(), "b")
	require.NoError(t, err)
	assert.Equal(t, headB.Head, info.Head)
	last, err := s.LastSeq(t.Context())
	require.NoError(t, err)
	assert.Equal(t, uint64(5), last)

	res, err := s.Append(t.Context(), "a", 3, []eventstore.Event{{Type: "t", Data: []byte("after")}})
	require.NoError(t, err)
	assert.Equal(t, int64(4), res.FirstVersion, "versions continue")
	assert.Equal(t, uint64(6), res.FirstSeq, "the global sequence continues")
	after := records(t, s, "a")
	require.Len(t, after, 4)
	assert.Equal(t, before[2].Hash, after[3].PrevHash, "the chain continues across the reopen")

	_, err = s.Append(t.Context(), "a", 3, []eventstore.Event{{Type: "t"}})
	require.ErrorIs(t, err, eventstore.ErrConflict, "expected versions are checked against the reopened head")

	snap, ok, err := s.LoadSnapshot(t.Context(), "a")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, eventstore.Snapshot{Version: 3, Format: 2, Data: []byte("snap")}, snap)
	require.NoError(t, s.Verify(t.Context(), nil))
}

// rawUpdate changes a closed data file behind the store's back.
func rawUpdate(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	require.NoError(t, err)
	require.NoError(t, db.Update(fn))
	require.NoError(t, db.Close())
}

func versionKey(v int64) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(v))
}

// damageRecord rewrites one stored record with f applied to a copy of it.
func damageRecord(t *testing.T, path, stream string, version int64, f func(b []byte)) {
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		b := tx.Bucket(eventstore.BucketStreams).Bucket([]byte(stream))
		v := b.Get(versionKey(version))
		require.NotNil(t, v)
		c := bytes.Clone(v)
		f(c)
		return b.Put(versionKey(version), c)
	})
}

func readErr(s eventstore.Store, stream string, from int64) (int, error) {
	n := 0
	err := s.ReadStream(context.Background(), stream, from, func(eventstore.Record) error { n++; return nil })
	return n, err
}

func TestBoltDetectsFlippedByte(t *testing.T) {
	tests := []struct {
		name        string
		version     int64 // record damaged
		damage      func(b []byte)
		wantVersion int64 // version the error names
		want        error
	}{
		{"DataMiddle", 3, func(b []byte) { b[len(b)-1] ^= 0x01 }, 3, eventstore.ErrCorrupt},
		{"DataLast", 5, func(b []byte) { b[len(b)-1] ^= 0x80 }, 5, eventstore.ErrCorrupt},
		{"DataFirst", 1, func(b []byte) { b[len(b)-2] ^= 0x10 }, 1, eventstore.ErrCorrupt},
		{"PrevHash", 4, func(b []byte) { b[eventstore.RecOffPrev+7] ^= 0xff }, 3, eventstore.ErrCorrupt},
		{"EnvelopeHeader", 2, func(b []byte) { b[0] = 0xc1 }, 2, eventstore.ErrCorrupt},
		{"Truncated", 2, nil, 2, eventstore.ErrCorrupt},
		{"EnvelopeVersion", 2, func(b []byte) { b[eventstore.RecOffVersionField] = 9 }, 2, eventstore.ErrUnsupportedFormat},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := tempPath(t)
			s, err := eventstore.Open(path, fast)
			require.NoError(t, err)
			appendN(t, s, "victim", 0, 5)
			appendN(t, s, "bystander", 0, 2)
			require.NoError(t, s.Close())

			if tt.damage != nil {
				damageRecord(t, path, "victim", tt.version, tt.damage)
			} else {
				rawUpdate(t, path, func(tx *bolt.Tx) error {
					b := tx.Bucket(eventstore.BucketStreams).Bucket([]byte("victim"))
					v := b.Get(versionKey(tt.version))
					return b.Put(versionKey(tt.version), bytes.Clone(v[:len(v)-3]))
				})
			}
			s = openAt(t, path, fast)

			err = s.VerifyStream(t.Context(), "victim")
			require.ErrorIs(t, err, tt.want)
			assert.Contains(t, err.Error(), `"victim"`)
			assert.Contains(t, err.Error(), fmt.Sprintf("version %d", tt.wantVersion))
			if tt.want == eventstore.ErrCorrupt {
				var ce *eventstore.CorruptionError
				require.ErrorAs(t, err, &ce)
				assert.Equal(t, "victim", ce.Stream)
				assert.Equal(t, tt.wantVersion, ce.Version)
				assert.NotEmpty(t, ce.Reason)
			}

			n, err := readErr(s, "victim", 1)
			require.ErrorIs(t, err, tt.want, "ReadStream reports the damage")
			assert.Less(t, int64(n), tt.wantVersion, "no record at or after the damage was handed out")
			_, err = readErr(s, "victim", tt.version)
			require.ErrorIs(t, err, tt.want, "a read starting at the damage reports it too")

			require.NoError(t, s.VerifyStream(t.Context(), "bystander"), "other streams are unaffected")
			assert.Len(t, records(t, s, "bystander"), 2)

			var reported []string
			err = s.Verify(t.Context(), func(stream string, err error) { reported = append(reported, stream) })
			require.ErrorIs(t, err, eventstore.ErrCorrupt)
			assert.Contains(t, reported, "victim")
			assert.NotContains(t, reported, "bystander")
		})
	}
}

func TestBoltDetectsDroppedTail(t *testing.T) {
	for _, drop := range []int{1, 2, 5} {
		t.Run(fmt.Sprint("drop=", drop), func(t *testing.T) {
			path := tempPath(t)
			s, err := eventstore.Open(path, fast)
			require.NoError(t, err)
			appendN(t, s, "s", 0, 5)
			require.NoError(t, s.Close())
			rawUpdate(t, path, func(tx *bolt.Tx) error {
				b := tx.Bucket(eventstore.BucketStreams).Bucket([]byte("s"))
				for v := 5; v > 5-drop; v-- {
					if err := b.Delete(versionKey(int64(v))); err != nil {
						return err
					}
				}
				return nil
			})
			s = openAt(t, path, fast)

			err = s.VerifyStream(t.Context(), "s")
			var ce *eventstore.CorruptionError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, "s", ce.Stream)
			assert.Equal(t, int64(5-drop+1), ce.Version, "names the first missing version")
			assert.Contains(t, err.Error(), "head is version 5")

			_, err = readErr(s, "s", 1)
			require.ErrorIs(t, err, eventstore.ErrCorrupt)

			_, err = s.Append(t.Context(), "s", 5, []eventstore.Event{{Type: "t"}})
			require.ErrorIs(t, err, eventstore.ErrCorrupt, "no append on top of a damaged stream")
			_, err = s.Append(t.Context(), "other", eventstore.NoStream, []eventstore.Event{{Type: "t"}})
			require.NoError(t, err, "other streams still accept writes")

			require.ErrorIs(t, s.ReadAll(t.Context(), 1, func(eventstore.Record) error { return nil }), eventstore.ErrCorrupt,
				"the global index points at the missing records")
			require.ErrorIs(t, s.Verify(t.Context(), nil), eventstore.ErrCorrupt)
		})
	}
}

func TestBoltDetectsIndexDamage(t *testing.T) {
	path := tempPath(t)
	s, err := eventstore.Open(path, fast)
	require.NoError(t, err)
	appendN(t, s, "a", 0, 3)
	appendN(t, s, "b", 0, 3)
	require.NoError(t, s.Close())
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		return tx.Bucket(eventstore.BucketSeq).Delete(versionKey(4))
	})
	s = openAt(t, path, fast)
	require.NoError(t, s.VerifyStream(t.Context(), "a"), "the streams themselves are intact")
	var problems []error
	err = s.Verify(t.Context(), func(_ string, err error) { problems = append(problems, err) })
	require.ErrorIs(t, err, eventstore.ErrCorrupt)
	require.NotEmpty(t, problems)
	err = s.ReadAll(t.Context(), 1, func(eventstore.Record) error { return nil })
	require.ErrorIs(t, err, eventstore.ErrCorrupt)
	assert.Contains(t, err.Error(), "sequence 4")
}

func TestBoltDetectsSnapshotDamage(t *testing.T) {
	path := tempPath(t)
	s, err := eventstore.Open(path, fast)
	require.NoError(t, err)
	appendN(t, s, "s", 0, 2)
	require.NoError(t, s.SaveSnapshot(t.Context(), "s", eventstore.Snapshot{Version: 2, Format: 1, Data: []byte("projection")}))
	require.NoError(t, s.Close())
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		b := tx.Bucket(eventstore.BucketSnapshots)
		v := bytes.Clone(b.Get([]byte("s")))
		v[len(v)-1] ^= 1
		return b.Put([]byte("s"), v)
	})
	s = openAt(t, path, fast)
	_, _, err = s.LoadSnapshot(t.Context(), "s")
	var ce *eventstore.CorruptionError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "s", ce.Stream)
	require.ErrorIs(t, s.Verify(t.Context(), nil), eventstore.ErrCorrupt)
}

func TestBoltRefusesUnknownFormat(t *testing.T) {
	path := tempPath(t)
	s, err := eventstore.Open(path, fast)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		return tx.Bucket(eventstore.BucketMeta).Put(eventstore.KeyFormat, binary.BigEndian.AppendUint32(nil, eventstore.FormatVersion+1))
	})
	_, err = eventstore.Open(path, fast)
	require.ErrorIs(t, err, eventstore.ErrUnsupportedFormat)
	assert.Contains(t, err.Error(), path)
	assert.Contains(t, err.Error(), fmt.Sprintf("format version %d", eventstore.FormatVersion+1))
}

func TestBoltRefusesForeignFiles(t *testing.T) {
	t.Run("NotADatabase", func(t *testing.T) {
		path := tempPath(t)
		require.NoError(t, os.WriteFile(path, bytes.Repeat([]byte("not a database "), 1000), 0o600))
		_, err := eventstore.Open(path, fast)
		require.ErrorIs(t, err, eventstore.ErrCorrupt)
		assert.Contains(t, err.Error(), path)
	})
	t.Run("OtherBoltFile", func(t *testing.T) {
		path := tempPath(t)
		rawUpdate(t, path, func(tx *bolt.Tx) error {
			_, err := tx.CreateBucket([]byte("something-else"))
			return err
		})
		_, err := eventstore.Open(path, fast)
		require.ErrorIs(t, err, eventstore.ErrUnsupportedFormat)
	})
	t.Run("MissingBucket", func(t *testing.T) {
		path := tempPath(t)
		s, err := eventstore.Open(path, fast)
		require.NoError(t, err)
		require.NoError(t, s.Close())
		rawUpdate(t, path, func(tx *bolt.Tx) error { return tx.DeleteBucket(eventstore.BucketSeq) })
		_, err = eventstore.Open(path, fast)
		require.ErrorIs(t, err, eventstore.ErrCorrupt)
	})
	t.Run("InvalidOptions", func(t *testing.T) {
		_, err := eventstore.Open(tempPath(t), &eventstore.Options{OpenTimeout: -1})
		require.ErrorIs(t, err, eventstore.ErrInvalidOptions)
		_, err = eventstore.Open(tempPath(t), &eventstore.Options{Limits: eventstore.Limits{MaxRecordBytes: -5}})
		require.ErrorIs(t, err, eventstore.ErrInvalidOptions)
	})
}

// A file that is already open (bbolt's flock also excludes a second open
// in the same process) fails within the timeout, naming the file.
func TestBoltLockedFile(t *testing.T) {
	path := tempPath(t)
	first, err := eventstore.Open(path, fast)
	require.NoError(t, err)

	const timeout = 200 * time.Millisecond
	start := time.Now()
	_, err = eventstore.Open(path, &eventstore.Options{NoSync: true, OpenTimeout: timeout})
	elapsed := time.Since(start)
	require.ErrorIs(t, err, eventstore.ErrLocked)
	assert.Contains(t, err.Error(), path)
	assert.Contains(t, err.Error(), "another process")
	assert.Less(t, elapsed, timeout+2*time.Second, "gives up near the timeout, not never")

	_, err = first.Append(t.Context(), "s", eventstore.NoStream, []eventstore.Event{{Type: "t"}})
	require.NoError(t, err, "the holder is unaffected")
	require.NoError(t, first.Close())
	second := openAt(t, path, fast)
	info, err := second.Stream(t.Context(), "s")
	require.NoError(t, err)
	assert.Equal(t, int64(1), info.Version)
}

func TestBoltWriteFailureDisablesWrites(t *testing.T) {
	path := tempPath(t)
	s, err := eventstore.Open(path, fast)
	require.NoError(t, err)
	appendN(t, s, "s", 0, 2)

	injected := errors.New("injected fsync failure")
	eventstore.SetCommitHook(s, func() error { return injected })
	_, err = s.Append(t.Context(), "s", 2, []eventstore.Event{{Type: "t", Data: []byte("lost")}})
	require.ErrorIs(t, err, eventstore.ErrCommitFailed)
	require.ErrorIs(t, err, eventstore.ErrWritesDisabled)
	require.ErrorIs(t, err, injected, "the cause is kept")
	eventstore.SetCommitHook(s, nil)

	_, err = s.Append(t.Context(), "s", 2, []eventstore.Event{{Type: "t"}})
	require.ErrorIs(t, err, eventstore.ErrWritesDisabled, "no retry: later writes are refused")
	assert.NotErrorIs(t, err, eventstore.ErrCommitFailed)
	_, err = s.Append(t.Context(), "fresh", eventstore.NoStream, []eventstore.Event{{Type: "t"}})
	require.ErrorIs(t, err, eventstore.ErrWritesDisabled)
	require.ErrorIs(t, s.SaveSnapshot(t.Context(), "s", eventstore.Snapshot{Version: 1}), eventstore.ErrWritesDisabled)

	assert.Len(t, records(t, s, "s"), 2, "reads keep working")
	require.NoError(t, s.VerifyStream(t.Context(), "s"))
	require.NoError(t, s.Close())

	s = openAt(t, path, fast)
	assert.Len(t, records(t, s, "s"), 2)
	_, err = s.Append(t.Context(), "s", 2, []eventstore.Event{{Type: "t"}})
	require.NoError(t, err, "reopening re-enables writes")
}

// waitQueued waits until n requests are queued behind a blocked commit.
func waitQueued(t *testing.T, s *eventstore.BoltStore, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for eventstore.QueueLen(s) < n {
		require.True(t, time.Now().Before(deadline), "requests never queued")
		runtime.Gosched()
	}
}

// blockFirstCommit makes the next commit wait until release is closed;
// entered is closed once it waits.
func blockFirstCommit(s *eventstore.BoltStore) (entered, release chan struct{}, commits func() int) {
	entered, release = make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	n := 0
	eventstore.SetCommitHook(s, func() error {
		mu.Lock()
		n++
		first := n == 1
		mu.Unlock()
		if first {
			close(entered)
			<-release
		}
		return nil
	})
	return entered, release, func() int { mu.Lock(); defer mu.Unlock(); return n }
}

type outcome struct {
	res eventstore.AppendResult
	err error
}

func goAppend(s eventstore.Store, ctx context.Context, stream string, expected int64, data string) <-chan outcome {
	ch := make(chan outcome, 1)
	go func() {
		res, err := s.Append(ctx, stream, expected, []eventstore.Event{{Type: "t", Data: []byte(data)}})
		ch <- outcome{res, err}
	}()
	return ch
}

// Appends that queue up while a commit runs share the next commit; within
// it, each is checked against the stream as updated by the ones before.
func TestBoltGroupCommitBatch(t *testing.T) {
	s := openAt(t, tempPath(t), fast)
	entered, release, commits := blockFirstCommit(s)
	first := goAppend(s, t.Context(), "warmup", eventstore.NoStream, "")
	<-entered

	var pending []<-chan outcome
	for i := range 30 {
		pending = append(pending, goAppend(s, t.Context(), fmt.Sprintf("s%02d", i), eventstore.NoStream, "x"))
	}
	waitQueued(t, s, 30)
	// Two appends to one stream at the same expected version, in one batch.
	dupA := goAppend(s, t.Context(), "dup", eventstore.NoStream, "a")
	waitQueued(t, s, 31)
	dupB := goAppend(s, t.Context(), "dup", eventstore.NoStream, "b")
	waitQueued(t, s, 32)
	chained := goAppend(s, t.Context(), "dup", 1, "c") // sees dupA's write in the same batch
	waitQueued(t, s, 33)
	close(release)

	require.NoError(t, (<-first).err)
	for _, ch := range pending {
		require.NoError(t, (<-ch).err)
	}
	a, b, c := <-dupA, <-dupB, <-chained
	require.NoError(t, a.err)
	var ce *eventstore.ConflictError
	require.ErrorAs(t, b.err, &ce)
	assert.Equal(t, int64(1), ce.Actual)
	require.NoError(t, c.err)
	assert.Equal(t, int64(2), c.res.FirstVersion)
	assert.Equal(t, 2, commits(), "everything queued during the first commit went into the second")

	recs := records(t, s, "dup")
	require.Len(t, recs, 2)
	assert.Equal(t, "a", string(recs[0].Data))
	assert.Equal(t, "c", string(recs[1].Data))
	last, err := s.LastSeq(t.Context())
	require.NoError(t, err)
	assert.Equal(t, uint64(1+30+2), last, "the conflicting append consumed no sequence")
	require.NoError(t, s.Verify(t.Context(), nil))
}

// A failed commit fails every append of its batch.
func TestBoltFailedBatchFailsAll(t *testing.T) {
	s := openAt(t, tempPath(t), fast)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	calls := 0
	eventstore.SetCommitHook(s, func() error {
		calls++
		if calls == 1 {
			once.Do(func() { close(entered) })
			<-release
			return nil
		}
		return errors.New("disk on fire")
	})
	first := goAppend(s, t.Context(), "warmup", eventstore.NoStream, "")
	<-entered
	var pending []<-chan outcome
	for i := range 10 {
		pending = append(pending, goAppend(s, t.Context(), fmt.Sprint("s", i), eventstore.NoStream, ""))
	}
	waitQueued(t, s, 10)
	close(release)
	require.NoError(t, (<-first).err)
	for _, ch := range pending {
		require.ErrorIs(t, (<-ch).err, eventstore.ErrCommitFailed)
	}
	last, err := s.LastSeq(t.Context())
	require.NoError(t, err)
	assert.Equal(t, uint64(1), last, "nothing of the failed batch is visible")
}

// An append whose context ends while it waits in the queue is dropped by
// the committer and reports ctx.Err(); it wrote nothing.
func TestBoltCanceledWhileQueued(t *testing.T) {
	s := openAt(t, tempPath(t), fast)
	entered, release, _ := blockFirstCommit(s)
	first := goAppend(s, t.Context(), "warmup", eventstore.NoStream, "")
	<-entered
	ctx, cancel := context.WithCancel(t.Context())
	queued := goAppend(s, ctx, "s", eventstore.NoStream, "never")
	waitQueued(t, s, 1)
	cancel()
	close(release)
	require.NoError(t, (<-first).err)
	require.ErrorIs(t, (<-queued).err, context.Canceled)
	info, err := s.Stream(t.Context(), "s")
	require.NoError(t, err)
	assert.Equal(t, int64(0), info.Version)
}

// Close answers every append queued before it and never deadlocks.
func TestBoltCloseDrainsQueue(t *testing.T) {
	path := tempPath(t)
	s, err := eventstore.Open(path, fast)
	require.NoError(t, err)
	entered, release, _ := blockFirstCommit(s)
	first := goAppend(s, t.Context(), "warmup", eventstore.NoStream, "")
	<-entered
	var pending []<-chan outcome
	for i := range 20 {
		pending = append(pending, goAppend(s, t.Context(), fmt.Sprint("s", i), eventstore.NoStream, ""))
	}
	waitQueued(t, s, 20)
	closed := make(chan error, 2)
	go func() { closed <- s.Close() }()
	go func() { closed <- s.Close() }()
	close(release)
	require.NoError(t, <-closed)
	require.NoError(t, <-closed)
	require.NoError(t, (<-first).err)
	for _, ch := range pending {
		require.NoError(t, (<-ch).err, "queued before Close: committed")
	}
	_, err = s.Append(t.Context(), "late", eventstore.NoStream, []eventstore.Event{{Type: "t"}})
	require.ErrorIs(t, err, eventstore.ErrClosed)

	s = openAt(t, path, fast)
	last, err := s.LastSeq(t.Context())
	require.NoError(t, err)
	assert.Equal(t, uint64(21), last)
}

// Closing while appends and reads run concurrently neither deadlocks nor
// panics; every call returns either its result or ErrClosed.
func TestBoltCloseUnderLoad(t *testing.T) {
	s, err := eventstore.Open(tempPath(t), fast)
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 8 {
		wg.Go(func() {
			stream := fmt.Sprint("w", g)
			for i := 0; ; i++ {
				_, err := s.Append(context.Background(), stream, int64(i), []eventstore.Event{{Type: "t"}})
				if err != nil {
					errs <- err
					return
				}
				if err := s.ReadStream(context.Background(), stream, 1, func(eventstore.Record) error { return nil }); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	waitSeq(t, s, 50)
	require.NoError(t, s.Close())
	wg.Wait()
	close(errs)
	for err := range errs {
		require.ErrorIs(t, err, eventstore.ErrClosed)
	}
}

func waitSeq(t *testing.T, s eventstore.Store, n uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		last, err := s.LastSeq(t.Context())
		require.NoError(t, err)
		if last >= n {
			return
		}
		require.True(t, time.Now().Before(deadline))
		runtime.Gosched()
	}
}

// Garbage written over the middle of the file must come back as errors
// from Open, reads or Verify — never as a panic in the caller.
func TestBoltSurvivesPageDamage(t *testing.T) {
	path := tempPath(t)
	s, err := eventstore.Open(path, fast)
	require.NoError(t, err)
	payload := bytes.Repeat([]byte("p"), 300)
	for i := range 40 {
		events := make([]eventstore.Event, 20)
		for j := range events {
			events[j] = eventstore.Event{Type: "t", Data: payload}
		}
		_, err := s.Append(t.Context(), fmt.Sprint("s", i%4), int64(i/4*20), events)
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())

	clean, err := os.ReadFile(path)
	require.NoError(t, err)
	pageSize := os.Getpagesize()
	// Damage pages that hold data: a free page's damage is harmless.
	byType := map[string][]int{}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, PreLoadFreelist: true, Timeout: time.Second})
	require.NoError(t, err)
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		for id := 2; id < len(clean)/pageSize; id++ {
			info, err := tx.Page(id)
			if err != nil || info == nil {
				continue
			}
			byType[info.Type] = append(byType[info.Type], id)
		}
		return nil
	}))
	require.NoError(t, db.Close())
	leaves, branches := byType["leaf"], byType["branch"]
	require.NotEmpty(t, leaves)
	require.NotEmpty(t, branches)
	victims := []int{0, 1, leaves[0], leaves[len(leaves)/2], leaves[len(leaves)-1], branches[0], branches[len(branches)-1]}
	victims = append(victims, byType["freelist"]...)
	for _, tc := range []struct {
		name  string
		start int // first byte damaged within the page (the header is 16 bytes)
	}{{"body", 16}, {"header", 0}} {
		for _, page := range victims {
			t.Run(fmt.Sprintf("%s/page=%d", tc.name, page), func(t *testing.T) {
				damagePage(t, clean, pageSize, page, tc.start)
			})
		}
	}
}

func TestBoltRefusesFileWithBothMetaPagesDamaged(t *testing.T) {
	path := tempPath(t)
	s, err := eventstore.Open(path, fast)
	require.NoError(t, err)
	appendN(t, s, "s", 0, 3)
	require.NoError(t, s.Close())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	pageSize := os.Getpagesize()
	for i := 16; i < 2*pageSize; i += 5 {
		b[i] ^= 0xa5
	}
	require.NoError(t, os.WriteFile(path, b, 0o600))
	_, err = eventstore.Open(path, fast)
	require.ErrorIs(t, err, eventstore.ErrCorrupt)
	assert.Contains(t, err.Error(), path)
}

// damagePage writes garbage over one page of a copy of clean, opens it and
// reads everything: errors are expected, a panic would fail the test binary.
func damagePage(t *testing.T, clean []byte, pageSize, page, start int) {
	damaged := bytes.Clone(clean)
	for i := page*pageSize + start; i < (page+1)*pageSize; i += 7 {
		damaged[i] ^= 0x5a
	}
	p := filepath.Join(t.TempDir(), "damaged.db")
	require.NoError(t, os.WriteFile(p, damaged, 0o600))
	s, err := eventstore.Open(p, fast)
	if err != nil {
		return // refused at open: fine
	}
	defer s.Close()
	var errs []error
	for i := range 4 {
		_, err := readErr(s, fmt.Sprint("s", i), 1)
		errs = append(errs, err)
	}
	errs = append(errs, s.ReadAll(t.Context(), 1, func(eventstore.Record) error { return nil }))
	errs = append(errs, s.Verify(t.Context(), nil))
	for i := range 4 { // writes on a damaged file fail cleanly too
		_, err := s.Append(t.Context(), fmt.Sprint("s", i), eventstore.Any, []eventstore.Event{{Type: "t"}})
		errs = append(errs, err)
	}
	if page > 1 { // bbolt keeps two meta pages: losing one loses nothing
		assert.Error(t, errors.Join(errs...), "the damage is noticed somewhere")
	}
}

// The model test: random appends, reads, snapshots and reopens against a
// plain in-memory model.
func TestBoltModel(t *testing.T) {
	dir := t.TempDir()
	run := 0
	streams := []string{"a", "b", "c"}
	eventGen := rapid.Custom(func(t *rapid.T) eventstore.Event {
		return eventstore.Event{
			Type: rapid.SampledFrom([]string{"x", "y", "zz"}).Draw(t, "type"),
			Data: rapid.SliceOfN(rapid.Byte(), 0, 40).Draw(t, "data"),
		}
	})
	rapid.Check(t, func(rt *rapid.T) {
		run++
		path := filepath.Join(dir, fmt.Sprintf("model-%d.db", run))
		s, err := eventstore.Open(path, fast)
		require.NoError(rt, err)
		defer func() { _ = s.Close() }()
		ctx := context.Background()

		type entry struct {
			stream string
			ev     eventstore.Event
		}
		model := map[string][]eventstore.Event{}
		var global []entry
		snaps := map[string]eventstore.Snapshot{}

		rt.Repeat(map[string]func(*rapid.T){
			"append": func(rt *rapid.T) {
				stream := rapid.SampledFrom(streams).Draw(rt, "stream")
				cur := int64(len(model[stream]))
				expected := rapid.SampledFrom([]int64{cur, cur, eventstore.Any, eventstore.NoStream, cur + 1, cur - 1}).Draw(rt, "expected")
				if expected < eventstore.Any {
					expected = eventstore.Any
				}
				events := rapid.SliceOfN(eventGen, 1, 4).Draw(rt, "events")
				res, err := s.Append(ctx, stream, expected, events)
				if expected != eventstore.Any && expected != cur {
					require.ErrorIs(rt, err, eventstore.ErrConflict)
					return
				}
				require.NoError(rt, err)
				require.Equal(rt, cur+1, res.FirstVersion)
				require.Equal(rt, cur+int64(len(events)), res.LastVersion)
				require.Equal(rt, uint64(len(global)+1), res.FirstSeq)
				for _, e := range events {
					model[stream] = append(model[stream], e)
					global = append(global, entry{stream, e})
				}
			},
			"readStream": func(rt *rapid.T) {
				stream := rapid.SampledFrom(streams).Draw(rt, "stream")
				from := rapid.Int64Range(-1, int64(len(model[stream]))+2).Draw(rt, "from")
				var got []eventstore.Record
				require.NoError(rt, s.ReadStream(ctx, stream, from, func(r eventstore.Record) error { got = append(got, r); return nil }))
				want := model[stream][min(max(from, 1)-1, int64(len(model[stream]))):]
				require.Len(rt, got, len(want))
				for i, r := range got {
					require.Equal(rt, max(from, 1)+int64(i), r.Version)
					require.Equal(rt, want[i].Type, r.Type)
					require.True(rt, bytes.Equal(want[i].Data, r.Data))
				}
			},
			"readAll": func(rt *rapid.T) {
				from := rapid.Uint64Range(0, uint64(len(global))+2).Draw(rt, "from")
				var got []eventstore.Record
				require.NoError(rt, s.ReadAll(ctx, from, func(r eventstore.Record) error { got = append(got, r); return nil }))
				start := min(max(from, 1)-1, uint64(len(global)))
				want := global[start:]
				require.Len(rt, got, len(want))
				for i, r := range got {
					require.Equal(rt, start+uint64(i)+1, r.Seq)
					require.Equal(rt, want[i].stream, r.Stream)
					require.True(rt, bytes.Equal(want[i].ev.Data, r.Data))
				}
			},
			"snapshot": func(rt *rapid.T) {
				stream := rapid.SampledFrom(streams).Draw(rt, "stream")
				head := int64(len(model[stream]))
				snap := eventstore.Snapshot{
					Version: rapid.Int64Range(0, head+1).Draw(rt, "version"),
					Format:  rapid.Uint32().Draw(rt, "format"),
					Data:    rapid.SliceOfN(rapid.Byte(), 0, 20).Draw(rt, "data"),
				}
				err := s.SaveSnapshot(ctx, stream, snap)
				if snap.Version < 1 || snap.Version > head {
					require.ErrorIs(rt, err, eventstore.ErrInvalidSnapshotVersion)
					return
				}
				require.NoError(rt, err)
				snaps[stream] = snap
			},
			"loadSnapshot": func(rt *rapid.T) {
				stream := rapid.SampledFrom(streams).Draw(rt, "stream")
				got, ok, err := s.LoadSnapshot(ctx, stream)
				require.NoError(rt, err)
				want, wantOK := snaps[stream]
				require.Equal(rt, wantOK, ok)
				if ok {
					require.Equal(rt, want.Version, got.Version)
					require.Equal(rt, want.Format, got.Format)
					require.True(rt, bytes.Equal(want.Data, got.Data))
				}
			},
			"reopen": func(rt *rapid.T) {
				require.NoError(rt, s.Close())
				s, err = eventstore.Open(path, fast)
				require.NoError(rt, err)
			},
			"": func(rt *rapid.T) {
				last, err := s.LastSeq(ctx)
				require.NoError(rt, err)
				require.Equal(rt, uint64(len(global)), last)
				for _, stream := range streams {
					info, err := s.Stream(ctx, stream)
					require.NoError(rt, err)
					require.Equal(rt, int64(len(model[stream])), info.Version)
				}
			},
		})
		require.NoError(rt, s.Verify(ctx, nil))
	})
}

func TestBoltErrorMessages(t *testing.T) {
	msgs := []error{
		eventstore.ErrConflict, eventstore.ErrEmptyStream, eventstore.ErrInvalidStream, eventstore.ErrNoEvents,
		eventstore.ErrEmptyEventType, eventstore.ErrInvalidEventType, eventstore.ErrInvalidExpectedVersion,
		eventstore.ErrRecordTooLarge, eventstore.ErrAppendTooLarge, eventstore.ErrSnapshotTooLarge,
		eventstore.ErrInvalidSnapshotVersion, eventstore.ErrInvalidOptions, eventstore.ErrClosed,
		eventstore.ErrWritesDisabled, eventstore.ErrCommitFailed, eventstore.ErrLocked, eventstore.ErrCorrupt,
		eventstore.ErrUnsupportedFormat,
		&eventstore.ConflictError{Stream: "s", Expected: 0, Actual: 3},
		&eventstore.CorruptionError{Stream: "s", Version: 2, Reason: "why"},
		&eventstore.CorruptionError{Reason: "why"},
	}
	for _, err := range msgs {
		assert.True(t, strings.HasPrefix(err.Error(), "eventstore: "), err.Error())
	}
	assert.Equal(t, `eventstore: version conflict on stream "s": expected no stream, stream is at version 3`, msgs[18].Error())
	assert.Equal(t, `eventstore: corrupt record: stream "s" version 2: why`, msgs[19].Error())
}
