package actors_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// BenchmarkTelemetryOverhead measures what metrics and tracing cost a
// CPU-bound server (the memory store: no fsync hides anything): the same
// workload — concurrent agents each pushing a frame, adding two handles,
// recording usage, assembling a pack, reading the stack and popping — on
// servers that differ only in their telemetry, in alternating rounds (the
// order flips every round), and compares the medians of the time per
// request:
//
//	off      no provider (the default: no observer at all)
//	on       metrics through an SDK meter provider with a Prometheus exporter
//	         registered, and tracing through an SDK tracer provider that samples
//	         every trace and exports them in batches to an exporter that discards
//	         them
//
// In every mode each agent's cycle runs under a span of the agent's own
// (its own tracer provider, sampling everything): a tracing server makes
// its request spans children of it.
//
//	on+actor on, plus Proto.Actor's own metrics through the same provider (what
//	         `stateindex serve --metrics` runs)
//	metrics, tracing  one of the two (STATEINDEX_OVERHEAD_MODES=off,metrics,tracing
//	         picks the modes compared)
//
// It reports, per mode, the medians of the wall time and of the process's
// CPU time per request, and the overhead over off: the median over the
// rounds of the mode's figure against off's in the same round. On a
// machine other processes share, trust the CPU figures more (the wall time
// also counts the time others took the cores).
//
// Run it alone, once:
//
//	go test -run '^$' -bench BenchmarkTelemetryOverhead -benchtime 1x ./actors/
//
// STATEINDEX_OVERHEAD_ROUNDS (default 9) and STATEINDEX_OVERHEAD_CYCLES
// (cycles per round of each agent, default 200; 16 agents, 7 requests a
// cycle) scale it.
func BenchmarkTelemetryOverhead(b *testing.B) {
	rounds := envInt("STATEINDEX_OVERHEAD_ROUNDS", 9)
	cycles := envInt("STATEINDEX_OVERHEAD_CYCLES", 200)
	const agents = 16
	modes := []string{"off", "on", "on+actor"}
	if m := os.Getenv("STATEINDEX_OVERHEAD_MODES"); m != "" {
		modes = strings.Split(m, ",")
	}
	type server struct {
		srv  *actors.Server
		sys  *actor.ActorSystem
		tp   *sdktrace.TracerProvider
		stop func()
	}
	start := func(mode string) server {
		cfg := testConfig(newFakeClock())
		cfg.Clock = time.Now
		var opts []actor.ConfigOption
		var tp *sdktrace.TracerProvider
		var mp *sdkmetric.MeterProvider
		if mode != "off" && mode != "tracing" {
			reg := prometheus.NewRegistry()
			exp, err := otelprom.New(otelprom.WithRegisterer(reg))
			if err != nil {
				b.Fatal(err)
			}
			mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
			cfg.MeterProvider = mp
		}
		if mode != "off" && mode != "metrics" {
			tp = sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(discardSpans{}))
			cfg.TracerProvider = tp
		}
		if mode == "on+actor" {
			otel.SetMeterProvider(mp) // Proto.Actor records on the global provider
			opts = append(opts, actor.WithMetricProviders(mp))
		}
		sys := actor.NewActorSystem(append([]actor.ConfigOption{actor.WithLoggerFactory(quietSystem().Config.LoggerFactory)}, opts...)...)
		srv, err := actors.Start(sys, eventstore.NewMemory(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		return server{srv: srv, sys: sys, tp: tp, stop: func() {
			srv.Stop()
			sys.Shutdown()
			if tp != nil {
				_ = tp.Shutdown(context.Background())
			}
			if mp != nil {
				_ = mp.Shutdown(context.Background())
			}
		}}
	}
	servers := map[string]server{}
	for _, m := range modes {
		servers[m] = start(m)
		defer servers[m].stop()
	}
	// The agents trace their own turns in every mode (their cost is the
	// same everywhere): a server that traces makes its spans their children.
	agentTP := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(discardSpans{}))
	defer agentTP.Shutdown(context.Background())
	tr := agentTP.Tracer("agent")
	tracer := func(ctx context.Context) (context.Context, func()) {
		ctx, span := tr.Start(ctx, "agent turn")
		return ctx, func() { span.End() }
	}
	// A round's cost per request: wall time, and the process's CPU time
	// (user + system), which other processes on a shared machine disturb
	// less.
	type cost struct{ wall, cpu float64 }
	round := func(s server, r int) cost {
		c := s.srv.Client()
		var wg sync.WaitGroup
		errs := make(chan error, agents)
		cpu0 := processCPU()
		t0 := time.Now()
		for a := 0; a < agents; a++ {
			wg.Add(1)
			go func(a int) {
				defer wg.Done()
				if err := agentCycles(c, fmt.Sprintf("agent-%d-%d", r, a), cycles, tracer); err != nil {
					errs <- err
				}
			}(a)
		}
		wg.Wait()
		el := time.Since(t0)
		cpu := processCPU() - cpu0
		select {
		case err := <-errs:
			b.Fatal(err)
		default:
		}
		n := float64(agents * cycles * 7)
		return cost{wall: float64(el.Nanoseconds()) / n, cpu: float64(cpu.Nanoseconds()) / n}
	}
	for _, m := range modes { // warm up
		round(servers[m], -1)
	}
	wall, cpu := map[string][]float64{}, map[string][]float64{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for r := 0; r < rounds; r++ {
			order := slices.Clone(modes)
			if r%2 == 1 {
				slices.Reverse(order)
			}
			for _, m := range order {
				c := round(servers[m], r)
				wall[m] = append(wall[m], c.wall)
				cpu[m] = append(cpu[m], c.cpu)
			}
		}
	}
	b.StopTimer()
	// The overhead of a mode is the median over the rounds of its cost
	// against off's in the same round (run next to it): a machine whose
	// load drifts moves both.
	ratio := func(v map[string][]float64, m string) float64 {
		var rs []float64
		for i := range v[m] {
			rs = append(rs, 100*(v[m][i]/v["off"][i]-1))
		}
		return midpoint(rs)
	}
	for _, m := range modes {
		line := fmt.Sprintf("%-9s wall %7.0f ns/req  cpu %7.0f ns/req", m, midpoint(wall[m]), midpoint(cpu[m]))
		if m != "off" {
			w, c := ratio(wall, m), ratio(cpu, m)
			line += fmt.Sprintf("  overhead: wall %+5.1f%%  cpu %+5.1f%%", w, c)
			b.ReportMetric(w, "%wall-"+m)
			b.ReportMetric(c, "%cpu-"+m)
		}
		// Printed, not logged: a benchmark's log is cut after ten lines.
		fmt.Printf("%s\n    wall rounds %v\n    cpu rounds  %v\n", line, rounded(wall[m]), rounded(cpu[m]))
	}
}

// processCPU is the CPU time the process has used (user + system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// agentCycles runs cycles of one agent's requests on scope.
func agentCycles(c *actors.Client, scope string, cycles int, tracer func(context.Context) (context.Context, func())) error {
	for i := 0; i < cycles; i++ {
		ctx := context.Background()
		end := func() {}
		if tracer != nil {
			ctx, end = tracer(ctx)
		}
		f, err := c.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: scope}, Goal: "answer the question", Budget: budget.TokenBudget{Total: 8000}})
		if err != nil {
			return err
		}
		for _, text := range []string{"the user asks for flights to Lisbon next week", "search results: 3 flights, from 120 EUR"} {
			if _, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: messages.Header{Scope: scope}, FrameID: f.FrameID, Priority: compaction.High, Content: text}); err != nil {
				return err
			}
		}
		if _, err := c.RecordUsage(ctx, &messages.RecordUsage{Header: messages.Header{Scope: scope}, FrameID: f.FrameID, Cost: budget.Cost{InputTokens: 900, OutputTokens: 120}}); err != nil {
			return err
		}
		if _, err := c.AssembleContextPack(ctx, &messages.AssembleContextPack{Header: messages.Header{Scope: scope}, FrameID: f.FrameID, BudgetTokens: 1000}); err != nil {
			return err
		}
		if _, err := c.GetStack(ctx, &messages.GetStack{Header: messages.Header{Scope: scope}, FrameID: f.FrameID}); err != nil {
			return err
		}
		if _, err := c.PopFrame(ctx, &messages.PopFrame{Header: messages.Header{Scope: scope}, FrameID: f.FrameID, Status: frames.StatusCompleted}); err != nil {
			return err
		}
		end()
	}
	return nil
}

// discardSpans is a span exporter that drops what it is given.
type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }

// midpoint is the median of v (the mean of the middle two for an even count).
func midpoint(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func rounded(v []float64) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x + 0.5)
	}
	return out
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}
