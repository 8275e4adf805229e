package actors_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/messages"
)

// A request held in the store ends when its context does, with ErrTimeout
// wrapping the context's error, whichever deadline it got: the caller's,
// the Client's default, or a cancellation.
func TestLocalClientDeadlines(t *testing.T) {
	store := &gatedStore{Store: eventstore.NewMemory(), gate: make(chan struct{}), entered: make(chan struct{})}
	sys := quietSystem()
	srv, err := actors.Start(sys, store, testConfig(newFakeClock()))
	require.NoError(t, err)
	t.Cleanup(func() {
		close(store.gate) // let the held appends finish, so Stop's drain ends
		srv.Stop()
		sys.Shutdown()
	})

	cases := []struct {
		name    string
		client  *actors.Client
		ctx     func() (context.Context, context.CancelFunc)
		want    error
		atLeast time.Duration
	}{
		{"a cancellation", srv.Client(),
			func() (context.Context, context.CancelFunc) {
				// The first case: its append is the store's first.
				c, cancel := context.WithCancel(ctx)
				go func() { <-store.entered; cancel() }()
				return c, cancel
			},
			context.Canceled, 0},
		{"the caller's deadline", srv.Client(),
			func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 200*time.Millisecond) },
			context.DeadlineExceeded, 200 * time.Millisecond},
		{"the Client's timeout, for a context without a deadline", actors.NewClient(sys.Root, srv.PID(), 200*time.Millisecond),
			func() (context.Context, context.CancelFunc) { return context.WithCancel(ctx) },
			context.DeadlineExceeded, 200 * time.Millisecond},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cctx, cancel := tc.ctx()
			defer cancel()
			start := time.Now()
			// One scope per case: each append blocks, and holds its scope.
			_, err := tc.client.PushFrame(cctx, &messages.PushFrame{Header: mut("held-" + string(rune('a'+i))), Goal: "g", Budget: budget.TokenBudget{Total: 10}})
			elapsed := time.Since(start)
			require.Error(t, err)
			assert.True(t, errors.Is(err, actors.ErrTimeout), "%v", err)
			assert.True(t, errors.Is(err, tc.want), "%v", err)
			assert.GreaterOrEqual(t, elapsed, tc.atLeast, "not before the deadline")
			assert.Less(t, elapsed, 5*time.Second, "at the deadline, not at a later backstop")
		})
	}
}
