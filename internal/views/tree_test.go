package views

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// flat lists a tree's frames with what both readers know of them.
func flat(t *ScopeTree) []string {
	var out []string
	t.Walk(func(n *FrameNode, d int) {
		var doubt, ab []string
		for _, c := range n.InDoubt {
			doubt = append(doubt, c.ID)
		}
		for _, c := range n.Abandoned {
			ab = append(ab, c.ID)
		}
		susp := ""
		if n.Suspension != nil {
			susp = string(n.Suspension.Reason)
		}
		out = append(out, fmt.Sprintf("%d %s<%s %s %s budget=%+v handles=%d doubt=%v abandoned=%v susp=%s top=%v known=%v",
			d, n.ID, n.ParentID, n.Status, n.Goal, n.Budget, n.Handles, doubt, ab, susp, n.Top, n.Known))
	})
	return out
}

// A scope's tree read from a running server (GetScope, the registry,
// GetStack) is the tree folded from its whole log on the file.
func TestServerTreeIsTheFileTree(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "stateindex.db")
	store, err := eventstore.Open(path, nil)
	require.NoError(t, err)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	cfg := actors.DefaultConfig()
	cfg.TokenKey, cfg.Logger = bytes.Repeat([]byte{7}, 32), quiet
	srv, err := actors.Start(sys, store, cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := srv.Client()
	h := messages.Header{Scope: "tree"}
	push := func(parent, goal string, total int64) string {
		r, err := c.PushFrame(ctx, &messages.PushFrame{Header: h, ParentID: parent, Goal: goal, Budget: budget.TokenBudget{Total: total}})
		require.NoError(t, err)
		return r.FrameID
	}
	root := push("", "root", 10000)
	a := push(root, "a", 3000)
	_, err = c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, FrameID: a, Priority: compaction.High, Content: "some context"})
	require.NoError(t, err)
	_, err = c.RecordUsage(ctx, &messages.RecordUsage{Header: h, FrameID: a, Cost: budget.Cost{InputTokens: 120}})
	require.NoError(t, err)
	_, err = c.PopFrame(ctx, &messages.PopFrame{Header: h, FrameID: a, Status: frames.StatusCompleted})
	require.NoError(t, err)
	b := push(root, "b", 3000)
	b1 := push(b, "b1", 1000)
	_, err = c.StartToolCall(ctx, &messages.StartToolCall{Header: h, FrameID: b1, CallID: "lost", Name: "charge"})
	require.NoError(t, err)
	_, err = c.PopFrame(ctx, &messages.PopFrame{Header: h, FrameID: b1, Status: frames.StatusFailed})
	require.NoError(t, err)
	b2 := push(b, "b2", 1000)
	_, err = c.StartToolCall(ctx, &messages.StartToolCall{Header: h, FrameID: b2, CallID: "doubt", Name: "search"})
	require.NoError(t, err)
	_, err = c.SuspendFrame(ctx, &messages.SuspendFrame{Header: h, FrameID: b2, Reason: frames.SuspendApproval})
	require.NoError(t, err)
	_, err = c.ListFrames(ctx, &messages.ListFrames{InScope: "tree", Limit: 1}, actors.ListFramesOptions{SeeOwnWrites: true})
	require.NoError(t, err)

	server, err := ReadScopeTree(ctx, c, "tree", TreeOptions{})
	require.NoError(t, err)
	_, err = ReadScopeTree(ctx, c, "no-such", TreeOptions{})
	assert.ErrorIs(t, err, ErrNoScope)
	few, err := ReadScopeTree(ctx, c, "tree", TreeOptions{MaxDetails: -1})
	require.NoError(t, err)
	srv.Stop()
	sys.Shutdown()

	st, err := eventstore.LoadAll(ctx, store, "tree", 0)
	require.NoError(t, err)
	file := TreeFromState(st)
	require.NoError(t, store.Close())

	assert.Equal(t, flat(file), flat(server))
	assert.ElementsMatch(t, file.Pending, server.Pending)
	assert.Equal(t, file.Version, server.Version)
	assert.Equal(t, 5, server.Frames)
	var unknown int
	few.Walk(func(n *FrameNode, _ int) {
		if !n.Known {
			unknown++
			assert.False(t, n.Status.Live(), "a live frame is always read whole")
		}
	})
	assert.Equal(t, 2, unknown, "without details the finished frames come from the registry alone")
}
