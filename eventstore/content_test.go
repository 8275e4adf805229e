package eventstore_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
)

// scopeDriver decides, appends and applies commands like the shell does.
type scopeDriver struct {
	t     *testing.T
	store eventstore.Store
	st    *frames.State
	now   int64
}

func newScopeDriver(t *testing.T, scope string) *scopeDriver {
	return &scopeDriver{t: t, store: eventstore.NewMemory(), st: frames.NewState(scope, 0), now: 1000}
}

func (d *scopeDriver) hdr() frames.Header {
	d.now += 10
	return frames.Header{Now: d.now}
}

func (d *scopeDriver) do(cmd frames.Command) []frames.Event {
	d.t.Helper()
	evs, err := frames.Decide(frames.DefaultConfig(), d.st, cmd)
	require.NoError(d.t, err)
	d.append(evs...)
	return evs
}

func (d *scopeDriver) append(evs ...frames.Event) {
	d.t.Helper()
	recs := make([]eventstore.Event, len(evs))
	for i, e := range evs {
		var err error
		recs[i], err = eventstore.EncodeFrameEvent(e)
		require.NoError(d.t, err)
	}
	_, err := d.store.Append(context.Background(), d.st.Scope, d.st.Version, recs)
	require.NoError(d.t, err)
	for _, e := range evs {
		require.NoError(d.t, frames.Apply(d.st, e))
		require.NoError(d.t, frames.CheckInvariants(d.st))
	}
}

func (d *scopeDriver) push(id, parent string) {
	d.do(&frames.PushFrame{Header: d.hdr(), FrameID: id, ParentID: parent, Goal: "g", Budget: budget.TokenBudget{Total: 100}})
}

func (d *scopeDriver) add(frame, id, content string) []frames.Event {
	return d.do(&frames.AddContextHandle{Header: d.hdr(), FrameID: frame, Handle: frames.ContextHandle{
		ID: id, Kind: "text", Priority: compaction.Low, Content: content, Tokens: 5}})
}

func (d *scopeDriver) snapshot() {
	d.t.Helper()
	snap, err := eventstore.EncodeState(d.st)
	require.NoError(d.t, err)
	require.NoError(d.t, d.store.SaveSnapshot(context.Background(), d.st.Scope, snap))
}

func largeText(tag string, n int) string {
	return tag + strings.Repeat("x", n-len(tag))
}

func TestSnapshotSizeIndependentOfContentSize(t *testing.T) {
	sizes := map[string]int{}
	for _, size := range []int{2 << 10, 200 << 10} {
		d := newScopeDriver(t, "s")
		d.push("r", "")
		for i := range 5 {
			d.add("r", "h"+string(rune('a'+i)), largeText(string(rune('a'+i)), size))
		}
		snap, err := eventstore.EncodeState(d.st)
		require.NoError(t, err)
		sizes[strings.Repeat("k", size>>10)] = len(snap.Data)
		assert.Less(t, len(snap.Data), 2<<10, "content of %d bytes is not in the snapshot", size)
		assert.Equal(t, largeText("a", size), d.st.Frames["r"].Handle("ha").Content, "the state still holds it")
	}
	var got []int
	for _, n := range sizes {
		got = append(got, n)
	}
	require.Len(t, got, 2)
	assert.Equal(t, got[0], got[1], "the snapshot does not grow with the content")
}

func TestLoadStateReadsContentBack(t *testing.T) {
	ctx := context.Background()
	d := newScopeDriver(t, "s")
	d.push("r", "")
	a, b := largeText("a", 3000), largeText("b", 5000)
	d.add("r", "h1", a)
	d.add("r", "h2", a)
	d.add("r", "h3", b)
	d.add("r", "small", "small")
	d.snapshot()
	c := largeText("c", 4000)
	d.add("r", "h4", c) // after the snapshot: replayed
	d.add("r", "h5", b) // refers to content the snapshot lacks

	st, info, err := eventstore.LoadState(ctx, d.store, "s", 0, 0, nil)
	require.NoError(t, err)
	require.True(t, info.FromSnapshot)
	assert.True(t, reflect.DeepEqual(d.st.Clone(), st.Clone()), "loaded from the snapshot = the live state")
	for id, want := range map[string]string{"h1": a, "h2": a, "h3": b, "h4": c, "h5": b, "small": "small"} {
		assert.Equal(t, want, st.Frames["r"].Handle(id).Content, id)
	}
	pack, err := frames.AssemblePack(frames.DefaultConfig(), st, frames.PackQuery{FrameID: "r", Budget: 100_000}, nil)
	require.NoError(t, err)
	var total int
	for _, it := range pack.Segments {
		total += len(it.Content)
	}
	assert.Equal(t, 2*len(a)+2*len(b)+len(c)+len("small"), total, "a pack holds the full content")

	require.NoError(t, d.store.SaveSnapshot(ctx, "s", eventstore.Snapshot{Version: 1, Format: 0, Data: []byte{0xc0}}))
	full, info, err := eventstore.LoadState(ctx, d.store, "s", 0, 0, nil)
	require.NoError(t, err)
	require.False(t, info.FromSnapshot)
	assert.True(t, reflect.DeepEqual(st.Clone(), full.Clone()), "a full replay gives the same state")
}

func TestLoadStateDistrustsASnapshotWhoseContentIsElsewhere(t *testing.T) {
	ctx := context.Background()
	d := newScopeDriver(t, "s")
	d.push("r", "")
	a := largeText("a", 3000)
	d.add("r", "h", a)
	bad := d.st.Clone()
	bad.Content[frames.ContentHash(a)].Version = 1 // the frame.pushed record holds no content
	snap, err := eventstore.EncodeState(bad)
	require.NoError(t, err)
	require.NoError(t, d.store.SaveSnapshot(ctx, "s", snap))
	st, info, err := eventstore.LoadState(ctx, d.store, "s", 0, 0, nil)
	require.NoError(t, err)
	assert.False(t, info.FromSnapshot, "the whole stream is replayed instead")
	assert.Equal(t, a, st.Frames["r"].Handle("h").Content)
}

func TestReplayOfAnUnknownContentRefIsInconsistent(t *testing.T) {
	d := newScopeDriver(t, "s")
	d.push("r", "")
	ev := &frames.HandleAdded{Meta: frames.Meta{Scope: "s", Frame: "r", At: d.now + 1}, Handle: frames.ContextHandle{
		ID: "h", Priority: compaction.Low, ContentRef: frames.ContentHash("never stored")}}
	rec, err := eventstore.EncodeFrameEvent(ev)
	require.NoError(t, err)
	_, err = d.store.Append(context.Background(), "s", d.st.Version, []eventstore.Event{rec})
	require.NoError(t, err)
	_, _, err = eventstore.LoadState(context.Background(), d.store, "s", 0, 0, nil)
	require.ErrorIs(t, err, eventstore.ErrCorrupt)
	assert.Contains(t, err.Error(), frames.ErrInconsistentEvent.Error())
}

func TestLoadFinishedFrameReadsItsContent(t *testing.T) {
	ctx := context.Background()
	d := newScopeDriver(t, "s")
	d.push("r", "")
	d.push("c", "r")
	a := largeText("a", 3000)
	d.add("r", "h", a)         // stored by r
	d.add("c", "h1", a)        // stored again by c
	evs := d.add("c", "h3", a) // c refers to its own copy
	require.Empty(t, evs[0].(*frames.HandleAdded).Handle.Content)
	d.add("c", "h2", largeText("own", 2000))
	d.do(&frames.PopFrame{Header: d.hdr(), FrameID: "c", Status: frames.StatusCompleted})
	f, err := eventstore.LoadFinishedFrame(ctx, d.store, "s", "c")
	require.NoError(t, err)
	require.Len(t, f.Handles, 3)
	assert.Equal(t, a, f.Handles[0].Content)
	assert.Equal(t, a, f.Handles[1].Content)
	assert.Equal(t, largeText("own", 2000), f.Handles[2].Content)

	all, err := eventstore.LoadAll(ctx, d.store, "s", 0)
	require.NoError(t, err)
	assert.Equal(t, a, all.Frames["c"].Handle("h1").Content, "the fold of the whole log holds it too")
}

// A format 3 snapshot (before content by reference) is read as it is: a
// scope whose history retention removed could not be replayed instead.
func TestFormat3SnapshotIsRead(t *testing.T) {
	d := newScopeDriver(t, "s")
	d.push("r", "")
	d.add("r", "h", "inline")
	snap, err := eventstore.EncodeState(d.st)
	require.NoError(t, err)
	snap.Format = 3
	got, ok, err := eventstore.DecodeState("s", snap)
	require.NoError(t, err)
	require.True(t, ok)
	assert.True(t, reflect.DeepEqual(d.st.Clone(), got.Clone()))
	snap.Format = 2
	_, ok, err = eventstore.DecodeState("s", snap)
	require.NoError(t, err)
	assert.False(t, ok, "older formats are replayed")
}
