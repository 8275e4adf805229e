package actors

import (
	"context"
	"reflect"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/stateindex/stateindex/actors/wire"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/messages"
)

// Traces (Config.TracerProvider): one server span per request, named
// "StateIndex/<operation>", from its admission to its reply, whose parent
// is the caller's span — the context given to the Client in process, the
// W3C trace context the wire envelope carries across remoting and the
// cluster (wire.Message.SetTraceContext: an envelope without one, from an
// earlier release, has no parent). Attributes: gen_ai.conversation.id (the
// scope), stateindex.operation, stateindex.request.id, and at the end
// stateindex.frame.id, stateindex.outcome, error.type and
// stateindex.version (the scope's version after it). A write's wait for
// the store is a child span, "StateIndex/store.append", from the batch's
// append to the store's answer (one per request of the batch, since
// requests share appends), with the batch's size and the sequence it was
// committed at.

// traceContext is the W3C propagator the wire envelope's fields carry.
var traceContext propagation.TraceContext

// spanNames are the span names per operation, built once.
var spanNames = func() [messages.NumOps]string {
	var n [messages.NumOps]string
	for _, op := range messages.Operations() {
		n[op.Op] = "StateIndex/" + op.Name
	}
	return n
}()

func (o *observer) startSpan(ctx context.Context, req messages.Request) trace.Span {
	name := "StateIndex/unknown"
	if op := req.Op(); op < messages.NumOps {
		name = spanNames[op]
	}
	attrs := make([]attribute.KeyValue, 2, 3)
	attrs[0], attrs[1] = attrScope.String(req.ScopeName()), attrOperation.String(req.Op().String())
	if id := req.Head().RequestID; id != "" {
		attrs = append(attrs, attrRequestID.String(id))
	}
	_, span := o.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	return span
}

func (o *observer) endSpan(r *reqObs, req messages.Request, reply messages.Reply, e *messages.Error) {
	span := r.span
	if span.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, 4)
		if f := requestFrame(req, reply); f != "" {
			attrs = append(attrs, attrFrame.String(f))
		}
		if v, ok := versionOf(reply); ok && e == nil {
			attrs = append(attrs, attrVersion.Int64(v))
		}
		if e != nil {
			attrs = append(attrs, attrOutcome.String("error"), attrErrorType.String(string(e.Code)))
			span.SetStatus(codes.Error, e.Message)
		} else {
			attrs = append(attrs, attrOutcome.String("ok"))
		}
		span.SetAttributes(attrs...)
	}
	span.End()
}

// startAppendSpans starts the append span of each write of a batch whose
// request is traced.
func (o *observer) startAppendSpans(b *batch) {
	for i := range b.items {
		r := b.items[i].to.obs
		if b.items[i].w == nil || r == nil || r.span == nil || !r.span.IsRecording() {
			continue
		}
		_, r.appendSpan = o.tracer.Start(trace.ContextWithSpan(context.Background(), r.span), "StateIndex/store.append",
			trace.WithSpanKind(trace.SpanKindInternal))
	}
}

// endAppendSpans ends them with the store's answer: the batch's size and
// the global sequence of its last record, or the error.
func endAppendSpans(b *batch, res eventstore.AppendResult, err error) {
	for i := range b.items {
		r := b.items[i].to.obs
		if r == nil || r.appendSpan == nil {
			continue
		}
		s := r.appendSpan
		r.appendSpan = nil
		if err != nil {
			s.SetStatus(codes.Error, err.Error())
		} else {
			s.SetAttributes(attribute.Int("stateindex.append.batch.writes", len(b.writes)), attribute.Int64("stateindex.store.last_seq", int64(res.LastSeq)))
		}
		s.End()
	}
}

// injectTrace makes a wire request carry ctx's span as its parent.
func injectTrace(ctx context.Context, msg any) {
	m, ok := msg.(*wire.Message)
	if !ok || !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	c := traceCarrier{}
	traceContext.Inject(ctx, &c)
	m.SetTraceContext(c.parent, c.state)
}

// extractTrace returns a context whose remote span is the parent a wire
// request carries (context.Background() when it carries none).
func extractTrace(m *wire.Message) context.Context {
	parent, state := m.TraceContext()
	if parent == "" {
		return context.Background()
	}
	return traceContext.Extract(context.Background(), &traceCarrier{parent: parent, state: state})
}

// traceCarrier holds the two W3C headers (propagation.TextMapCarrier).
type traceCarrier struct{ parent, state string }

func (c *traceCarrier) Get(key string) string {
	switch key {
	case "traceparent":
		return c.parent
	case "tracestate":
		return c.state
	}
	return ""
}

func (c *traceCarrier) Set(key, value string) {
	switch key {
	case "traceparent":
		c.parent = value
	case "tracestate":
		c.state = value
	}
}

func (c *traceCarrier) Keys() []string { return []string{"traceparent", "tracestate"} }

// Where a request or reply keeps its frame id and a reply its version,
// found once per type: spans and log lines read them by reflection, which
// only a traced or logged request pays for.
type msgFields struct {
	frame   []int // FrameID, nil when the type has none
	version []int // Result.Version
}

var fieldsOf = func() map[reflect.Type]msgFields {
	out := map[reflect.Type]msgFields{}
	add := func(v any) {
		t := reflect.TypeOf(v).Elem()
		var f msgFields
		if sf, ok := t.FieldByName("FrameID"); ok && sf.Type.Kind() == reflect.String {
			f.frame = sf.Index
		}
		if rf, ok := t.FieldByName("Result"); ok && rf.Anonymous {
			if vf, ok := rf.Type.FieldByName("Version"); ok && vf.Type.Kind() == reflect.Int64 {
				f.version = append(append([]int(nil), rf.Index...), vf.Index...)
			}
		}
		out[reflect.TypeOf(v)] = f
	}
	for _, op := range messages.Operations() {
		add(op.NewRequest())
		add(op.NewReply())
	}
	return out
}()

// requestFrame is the frame a request concerns: the reply's (a pushed frame's
// id), else the request's ("" when it names none: the top of the stack).
func requestFrame(req messages.Request, reply messages.Reply) string {
	if s := stringField(reply, func(f msgFields) []int { return f.frame }); s != "" {
		return s
	}
	return stringField(req, func(f msgFields) []int { return f.frame })
}

func stringField(v any, path func(msgFields) []int) string {
	f, ok := fieldsOf[reflect.TypeOf(v)]
	if !ok || path(f) == nil {
		return ""
	}
	rv := reflect.ValueOf(v)
	if rv.IsNil() {
		return ""
	}
	return rv.Elem().FieldByIndex(path(f)).String()
}

// versionOf is the scope's version a reply reports.
func versionOf(reply messages.Reply) (int64, bool) {
	f, ok := fieldsOf[reflect.TypeOf(reply)]
	if !ok || f.version == nil {
		return 0, false
	}
	rv := reflect.ValueOf(reply)
	if rv.IsNil() {
		return 0, false
	}
	return rv.Elem().FieldByIndex(f.version).Int(), true
}
