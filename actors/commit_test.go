package actors_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/messages"
)

// heldStore commits an Append and then holds it before returning, until
// released: the window in which a reply must not leave.
type heldStore struct {
	eventstore.Store
	hold     atomic.Bool
	entered  chan struct{}
	release  chan struct{}
	returned atomic.Bool
}

func (h *heldStore) Append(ctx context.Context, stream string, expected int64, evs []eventstore.Event) (eventstore.AppendResult, error) {
	res, err := h.Store.Append(ctx, stream, expected, evs)
	if h.hold.Load() {
		h.entered <- struct{}{}
		<-h.release
		h.returned.Store(true)
	}
	return res, err
}

func TestNoReplyBeforeCommitReturns(t *testing.T) {
	mem := eventstore.NewMemory()
	hs := &heldStore{Store: mem, entered: make(chan struct{}), release: make(chan struct{})}
	cfg := testConfig(newFakeClock())
	cfg.Shards = 2
	sys := quietSystem()
	defer sys.Shutdown()
	srv, err := actors.Start(sys, hs, cfg)
	require.NoError(t, err)
	defer srv.Stop()
	c := srv.Client()

	// Two scopes on different shards.
	a, b := "scope-a", ""
	for i := 0; b == ""; i++ {
		cand := "scope-b" + string(rune('a'+i))
		if actorsShard(cand, 2) != actorsShard(a, 2) {
			b = cand
		}
	}
	push(t, c, b, "", 1)

	hs.hold.Store(true)
	type result struct {
		reply       *messages.PushFrameReply
		err         error
		afterCommit bool
	}
	pushed := make(chan result, 1)
	go func() {
		r, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(a), Goal: "held", Budget: budget.TokenBudget{Total: 5}})
		pushed <- result{r, err, hs.returned.Load()}
	}()
	<-hs.entered // the events are committed; Append has not returned

	read := make(chan result, 1)
	go func() {
		_, err := c.GetStack(ctx, &messages.GetStack{Header: messages.Header{Scope: a}})
		read <- result{err: err, afterCommit: hs.returned.Load()}
	}()

	// Another shard keeps serving while this one waits on its commit.
	_, err = c.GetStack(ctx, &messages.GetStack{Header: messages.Header{Scope: b}})
	require.NoError(t, err)
	select {
	case r := <-pushed:
		t.Fatalf("reply left before the commit returned: %+v", r)
	case r := <-read:
		t.Fatalf("a reader saw scope %q before the commit returned: %+v", a, r)
	default:
	}

	hs.hold.Store(false)
	close(hs.release)
	p := <-pushed
	require.NoError(t, p.err)
	assert.True(t, p.afterCommit, "the reply was sent only after Append returned")
	rd := <-read
	require.NoError(t, rd.err, "the reader, queued behind the write, sees the frame")
	assert.True(t, rd.afterCommit)
}

func actorsShard(scope string, n int) int { return actors.ShardOf(scope, n) }
