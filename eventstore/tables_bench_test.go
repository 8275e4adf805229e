package eventstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/eventstore"
)

// BenchmarkTableWrite: one TableWrite of 100 ops (keys of 16 bytes, values
// of 64), durable (fsync) and not, through each mode.
func BenchmarkTableWrite(b *testing.B) {
	for _, sync := range []bool{true, false} {
		for _, journalOff := range []bool{false, true} {
			b.Run(fmt.Sprintf("sync=%v/journalOff=%v", sync, journalOff), func(b *testing.B) {
				s := openAt(b, tempPath(b), &eventstore.Options{NoSync: !sync, JournalOff: journalOff})
				ctx := context.Background()
				ops := make([]eventstore.TableOp, 100)
				val := make([]byte, 64)
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					for j := range ops {
						ops[j] = eventstore.TableOp{Key: fmt.Appendf(ops[j].Key[:0], "w%08d/%05d", i, j), Value: val}
					}
					if err := s.TableWrite(ctx, "bench", ops); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*len(ops))/b.Elapsed().Seconds(), "ops/s")
			})
		}
	}
}

// BenchmarkTableScan: a prefix scan of 100 keys out of 1,000,000 (10,000
// prefixes of 100 keys each), forward and reverse.
func BenchmarkTableScan(b *testing.B) {
	const prefixes, per = 10_000, 100
	s := openAt(b, tempPath(b), &eventstore.Options{NoSync: true, JournalOff: true})
	ctx := context.Background()
	val := make([]byte, 32)
	ops := make([]eventstore.TableOp, 0, 10_000)
	for p := range prefixes {
		for k := range per {
			ops = append(ops, eventstore.TableOp{Key: fmt.Appendf(nil, "%06d/%03d", p, k), Value: val})
		}
		if len(ops) == cap(ops) {
			require.NoError(b, s.TableWrite(ctx, "bench", ops))
			ops = ops[:0]
		}
	}
	for _, reverse := range []bool{false, true} {
		b.Run(fmt.Sprintf("reverse=%v", reverse), func(b *testing.B) {
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				prefix := fmt.Appendf(nil, "%06d/", (i*7919)%prefixes)
				n := 0
				err := s.TableScan(ctx, "bench", prefix, nil, reverse, func(k, v []byte) (bool, error) {
					n++
					return true, nil
				})
				if err != nil || n != per {
					b.Fatalf("scan of %q: %d keys, %v", prefix, n, err)
				}
			}
		})
	}
}
