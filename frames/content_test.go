package frames_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/frames"
)

// big is content over the default threshold.
func big(tag string) string { return tag + strings.Repeat(" lorem ipsum", 200) }

func (w *world) addHandle(frame, id, content string) []frames.Event {
	w.t.Helper()
	return w.must(&frames.AddContextHandle{Header: w.hdr(), FrameID: frame, Handle: frames.ContextHandle{
		ID: id, Kind: "text", Priority: compaction.Low, Content: content, Tokens: 10}})
}

// stored counts the copies of large content evs hold: handles that carry
// content they name by hash, and content.stored events.
func stored(evs []frames.Event) int {
	n := 0
	for _, e := range evs {
		var hs []*frames.ContextHandle
		switch ev := e.(type) {
		case *frames.ContentStored:
			n++
		case *frames.HandleAdded:
			hs = append(hs, &ev.Handle)
		case *frames.ToolFinished:
			hs = append(hs, &ev.CallHandle, &ev.ResultHandle)
		case *frames.FrameCompacted:
			hs = append(hs, ev.Summary)
		}
		for _, h := range hs {
			if h != nil && h.StoresContent {
				n++
			}
		}
	}
	return n
}

func TestContentStoredOnceByReference(t *testing.T) {
	w := newWorld(t)
	w.push("r", "", 1000)
	text := big("a")
	hash := frames.ContentHash(text)

	evs := w.addHandle("r", "h1", text)
	require.Len(t, evs, 1, "one record per operation")
	added := evs[0].(*frames.HandleAdded)
	assert.Equal(t, text, added.Handle.Content, "the first time, the handle's event stores the content")
	assert.True(t, added.Handle.StoresContent)
	assert.Empty(t, added.Handle.ContentRef, "the hash is computed on Apply, not carried")
	assert.Equal(t, hash, w.s.Frames["r"].Handle("h1").ContentRef)
	assert.False(t, w.s.Frames["r"].Handle("h1").StoresContent)

	evs = w.addHandle("r", "h2", text)
	require.Len(t, evs, 1)
	assert.Zero(t, stored(evs), "the same content again is not stored again")
	assert.Equal(t, hash, evs[0].(*frames.HandleAdded).Handle.ContentRef)
	assert.Empty(t, evs[0].(*frames.HandleAdded).Handle.Content)
	require.Contains(t, w.s.Content, hash)
	assert.EqualValues(t, 2, w.s.Content[hash].Refs)

	for _, id := range []string{"h1", "h2"} {
		assert.Equal(t, text, w.s.Frames["r"].Handle(id).Content, "the projection holds the content of %s", id)
	}
	evs = w.addHandle("r", "small", "short")
	require.Len(t, evs, 1, "content under the threshold stays inline")
	assert.Equal(t, "short", evs[0].(*frames.HandleAdded).Handle.Content)
	assert.Empty(t, evs[0].(*frames.HandleAdded).Handle.ContentRef)

	// A tool call and result with the same large content: one record.
	w.must(&frames.StartToolCall{Header: w.hdr(), FrameID: "r", CallID: "c1", Name: "echo"})
	other := big("b")
	evs = w.must(&frames.FinishToolCall{Header: w.hdr(), FrameID: "r", CallID: "c1",
		CallHandle:   frames.ContextHandle{ID: "call", Kind: "tool_call", Priority: compaction.Low, Content: other},
		ResultHandle: frames.ContextHandle{ID: "result", Kind: "tool_result", Priority: compaction.Low, Content: other}})
	assert.Equal(t, 1, stored(evs))
	assert.EqualValues(t, 2, w.s.Content[frames.ContentHash(other)].Refs)
	assert.Equal(t, other, w.s.Frames["r"].Handle("result").Content)

	assert.True(t, reflect.DeepEqual(w.replay().Clone(), w.s.Clone()), "replay rebuilds the same state")
}

func TestContentDedupIsPerScope(t *testing.T) {
	text := big("shared")
	for _, scope := range []string{"scope-a", "scope-b"} {
		t.Run(scope, func(t *testing.T) {
			w := newWorld(t)
			w.setState(frames.NewState(scope, 0))
			w.push("r", "", 100)
			require.Equal(t, 1, stored(w.addHandle("r", "h", text)), "each scope stores its own copy")
		})
	}
}

func TestContentRefCountsLetItGo(t *testing.T) {
	w := newWorld(t)
	w.push("r", "", 1000)
	w.push("c", "r", 100)
	text := big("x")
	hash := frames.ContentHash(text)
	w.addHandle("c", "h1", text)
	w.addHandle("c", "h2", text)
	w.addHandle("c", "keep", "small")

	w.must(&frames.CompactContext{Header: w.hdr(), FrameID: "c", Removed: []string{"h1"}, Strategy: "test"})
	require.Contains(t, w.s.Content, hash)
	assert.EqualValues(t, 1, w.s.Content[hash].Refs)

	// A summary with the same content as the handle it replaces keeps it.
	evs := w.must(&frames.CompactContext{Header: w.hdr(), FrameID: "c", Removed: []string{"h2"}, Strategy: "test",
		Summary: &frames.ContextHandle{ID: "sum", Kind: "summary", Priority: compaction.Low, Content: text, Covers: []string{"h2"}}})
	assert.Zero(t, stored(evs), "the summary refers to the content already stored")
	assert.EqualValues(t, 1, w.s.Content[hash].Refs)
	assert.Equal(t, text, w.s.Frames["c"].Handle("sum").Content)

	w.must(&frames.CompactContext{Header: w.hdr(), FrameID: "c", Removed: []string{"sum"}, Strategy: "test"})
	assert.NotContains(t, w.s.Content, hash, "no live reference: the entry is forgotten")
	assert.Equal(t, 1, stored(w.addHandle("c", "h3", text)), "added again, it is stored again")

	w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "c", Status: frames.StatusCompleted})
	assert.Empty(t, w.s.Content, "a finished frame's references are gone with it")
	assert.True(t, reflect.DeepEqual(w.replay().Clone(), w.s.Clone()))
}

// A handle refers only to content its own frame stored (or a retention
// pass stored again since its push), so that a finished frame's content is
// within its own span of the log.
func TestContentRefsStayWithinTheFramesSpan(t *testing.T) {
	w := newWorld(t)
	w.push("r", "", 1000)
	text := big("y")
	w.addHandle("r", "h", text)
	w.push("c", "r", 100)
	assert.Equal(t, 1, stored(w.addHandle("c", "h", text)), "stored by r: stored again for c")
	assert.Zero(t, stored(w.addHandle("c", "h2", text)), "c refers to its own copy")
	assert.Equal(t, 1, stored(w.addHandle("r", "h2", text)), "the latest copy is c's: stored again for r")
	assert.EqualValues(t, 4, w.s.Content[frames.ContentHash(text)].Refs)

	meta := frames.Meta{Scope: "agent-1", Frame: "c", At: w.now}
	before := w.s.Clone()
	err := frames.Apply(w.s, &frames.HandleAdded{Meta: meta, Handle: frames.ContextHandle{ID: "x", Priority: compaction.Low, ContentRef: frames.ContentHash(text)}})
	require.ErrorIs(t, err, frames.ErrInconsistentEvent, "c may not refer to r's copy")
	assert.True(t, reflect.DeepEqual(before, w.s.Clone()))
}

func TestRetentionStoresLiveContentAgain(t *testing.T) {
	w := newWorld(t)
	w.push("r", "", 1000)
	text := big("z")
	hash := frames.ContentHash(text)
	w.addHandle("r", "h", text)
	first := w.s.Content[hash].Version
	w.addHandle("r", "small", "s")
	through := w.s.Version
	evs := w.must(&frames.ApplyRetention{Header: w.hdr(), Through: through, Hash: strings.Repeat("a", 64), Why: "test"})
	require.Len(t, evs, 2)
	require.IsType(t, &frames.RetentionApplied{}, evs[0])
	cs := evs[1].(*frames.ContentStored)
	assert.Equal(t, hash, cs.Hash)
	assert.Equal(t, text, cs.Content)
	assert.Empty(t, cs.Frame)
	assert.Greater(t, w.s.Content[hash].Version, through, "the live content's record is after the cut")
	assert.Less(t, first, w.s.Content[hash].Version)
	assert.EqualValues(t, 1, w.s.Content[hash].Refs)

	// Content whose record is already after the cut is not stored again.
	evs = w.must(&frames.ApplyRetention{Header: w.hdr(), Through: through + 1, Hash: strings.Repeat("b", 64), Why: "test"})
	assert.Zero(t, stored(evs))
	assert.Zero(t, stored(w.addHandle("r", "h2", text)), "r refers to the copy stored again since its push")
}

func TestContentRefBadInput(t *testing.T) {
	w := newWorld(t)
	w.push("r", "", 1000)
	text := big("q")
	hash := frames.ContentHash(text)
	w.addHandle("r", "h", text)
	w.must(&frames.StartToolCall{Header: w.hdr(), FrameID: "r", CallID: "open", Name: "echo"})
	meta := frames.Meta{Scope: "agent-1", Frame: "r", At: w.now}
	events := map[string]frames.Event{
		"unknown ref": &frames.HandleAdded{Meta: meta, Handle: frames.ContextHandle{ID: "x", Priority: compaction.Low,
			ContentRef: frames.ContentHash("never stored")}},
		"ref and content": &frames.HandleAdded{Meta: meta, Handle: frames.ContextHandle{ID: "x", Priority: compaction.Low,
			ContentRef: hash, Content: "inline too"}},
		"stores nothing": &frames.HandleAdded{Meta: meta, Handle: frames.ContextHandle{ID: "x", Priority: compaction.Low,
			StoresContent: true}},
		"stores with a ref": &frames.HandleAdded{Meta: meta, Handle: frames.ContextHandle{ID: "x", Priority: compaction.Low,
			StoresContent: true, Content: text, ContentRef: hash}},
		"wrong hash":      &frames.ContentStored{Meta: meta, Hash: frames.ContentHash("other"), Content: text},
		"empty content":   &frames.ContentStored{Meta: meta, Hash: frames.ContentHash(""), Content: ""},
		"frame not live":  &frames.ContentStored{Meta: frames.Meta{Scope: "agent-1", Frame: "gone", At: w.now}, Hash: hash, Content: text},
		"summary bad ref": &frames.FrameCompacted{Meta: meta, Removed: []string{"h"}, Summary: &frames.ContextHandle{ID: "s", Priority: compaction.Low, ContentRef: frames.ContentHash("nope")}},
		"tool unknown ref": &frames.ToolFinished{Meta: meta, CallID: "open",
			CallHandle:   frames.ContextHandle{ID: "tc", Priority: compaction.Low, Content: "call"},
			ResultHandle: frames.ContextHandle{ID: "tr", Priority: compaction.Low, ContentRef: frames.ContentHash("nope")}},
	}
	for name, e := range events {
		t.Run(name, func(t *testing.T) {
			before := w.s.Clone()
			err := frames.Apply(w.s, e)
			require.ErrorIs(t, err, frames.ErrInconsistentEvent)
			assert.True(t, reflect.DeepEqual(before, w.s.Clone()), "a rejected event changed the state")
		})
	}
	t.Run("a command naming a ref", func(t *testing.T) {
		_, err := w.do(&frames.AddContextHandle{Header: w.hdr(), FrameID: "r", Handle: frames.ContextHandle{
			ID: "y", Priority: compaction.Low, ContentRef: hash}})
		require.ErrorIs(t, err, frames.ErrInvalidArgument)
		_, err = w.do(&frames.AddContextHandle{Header: w.hdr(), FrameID: "r", Handle: frames.ContextHandle{
			ID: "y", Priority: compaction.Low, Content: text, StoresContent: true}})
		require.ErrorIs(t, err, frames.ErrInvalidArgument)
	})
	t.Run("resolving content under another hash", func(t *testing.T) {
		c := w.s.Clone()
		require.ErrorIs(t, c.ResolveContent(map[string]string{hash: "not it"}), frames.ErrInconsistentEvent)
		require.ErrorIs(t, c.ResolveContent(map[string]string{frames.ContentHash("x"): "x"}), frames.ErrInconsistentEvent)
		assert.True(t, reflect.DeepEqual(w.s.Clone(), c))
	})
}

func TestSnapshotViewHoldsRefsOnly(t *testing.T) {
	w := newWorld(t)
	w.push("r", "", 1000)
	text := big("v")
	w.addHandle("r", "h", text)
	w.addHandle("r", "small", "s")
	before := w.s.Clone()
	v := w.s.SnapshotView()
	assert.Empty(t, v.Frames["r"].Handle("h").Content)
	assert.Equal(t, frames.ContentHash(text), v.Frames["r"].Handle("h").ContentRef)
	assert.Equal(t, "s", v.Frames["r"].Handle("small").Content)
	assert.True(t, reflect.DeepEqual(before, w.s.Clone()), "the view does not change the state")
	assert.Equal(t, text, w.s.Frames["r"].Handle("h").Content)
}

func TestRebuildFinishedInlinesRefs(t *testing.T) {
	w := newWorld(t)
	w.push("r", "", 1000)
	w.push("c", "r", 100)
	text := big("f")
	w.addHandle("c", "h1", text)
	w.addHandle("c", "h2", text)
	w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "c", Status: frames.StatusCompleted})
	var own, withoutContent []frames.Versioned
	for i, e := range w.log {
		if e.EventMeta().Frame != "c" {
			continue
		}
		v := frames.Versioned{Version: int64(i + 1), Event: e}
		own = append(own, v)
		if ha, ok := e.(*frames.HandleAdded); ok && ha.Handle.StoresContent {
			c := *ha
			c.Handle.Content, c.Handle.StoresContent, c.Handle.ContentRef = "", false, frames.ContentHash(text) // a reference that nothing stores
			v.Event = &c
		}
		withoutContent = append(withoutContent, v)
	}
	f, ok, err := frames.RebuildFinished(own)
	require.NoError(t, err)
	require.True(t, ok)
	require.Len(t, f.Handles, 2)
	for _, h := range f.Handles {
		assert.Equal(t, text, h.Content)
	}
	_, _, err = frames.RebuildFinished(withoutContent)
	require.ErrorIs(t, err, frames.ErrInconsistentEvent, "a reference to content not in the span")
}
