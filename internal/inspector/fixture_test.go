package inspector

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// fixture is a StateIndex with one known scope: a root planning frame
// with a spend limit and a reservation, a child suspended for approval
// with a tool call in doubt and context of every priority, a second child
// with a grandchild, a third that failed leaving a tool call abandoned,
// and key-value state.
type fixture struct {
	c     *actors.Client
	scope string
	// the frames: root → research (suspended), root → book → compare,
	// root → pay (failed)
	root, research, book, compare, pay string
	handles                            map[string]compaction.Priority
}

// hostileGoal is user data the pages must escape.
const hostileGoal = `compare prices <b>per night</b> & "fees"`

func newFixture(t testing.TB) *fixture {
	t.Helper()
	dir := t.TempDir()
	store, err := eventstore.Open(filepath.Join(dir, "stateindex.db"), nil)
	require.NoError(t, err)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	cfg := actors.DefaultConfig()
	cfg.TokenKey, cfg.Logger = bytes.Repeat([]byte{7}, 32), quiet
	srv, err := actors.Start(sys, store, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { srv.Stop(); sys.Shutdown(); store.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := srv.Client()
	fx := &fixture{c: c, scope: "acme:planner.1", handles: map[string]compaction.Priority{}}
	h := messages.Header{Scope: fx.scope}
	push := func(parent, goal string, total int64, lim budget.Limits) string {
		r, err := c.PushFrame(ctx, &messages.PushFrame{Header: h, ParentID: parent, Goal: goal, Budget: budget.TokenBudget{Total: total}, Limits: lim})
		require.NoError(t, err)
		return r.FrameID
	}
	fx.root = push("", "plan the trip to Lisbon", 20000, budget.Limits{SpendMicros: 1_000_000})
	fx.research = push(fx.root, "research flights", 6000, budget.Limits{})
	for i, p := range []compaction.Priority{compaction.Critical, compaction.High, compaction.Medium, compaction.Low, compaction.Background, compaction.Medium, compaction.Low} {
		r, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, FrameID: fx.research, Priority: p, Role: "user",
			Content: strings.Repeat(p.String()+" fact "+string(rune('a'+i))+" about fares and routes. ", 30)})
		require.NoError(t, err)
		fx.handles[r.HandleID] = p
	}
	_, err = c.RecordUsage(ctx, &messages.RecordUsage{Header: h, FrameID: fx.research, Cost: budget.Cost{InputTokens: 300, OutputTokens: 40, Turns: 1}})
	require.NoError(t, err)
	_, err = c.StartToolCall(ctx, &messages.StartToolCall{Header: h, FrameID: fx.research, CallID: "call-search-1", Name: "search_fares"})
	require.NoError(t, err)
	_, err = c.SuspendFrame(ctx, &messages.SuspendFrame{Header: h, FrameID: fx.research, Reason: frames.SuspendApproval, Note: "needs <approval>"})
	require.NoError(t, err)
	fx.book = push(fx.root, "book hotel", 4000, budget.Limits{Turns: 5})
	fx.compare = push(fx.book, hostileGoal, 1000, budget.Limits{})
	fx.pay = push(fx.root, "pay deposit", 500, budget.Limits{})
	_, err = c.StartToolCall(ctx, &messages.StartToolCall{Header: h, FrameID: fx.pay, CallID: "call-charge-1", Name: "charge_card"})
	require.NoError(t, err)
	_, err = c.PopFrame(ctx, &messages.PopFrame{Header: h, FrameID: fx.pay, Status: frames.StatusFailed})
	require.NoError(t, err)
	est := int64(400_000)
	_, err = c.ReserveSpend(ctx, &messages.ReserveSpend{Header: h, FrameID: fx.root, For: "researcher", Estimate: &est})
	require.NoError(t, err)
	_, err = c.ChangeState(ctx, &messages.ChangeState{Header: h, Ops: []messages.StateOp{
		{Kind: "set", Key: "plan", Value: []byte("research, then <script>book()</script>")},
		{Kind: "push", Key: "log", Value: []byte("started"), Keep: 5},
		{Kind: "set", Key: "blob", Value: []byte{0xff, 0x00, 0x01}},
	}})
	require.NoError(t, err)
	// The registry sees every write before the pages are read.
	_, err = c.ListFrames(ctx, &messages.ListFrames{InScope: fx.scope, Limit: 1}, actors.ListFramesOptions{SeeOwnWrites: true})
	require.NoError(t, err)
	return fx
}

func (fx *fixture) version(t testing.TB) int64 {
	t.Helper()
	g, err := fx.c.GetScope(context.Background(), &messages.GetScope{Header: messages.Header{Scope: fx.scope}, Limit: 1})
	require.NoError(t, err)
	return g.Version
}
