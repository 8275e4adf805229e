package eventstore

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Metrics of the bolt store (Options.MeterProvider), recorded by its
// committer and applier goroutines, never by the codec or the pure core:
//
//	stateindex.store.commit.duration   histogram  s, one group commit: checks, the journal frame's write and fdatasync
//	                                              (stateindex.store.path=journal), or the bbolt transaction with its
//	                                              fsyncs (bbolt); by stateindex.outcome
//	stateindex.store.commit.requests   histogram  appends and snapshots one group commit took (the batch size)
//	stateindex.store.commit.records    histogram  records one group commit made durable
//	stateindex.store.journal.sync.duration histogram s, the write and fdatasync of one journal frame
//	stateindex.store.apply.duration    histogram  s, one bbolt transaction of the background applier (journal on)
//	stateindex.store.apply.records     histogram  records it wrote to bbolt
//	stateindex.store.journal.pending   gauge      journaled records bbolt does not hold yet
//	stateindex.store.journal.pending.bytes gauge  their bytes
//
// A store opened without a MeterProvider has no storeMetrics (nil), and
// every hook returns at once.
type storeMetrics struct {
	commitDuration, syncDuration, applyDuration metric.Float64Histogram
	commitRequests, commitRecords, applyRecords metric.Int64Histogram
	journal, bbolt, ok, fail                    metric.MeasurementOption
	reg                                         metric.Registration
}

var (
	storeSeconds = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	storeCounts  = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384, 65536}
)

// newStoreMetrics creates the instruments of s (nil without a provider).
func newStoreMetrics(mp metric.MeterProvider, s *BoltStore, log *slog.Logger) *storeMetrics {
	if mp == nil {
		return nil
	}
	m := mp.Meter("github.com/stateindex/stateindex/eventstore")
	var errs []error
	seconds := func(name, desc string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(storeSeconds...))
		errs = append(errs, err)
		return h
	}
	counts := func(name, unit, desc string) metric.Int64Histogram {
		h, err := m.Int64Histogram(name, metric.WithUnit(unit), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(storeCounts...))
		errs = append(errs, err)
		return h
	}
	sm := &storeMetrics{
		commitDuration: seconds("stateindex.store.commit.duration", "One group commit: the journal frame's write and fdatasync, or the bbolt transaction with its fsyncs"),
		commitRequests: counts("stateindex.store.commit.requests", "{request}", "Appends and snapshots one group commit took"),
		commitRecords:  counts("stateindex.store.commit.records", "{record}", "Records one group commit made durable"),
		syncDuration:   seconds("stateindex.store.journal.sync.duration", "The write and fdatasync of one journal frame"),
		applyDuration:  seconds("stateindex.store.apply.duration", "One bbolt transaction of the journal's background applier"),
		applyRecords:   counts("stateindex.store.apply.records", "{record}", "Records the applier wrote to bbolt in one transaction"),
		journal:        metric.WithAttributeSet(attribute.NewSet(attribute.String("stateindex.store.path", "journal"), attribute.String("stateindex.outcome", "ok"))),
		bbolt:          metric.WithAttributeSet(attribute.NewSet(attribute.String("stateindex.store.path", "bbolt"), attribute.String("stateindex.outcome", "ok"))),
		ok:             metric.WithAttributeSet(attribute.NewSet(attribute.String("stateindex.outcome", "ok"))),
		fail:           metric.WithAttributeSet(attribute.NewSet(attribute.String("stateindex.outcome", "error"))),
	}
	if s.j != nil {
		pending, err1 := m.Int64ObservableGauge("stateindex.store.journal.pending", metric.WithUnit("{record}"),
			metric.WithDescription("Journaled records bbolt does not hold yet"))
		pbytes, err2 := m.Int64ObservableGauge("stateindex.store.journal.pending.bytes", metric.WithUnit("By"),
			metric.WithDescription("Bytes of the journaled records bbolt does not hold yet"))
		errs = append(errs, err1, err2)
		if err1 == nil && err2 == nil {
			reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
				n, b, _ := s.over.pending()
				o.ObserveInt64(pending, int64(n))
				o.ObserveInt64(pbytes, b)
				return nil
			}, pending, pbytes)
			errs = append(errs, err)
			sm.reg = reg
		}
	}
	for _, err := range errs {
		if err != nil {
			log.Warn("eventstore: a metric instrument could not be created; it records nothing", "error", err)
		}
	}
	return sm
}

// close unregisters the gauges.
func (sm *storeMetrics) close() {
	if sm != nil && sm.reg != nil {
		_ = sm.reg.Unregister()
	}
}

// committed records one group commit of requests that made records
// durable (err: it failed).
func (sm *storeMetrics) committed(journal bool, requests, records int, took time.Duration, err error) {
	if sm == nil {
		return
	}
	ctx := context.Background()
	s := sm.bbolt
	if journal {
		s = sm.journal
	}
	if err != nil {
		path := "bbolt"
		if journal {
			path = "journal"
		}
		s = metric.WithAttributes(attribute.String("stateindex.store.path", path), attribute.String("stateindex.outcome", "error"))
	}
	sm.commitDuration.Record(ctx, took.Seconds(), s)
	sm.commitRequests.Record(ctx, int64(requests))
	sm.commitRecords.Record(ctx, int64(records))
}

// synced records the write and fdatasync of one journal frame.
func (sm *storeMetrics) synced(took time.Duration, err error) {
	if sm == nil {
		return
	}
	s := sm.ok
	if err != nil {
		s = sm.fail
	}
	sm.syncDuration.Record(context.Background(), took.Seconds(), s)
}

// applied records one transaction of the applier.
func (sm *storeMetrics) applied(records int, took time.Duration, err error) {
	if sm == nil {
		return
	}
	ctx := context.Background()
	s := sm.ok
	if err != nil {
		s = sm.fail
	}
	sm.applyDuration.Record(ctx, took.Seconds(), s)
	sm.applyRecords.Record(ctx, int64(records), s)
}

// appendedRecords counts the records the appends of a committed batch wrote.
func appendedRecords(batch []*request) int {
	n := 0
	for _, r := range batch {
		if r.wrote && r.kind == reqAppend {
			n += len(r.ends)
		}
	}
	return n
}
