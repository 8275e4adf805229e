package actors_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/messages"
)

// slowStore holds every read of one scope's log until released: a cold
// scope whose pages are not in memory.
type slowStore struct {
	eventstore.Store
	scope   string
	hold    atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (s *slowStore) ReadStream(ctx context.Context, stream string, from int64, fn func(eventstore.Record) error) error {
	if stream == s.scope && s.hold.Load() {
		s.entered <- struct{}{}
		<-s.release
	}
	return s.Store.ReadStream(ctx, stream, from, fn)
}

// A scope being loaded never blocks the other scopes of its shard, and its
// own requests are answered in the order they came once it is loaded.
func TestColdLoadDoesNotBlockTheShard(t *testing.T) {
	mem := eventstore.NewMemory()
	slow := &slowStore{Store: mem, scope: "cold", entered: make(chan struct{}), release: make(chan struct{})}
	cfg := testConfig(newFakeClock())
	cfg.Shards = 1 // every scope on the one shard
	sys := quietSystem()
	defer sys.Shutdown()
	srv, err := actors.Start(sys, slow, cfg)
	require.NoError(t, err)
	c := srv.Client()
	cold := push(t, c, "cold", "", 1000)
	warm := push(t, c, "warm", "", 1000)
	srv.Stop()

	srv, err = actors.Start(sys, slow, cfg) // a restart: both scopes are cold now
	require.NoError(t, err)
	defer srv.Stop()
	c = srv.Client()
	slow.hold.Store(true)

	type res struct {
		v   int64
		err error
	}
	added := make(chan res, 1)
	go func() {
		r, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut("cold"), FrameID: cold,
			Priority: compaction.High, Content: "first"})
		if err != nil {
			added <- res{err: err}
			return
		}
		added <- res{v: r.Version}
	}()
	<-slow.entered // the cold load is reading the log, off the shard

	// Another scope of the same shard, cold too, loads and answers.
	ctxW, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got, err := c.GetFrame(ctxW, &messages.GetFrame{Header: messages.Header{Scope: "warm"}, FrameID: warm})
	require.NoError(t, err, "a scope being loaded must not block its shard")
	assert.Equal(t, warm, got.Frame.ID)
	_, err = c.AddContextHandle(ctxW, &messages.AddContextHandle{Header: mut("warm"), FrameID: warm, Priority: compaction.Low, Content: "w"})
	require.NoError(t, err)

	// A later request of the loading scope waits behind the first.
	read := make(chan *messages.GetFrameReply, 1)
	go func() {
		r, err := c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: "cold"}, FrameID: cold, WithHandles: true})
		if err != nil {
			t.Error(err)
		}
		read <- r
	}()
	select {
	case <-added:
		t.Fatal("answered before its scope was loaded")
	case <-read:
		t.Fatal("answered before its scope was loaded")
	default:
	}
	close(slow.release)
	a := <-added
	require.NoError(t, a.err)
	r := <-read
	require.NotNil(t, r)
	assert.Equal(t, a.v, r.Version, "the read came after the write, in request order")
	require.Len(t, r.Frame.Handles, 1)
	assert.Equal(t, "first", r.Frame.Handles[0].Content)
}

// Past its bound of pending work a shard answers overloaded at once — not
// applied, safe to retry — instead of queueing without limit.
func TestOverloadIsAnAnswer(t *testing.T) {
	mem := eventstore.NewMemory()
	hs := &heldStore{Store: mem, entered: make(chan struct{}), release: make(chan struct{})}
	cfg := testConfig(newFakeClock())
	cfg.Shards = 1
	cfg.MaxPending = 4
	sys := quietSystem()
	defer sys.Shutdown()
	srv, err := actors.Start(sys, hs, cfg)
	require.NoError(t, err)
	defer srv.Stop()
	c := srv.Client()
	root := push(t, c, "s", "", 1000)

	hs.hold.Store(true)
	first := make(chan error, 1)
	go func() {
		_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut("s"), FrameID: root, Priority: compaction.Low, Content: "held"})
		first <- err
	}()
	<-hs.entered // the store holds the scope's write: its later requests wait

	const sent = 10
	futures := make([]interface{ Result() (any, error) }, sent)
	for i := range futures {
		req := &messages.AddContextHandle{Header: messages.Header{Scope: "s", RequestID: actors.NewRequestID()},
			FrameID: root, Priority: compaction.Low, Content: "queued"}
		futures[i] = sys.Root.RequestFuture(srv.PID(), req, time.Minute)
	}
	// The refusals come while the store still holds the write.
	refused := 0
	for _, f := range futures[cfg.MaxPending-1:] {
		r, err := f.Result()
		require.NoError(t, err)
		require.NotNil(t, r.(messages.Reply).Failure(), "past the bound")
		assert.ErrorIs(t, r.(messages.Reply).Failure(), actors.ErrOverloaded)
		refused++
	}
	assert.False(t, hs.returned.Load(), "answered before the held write returned")
	assert.Equal(t, sent-(cfg.MaxPending-1), refused)

	// The Client's own admission refuses too, before sending.
	_, err = c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: "s"}, FrameID: root})
	assert.ErrorIs(t, err, actors.ErrOverloaded)

	hs.hold.Store(false)
	close(hs.release)
	require.NoError(t, <-first)
	for _, f := range futures[:cfg.MaxPending-1] {
		r, err := f.Result()
		require.NoError(t, err)
		assert.Nil(t, r.(messages.Reply).Failure(), "held requests within the bound are served")
	}
	f, err := c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: "s"}, FrameID: root})
	require.NoError(t, err)
	assert.Equal(t, int64(1+1+cfg.MaxPending-1), f.Version, "refused requests were not applied")
}
