package eventstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stateindex/stateindex/eventstore"
)

// BenchmarkPostgresAppend is BenchmarkAppend on PostgreSQL: durable
// appends (synchronous_commit=on, the server's fsync on), one 1 KiB event
// per Append, each writer on its own stream; b.N appends shared among the
// writers. Needs STATEINDEX_PG_URL.
func BenchmarkPostgresAppend(b *testing.B) {
	for _, writers := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			_, u := pgSchema(b)
			benchPGAppend(b, []*eventstore.PostgresStore{openPG(b, u, nil)}, writers)
		})
	}
}

// BenchmarkPostgresAppendMembers: three stores (three servers' worth) on
// one database, 64 writers spread over them. Their commits serialise on
// the counter row.
func BenchmarkPostgresAppendMembers(b *testing.B) {
	_, u := pgSchema(b)
	stores := []*eventstore.PostgresStore{openPG(b, u, nil), openPG(b, u, nil), openPG(b, u, nil)}
	benchPGAppend(b, stores, 64)
}

func benchPGAppend(b *testing.B, stores []*eventstore.PostgresStore, writers int) {
	data := payload(1024)
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	for w := range writers {
		s := stores[w%len(stores)]
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
