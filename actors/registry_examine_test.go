package actors

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/messages"
)

// A page examines at most registryExamine index entries (the README's
// bound): a filter no index serves, over more entries than that with no
// match, answers an empty page with a cursor, and the pages that follow
// reach the end, each within the bound.
func TestListFramesPageExaminesABoundedNumberOfEntries(t *testing.T) {
	ctx := context.Background()
	st, err := eventstore.Open(filepath.Join(t.TempDir(), "r.db"), &eventstore.Options{NoSync: true})
	require.NoError(t, err)
	defer st.Close()
	n := registryExamine + registryExamine/2
	b := newRegBatch(ctx, st)
	for i := 0; i < n; i++ {
		r := benchRow(i)
		k := string(rowKey(r.Scope, r.FrameID))
		b.orig[k], b.cur[k] = nil, &r
		b.order = append(b.order, k)
	}
	ops, err := b.ops()
	require.NoError(t, err)
	require.NoError(t, st.TableWrite(ctx, registryTable, append(ops, positionOp(uint64(n)))))

	// No frame finished in this window: only the time index can serve it.
	far := benchRow(0).CreatedAt - int64(time.Hour)
	req := &messages.ListFrames{FinishedAfter: far, FinishedBefore: far + int64(time.Second)}
	pages := 0
	for {
		q, e := compileList(req)
		require.Nil(t, e)
		r, err := answerList(ctx, st, q, uint64(n))
		require.NoError(t, err)
		assert.Empty(t, r.Frames)
		pages++
		if r.NextCursor == "" {
			break
		}
		require.Less(t, pages, 10, "the pages reach the end")
		req.Cursor = r.NextCursor
	}
	assert.Equal(t, 2, pages, "%d entries, at most %d examined a page", n, registryExamine)
}
