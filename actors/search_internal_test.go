package actors

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/internal/chaintest"
)

// countingStore counts the reads a chain resolution makes.
type countingStore struct {
	eventstore.Store
	reads atomic.Int64
}

func (c *countingStore) Lookup(ctx context.Context, stream, key string) (eventstore.Span, bool, error) {
	c.reads.Add(1)
	return c.Store.Lookup(ctx, stream, key)
}

func (c *countingStore) ReadStream(ctx context.Context, stream string, from int64, fn func(eventstore.Record) error) error {
	c.reads.Add(1)
	return c.Store.ReadStream(ctx, stream, from, fn)
}

func (c *countingStore) StreamBase(ctx context.Context, stream string) (eventstore.Base, error) {
	c.reads.Add(1)
	return c.Store.StreamBase(ctx, stream)
}

// resolveChain answers a chain the state keeps from the state, reading
// nothing, and what it keeps in no chain from the log; both give the
// chain the log's links give.
func TestResolveChainPaths(t *testing.T) {
	ctx := context.Background()
	mem := eventstore.NewMemory()
	b := chaintest.New(mem, "s")
	b.Ceiling = 100
	require.NoError(t, b.Start("A", "", "A", "g", 1<<30))
	require.NoError(t, b.Add("A", "a1", frames.RoleAssistant, strings.Repeat("x", 8000)))
	require.NoError(t, b.Continue("A", "B"))
	require.NoError(t, b.Start("X", "", "", "alone", 100))
	require.NoError(t, b.Pop("X", frames.StatusCompleted))
	require.NoError(t, b.Start("Y", "", "", "alone and live", 100))
	for _, tc := range []struct {
		id, head string
		links    []string
		logReads bool
	}{
		{"A", "B", []string{"A", "B"}, false}, // the state's chain
		{"B", "B", []string{"A", "B"}, false}, // from its live head
		{"Y", "Y", []string{"Y"}, false},      // live, in no chain: a chain of one
		{"X", "X", []string{"X"}, true},       // finished, in no chain the state keeps: the log
	} {
		t.Run(tc.id, func(t *testing.T) {
			cs := &countingStore{Store: mem}
			c, err := resolveChain(ctx, cs, "s", chainQueryOf(b.St, tc.id))
			require.NoError(t, err)
			assert.Equal(t, tc.links, c.IDs())
			assert.Equal(t, tc.head, c.Head)
			assert.Equal(t, tc.logReads, cs.reads.Load() > 0, "log reads: %d", cs.reads.Load())
			fromLog, err := eventstore.ResolveChain(ctx, tc.id, eventstore.StoreLinks(mem, "s", nil))
			require.NoError(t, err)
			assert.Equal(t, fromLog.IDs(), c.IDs())
			for i := range c.Links {
				assert.Equal(t, fromLog.Links[i].PushSeq, c.Links[i].PushSeq, "%s's push", c.Links[i].ID)
				assert.Equal(t, fromLog.Links[i].Status, c.Links[i].Status)
			}
		})
	}
	t.Run("a corrupt state chain is an error, no read", func(t *testing.T) {
		st := b.St.Clone()
		st.Chains["A"].Links[1].To = "A"
		cs := &countingStore{Store: mem}
		_, err := resolveChain(ctx, cs, "s", chainQueryOf(st, "B"))
		require.ErrorIs(t, err, eventstore.ErrCorrupt)
		require.ErrorIs(t, err, frames.ErrChainCorrupt)
		assert.Zero(t, cs.reads.Load())
	})
}
