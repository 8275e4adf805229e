package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/internal/config"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}

func TestServeMetricsAndHealth(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "si.yaml")
	require.NoError(t, os.WriteFile(conf, []byte("metrics:\n  actor_system: on\n"), 0o600)) // off by default: it costs
	logs := &lineWriter{lines: make(chan string, 100)}
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"serve", "--config", conf, "--data", filepath.Join(dir, "data"), "--metrics", "127.0.0.1:0"}, io.Discard, logs)
	}()
	addr := regexp.MustCompile(`metrics=http://(127\.0\.0\.1:\d+)/metrics`)
	var base string
	for base == "" {
		select {
		case l := <-logs.lines:
			if m := addr.FindStringSubmatch(l); m != nil {
				base = "http://" + m[1]
			}
		case code := <-done:
			t.Fatalf("serve exited early with %d", code)
		}
	}
	// /healthz answers 503 until the server is up, then 200.
	deadline := time.Now().Add(30 * time.Second)
	var code int
	var body string
	for code != http.StatusOK && time.Now().Before(deadline) {
		code, body = get(t, base+"/healthz")
		if code != http.StatusOK {
			require.Equal(t, http.StatusServiceUnavailable, code)
			require.JSONEq(t, `{"status":"starting"}`, body)
		}
	}
	require.Equal(t, http.StatusOK, code)
	assert.JSONEq(t, `{"status":"serving"}`, body)

	code, body = get(t, base+"/metrics")
	require.Equal(t, http.StatusOK, code)
	for _, want := range []string{
		"stateindex_cache_scopes",          // the StateIndex's gauges
		"stateindex_store_journal_pending", // the store's
		"protoactor_",                      // Proto.Actor's own, through the same provider
		"go_goroutines",                    // the Go runtime's
		`service_name="stateindex"`,        // the resource (target_info)
	} {
		assert.Contains(t, body, want)
	}

	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGINT))
	assert.Equal(t, 0, <-done)
	_, err := http.Get(base + "/healthz")
	assert.Error(t, err, "the endpoint is closed once serve returns")
}

func TestHealthSaysStartingServingStopping(t *testing.T) {
	tel := &telemetry{}
	ask := func() (int, string) {
		w := httptest.NewRecorder()
		tel.health(w, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		var body map[string]string
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
		assert.Equal(t, "application/json", w.Header().Get("Content-Type"))
		return w.Code, body["status"]
	}
	code, st := ask()
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "starting", st)
	tel.serving()
	code, st = ask()
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "serving", st)
	tel.stopping()
	code, st = ask()
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "stopping", st)
}

func TestServeMetricsAddressIsChecked(t *testing.T) {
	for _, tc := range []struct{ args []string }{
		{[]string{"--metrics", "localhost"}},
		{[]string{"--metrics", "127.0.0.1:99999"}},
		{[]string{"--trace-otlp", "localhost:4318"}},
		{[]string{"--trace-otlp", "ftp://collector:4318"}},
	} {
		var errb strings.Builder
		code := run(append([]string{"serve", "--data", t.TempDir()}, tc.args...), io.Discard, &errb)
		assert.Equal(t, 1, code, "%v", tc.args)
		assert.Contains(t, errb.String(), "--"+strings.TrimPrefix(tc.args[0], "--")+" must be", "%v: %s", tc.args, errb.String())
	}
	// A port another holds fails before anything starts.
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	var errb strings.Builder
	code := run([]string{"serve", "--data", t.TempDir(), "--metrics", l.Addr().String()}, io.Discard, &errb)
	assert.Equal(t, 1, code)
	assert.Contains(t, errb.String(), "metrics: cannot listen on "+l.Addr().String())
}

// collector is a fake OTLP/HTTP collector: it counts the trace exports it
// receives.
func collector(t *testing.T) (*httptest.Server, *atomic.Int32) {
	var got atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" && r.Header.Get("Content-Type") == "application/x-protobuf" {
			if b, _ := io.ReadAll(r.Body); len(b) > 0 {
				got.Add(1)
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return srv, &got
}

func TestTracesExportOverOTLP(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	export := func(t *testing.T, file *config.File) {
		t.Helper()
		tel, err := startTelemetry(file, quiet)
		require.NoError(t, err)
		require.NotNil(t, tel.tracer)
		_, span := tel.tracer.Tracer("test").Start(context.Background(), "StateIndex/PushFrame")
		span.End()
		tel.close(context.Background()) // flushes the batch
	}
	t.Run("flag", func(t *testing.T) {
		srv, got := collector(t)
		file := config.Default()
		file.Tracing.OTLP = srv.URL
		export(t, file)
		assert.Equal(t, int32(1), got.Load(), "the span reached the collector")
	})
	t.Run("environment", func(t *testing.T) {
		srv, got := collector(t)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
		export(t, config.Default())
		assert.Equal(t, int32(1), got.Load())
	})
	t.Run("off", func(t *testing.T) {
		tel, err := startTelemetry(config.Default(), quiet)
		require.NoError(t, err)
		assert.Nil(t, tel.tracer, "no endpoint, no tracing")
		assert.Nil(t, tel.meter, "no --metrics, no metrics")
		tel.close(context.Background())
	})
}

func TestProtoActorMetricsCanBeLeftOut(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	file := config.Default()
	file.Metrics.Listen = "127.0.0.1:0"
	tel, err := startTelemetry(file, quiet)
	require.NoError(t, err)
	assert.Empty(t, tel.actorOptions(), "off by default: Proto.Actor's metrics cost 25–45% (docs/BENCHMARKS.md)")
	tel.close(context.Background())

	file.Metrics.ActorSystem = true
	tel, err = startTelemetry(file, quiet)
	require.NoError(t, err)
	assert.Len(t, tel.actorOptions(), 1, "metrics.actor_system: on: Proto.Actor's metrics through the same provider")
	assert.NotNil(t, tel.meter, "the StateIndex's own metrics stay on")
	tel.close(context.Background())
}
