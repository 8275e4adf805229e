package frames_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/frames"
)

// world drives Decide and Apply like the shell does, checking invariants
// after every Apply and keeping the log for replay.
type world struct {
	t    *testing.T
	cfg  frames.Config
	s    *frames.State
	hist *frames.LogHistory // what the store's index answers in the shell
	log  []frames.Event
	now  int64
	n    int
}

func newWorld(t *testing.T) *world {
	w := &world{t: t, cfg: frames.DefaultConfig(), now: 1_000}
	w.setState(frames.NewState("agent-1", 0))
	return w
}

// setState starts the world over from s (an empty scope).
func (w *world) setState(s *frames.State) {
	w.s, w.hist, w.log = s, frames.NewLogHistory(), nil
	s.SetHistory(w.hist)
}

func (w *world) hdr() frames.Header {
	w.now += 10
	w.n++
	return frames.Header{RequestID: fmt.Sprintf("req-%d", w.n), RequestHash: []byte{byte(w.n)}, Now: w.now}
}

func (w *world) mint() frames.Mint {
	w.n++
	return frames.Mint{TokenID: fmt.Sprintf("tok-%d", w.n), ExpiresAt: w.now + 1_000_000}
}

// do decides and applies cmd; it returns the decision error.
func (w *world) do(cmd frames.Command) ([]frames.Event, error) {
	w.t.Helper()
	before := w.s.Clone()
	evs, err := frames.Decide(w.cfg, w.s, cmd)
	require.True(w.t, reflect.DeepEqual(before, w.s.Clone()), "Decide changed the state")
	if err != nil {
		return nil, err
	}
	for _, e := range evs {
		require.NoError(w.t, frames.Apply(w.s, e), "%s", e.EventType())
		require.NoError(w.t, frames.CheckInvariants(w.s), "after %s", e.EventType())
		w.hist.Add(w.s.Version, e)
	}
	w.log = append(w.log, evs...)
	return evs, nil
}

func (w *world) must(cmd frames.Command) []frames.Event {
	w.t.Helper()
	evs, err := w.do(cmd)
	require.NoError(w.t, err)
	return evs
}

func (w *world) push(id, parent string, total int64) {
	w.t.Helper()
	w.must(&frames.PushFrame{Header: w.hdr(), FrameID: id, ParentID: parent, Goal: "goal " + id, Budget: budget.TokenBudget{Total: total}})
}

func (w *world) replay() *frames.State {
	s := frames.NewState(w.s.Scope, w.s.Horizon)
	s.SetHorizon(w.s.Horizon, w.s.Skew)
	for _, e := range w.log {
		require.NoError(w.t, frames.Apply(s, e))
	}
	return s
}

func TestBudgetPropagationThroughFrames(t *testing.T) {
	w := newWorld(t)
	w.push("root", "", 8000)
	w.must(&frames.UpdateFrame{Header: w.hdr(), FrameID: "root", ReserveDelta: 500}) // brief context
	w.must(&frames.UpdateFrame{Header: w.hdr(), FrameID: "root", ReserveDelta: 200}) // breadcrumbs
	w.push("child", "root", 3000)
	w.must(&frames.RecordUsage{Header: w.hdr(), FrameID: "root", Cost: budget.Cost{InputTokens: 1500, OutputTokens: 500}})

	root := w.s.Frame("root")
	assert.Equal(t, int64(2300), root.Budget.Available(), "available for evidence")
	assert.Equal(t, frames.StatusWaiting, root.Status)
	assert.Equal(t, "child", w.s.TopOfStack().ID)

	w.must(&frames.RecordUsage{Header: w.hdr(), FrameID: "child", Cost: budget.Cost{InputTokens: 2000, OutputTokens: 500, Turns: 2, SpendMicros: 7}})
	evs := w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "child", Status: frames.StatusCompleted})
	require.Len(t, evs, 1)
	p := evs[0].(*frames.FramePopped)
	assert.Equal(t, int64(3000), p.Released)
	assert.Equal(t, int64(2500), p.ChargedTokens)
	assert.Equal(t, frames.ReasonUserMessage, p.Reason)

	assert.Equal(t, int64(0), root.Budget.SubcallAllocation)
	assert.Equal(t, int64(4500), root.Budget.Used)
	assert.Equal(t, int64(2800), root.Budget.Available(), "child used 2500 of 3000 and returned 500")
	assert.Equal(t, int64(2), root.Cost.Turns, "child's turns roll up")
	assert.Equal(t, int64(7), root.Cost.SpendMicros)
	assert.Equal(t, frames.StatusActive, root.Status)

	evs = w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "root", Status: frames.StatusCompleted})
	assert.Equal(t, frames.ReasonRunFinished, evs[0].EventMeta().Reason, "popping a root finishes the run")
	assert.Nil(t, w.s.TopOfStack())
}

func TestDepthLimit(t *testing.T) {
	w := newWorld(t)
	w.must(&frames.PushFrame{Header: w.hdr(), FrameID: "f0", Goal: "g", Budget: budget.TokenBudget{Total: 100, MaxSubframeDepth: 2}})
	w.push("f1", "f0", 10)
	w.push("f2", "f1", 5)
	_, err := w.do(&frames.PushFrame{Header: w.hdr(), FrameID: "f3", ParentID: "f2", Goal: "g"})
	assert.ErrorIs(t, err, frames.ErrMaxDepthExceeded)

	// A child cannot raise the limit it inherited.
	w2 := newWorld(t)
	w2.must(&frames.PushFrame{Header: w2.hdr(), FrameID: "r", Goal: "g", Budget: budget.TokenBudget{Total: 10, MaxSubframeDepth: 1}})
	w2.must(&frames.PushFrame{Header: w2.hdr(), FrameID: "c", ParentID: "r", Goal: "g", Budget: budget.TokenBudget{MaxSubframeDepth: 50}})
	assert.Equal(t, int64(1), w2.s.Frame("c").Budget.MaxSubframeDepth)

	// The server's limit applies too.
	w3 := newWorld(t)
	w3.cfg.MaxDepth = 1
	w3.push("r", "", 10)
	w3.push("c", "r", 0)
	_, err = w3.do(&frames.PushFrame{Header: w3.hdr(), FrameID: "gc", ParentID: "c", Goal: "g"})
	assert.ErrorIs(t, err, frames.ErrMaxDepthExceeded)
}

func TestCascadePop(t *testing.T) {
	w := newWorld(t)
	w.push("r", "", 1000)
	w.push("a", "r", 400)
	w.push("a1", "a", 100)
	w.push("b", "r", 300)
	w.must(&frames.RecordUsage{Header: w.hdr(), FrameID: "a1", Cost: budget.Cost{OutputTokens: 60}})

	_, err := w.do(&frames.PopFrame{Header: w.hdr(), FrameID: "a", Status: frames.StatusCompleted})
	assert.ErrorIs(t, err, frames.ErrLiveChildren)

	evs := w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "r", Status: frames.StatusFailed, Cascade: true})
	var order []string
	for _, e := range evs {
		order = append(order, e.EventMeta().Frame+":"+e.(*frames.FramePopped).Status.String())
	}
	assert.Equal(t, []string{"a1:cancelled", "a:cancelled", "b:cancelled", "r:failed"}, order)
	assert.Nil(t, w.s.Frame("r"), "a finished frame leaves the projection")
	final := evs[3].(*frames.FramePopped).Final
	require.NotNil(t, final)
	assert.Equal(t, int64(60), final.Budget.Used, "grandchild usage rolled up through a")
	assert.Equal(t, int64(0), final.Budget.SubcallAllocation)
	assert.Equal(t, frames.StatusFailed, final.Status)
	assert.Equal(t, int64(3), final.Cost.Spawns)
	assert.Equal(t, int64(2), final.Kids)
	assert.Empty(t, w.s.Frames)
	assert.Equal(t, int64(4), w.s.Finished)
}

func TestLimitSuspendsInsteadOfFailing(t *testing.T) {
	w := newWorld(t)
	w.must(&frames.PushFrame{Header: w.hdr(), FrameID: "r", Goal: "g", Budget: budget.TokenBudget{Total: 10_000},
		Limits: budget.Limits{SpendMicros: 1_000_000, Turns: 10}})
	m := w.mint()
	evs := w.must(&frames.RecordUsage{Header: w.hdr(), FrameID: "r", Cost: budget.Cost{Turns: 1, SpendMicros: 1_050_000}, Mint: m})
	require.Len(t, evs, 2)
	f := w.s.Frame("r")
	assert.Equal(t, frames.StatusSuspended, f.Status)
	assert.Equal(t, frames.SuspendLimit, f.Suspension.Reason)
	assert.Equal(t, &budget.Violation{Code: budget.SpendExceeded, Current: 1_050_000, Max: 1_000_000}, f.Suspension.Limit)
	assert.Equal(t, int64(1_050_000), f.Cost.SpendMicros, "the usage itself is recorded")
	assert.Equal(t, m.TokenID, f.Suspension.TokenID)
	assert.Equal(t, frames.PendingSuspended, w.s.Pending()[0].Kind)

	// A usage that crosses a limit with no token minted is refused whole.
	w2 := newWorld(t)
	w2.must(&frames.PushFrame{Header: w2.hdr(), FrameID: "r", Goal: "g", Limits: budget.Limits{Turns: 1}})
	_, err := w2.do(&frames.RecordUsage{Header: w2.hdr(), FrameID: "r", Cost: budget.Cost{Turns: 2}})
	assert.ErrorIs(t, err, frames.ErrInvalidID)

	// A child's pop can push its parent over a limit.
	w3 := newWorld(t)
	w3.must(&frames.PushFrame{Header: w3.hdr(), FrameID: "r", Goal: "g", Budget: budget.TokenBudget{Total: 100}, Limits: budget.Limits{Tokens: 50}})
	w3.push("c", "r", 100)
	w3.must(&frames.RecordUsage{Header: w3.hdr(), FrameID: "c", Cost: budget.Cost{InputTokens: 80}})
	w3.must(&frames.PopFrame{Header: w3.hdr(), FrameID: "c", Status: frames.StatusCompleted, Mint: w3.mint()})
	assert.Equal(t, budget.TokensExceeded, w3.s.Frame("r").Suspension.Limit.Code)

	// Spawns are refused before they happen.
	w4 := newWorld(t)
	w4.must(&frames.PushFrame{Header: w4.hdr(), FrameID: "r", Goal: "g", Limits: budget.Limits{Spawns: 1}})
	w4.push("c1", "r", 0)
	_, err = w4.do(&frames.PushFrame{Header: w4.hdr(), FrameID: "c2", ParentID: "r", Goal: "g"})
	var v *budget.Violation
	require.ErrorAs(t, err, &v)
	assert.Equal(t, budget.SpawnsExceeded, v.Code)
}

func TestSuspendResume(t *testing.T) {
	w := newWorld(t)
	w.push("r", "", 100)
	w.push("c", "r", 10)
	m := w.mint()
	w.must(&frames.SuspendFrame{Header: w.hdr(), FrameID: "r", Reason: frames.SuspendApproval, Note: "needs a human", Mint: m})
	_, err := w.do(&frames.SuspendFrame{Header: w.hdr(), FrameID: "r", Reason: frames.SuspendApproval, Mint: w.mint()})
	assert.ErrorIs(t, err, frames.ErrNotSuspendable)

	_, err = w.do(&frames.ResumeFrame{Header: w.hdr(), FrameID: "c", TokenID: m.TokenID})
	assert.ErrorIs(t, err, frames.ErrTokenUnknown, "another frame's token is unknown")
	_, err = w.do(&frames.ResumeFrame{Header: w.hdr(), FrameID: "r", TokenID: "nope"})
	assert.ErrorIs(t, err, frames.ErrTokenUnknown)

	late := w.hdr()
	late.Now = m.ExpiresAt + 1
	_, err = w.do(&frames.ResumeFrame{Header: late, FrameID: "r", TokenID: m.TokenID})
	assert.ErrorIs(t, err, frames.ErrTokenExpired)

	w.must(&frames.ResumeFrame{Header: w.hdr(), FrameID: "r", TokenID: m.TokenID})
	assert.Equal(t, frames.StatusWaiting, w.s.Frame("r").Status, "back to waiting: it has a live child")
	_, err = w.do(&frames.ResumeFrame{Header: w.hdr(), FrameID: "r", TokenID: m.TokenID})
	assert.ErrorIs(t, err, frames.ErrTokenUsed)

	_, err = w.do(&frames.ResumeFrame{Header: w.hdr(), FrameID: "c", TokenID: "x"})
	assert.ErrorIs(t, err, frames.ErrTokenUnknown)
	m2 := w.mint()
	w.must(&frames.SuspendFrame{Header: w.hdr(), FrameID: "c", Reason: frames.SuspendError, Mint: m2})
	w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "c", Status: frames.StatusCancelled})
	_, err = w.do(&frames.ResumeFrame{Header: w.hdr(), FrameID: "c", TokenID: m2.TokenID})
	assert.ErrorIs(t, err, frames.ErrNotSuspended)
}

func TestToolCallsAndPending(t *testing.T) {
	w := newWorld(t)
	w.push("r", "", 100)
	w.push("c", "r", 10)
	w.must(&frames.StartToolCall{Header: w.hdr(), FrameID: "c", CallID: "call-1", Name: "search", Input: []byte(`{"q":"x"}`)})
	w.must(&frames.StartToolCall{Header: w.hdr(), FrameID: "c", CallID: "call-2", Name: "fetch"})
	_, err := w.do(&frames.StartToolCall{Header: w.hdr(), FrameID: "c", CallID: "call-1", Name: "search"})
	assert.ErrorIs(t, err, frames.ErrDuplicateID)

	evs := w.must(&frames.FinishToolCall{Header: w.hdr(), FrameID: "c", CallID: "call-1",
		CallHandle:   frames.ContextHandle{ID: "h-call", Kind: "tool_call", Priority: compaction.Medium, Content: "search x", Tokens: 2},
		ResultHandle: frames.ContextHandle{ID: "h-res", Kind: "tool_result", Priority: compaction.Medium, Content: "found", Tokens: 2}})
	assert.Equal(t, frames.ReasonToolResultsCommitted, evs[0].EventMeta().Reason)
	f := w.s.Frame("c")
	assert.Equal(t, "call-1", f.Handle("h-call").Group)
	assert.Equal(t, "call-1", f.Handle("h-res").Group)
	assert.Equal(t, int64(4), f.ContextTokens)

	_, err = w.do(&frames.FinishToolCall{Header: w.hdr(), FrameID: "c", CallID: "call-1",
		CallHandle:   frames.ContextHandle{ID: "a", Priority: compaction.Medium},
		ResultHandle: frames.ContextHandle{ID: "b", Priority: compaction.Medium}})
	assert.ErrorIs(t, err, frames.ErrToolCallFinished)
	_, err = w.do(&frames.FinishToolCall{Header: w.hdr(), FrameID: "c", CallID: "nope",
		CallHandle:   frames.ContextHandle{ID: "a", Priority: compaction.Medium},
		ResultHandle: frames.ContextHandle{ID: "b", Priority: compaction.Medium}})
	assert.ErrorIs(t, err, frames.ErrToolCallUnknown)

	pending := w.s.Pending()
	require.Len(t, pending, 2)
	assert.Equal(t, frames.PendingWaitingForSubcall, pending[0].Kind)
	assert.Equal(t, "r", pending[0].FrameID)
	assert.Equal(t, frames.PendingToolInDoubt, pending[1].Kind)
	assert.Equal(t, "call-2", pending[1].ToolCallID)

	// Compaction never separates a call from its result, nor drops Critical.
	w.must(&frames.AddContextHandle{Header: w.hdr(), FrameID: "c", Handle: frames.ContextHandle{ID: "sys", Priority: compaction.Critical, Content: "be brief", Tokens: 2}})
	_, err = w.do(&frames.CompactContext{Header: w.hdr(), FrameID: "c", Removed: []string{"h-res"}})
	assert.ErrorIs(t, err, frames.ErrSplitGroup)
	_, err = w.do(&frames.CompactContext{Header: w.hdr(), FrameID: "c", Removed: []string{"sys"}})
	assert.ErrorIs(t, err, frames.ErrCriticalHandle)
	w.must(&frames.CompactContext{Header: w.hdr(), FrameID: "c", Strategy: "priority_based", Removed: []string{"h-res", "h-call"},
		Summary: &frames.ContextHandle{ID: "sum-1", Kind: "summary", Priority: compaction.Low, Content: "searched x: found", Tokens: 3, Covers: []string{"h-call", "h-res"}}})
	assert.Nil(t, f.Handle("h-res"))
	assert.Equal(t, int64(5), f.ContextTokens)
	assert.Equal(t, []string{"h-call", "h-res"}, f.Handle("sum-1").Covers)
}

func TestRequestHorizon(t *testing.T) {
	w := newWorld(t)
	const horizon, skew = 1_000_000, 1_000
	st := frames.NewState("agent-1", horizon)
	st.SetHorizon(horizon, skew)
	w.setState(st)
	w.push("r", "", 100)
	first, ok, err := w.s.Request("req-1")
	require.NoError(t, err)
	require.True(t, ok)
	rec, dup, err := w.s.CheckRequest(first.ID, first.Hash, w.now)
	require.NoError(t, err)
	assert.True(t, dup)
	assert.Equal(t, int64(1), rec.FirstVersion)
	_, _, err = w.s.CheckRequest(first.ID, []byte("other"), w.now)
	assert.ErrorIs(t, err, frames.ErrRequestIDReused)

	// A multi-event request is one record spanning its versions.
	w.push("c", "r", 1)
	w.push("c2", "c", 1)
	hdr := w.hdr()
	w.must(&frames.PopFrame{Header: hdr, FrameID: "c", Status: frames.StatusCompleted, Cascade: true})
	last, ok, err := w.s.Request(hdr.RequestID)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, last.FirstVersion+1, last.LastVersion)
	assert.Equal(t, w.s.Version, last.LastVersion)

	// However busy the scope, nothing is forgotten by count (the old
	// window kept 1,024–2,048 ids): the history answers for every id.
	for i := 0; i < 2100; i++ {
		w.must(&frames.AddContextHandle{Header: w.hdr(), FrameID: "r", Handle: frames.ContextHandle{ID: fmt.Sprintf("h%d", i), Priority: compaction.Low}})
	}
	_, dup, err = w.s.CheckRequest(first.ID, first.Hash, w.now)
	require.NoError(t, err)
	assert.True(t, dup, "an id is remembered after 2,100 later requests")
}

func TestRequestIDTime(t *testing.T) {
	// 0x0192 3c4d 5e6f ms = 1,727,965,306,479 ms.
	ns, ok := frames.RequestIDTime("01923c4d-5e6f-7abc-8def-0123456789ab")
	require.True(t, ok)
	assert.Equal(t, int64(0x01923c4d5e6f)*1e6, ns)
	for _, id := range []string{"", "req-1", "01923c4d-5e6f-4abc-8def-0123456789ab", /* v4 */
		"01923c4d-5e6f-7abc-cdef-0123456789ab" /* variant */, "01923c4d-5e6f-7abc-8def-0123456789ag", "01923c4d5e6f-7abc-8def-0123456789abc"} {
		_, ok := frames.RequestIDTime(id)
		assert.False(t, ok, id)
	}
}

func TestExpiredRequestRefused(t *testing.T) {
	s := frames.NewState("s", 0)
	s.SetHorizon(1_000e6, 10e6)                         // 1 s, 10 ms skew
	id := "00000000-0064-7000-8000-000000000000"        // sent at 100 ms
	_, _, err := s.CheckRequest(id, []byte{1}, 1_110e6) // exactly horizon+skew later
	require.NoError(t, err)
	_, _, err = s.CheckRequest(id, []byte{1}, 1_110e6+1)
	require.ErrorIs(t, err, frames.ErrRequestExpired)
	assert.Contains(t, err.Error(), "not applied")
	_, _, err = s.CheckRequest("untimed-id", []byte{1}, 1<<62)
	assert.NoError(t, err, "ids without a time are never refused as expired")
}

func TestBadInputsChangeNothing(t *testing.T) {
	w := newWorld(t)
	w.push("r", "", 1000)
	w.must(&frames.AddContextHandle{Header: w.hdr(), FrameID: "r", Handle: frames.ContextHandle{ID: "h1", Priority: compaction.High, Content: "x", Tokens: 1}})
	w.push("done", "r", 10)
	w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "done", Status: frames.StatusCompleted})
	h := func() frames.Header { return w.hdr() }
	big := strings.Repeat("x", 300<<10)
	cases := []struct {
		name string
		cmd  frames.Command
		want error
	}{
		{"unknown frame", &frames.AddResult{Header: h(), FrameID: "ghost", Result: frames.ResultRef{ID: "r1"}}, frames.ErrFrameNotFound},
		{"unknown parent", &frames.PushFrame{Header: h(), FrameID: "n", ParentID: "ghost"}, frames.ErrFrameNotFound},
		{"duplicate frame", &frames.PushFrame{Header: h(), FrameID: "r"}, frames.ErrDuplicateID},
		{"empty frame id", &frames.PushFrame{Header: h(), FrameID: ""}, frames.ErrInvalidID},
		{"frame id with NUL", &frames.PushFrame{Header: h(), FrameID: "a\x00b"}, frames.ErrInvalidID},
		{"frame id too long", &frames.PushFrame{Header: h(), FrameID: strings.Repeat("a", 65)}, frames.ErrInvalidID},
		{"goal invalid utf8", &frames.PushFrame{Header: h(), FrameID: "n", Goal: "\xff\xfe"}, frames.ErrInvalidArgument},
		{"goal too large", &frames.PushFrame{Header: h(), FrameID: "n", Goal: strings.Repeat("g", 5000)}, frames.ErrTooLarge},
		{"inputs too large", &frames.PushFrame{Header: h(), FrameID: "n", Inputs: make([]byte, 70_000)}, frames.ErrTooLarge},
		{"negative budget", &frames.PushFrame{Header: h(), FrameID: "n", Budget: budget.TokenBudget{Total: -1}}, budget.ErrInvalidBudget},
		{"preset usage", &frames.PushFrame{Header: h(), FrameID: "n", Budget: budget.TokenBudget{Total: 5, Used: 1}}, frames.ErrInvalidArgument},
		{"negative limit", &frames.PushFrame{Header: h(), FrameID: "n", Limits: budget.Limits{Turns: -1}}, budget.ErrInvalidLimits},
		{"parent cannot allocate", &frames.PushFrame{Header: h(), FrameID: "n", ParentID: "r", Budget: budget.TokenBudget{Total: 1001}}, budget.ErrInsufficientTokens},
		{"push under completed", &frames.PushFrame{Header: h(), FrameID: "n", ParentID: "done"}, frames.ErrParentNotLive},
		{"handle on completed frame", &frames.AddContextHandle{Header: h(), FrameID: "done", Handle: frames.ContextHandle{ID: "z", Priority: compaction.Low}}, frames.ErrFrameNotLive},
		{"duplicate handle", &frames.AddContextHandle{Header: h(), FrameID: "r", Handle: frames.ContextHandle{ID: "h1", Priority: compaction.Low}}, frames.ErrDuplicateID},
		{"bad priority", &frames.AddContextHandle{Header: h(), FrameID: "r", Handle: frames.ContextHandle{ID: "z"}}, frames.ErrInvalidArgument},
		{"content too large", &frames.AddContextHandle{Header: h(), FrameID: "r", Handle: frames.ContextHandle{ID: "z", Priority: compaction.Low, Content: big}}, frames.ErrTooLarge},
		{"negative tokens", &frames.AddContextHandle{Header: h(), FrameID: "r", Handle: frames.ContextHandle{ID: "z", Priority: compaction.Low, Tokens: -5}}, budget.ErrNegativeAmount},
		{"negative usage", &frames.RecordUsage{Header: h(), FrameID: "r", Cost: budget.Cost{Turns: -1}}, budget.ErrNegativeAmount},
		{"empty usage", &frames.RecordUsage{Header: h(), FrameID: "r"}, frames.ErrInvalidArgument},
		{"overflowing usage", &frames.RecordUsage{Header: h(), FrameID: "r", Cost: budget.Cost{InputTokens: 1 << 62, OutputTokens: 1 << 62}}, budget.ErrOverflow},
		{"usage with spawns", &frames.RecordUsage{Header: h(), FrameID: "r", Cost: budget.Cost{Spawns: 1}}, frames.ErrInvalidArgument},
		{"overflow reserve", &frames.UpdateFrame{Header: h(), FrameID: "r", ReserveDelta: -1 << 63}, budget.ErrOverflow},
		{"reserve too much", &frames.UpdateFrame{Header: h(), FrameID: "r", ReserveDelta: 5000}, budget.ErrInsufficientTokens},
		{"empty update", &frames.UpdateFrame{Header: h(), FrameID: "r"}, frames.ErrInvalidArgument},
		{"pop to active", &frames.PopFrame{Header: h(), FrameID: "r", Status: frames.StatusActive}, frames.ErrInvalidArgument},
		{"pop completed", &frames.PopFrame{Header: h(), FrameID: "done", Status: frames.StatusCompleted}, frames.ErrFrameNotLive},
		{"bad suspend reason", &frames.SuspendFrame{Header: h(), FrameID: "r", Reason: "nap", Mint: frames.Mint{TokenID: "t", ExpiresAt: 1 << 60}}, frames.ErrInvalidArgument},
		{"expired mint", &frames.SuspendFrame{Header: h(), FrameID: "r", Reason: frames.SuspendApproval, Mint: frames.Mint{TokenID: "t", ExpiresAt: 1}}, frames.ErrInvalidArgument},
		{"resume not suspended", &frames.ResumeFrame{Header: h(), FrameID: "r", TokenID: "t"}, frames.ErrTokenUnknown},
		{"compact unknown handle", &frames.CompactContext{Header: h(), FrameID: "r", Removed: []string{"nope"}}, frames.ErrHandleNotFound},
		{"summary covering kept handle", &frames.CompactContext{Header: h(), FrameID: "r", Summary: &frames.ContextHandle{ID: "s", Priority: compaction.Low, Covers: []string{"h1"}}}, frames.ErrInvalidArgument},
		{"no server time", &frames.PushFrame{FrameID: "n"}, frames.ErrInvalidArgument},
		{"bad request id", &frames.PushFrame{Header: frames.Header{RequestID: "a b", Now: 5}, FrameID: "n"}, frames.ErrInvalidID},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := w.s.Clone()
			_, err := w.do(tc.cmd)
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.want)
			assert.True(t, reflect.DeepEqual(before, w.s.Clone()))
		})
	}
	t.Run("too many handles", func(t *testing.T) {
		w.cfg.MaxHandlesPerFrame = 1
		_, err := w.do(&frames.AddContextHandle{Header: h(), FrameID: "r", Handle: frames.ContextHandle{ID: "z", Priority: compaction.Low}})
		assert.ErrorIs(t, err, frames.ErrTooManyHandles)
	})
}

func TestApplyRejectsInconsistentEvents(t *testing.T) {
	w := newWorld(t)
	w.push("r", "", 100)
	w.push("c", "r", 50)
	meta := func(frame string) frames.Meta { return frames.Meta{Scope: "agent-1", Frame: frame, At: 1} }
	cases := map[string]frames.Event{
		"foreign scope":       &frames.FramePushed{Meta: frames.Meta{Scope: "other", Frame: "x"}},
		"push twice":          &frames.FramePushed{Meta: meta("r")},
		"over-allocation":     &frames.FramePushed{Meta: meta("x"), ParentID: "c", Depth: 2, Budget: budget.TokenBudget{Total: 51}},
		"wrong depth":         &frames.FramePushed{Meta: meta("x"), ParentID: "c", Depth: 7},
		"pop with children":   &frames.FramePopped{Meta: meta("r"), Status: frames.StatusCompleted},
		"pop wrong release":   &frames.FramePopped{Meta: meta("c"), Status: frames.StatusCompleted, Released: 49},
		"usage unknown frame": &frames.UsageRecorded{Meta: meta("nope"), Cost: budget.Cost{Turns: 1}},
		"resume unsuspended":  &frames.FrameResumed{Meta: meta("r"), TokenID: "t"},
		"finish unknown tool": &frames.ToolFinished{Meta: meta("r"), CallID: "x"},
		"compact missing":     &frames.FrameCompacted{Meta: meta("r"), Removed: []string{"nope"}},
	}
	for name, e := range cases {
		t.Run(name, func(t *testing.T) {
			before := w.s.Clone()
			err := frames.Apply(w.s, e)
			require.Error(t, err)
			assert.True(t, reflect.DeepEqual(before, w.s.Clone()), "state changed by a rejected event")
		})
	}
}

func TestReplayIsDeterministic(t *testing.T) {
	w := newWorld(t)
	w.push("r", "", 1000)
	w.push("c", "r", 100)
	w.must(&frames.AddContextHandle{Header: w.hdr(), FrameID: "c", Handle: frames.ContextHandle{ID: "h", Priority: compaction.Low, Content: "x", Tokens: 1}})
	w.must(&frames.SuspendFrame{Header: w.hdr(), FrameID: "c", Reason: frames.SuspendApproval, Mint: w.mint()})
	a, b := w.replay(), w.replay()
	assert.True(t, reflect.DeepEqual(a.Clone(), b.Clone()))
	assert.True(t, reflect.DeepEqual(a.Clone(), w.s.Clone()))
}
