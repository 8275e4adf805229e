package actors_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/messages"
)

// promEndpoint is a meter provider read by the Prometheus exporter and
// served over HTTP, as `stateindex serve --metrics` serves it.
type promEndpoint struct {
	mp  *sdkmetric.MeterProvider
	url string
}

func newPromEndpoint(t *testing.T) *promEndpoint {
	t.Helper()
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	require.NoError(t, err)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(func() {
		srv.Close()
		_ = mp.Shutdown(context.Background())
	})
	return &promEndpoint{mp: mp, url: srv.URL + "/metrics"}
}

// scrape is one scrape of /metrics, by family name.
type scrape map[string]*dto.MetricFamily

func (p *promEndpoint) scrape(t *testing.T) scrape {
	t.Helper()
	res, err := http.Get(p.url)
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	var parser expfmt.TextParser
	fams, err := parser.TextToMetricFamilies(res.Body)
	require.NoError(t, err)
	return fams
}

// matching returns the metrics of a family whose labels include labels
// (name, value pairs).
func (s scrape) matching(name string, labels ...string) []*dto.Metric {
	f := s[name]
	if f == nil {
		return nil
	}
	var out []*dto.Metric
	for _, m := range f.Metric {
		ok := true
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range m.Label {
				if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
					found = true
				}
			}
			ok = ok && found
		}
		if ok {
			out = append(out, m)
		}
	}
	return out
}

// value sums the counters or gauges of a family that match labels (0 when none).
func (s scrape) value(name string, labels ...string) float64 {
	var v float64
	for _, m := range s.matching(name, labels...) {
		switch {
		case m.Counter != nil:
			v += m.Counter.GetValue()
		case m.Gauge != nil:
			v += m.Gauge.GetValue()
		}
	}
	return v
}

// hist sums the count and sum of a family's histograms that match labels.
func (s scrape) hist(name string, labels ...string) (count uint64, sum float64) {
	for _, m := range s.matching(name, labels...) {
		if m.Histogram != nil {
			count += m.Histogram.GetSampleCount()
			sum += m.Histogram.GetSampleSum()
		}
	}
	return count, sum
}

func TestMetricsMoveWithRequests(t *testing.T) {
	prom := newPromEndpoint(t)
	store, err := eventstore.Open(filepath.Join(t.TempDir(), "stateindex.db"), &eventstore.Options{NoSync: true, MeterProvider: prom.mp})
	require.NoError(t, err)
	defer store.Close()
	cfg := testConfig(newFakeClock())
	cfg.MeterProvider = prom.mp
	cfg.Shards, cfg.CacheScopes = 1, 1 // a second scope evicts the first
	sys := quietSystem()
	defer sys.Shutdown()
	srv, err := actors.Start(sys, store, cfg)
	require.NoError(t, err)
	defer srv.Stop()
	c := srv.Client()

	before := prom.scrape(t)
	assert.Zero(t, before.value("stateindex_requests_total"))
	assert.Contains(t, before, "stateindex_cache_scopes", "the gauges are there before any request")

	root, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut("tel-1"), Goal: "plan", Budget: budget.TokenBudget{Total: 8000}})
	require.NoError(t, err)
	s := prom.scrape(t)
	assert.Equal(t, 1.0, s.value("stateindex_requests_total", "stateindex_operation", "PushFrame", "stateindex_outcome", "ok"))
	n, _ := s.hist("stateindex_request_duration_seconds", "stateindex_operation", "PushFrame", "stateindex_outcome", "ok")
	assert.Equal(t, uint64(1), n, "one latency sample")
	assert.Equal(t, 1.0, s.value("stateindex_cache_lookups_total", "stateindex_cache_result", "miss"), "a cold scope is a miss")
	assert.Zero(t, s.value("stateindex_cache_lookups_total", "stateindex_cache_result", "hit"), "the request that loaded it is not a hit too")
	assert.Equal(t, 1.0, s.value("stateindex_scope_loads_total"))
	assert.Equal(t, 1.0, s.value("stateindex_cache_scopes"))

	_, err = c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut("tel-1"), FrameID: root.FrameID, Priority: compaction.High, Content: "the user wants Lisbon"})
	require.NoError(t, err)
	_, err = c.RecordUsage(ctx, &messages.RecordUsage{Header: mut("tel-1"), FrameID: root.FrameID, Cost: budget.Cost{InputTokens: 120, OutputTokens: 30}})
	require.NoError(t, err)
	pack, err := c.AssembleContextPack(ctx, &messages.AssembleContextPack{Header: messages.Header{Scope: "tel-1"}, FrameID: root.FrameID, BudgetTokens: 1000})
	require.NoError(t, err)
	_, err = c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: "tel-1"}, FrameID: "nope"})
	require.ErrorIs(t, err, actors.ErrFrameNotFound)

	s = prom.scrape(t)
	assert.Equal(t, 4.0, s.value("stateindex_cache_lookups_total", "stateindex_cache_result", "hit"), "then hits")
	assert.Equal(t, 1.0, s.value("stateindex_cache_lookups_total", "stateindex_cache_result", "miss"))
	assert.Equal(t, 1.0, s.value("stateindex_requests_total", "stateindex_operation", "GetFrame", "stateindex_outcome", "error", "error_type", "frame_not_found"))
	assert.Equal(t, 1.0, s.value("stateindex_requests_total", "stateindex_operation", "RecordUsage", "stateindex_outcome", "ok"))
	n, sum := s.hist("gen_ai_client_token_usage", "gen_ai_token_type", "input")
	assert.Equal(t, uint64(1), n)
	assert.Equal(t, 120.0, sum, "tokens used, as recorded")
	_, sum = s.hist("gen_ai_client_token_usage", "gen_ai_token_type", "output")
	assert.Equal(t, 30.0, sum)
	assert.Equal(t, 1.0, s.value("stateindex_pack_assembled_total", "stateindex_compaction_level", pack.TokenSummary.CompactionLevel.String()))
	_, sum = s.hist("stateindex_pack_tokens", "stateindex_compaction_level", pack.TokenSummary.CompactionLevel.String())
	assert.Equal(t, float64(pack.TokenSummary.Used), sum)
	require.Len(t, pack.Segments, 1)
	assert.Equal(t, float64(pack.Segments[0].Tokens), s.value("stateindex_pack_segment_tokens_total", "stateindex_pack_priority", "high"), "pack tokens by priority")
	assert.Zero(t, s.value("stateindex_pack_segment_tokens_total", "stateindex_pack_priority", "critical"))
	assert.Equal(t, 3.0, s.value("stateindex_events_appended_total"), "three writes of one event each")
	assert.Equal(t, 3.0, s.value("stateindex_appends_total", "stateindex_outcome", "ok"), "three appends")
	assert.Equal(t, 3.0, s.value("stateindex_append_writes_total"), "of one write each")
	n, _ = s.hist("stateindex_append_duration_seconds", "stateindex_outcome", "ok")
	assert.Equal(t, uint64(3), n)
	// The store's group commits (the journal's: one frame each).
	n, sum = s.hist("stateindex_store_commit_records")
	assert.GreaterOrEqual(t, n, uint64(1), "commit batches recorded")
	assert.GreaterOrEqual(t, sum, 3.0, "holding at least the three events")
	n, _ = s.hist("stateindex_store_commit_requests")
	assert.GreaterOrEqual(t, n, uint64(1))
	n, _ = s.hist("stateindex_store_commit_duration_seconds", "stateindex_store_path", "journal")
	assert.GreaterOrEqual(t, n, uint64(1))
	n, _ = s.hist("stateindex_store_journal_sync_duration_seconds")
	assert.GreaterOrEqual(t, n, uint64(1))
	assert.Contains(t, s, "stateindex_store_journal_pending", "the journal's gauge")

	// A second scope evicts the first from a one-scope cache; the first is
	// then a miss again, rebuilt from the store.
	_, err = c.PushFrame(ctx, &messages.PushFrame{Header: mut("tel-2"), Goal: "other", Budget: budget.TokenBudget{Total: 100}})
	require.NoError(t, err)
	_, err = c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: "tel-1"}, FrameID: root.FrameID})
	require.NoError(t, err)
	s = prom.scrape(t)
	assert.Equal(t, 2.0, s.value("stateindex_cache_evictions_total"))
	assert.Equal(t, 3.0, s.value("stateindex_cache_lookups_total", "stateindex_cache_result", "miss"))
	assert.Equal(t, 3.0, s.value("stateindex_scope_loads_total"))
	assert.Equal(t, 1.0, s.value("stateindex_cache_scopes"))
	n, _ = s.hist("stateindex_scope_load_duration_seconds")
	assert.Equal(t, uint64(3), n)
}

func TestMetricsOfToolCallsReservationsAndResume(t *testing.T) {
	prom := newPromEndpoint(t)
	store := eventstore.NewMemory()
	cfg := testConfig(newFakeClock())
	cfg.MeterProvider = prom.mp
	sys := quietSystem()
	defer sys.Shutdown()
	srv, err := actors.Start(sys, store, cfg)
	require.NoError(t, err)
	c := srv.Client()

	root, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut("tools-1"), Goal: "plan", Budget: budget.TokenBudget{Total: 8000},
		Limits: budget.Limits{SpendMicros: 1_000_000}})
	require.NoError(t, err)
	call, err := c.StartToolCall(ctx, &messages.StartToolCall{Header: mut("tools-1"), FrameID: root.FrameID, Name: "search", Input: []byte("q")})
	require.NoError(t, err)
	_, err = c.FinishToolCall(ctx, &messages.FinishToolCall{Header: mut("tools-1"), FrameID: root.FrameID, CallID: call.CallID, Output: "3 flights"})
	require.NoError(t, err)
	_, err = c.StartToolCall(ctx, &messages.StartToolCall{Header: mut("tools-1"), FrameID: root.FrameID, Name: "book", Input: []byte("x")})
	require.NoError(t, err)
	est := int64(1000)
	_, err = c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut("tools-1"), FrameID: root.FrameID, Estimate: &est})
	require.NoError(t, err)

	s := prom.scrape(t)
	assert.Equal(t, 2.0, s.value("stateindex_tool_calls_total", "stateindex_tool_call_event", "started"))
	assert.Equal(t, 1.0, s.value("stateindex_tool_calls_total", "stateindex_tool_call_event", "finished"))
	assert.Equal(t, 1.0, s.value("stateindex_ledger_reservations_total", "stateindex_ledger_event", "reserved"))
	assert.Equal(t, 1.0, s.value("stateindex_ledger_reservations_outstanding"))

	// After a restart, ResumeActor reports the unfinished call in doubt.
	srv.Stop()
	srv, err = actors.Start(sys, store, cfg)
	require.NoError(t, err)
	defer srv.Stop()
	c = srv.Client()
	st, err := c.ResumeActor(ctx, &messages.ResumeActor{Header: mut("tools-1")})
	require.NoError(t, err)
	require.NotEmpty(t, st.PendingWork)
	s = prom.scrape(t)
	assert.Equal(t, 1.0, s.value("stateindex_tool_calls_in_doubt_total"))
	assert.Equal(t, 1.0, s.value("stateindex_ledger_reservations_outstanding"), "counted again once the scope is loaded, not twice")
}

// lockedBuffer is a log destination safe for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestDebugLogHasALinePerRequest(t *testing.T) {
	var logs lockedBuffer
	cfg := testConfig(newFakeClock())
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	sys := quietSystem()
	defer sys.Shutdown()
	srv, err := actors.Start(sys, eventstore.NewMemory(), cfg)
	require.NoError(t, err)
	defer srv.Stop()
	c := srv.Client()

	f, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut("log-1"), Goal: "plan", Budget: budget.TokenBudget{Total: 100}})
	require.NoError(t, err)
	_, err = c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: "log-1"}, FrameID: "nope"})
	require.Error(t, err)

	var lines []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `msg="stateindex request"`) {
			lines = append(lines, l)
		}
	}
	require.Len(t, lines, 2, "one line per request:\n%s", logs.String())
	assert.Contains(t, lines[0], "level=DEBUG")
	assert.Contains(t, lines[0], "op=PushFrame scope=log-1 frame="+f.FrameID+" outcome=ok duration=")
	assert.Contains(t, lines[0], "version=1")
	assert.Contains(t, lines[1], "op=GetFrame scope=log-1 frame=nope outcome=frame_not_found duration=")

	// At info level nothing is logged per request (and nothing observed).
	var quiet lockedBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&quiet, &slog.HandlerOptions{Level: slog.LevelInfo}))
	srv2, err := actors.Start(sys, eventstore.NewMemory(), cfg)
	require.NoError(t, err)
	defer srv2.Stop()
	_, err = srv2.Client().PushFrame(ctx, &messages.PushFrame{Header: mut("log-2"), Goal: "plan", Budget: budget.TokenBudget{Total: 100}})
	require.NoError(t, err)
	assert.NotContains(t, quiet.String(), "stateindex request")
}

// spanNamed returns the ended spans of that name.
func spanNamed(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attrsOf(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

func TestTracesASpanPerRequestUnderTheCallersSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	cfg := testConfig(newFakeClock())
	cfg.TracerProvider = tp
	sys := quietSystem()
	defer sys.Shutdown()
	srv, err := actors.Start(sys, eventstore.NewMemory(), cfg)
	require.NoError(t, err)
	defer srv.Stop()
	c := srv.Client()

	cctx, caller := tp.Tracer("agent").Start(ctx, "agent turn")
	f, err := c.PushFrame(cctx, &messages.PushFrame{Header: mut("trace-1"), Goal: "plan", Budget: budget.TokenBudget{Total: 100}})
	require.NoError(t, err)
	_, err = c.GetFrame(cctx, &messages.GetFrame{Header: messages.Header{Scope: "trace-1"}, FrameID: "nope"})
	require.Error(t, err)
	caller.End()
	_, err = c.GetStack(ctx, &messages.GetStack{Header: messages.Header{Scope: "trace-1"}}) // no caller span
	require.NoError(t, err)

	spans := rec.Ended()
	push := spanNamed(spans, "StateIndex/PushFrame")
	require.Len(t, push, 1, "one span per request")
	p := push[0]
	assert.Equal(t, caller.SpanContext().TraceID(), p.SpanContext().TraceID())
	assert.Equal(t, caller.SpanContext().SpanID(), p.Parent().SpanID(), "the caller's span is its parent")
	a := attrsOf(p)
	assert.Equal(t, "trace-1", a["gen_ai.conversation.id"].AsString())
	assert.Equal(t, f.FrameID, a["stateindex.frame.id"].AsString())
	assert.Equal(t, "PushFrame", a["stateindex.operation"].AsString())
	assert.Equal(t, "ok", a["stateindex.outcome"].AsString())
	assert.Equal(t, f.Version, a["stateindex.version"].AsInt64())
	assert.NotEmpty(t, a["stateindex.request.id"].AsString())

	appends := spanNamed(spans, "StateIndex/store.append")
	require.Len(t, appends, 1, "the write's append, the read's none")
	assert.Equal(t, p.SpanContext().SpanID(), appends[0].Parent().SpanID(), "the append is a child of the request's span")
	assert.False(t, appends[0].EndTime().After(p.EndTime()), "and ends within it")

	get := spanNamed(spans, "StateIndex/GetFrame")
	require.Len(t, get, 1)
	assert.Equal(t, caller.SpanContext().SpanID(), get[0].Parent().SpanID())
	assert.Equal(t, codes.Error, get[0].Status().Code)
	assert.Equal(t, "frame_not_found", attrsOf(get[0])["error.type"].AsString())
	assert.Equal(t, "error", attrsOf(get[0])["stateindex.outcome"].AsString())

	stack := spanNamed(spans, "StateIndex/GetStack")
	require.Len(t, stack, 1)
	assert.False(t, stack[0].Parent().IsValid(), "no caller span: a root span")
}

func TestNoTelemetryConfiguredRecordsNothing(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	cfg := testConfig(newFakeClock())
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	sys := quietSystem()
	defer sys.Shutdown()
	srv, err := actors.Start(sys, eventstore.NewMemory(), cfg)
	require.NoError(t, err)
	defer srv.Stop()
	cctx, caller := tp.Tracer("agent").Start(ctx, "agent turn")
	_, err = srv.Client().PushFrame(cctx, &messages.PushFrame{Header: mut("quiet-1"), Goal: "plan", Budget: budget.TokenBudget{Total: 100}})
	require.NoError(t, err)
	caller.End()
	require.Len(t, rec.Ended(), 1, "only the caller's own span: the server traces nothing without a TracerProvider")
}

// childTelemetry gives the remote child's StateIndex a tracer whose ended
// spans are printed on its standard output, one line each, when
// STATEINDEX_TEST_TRACE is set.
func childTelemetry(cfg *actors.Config) {
	if os.Getenv("STATEINDEX_TEST_TRACE") == "" {
		return
	}
	cfg.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(printSpans{}))
}

type printSpans struct{}

func (printSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (printSpans) Shutdown(context.Context) error                  { return nil }
func (printSpans) ForceFlush(context.Context) error                { return nil }
func (printSpans) OnEnd(s sdktrace.ReadOnlySpan) {
	a := attrsOf(s)
	fmt.Printf("span name=%s trace=%s span=%s parent=%s remote=%t scope=%s outcome=%s\n", s.Name(), s.SpanContext().TraceID(), s.SpanContext().SpanID(),
		s.Parent().SpanID(), s.Parent().IsRemote(), a["gen_ai.conversation.id"].AsString(), a["stateindex.outcome"].AsString())
}

func TestTracesCrossTheWire(t *testing.T) {
	p := newRemotePair(t, "STATEINDEX_TEST_TRACE=1")
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())

	cctx, caller := tp.Tracer("agent").Start(ctx, "agent turn")
	_, err := p.c.PushFrame(cctx, &messages.PushFrame{Header: mut("wire-trace-1"), Goal: "plan", Budget: budget.TokenBudget{Total: 100}})
	require.NoError(t, err)
	caller.End()
	sc := caller.SpanContext()
	line, at := p.child.WaitLine(0, regexp.MustCompile(`^span name=StateIndex/PushFrame `), 10*time.Second)
	require.NotEmpty(t, line, "the server ended the request's span")
	assert.Contains(t, line, fmt.Sprintf("trace=%s ", sc.TraceID()), "the caller's trace")
	assert.Contains(t, line, fmt.Sprintf("parent=%s remote=true ", sc.SpanID()), "under the caller's span, from across the wire")
	assert.Contains(t, line, "scope=wire-trace-1 outcome=ok")
	server := regexp.MustCompile(` span=([0-9a-f]{16}) `).FindStringSubmatch(line)
	require.Len(t, server, 2)
	app, _ := p.child.WaitLine(0, regexp.MustCompile(`^span name=StateIndex/store.append `), 10*time.Second)
	assert.Contains(t, app, "parent="+server[1]+" remote=false", "the append is a child of the request's span")

	// A caller outside any trace: the server's span is a root.
	_, err = p.c.GetStack(ctx, &messages.GetStack{Header: messages.Header{Scope: "wire-trace-1"}})
	require.NoError(t, err)
	line, _ = p.child.WaitLine(at+1, regexp.MustCompile(`^span name=StateIndex/GetStack `), 10*time.Second)
	assert.Contains(t, line, "parent=0000000000000000 remote=false")
}
