package upgrade

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// awaitsAnswer: an await (Wait 0) of every frame the fixture popped answers
// with the status the pop recorded (or, for a frame whose chain went on,
// with its chain's head); one whose history retention removed is not
// found; a live frame is answered live, timed out.
func (u *upgraded) awaitsAnswer(t *testing.T) {
	ended, gone := 0, 0
	for _, st := range u.m.Steps {
		if st.Op != "PopFrame" || st.Reply.FrameID == "" || st.Reply.Status == "" {
			continue
		}
		id := st.Reply.FrameID
		want, err := frames.ParseStatus(st.Reply.Status)
		require.NoError(t, err)
		reply, err := u.do(&messages.AwaitFrame{Header: messages.Header{Scope: st.Scope}, FrameID: id})
		if errors.Is(err, messages.ErrFrameNotFound) {
			gone++
			continue
		}
		require.NoError(t, err, "%s %s", st.Scope, id)
		r := reply.(*messages.AwaitFrameReply)
		assert.Equal(t, id, r.FrameID)
		if r.Head != id {
			continue // resumed or continued since: its chain's head answers
		}
		ended++
		assert.True(t, r.Terminal, "%s %s", st.Scope, id)
		assert.Equal(t, want, r.Status, "%s %s", st.Scope, id)
	}
	require.Positive(t, ended, "no popped frame answered (%d gone)", gone)
	live := 0
	for _, sc := range u.m.Scopes {
		for _, f := range sc.Live {
			reply, err := u.do(&messages.AwaitFrame{Header: messages.Header{Scope: sc.Scope}, FrameID: f.ID})
			require.NoError(t, err, "%s %s", sc.Scope, f.ID)
			r := reply.(*messages.AwaitFrameReply)
			if r.Head == f.ID {
				live++
				assert.False(t, r.Terminal)
				assert.True(t, r.TimedOut)
				assert.Equal(t, f.Status, r.Status.String())
			}
		}
	}
	require.Positive(t, live)
	t.Logf("awaits: %d ended frames answered, %d removed by retention, %d live", ended, gone, live)
}
