package actors

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// Telemetry of the shell (DESIGN §14): metrics through Config.MeterProvider,
// traces through Config.TracerProvider (tracing.go) and, at debug level, a
// log line per request. One observer per Server, shared by its shards and
// services through Config.obs; nil when nothing is configured, and every
// hook is a method that returns at once on a nil observer — so a server
// without telemetry pays one nil check per hook.
//
// A request is observed from its admission (the in-process Client, the
// remote gateway, the router) to the sending of its reply (replyTo.send):
// its *reqObs travels in the gated envelope and the replyTo. Attributes of
// metrics are bounded: operation, outcome, error code, compaction level,
// token type — never a scope, frame or request id (those go on spans and
// log lines only).
//
// Instruments (OpenTelemetry names; the Prometheus exporter writes dots as
// underscores and adds unit suffixes and _total):
//
//	stateindex.requests                      counter    requests answered, by stateindex.operation, stateindex.outcome (ok|error), error.type (the code)
//	stateindex.request.duration              histogram  s, admission to reply, same attributes
//	stateindex.append.duration               histogram  s, a scope batch's append: the store's group commit as the shell waits for it (stateindex.outcome)
//	stateindex.appends, stateindex.append.writes counters appends of scope batches (by stateindex.outcome) and the
//	                                         requests they carried: writes ÷ appends is the mean batch size
//	stateindex.events.appended               counter    events made durable
//	stateindex.cache.lookups                 counter    by stateindex.cache.result: hit (decided on a cached scope) or miss (loaded first)
//	stateindex.cache.evictions               counter    scopes evicted by the LRU bounds
//	stateindex.cache.scopes / .bytes         gauges     scopes held, their approximate bytes
//	stateindex.scope.loads                   counter    cold scopes rebuilt, by stateindex.load.from_snapshot
//	stateindex.scope.load.duration           histogram  s, snapshot plus tail (recovery duration)
//	stateindex.scope.load.events             histogram  events replayed after the snapshot
//	stateindex.snapshots                     counter    snapshots saved, by stateindex.outcome
//	stateindex.snapshot.bytes / .duration    histograms
//	stateindex.retention.passes              counter    passes run
//	stateindex.retention.pass.duration       histogram  s
//	stateindex.retention.scopes              counter    scopes a pass cut (stateindex.retention.action=trim) or destroyed for inactivity (expire)
//	stateindex.retention.records.removed     counter    records removed from the store
//	stateindex.retention.errors              counter
//	stateindex.subscription.lag              gauge      records the furthest-behind durable subscription has not acknowledged
//	stateindex.subscriptions.durable         gauge      durable subscriptions
//	stateindex.subscription.read.lag         histogram  records a ReadEvents reply left behind the log's head
//	gen_ai.client.token.usage                histogram  {token}, RecordUsage's tokens, by gen_ai.token.type (input|output)
//	stateindex.pack.assembled                counter    context packs, by stateindex.compaction.level
//	stateindex.pack.tokens                   histogram  {token}, a pack's tokens under its counter, by level
//	stateindex.pack.handles.excluded         counter    handles left out of packs, by stateindex.pack.exclusion (dropped|summarized)
//	stateindex.pack.segment.tokens           counter    {token}, tokens of the segments packs carried, by stateindex.pack.priority
//	stateindex.compactions                   counter    compactions recorded, by level
//	stateindex.compaction.reduction          histogram  {token}, tokens a compaction took out of a frame's live context
//	stateindex.continuations                 counter    frames continued by a new link of their chain
//	stateindex.tool_calls                    counter    by stateindex.tool_call.event: started, finished, abandoned
//	stateindex.tool_calls.in_doubt           counter    in-doubt tool calls ResumeActor reported
//	stateindex.ledger.reservations           counter    by stateindex.ledger.event: reserved, returned, settled
//	stateindex.ledger.reservations.outstanding gauge    reservations not returned, in the scopes held in memory
//	stateindex.shard.pending                 gauge      requests held by the shards and in their mailboxes
type observer struct {
	log     *slog.Logger
	metrics bool         // a MeterProvider is set
	tracer  trace.Tracer // nil: no tracing
	meter   metric.Meter

	mu     sync.Mutex
	shards []*shardStats
	regs   []metric.Registration

	// n are the counters, atomics read by the meter at each collection.
	n counts

	reqDuration, appendDuration, loadDuration, snapDuration, retDuration metric.Float64Histogram
	loadEvents, snapBytes, readLag                                       metric.Int64Histogram
	tokenUsage, packTokens, reduction                                    metric.Int64Histogram

	// Attribute sets, built once: recording with a prebuilt set allocates
	// nothing.
	opOK     [messages.NumOps]metric.MeasurementOption
	opErr    sync.Map // opCode → metric.MeasurementOption
	ok, fail metric.MeasurementOption
	fromSnap [2]metric.MeasurementOption
	levels   [numLevels]metric.MeasurementOption
	input    metric.MeasurementOption
	output   metric.MeasurementOption
}

// numLevels bounds the compaction levels counted apart (the last counts
// any level above); numPriorities the priorities (slot 0 counts any other).
const (
	numLevels     = 6
	numPriorities = int(compaction.Background) + 1
)

// counts are the observer's counters. The hot path adds to atomics and the
// meter reads them when it collects (observable counters): an atomic add
// per event instead of an SDK measurement, whose attribute lookup under a
// lock costs a few hundred nanoseconds.
type counts struct {
	reqOK        [messages.NumOps]atomic.Int64
	reqErr       sync.Map // opCode → *reqCount
	hit, miss    atomic.Int64
	evictions    atomic.Int64
	loads        [2]atomic.Int64 // replayed, from a snapshot
	events       atomic.Int64
	appends      [2]atomic.Int64 // ok, error
	appendWrites atomic.Int64
	snapshots    [2]atomic.Int64 // ok, error
	retPasses    atomic.Int64
	retRemoved   atomic.Int64
	retErrors    atomic.Int64
	retScopes    [2]atomic.Int64 // trim, expire
	packs        [numLevels]atomic.Int64
	excluded     [2]atomic.Int64 // dropped, summarized
	byPriority   [numPriorities]atomic.Int64
	compactions  [numLevels]atomic.Int64
	continued    atomic.Int64
	inDoubt      atomic.Int64
	toolCalls    [3]atomic.Int64 // started, finished, abandoned
	ledger       [3]atomic.Int64 // reserved, returned, settled
}

// reqCount counts the requests of an operation that failed with a code.
type reqCount struct {
	n   atomic.Int64
	set metric.MeasurementOption
}

type opCode struct {
	op   messages.Op
	code messages.Code
}

// Attribute keys of the StateIndex's own telemetry. The scope is the
// GenAI conventions' conversation id: on spans and log lines only.
const (
	attrOperation  = attribute.Key("stateindex.operation")
	attrOutcome    = attribute.Key("stateindex.outcome")
	attrErrorType  = attribute.Key("error.type")
	attrScope      = attribute.Key("gen_ai.conversation.id")
	attrTokenType  = attribute.Key("gen_ai.token.type")
	attrFrame      = attribute.Key("stateindex.frame.id")
	attrVersion    = attribute.Key("stateindex.version")
	attrRequestID  = attribute.Key("stateindex.request.id")
	attrLevel      = attribute.Key("stateindex.compaction.level")
	attrCache      = attribute.Key("stateindex.cache.result")
	attrFromSnap   = attribute.Key("stateindex.load.from_snapshot")
	attrExclusion  = attribute.Key("stateindex.pack.exclusion")
	attrPriority   = attribute.Key("stateindex.pack.priority")
	attrToolEvent  = attribute.Key("stateindex.tool_call.event")
	attrLedger     = attribute.Key("stateindex.ledger.event")
	attrRetention  = attribute.Key("stateindex.retention.action")
	instrumentName = "github.com/stateindex/stateindex/actors"
)

// Bucket boundaries: requests take microseconds in process and a
// millisecond or more with an fsync; batches and token counts span powers.
var (
	secondsBuckets = []float64{0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	countBuckets   = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384, 65536}
	// tokenBuckets are the GenAI conventions' advice for gen_ai.client.token.usage.
	tokenBuckets = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
	byteBuckets  = []float64{1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20}
)

func set(kv ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(kv...))
}

// levelName names a level's counter slot.
func levelName(i int) string {
	if i == numLevels-1 {
		return "higher"
	}
	return compaction.Level(i).String()
}

// levelIndex is a level's counter slot.
func levelIndex(l compaction.Level) int { return min(int(l), numLevels-1) }

// newObserver returns the telemetry cfg asks for, or nil when it asks for
// none (no provider set, and the logger does not log at debug level).
func newObserver(cfg Config) *observer {
	debug := cfg.Logger != nil && cfg.Logger.Enabled(context.Background(), slog.LevelDebug)
	if cfg.MeterProvider == nil && cfg.TracerProvider == nil && !debug {
		return nil
	}
	o := &observer{log: cfg.Logger}
	if cfg.TracerProvider != nil {
		o.tracer = cfg.TracerProvider.Tracer(instrumentName)
	}
	if cfg.MeterProvider == nil {
		return o
	}
	o.metrics = true
	o.meter = cfg.MeterProvider.Meter(instrumentName)
	m := o.meter
	var errs []error
	seconds := func(name, desc string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(secondsBuckets...))
		errs = append(errs, err)
		return h
	}
	ints := func(name, unit, desc string, buckets []float64) metric.Int64Histogram {
		h, err := m.Int64Histogram(name, metric.WithUnit(unit), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(buckets...))
		errs = append(errs, err)
		return h
	}
	o.reqDuration = seconds("stateindex.request.duration", "Time from a request's admission to its reply, by operation and outcome")
	o.appendDuration = seconds("stateindex.append.duration", "A scope batch's append as the shell waits for it: the store's group commit, fsync included")
	o.loadDuration = seconds("stateindex.scope.load.duration", "Time to rebuild a cold scope: its snapshot plus the events after it")
	o.loadEvents = ints("stateindex.scope.load.events", "{event}", "Events replayed to rebuild a cold scope", countBuckets)
	o.snapBytes = ints("stateindex.snapshot.bytes", "By", "Encoded size of a snapshot", byteBuckets)
	o.snapDuration = seconds("stateindex.snapshot.duration", "Time to save a snapshot")
	o.retDuration = seconds("stateindex.retention.pass.duration", "Time of a retention pass")
	o.readLag = ints("stateindex.subscription.read.lag", "{record}", "Records a ReadEvents reply left behind the log's head", countBuckets)
	o.tokenUsage = ints("gen_ai.client.token.usage", "{token}", "Tokens recorded by RecordUsage", tokenBuckets)
	o.packTokens = ints("stateindex.pack.tokens", "{token}", "Tokens of an assembled pack under its counter", tokenBuckets)
	o.reduction = ints("stateindex.compaction.reduction", "{token}", "Tokens a compaction took out of a frame's live context", tokenBuckets)
	errs = append(errs, o.registerCounters())
	for _, err := range errs {
		if err != nil {
			cfg.Logger.Warn("stateindex: a metric instrument could not be created; it records nothing", "error", err)
		}
	}
	for _, op := range messages.Operations() {
		o.opOK[op.Op] = set(attrOperation.String(op.Name), attrOutcome.String("ok"))
	}
	o.ok, o.fail = set(attrOutcome.String("ok")), set(attrOutcome.String("error"))
	o.fromSnap = [2]metric.MeasurementOption{set(attrFromSnap.Bool(false)), set(attrFromSnap.Bool(true))}
	for i := range o.levels {
		o.levels[i] = set(attrLevel.String(levelName(i)))
	}
	o.input, o.output = set(attrTokenType.String("input")), set(attrTokenType.String("output"))
	return o
}

// registerCounters creates the observable counters and the callback that
// reads o.n into them.
func (o *observer) registerCounters() error {
	m := o.meter
	type obs struct {
		c    metric.Int64ObservableCounter
		read func(ob metric.Observer, c metric.Int64ObservableCounter)
	}
	var all []obs
	var firstErr error
	add := func(name, unit, desc string, read func(ob metric.Observer, c metric.Int64ObservableCounter)) {
		c, err := m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			return
		}
		all = append(all, obs{c, read})
	}
	one := func(v *atomic.Int64) func(metric.Observer, metric.Int64ObservableCounter) {
		return func(ob metric.Observer, c metric.Int64ObservableCounter) { ob.ObserveInt64(c, v.Load()) }
	}
	many := func(vs []*atomic.Int64, sets []metric.MeasurementOption) func(metric.Observer, metric.Int64ObservableCounter) {
		return func(ob metric.Observer, c metric.Int64ObservableCounter) {
			for i, v := range vs {
				ob.ObserveInt64(c, v.Load(), sets[i])
			}
		}
	}
	ptrs := func(a []atomic.Int64) []*atomic.Int64 {
		out := make([]*atomic.Int64, len(a))
		for i := range a {
			out[i] = &a[i]
		}
		return out
	}
	var levelSets []metric.MeasurementOption
	for i := 0; i < numLevels; i++ {
		levelSets = append(levelSets, set(attrLevel.String(levelName(i))))
	}
	n := &o.n
	var okSets [messages.NumOps]metric.MeasurementOption
	for _, op := range messages.Operations() {
		okSets[op.Op] = set(attrOperation.String(op.Name), attrOutcome.String("ok"))
	}
	add("stateindex.requests", "{request}", "Requests answered, by operation and outcome", func(ob metric.Observer, c metric.Int64ObservableCounter) {
		for i := range n.reqOK {
			if v := n.reqOK[i].Load(); v > 0 {
				ob.ObserveInt64(c, v, okSets[i])
			}
		}
		n.reqErr.Range(func(_, v any) bool {
			rc := v.(*reqCount)
			ob.ObserveInt64(c, rc.n.Load(), rc.set)
			return true
		})
	})
	add("stateindex.cache.lookups", "{request}", "Requests that found their scope in memory (hit) or had it loaded first (miss)",
		many([]*atomic.Int64{&n.hit, &n.miss}, []metric.MeasurementOption{set(attrCache.String("hit")), set(attrCache.String("miss"))}))
	add("stateindex.cache.evictions", "{scope}", "Scopes evicted by the cache's bounds", one(&n.evictions))
	add("stateindex.scope.loads", "{scope}", "Cold scopes rebuilt from the store",
		many(ptrs(n.loads[:]), []metric.MeasurementOption{set(attrFromSnap.Bool(false)), set(attrFromSnap.Bool(true))}))
	add("stateindex.events.appended", "{event}", "Events made durable", one(&n.events))
	add("stateindex.appends", "{append}", "Appends of a scope's batch of writes, by outcome",
		many(ptrs(n.appends[:]), []metric.MeasurementOption{set(attrOutcome.String("ok")), set(attrOutcome.String("error"))}))
	add("stateindex.append.writes", "{request}", "Requests the appends carried (over stateindex.appends: the mean batch size)", one(&n.appendWrites))
	add("stateindex.snapshots", "{snapshot}", "Snapshots saved, by outcome", many(ptrs(n.snapshots[:]), []metric.MeasurementOption{set(attrOutcome.String("ok")), set(attrOutcome.String("error"))}))
	add("stateindex.retention.passes", "{pass}", "Retention passes run", one(&n.retPasses))
	add("stateindex.retention.scopes", "{scope}", "Scopes a retention pass cut (trim) or destroyed for inactivity (expire)",
		many(ptrs(n.retScopes[:]), []metric.MeasurementOption{set(attrRetention.String("trim")), set(attrRetention.String("expire"))}))
	add("stateindex.retention.records.removed", "{record}", "Records retention removed from the store", one(&n.retRemoved))
	add("stateindex.retention.errors", "{error}", "Errors of retention passes", one(&n.retErrors))
	add("stateindex.pack.assembled", "{pack}", "Context packs assembled, by compaction level", many(ptrs(n.packs[:]), levelSets))
	add("stateindex.pack.handles.excluded", "{handle}", "Handles left out of packs: dropped, or summarized",
		many(ptrs(n.excluded[:]), []metric.MeasurementOption{set(attrExclusion.String("dropped")), set(attrExclusion.String("summarized"))}))
	var prioSets []metric.MeasurementOption
	for i := 0; i < numPriorities; i++ {
		name := compaction.Priority(i).String()
		if i == 0 {
			name = "other"
		}
		prioSets = append(prioSets, set(attrPriority.String(name)))
	}
	add("stateindex.pack.segment.tokens", "{token}", "Tokens of the segments packs carried, by the handles' priority", many(ptrs(n.byPriority[:]), prioSets))
	add("stateindex.compactions", "{compaction}", "Compactions recorded, by level", many(ptrs(n.compactions[:]), levelSets))
	add("stateindex.continuations", "{frame}", "Frames continued by a new link of their chain", one(&n.continued))
	add("stateindex.tool_calls", "{call}", "Tool calls started, finished and abandoned",
		many(ptrs(n.toolCalls[:]), []metric.MeasurementOption{set(attrToolEvent.String("started")), set(attrToolEvent.String("finished")), set(attrToolEvent.String("abandoned"))}))
	add("stateindex.tool_calls.in_doubt", "{call}", "In-doubt tool calls reported by ResumeActor", one(&n.inDoubt))
	add("stateindex.ledger.reservations", "{reservation}", "Spend reservations reserved, returned and settled",
		many(ptrs(n.ledger[:]), []metric.MeasurementOption{set(attrLedger.String("reserved")), set(attrLedger.String("returned")), set(attrLedger.String("settled"))}))
	insts := make([]metric.Observable, len(all))
	for i := range all {
		insts[i] = all[i].c
	}
	reg, err := m.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
		for _, a := range all {
			a.read(ob, a.c)
		}
		return nil
	}, insts...)
	if err != nil {
		return err
	}
	o.regs = append(o.regs, reg)
	return firstErr
}

// outcomeSet is the attribute set of a request's outcome.
func (o *observer) outcomeSet(op messages.Op, e *messages.Error) metric.MeasurementOption {
	if e == nil && op < messages.NumOps {
		return o.opOK[op]
	}
	return o.errCount(op, e).set
}

// errCount is the counter of op's requests that failed with e's code (or
// of an operation of no name).
func (o *observer) errCount(op messages.Op, e *messages.Error) *reqCount {
	if op > messages.NumOps {
		op = messages.NumOps
	}
	k := opCode{op, ""}
	if e != nil {
		k.code = e.Code
	}
	if v, ok := o.n.reqErr.Load(k); ok {
		return v.(*reqCount)
	}
	name := "unknown"
	if op < messages.NumOps {
		name = op.String()
	}
	outcome := "error"
	if e == nil {
		outcome = "ok"
	}
	v, _ := o.n.reqErr.LoadOrStore(k, &reqCount{set: set(attrOperation.String(name), attrOutcome.String(outcome), attrErrorType.String(string(k.code)))})
	return v.(*reqCount)
}

// reqObs is one request under observation, from its admission to its reply.
type reqObs struct {
	o     *observer
	op    messages.Op
	start time.Time
	span  trace.Span // nil when not tracing
	// appendSpan is the span of the store append the request's events are
	// in, while it is in flight (tracing.go).
	appendSpan trace.Span
	ended      bool
}

// begin starts observing req, admitted with ctx (the caller's context,
// whose span becomes the request span's parent).
func (o *observer) begin(ctx context.Context, req messages.Request) *reqObs {
	if o == nil || req == nil {
		return nil
	}
	r := &reqObs{o: o, op: req.Op(), start: time.Now()}
	if o.tracer != nil {
		r.span = o.startSpan(ctx, req)
	}
	return r
}

// refuse observes a request refused at its admission (err: the refusal, a
// *messages.Error) as one answered at once.
func (o *observer) refuse(ctx context.Context, req messages.Request, err error) {
	if o == nil || req == nil {
		return
	}
	e, ok := err.(*messages.Error)
	if !ok {
		e = messages.Errorf(messages.CodeInternal, "%v", err)
	}
	o.begin(ctx, req).end(req, failure(req, e))
}

// end records a request's reply: its metrics, span and log line. Only its
// first reply counts.
func (r *reqObs) end(req messages.Request, reply messages.Reply) {
	if r == nil || r.ended || reply == nil {
		return
	}
	r.ended = true
	o := r.o
	d := time.Since(r.start)
	e := reply.Failure()
	ctx := context.Background()
	if o.metrics {
		if e == nil && r.op < messages.NumOps {
			o.n.reqOK[r.op].Add(1)
			o.reqDuration.Record(ctx, d.Seconds(), o.opOK[r.op])
			o.replied(ctx, reply)
		} else {
			rc := o.errCount(r.op, e)
			rc.n.Add(1)
			o.reqDuration.Record(ctx, d.Seconds(), rc.set)
		}
	}
	if r.span != nil {
		o.endSpan(r, req, reply, e)
	}
	if o.log != nil && o.log.Enabled(ctx, slog.LevelDebug) {
		outcome := "ok"
		if e != nil {
			outcome = string(e.Code)
		}
		version, _ := versionOf(reply)
		o.log.LogAttrs(ctx, slog.LevelDebug, "stateindex request",
			slog.String("op", r.op.String()), slog.String("scope", req.ScopeName()), slog.String("frame", requestFrame(req, reply)),
			slog.String("outcome", outcome), slog.Duration("duration", d), slog.Int64("version", version))
	}
}

// replied records what a successful reply says: packs, in-doubt tool calls
// reported, a subscriber's lag.
func (o *observer) replied(ctx context.Context, reply messages.Reply) {
	switch r := reply.(type) {
	case *messages.ContextPack:
		lv := levelIndex(r.TokenSummary.CompactionLevel)
		o.n.packs[lv].Add(1)
		o.packTokens.Record(ctx, r.TokenSummary.Used, o.levels[lv])
		o.n.excluded[0].Add(int64(len(r.Dropped)))
		o.n.excluded[1].Add(int64(len(r.Summarized)))
		for i := range r.Segments {
			p := int(r.Segments[i].Priority)
			if p >= numPriorities {
				p = 0
			}
			o.n.byPriority[p].Add(r.Segments[i].Tokens)
		}
	case *messages.ActorResumeState:
		n := 0
		for _, p := range r.PendingWork {
			if p.Kind == frames.PendingToolInDoubt {
				n++
			}
		}
		o.n.inDoubt.Add(int64(n))
	case *messages.ReadEventsReply:
		if r.Next > 0 && r.Head+1 >= r.Next {
			o.readLag.Record(ctx, int64(r.Head+1-r.Next))
		}
	}
}

// committed records what a durable batch of scope st holds: events, tokens
// used, continuations, tool calls, compactions and reservations.
func (o *observer) committed(h *handler, b *batch) {
	if o == nil || !o.metrics {
		return
	}
	ctx := context.Background()
	n, ledger := 0, false
	for _, w := range b.writes {
		n += len(w.evs)
		for _, ev := range w.evs {
			switch e := ev.(type) {
			case *frames.UsageRecorded:
				if e.Cost.InputTokens > 0 {
					o.tokenUsage.Record(ctx, e.Cost.InputTokens, o.input)
				}
				if e.Cost.OutputTokens > 0 {
					o.tokenUsage.Record(ctx, e.Cost.OutputTokens, o.output)
				}
			case *frames.FramePushed:
				if e.ContinuedFrom != "" {
					o.n.continued.Add(1)
				}
			case *frames.FramePopped:
				o.n.toolCalls[2].Add(int64(len(e.Abandoned)))
			case *frames.ToolStarted:
				o.n.toolCalls[0].Add(1)
			case *frames.ToolFinished:
				o.n.toolCalls[1].Add(1)
			case *frames.FrameCompacted:
				lv := levelIndex(e.Level)
				o.n.compactions[lv].Add(1)
				if d := e.OriginalTokens - e.FinalTokens; d > 0 {
					o.reduction.Record(ctx, d, o.levels[lv])
				}
			case *frames.SpendReserved:
				o.n.ledger[0].Add(1)
				ledger = true
			case *frames.SpendReturned:
				o.n.ledger[1].Add(int64(len(e.IDs)))
				ledger = true
			case *frames.SpendSettled:
				o.n.ledger[2].Add(1)
				ledger = true
			case *frames.ScopeDestroyed:
				ledger = true
			}
		}
	}
	o.n.events.Add(int64(n))
	if ledger {
		h.stats.scopeIn(b.e.st.Scope, b.e.st)
	}
}

// appendMark is a batch's append on its way: when it started.
type appendMark struct{ start time.Time }

// appending marks the start of a batch's append (and starts its spans).
func (o *observer) appending(b *batch) appendMark {
	if o == nil {
		return appendMark{}
	}
	if o.tracer != nil {
		o.startAppendSpans(b)
	}
	return appendMark{start: time.Now()}
}

// appended records a batch's append once the store answered (on the
// store's goroutine or the append's).
func (o *observer) appended(m appendMark, b *batch, res eventstore.AppendResult, err error) {
	if o == nil {
		return
	}
	if o.metrics {
		ctx := context.Background()
		s := o.ok
		if err != nil {
			s = o.fail
		}
		o.appendDuration.Record(ctx, time.Since(m.start).Seconds(), s)
		if err != nil {
			o.n.appends[1].Add(1)
		} else {
			o.n.appends[0].Add(1)
		}
		o.n.appendWrites.Add(int64(len(b.writes)))
	}
	if o.tracer != nil {
		endAppendSpans(b, res, err)
	}
}

// lookup counts a request that found its scope in the cache, or not.
func (o *observer) lookup(hit bool) {
	if o == nil {
		return
	}
	if hit {
		o.n.hit.Add(1)
	} else {
		o.n.miss.Add(1)
	}
}

// evicted counts scopes evicted by the cache's bounds.
func (o *observer) evicted() {
	if o == nil {
		return
	}
	o.n.evictions.Add(1)
}

// loaded records a cold scope's load.
func (o *observer) loaded(info LoadInfo) {
	if o == nil || !o.metrics {
		return
	}
	ctx := context.Background()
	i := 0
	if info.FromSnapshot {
		i = 1
	}
	o.n.loads[i].Add(1)
	o.loadDuration.Record(ctx, info.Took.Seconds(), o.fromSnap[i])
	o.loadEvents.Record(ctx, info.Replayed, o.fromSnap[i])
}

// snapshotted records a snapshot's save.
func (o *observer) snapshotted(bytes int, took time.Duration, err error) {
	if o == nil || !o.metrics {
		return
	}
	if err != nil {
		o.n.snapshots[1].Add(1)
		return
	}
	o.n.snapshots[0].Add(1)
	ctx := context.Background()
	o.snapBytes.Record(ctx, int64(bytes))
	o.snapDuration.Record(ctx, took.Seconds())
}

// retention records what a retention pass did.
func (o *observer) retention(rep RetentionReport) {
	if o == nil || !o.metrics {
		return
	}
	o.n.retPasses.Add(1)
	o.retDuration.Record(context.Background(), rep.Elapsed.Seconds())
	for _, sr := range rep.Scopes {
		o.n.retRemoved.Add(sr.Removed)
		switch {
		case sr.Expired:
			o.n.retScopes[1].Add(1)
		case sr.Through > 0 || sr.Removed > 0:
			o.n.retScopes[0].Add(1)
		}
	}
	o.n.retErrors.Add(int64(len(rep.Errors)))
}

// shardStats is what a shard publishes for the gauges: written on the
// shard's goroutine, read by the meter's callbacks.
type shardStats struct {
	scopes, bytes, reservations atomic.Int64
	// res holds the open reservations per cached scope that has some, and
	// resTotal their sum (shard goroutine only).
	res      map[string]int64
	resTotal int64
}

// newShard returns the stats a new shard publishes (nil without metrics).
func (o *observer) newShard() *shardStats {
	if o == nil || !o.metrics {
		return nil
	}
	st := &shardStats{res: map[string]int64{}}
	o.mu.Lock()
	o.shards = append(o.shards, st)
	o.mu.Unlock()
	return st
}

// sync publishes a handler's cache figures.
func (st *shardStats) sync(h *handler) {
	if st == nil {
		return
	}
	st.scopes.Store(int64(h.cache.Len()))
	st.bytes.Store(h.bytes)
}

// scopeIn counts the open reservations of a scope now in the cache (loaded,
// or changed by a ledger event).
func (st *shardStats) scopeIn(scope string, s *frames.State) {
	if st == nil {
		return
	}
	var n int64
	for _, r := range s.Reservations {
		if !r.Returned {
			n++
		}
	}
	old := st.res[scope]
	if n == 0 {
		delete(st.res, scope)
	} else {
		st.res[scope] = n
	}
	if n != old {
		st.resTotal += n - old
		st.reservations.Store(st.resTotal)
	}
}

// scopeOut forgets a scope that left the cache.
func (st *shardStats) scopeOut(scope string) {
	if st == nil {
		return
	}
	if old, ok := st.res[scope]; ok {
		delete(st.res, scope)
		st.resTotal -= old
		st.reservations.Store(st.resTotal)
	}
}

// watch registers the gauges of a started server: its caches, pending
// work, reservations and durable subscriptions' lag. Server.Stop calls
// unwatch.
func (o *observer) watch(s *Server) {
	if o == nil || !o.metrics {
		return
	}
	m := o.meter
	scopes, e1 := m.Int64ObservableGauge("stateindex.cache.scopes", metric.WithUnit("{scope}"), metric.WithDescription("Scopes held in memory"))
	bytes, e2 := m.Int64ObservableGauge("stateindex.cache.bytes", metric.WithUnit("By"), metric.WithDescription("Approximate bytes of the scopes held in memory"))
	res, e3 := m.Int64ObservableGauge("stateindex.ledger.reservations.outstanding", metric.WithUnit("{reservation}"),
		metric.WithDescription("Spend reservations not returned, in the scopes held in memory"))
	pending, e4 := m.Int64ObservableGauge("stateindex.shard.pending", metric.WithUnit("{request}"),
		metric.WithDescription("Requests in the shards' mailboxes and held behind busy scopes"))
	lag, e5 := m.Int64ObservableGauge("stateindex.subscription.lag", metric.WithUnit("{record}"),
		metric.WithDescription("Records the furthest-behind durable subscription has not acknowledged"))
	durable, e6 := m.Int64ObservableGauge("stateindex.subscriptions.durable", metric.WithUnit("{subscription}"),
		metric.WithDescription("Durable subscriptions"))
	for _, err := range []error{e1, e2, e3, e4, e5, e6} {
		if err != nil {
			o.log.Warn("stateindex: a metric gauge could not be created", "error", err)
			return
		}
	}
	gates, store := s.gates, s.store
	reg, err := m.RegisterCallback(func(ctx context.Context, ob metric.Observer) error {
		o.mu.Lock()
		shards := o.shards
		o.mu.Unlock()
		var sc, by, rs, pd int64
		for _, st := range shards {
			sc += st.scopes.Load()
			by += st.bytes.Load()
			rs += st.reservations.Load()
		}
		for _, g := range gates {
			pd += g.mailbox.Load() + g.pending.Load()
		}
		ob.ObserveInt64(scopes, sc)
		ob.ObserveInt64(bytes, by)
		ob.ObserveInt64(res, rs)
		ob.ObserveInt64(pending, pd)
		if n, behind, ok := subscriptionLag(ctx, store); ok {
			ob.ObserveInt64(durable, n)
			ob.ObserveInt64(lag, behind)
		}
		return nil
	}, scopes, bytes, res, pending, lag, durable)
	if err != nil {
		o.log.Warn("stateindex: the metric gauges could not be registered", "error", err)
		return
	}
	o.mu.Lock()
	o.regs = append(o.regs, reg)
	o.mu.Unlock()
}

// unwatch unregisters the gauges (the server is stopping: their store may
// be closed next).
func (o *observer) unwatch() {
	if o == nil {
		return
	}
	o.mu.Lock()
	regs := o.regs
	o.regs = nil
	o.mu.Unlock()
	for _, r := range regs {
		_ = r.Unregister()
	}
}

// subscriptionLag reads the durable subscriptions (a scan of their table
// at each collection, bounded by a second): how many, and how many records
// the furthest behind has not acknowledged.
func subscriptionLag(ctx context.Context, store eventstore.Store) (n, behind int64, ok bool) {
	t, isTables := store.(eventstore.Tables)
	if !isTables {
		return 0, 0, false
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	head, err := store.LastSeq(ctx)
	if err != nil {
		return 0, 0, false
	}
	err = t.TableScan(ctx, subscriptionsTable, nil, nil, false, func(_, v []byte) (bool, error) {
		var rec subRecord
		if eventstore.Unmarshal(v, &rec) != nil {
			return true, nil
		}
		n++
		if rec.Position <= head+1 {
			behind = max(behind, int64(head+1-rec.Position))
		}
		return true, nil
	})
	return n, behind, err == nil
}
