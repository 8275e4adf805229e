package compaction

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestIDSet(t *testing.T) {
	items := make([]Item, 300)
	for i := range items {
		items[i].ID = fmt.Sprintf("id-%d", i)
	}
	check := func(t *testing.T, s *idSet) {
		for i := range items {
			require.True(t, s.add(i), "item %d", i)
		}
		for i := range items {
			k, ok := s.lookup(items[i].ID)
			require.True(t, ok)
			assert.Equal(t, int32(i), k)
		}
		_, ok := s.lookup("absent")
		assert.False(t, ok)
	}
	t.Run("table", func(t *testing.T) {
		s := newIDSet(items, len(items))
		check(t, s)
		assert.Nil(t, s.m, "no fallback for ordinary ids")
	})
	t.Run("fallback when probes run long", func(t *testing.T) {
		s := &idSet{items: items, slots: make([]uint64, 64), mask: 63} // far too small
		check(t, s)
		assert.NotNil(t, s.m)
	})
	t.Run("duplicates found on both paths", func(t *testing.T) {
		dup := append(items[:100:100], Item{ID: "id-7"})
		s := newIDSet(dup, len(dup))
		for i := range 100 {
			require.True(t, s.add(i))
		}
		assert.False(t, s.add(100))
		s = &idSet{items: dup, slots: make([]uint64, 16), mask: 15}
		for i := range 100 {
			require.True(t, s.add(i))
		}
		assert.False(t, s.add(100))
	})
}
