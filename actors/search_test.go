package actors_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/internal/chaintest"
	"github.com/stateindex/stateindex/messages"
)

// writeChain writes, with the server stopped, a chain A (continued) → B
// (live) into scope s of e's file, and restarts the server.
func writeChain(t *testing.T, e *env, build func(b *chaintest.Builder)) {
	t.Helper()
	e.stop()
	st, err := eventstore.Open(e.path, &eventstore.Options{NoSync: true})
	require.NoError(t, err)
	b := chaintest.New(st, "s")
	build(b)
	require.NoError(t, st.Close())
	e.start()
}

func twoLinks(t *testing.T) func(b *chaintest.Builder) {
	return func(b *chaintest.Builder) {
		require.NoError(t, b.Start("A", "", "A", "find the needle", 1<<30))
		require.NoError(t, b.Add("A", "a1", frames.RoleUser, "where is the needle?"))
		require.NoError(t, b.Tool("A", "t1", "grep", "grep -r needle .", "./hay/needle.txt"))
		require.NoError(t, b.Add("A", "a2", frames.RoleAssistant, strings.Repeat("long needle text ", 100)))
		require.NoError(t, b.Continue("A", "B"))
		require.NoError(t, b.Start("B", "A", "A", "continue the hunt", 1<<30))
		require.NoError(t, b.Add("B", "b1", frames.RoleUser, "the needle is in hay/needle.txt"))
	}
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
			var got []string
			for _, h := range r.Hits {
				got = append(got, h.FrameID+"/"+h.ItemID+"/"+h.Kind)
				assert.Contains(t, h.Snippet, "needle")
			}
			assert.Equal(t, []string{"A//goal", "A/a1/handle", "A/t1-c/tool_call", "A/t1-r/tool_result", "A/a2/handle", "B/b1/handle"}, got)
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
			r, err := e.c.SearchChain(ctx, &messages.SearchChain{Header: messages.Header{Scope: "s"}, FrameID: "B", Query: `ne+dle`, Regex: true, Limit: 4, Cursor: cursor})
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

// A store whose links loop answers with an error naming the frame, never
// a hang (hostile catalogue).
func TestSearchChainCorruptedLinksCycle(t *testing.T) {
	e := newEnv(t)
	writeChain(t, e, func(b *chaintest.Builder) {
		twoLinks(t)(b)
		require.NoError(t, b.Continue("B", "A")) // B → A, and A → B: a loop
		require.NoError(t, b.Start("C", "", "", "other", 1<<20))
	})
	_, err := e.c.SearchChain(ctx, &messages.SearchChain{Header: messages.Header{Scope: "s"}, FrameID: "B", Query: "needle"})
	require.Error(t, err)
	var me *messages.Error
	require.True(t, errors.As(err, &me))
	assert.Equal(t, messages.CodeStoreFailed, me.Code)
	assert.Contains(t, err.Error(), "cycle")
	// The scope still answers.
	_, err = e.c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: "s"}, FrameID: "C"})
	require.NoError(t, err)
}
