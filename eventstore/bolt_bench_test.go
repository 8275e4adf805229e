package eventstore_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/stateindex/stateindex/eventstore"
)

func payload(n int) []byte {
	p := make([]byte, n)
	_, _ = rand.Read(p)
	return p
}

// BenchmarkAppend measures durable appends (fsync on), one 1 KiB event per
// Append, each writer on its own stream. b.N appends are shared among the
// writers; group commit should make events/s grow with writers.
func BenchmarkAppend(b *testing.B) {
	for _, writers := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			benchAppend(b, writers, nil)
		})
	}
}

// BenchmarkAppendJournalOff is BenchmarkAppend on the path without the
// journal (a bbolt commit, two fsyncs, per group commit).
func BenchmarkAppendJournalOff(b *testing.B) {
	for _, writers := range []int{1, 64} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			benchAppend(b, writers, &eventstore.Options{JournalOff: true})
		})
	}
}

// BenchmarkAppendNoSync is the CPU ceiling of the same workload.
func BenchmarkAppendNoSync(b *testing.B) {
	for _, writers := range []int{1, 64} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			benchAppend(b, writers, &eventstore.Options{NoSync: true})
		})
	}
}

func benchAppend(b *testing.B, writers int, opts *eventstore.Options) {
	s, err := eventstore.Open(filepath.Join(b.TempDir(), "bench.db"), opts)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	data := payload(1024)
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	for w := range writers {
		wg.Go(func() {
			stream := fmt.Sprintf("bench-%03d", w)
			events := []eventstore.Event{{Type: "bench.appended", Data: data}}
			var version int64
			for next.Add(1) <= int64(b.N) {
				res, err := s.Append(ctx, stream, version, events)
				if err != nil {
					b.Error(err)
					return
				}
				version = res.LastVersion
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkAppendRawBolt is the baseline: one bbolt transaction (and its
// fsyncs) per 1 KiB event, no envelope, no chain.
func BenchmarkAppendRawBolt(b *testing.B) {
	db, err := bolt.Open(filepath.Join(b.TempDir(), "raw.db"), 0o600, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	data := payload(1024)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		err := db.Update(func(tx *bolt.Tx) error {
			bk, err := tx.CreateBucketIfNotExists([]byte("events"))
			if err != nil {
				return err
			}
			bk.FillPercent = 1.0
			return bk.Put(binary.BigEndian.AppendUint64(nil, uint64(i+1)), data)
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkReplay measures reading a whole stream of 1 KiB events (warm
// page cache), every record checked against the hash chain.
func BenchmarkReplay(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		path := filepath.Join(b.TempDir(), "replay.db")
		buildStream(b, path, "replay", n)
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			s, err := eventstore.Open(path, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				got := 0
				if err := s.ReadStream(ctx, "replay", 1, func(eventstore.Record) error { got++; return nil }); err != nil {
					b.Fatal(err)
				}
				if got != n {
					b.Fatalf("read %d events, want %d", got, n)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

func buildStream(b *testing.B, path, stream string, n int) {
	s, err := eventstore.Open(path, &eventstore.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	data := payload(1024)
	batch := make([]eventstore.Event, 1000)
	for i := range batch {
		batch[i] = eventstore.Event{Type: "bench.appended", Data: data}
	}
	for v := 0; v < n; v += len(batch) {
		k := min(len(batch), n-v)
		if _, err := s.Append(context.Background(), stream, int64(v), batch[:k]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkJournalReplay measures Open of a store whose journal holds n
// acknowledged 1 KiB events bbolt does not have yet (what a crash leaves):
// every frame checked and every record applied to bbolt, durably, before
// Open returns. Compare its events/s with BenchmarkReplay's.
func BenchmarkJournalReplay(b *testing.B) {
	const n = 20000
	dir := b.TempDir()
	src := filepath.Join(dir, "src.db")
	held := &eventstore.Options{NoSync: true, ApplyInterval: time.Hour, ApplyBytes: 1 << 30}
	s, err := eventstore.Open(src, held)
	if err != nil {
		b.Fatal(err)
	}
	data := payload(1024)
	ctx := context.Background()
	for i := range n {
		if _, err := s.Append(ctx, fmt.Sprintf("s%02d", i%64), eventstore.Any, []eventstore.Event{{Type: "bench", Data: data}}); err != nil {
			b.Fatal(err)
		}
	}
	if st := s.JournalStats(); st.Pending != n {
		b.Fatalf("%d records pending in the journal, want %d", st.Pending, n)
	}
	snapshot := filepath.Join(dir, "crashed")
	copyTree(b, src, snapshot)
	_ = s.Close()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		dst := filepath.Join(dir, fmt.Sprintf("run%d", i))
		copyTree(b, snapshot, dst)
		b.StartTimer()
		r, err := eventstore.Open(dst, nil)
		if err != nil {
			b.Fatal(err)
		}
		if got := r.Replay().Records; got != n {
			b.Fatalf("replayed %d records, want %d", got, n)
		}
		b.StopTimer()
		_ = r.Close()
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// copyTree copies a data file and its journal directory.
func copyTree(b *testing.B, src, dst string) {
	cp := func(from, to string) {
		data, err := os.ReadFile(from)
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(to, data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	cp(src, dst)
	if err := os.MkdirAll(eventstore.JournalDir(dst), 0o700); err != nil {
		b.Fatal(err)
	}
	entries, err := os.ReadDir(eventstore.JournalDir(src))
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range entries {
		cp(filepath.Join(eventstore.JournalDir(src), e.Name()), filepath.Join(eventstore.JournalDir(dst), e.Name()))
	}
}
