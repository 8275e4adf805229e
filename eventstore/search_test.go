package eventstore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/internal/chaintest"
)

// Chains for the search tests are real: a link is continued with the
// core's ContinueFrame (the mint naming the next link), which in one append
// pops it, pushes the next link and adds the handles that link carries (a
// continuation segment, a summary, every Critical handle and the trailing
// handles from a user's); the fold checks every chain event.

// testWindow is the roots' context window: a continuation must free 5% of
// it.
const testWindow = 10_000

// startLink starts link id of the chain rooted at root: a root (prev "")
// is pushed; any other link was pushed by the continuation that made it,
// and gets goal with an UpdateFrame when it is not the one it took over.
func (d *scopeDriver) startLink(id, prev, root, goal string) {
	d.t.Helper()
	if prev == "" {
		d.do(&frames.PushFrame{Header: d.hdr(), FrameID: id, Goal: goal, Budget: budget.TokenBudget{Total: 1 << 40}, ContextWindow: testWindow})
		return
	}
	f := d.st.Frame(id)
	require.NotNil(d.t, f, "the continuation pushed %q", id)
	require.Equal(d.t, prev, f.ContinuedFrom)
	require.Equal(d.t, root, f.ChainRoot)
	if f.Goal != goal {
		d.do(&frames.UpdateFrame{Header: d.hdr(), FrameID: id, Goal: &goal})
	}
}

// continueLink continues link id as next (ContinueFrame with ceiling and
// summary: "" the extractive one's) and returns the append's events.
func (d *scopeDriver) continueLink(id, next string, ceiling int64, summary string) []frames.Event {
	d.t.Helper()
	return d.do(&frames.ContinueFrame{Header: d.hdr(), FrameID: id, ResumeCeiling: ceiling, Summary: summary,
		With: frames.ContinueWith{Mint: chaintest.Mint(next)}})
}

// addH adds a handle with a role, a priority and a token count.
func (d *scopeDriver) addH(frame, id string, role frames.Role, p compaction.Priority, content string, tokens int64) {
	d.t.Helper()
	d.do(&frames.AddContextHandle{Header: d.hdr(), FrameID: frame, Handle: frames.ContextHandle{
		ID: id, Kind: "text", Role: role, Priority: p, Content: content, Tokens: tokens}})
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
// summary, a result, and in a frame outside the chain; and in what the
// continuations carry: the summaries, a Critical handle (carried into
// every link) and the trailing handles from a user's.
func buildChain(t *testing.T) *scopeDriver {
	d := newScopeDriver(t, "s")
	big := largeText("big needle stored once ", 4<<10)
	d.startLink("A", "", "A", "plan the needle hunt")
	d.addH("A", "a1", "", compaction.Low, "first needle here", 600) // compacted: frees 6% of the window
	d.addH("A", "a2", "", compaction.Low, big, 1000)                // stores the content
	d.addH("A", "a3", "", compaction.Low, big, 1000)                // refers to it
	d.add("A", "a4", "hay")                                         // no hit
	d.tool("A", "t1", "grep needle", "found the needle twice")
	d.do(&frames.CompactContext{Header: d.hdr(), FrameID: "A", Strategy: "custom", Removed: []string{"a1"},
		Summary: &frames.ContextHandle{ID: "s1", Kind: "summary", Priority: compaction.High, Content: "summary: a needle was found", Tokens: 2, Covers: []string{"a1"}}})
	d.push("X", "") // outside the chain
	d.add("X", "x1", "needle outside the chain")
	d.do(&frames.AddResult{Header: d.hdr(), FrameID: "A", Result: frames.ResultRef{ID: "r1", Kind: "file", Ref: "out/needle.txt", Summary: "the needle report"}})
	d.addH("A", "a5", frames.RoleSystem, compaction.Critical, "critical: keep the needle", 5) // carried into every link
	d.addH("A", "a6", frames.RoleUser, compaction.Medium, "is the needle still there?", 5)    // the trailing run starts here
	d.addH("A", "a7", frames.RoleAssistant, compaction.Medium, "hay all around", 5)           // carried, no hit
	// B carries: B-seg, B-sum (this summary), a5, a6, a7.
	d.continueLink("A", "B", 0, "the needle report is out/needle.txt")
	d.startLink("B", "A", "A", "second link")
	d.addH("B", "b2", "", compaction.Low, big, 1000) // B stores it again (its own span)
	d.addH("B", "b1", frames.RoleUser, compaction.Medium, "more hay, then a needle ✓ with 日本語", 5)
	// C carries: C-seg, C-sum (the extractive summary of the rest), B-seg
	// and a5 (Critical), b1 (the trailing run within 500 tokens).
	d.continueLink("B", "C", 500, "")
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
	{"A", "a5", eventstore.HitHandle},
	{"A", "a6", eventstore.HitHandle},
	// The continuation A → B: B's push takes A's goal over, then the
	// handles B carries.
	{"B", "", eventstore.HitGoal},
	{"B", "B-sum", eventstore.HitSummary},
	{"B", "a5", eventstore.HitHandle},
	{"B", "a6", eventstore.HitHandle},
	{"B", "b2", eventstore.HitHandle},
	{"B", "b1", eventstore.HitHandle},
	// The continuation B → C (C's push takes "second link" over: no hit).
	{"C", "C-sum", eventstore.HitSummary},
	{"C", "a5", eventstore.HitHandle},
	{"C", "b1", eventstore.HitHandle},
	{"C", "", eventstore.HitGoal}, // its goal set
	{"C", "c1", eventstore.HitHandle},
}

// hitsOf returns the hits of want whose link is not one of the frames
// gone.
func hitsOf(want []hitKey, gone ...string) []hitKey {
	out := []hitKey{}
	for _, h := range want {
		if !slices.Contains(gone, h.Frame) {
			out = append(out, h)
		}
	}
	return out
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
		{"unicode", "日本", false, []hitKey{{"B", "b1", eventstore.HitHandle}, {"C", "b1", eventstore.HitHandle}}}, // and its carried copy
		{"a continuation's own text", "This task was continued from frame", false, []hitKey{
			{"B", "B-seg", eventstore.HitHandle}, {"C", "C-seg", eventstore.HitHandle}}}, // C-seg replaces B-seg: never carried
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
	n := len(full.Hits)
	require.Len(t, full.Hits, len(wantChainHits))
	for _, limit := range []int{1, 2, 3, 5, n - 1, n, n + 1} {
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
		{"query not UTF-8", eventstore.SearchQuery{Text: "needle\xff"}, "UTF-8"},
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
		// A copy of a real chain's store whose C says it continues
		// another frame: a store the fold would refuse (written raw).
		d := buildChain(t)
		for _, tc := range []struct {
			from string
			err  string // "" : resolves
		}{
			{"X", ""},      // X says nothing of C: a neighbour that names no successor is not a contradiction
			{"A", `"A"`},   // A says it continued to B
			{"C", "cycle"}, // C continues itself
		} {
			t.Run("C continues "+tc.from, func(t *testing.T) {
				cp := corruptCopy(t, d.store, "s", func(ev frames.Event) {
					if p, ok := ev.(*frames.FramePushed); ok && p.Frame == "C" {
						p.ContinuedFrom = tc.from
					}
				})
				c, err := eventstore.ResolveChain(context.Background(), "C", eventstore.StoreLinks(cp, "s", nil))
				if tc.err == "" {
					require.NoError(t, err)
					assert.Equal(t, []string{"X", "C"}, c.IDs())
					return
				}
				require.ErrorIs(t, err, eventstore.ErrCorrupt)
				assert.Contains(t, err.Error(), tc.err)
			})
		}
	})
}

// corruptCopy copies scope's records of store into a new store, each
// event passed through edit first, appended raw (no fold sees them: the
// hash chain is whole, the content is what edit made it).
func corruptCopy(t *testing.T, store eventstore.Store, scope string, edit func(frames.Event)) eventstore.Store {
	t.Helper()
	ctx := context.Background()
	cp := eventstore.NewMemory()
	require.NoError(t, store.ReadStream(ctx, scope, 1, func(r eventstore.Record) error {
		ev, err := eventstore.DecodeFrameEvent(r)
		if err != nil {
			return err
		}
		edit(ev)
		rec, err := eventstore.EncodeFrameEvent(ev)
		if err != nil {
			return err
		}
		_, err = cp.Append(ctx, scope, r.Version-1, []eventstore.Event{rec})
		return err
	}))
	return cp
}

// removeThrough archives (when dir is set) and removes the scope's
// history through version through, as a retention pass does — once the
// chain's head C finished: the core refuses to cut into a chain whose head
// is live.
func (d *scopeDriver) removeThrough(through int64, dir string) string {
	d.t.Helper()
	ctx := context.Background()
	if f := d.st.Frame("C"); f != nil && f.Status.Live() {
		d.do(&frames.PopFrame{Header: d.hdr(), FrameID: "C", Status: frames.StatusCompleted})
	}
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
			assert.Equal(t, hitsOf(wantChainHits, "A"), keys(res.Hits), "only what is still stored")
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

// The log's links (no state) and the projection's chain agree on a real
// chain, from any link: ids, statuses, where each link was pushed.
func TestResolveChainAgreesWithTheState(t *testing.T) {
	d := buildChain(t)
	for _, id := range []string{"A", "B", "C"} {
		t.Run(id, func(t *testing.T) {
			c, err := eventstore.ResolveChain(context.Background(), id, eventstore.StoreLinks(d.store, "s", nil))
			require.NoError(t, err)
			links, root, err := d.st.ChainLinks(id)
			require.NoError(t, err)
			assert.Equal(t, root, c.Root)
			require.Len(t, c.Links, len(links))
			for i, l := range links {
				assert.Equal(t, l.ID, c.Links[i].ID)
				assert.Equal(t, l.Status, c.Links[i].Status)
				assert.Equal(t, l.PushSeq, c.Links[i].PushSeq)
				assert.Equal(t, l.To, c.Links[i].ContinuedTo)
			}
		})
	}
}

// A link a continuation makes has its every event in one append with its
// predecessor's frame.popped: its range starts right after that pop, and
// the copies it carries are hits at the versions of that append.
func TestSearchLinkRangesOfContinuedLinks(t *testing.T) {
	ctx := context.Background()
	d := buildChain(t)
	span := func(id string) eventstore.Span {
		sp, ok, err := d.store.Lookup(ctx, "s", eventstore.FrameKey(id))
		require.NoError(t, err)
		require.True(t, ok)
		return sp
	}
	links, _, err := d.st.ChainLinks("C")
	require.NoError(t, err)
	for i, l := range links {
		sp := span(l.ID)
		assert.Equal(t, l.PushSeq, sp.First, "%s starts at its push", l.ID)
		if i > 0 {
			assert.Equal(t, span(links[i-1].ID).Last+1, sp.First, "%s is pushed right after its predecessor's pop", l.ID)
		}
	}
	res, err := eventstore.Search(ctx, d.store, eventstore.SearchQuery{Scope: "s", Links: d.chain("B").Links, Text: "needle", Limit: 500})
	require.NoError(t, err)
	assert.Equal(t, span("A").First, res.From)
	assert.Equal(t, span("C").Last, res.Through)
	popA := span("A").Last
	for _, h := range res.Hits {
		if h.FrameID == "B" && h.ItemID != "b1" && h.ItemID != "b2" {
			// B's goal, its summary, a5, a6: the continuation's append.
			assert.Greater(t, h.Version, popA, h.ItemID)
			assert.LessOrEqual(t, h.Version, popA+1+5, h.ItemID) // push + segment, summary, a5, a6, a7
		}
	}
	t.Run("a link's search range alone", func(t *testing.T) {
		only, err := eventstore.Search(ctx, d.store, eventstore.SearchQuery{Scope: "s", Links: []eventstore.ChainLink{{ID: "B"}}, Text: "needle", Limit: 500})
		require.NoError(t, err)
		assert.Equal(t, popA+1, only.From)
		assert.Equal(t, span("B").Last, only.Through)
		assert.Equal(t, hitsOf(wantChainHits, "A", "C"), keys(only.Hits))
	})
}

// resume resumes the chain holding id, whose head finished, as link next
// with a user's message (ResumeChain, the head read from the log).
func (d *scopeDriver) resume(id, next, msgID, message string) []frames.Event {
	d.t.Helper()
	d.st.SetHistory(eventstore.History(d.store, "s")) // the finished head is read from the log
	head, _, err := frames.ResolveChainHead(frames.DefaultConfig(), d.st, id)
	require.NoError(d.t, err)
	f, err := eventstore.LoadFinishedFrame(context.Background(), d.store, "s", head)
	require.NoError(d.t, err)
	return d.do(&frames.ResumeChain{Header: d.hdr(), ChainID: id, Head: f, Message: message, MessageID: msgID,
		Budget: budget.TokenBudget{Total: 1 << 40}, With: frames.ContinueWith{Mint: chaintest.Mint(next)}})
}

// A finished chain resumed by a user: the new link (a root's successor
// pushed anew, not in the continuation's append) is found from any link,
// and what it carries, the user's message last, are its hits.
func TestSearchResumedChain(t *testing.T) {
	ctx := context.Background()
	d := buildChain(t)
	d.do(&frames.PopFrame{Header: d.hdr(), FrameID: "C", Status: frames.StatusCompleted})
	popC := d.st.Version
	evs := d.resume("A", "D", "m1", "one more needle, please")
	d.add("D", "d1", "the last needle")
	assert.Equal(t, popC+1, d.chainPush("D"), "D is pushed in its own append, after C's pop")
	last := evs[len(evs)-1].(*frames.HandleAdded)
	assert.Equal(t, "m1", last.Handle.ID, "the user's message is the resumed link's last handle")
	assert.Equal(t, frames.RoleUser, last.Handle.Role)
	for _, id := range []string{"A", "C", "D"} {
		c, ok, err := eventstore.StateChain(d.st, id)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, []string{"A", "B", "C", "D"}, c.IDs(), "from %s", id)
		assert.Equal(t, "D", c.Head)
		assert.Equal(t, "A", c.Root)
	}
	t.Run("the log alone knows the resume from the new link's side", func(t *testing.T) {
		// C's records end it completed; only D's frame.pushed names C.
		assert.Equal(t, []string{"A", "B", "C", "D"}, d.chain("D").IDs())
		assert.Equal(t, []string{"A", "B", "C"}, d.chain("A").IDs(), "which is why a server resolves chains with its state")
	})
	c, _, err := eventstore.StateChain(d.st, "B")
	require.NoError(t, err)
	fromLog := d.chain("D").Links
	fromLog[2].ContinuedTo = "D" // what only the state records of C
	assert.Equal(t, fromLog, c.Links, "the state's links are the log's")
	res, err := eventstore.Search(ctx, d.store, eventstore.SearchQuery{Scope: "s", Links: c.Links, Text: "needle", Limit: 500})
	require.NoError(t, err)
	want := append(append([]hitKey{}, wantChainHits...),
		hitKey{"D", "", eventstore.HitGoal},         // the head's goal, taken over
		hitKey{"D", "D-sum", eventstore.HitSummary}, // of C-sum, the one handle not carried
		hitKey{"D", "a5", eventstore.HitHandle},
		hitKey{"D", "b1", eventstore.HitHandle},
		hitKey{"D", "c1", eventstore.HitHandle},
		hitKey{"D", "m1", eventstore.HitHandle}, // the user's message, last
		hitKey{"D", "d1", eventstore.HitHandle})
	assert.Equal(t, want, keys(res.Hits))
	assert.Equal(t, d.chainPush("A"), res.From)
	assert.Equal(t, d.st.Version, res.Through)
}

// chainPush is the version link id was pushed at, as the projection keeps it.
func (d *scopeDriver) chainPush(id string) int64 {
	d.t.Helper()
	links, _, err := d.st.ChainLinks(id)
	require.NoError(d.t, err)
	for _, l := range links {
		if l.ID == id {
			return l.PushSeq
		}
	}
	d.t.Fatalf("%s is in no chain", id)
	return 0
}
