package eventstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/eventstore/storetest"
)

// held keeps every journaled record out of bbolt for the whole test, so
// reads are served by the overlay.
var held = &eventstore.Options{NoSync: true, ApplyInterval: time.Hour, ApplyBytes: 1 << 30}

// tiny segments make the journal recycle every few appends.
var tiny = &eventstore.Options{NoSync: true, JournalSegmentBytes: 64 << 10, JournalSegments: 2,
	Limits: eventstore.Limits{MaxAppendBytes: 32 << 10, MaxRecordBytes: 32 << 10}}

func TestJournalConformanceHeld(t *testing.T) {
	storetest.Run(t, func(t *testing.T) eventstore.Store { return openAt(t, tempPath(t), held) })
}

// Small segments and eager application: records move to bbolt while the
// suite reads.
func TestJournalConformanceEagerApply(t *testing.T) {
	opts := &eventstore.Options{NoSync: true, JournalSegmentBytes: 10 << 20, JournalSegments: 2, ApplyInterval: time.Microsecond, ApplyBytes: 1}
	storetest.Run(t, func(t *testing.T) eventstore.Store { return openAt(t, tempPath(t), opts) })
}

func TestJournalOffConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) eventstore.Store {
		return openAt(t, tempPath(t), &eventstore.Options{NoSync: true, JournalOff: true})
	})
}

// copyStore copies a data file and its journal as they are on disk now: what
// a machine that lost power (or a SIGKILL) would leave, since nothing is
// applied while the copy is taken (held).
func copyStore(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "copy.db")
	copyFile(t, src, dst)
	require.NoError(t, os.MkdirAll(eventstore.JournalDir(dst), 0o700))
	entries, err := os.ReadDir(eventstore.JournalDir(src))
	require.NoError(t, err)
	for _, e := range entries {
		copyFile(t, filepath.Join(eventstore.JournalDir(src), e.Name()), filepath.Join(eventstore.JournalDir(dst), e.Name()))
	}
	return dst
}

// copyLive copies an open store as a crash would leave it while the
// applier keeps running: the journal first, then the data file as of one
// bbolt commit (anything the applier recycles in between, that commit
// covers). Copying the data file byte by byte during a commit would not be
// a state a crash can leave.
func copyLive(t *testing.T, s *eventstore.BoltStore, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "copy.db")
	require.NoError(t, os.MkdirAll(eventstore.JournalDir(dst), 0o700))
	entries, err := os.ReadDir(eventstore.JournalDir(src))
	require.NoError(t, err)
	for _, e := range entries {
		copyFile(t, filepath.Join(eventstore.JournalDir(src), e.Name()), filepath.Join(eventstore.JournalDir(dst), e.Name()))
	}
	require.NoError(t, eventstore.CopyDataFile(s, dst))
	return dst
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	require.NoError(t, err)
	defer in.Close()
	out, err := os.Create(dst)
	require.NoError(t, err)
	_, err = io.Copy(out, in)
	require.NoError(t, err)
	require.NoError(t, out.Close())
}

func allRecords(t testing.TB, s eventstore.Store) []eventstore.Record {
	t.Helper()
	var out []eventstore.Record
	require.NoError(t, s.ReadAll(context.Background(), 0, func(r eventstore.Record) error {
		out = append(out, r)
		return nil
	}))
	return out
}

// segments returns the journal's segment files, in name order.
func segments(t *testing.T, path string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(eventstore.JournalDir(path), "*.seg"))
	require.NoError(t, err)
	sort.Strings(m)
	return m
}

func TestJournalReadYourWrites(t *testing.T) {
	ctx := context.Background()
	s := openAt(t, tempPath(t), held)
	appendN(t, s, "a", 0, 3)
	appendN(t, s, "b", 0, 2)
	st := s.JournalStats()
	require.True(t, st.Enabled)
	require.Equal(t, 5, st.Pending, "nothing is applied while held")
	require.Equal(t, uint64(0), st.Applied)

	info, err := s.Stream(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, int64(3), info.Version)
	var names []string
	require.NoError(t, s.Streams(ctx, func(i eventstore.StreamInfo) error { names = append(names, i.Stream); return nil }))
	require.Equal(t, []string{"a", "b"}, names)
	last, err := s.LastSeq(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(5), last)
	require.Len(t, records(t, s, "a"), 3)
	require.Len(t, allRecords(t, s), 5)
	require.NoError(t, s.VerifyStream(ctx, "a"))
	require.NoError(t, s.SaveSnapshot(ctx, "a", eventstore.Snapshot{Version: 3, Format: 1, Data: []byte("x")}))

	before := allRecords(t, s)
	require.NoError(t, s.Flush(ctx))
	st = s.JournalStats()
	require.Zero(t, st.Pending)
	require.Equal(t, uint64(5), st.Applied)
	require.Equal(t, before, allRecords(t, s), "the same records from bbolt once applied")
	snap, ok, err := s.LoadSnapshot(ctx, "a")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(3), snap.Version)
	require.NoError(t, s.Verify(ctx, nil))
}

// Reads during application never miss or duplicate a record.
func TestJournalReadsDuringApplication(t *testing.T) {
	ctx := context.Background()
	s := openAt(t, tempPath(t), &eventstore.Options{NoSync: true, ApplyInterval: time.Millisecond, ApplyBytes: 4 << 10})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			var want uint64 = 1
			err := s.ReadAll(ctx, 0, func(r eventstore.Record) error {
				if r.Seq != want {
					return fmt.Errorf("read sequence %d, want %d", r.Seq, want)
				}
				want++
				return nil
			})
			if err == nil {
				err = s.VerifyStream(ctx, "a")
			}
			if err != nil {
				select {
				case errs <- err:
				default:
				}
				return
			}
		}
	}()
	for i := 0; i < 400; i++ {
		appendN(t, s, "a", i, 1)
		info, err := s.Stream(ctx, "a")
		require.NoError(t, err)
		require.Equal(t, int64(i+1), info.Version, "read-your-writes")
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	require.Len(t, records(t, s, "a"), 400)
}

// What a crash leaves (journal written, bbolt behind) is replayed at Open.
func TestJournalReplay(t *testing.T) {
	src := tempPath(t)
	s := openAt(t, src, held)
	appendN(t, s, "a", 0, 5)
	appendN(t, s, "b", 0, 3)
	want := allRecords(t, s)
	dst := copyStore(t, src)

	r, err := eventstore.Open(dst, fast)
	require.NoError(t, err)
	defer r.Close()
	require.Equal(t, 8, r.Replay().Records)
	require.Equal(t, want, allRecords(t, r))
	require.NoError(t, r.Verify(context.Background(), nil))
	appendN(t, r, "a", 5, 1) // and it goes on
}

// A torn final frame — any prefix of it written, the rest still zeros (a
// fresh segment) or stale bytes (a recycled one) — is cut; every record
// before it is served.
func TestJournalTornTailAtEveryOffset(t *testing.T) {
	src := tempPath(t)
	s := openAt(t, src, held)
	appendN(t, s, "a", 0, 3)
	before := allRecords(t, s)
	appendN(t, s, "a", 3, 1) // the frame to tear
	seg := segments(t, src)[0]
	data, err := os.ReadFile(seg)
	require.NoError(t, err)
	start, end := eventstore.LastFrame(data)
	require.Greater(t, end, start)

	for _, fill := range []string{"zeros", "stale"} {
		for cut := start; cut < end; cut++ {
			dst := copyStore(t, src)
			torn := bytes.Clone(data)
			for i := cut; i < end; i++ {
				if fill == "zeros" {
					torn[i] = 0
				} else {
					torn[i] = byte(0xA5 ^ i)
				}
			}
			require.NoError(t, os.WriteFile(filepath.Join(eventstore.JournalDir(dst), filepath.Base(seg)), torn, 0o600))
			r, err := eventstore.Open(dst, fast)
			require.NoError(t, err, "%s cut at %d", fill, cut)
			require.Equal(t, before, allRecords(t, r), "%s cut at %d", fill, cut)
			require.NoError(t, r.Verify(context.Background(), nil))
			require.NoError(t, r.Close())
		}
	}
}

// A damaged frame followed by valid ones is corruption: Open refuses and
// names the segment and offset.
func TestJournalDamageBeforeValidFramesRefuses(t *testing.T) {
	src := tempPath(t)
	s := openAt(t, src, held)
	appendN(t, s, "a", 0, 4)
	seg := segments(t, src)[0]
	data, err := os.ReadFile(seg)
	require.NoError(t, err)
	first, _ := eventstore.FirstFrame(data)
	for _, at := range []int{first + 4, first + 8, first + 40, first + 60} {
		dst := copyStore(t, src)
		bad := bytes.Clone(data)
		bad[at] ^= 0x40
		name := filepath.Join(eventstore.JournalDir(dst), filepath.Base(seg))
		require.NoError(t, os.WriteFile(name, bad, 0o600))
		_, err := eventstore.Open(dst, fast)
		require.ErrorIs(t, err, eventstore.ErrCorrupt, "flip at %d", at)
		var je *eventstore.JournalError
		require.True(t, errors.As(err, &je), "%v", err)
		require.Equal(t, name, je.Segment)
		require.Equal(t, int64(first), je.Offset)
		require.Contains(t, err.Error(), "followed by a valid frame")
	}
}

// With tiny segments the journal recycles: generations keep stale frames
// from being read as new, the journal stays within its bound, and a copy
// taken at any point replays to exactly what was acknowledged.
func TestJournalRecyclesSegments(t *testing.T) {
	ctx := context.Background()
	src := tempPath(t)
	opts := *tiny
	opts.ApplyInterval = time.Millisecond
	s := openAt(t, src, &opts)
	payload := bytes.Repeat([]byte("x"), 3000)
	for i := 0; i < 200; i++ {
		_, err := s.Append(ctx, fmt.Sprintf("s%d", i%7), eventstore.Any, []eventstore.Event{{Type: "t", Data: payload}})
		require.NoError(t, err)
		st := s.JournalStats()
		require.LessOrEqual(t, st.Segments, 2)
		require.LessOrEqual(t, st.Bytes, st.MaxBytes)
	}
	require.Greater(t, s.JournalStats().Applications, uint64(2))
	// A consistent copy of the files needs the disk to hold still: bring
	// bbolt up to date, then hold the applier before its next transaction
	// touches the file while a few more appends land in the journal only.
	require.NoError(t, s.Flush(ctx))
	release := make(chan struct{})
	eventstore.SetApplyHook(s, func() error { <-release; return nil })
	for i := 0; i < 3; i++ {
		_, err := s.Append(ctx, "late", eventstore.Any, []eventstore.Event{{Type: "t", Data: payload}})
		require.NoError(t, err)
	}
	want := allRecords(t, s)
	dst := copyLive(t, s, src)
	close(release)
	r, err := eventstore.Open(dst, fast)
	require.NoError(t, err)
	defer r.Close()
	require.Equal(t, 3, r.Replay().Records, "stale frames of recycled segments are not replayed")
	require.Equal(t, want, allRecords(t, r))
	require.NoError(t, r.Verify(ctx, nil))
}

// Frames of varying sizes put a recycled segment's end in the middle of a
// stale frame of an earlier generation, whose bytes need not look blank;
// and across reopens an old, covered segment keeps its stale tail while the
// others are recycled past it. The store reopens every time (cleanly
// closed, and from a copy taken while open) with every record.
func TestJournalRecycledSegmentsEndInStaleBytes(t *testing.T) {
	ctx := context.Background()
	src := tempPath(t)
	opts := *tiny
	opts.ApplyInterval = time.Millisecond
	opts.JournalSegments = 3
	i := 0
	for round := 0; round < 6; round++ {
		s, err := eventstore.Open(src, &opts)
		require.NoError(t, err, "round %d", round)
		for end := i + 90 + 40*round; i < end; i++ {
			payload := make([]byte, 100+(i*7919)%3000)
			for k := range payload {
				payload[k] = byte(k*131 + i*17 + 1)
			}
			_, err := s.Append(ctx, fmt.Sprintf("s%d", i%7), eventstore.Any, []eventstore.Event{{Type: "t", Data: payload}})
			require.NoError(t, err)
		}
		want := allRecords(t, s)
		dst := copyLive(t, s, src)
		require.NoError(t, s.Close())
		for _, path := range []string{src, dst} {
			r, err := eventstore.Open(path, fast)
			require.NoError(t, err, "round %d: %s", round, path)
			require.Equal(t, want, allRecords(t, r))
			require.NoError(t, r.Verify(ctx, nil))
			require.NoError(t, r.Close())
		}
	}
}

func TestJournalAppendLargerThanSegment(t *testing.T) {
	s := openAt(t, tempPath(t), &eventstore.Options{NoSync: true, JournalSegmentBytes: 64 << 10})
	_, err := s.Append(context.Background(), "a", eventstore.NoStream, []eventstore.Event{{Type: "t", Data: make([]byte, 100<<10)}})
	require.ErrorIs(t, err, eventstore.ErrAppendTooLarge)
	require.Contains(t, err.Error(), "JournalSegmentBytes")
	appendN(t, s, "a", 0, 1) // nothing changed, writes go on
}

func TestJournalBadOptions(t *testing.T) {
	for name, o := range map[string]eventstore.Options{
		"one segment":      {JournalSegments: 1},
		"tiny segment":     {JournalSegmentBytes: 4096},
		"unaligned":        {JournalSegmentBytes: 100_000},
		"negative":         {JournalSegmentBytes: -1},
		"negative apply":   {ApplyInterval: -time.Second},
		"negative segment": {JournalSegments: -2},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := eventstore.Open(tempPath(t), &o)
			require.ErrorIs(t, err, eventstore.ErrInvalidOptions)
		})
	}
}

// The journal's failures stop writes until reopen; reads go on; nothing
// acknowledged is lost.
func TestJournalFaults(t *testing.T) {
	ctx := context.Background()
	injected := errors.New("injected")
	for _, op := range []string{"write", "sync"} {
		t.Run(op, func(t *testing.T) {
			path := tempPath(t)
			s, err := eventstore.Open(path, fast)
			require.NoError(t, err)
			appendN(t, s, "a", 0, 2)
			eventstore.SetJournalFault(s, func(o string) error {
				if o == op {
					return injected
				}
				return nil
			})
			_, err = s.Append(ctx, "a", 2, []eventstore.Event{{Type: "t", Data: []byte("doomed")}})
			require.ErrorIs(t, err, eventstore.ErrCommitFailed)
			require.ErrorIs(t, err, injected)
			_, err = s.Append(ctx, "b", eventstore.NoStream, []eventstore.Event{{Type: "t"}})
			require.ErrorIs(t, err, eventstore.ErrWritesDisabled)
			require.Len(t, records(t, s, "a"), 2, "reads go on")
			require.NoError(t, s.Close())

			r := openAt(t, path, fast)
			got := records(t, r, "a")
			require.GreaterOrEqual(t, len(got), 2, "acknowledged records survive")
			if op == "write" {
				require.Len(t, got, 2, "a write that failed before writing left nothing")
			}
			appendN(t, r, "b", 0, 1)
		})
	}
	t.Run("prepare (disk full when a segment is created)", func(t *testing.T) {
		path := tempPath(t)
		opts := *tiny
		s, err := eventstore.Open(path, &opts)
		require.NoError(t, err)
		eventstore.SetJournalFault(s, func(o string) error {
			if o == "prepare" {
				return fmt.Errorf("no space left on device (injected)")
			}
			return nil
		})
		payload := bytes.Repeat([]byte("y"), 3000)
		var acked int
		for i := 0; i < 100; i++ {
			if _, err = s.Append(ctx, "a", eventstore.Any, []eventstore.Event{{Type: "t", Data: payload}}); err != nil {
				break
			}
			acked++
		}
		require.ErrorIs(t, err, eventstore.ErrWritesDisabled)
		require.Contains(t, err.Error(), "no space left")
		require.Len(t, records(t, s, "a"), acked, "reads go on")
		require.NoError(t, s.Close())
		r := openAt(t, path, fast)
		require.Len(t, records(t, r, "a"), acked)
	})
	t.Run("background commit fails while appends wait for a segment", func(t *testing.T) {
		path := tempPath(t)
		opts := *tiny
		opts.ApplyInterval = time.Hour // only a full journal makes the applier run
		s, err := eventstore.Open(path, &opts)
		require.NoError(t, err)
		eventstore.SetApplyHook(s, func() error { return injected })
		payload := bytes.Repeat([]byte("z"), 3000)
		acked := 0
		for i := 0; i < 200; i++ {
			if _, err = s.Append(ctx, "a", eventstore.Any, []eventstore.Event{{Type: "t", Data: payload}}); err != nil {
				break
			}
			acked++
		}
		require.ErrorIs(t, err, eventstore.ErrWritesDisabled, "appends fail, never hang")
		require.Less(t, acked, 200)
		require.Len(t, records(t, s, "a"), acked)
		require.NoError(t, s.Close())
		r := openAt(t, path, fast)
		require.Len(t, records(t, r, "a"), acked, "every acknowledged append replayed")
	})
	t.Run("background bbolt commit", func(t *testing.T) {
		path := tempPath(t)
		s, err := eventstore.Open(path, &eventstore.Options{NoSync: true, ApplyInterval: time.Millisecond})
		require.NoError(t, err)
		failed := make(chan struct{})
		var once sync.Once
		eventstore.SetApplyHook(s, func() error {
			once.Do(func() { close(failed) })
			return injected
		})
		appendN(t, s, "a", 0, 3) // acknowledged: in the journal
		<-failed
		require.Eventually(t, func() bool {
			_, err := s.Append(ctx, "b", eventstore.Any, []eventstore.Event{{Type: "t"}})
			return errors.Is(err, eventstore.ErrWritesDisabled)
		}, 10*time.Second, time.Millisecond)
		require.Len(t, records(t, s, "a"), 3, "reads go on, from the journal")
		require.ErrorIs(t, s.Flush(ctx), eventstore.ErrWritesDisabled)
		require.NoError(t, s.Close())
		r := openAt(t, path, fast)
		require.Len(t, records(t, r, "a"), 3, "replayed from the journal")
		require.NoError(t, r.Verify(ctx, nil))
	})
}

// No reply before the journal's fdatasync: while the sync is held, the
// append has not returned.
func TestJournalHeldSync(t *testing.T) {
	s := openAt(t, tempPath(t), nil)
	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	eventstore.SetJournalFault(s, func(op string) error {
		if op == "sync" {
			once.Do(func() {
				close(entered)
				<-release
			})
		}
		return nil
	})
	done := make(chan error, 1)
	go func() {
		_, err := s.Append(context.Background(), "a", eventstore.NoStream, []eventstore.Event{{Type: "t"}})
		done <- err
	}()
	<-entered
	select {
	case err := <-done:
		t.Fatalf("append returned (%v) before its journal frame was synced", err)
	default:
	}
	info, err := s.Stream(context.Background(), "a")
	require.NoError(t, err)
	require.Zero(t, info.Version, "not visible before it is durable")
	close(release)
	require.NoError(t, <-done)
}

// twoAppliedCommits writes 3 + 3 records, each three brought into bbolt by
// its own commit, closes the store and returns its path and records.
func twoAppliedCommits(t *testing.T) (string, []eventstore.Record) {
	t.Helper()
	ctx := context.Background()
	path := tempPath(t)
	s, err := eventstore.Open(path, fast)
	require.NoError(t, err)
	appendN(t, s, "a", 0, 3)
	require.NoError(t, s.Flush(ctx))
	appendN(t, s, "a", 3, 3)
	require.NoError(t, s.Flush(ctx))
	want := allRecords(t, s)
	require.NoError(t, s.Close())
	return path, want
}

// bbolt's newest meta page damaged: the journal still holds that commit's
// records (segments are recycled one commit late), so they are recovered,
// loudly.
func TestJournalRecoversDamagedNewestMeta(t *testing.T) {
	ctx := context.Background()
	path, want := twoAppliedCommits(t)
	require.NoError(t, eventstore.DamageNewestMeta(path))
	r, err := eventstore.Open(path, fast)
	require.NoError(t, err)
	defer r.Close()
	require.Equal(t, want, allRecords(t, r))
	require.NotEmpty(t, r.Warnings())
	require.Contains(t, r.Warnings()[0], "meta page")
	require.NoError(t, r.Verify(ctx, nil))
}

// ... and when the journal shows bbolt once covered more than it now has
// and no longer holds the records, Open refuses and says so.
func TestJournalRefusesLostBboltCommit(t *testing.T) {
	path, _ := twoAppliedCommits(t)
	require.NoError(t, eventstore.DamageNewestMeta(path))
	// Recycle every segment: headers say bbolt covered 6; no frames remain.
	for i, seg := range segments(t, path) {
		require.NoError(t, eventstore.ResetSegment(seg, uint64(100+i), 6))
	}
	_, err := eventstore.Open(path, fast)
	require.ErrorIs(t, err, eventstore.ErrCorrupt)
	require.Contains(t, err.Error(), "bbolt's newest commit was lost")
}

// Without a journal, a damaged meta page is no longer silent.
func TestJournalOffWarnsOfDamagedMeta(t *testing.T) {
	path := tempPath(t)
	off := &eventstore.Options{NoSync: true, JournalOff: true}
	s, err := eventstore.Open(path, off)
	require.NoError(t, err)
	appendN(t, s, "a", 0, 2)
	appendN(t, s, "a", 2, 2)
	require.NoError(t, s.Close())
	require.NoError(t, eventstore.DamageNewestMeta(path))
	r, err := eventstore.Open(path, off)
	require.NoError(t, err)
	defer r.Close()
	require.NotEmpty(t, r.Warnings())
	require.Contains(t, r.Warnings()[0], "damaged")
}

// Opening with the journal off replays a journal an earlier run left.
func TestJournalOffReplaysLeftJournal(t *testing.T) {
	src := tempPath(t)
	s := openAt(t, src, held)
	appendN(t, s, "a", 0, 4)
	want := allRecords(t, s)
	dst := copyStore(t, src)
	r, err := eventstore.Open(dst, &eventstore.Options{NoSync: true, JournalOff: true})
	require.NoError(t, err)
	defer r.Close()
	require.Equal(t, want, allRecords(t, r))
	require.Equal(t, 4, r.Replay().Records)
}

// Every byte of a journal segment flipped, one at a time, on a copy that
// holds unapplied records: Open either refuses (naming the journal) or
// serves records that are all exactly what was acknowledged, and loses
// none but those of a final frame it reports as torn.
func TestJournalByteFlipSweep(t *testing.T) {
	src := tempPath(t)
	opts := *held
	opts.JournalSegmentBytes = 64 << 10
	s := openAt(t, src, &opts)
	appendN(t, s, "a", 0, 3)
	appendN(t, s, "b", 0, 2)
	want := allRecords(t, s)
	seg := segments(t, src)[0]
	data, err := os.ReadFile(seg)
	require.NoError(t, err)
	lastStart, end := eventstore.LastFrame(data)
	dst := copyStore(t, src)
	name := filepath.Join(eventstore.JournalDir(dst), filepath.Base(seg))
	refused, cut := 0, 0
	for at := 0; at < end+64; at++ {
		if at == 64 {
			at = eventstore.SegmentHeaderSize // the rest of the header block is padding
		}
		bad := bytes.Clone(data)
		bad[at] ^= 0x01
		require.NoError(t, os.WriteFile(name, bad, 0o600))
		dataCopy := filepath.Join(filepath.Dir(dst), fmt.Sprintf("flip-%d.db", at))
		copyFile(t, src, dataCopy)
		require.NoError(t, os.MkdirAll(eventstore.JournalDir(dataCopy), 0o700))
		copyFile(t, name, filepath.Join(eventstore.JournalDir(dataCopy), filepath.Base(seg)))
		r, err := eventstore.Open(dataCopy, fast)
		if err != nil {
			require.ErrorIs(t, err, eventstore.ErrCorrupt, "flip at %d", at)
			require.Contains(t, err.Error(), "journal", "flip at %d", at)
			refused++
			continue
		}
		got := allRecords(t, r)
		switch {
		case len(got) == len(want):
			require.Equal(t, want, got, "flip at %d", at)
		default:
			// Only a damaged final frame may be cut (it is indistinguishable
			// from a torn write), and Open says so.
			require.GreaterOrEqual(t, at, lastStart, "flip at %d lost records outside the final frame", at)
			require.Equal(t, want[:len(got)], got)
			require.NotEmpty(t, r.Warnings(), "flip at %d: a cut must be reported", at)
			cut++
		}
		require.NoError(t, r.Verify(context.Background(), nil), "flip at %d", at)
		require.NoError(t, r.Close())
		require.NoError(t, os.RemoveAll(eventstore.JournalDir(dataCopy)))
		require.NoError(t, os.Remove(dataCopy))
	}
	t.Logf("%d flips: %d refused, %d cut the final frame, the rest harmless", end+64, refused, cut)
	require.Positive(t, refused)
}

// Replayed records are served at once from the journal; a second crash
// before the applier wrote them replays the same segments again; once
// applied, nothing is pending.
func TestJournalReplayTwiceBeforeApplication(t *testing.T) {
	ctx := context.Background()
	src := tempPath(t)
	s := openAt(t, src, held)
	appendN(t, s, "a", 0, 5)
	want := allRecords(t, s)
	first := copyStore(t, src)

	r1, err := eventstore.Open(first, held)
	require.NoError(t, err)
	require.False(t, r1.Replay().Applied, "loaded for reads, applied in the background")
	require.Equal(t, 5, r1.JournalStats().Pending)
	require.Equal(t, want, allRecords(t, r1))
	appendN(t, r1, "a", 5, 2)
	want = allRecords(t, r1)
	second := copyStore(t, first) // crashed again, nothing applied yet

	r2, err := eventstore.Open(second, fast)
	require.NoError(t, err)
	defer r2.Close()
	require.Equal(t, 7, r2.Replay().Records)
	require.Equal(t, want, allRecords(t, r2))
	require.NoError(t, r2.Flush(ctx))
	require.Zero(t, r2.JournalStats().Pending)
	require.Equal(t, want, allRecords(t, r2))
	require.NoError(t, r2.Verify(ctx, nil))
	require.NoError(t, r1.Close())
}

// When every segment holds records bbolt lacks there is no room to write
// in: Open applies them to bbolt itself before serving.
func TestJournalReplayAppliesWhenJournalFull(t *testing.T) {
	src := tempPath(t)
	opts := *tiny
	opts.ApplyInterval, opts.ApplyBytes = time.Hour, 1<<30
	s := openAt(t, src, &opts)
	payload := bytes.Repeat([]byte("q"), 3000)
	for i := 0; i < 25; i++ { // about one and a half 64 KiB segments
		_, err := s.Append(context.Background(), "a", eventstore.Any, []eventstore.Event{{Type: "t", Data: payload}})
		require.NoError(t, err)
	}
	want := allRecords(t, s)
	dst := copyStore(t, src)
	r, err := eventstore.Open(dst, &opts)
	require.NoError(t, err)
	defer r.Close()
	require.True(t, r.Replay().Applied)
	require.Zero(t, r.JournalStats().Pending)
	require.Equal(t, want, allRecords(t, r))
}

// Many writers at exact expected versions while the applier commits
// after every batch: a stream's head is never read from a bbolt
// transaction older than the commit that took its records out of the
// overlay (that once failed appends with false conflicts).
func TestJournalExactVersionsWithEagerApplier(t *testing.T) {
	s := openAt(t, tempPath(t), &eventstore.Options{NoSync: true, ApplyInterval: time.Microsecond, ApplyBytes: 1})
	eventstore.NoHeadCache(s) // else hot heads never reach the lookup under test
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := 0; w < 16; w++ {
		wg.Go(func() {
			stream := fmt.Sprintf("w%d", w)
			for v := int64(0); v < 1500; v++ {
				if _, err := s.Append(context.Background(), stream, v, []eventstore.Event{{Type: "t", Data: []byte("x")}}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	require.Len(t, allRecords(t, s), 16*1500)
}

// A crash while a segment file was being created leaves it empty or
// short: it holds nothing, and Open prepares it again.
func TestJournalSegmentCutShortByACrash(t *testing.T) {
	for _, size := range []int{0, 100, 4096, 4096 + 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			src := tempPath(t)
			s := openAt(t, src, held)
			appendN(t, s, "a", 0, 3)
			want := allRecords(t, s)
			dst := copyStore(t, src)
			require.NoError(t, os.WriteFile(filepath.Join(eventstore.JournalDir(dst), "00000007.seg"), make([]byte, size), 0o600))
			r, err := eventstore.Open(dst, fast)
			require.NoError(t, err)
			defer r.Close()
			require.Equal(t, want, allRecords(t, r))
			appendN(t, r, "a", 3, 1)
		})
	}
}
