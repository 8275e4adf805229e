package eventstore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
)

// Chains for the search tests are built without ContinueFrame: the links
// are ordinary frames whose chain fields the driver sets (in the state,
// so that the frame.popped records carry them, and on the frame.pushed
// events), the way a continuation records them.

// startLink pushes a link continuing prev ("" for the root) of the chain
// rooted at root.
func (d *scopeDriver) startLink(id, prev, root, goal string) {
	d.t.Helper()
	evs, err := frames.Decide(frames.DefaultConfig(), d.st, &frames.PushFrame{Header: d.hdr(), FrameID: id, Goal: goal,
		Budget: budget.TokenBudget{Total: 1 << 40}})
	require.NoError(d.t, err)
	p := evs[0].(*frames.FramePushed)
	if prev != "" {
		p.ContinuedFrom, p.ChainRoot = prev, root
	}
	d.append(evs...)
	f := d.st.Frame(id)
	if prev != "" {
		f.ContinuedFrom = prev
	}
	f.ChainRoot = root
}

// continueLink ends link id as continued by next.
func (d *scopeDriver) continueLink(id, next string) {
	d.t.Helper()
	d.st.Frame(id).ContinuedTo = next
	evs, err := frames.Decide(frames.DefaultConfig(), d.st, &frames.PopFrame{Header: d.hdr(), FrameID: id, Status: frames.StatusCompleted})
	require.NoError(d.t, err)
	p := evs[0].(*frames.FramePopped)
	p.Status, p.ContinuedTo = frames.StatusContinued, next
	p.Final.Status, p.Final.ContinuedTo = frames.StatusContinued, next
	d.append(evs...)
}

func (d *scopeDriver) tool(frame, call, input, output string) {
	d.do(&frames.StartToolCall{Header: d.hdr(), FrameID: frame, CallID: call, Name: "grep"})
	d.do(&frames.FinishToolCall{Header: d.hdr(), FrameID: frame, CallID: call,
		CallHandle:   frames.ContextHandle{ID: call + "-c", Kind: "tool_call", Priority: compaction.Medium, Content: input, Tokens: 3},
		ResultHandle: frames.ContextHandle{ID: call + "-r", Kind: "tool_result", Priority: compaction.Medium, Content: output, Tokens: 3}})
}

func (d *scopeDriver) links() eventstore.LinkSource {
	return eventstore.StoreLinks(d.store, d.st.Scope, func(id string) (eventstore.ChainLink, bool) {
		if f := d.st.Frame(id); f != nil {
			return eventstore.FrameLink(f), true
		}
		return eventstore.ChainLink{}, false
	})
}

func (d *scopeDriver) chain(id string) eventstore.Chain {
	d.t.Helper()
	c, err := eventstore.ResolveChain(context.Background(), id, d.links())
	require.NoError(d.t, err)
	return c
}

// searchAll pages through every hit with the given page size.
func searchAll(t *testing.T, store eventstore.Store, q eventstore.SearchQuery) ([]eventstore.SearchHit, []eventstore.VersionRange, int) {
	t.Helper()
	var all []eventstore.SearchHit
	var unsearched []eventstore.VersionRange
	pages := 0
	for {
		res, err := eventstore.Search(context.Background(), store, q)
		require.NoError(t, err)
		pages++
		all = append(all, res.Hits...)
		unsearched = res.Unsearched
		if res.Next == "" {
			return all, unsearched, pages
		}
		require.LessOrEqual(t, pages, 1000, "pagination does not end")
		q.Cursor = res.Next
	}
}

type hitKey struct{ Frame, Item, Kind string }

func keys(hs []eventstore.SearchHit) []hitKey {
	out := make([]hitKey, len(hs))
	for i, h := range hs {
		out[i] = hitKey{h.FrameID, h.ItemID, h.Kind}
	}
	return out
}

// buildChain: A (continued) → B (continued) → C (live), with the needle
// in a goal, inline handles, content stored once by reference and
// referred to again, a tool call and its result, a compacted handle and a
// summary, a result, and in a frame outside the chain.
func buildChain(t *testing.T) *scopeDriver {
	d := newScopeDriver(t, "s")
	big := largeText("big needle stored once ", 4<<10)
	d.startLink("A", "", "A", "plan the needle hunt")
	d.add("A", "a1", "first needle here")
	d.add("A", "a2", big)   // stores the content
	d.add("A", "a3", big)   // refers to it
	d.add("A", "a4", "hay") // no hit
	d.tool("A", "t1", "grep needle", "found the needle twice")
	d.do(&frames.CompactContext{Header: d.hdr(), FrameID: "A", Strategy: "custom", Removed: []string{"a1"},
		Summary: &frames.ContextHandle{ID: "s1", Kind: "summary", Priority: compaction.High, Content: "summary: a needle was found", Tokens: 2, Covers: []string{"a1"}}})
	d.push("X", "") // outside the chain
	d.add("X", "x1", "needle outside the chain")
	d.do(&frames.AddResult{Header: d.hdr(), FrameID: "A", Result: frames.ResultRef{ID: "r1", Kind: "file", Ref: "out/needle.txt", Summary: "the needle report"}})
	d.continueLink("A", "B")
	d.startLink("B", "A", "A", "second link")
	d.add("B", "b1", "more hay, then a needle ✓ with 日本語")
	d.add("B", "b2", big) // B stores it again (its own span)
	d.continueLink("B", "C")
	d.startLink("C", "B", "A", "third link, needle goal")
	d.add("C", "c1", "live needle")
	return d
}

var wantChainHits = []hitKey{
	{"A", "", eventstore.HitGoal},
	{"A", "a1", eventstore.HitHandle},
	{"A", "a2", eventstore.HitHandle},
	{"A", "a3", eventstore.HitHandle}, // by reference
	{"A", "t1-c", eventstore.HitToolCall},
	{"A", "t1-r", eventstore.HitToolResult},
	{"A", "s1", eventstore.HitSummary},
	{"A", "r1", eventstore.HitResultRef},
	{"A", "r1", eventstore.HitResult},
	{"B", "b1", eventstore.HitHandle},
	{"B", "b2", eventstore.HitHandle},
	{"C", "", eventstore.HitGoal},
	{"C", "c1", eventstore.HitHandle},
}

func TestResolveChainFromAnyLink(t *testing.T) {
	d := buildChain(t)
	for _, id := range []string{"A", "B", "C"} {
		t.Run(id, func(t *testing.T) {
			c := d.chain(id)
			assert.Equal(t, []string{"A", "B", "C"}, c.IDs())
			assert.Equal(t, "C", c.Head)
			assert.Equal(t, "A", c.Root)
			assert.Equal(t, frames.StatusContinued, c.Links[0].Status)
			assert.Equal(t, frames.StatusActive, c.Links[2].Status)
		})
	}
	t.Run("a frame in no chain is a chain of one", func(t *testing.T) {
		assert.Equal(t, []string{"X"}, d.chain("X").IDs())
	})
	t.Run("unknown frame", func(t *testing.T) {
		_, err := eventstore.ResolveChain(context.Background(), "nope", d.links())
		require.ErrorIs(t, err, frames.ErrFrameNotFound)
	})
}

func TestSearchChainFindsEveryKindOfContent(t *testing.T) {
	d := buildChain(t)
	c := d.chain("B")
	for _, tc := range []struct {
		name  string
		text  string
		regex bool
		want  []hitKey
	}{
		{"substring", "needle", false, wantChainHits},
		{"regex", `ne+dle`, true, wantChainHits},
		{"regex anchored", `^live needle$`, true, []hitKey{{"C", "c1", eventstore.HitHandle}}},
		{"unicode", "日本", false, []hitKey{{"B", "b1", eventstore.HitHandle}}},
		{"no hit", "zebra", false, []hitKey{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := eventstore.Search(context.Background(), d.store, eventstore.SearchQuery{Scope: "s", Links: c.Links, Text: tc.text, Regex: tc.regex, Limit: 500})
			require.NoError(t, err)
			assert.Equal(t, tc.want, append([]hitKey{}, keys(res.Hits)...))
			assert.Empty(t, res.Next)
			assert.Empty(t, res.Unsearched)
			for _, h := range res.Hits {
				assert.True(t, strings.Contains(h.Snippet, "needle") || !strings.Contains(tc.text, "ne"), h.Snippet)
				assert.Positive(t, h.Version)
			}
		})
	}
}

func TestSearchSnippet(t *testing.T) {
	d := buildChain(t)
	res, err := eventstore.Search(context.Background(), d.store, eventstore.SearchQuery{Scope: "s", Links: d.chain("A").Links, Text: "stored once", Limit: 1})
	require.NoError(t, err)
	require.Len(t, res.Hits, 1)
	// 80 bytes either side at most: the match begins at byte 11.
	assert.Equal(t, "big needle stored once "+strings.Repeat("x", 79), res.Hits[0].Snippet)

	s := strings.Repeat("é", 100) + "NEEDLE" + strings.Repeat("日", 100)
	got := eventstore.Snippet(s, 200, 206)
	assert.True(t, strings.HasPrefix(got, "é") && strings.HasSuffix(got, "日"), got)
	assert.Equal(t, 80+6+78, len(got)) // 40 é (80 bytes), 26 日 (78 bytes)
}

func TestSearchPaginationCoversEveryHitOnce(t *testing.T) {
	d := buildChain(t)
	c := d.chain("C")
	full, err := eventstore.Search(context.Background(), d.store, eventstore.SearchQuery{Scope: "s", Links: c.Links, Text: "needle", Limit: 500})
	require.NoError(t, err)
	for _, limit := range []int{1, 2, 3, 5, 12, 13, 14} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			all, _, pages := searchAll(t, d.store, eventstore.SearchQuery{Scope: "s", Links: c.Links, Text: "needle", Limit: limit})
			assert.Equal(t, keys(full.Hits), keys(all))
			assert.Equal(t, (len(full.Hits)+limit-1)/limit, pages)
		})
	}
}

func TestSearchRefusesBadInput(t *testing.T) {
	d := buildChain(t)
	c := d.chain("A")
	first, err := eventstore.Search(context.Background(), d.store, eventstore.SearchQuery{Scope: "s", Links: c.Links, Text: "needle", Limit: 2})
	require.NoError(t, err)
	require.NotEmpty(t, first.Next)
	other, err := eventstore.Search(context.Background(), d.store, eventstore.SearchQuery{Scope: "s", Links: c.Links, Text: "hay", Limit: 1})
	require.NoError(t, err)
	require.NotEmpty(t, other.Next)
	for _, tc := range []struct {
		name string
		q    eventstore.SearchQuery
		msg  string
	}{
		{"bad regex", eventstore.SearchQuery{Text: "needle(", Regex: true}, "regular expression"},
		{"empty query", eventstore.SearchQuery{Text: ""}, "empty"},
		{"limit too large", eventstore.SearchQuery{Text: "needle", Limit: 501}, "limit"},
		{"negative limit", eventstore.SearchQuery{Text: "needle", Limit: -1}, "limit"},
		{"garbage cursor", eventstore.SearchQuery{Text: "needle", Cursor: "%%%"}, "cursor"},
		{"foreign cursor", eventstore.SearchQuery{Text: "needle", Cursor: other.Next}, "another search"},
		{"cursor of another chain", eventstore.SearchQuery{Text: "needle", Cursor: first.Next, Links: d.chain("X").Links}, "another search"},
		{"stale cursor", eventstore.SearchQuery{Text: "needle", Cursor: staleCursor(t, first.Next)}, "stale"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.q.Scope = "s"
			if tc.q.Links == nil {
				tc.q.Links = c.Links
			}
			_, err := eventstore.Search(context.Background(), d.store, tc.q)
			require.ErrorIs(t, err, frames.ErrInvalidArgument)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
}

// staleCursor moves a cursor past the chain's last version.
func staleCursor(t *testing.T, c string) string {
	t.Helper()
	return eventstore.CursorAt(c, 1<<40)
}

func TestResolveChainDetectsCycles(t *testing.T) {
	for _, tc := range []struct {
		name  string
		links map[string][2]string // id -> {from, to}
		start string
		at    string
	}{
		{"backward", map[string][2]string{"A": {"C", "B"}, "B": {"A", "C"}, "C": {"B", "A"}}, "B", "B"},
		{"self", map[string][2]string{"A": {"A", ""}}, "A", "A"},
		{"forward", map[string][2]string{"A": {"", "B"}, "B": {"A", "A"}}, "A", "A"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := eventstore.NewMemory()
			ctx := context.Background()
			v := int64(0)
			for _, id := range []string{"A", "B", "C"} {
				l, ok := tc.links[id]
				if !ok {
					continue
				}
				m := frames.Meta{Scope: "s", Frame: id, At: 1}
				rec := &frames.FrameRecord{ID: id, Goal: "g", Status: frames.StatusContinued, PushSeq: v + 1,
					ContinuedFrom: l[0], ContinuedTo: l[1], ChainRoot: "A"}
				var evs []eventstore.Event
				for _, e := range []frames.Event{
					&frames.FramePushed{Meta: m, Goal: "g", ContinuedFrom: l[0], ChainRoot: "A"},
					&frames.FramePopped{Meta: m, Status: frames.StatusContinued, ContinuedTo: l[1], Final: rec},
				} {
					enc, err := eventstore.EncodeFrameEvent(e)
					require.NoError(t, err)
					evs = append(evs, enc)
				}
				res, err := store.Append(ctx, "s", eventstore.Any, evs)
				require.NoError(t, err)
				v = res.LastVersion
			}
			_, err := eventstore.ResolveChain(ctx, tc.start, eventstore.StoreLinks(store, "s", nil))
			require.Error(t, err)
			assert.ErrorIs(t, err, eventstore.ErrChainCycle)
			assert.ErrorIs(t, err, eventstore.ErrCorrupt)
			assert.Contains(t, err.Error(), fmt.Sprintf("frame %q", tc.at))
		})
	}
	t.Run("links that disagree", func(t *testing.T) {
		d := buildChain(t)
		d.st.Frame("C").ContinuedFrom = "X" // X says nothing of C
		_, err := eventstore.ResolveChain(context.Background(), "C", d.links())
		require.NoError(t, err, "a neighbour that names no successor is not a contradiction")
		d.st.Frame("C").ContinuedFrom = "A" // A says it continued to B
		_, err = eventstore.ResolveChain(context.Background(), "C", d.links())
		require.ErrorIs(t, err, eventstore.ErrCorrupt)
		assert.Contains(t, err.Error(), `"A"`)
	})
}

// removeThrough archives (when dir is set) and removes the scope's
// history through version through, as a retention pass does.
func (d *scopeDriver) removeThrough(through int64, dir string) string {
	d.t.Helper()
	ctx := context.Background()
	rec, ok, err := eventstore.ReadRecord(ctx, d.store, "s", through)
	require.NoError(d.t, err)
	require.True(d.t, ok)
	cmd := &frames.ApplyRetention{Header: d.hdr(), Through: through, Hash: fmt.Sprintf("%x", rec.Hash[:]), Runs: 1, Why: "test"}
	path := ""
	if dir != "" {
		var digest string
		path, digest, err = eventstore.WriteArchive(ctx, d.store, "s", 1, through, dir)
		require.NoError(d.t, err)
		cmd.Archive, cmd.ArchiveSHA256 = path, digest
	}
	d.do(cmd)
	d.snapshot()
	_, err = d.store.RemovePrefix(ctx, "s", through)
	require.NoError(d.t, err)
	return path
}

func TestSearchRemovedHistory(t *testing.T) {
	ctx := context.Background()
	popA := func(d *scopeDriver) int64 {
		sp, ok, err := d.store.Lookup(ctx, "s", eventstore.FrameKey("A"))
		require.NoError(t, err)
		require.True(t, ok)
		return sp.Last
	}
	t.Run("archived: searched", func(t *testing.T) {
		d := buildChain(t)
		d.removeThrough(popA(d), t.TempDir())
		c := d.chain("C")
		assert.Equal(t, []string{"A", "B", "C"}, c.IDs())
		assert.True(t, c.Links[0].Gone, "A's records are gone from the store")
		res, err := eventstore.Search(ctx, d.store, eventstore.SearchQuery{Scope: "s", Links: c.Links, Text: "needle", Limit: 500})
		require.NoError(t, err)
		assert.Equal(t, wantChainHits, keys(res.Hits))
		assert.Empty(t, res.Unsearched)
		all, _, _ := searchAll(t, d.store, eventstore.SearchQuery{Scope: "s", Links: c.Links, Text: "needle", Limit: 2})
		assert.Equal(t, wantChainHits, keys(all))
	})
	t.Run("archive moved: found under ArchiveDir", func(t *testing.T) {
		d := buildChain(t)
		dir := t.TempDir()
		path := d.removeThrough(popA(d), dir)
		moved := t.TempDir()
		require.NoError(t, os.MkdirAll(filepath.Join(moved, "s"), 0o700))
		require.NoError(t, os.Rename(path, filepath.Join(moved, "s", filepath.Base(path))))
		c := d.chain("C")
		res, err := eventstore.Search(ctx, d.store, eventstore.SearchQuery{Scope: "s", Links: c.Links, Text: "needle", Limit: 500, ArchiveDir: moved})
		require.NoError(t, err)
		assert.Equal(t, wantChainHits, keys(res.Hits))
		assert.Empty(t, res.Unsearched)
	})
	for _, tc := range []struct {
		name string
		gone func(path string)
		why  string
	}{
		{"deleted without an archive", nil, "without an archive"},
		{"archive file removed", func(path string) { require.NoError(t, os.Remove(path)) }, "no longer there"},
	} {
		t.Run(tc.name+": named", func(t *testing.T) {
			d := buildChain(t)
			through := popA(d)
			dir := ""
			if tc.gone != nil {
				dir = t.TempDir()
			}
			path := d.removeThrough(through, dir)
			if tc.gone != nil {
				tc.gone(path)
			}
			c := d.chain("B")
			res, err := eventstore.Search(ctx, d.store, eventstore.SearchQuery{Scope: "s", Links: c.Links, Text: "needle", Limit: 500})
			require.NoError(t, err)
			assert.Equal(t, wantChainHits[9:], keys(res.Hits), "only what is still stored")
			require.Len(t, res.Unsearched, 1)
			assert.Equal(t, int64(1), res.Unsearched[0].From)
			assert.Equal(t, through, res.Unsearched[0].Through)
			assert.Contains(t, res.Unsearched[0].Why, tc.why)
		})
	}
	t.Run("a chain wholly after the removal names nothing", func(t *testing.T) {
		d := buildChain(t)
		d.push("Z", "")
		d.add("Z", "z1", "needle")
		d.removeThrough(popA(d), "")
		res, err := eventstore.Search(ctx, d.store, eventstore.SearchQuery{Scope: "s", Links: d.chain("Z").Links, Text: "needle"})
		require.NoError(t, err)
		assert.Equal(t, []hitKey{{"Z", "z1", eventstore.HitHandle}}, keys(res.Hits))
		assert.Empty(t, res.Unsearched)
	})
}
