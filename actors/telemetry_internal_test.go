package actors

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/stateindex/stateindex/messages"
)

type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }

// BenchmarkObserveRequest is what observing one request costs by itself
// (its admission and its reply, no actor, no store), beside the per-request
// times BenchmarkTelemetryOverhead measures:
//
//	go test -run '^$' -bench BenchmarkObserveRequest ./actors/
func BenchmarkObserveRequest(b *testing.B) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, mode := range []string{"off", "metrics", "tracing"} {
		b.Run(mode, func(b *testing.B) {
			cfg := Config{Logger: quiet}
			if mode == "metrics" {
				exp, err := otelprom.New(otelprom.WithRegisterer(prometheus.NewRegistry()))
				if err != nil {
					b.Fatal(err)
				}
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
				defer mp.Shutdown(context.Background())
				cfg.MeterProvider = mp
			}
			if mode == "tracing" {
				tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(discardSpans{}))
				defer tp.Shutdown(context.Background())
				cfg.TracerProvider = tp
			}
			o := newObserver(cfg)
			req := &messages.PushFrame{Header: messages.Header{Scope: "agent-1", RequestID: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"}, Goal: "g"}
			reply := &messages.PushFrameReply{Result: messages.Result{Version: 7}, FrameID: "f1"}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				o.begin(ctx, req).end(req, reply)
			}
		})
	}
}
