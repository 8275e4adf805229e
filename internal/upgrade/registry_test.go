package upgrade

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/messages"
)

// registryLists: the registry builds its index from a previous release's
// log (it starts at position 0 on a file that has none) and ListFrames
// answers at the fixture's last position: every live frame of every
// scope is listed with its status and goal, every frame listed is one the
// scope still answers (history retention removed leaves no entry), and the
// listing is newest first.
func (u *upgraded) registryLists(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var all []messages.FrameEntry
	req := &messages.ListFrames{MinPosition: u.m.LastSeq, Limit: 50}
	for {
		r, err := u.c.ListFrames(ctx, req)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, r.Position, u.m.LastSeq)
		all = append(all, r.Frames...)
		if r.NextCursor == "" {
			break
		}
		req.Cursor = r.NextCursor
	}
	require.NotEmpty(t, all)
	listed := map[string]messages.FrameEntry{}
	for i, f := range all {
		if i > 0 {
			assert.GreaterOrEqual(t, all[i-1].CreatedAt, f.CreatedAt, "newest first")
		}
		listed[f.Scope+"/"+f.FrameID] = f
		_, err := u.c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: f.Scope}, FrameID: f.FrameID})
		assert.NoError(t, err, "listed frame %s/%s (%s) answers", f.Scope, f.FrameID, f.Status)
	}
	assert.Len(t, listed, len(all), "no frame listed twice")
	for _, sc := range u.m.Scopes {
		for _, lf := range sc.Live {
			f, ok := listed[sc.Scope+"/"+lf.ID]
			if assert.True(t, ok, "live frame %s/%s listed", sc.Scope, lf.ID) {
				assert.Equal(t, lf.Status, f.Status, lf.ID)
				assert.Equal(t, lf.Goal, f.Goal, lf.ID)
				assert.Equal(t, lf.ParentID, f.ParentID, lf.ID)
				assert.Equal(t, lf.Suspended, f.SuspendReason, lf.ID)
			}
		}
		byScope, err := u.c.ListFrames(ctx, &messages.ListFrames{InScope: sc.Scope, Limit: 1000, MinPosition: u.m.LastSeq})
		require.NoError(t, err)
		n := 0
		for _, f := range all {
			if f.Scope == sc.Scope {
				n++
			}
		}
		assert.Len(t, byScope.Frames, n, "%s: its scope's index lists the same frames", sc.Scope)
	}
}
