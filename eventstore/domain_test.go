package eventstore_test

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
)

func sampleEvents() []frames.Event {
	m := func(f string) frames.Meta {
		return frames.Meta{Scope: "s", Frame: f, At: 1_700_000_000_000_000_000, RequestID: "rq", RequestHash: []byte{1, 2}, Reason: frames.ReasonUserMessage}
	}
	goal := "new goal"
	return []frames.Event{
		&frames.FramePushed{Meta: m("f1"), Goal: "g", Inputs: []byte{0x81, 0xa1, 'a', 1}, Budget: budget.TokenBudget{Total: 8000, Reserved: 5, MaxSubframeDepth: 3}, Limits: budget.Limits{Turns: 10}},
		&frames.FrameUpdated{Meta: m("f1"), Goal: &goal, ReserveDelta: -3, Limits: &budget.Limits{SpendMicros: 9}},
		&frames.HandleAdded{Meta: m("f1"), Handle: frames.ContextHandle{ID: "h", Kind: "text", Priority: compaction.High, Content: "hello", Tokens: 2, CreatedAt: 5}},
		&frames.UsageRecorded{Meta: m("f1"), Cost: budget.Cost{InputTokens: 1 << 40, Turns: 1}},
		&frames.FrameSuspended{Meta: m("f1"), Suspension: frames.Suspension{Reason: frames.SuspendLimit, TokenID: "t", At: 3, ExpiresAt: 9, Limit: &budget.Violation{Code: budget.TurnsExceeded, Current: 11, Max: 10}}},
		&frames.FrameResumed{Meta: m("f1"), TokenID: "t"},
		&frames.ToolStarted{Meta: m("f1"), CallID: "c", Name: "n", Input: []byte("{}")},
		&frames.ToolFinished{Meta: m("f1"), CallID: "c", IsError: true, CallHandle: frames.ContextHandle{ID: "a", Priority: compaction.Medium}, ResultHandle: frames.ContextHandle{ID: "b", Priority: compaction.Medium}},
		&frames.ResultAdded{Meta: m("f1"), Result: frames.ResultRef{ID: "r", Kind: "file", Ref: "/x"}},
		&frames.FrameCompacted{Meta: m("f1"), Strategy: "priority_based", Removed: []string{"a", "b"}, Summary: &frames.ContextHandle{ID: "s", Priority: compaction.Low, Covers: []string{"a", "b"}}, Level: compaction.LevelModerate},
		&frames.FramePopped{Meta: m("f1"), Status: frames.StatusCompleted, Released: 3, ChargedTokens: 2, ChargedCost: budget.Cost{Turns: 1}},
		&frames.ActorResumed{Meta: m(""), FramesRecovered: 2, PendingItems: 1, LastSeq: 77},
	}
}

func TestFrameEventRoundTrip(t *testing.T) {
	for _, e := range sampleEvents() {
		t.Run(e.EventType(), func(t *testing.T) {
			enc, err := eventstore.EncodeFrameEvent(e)
			require.NoError(t, err)
			assert.Equal(t, e.EventType(), enc.Type)
			got, err := eventstore.DecodeFrameEvent(eventstore.Record{Stream: "s", Version: 1, Type: enc.Type, Data: enc.Data})
			require.NoError(t, err)
			assert.True(t, reflect.DeepEqual(e, got), "round trip changed %s:\n%#v\n%#v", e.EventType(), e, got)
			again, err := eventstore.EncodeFrameEvent(got)
			require.NoError(t, err)
			assert.Equal(t, enc.Data, again.Data, "encoding is deterministic")
		})
	}
}

func TestDecodeFrameEventRejectsGarbage(t *testing.T) {
	enc, err := eventstore.EncodeFrameEvent(sampleEvents()[0])
	require.NoError(t, err)
	cases := map[string]eventstore.Record{
		"unknown type": {Stream: "s", Version: 3, Type: "frame.exploded", Data: enc.Data},
		"truncated":    {Stream: "s", Version: 3, Type: frames.TypeFramePushed, Data: enc.Data[:len(enc.Data)/2]},
		"trailing":     {Stream: "s", Version: 3, Type: frames.TypeFramePushed, Data: append(append([]byte(nil), enc.Data...), 0xc0)},
		"wrong shape":  {Stream: "s", Version: 3, Type: frames.TypeFramePushed, Data: []byte{0x92, 0x01, 0x02}},
		"huge length":  {Stream: "s", Version: 3, Type: frames.TypeFramePushed, Data: []byte{0xdd, 0xff, 0xff, 0xff, 0xff}},
	}
	for name, rec := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := eventstore.DecodeFrameEvent(rec)
			var ce *eventstore.CorruptionError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, int64(3), ce.Version)
			assert.ErrorIs(t, err, eventstore.ErrCorrupt)
		})
	}
}

func TestStateSnapshotRoundTrip(t *testing.T) {
	s := frames.NewState("s", 0)
	for _, e := range sampleEvents()[:3] {
		require.NoError(t, frames.Apply(s, e))
	}
	snap, err := eventstore.EncodeState(s)
	require.NoError(t, err)
	got, ok, err := eventstore.DecodeState("s", snap)
	require.NoError(t, err)
	require.True(t, ok)
	assert.True(t, reflect.DeepEqual(s.Clone(), got.Clone()))

	snap.Format++
	_, ok, err = eventstore.DecodeState("s", snap)
	assert.NoError(t, err)
	assert.False(t, ok, "another projection format is ignored, not an error")
	snap.Format--
	_, _, err = eventstore.DecodeState("other", snap)
	assert.ErrorIs(t, err, eventstore.ErrCorrupt)
}

// A tool call's intent keeps the owner and epoch that recorded it (DESIGN
// §13) through the log and the snapshot; an intent without them — what
// every release before fencing wrote — is the same bytes as before and
// reads as epoch 0.
func TestToolIntentEpochRoundTrip(t *testing.T) {
	meta := frames.Meta{Scope: "s", Frame: "f1", At: 5, RequestID: "rq", Reason: frames.ReasonUserMessage}
	fenced := &frames.ToolStarted{Meta: meta, CallID: "c", Name: "fetch", Owner: "member-a:7400#1f", Epoch: 3}
	enc, err := eventstore.EncodeFrameEvent(fenced)
	require.NoError(t, err)
	got, err := eventstore.DecodeFrameEvent(eventstore.Record{Stream: "s", Version: 2, Type: enc.Type, Data: enc.Data})
	require.NoError(t, err)
	assert.Equal(t, fenced, got)

	old := &frames.ToolStarted{Meta: meta, CallID: "c", Name: "fetch"}
	oldEnc, err := eventstore.EncodeFrameEvent(old)
	require.NoError(t, err)
	assert.NotContains(t, string(oldEnc.Data), "\xa2ep", "no epoch key when there is none")
	assert.NotContains(t, string(oldEnc.Data), "\xa2ow")
	got, err = eventstore.DecodeFrameEvent(eventstore.Record{Stream: "s", Version: 2, Type: oldEnc.Type, Data: oldEnc.Data})
	require.NoError(t, err)
	assert.Zero(t, got.(*frames.ToolStarted).Epoch)

	s := frames.NewState("s", 0)
	require.NoError(t, frames.Apply(s, &frames.FramePushed{Meta: frames.Meta{Scope: "s", Frame: "f1", At: 1}, Goal: "g", Budget: budget.TokenBudget{Total: 10}}))
	require.NoError(t, frames.Apply(s, fenced))
	snap, err := eventstore.EncodeState(s)
	require.NoError(t, err)
	st, ok, err := eventstore.DecodeState("s", snap)
	require.NoError(t, err)
	require.True(t, ok)
	calls := st.Frames["f1"].ToolCalls
	require.Len(t, calls, 1)
	assert.Equal(t, "member-a:7400#1f", calls[0].Owner)
	assert.Equal(t, uint64(3), calls[0].Epoch)
}
