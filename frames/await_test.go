package frames_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/frames"
)

func TestAwaitWait(t *testing.T) {
	for _, tc := range []struct {
		name      string
		wait, max int64
		want      int64
		bad       bool
	}{
		{"zero", 0, 0, 0, false},
		{"within", 5e9, 0, 5e9, false},
		{"capped at the default", 1 << 62, 0, frames.MaxAwaitWait, false},
		{"capped at max", 5e9, 1e9, 1e9, false},
		{"negative", -1, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := frames.AwaitWait(tc.wait, tc.max)
			if tc.bad {
				assert.ErrorIs(t, err, frames.ErrInvalidArgument)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestAwaitOutcome: a wait resolves to the chain's head, is live while the
// head is, and ends with the head's record from the events that ended it
// (from the history, without a record, once they are past).
func TestAwaitOutcome(t *testing.T) {
	w := chainWorld(t)
	o, err := w.s.AwaitOutcome(w.cfg, "a", nil)
	require.NoError(t, err)
	assert.Equal(t, frames.AwaitOutcome{Frame: "a", Head: "a", Status: frames.StatusActive}, o)

	evs := w.must(&frames.ContinueFrame{Header: w.hdr(), FrameID: "a", ResumeCeiling: 200, With: w.with("b")})
	ended, destroyed := frames.AwaitEnded(evs)
	assert.Equal(t, []string{"a"}, ended)
	assert.False(t, destroyed)
	o, err = w.s.AwaitOutcome(w.cfg, "a", evs)
	require.NoError(t, err)
	assert.Equal(t, "b", o.Head, "a continuation moves the head in the same append")
	assert.False(t, o.Terminal)

	w.must(&frames.AddResult{Header: w.hdr(), FrameID: "b", Result: frames.ResultRef{ID: "r1", Kind: "file", Ref: "out.txt"}})
	evs = w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "b", Status: frames.StatusFailed, Mint: w.mint()})
	for _, id := range []string{"a", "b"} {
		o, err = w.s.AwaitOutcome(w.cfg, id, evs)
		require.NoError(t, err)
		assert.Equal(t, "b", o.Head)
		assert.True(t, o.Terminal)
		assert.Equal(t, frames.StatusFailed, o.Status)
		require.NotNil(t, o.Record, "the record of the pop that ended it")
		assert.Equal(t, "out.txt", o.Record.Results[0].Ref)
		assert.Contains(t, o.Summary, "failed")
	}
	o, err = w.s.AwaitOutcome(w.cfg, "a", nil)
	require.NoError(t, err)
	assert.True(t, o.Terminal)
	assert.Equal(t, frames.StatusFailed, o.Status)
	assert.Nil(t, o.Record, "once past, the record is the log's")
	assert.Contains(t, o.Summary, "failed", "the chain link's summary stands")

	// A frame in no chain: from the history once it left the projection.
	w.push("solo", "root", 100)
	evs = w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "solo", Status: frames.StatusCompleted, Mint: w.mint()})
	o, err = w.s.AwaitOutcome(w.cfg, "solo", nil)
	require.NoError(t, err)
	assert.Equal(t, frames.AwaitOutcome{Frame: "solo", Head: "solo", Status: frames.StatusCompleted, Terminal: true}, o)
	o, err = w.s.AwaitOutcome(w.cfg, "solo", evs)
	require.NoError(t, err)
	require.NotNil(t, o.Record)
	assert.Equal(t, frames.StatusCompleted, o.Record.Status)

	for _, tc := range []struct {
		name, id string
		recent   []frames.Event
		want     error
	}{
		{"empty id", "", nil, frames.ErrInvalidID},
		{"unprintable id", "a\x00", nil, frames.ErrInvalidID},
		{"unknown frame", "nope", nil, frames.ErrFrameNotFound},
		{"destroyed scope", "root", []frames.Event{&frames.ScopeDestroyed{}}, frames.ErrFrameNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := w.s.AwaitOutcome(w.cfg, tc.id, tc.recent)
			assert.ErrorIs(t, err, tc.want)
		})
	}
}
