package frames_test

import (
	"fmt"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/frames"
)

// memRegistry folds events with frames.FoldRegistry into a map, as the
// index does into its table.
type memRegistry map[string]frames.RegistryRow

func (m memRegistry) get(scope, frame string) (frames.RegistryRow, bool) {
	r, ok := m[scope+"/"+frame]
	return r, ok
}

func (m memRegistry) fold(ev frames.Event, version int64) {
	ch := frames.FoldRegistry(ev, version, m.get)
	for _, r := range ch.Put {
		m[r.Scope+"/"+r.FrameID] = r
	}
	if ch.Drop != nil {
		for k, r := range m {
			if ch.Drop.Removes(r) {
				delete(m, k)
			}
		}
	}
}

func (m memRegistry) ids() []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// registryOf folds a world's log (versions 1..n).
func registryOf(w *world) memRegistry {
	m := memRegistry{}
	for i, ev := range w.log {
		m.fold(ev, int64(i+1))
	}
	return m
}

// fillConversation gives frame a conversation a continuation can carry
// (as chainWorld does).
func fillConversation(w *world, frame string) {
	w.add(frame, "sys", frames.RoleSystem, compaction.Critical, 20)
	for i := 0; i < 8; i++ {
		w.add(frame, fmt.Sprintf("u%d", i), frames.RoleUser, compaction.Medium, 40)
		w.add(frame, fmt.Sprintf("r%d", i), frames.RoleAssistant, compaction.Medium, 40)
	}
}

// expectedFrames is every frame of a world as the projection and the
// log know it: the live ones from the state, the finished ones from their
// frame.popped's record, with the chain pointers the state holds
// (LinkPointers).
func expectedFrames(w *world) map[string]*frames.Frame {
	out := map[string]*frames.Frame{}
	for id, f := range w.s.Frames {
		out[id] = f.Clone()
	}
	for _, ev := range w.log {
		if p, ok := ev.(*frames.FramePopped); ok && p.Final != nil {
			r := p.Final
			f := &frames.Frame{ID: r.ID, ParentID: r.ParentID, Goal: r.Goal, Status: r.Status, Depth: r.Depth, Budget: r.Budget,
				Cost: r.Cost, CreatedAt: r.CreatedAt, CompletedAt: r.CompletedAt, PushSeq: r.PushSeq,
				ContinuedFrom: r.ContinuedFrom, ContinuedTo: r.ContinuedTo, ChainRoot: r.ChainRoot}
			w.s.LinkPointers(f)
			out[r.ID] = f
		}
	}
	return out
}

// requireMatchesState checks every row against the frame it records.
func requireMatchesState(t *testing.T, w *world, m memRegistry) {
	t.Helper()
	want := expectedFrames(w)
	require.Len(t, m, len(want), "one row per frame: %v", m.ids())
	for id, f := range want {
		r, ok := m.get(w.s.Scope, id)
		require.True(t, ok, "row of %s", id)
		assert.Equal(t, f.Status, r.Status, "status of %s", id)
		assert.Equal(t, f.ParentID, r.ParentID, id)
		assert.Equal(t, f.Goal, r.Goal, id)
		assert.Equal(t, f.Depth, r.Depth, id)
		assert.Equal(t, f.ChainRoot, r.ChainRoot, "chain root of %s", id)
		assert.Equal(t, f.ContinuedFrom, r.ContinuedFrom, id)
		assert.Equal(t, f.ContinuedTo, r.ContinuedTo, "continued to of %s", id)
		assert.Equal(t, f.CreatedAt, r.CreatedAt, id)
		assert.Equal(t, f.CompletedAt, r.FinishedAt, id)
		assert.Equal(t, f.PushSeq, r.PushVersion, id)
		if f.Status.Live() {
			assert.Equal(t, f.LiveKids, r.LiveKids, id)
		}
		if f.Status.Terminal() {
			assert.Equal(t, f.Budget.Used, r.TokensUsed, "tokens of %s", id)
			assert.Equal(t, f.Cost, r.Cost, "cost of %s", id)
		}
		if f.Suspension != nil {
			assert.Equal(t, f.Suspension.Reason, r.SuspendReason)
		} else {
			assert.Empty(t, r.SuspendReason)
		}
	}
}

func TestRegistryFoldMatchesTheProjection(t *testing.T) {
	cases := []struct {
		name string
		run  func(w *world)
	}{
		{"tree, goal change, usage, pops", func(w *world) {
			w.push("root", "", 10_000)
			w.push("a", "root", 1_000)
			w.push("b", "root", 1_000)
			w.push("a1", "a", 100)
			g := "new goal"
			w.must(&frames.UpdateFrame{Header: w.hdr(), FrameID: "b", Goal: &g})
			w.must(&frames.RecordUsage{Header: w.hdr(), FrameID: "a1", Cost: budget.Cost{InputTokens: 30, OutputTokens: 10, Turns: 1, SpendMicros: 5}})
			w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "a1", Status: frames.StatusCompleted})
			w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "b", Status: frames.StatusFailed})
		}},
		{"suspend and resume under a waiting parent", func(w *world) {
			w.push("root", "", 10_000)
			w.push("a", "root", 1_000)
			w.push("k", "a", 100)
			tok := w.mint()
			w.must(&frames.SuspendFrame{Header: w.hdr(), FrameID: "a", Reason: frames.SuspendApproval, Mint: tok})
			w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "k", Status: frames.StatusCompleted})
			w.must(&frames.ResumeFrame{Header: w.hdr(), FrameID: "a", TokenID: tok.TokenID})
			tok2 := w.mint()
			w.must(&frames.SuspendFrame{Header: w.hdr(), FrameID: "root", Reason: frames.SuspendBudget, Mint: tok2})
		}},
		{"cascade pop", func(w *world) {
			w.push("root", "", 10_000)
			w.push("a", "root", 1_000)
			w.push("a1", "a", 100)
			w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "root", Status: frames.StatusCancelled, Cascade: true})
		}},
		{"continue, fail, resume twice (a chain of four)", func(w *world) {
			pushWindow(w, "root", "", 100_000, 1_000)
			w.push("a", "root", 10_000)
			fillConversation(w, "a")
			w.must(&frames.ContinueFrame{Header: w.hdr(), FrameID: "a", ResumeCeiling: 100, With: w.with("b")})
			bHead := w.s.Frame("b").Clone()
			w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "b", Status: frames.StatusFailed})
			bHead.Status, bHead.CompletedAt = frames.StatusFailed, w.now
			w.must(&frames.ResumeChain{Header: w.hdr(), ChainID: "a", Head: bHead, Message: "retry", MessageID: "c-msg", With: w.with("c")})
			cHead := w.s.Frame("c").Clone()
			w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "c", Status: frames.StatusCompleted})
			cHead.Status, cHead.CompletedAt = frames.StatusCompleted, w.now
			w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "root", Status: frames.StatusCompleted})
			w.must(&frames.ResumeChain{Header: w.hdr(), ChainID: "b", Head: cHead, Message: "again", MessageID: "d-msg",
				Budget: budget.TokenBudget{Total: 5_000}, With: w.with("d")})
		}},
		{"a frame in no chain resumed becomes a chain's root", func(w *world) {
			w.push("solo", "", 100)
			solo := w.s.Frame("solo").Clone()
			w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "solo", Status: frames.StatusCancelled})
			solo.Status, solo.CompletedAt = frames.StatusCancelled, w.now
			w.must(&frames.ResumeChain{Header: w.hdr(), ChainID: "solo", Head: solo, Message: "go on", MessageID: "m",
				Budget: budget.TokenBudget{Total: 100}, With: w.with("solo2")})
		}},
		{"automatic continuation", func(w *world) {
			w.cfg.ContinueAt = 900
			w.cfg.ResumeCeiling = 300
			pushWindow(w, "a", "", 100_000, 1_000)
			with := w.with("b")
			for i := 0; i < 9; i++ {
				w.must(&frames.AddContextHandle{Header: w.hdr(), FrameID: "a", Handle: frames.ContextHandle{ID: fmt.Sprint("h", i),
					Kind: "text", Role: frames.RoleUser, Priority: compaction.Medium, Content: "xxxx", Tokens: 100}, Continue: &with})
			}
			require.NotNil(t, w.s.Frame("b"), "the threshold continued a into b")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			tc.run(w)
			requireMatchesState(t, w, registryOf(w))
		})
	}
}

func TestRegistryChainPointers(t *testing.T) {
	w := newWorld(t)
	pushWindow(w, "root", "", 100_000, 1_000)
	w.push("a", "root", 10_000)
	fillConversation(w, "a")
	w.must(&frames.ContinueFrame{Header: w.hdr(), FrameID: "a", ResumeCeiling: 100, With: w.with("b")})
	m := registryOf(w)
	a, _ := m.get("agent-1", "a")
	b, _ := m.get("agent-1", "b")
	assert.Equal(t, frames.RegistryRow{Scope: "agent-1", FrameID: "a", ParentID: "root", Goal: "goal a", Status: frames.StatusContinued,
		Depth: 1, ChainRoot: "a", ContinuedTo: "b", CreatedAt: a.CreatedAt, FinishedAt: a.FinishedAt, PushVersion: 2, EndVersion: b.PushVersion - 1}, a,
		"a continued frame ends continued, its chain's root, pointing at the next link")
	assert.Equal(t, "a", b.ChainRoot)
	assert.Equal(t, "a", b.ContinuedFrom)
	assert.Equal(t, frames.StatusActive, b.Status)
	root, _ := m.get("agent-1", "root")
	assert.Equal(t, frames.StatusWaiting, root.Status, "the continuation is the parent's live child")
	assert.Equal(t, int64(1), root.LiveKids)
}

func TestRegistryRemoval(t *testing.T) {
	w := newWorld(t)
	w.push("root", "", 10_000) // v1, stays live
	w.push("run1", "root", 100)
	w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "run1", Status: frames.StatusCompleted}) // pushed v2
	w.push("run2", "root", 100)                                                                // v4
	w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "run2", Status: frames.StatusCompleted})
	w.push("run3", "root", 100) // v6, live
	base := registryOf(w)
	require.Len(t, base, 4)
	other := frames.RegistryRow{Scope: "agent-10", FrameID: "run1", Status: frames.StatusCompleted, PushVersion: 1}

	cases := []struct {
		name string
		ev   frames.Event
		left []string
	}{
		{"retention through run1's pop removes run1 only", &frames.RetentionApplied{Meta: frames.Meta{Scope: "agent-1"}, Through: 3},
			[]string{"agent-1/root", "agent-1/run2", "agent-1/run3", "agent-10/run1"}},
		{"retention through everything keeps the live frames", &frames.RetentionApplied{Meta: frames.Meta{Scope: "agent-1"}, Through: 6},
			[]string{"agent-1/root", "agent-1/run3", "agent-10/run1"}},
		{"retention of another scope removes nothing here", &frames.RetentionApplied{Meta: frames.Meta{Scope: "agent-2"}, Through: 100},
			[]string{"agent-1/root", "agent-1/run1", "agent-1/run2", "agent-1/run3", "agent-10/run1"}},
		{"destroy removes every row of the scope, live ones too, and no other scope's",
			&frames.ScopeDestroyed{Meta: frames.Meta{Scope: "agent-1"}, Through: 6, Forced: true},
			[]string{"agent-10/run1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := memRegistry{}
			for k, v := range base {
				m[k] = v
			}
			m["agent-10/run1"] = other
			m.fold(tc.ev, 7)
			assert.Equal(t, tc.left, m.ids())
		})
	}

	t.Run("a pop whose push was never seen makes the row from its record", func(t *testing.T) {
		var pop *frames.FramePopped
		var version int64
		for i, ev := range w.log {
			if p, ok := ev.(*frames.FramePopped); ok && p.Frame != "" {
				pop, version = p, int64(i+1)
				break
			}
		}
		require.NotNil(t, pop)
		require.NotNil(t, pop.Final)
		m := memRegistry{}
		m.fold(pop, version)
		got, ok := m.get("agent-1", pop.Frame)
		require.True(t, ok)
		want, _ := base.get("agent-1", pop.Frame)
		assert.Equal(t, want, got, "the same row as from the whole log")

		old := *pop
		old.Final = nil // a pop written before records existed
		assert.Empty(t, frames.FoldRegistry(&old, version, memRegistry{}.get).Put, "nothing to make a row from")
	})
	t.Run("a frame pushed before the cut and ended after it stays", func(t *testing.T) {
		m := memRegistry{}
		for k, v := range base {
			m[k] = v
		}
		r := m["agent-1/run2"]
		m.fold(&frames.RetentionApplied{Meta: frames.Meta{Scope: "agent-1"}, Through: r.EndVersion - 1}, 9)
		_, ok := m.get("agent-1", "run2")
		assert.True(t, ok, "run2 ended at %d, after the cut", r.EndVersion)
		_, ok = m.get("agent-1", "run1")
		assert.False(t, ok)
	})
	t.Run("a live frame's row from the projection", func(t *testing.T) {
		r := frames.RowOfFrame("agent-1", w.s.Frame("run3"))
		want, _ := base.get("agent-1", "run3")
		assert.Equal(t, want, r)
	})
	t.Run("only registry events are read", func(t *testing.T) {
		assert.True(t, frames.RegistryEvent(frames.TypeFramePushed))
		assert.True(t, frames.RegistryEvent(frames.TypeScopeDestroyed))
		assert.False(t, frames.RegistryEvent(frames.TypeHandleAdded))
		assert.False(t, frames.RegistryEvent(frames.TypeUsageRecorded))
	})
}
