package eventstore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/stateindex/stateindex/eventstore"
)

// collected is one collection of a manual reader, by instrument name.
type collected map[string]metricdata.Aggregation

func collect(t *testing.T, r *sdkmetric.ManualReader) collected {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	out := collected{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// hist sums the count and sum of an integer or float histogram's points
// that carry attribute kv (all points when kv is empty).
func (c collected) hist(name string, kv ...attribute.KeyValue) (count uint64, sum float64) {
	has := func(s attribute.Set) bool {
		for _, want := range kv {
			if v, ok := s.Value(want.Key); !ok || v != want.Value {
				return false
			}
		}
		return true
	}
	switch d := c[name].(type) {
	case metricdata.Histogram[int64]:
		for _, p := range d.DataPoints {
			if has(p.Attributes) {
				count += p.Count
				sum += float64(p.Sum)
			}
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			if has(p.Attributes) {
				count += p.Count
				sum += p.Sum
			}
		}
	}
	return count, sum
}

func TestStoreMetricsOfCommitsAndTheJournal(t *testing.T) {
	for _, journal := range []bool{true, false} {
		t.Run(fmt.Sprintf("journal=%t", journal), func(t *testing.T) {
			ctx := context.Background()
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			defer mp.Shutdown(ctx)
			s, err := eventstore.Open(filepath.Join(t.TempDir(), "m.db"), &eventstore.Options{NoSync: true, JournalOff: !journal, MeterProvider: mp})
			require.NoError(t, err)
			defer s.Close()

			// 8 writers of 5 appends of 2 records: 80 records in some number
			// of group commits.
			var wg sync.WaitGroup
			for w := 0; w < 8; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					for i := 0; i < 5; i++ {
						_, err := s.Append(ctx, fmt.Sprintf("s%d", w), int64(2*i), []eventstore.Event{{Type: "t", Data: []byte("a")}, {Type: "t", Data: []byte("b")}})
						assert.NoError(t, err)
					}
				}(w)
			}
			wg.Wait()
			_, err = s.Append(ctx, "s0", 0, []eventstore.Event{{Type: "t", Data: []byte("c")}})
			require.Error(t, err, "a conflict writes nothing")

			c := collect(t, reader)
			path := "bbolt"
			if journal {
				path = "journal"
			}
			commits, records := c.hist("stateindex.store.commit.records")
			assert.Equal(t, 80.0, records, "every record in exactly one commit")
			assert.GreaterOrEqual(t, commits, uint64(1))
			assert.LessOrEqual(t, commits, uint64(41), "at most one commit per append (and the refused one)")
			n, reqs := c.hist("stateindex.store.commit.requests")
			assert.Equal(t, commits, n)
			assert.GreaterOrEqual(t, reqs, 40.0, "the batch sizes add up to the appends")
			n, _ = c.hist("stateindex.store.commit.duration", attribute.String("stateindex.store.path", path), attribute.String("stateindex.outcome", "ok"))
			assert.Equal(t, commits, n, "a duration per commit, by path")

			n, _ = c.hist("stateindex.store.journal.sync.duration")
			if !journal {
				assert.Zero(t, n, "no journal, no journal sync")
				return
			}
			assert.Equal(t, commits, n, "one journal write and fdatasync per group commit")
			require.NoError(t, s.Flush(ctx))
			c = collect(t, reader)
			_, applied := c.hist("stateindex.store.apply.records")
			assert.Equal(t, 80.0, applied, "the applier wrote every record to bbolt")
			g, ok := c["stateindex.store.journal.pending"].(metricdata.Gauge[int64])
			require.True(t, ok, "the journal's pending gauge")
			require.Len(t, g.DataPoints, 1)
			assert.Zero(t, g.DataPoints[0].Value, "nothing pending once flushed")
		})
	}
}
