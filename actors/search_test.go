package actors_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/internal/chaintest"
	"github.com/stateindex/stateindex/messages"
)

// writeChain writes, with the server stopped, what build makes into scope
// s of e's file, and restarts the server.
func writeChain(t *testing.T, e *env, build func(b *chaintest.Builder)) {
	t.Helper()
	writeRaw(t, e, func(st *eventstore.BoltStore) { build(chaintest.New(st, "s")) })
}

// writeRaw runs write on e's file with the server stopped, and restarts it.
func writeRaw(t *testing.T, e *env, write func(st *eventstore.BoltStore)) {
	t.Helper()
	e.stop()
	st, err := eventstore.Open(e.path, &eventstore.Options{NoSync: true})
	require.NoError(t, err)
	write(st)
	require.NoError(t, st.Close())
	e.start()
}

// twoLinks: A continued (ContinueFrame, resume ceiling 100: nothing
// trailing fits, the summary stands for A) → B live.
func twoLinks(t *testing.T) func(b *chaintest.Builder) {
	return func(b *chaintest.Builder) {
		b.Ceiling = 100
		require.NoError(t, b.Start("A", "", "A", "find the needle", 1<<30))
		require.NoError(t, b.Add("A", "a1", frames.RoleUser, "where is the needle?"))
		require.NoError(t, b.Tool("A", "t1", "grep", "grep -r needle .", "./hay/needle.txt"))
		require.NoError(t, b.Add("A", "a2", frames.RoleAssistant, strings.Repeat("long needle text ", 300)))
		require.NoError(t, b.Continue("A", "B"))
		require.NoError(t, b.Start("B", "A", "A", "continue the hunt", 1<<30))
		require.NoError(t, b.Add("B", "b1", frames.RoleUser, "the needle is in hay/needle.txt"))
	}
}

func hitKeys(hs []messages.SearchHit) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.FrameID+"/"+h.ItemID+"/"+h.Kind)
	}
	return out
}

func TestSearchChainThroughTheClient(t *testing.T) {
	e := newEnv(t)
	writeChain(t, e, twoLinks(t))
	want := []messages.SearchHit{}
	for _, from := range []string{"A", "B"} {
		t.Run("from "+from, func(t *testing.T) {
			r, err := e.c.SearchChain(ctx, &messages.SearchChain{Header: messages.Header{Scope: "s"}, FrameID: from, Query: "needle"})
			require.NoError(t, err)
			assert.Equal(t, []string{"A", "B"}, r.Links)
			assert.Equal(t, "B", r.Head)
			for _, h := range r.Hits {
				assert.Contains(t, h.Snippet, "needle")
			}
			assert.Equal(t, []string{"A//goal", "A/a1/handle", "A/t1-c/tool_call", "A/t1-r/tool_result", "A/a2/handle",
				"B//goal",         // the continuation's push takes A's goal over
				"B/B-sum/summary", // the extractive summary of A: its paths and text verbatim
				"B/b1/handle"}, hitKeys(r.Hits))
			assert.Empty(t, r.Next)
			assert.Empty(t, r.Unsearched)
			if len(want) == 0 {
				want = r.Hits
			} else {
				assert.Equal(t, want, r.Hits, "any link gives the same answer")
			}
		})
	}
	t.Run("pages", func(t *testing.T) {
		var all []messages.SearchHit
		cursor := ""
		for i := 0; i < 20; i++ {
			r, err := e.c.SearchChain(ctx, &messages.SearchChain{Header: messages.Header{Scope: "s"}, FrameID: "B", Query: `ne+dle`, Regex: true, Limit: 3, Cursor: cursor})
			require.NoError(t, err)
			all = append(all, r.Hits...)
			if cursor = r.Next; cursor == "" {
				break
			}
		}
		assert.Equal(t, want, all)
	})
	for _, tc := range []struct {
		name string
		req  messages.SearchChain
		err  error
	}{
		{"another scope's chain is not found", messages.SearchChain{Header: messages.Header{Scope: "other"}, FrameID: "A", Query: "needle"}, actors.ErrFrameNotFound},
		{"unknown frame", messages.SearchChain{Header: messages.Header{Scope: "s"}, FrameID: "Z", Query: "needle"}, actors.ErrFrameNotFound},
		{"bad regex", messages.SearchChain{Header: messages.Header{Scope: "s"}, FrameID: "A", Query: "(", Regex: true}, actors.ErrInvalidArgument},
		{"bad cursor", messages.SearchChain{Header: messages.Header{Scope: "s"}, FrameID: "A", Query: "needle", Cursor: "nope"}, actors.ErrInvalidArgument},
		{"limit", messages.SearchChain{Header: messages.Header{Scope: "s"}, FrameID: "A", Query: "needle", Limit: 501}, actors.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.c.SearchChain(ctx, &tc.req)
			require.ErrorIs(t, err, tc.err)
		})
	}
}

// A chain the server makes itself — continued twice, its head completed,
// then resumed by a user — is searched whole from any link, the state's
// chain naming the resumed link (which the log records only on the new
// link's side); each link's hits are what it holds, what it carried
// first and the user's message last.
func TestSearchChainOfAServerMadeChain(t *testing.T) {
	e := newEnv(t)
	h := messages.Header{Scope: "s"}
	_, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "find the needle", Budget: budget.TokenBudget{Total: 1 << 30}, ContextWindow: 10_000})
	require.NoError(t, err)
	add := func(id, role, content string) {
		t.Helper()
		_, err := e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, HandleID: id, Kind: "text", Role: role, Priority: compaction.Medium, Content: content})
		require.NoError(t, err)
	}
	cont := func() *messages.ContinueFrameReply {
		t.Helper()
		r, err := e.c.ContinueFrame(ctx, &messages.ContinueFrame{Header: h, ResumeCeiling: 100, Summary: "state: the needle is not in ./hay"})
		require.NoError(t, err)
		return r
	}
	add("h1", "user", "where is the needle?")
	add("h2", "assistant", strings.Repeat("no needle here ", 300))
	c1 := cont()
	add("h3", "user", "look again")
	add("h4", "assistant", strings.Repeat("hay ", 1000))
	c2 := cont()
	add("h5", "assistant", "the needle is in ./barn")
	_, err = e.c.PopFrame(ctx, &messages.PopFrame{Header: h, Status: frames.StatusCompleted})
	require.NoError(t, err)
	rs, err := e.c.ResumeChain(ctx, &messages.ResumeChain{Header: h, ChainID: c1.From, Message: "is the needle still in ./barn?", Budget: budget.TokenBudget{Total: 1 << 30}})
	require.NoError(t, err)
	root, l2, l3, l4 := c1.From, c1.FrameID, c2.FrameID, rs.FrameID
	require.Equal(t, l3, rs.From)
	add("h6", "assistant", "yes")
	g, err := e.c.GetFrame(ctx, &messages.GetFrame{Header: h, FrameID: rs.FrameID, WithHandles: true})
	require.NoError(t, err)
	var kinds []string
	for _, hd := range g.Frame.Handles {
		kinds = append(kinds, hd.Kind)
	}
	// The resumed link: its segment, the summary of what it does not carry
	// (L3's summary and h5: no trailing run starts at a user's handle),
	// the user's message, then its own; the earlier links' segments are
	// not carried (each link's own replaces them), nor summarized.
	require.Equal(t, []string{frames.ContinuationKind, frames.SummaryKind, "text", "text"}, kinds)
	require.Equal(t, rs.MessageID, g.Frame.Handles[2].ID)
	require.Equal(t, 1, strings.Count(g.Frame.Handles[1].Content, frames.SummaryFraming), "an earlier summary is summarized without its framing")
	resumeSum := g.Frame.Handles[1].ID

	want := []string{
		root + "//goal", root + "/h1/handle", root + "/h2/handle",
		l2 + "//goal", l2 + "/" + c1.SummaryID + "/summary",
		l3 + "//goal", l3 + "/" + c2.SummaryID + "/summary", l3 + "/h5/handle",
		l4 + "//goal", l4 + "/" + resumeSum + "/summary", l4 + "/" + rs.MessageID + "/handle",
	}
	for _, from := range []string{root, l2, l3, l4} {
		r, err := e.c.SearchChain(ctx, &messages.SearchChain{Header: h, FrameID: from, Query: "needle"})
		require.NoError(t, err)
		assert.Equal(t, []string{root, l2, l3, l4}, r.Links, "from %s", from)
		assert.Equal(t, l4, r.Head)
		assert.Equal(t, want, hitKeys(r.Hits), "from %s", from)
	}
	e.restart() // the chain comes back from the log
	r, err := e.c.SearchChain(ctx, &messages.SearchChain{Header: h, FrameID: root, Query: "needle"})
	require.NoError(t, err)
	assert.Equal(t, want, hitKeys(r.Hits))
}

// A scope whose log the fold refuses — chain records written raw that no
// continuation makes (A and B continue each other) — does not load: every
// request to it answers store_failed naming the record and why, at once
// and again (nothing half-loaded is kept), and the other scopes answer.
func TestSearchChainScopeThatDoesNotLoad(t *testing.T) {
	e := newEnv(t)
	_, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: "ok"}, Goal: "g", Budget: budget.TokenBudget{Total: 100}})
	require.NoError(t, err)
	writeRaw(t, e, func(st *eventstore.BoltStore) { appendCycle(t, st) })
	for i := 0; i < 2; i++ {
		for _, tc := range []struct {
			name string
			call func() error
		}{
			{"SearchChain", func() error {
				_, err := e.c.SearchChain(ctx, &messages.SearchChain{Header: messages.Header{Scope: "s"}, FrameID: "A", Query: "needle"})
				return err
			}},
			{"GetChain", func() error {
				_, err := e.c.GetChain(ctx, &messages.GetChain{Header: messages.Header{Scope: "s"}, FrameID: "B"})
				return err
			}},
			{"GetFrame", func() error {
				_, err := e.c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: "s"}, FrameID: "A"})
				return err
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				err := tc.call()
				var me *messages.Error
				require.True(t, errors.As(err, &me), "%v", err)
				assert.Equal(t, messages.CodeStoreFailed, me.Code)
				assert.Contains(t, err.Error(), `stream "s" version 1`)
				assert.Contains(t, err.Error(), `continues "B"`)
			})
		}
	}
	_, err = e.c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: "ok"}})
	require.NoError(t, err)
}

// appendCycle appends, raw, A and B whose records say each continues the
// other (no fold sees them), and returns the events as written.
func appendCycle(t *testing.T, st eventstore.Store) {
	t.Helper()
	for _, l := range []struct{ id, other string }{{"A", "B"}, {"B", "A"}} {
		m := frames.Meta{Scope: "s", Frame: l.id, At: 1}
		rec := &frames.FrameRecord{ID: l.id, Goal: "needle", Status: frames.StatusContinued, ContinuedFrom: l.other, ContinuedTo: l.other, ChainRoot: "A"}
		var evs []eventstore.Event
		for _, ev := range []frames.Event{
			&frames.FramePushed{Meta: m, Goal: "needle", ContinuedFrom: l.other, ChainRoot: "A"},
			&frames.FramePopped{Meta: m, Status: frames.StatusContinued, ContinuedTo: l.other, Final: rec},
		} {
			enc, err := eventstore.EncodeFrameEvent(ev)
			require.NoError(t, err)
			evs = append(evs, enc)
		}
		_, err := st.Append(context.Background(), "s", eventstore.Any, evs)
		require.NoError(t, err)
	}
}

// A snapshot whose chains loop (the state path: the server resolves with
// the state's chain) answers store_failed naming the cycle, never a hang;
// the scope still answers what needs no chain.
func TestSearchChainCorruptedStateChainCycle(t *testing.T) {
	e := newEnv(t)
	writeChain(t, e, func(b *chaintest.Builder) {
		twoLinks(t)(b)
		c := b.St.Chains["A"]
		require.Len(t, c.Links, 2)
		c.Links[1].To = "A" // B → A, and A → B: a loop
		snap, err := eventstore.EncodeState(b.St)
		require.NoError(t, err)
		require.NoError(t, b.Store.SaveSnapshot(context.Background(), "s", snap))
	})
	for _, from := range []string{"A", "B"} {
		_, err := e.c.SearchChain(ctx, &messages.SearchChain{Header: messages.Header{Scope: "s"}, FrameID: from, Query: "needle"})
		var me *messages.Error
		require.True(t, errors.As(err, &me), "%v", err)
		assert.Equal(t, messages.CodeStoreFailed, me.Code)
		assert.Contains(t, err.Error(), "cycle")
		assert.Contains(t, err.Error(), `links back to "A"`)
		_, err = e.c.GetChain(ctx, &messages.GetChain{Header: messages.Header{Scope: "s"}, FrameID: from})
		require.True(t, errors.As(err, &me), "%v", err)
		assert.Equal(t, messages.CodeStoreFailed, me.Code)
	}
	_, err := e.c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: "s"}, FrameID: "B"})
	require.NoError(t, err)
}

// Records whose links loop, under a snapshot that keeps those frames in no
// chain (the log path: the state cannot answer, the log is walked): an
// error naming the frame met twice, never a hang.
func TestSearchChainCorruptedLinksCycle(t *testing.T) {
	e := newEnv(t)
	writeRaw(t, e, func(st *eventstore.BoltStore) {
		// The state the snapshot holds: A and B completed, in no chain.
		b := chaintest.New(eventstore.NewMemory(), "s")
		for _, id := range []string{"A", "B"} {
			require.NoError(t, b.Start(id, "", "", "needle", 100))
			require.NoError(t, b.Pop(id, frames.StatusCompleted))
		}
		appendCycle(t, st) // the records: A and B continue each other
		require.Equal(t, int64(4), b.St.Version)
		snap, err := eventstore.EncodeState(b.St)
		require.NoError(t, err)
		require.NoError(t, st.SaveSnapshot(context.Background(), "s", snap))
	})
	_, err := e.c.SearchChain(ctx, &messages.SearchChain{Header: messages.Header{Scope: "s"}, FrameID: "B", Query: "needle"})
	require.Error(t, err)
	var me *messages.Error
	require.True(t, errors.As(err, &me))
	assert.Equal(t, messages.CodeStoreFailed, me.Code)
	assert.Contains(t, err.Error(), "cycle")
	assert.Contains(t, err.Error(), `frame "B"`)
	// The scope still answers.
	_, err = e.c.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: "s"}, Goal: "g", Budget: budget.TokenBudget{Total: 100}})
	require.NoError(t, err)
}
