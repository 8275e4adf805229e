package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/internal/config"
)

// telemetry is what serve's metrics.listen (--metrics) and tracing.otlp
// (--trace-otlp, or the OTEL_EXPORTER_OTLP_ENDPOINT environment) start: an
// OpenTelemetry meter provider read by a Prometheus exporter and served
// over HTTP with a health check, and a tracer provider exporting over
// OTLP/HTTP. Both are off unless configured.
type telemetry struct {
	meter  *sdkmetric.MeterProvider // nil: no metrics
	actor  bool                     // Proto.Actor's metrics too
	tracer *sdktrace.TracerProvider // nil: no traces
	http   *http.Server
	addr   string       // where /metrics is served ("" when not)
	state  atomic.Int32 // healthStarting, healthServing or healthStopping
	served chan struct{}
}

// Health states /healthz reports.
const (
	healthStarting = iota
	healthServing
	healthStopping
)

var healthNames = [...]string{"starting", "serving", "stopping"}

// otlpEnv are the variables with which the OTLP exporter finds its
// endpoint on its own.
var otlpEnv = []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"}

// startTelemetry starts what file configures; its HTTP endpoint listens at
// once (so a taken port fails before anything else starts) and answers
// /healthz with 503 until serving is called.
func startTelemetry(file *config.File, log *slog.Logger) (*telemetry, error) {
	t := &telemetry{}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", "stateindex")))
	if err != nil {
		res = resource.Default()
	}
	if file.Metrics.Listen != "" {
		reg := promclient.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		exp, err := otelprom.New(otelprom.WithRegisterer(reg))
		if err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
		ln, err := net.Listen("tcp", file.Metrics.Listen)
		if err != nil {
			return nil, fmt.Errorf("metrics: cannot listen on %s: %w", file.Metrics.Listen, err)
		}
		t.meter = sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res))
		if t.actor = file.Metrics.ActorSystem; t.actor {
			// Proto.Actor records its own metrics on the global provider.
			otel.SetMeterProvider(t.meter)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slogPrinter{log}}))
		mux.HandleFunc("/healthz", t.health)
		t.addr = ln.Addr().String()
		t.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		t.served = make(chan struct{})
		go func() {
			defer close(t.served)
			if err := t.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("stateindex metrics: the HTTP endpoint stopped", "error", err)
			}
		}()
	}
	endpoint := file.Tracing.OTLP
	fromEnv := ""
	if endpoint == "" {
		for _, k := range otlpEnv {
			if os.Getenv(k) != "" {
				fromEnv = k
				break
			}
		}
	}
	if endpoint != "" || fromEnv != "" {
		opts, err := otlpOptions(endpoint)
		if err != nil {
			t.close(context.Background())
			return nil, err
		}
		exp, err := otlptracehttp.New(context.Background(), opts...)
		if err != nil {
			t.close(context.Background())
			return nil, fmt.Errorf("tracing: %w", err)
		}
		t.tracer = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res),
			sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(file.Tracing.SampleRatio))))
		if endpoint == "" {
			endpoint = os.Getenv(fromEnv) + " (" + fromEnv + ")"
		}
		log.Info("stateindex tracing", "otlp", endpoint, "sample_ratio", file.Tracing.SampleRatio)
	}
	if t.addr != "" {
		log.Info("stateindex metrics", "metrics", "http://"+t.addr+"/metrics", "health", "http://"+t.addr+"/healthz")
	}
	return t, nil
}

// otlpOptions turns tracing.otlp into the exporter's options (none: the
// exporter reads the OTEL_EXPORTER_OTLP_* environment).
func otlpOptions(endpoint string) ([]otlptracehttp.Option, error) {
	if endpoint == "" {
		return nil, nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("tracing.otlp %q: want an http:// or https:// URL", endpoint)
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(u.Host)}
	if u.Scheme == "http" {
		opts = append(opts, otlptracehttp.WithInsecure())
	}
	if u.Path != "" && u.Path != "/" {
		opts = append(opts, otlptracehttp.WithURLPath(u.Path))
	}
	return opts, nil
}

// configure hands the providers to the StateIndex and its store.
func (t *telemetry) configure(cfg *actors.Config, opts *eventstore.Options) {
	if t.meter != nil {
		cfg.MeterProvider = t.meter
		opts.MeterProvider = t.meter
	}
	if t.tracer != nil {
		cfg.TracerProvider = t.tracer
	}
}

// actorOptions are the actor system's options for Proto.Actor's own
// metrics (through the same provider; metrics.actor_system).
func (t *telemetry) actorOptions() []actor.ConfigOption {
	if t.meter == nil || !t.actor {
		return nil
	}
	return []actor.ConfigOption{actor.WithMetricProviders(t.meter)}
}

// serving and stopping set what /healthz reports.
func (t *telemetry) serving()  { t.state.Store(healthServing) }
func (t *telemetry) stopping() { t.state.Store(healthStopping) }

// health answers /healthz: 200 while serving, 503 while starting or
// stopping, with a small JSON body saying which.
func (t *telemetry) health(w http.ResponseWriter, _ *http.Request) {
	st := t.state.Load()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if st != healthServing {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(map[string]string{"status": healthNames[st]})
}

// close flushes the spans still buffered and stops the endpoint.
func (t *telemetry) close(ctx context.Context) {
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if t.tracer != nil {
		_ = t.tracer.Shutdown(ctx)
	}
	if t.http != nil {
		_ = t.http.Shutdown(ctx)
		<-t.served
	}
	if t.meter != nil {
		_ = t.meter.Shutdown(ctx)
	}
}

// slogPrinter passes promhttp's errors to the server's log.
type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.log.Warn("stateindex metrics: " + fmt.Sprint(v...)) }
