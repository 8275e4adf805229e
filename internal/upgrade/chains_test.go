package upgrade

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// Checks of the reads a fixture records (v4 on: continuation chains).

// readsMatch sends every recorded read: each answers as it did when the
// fixture was written (GetChain from any link, SearchChain pages with
// their cursors, GetFrame of every link with its chain fields and
// handles), and appends nothing.
func (u *upgraded) readsMatch(t *testing.T) {
	if len(u.m.Reads) == 0 {
		t.Skip("the fixture records no reads (before v4)")
	}
	ctx := context.Background()
	seq, err := u.store.LastSeq(ctx)
	require.NoError(t, err)
	for i, r := range u.m.Reads {
		req, err := BuildRead(r)
		require.NoError(t, err)
		reply, err := u.do(req)
		require.NoError(t, err, "read %d: %s of %s on %s", i, r.Op, r.FrameID, r.Scope)
		got, err := ReadOf(r, reply)
		require.NoError(t, err)
		assert.Equal(t, r, got, "read %d: %s of %s on %s", i, r.Op, r.FrameID, r.Scope)
	}
	now, err := u.store.LastSeq(ctx)
	require.NoError(t, err)
	require.Equal(t, seq, now, "reads appended")
}

// tombstonesServe checks the links retention removed: GetFrame of one is
// not found, and a chain whose head is removed refuses a resume naming
// its tombstone, appending nothing.
func (u *upgraded) tombstonesServe(t *testing.T) {
	n := 0
	for _, r := range u.m.Reads {
		if r.Chain == nil {
			continue
		}
		for _, l := range r.Chain.Links {
			if l.Removed == nil {
				continue
			}
			n++
			_, err := u.send(Step{Op: OpGetFrame, Scope: r.Scope, FrameID: l.FrameID})
			require.ErrorIs(t, err, messages.ErrFrameNotFound, "removed link %s", l.FrameID)
		}
		if head := r.Chain.Links[len(r.Chain.Links)-1]; head.Removed != nil {
			before := u.lastSeq()
			_, err := u.send(Step{Op: "ResumeChain", Scope: r.Scope, ChainID: r.FrameID, Message: "once more"})
			require.ErrorIs(t, err, messages.ErrFrameNotFound)
			require.ErrorContains(t, err, "removed by retention")
			require.Equal(t, before, u.lastSeq(), "a refused resume appended")
		}
	}
	if n == 0 {
		t.Skip("the fixture has no tombstone (before v4)")
	}
}

// chainsContinue continues every recorded chain whose head is live with
// the current release: handles added to the head (an automatic
// continuation, if the fixture's threshold is crossed, is followed), then
// an explicit ContinueFrame; the chain keeps its root and its recorded
// links and grows by the new ones. It returns the chains as they are
// then, by a link's id.
func (u *upgraded) chainsContinue(t *testing.T) map[string]Chain {
	out := map[string]Chain{}
	seen := map[string]bool{}
	for _, r := range u.m.Reads {
		if r.Chain == nil || seen[r.Scope+"/"+r.Chain.Root] {
			continue
		}
		seen[r.Scope+"/"+r.Chain.Root] = true
		old := *r.Chain
		head := old.Links[len(old.Links)-1]
		st, err := frames.ParseStatus(head.Status)
		require.NoError(t, err)
		if !st.Live() {
			continue
		}
		cur := head.FrameID
		add := func(i int) *Continuation {
			reply, err := u.send(Step{Op: "AddContextHandle", Scope: r.Scope, FrameID: cur, Kind: "message",
				Role: []string{string(frames.RoleUser), string(frames.RoleAssistant)}[i%2], Priority: prio(compaction.Medium),
				Content: fmt.Sprintf("after the upgrade, turn %d: %s", i, strings.Repeat("dolor sit amet ", 15))})
			require.NoError(t, err, "%s: adding to the head %s", r.Scope, cur)
			got, err := ReplyOf(reply)
			require.NoError(t, err)
			if got.Continued != nil {
				require.Equal(t, cur, got.Continued.From)
				cur = got.Continued.To
			}
			return got.Continued
		}
		// An explicit continuation of the old chain's head, once it holds
		// enough to free 5% of its window (until then it is refused, and
		// changes nothing).
		var got Reply
		for i := 0; ; i++ {
			require.Less(t, i, 12, "%s: the head never held enough to continue", r.Scope)
			add(i)
			before := u.lastSeq()
			reply, err := u.send(Step{Op: "ContinueFrame", Scope: r.Scope, FrameID: cur, ResumeCeiling: 40, Summary: "none"})
			if errors.Is(err, messages.ErrCompactionRefused) {
				require.Equal(t, before, u.lastSeq(), "a refused continuation appended")
				continue
			}
			require.NoError(t, err, "%s: continuing %s", r.Scope, cur)
			got, err = ReplyOf(reply)
			require.NoError(t, err)
			break
		}
		require.Equal(t, cur, got.From)
		require.NotEmpty(t, got.FrameID)
		_, err = u.send(Step{Op: "AddContextHandle", Scope: r.Scope, FrameID: cur, Kind: "note", Priority: prio(compaction.Low), Content: "late"})
		require.ErrorIs(t, err, messages.ErrFrameContinued, "the continued link refuses mutations")
		cur = got.FrameID
		if u.m.ContinueAt > 0 { // and an automatic one, as the fixture's server was configured
			var auto *Continuation
			for i := 2; i < 20 && auto == nil; i++ {
				auto = add(i)
			}
			require.NotNil(t, auto, "%s: the context filled: an automatic continuation", r.Scope)
		}

		now := u.chain(t, old.Root, head.FrameID)
		assert.Equal(t, old.Root, now.Root)
		assert.Equal(t, cur, now.Head)
		require.Greater(t, len(now.Links), len(old.Links))
		assert.Equal(t, old.Links[:len(old.Links)-1], now.Links[:len(old.Links)-1], "%s: the recorded links are as they were", r.Scope)
		assert.Equal(t, frames.StatusContinued.String(), now.Links[len(old.Links)-1].Status, "the old head is continued")
		out[head.FrameID] = now
		// Reads accept any link: the new head from the chain's first link.
		assert.Equal(t, now, u.chain(t, old.Root, old.Links[0].FrameID))
	}
	if len(out) == 0 {
		t.Skip("the fixture has no live chain (before v4)")
	}
	return out
}

// chain reads the chain of a link.
func (u *upgraded) chain(t *testing.T, root, link string) Chain {
	t.Helper()
	req, err := BuildRead(Read{Op: "GetChain", FrameID: link, Scope: u.scopeOfChain(root)})
	require.NoError(t, err)
	reply, err := u.do(req)
	require.NoError(t, err, "GetChain of %s", link)
	r, err := ReadOf(Read{Op: "GetChain"}, reply)
	require.NoError(t, err)
	return *r.Chain
}

// scopeOfChain finds the scope of a recorded chain by its root.
func (u *upgraded) scopeOfChain(root string) string {
	for _, r := range u.m.Reads {
		if r.Chain != nil && r.Chain.Root == root {
			return r.Scope
		}
	}
	u.t.Fatalf("no recorded chain has root %s", root)
	return ""
}

func (u *upgraded) do(req messages.Request) (messages.Reply, error) {
	u.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return Send(ctx, u.c, req)
}

func (u *upgraded) lastSeq() uint64 {
	u.t.Helper()
	seq, err := u.store.LastSeq(context.Background())
	require.NoError(u.t, err)
	return seq
}
