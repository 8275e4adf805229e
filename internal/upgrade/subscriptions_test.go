package upgrade

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/messages"
)

// subscriptionsRead: a subscription reads the old log — every record the
// store keeps, in order, as ReadAll gives them — from the oldest position
// retention left; a position retention removed is position_removed,
// naming that oldest position; a durable subscription's acknowledgement
// is kept.
func (u *upgraded) subscriptionsRead(t *testing.T) {
	ctx := context.Background()
	removed, err := u.store.RemovedThrough(ctx, "", false)
	require.NoError(t, err)
	from := removed + 1
	var want []eventstore.Record
	require.NoError(t, u.store.ReadAll(ctx, from, func(r eventstore.Record) error {
		want = append(want, eventstore.Record{Seq: r.Seq, Stream: r.Stream, Version: r.Version, Type: r.Type})
		return nil
	}))
	require.NotEmpty(t, want)

	var got []eventstore.Record
	for pos := from; pos <= u.lastSeq(); {
		reply, err := u.do(&messages.ReadEvents{Filter: &messages.EventFilter{}, From: pos, Max: 97})
		require.NoError(t, err)
		r := reply.(*messages.ReadEventsReply)
		for _, ev := range r.Events {
			got = append(got, eventstore.Record{Seq: ev.Seq, Stream: ev.Scope, Version: ev.Version, Type: ev.Type})
			_, err := ev.Decode()
			require.NoError(t, err, "seq %d (%s) decodes", ev.Seq, ev.Type)
		}
		require.Greater(t, r.Next, pos, "a read moves on")
		pos = r.Next
	}
	assert.Equal(t, want, got, "the subscription reads what the store keeps, in order")

	if removed > 0 {
		_, err := u.do(&messages.ReadEvents{Filter: &messages.EventFilter{}, From: 1})
		var e *messages.Error
		require.True(t, errors.As(err, &e), "%v", err)
		assert.Equal(t, messages.CodePositionRemoved, e.Code)
		assert.Equal(t, int64(from), e.Version, "names the oldest position kept")
	}

	_, err = u.do(&messages.Subscribe{Name: "upgrade", From: from})
	require.NoError(t, err)
	mid := want[len(want)/2].Seq
	_, err = u.do(&messages.AckEvents{Name: "upgrade", Position: mid})
	require.NoError(t, err)
	reply, err := u.do(&messages.Subscribe{Name: "upgrade"})
	require.NoError(t, err)
	assert.Equal(t, mid, reply.(*messages.SubscribeReply).Position)
	t.Logf("subscriptions: %d records read from position %d (%d removed before it)", len(got), from, removed)
}
