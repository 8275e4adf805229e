package eventstore_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/eventstore/storetest"
)

func TestMemoryConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) eventstore.Store { return eventstore.NewMemory() })
}

func TestMemoryLimits(t *testing.T) {
	_, err := eventstore.NewMemoryWithLimits(eventstore.Limits{MaxRecordBytes: -1})
	require.ErrorIs(t, err, eventstore.ErrInvalidOptions)

	m, err := eventstore.NewMemoryWithLimits(eventstore.Limits{MaxRecordBytes: 200})
	require.NoError(t, err)
	_, err = m.Append(t.Context(), "s", eventstore.NoStream, []eventstore.Event{{Type: "t", Data: make([]byte, 100)}})
	require.NoError(t, err)
	_, err = m.Append(t.Context(), "s", 1, []eventstore.Event{{Type: "t", Data: make([]byte, 200)}})
	require.ErrorIs(t, err, eventstore.ErrRecordTooLarge)
}

// Both backends store the same bytes: the same appends give the same hashes.
func TestMemoryAndBoltAgree(t *testing.T) {
	mem := eventstore.NewMemory()
	bolt := openAt(t, tempPath(t), fast)
	for _, s := range []eventstore.Store{mem, bolt} {
		for i, stream := range []string{"a", "b", "a", "c", "a"} {
			info, err := s.Stream(t.Context(), stream)
			require.NoError(t, err)
			_, err = s.Append(t.Context(), stream, info.Version, []eventstore.Event{{Type: "t", Data: []byte{byte(i)}}})
			require.NoError(t, err)
		}
	}
	for _, stream := range []string{"a", "b", "c"} {
		assert.Equal(t, records(t, mem, stream), records(t, bolt, stream))
	}
}

func TestMemoryFencer(t *testing.T) {
	storetest.RunFencer(t, func(t *testing.T) eventstore.Store { return eventstore.NewMemory() })
}

func TestMemoryKeyKeeper(t *testing.T) {
	storetest.RunKeyKeeper(t, func(t *testing.T) eventstore.Store { return eventstore.NewMemory() })
}

// A store of one server ignores fences: BoltStore is no Fencer, and a
// fence in the context changes nothing of its appends.
func TestBoltIgnoresFences(t *testing.T) {
	bolt := openAt(t, tempPath(t), fast)
	_, isFencer := any(bolt).(eventstore.Fencer)
	assert.False(t, isFencer)
	ctx := eventstore.WithFence(t.Context(), eventstore.Fence{Owner: "gone", Epoch: 7})
	res, err := bolt.Append(ctx, "s", eventstore.NoStream, []eventstore.Event{{Type: "t"}})
	require.NoError(t, err)
	assert.Equal(t, int64(1), res.LastVersion)
	f, ok := eventstore.FenceFrom(ctx)
	assert.True(t, ok)
	assert.Equal(t, uint64(7), f.Epoch)
	_, ok = eventstore.FenceFrom(t.Context())
	assert.False(t, ok)
}
