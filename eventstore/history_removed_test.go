package eventstore_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
)

// A frame that was live when every record it had so far was removed (its
// index entry went with them) and finished afterwards is read back from its
// record — not refused as a corrupt history that starts at a handle.
func TestLoadFinishedFrameAfterRemovalWhileLive(t *testing.T) {
	ctx := context.Background()
	s := openAt(t, tempPath(t), &eventstore.Options{NoSync: true, JournalOff: true})
	defer s.Close()
	put := func(evs ...frames.Event) {
		info, err := s.Stream(ctx, "s")
		require.NoError(t, err)
		var enc []eventstore.Event
		for _, e := range evs {
			x, err := eventstore.EncodeFrameEvent(e)
			require.NoError(t, err)
			enc = append(enc, x)
		}
		_, err = s.Append(ctx, "s", info.Version, enc)
		require.NoError(t, err)
	}
	meta := func(frame string) frames.Meta { return frames.Meta{Scope: "s", Frame: frame, At: 1} }
	put(&frames.FramePushed{Meta: meta("f1"), Goal: "g"},
		&frames.HandleAdded{Meta: meta("f1"), Handle: frames.ContextHandle{ID: "h1", Content: "old"}},
		&frames.FramePushed{Meta: meta("f2"), Goal: "other"})
	require.NoError(t, s.SaveSnapshot(ctx, "s", eventstore.Snapshot{Version: 3, Format: 1, Data: []byte("x")}))
	_, err := s.RemovePrefix(ctx, "s", 2) // f1's records all go; f1 is live
	require.NoError(t, err)
	put(&frames.HandleAdded{Meta: meta("f1"), Handle: frames.ContextHandle{ID: "h2", Content: "new"}},
		&frames.FramePopped{Meta: meta("f1"), Status: frames.StatusCompleted,
			Final: &frames.FrameRecord{ID: "f1", Goal: "g", Status: frames.StatusCompleted, Handles: 2}})

	f, err := eventstore.LoadFinishedFrame(ctx, s, "s", "f1")
	require.NoError(t, err)
	require.Equal(t, "f1", f.ID)
	require.Equal(t, frames.StatusCompleted, f.Status)
	require.Empty(t, f.Handles, "its handles went with the removed history")
}
