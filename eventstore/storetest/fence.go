package storetest

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/eventstore"
)

// The conformance tests of eventstore.Fencer and eventstore.KeyKeeper; a
// store that does not implement one skips its test.

// testFence: epochs grow by one per acquisition; an append carrying a
// deposed fence (or any fence but the current one) fails with a
// *FencedError naming both and writes nothing, even at the stream's
// latest version; the current owner's append and an unfenced one pass.
func testFence(t *testing.T, open Opener) {
	s := newStore(t, open)
	f, ok := s.(eventstore.Fencer)
	if !ok {
		t.Skipf("%T does not implement eventstore.Fencer", s)
	}
	ctx := t.Context()
	cur, err := f.Owner(ctx, "scope")
	require.NoError(t, err)
	assert.Equal(t, eventstore.Fence{}, cur, "never owned")

	a, err := f.AcquireOwner(ctx, "scope", "a")
	require.NoError(t, err)
	assert.Equal(t, eventstore.Fence{Owner: "a", Epoch: 1}, a, "a stream never owned takes epoch 1, existing or not")
	mustAppend(t, s, "scope", eventstore.NoStream, ev("x", "by a"))
	_, err = s.Append(eventstore.WithFence(ctx, a), "scope", 1, []eventstore.Event{ev("x", "by a, fenced")})
	require.NoError(t, err)

	b, err := f.AcquireOwner(ctx, "scope", "b")
	require.NoError(t, err)
	assert.Equal(t, eventstore.Fence{Owner: "b", Epoch: 2}, b)
	cur, err = f.Owner(ctx, "scope")
	require.NoError(t, err)
	assert.Equal(t, b, cur)

	before := snapshotState(t, s)
	for _, held := range []eventstore.Fence{a, {Owner: "b", Epoch: 1}, {Owner: "a", Epoch: 2}, {}} {
		_, err = s.Append(eventstore.WithFence(ctx, held), "scope", 2, []eventstore.Event{ev("x", "deposed")})
		require.ErrorIs(t, err, eventstore.ErrFenced, "held %v", held)
		var fe *eventstore.FencedError
		require.True(t, errors.As(err, &fe))
		assert.Equal(t, eventstore.FencedError{Stream: "scope", Held: held, Current: b}, *fe)
	}
	assert.Equal(t, before, snapshotState(t, s), "a fenced append writes nothing")

	_, err = s.Append(eventstore.WithFence(ctx, b), "scope", 2, []eventstore.Event{ev("x", "by b")})
	require.NoError(t, err)
	mustAppend(t, s, "scope", 3, ev("x", "unfenced: not checked"))

	// Another stream's owner is its own.
	_, err = s.Append(eventstore.WithFence(ctx, b), "other", eventstore.NoStream, []eventstore.Event{ev("x", "")})
	require.ErrorIs(t, err, eventstore.ErrFenced)
	o, err := f.AcquireOwner(ctx, "other", "b")
	require.NoError(t, err)
	assert.Equal(t, uint64(1), o.Epoch)
}

// testSharedKey: the first caller's generated key is stored and every
// later caller gets it without generating; a generator's error is
// returned and stores nothing.
func testSharedKey(t *testing.T, open Opener) {
	s := newStore(t, open)
	k, ok := s.(eventstore.KeyKeeper)
	if !ok {
		t.Skipf("%T does not implement eventstore.KeyKeeper", s)
	}
	ctx := t.Context()
	boom := errors.New("no entropy")
	_, err := k.SharedKey(ctx, "signing.key", func() ([]byte, error) { return nil, boom })
	require.ErrorIs(t, err, boom)
	first, err := k.SharedKey(ctx, "signing.key", func() ([]byte, error) { return []byte("key-1"), nil })
	require.NoError(t, err)
	assert.Equal(t, []byte("key-1"), first)
	again, err := k.SharedKey(ctx, "signing.key", func() ([]byte, error) {
		t.Error("a stored key is generated again")
		return []byte("key-2"), nil
	})
	require.NoError(t, err)
	assert.Equal(t, first, again)
	other, err := k.SharedKey(ctx, "token.key", func() ([]byte, error) { return []byte("key-3"), nil })
	require.NoError(t, err)
	assert.Equal(t, []byte("key-3"), other, "keys are per name")
	_, err = k.SharedKey(ctx, "Bad/Name", func() ([]byte, error) { return []byte("k"), nil })
	require.Error(t, err, "a name outside [a-z0-9._-] is refused")
}
