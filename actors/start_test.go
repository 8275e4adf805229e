package actors_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/eventstore"
)

func TestStartRefusesAMissingStore(t *testing.T) {
	// What eventstore.Open returns beside its error when the directory of
	// the data file does not exist: a nil *BoltStore.
	bolt, err := eventstore.Open(filepath.Join(t.TempDir(), "missing", "data.db"), nil)
	require.Error(t, err)
	require.Nil(t, bolt)
	var nilMemory *eventstore.MemoryStore

	cases := []struct {
		name  string
		store eventstore.Store
		want  string
	}{
		{"nil interface", nil, "needs a store, got nil"},
		{"typed nil from a failed Open", bolt, "got a nil *eventstore.BoltStore"},
		{"typed nil memory store", nilMemory, "got a nil *eventstore.MemoryStore"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := actors.Start(quietSystem(), tc.store, testConfig(newFakeClock()))
			require.Error(t, err)
			assert.Nil(t, srv)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	t.Run("nil actor system", func(t *testing.T) {
		srv, err := actors.Start(nil, eventstore.NewMemory(), testConfig(newFakeClock()))
		require.Error(t, err)
		assert.Nil(t, srv)
		assert.Contains(t, err.Error(), "needs an actor system")
	})
	t.Run("a real store starts", func(t *testing.T) {
		sys := quietSystem()
		srv, err := actors.Start(sys, eventstore.NewMemory(), testConfig(newFakeClock()))
		require.NoError(t, err)
		srv.Stop()
		sys.Shutdown()
	})
}
