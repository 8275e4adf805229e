package eventstore_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/eventstore"
)

func TestIdentityIsClaimedOnceAndChecked(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "si.db")
	st := openAt(t, path, fast)
	_, ok, err := st.Identity(ctx)
	require.NoError(t, err)
	assert.False(t, ok, "a new file has no identity")

	id := eventstore.Identity{Cluster: "c", Member: "b:2", Members: []string{"c:3", "a:1", "b:2"}, Shards: 16}
	require.NoError(t, st.ClaimIdentity(ctx, id))
	require.NoError(t, st.ClaimIdentity(ctx, id), "claiming the same identity again is fine")
	same := id
	same.Members = []string{"a:1", "b:2", "c:3"}
	require.NoError(t, st.ClaimIdentity(ctx, same), "the member list's order does not matter")

	got, ok, err := st.Identity(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, []string{"a:1", "b:2", "c:3"}, got.Members)
	assert.Equal(t, "b:2", got.Member)
	assert.Equal(t, 16, got.Shards)
	require.NoError(t, st.Close())

	// The identity survives a reopen, and the file stays a valid store.
	st = openAt(t, path, fast)
	defer st.Close()
	for name, other := range map[string]eventstore.Identity{
		"another member":      {Cluster: "c", Member: "a:1", Members: id.Members, Shards: 16},
		"another member list": {Cluster: "c", Member: "b:2", Members: []string{"a:1", "b:2"}, Shards: 16},
		"another shard count": {Cluster: "c", Member: "b:2", Members: id.Members, Shards: 8},
		"another cluster":     {Cluster: "d", Member: "b:2", Members: id.Members, Shards: 16},
	} {
		err := st.ClaimIdentity(ctx, other)
		require.Error(t, err, name)
		assert.True(t, errors.Is(err, eventstore.ErrIdentityMismatch), name)
		assert.Contains(t, err.Error(), `member "b:2"`, name)
	}
	require.NoError(t, st.Verify(ctx, nil), "the identity bucket does not disturb verification")

	err = st.ClaimIdentity(ctx, eventstore.Identity{Member: "x"})
	assert.True(t, errors.Is(err, eventstore.ErrInvalidOptions))
	require.NoError(t, st.Close())
	assert.True(t, errors.Is(st.ClaimIdentity(ctx, id), eventstore.ErrClosed))
	_, _, err = st.Identity(ctx)
	assert.True(t, errors.Is(err, eventstore.ErrClosed))
}
