package actors_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// Counters that are easy to check: n tokens per byte.
func perByte(n int64) compaction.Counter {
	return compaction.CounterFunc(func(s string) int64 { return n * int64(len(s)) })
}

// blocker makes a counter stop on content holding the marker until the test
// releases it: entered says a count has stopped there.
type blocker struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
	counted atomic.Int64 // texts counted
}

// free releases every count held, once (also when a test fails first).
func (b *blocker) free() { b.once.Do(func() { close(b.release) }) }

const marker = "«hold»"

func newBlocker(t *testing.T) *blocker {
	b := &blocker{entered: make(chan struct{}, 64), release: make(chan struct{})}
	t.Cleanup(b.free)
	return b
}

func (b *blocker) wrap(c compaction.Counter) compaction.Counter {
	return compaction.CounterFunc(func(s string) int64 {
		b.counted.Add(1)
		if strings.Contains(s, marker) {
			b.entered <- struct{}{}
			<-b.release
		}
		return c.Count(s)
	})
}

// logWatch is a logger that hands its messages to a channel, so that a
// test can wait for "recounted" without sleeping.
type logWatch struct {
	msgs chan string
}

func (w *logWatch) Enabled(context.Context, slog.Level) bool { return true }
func (w *logWatch) Handle(_ context.Context, r slog.Record) error {
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool {
		msg += " " + a.Key + "=" + a.Value.String()
		return true
	})
	select {
	case w.msgs <- msg:
	default:
	}
	return nil
}
func (w *logWatch) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *logWatch) WithGroup(string) slog.Handler      { return w }

func newLogWatch() *logWatch { return &logWatch{msgs: make(chan string, 1024)} }

// await returns the first message that contains want and all of attrs.
func (w *logWatch) await(t *testing.T, want string, attrs ...string) string {
	t.Helper()
	limit := time.After(time.Minute) // a bound on a broken test, not a wait
	for {
		select {
		case m := <-w.msgs:
			ok := strings.Contains(m, want)
			for _, a := range attrs {
				ok = ok && strings.Contains(m, a)
			}
			if ok {
				return m
			}
		case <-limit:
			t.Fatalf("no log line with %q %q", want, attrs)
			return ""
		}
	}
}

func pack(t *testing.T, c *actors.Client, scope, frame string) *messages.ContextPack {
	t.Helper()
	p, err := c.AssembleContextPack(ctx, &messages.AssembleContextPack{Header: messages.Header{Scope: scope}, FrameID: frame, BudgetTokens: 100_000})
	require.NoError(t, err)
	return p
}

func segmentTokens(p *messages.ContextPack) map[string]int64 {
	out := map[string]int64{}
	for _, s := range p.Segments {
		out[s.HandleID] = s.Tokens
	}
	return out
}

// counterEvents counts the scope.counter_changed records of scope.
func counterEvents(t *testing.T, e *env, scope string) []*frames.CounterChanged {
	t.Helper()
	var out []*frames.CounterChanged
	require.NoError(t, e.store.ReadStream(ctx, scope, 1, func(r eventstore.Record) error {
		if r.Type == frames.TypeCounterChanged {
			ev, err := eventstore.DecodeFrameEvent(r)
			require.NoError(t, err)
			out = append(out, ev.(*frames.CounterChanged))
		}
		return nil
	}))
	return out
}

func TestCountersPerScopePrefix(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) {
		c.Counters = []actors.CounterRule{
			{Prefix: "agents:", Name: "double", Counter: perByte(2)},
			{Prefix: "agents:deep:", Name: "triple", Counter: perByte(3)},
		}
	})
	content := "twelve bytes" // 12 bytes: the estimate says 3
	for _, tc := range []struct {
		scope, counter string
		tokens         int64
	}{
		{"agents:a", "double", 24},
		{"agents:deep:b", "triple", 36},
		{"other", "estimate_bytes_div_4", 3},
	} {
		t.Run(tc.scope, func(t *testing.T) {
			f := push(t, e.c, tc.scope, "", 10_000)
			r, err := e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut(tc.scope), FrameID: f, Priority: compaction.Medium, Content: content})
			require.NoError(t, err)
			assert.Equal(t, tc.tokens, r.Tokens, "the longest matching prefix's counter")
			p := pack(t, e.c, tc.scope, f)
			assert.Equal(t, tc.counter, p.Metadata.Counter)
			assert.Empty(t, p.Metadata.Recounting)
			assert.Equal(t, tc.tokens, segmentTokens(p)[r.HandleID])
			assert.Equal(t, tc.tokens, e.readFrame(tc.scope).Frame.ContextTokens)
			st := mustLoad(t, e, tc.scope)
			assert.Equal(t, tc.counter, st.CounterOf())
		})
	}
	assert.Empty(t, counterEvents(t, e, "other"), "the estimate, as every scope had, writes no event")
	assert.Len(t, counterEvents(t, e, "agents:a"), 1, "one event before the scope's first counted handle")
}

func TestBadCounterRulesAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		rule actors.CounterRule
	}{
		{"no name", actors.CounterRule{Prefix: "a/", Counter: perByte(1)}},
		{"no counter", actors.CounterRule{Prefix: "a/", Name: "x"}},
		{"an unprintable name", actors.CounterRule{Prefix: "a/", Name: "my counter", Counter: perByte(1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(newFakeClock())
			cfg.Counters = []actors.CounterRule{tc.rule}
			sys := quietSystem()
			defer sys.Shutdown()
			_, err := actors.Start(sys, eventstore.NewMemory(), cfg)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "Counters[0]")
		})
	}
}

// seedScope makes a scope with three handles under the estimate (one a
// finished tool call's pair) and returns its frame and handle ids.
func seedScope(t *testing.T, c *actors.Client, scope string, contents ...string) (string, []string) {
	t.Helper()
	f := push(t, c, scope, "", 1_000_000)
	var ids []string
	for _, s := range contents {
		ids = append(ids, addHandle(t, c, scope, f, compaction.Medium, s))
	}
	_, err := c.StartToolCall(ctx, &messages.StartToolCall{Header: mut(scope), FrameID: f, CallID: "call-1", Name: "grep", Input: []byte(`{"q":"x"}`)})
	require.NoError(t, err)
	_, err = c.FinishToolCall(ctx, &messages.FinishToolCall{Header: mut(scope), FrameID: f, CallID: "call-1", Output: "found it"})
	require.NoError(t, err)
	return f, ids
}

// Changing the configured counter across a restart recounts the live
// handles in the background: the event is in the log, the frame's tokens
// and the packs' counter follow.
func TestRecountWhenTheConfiguredCounterChanges(t *testing.T) {
	e := newEnv(t)
	f, ids := seedScope(t, e.c, "s", "first handle", "second handle, longer")
	before := e.readFrame("s").Frame
	assert.Equal(t, "estimate_bytes_div_4", pack(t, e.c, "s", f).Metadata.Counter)

	logs := newLogWatch()
	e.cfg.Counter, e.cfg.CounterName = perByte(2), "double"
	e.cfg.Logger = slog.New(logs)
	e.restart()
	e.readFrame("s") // loads the scope: the recount starts
	logs.await(t, "recounting a scope's handles", "scope=s", "from=estimate_bytes_div_4", "to=double", "handles=4")
	logs.await(t, "recounted a scope's handles", "scope=s", "to=double", "handles=4", "ms=")

	after := e.readFrame("s").Frame
	var sum int64
	for i, h := range after.Handles {
		assert.Equal(t, 2*int64(len(h.Content)), h.Tokens, "handle %s", h.ID)
		assert.Equal(t, before.Handles[i].ID, h.ID)
		sum += h.Tokens
	}
	assert.Equal(t, sum, after.ContextTokens)
	evs := counterEvents(t, e, "s")
	require.Len(t, evs, 1)
	assert.Equal(t, "estimate_bytes_div_4", evs[0].From)
	assert.Len(t, evs[0].Counts, 4)
	p := pack(t, e.c, "s", f)
	assert.Equal(t, "double", p.Metadata.Counter)
	assert.Equal(t, 2*int64(len("first handle")), segmentTokens(p)[ids[0]])

	// A handle added now is counted under the new counter, off the shard.
	r, err := e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut("s"), FrameID: f, Priority: compaction.Medium, Content: "abc"})
	require.NoError(t, err)
	assert.Equal(t, int64(6), r.Tokens)

	// The state folds from the log to the same thing (replay agrees).
	e.restart()
	assert.Equal(t, e.readFrame("s").Frame.ContextTokens, sum+6)
	assert.Len(t, counterEvents(t, e, "s"), 1, "nothing to recount after a restart")
}

// A pack asked for while a recount is in flight is built under the old
// counter for every handle and says what the recount moves to.
func TestPackDuringRecountUsesTheOldCounter(t *testing.T) {
	e := newEnv(t)
	f, ids := seedScope(t, e.c, "s", "plain", "held "+marker)
	b := newBlocker(t)
	logs := newLogWatch()
	e.cfg.Counter, e.cfg.CounterName = b.wrap(perByte(2)), "double"
	e.cfg.Logger = slog.New(logs)
	e.restart()
	e.readFrame("s")
	<-b.entered // the recount is counting, stopped at the held handle

	p := pack(t, e.c, "s", f)
	assert.Equal(t, "estimate_bytes_div_4", p.Metadata.Counter)
	assert.Equal(t, "double", p.Metadata.Recounting)
	for _, s := range p.Segments {
		assert.Equal(t, compaction.EstimateCounter{}.Count(s.Content), s.Tokens, "segment %s under the estimate", s.HandleID)
	}
	// A handle added meanwhile is counted under the old counter too.
	r, err := e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut("s"), FrameID: f, Priority: compaction.Medium, Content: "added meanwhile"})
	require.NoError(t, err)
	assert.Equal(t, compaction.EstimateCounter{}.Count("added meanwhile"), r.Tokens)

	b.free()
	logs.await(t, "recounted a scope's handles", "scope=s", "handles=5")
	p = pack(t, e.c, "s", f)
	assert.Equal(t, "double", p.Metadata.Counter)
	assert.Empty(t, p.Metadata.Recounting)
	for _, s := range p.Segments {
		assert.Equal(t, 2*int64(len(s.Content)), s.Tokens, "segment %s under the new counter", s.HandleID)
	}
	assert.Equal(t, 2*int64(len("added meanwhile")), segmentTokens(p)[r.HandleID], "the handle added meanwhile was counted at the write")
	assert.Contains(t, segmentTokens(p), ids[1])
}

// Content is counted off the shard's goroutine: while scope A's count is
// held, scope B on the same shard is answered, and A's later request waits
// its turn.
func TestCountingIsOffTheShardGoroutine(t *testing.T) {
	b := newBlocker(t)
	e := newEnv(t, func(c *actors.Config) { c.Counter, c.CounterName = b.wrap(perByte(2)), "double" })
	a := "scope-a"
	var other string
	for i := 0; other == ""; i++ {
		if s := "scope-b" + string(rune('a'+i%26)) + strings.Repeat("x", i/26); actors.ShardOf(s, e.cfg.Shards) == actors.ShardOf(a, e.cfg.Shards) {
			other = s
		}
	}
	fa := push(t, e.c, a, "", 100_000)
	fb := push(t, e.c, other, "", 100_000)

	added := make(chan *messages.AddContextHandleReply, 1)
	go func() {
		r, err := e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut(a), FrameID: fa, Priority: compaction.Medium, Content: "big " + marker})
		assert.NoError(t, err)
		added <- r
	}()
	<-b.entered // A's content is being counted
	read := make(chan *messages.GetFrameReply, 1)
	go func() {
		g, err := e.c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: a}, WithHandles: true})
		assert.NoError(t, err)
		read <- g
	}()

	r, err := e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut(other), FrameID: fb, Priority: compaction.Medium, Content: "small"})
	require.NoError(t, err, "scope B on A's shard is answered while A's count is held")
	assert.Equal(t, int64(10), r.Tokens)

	b.free()
	ra := <-added
	assert.Equal(t, 2*int64(len("big "+marker)), ra.Tokens)
	g := <-read
	require.Len(t, g.Frame.Handles, 1, "A's read waited for A's write")
	assert.Equal(t, ra.HandleID, g.Frame.Handles[0].ID)
}

// A repeat of a request counted off the shard is answered from the log.
func TestCountedRequestRepeatIsAnsweredFromTheLog(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) { c.Counter, c.CounterName = perByte(2), "double" })
	f := push(t, e.c, "s", "", 100_000)
	req := &messages.AddContextHandle{Header: messages.Header{Scope: "s", RequestID: actors.NewRequestID()}, FrameID: f, Priority: compaction.Medium, Content: "hello"}
	r1, err := e.c.AddContextHandle(ctx, req)
	require.NoError(t, err)
	v := e.version("s")
	r2, err := e.c.AddContextHandle(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, r1, r2)
	assert.Equal(t, v, e.version("s"), "nothing appended")
}

// A scope counted under a counter this server does not know is recounted
// before anything is served, and says so.
func TestUnknownCounterIsRecountedBeforeServing(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) { c.Counter, c.CounterName = perByte(2), "double" })
	f, _ := seedScope(t, e.c, "s", "one", "two two")
	logs := newLogWatch()
	e.cfg.Counter, e.cfg.CounterName = perByte(3), "triple" // "double" is unknown now
	e.cfg.Logger = slog.New(logs)
	e.restart()
	p := pack(t, e.c, "s", f)
	assert.Equal(t, "triple", p.Metadata.Counter, "the first request is served after the recount")
	assert.Empty(t, p.Metadata.Recounting)
	for _, s := range p.Segments {
		assert.Equal(t, 3*int64(len(s.Content)), s.Tokens)
	}
	logs.await(t, "unknown to this server", "scope=s", "from=double", "to=triple")
	require.Len(t, counterEvents(t, e, "s"), 2)
}

// A write that waits for its scope's recount (the scope's counter unknown
// to the server) is applied and answered once the recount is written: the
// recount's append is followed by the write's own, not by an empty reply.
// Under the estimate the write is decided on the shard at once (no
// counting job), so it comes straight after the recount's write.
func TestUnknownCounterIsRecountedBeforeAWrite(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) { c.Counter, c.CounterName = perByte(2), "double" })
	f, _ := seedScope(t, e.c, "s", "one", "two two")
	before := e.readFrame("s").Version
	e.cfg.Counter, e.cfg.CounterName = nil, "" // the estimate; "double" is unknown now
	e.restart()
	r, err := e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut("s"), FrameID: f, HandleID: "h-three",
		Kind: "note", Priority: compaction.Medium, Content: "three"})
	require.NoError(t, err)
	require.NotNil(t, r)
	assert.Equal(t, before+2, r.Version, "the recount's scope.counter_changed, then the handle")
	assert.Equal(t, "h-three", r.HandleID)
	require.Len(t, counterEvents(t, e, "s"), 2)
	// The scope serves on: the next write follows the first.
	r2, err := e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut("s"), FrameID: f, Kind: "note",
		Priority: compaction.Medium, Content: "four"})
	require.NoError(t, err)
	assert.Equal(t, before+3, r2.Version)
	assert.Equal(t, frames.EstimateCounterName, pack(t, e.c, "s", f).Metadata.Counter)
}

// A restart while a recount is counting starts it over and ends with one
// consistent change.
func TestRestartMidRecountEndsConsistent(t *testing.T) {
	e := newEnv(t)
	f, _ := seedScope(t, e.c, "s", "alpha", "beta "+marker)
	b := newBlocker(t)
	logs := newLogWatch()
	e.cfg.Counter, e.cfg.CounterName = b.wrap(perByte(2)), "double"
	e.cfg.Logger = slog.New(logs)
	e.restart()
	e.readFrame("s")
	<-b.entered
	assert.Empty(t, counterEvents(t, e, "s"), "the recount's count is held: nothing was written")
	e.stop()
	b.free() // the old server's count ends into nothing
	e.start()
	e.readFrame("s")
	logs.await(t, "recounted a scope's handles", "scope=s")
	evs := counterEvents(t, e, "s")
	require.Len(t, evs, 1)
	st := mustLoad(t, e, "s")
	fr := st.Frame(f)
	var sum int64
	for _, h := range fr.Handles {
		assert.Equal(t, 2*int64(len(h.Content)), h.Tokens)
		sum += h.Tokens
	}
	assert.Equal(t, sum, fr.ContextTokens)
	assert.Equal(t, "double", st.Counter)
	require.NoError(t, frames.CheckInvariants(st))
}

// The state's counter survives a snapshot, and a snapshot written before
// the field existed reads as the estimate.
func TestSnapshotKeepsTheCounter(t *testing.T) {
	st := frames.NewState("s", 0)
	st.Counter = "o200k_base"
	snap, err := eventstore.EncodeState(st)
	require.NoError(t, err)
	back, ok, err := eventstore.DecodeState("s", snap)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "o200k_base", back.Counter)

	st.Counter = ""
	snap, err = eventstore.EncodeState(st)
	require.NoError(t, err)
	assert.NotContains(t, string(snap.Data), "cn", "omitted when empty: older snapshots are byte-for-byte what they were")
	back, _, err = eventstore.DecodeState("s", snap)
	require.NoError(t, err)
	assert.Equal(t, frames.EstimateCounterName, back.CounterOf())
}

// ResumeChain's user message is a handle added: under a real counter it is
// counted off the shard's goroutine (with the finished head's read), once —
// the decide takes the counts, it does not count again — and another scope
// of the shard is answered meanwhile.
func TestResumeChainCountsItsMessageOffTheShard(t *testing.T) {
	b := newBlocker(t)
	var markerCounts atomic.Int64
	blocking := b.wrap(perByte(2))
	counter := compaction.CounterFunc(func(s string) int64 {
		if strings.Contains(s, marker) {
			markerCounts.Add(1)
		}
		return blocking.Count(s)
	})
	e := newEnv(t, func(c *actors.Config) { c.Counter, c.CounterName = counter, "double" })
	a := "resume-a"
	var other string
	for i := 0; other == ""; i++ {
		if s := "resume-b" + string(rune('a'+i%26)) + strings.Repeat("x", i/26); actors.ShardOf(s, e.cfg.Shards) == actors.ShardOf(a, e.cfg.Shards) {
			other = s
		}
	}
	fa := push(t, e.c, a, "", 100_000)
	_, err := e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut(a), FrameID: fa, Role: "user", Priority: compaction.Medium, Content: "do it"})
	require.NoError(t, err)
	_, err = e.c.PopFrame(ctx, &messages.PopFrame{Header: mut(a), FrameID: fa, Status: frames.StatusCompleted})
	require.NoError(t, err)
	fb := push(t, e.c, other, "", 100_000)

	msg := "again, please " + marker
	resumed := make(chan *messages.ResumeChainReply, 1)
	go func() {
		r, err := e.c.ResumeChain(ctx, &messages.ResumeChain{Header: mut(a), ChainID: fa, Message: msg, Budget: budget.TokenBudget{Total: 10_000}})
		assert.NoError(t, err)
		resumed <- r
	}()
	<-b.entered // the message is being counted, off the shard
	r, err := e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut(other), FrameID: fb, Priority: compaction.Medium, Content: "small"})
	require.NoError(t, err, "another scope of the shard is answered while the message is counted")
	assert.Equal(t, int64(10), r.Tokens)
	b.free()
	rr := <-resumed
	require.NotNil(t, rr)
	g, err := e.c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: a}, FrameID: rr.FrameID, WithHandles: true})
	require.NoError(t, err)
	var got *frames.ContextHandle
	for i := range g.Frame.Handles {
		if g.Frame.Handles[i].ID == rr.MessageID {
			got = &g.Frame.Handles[i]
		}
	}
	require.NotNil(t, got)
	assert.Equal(t, frames.RoleUser, got.Role)
	assert.Equal(t, 2*int64(len(msg)), got.Tokens)
	assert.Equal(t, int64(2), markerCounts.Load(), "counted once as is and once light, in the job; never again on the shard")
}
