package frames_test

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/frames"
)

// namedCounting is the estimate, named, counting its calls.
type namedCounting struct {
	name  string
	calls atomic.Int64
}

func (n *namedCounting) Count(s string) int64 {
	n.calls.Add(1)
	return compaction.EstimateCounter{}.Count(s)
}

func (n *namedCounting) Name() string { return n.name }

// TestPackBuffersRememberHeadCounts: with PackBuffers kept, the brief and
// breadcrumbs of a pack under a named counter are counted once, not pack
// after pack; a changed goal, another counter name, or fresh buffers count
// them again; the packs are the same either way.
func TestPackBuffersRememberHeadCounts(t *testing.T) {
	w := newWorld(t)
	w.push("root", "", 1<<30)
	w.push("f", "root", 1<<20)
	for i := 0; i < 5; i++ {
		content := strings.Repeat("word ", 10+i)
		w.must(&frames.AddContextHandle{Header: w.hdr(), FrameID: "f", Handle: frames.ContextHandle{ID: "h" + string(rune('A'+i)), Kind: "text",
			Priority: compaction.Medium, Content: content, Tokens: int64(len(content)+3) / 4}})
	}
	c := &namedCounting{name: "est"}
	q := frames.PackQuery{FrameID: "f", Budget: 4000, Counter: c}
	var buf frames.PackBuffers
	first, err := frames.AssemblePack(w.cfg, w.s, q, &buf)
	require.NoError(t, err)
	require.Len(t, first.Breadcrumbs, 2)
	require.Positive(t, c.calls.Load())

	c.calls.Store(0)
	again, err := frames.AssemblePack(w.cfg, w.s, q, &buf)
	require.NoError(t, err)
	require.Equal(t, first, again)
	require.Zero(t, c.calls.Load(), "brief and breadcrumbs remembered")

	fresh, err := frames.AssemblePack(w.cfg, w.s, q, nil)
	require.NoError(t, err)
	require.Equal(t, first, fresh)
	require.Positive(t, c.calls.Load(), "fresh buffers count")

	other := &namedCounting{name: "other"}
	q2 := q
	q2.Counter = other
	_, err = frames.AssemblePack(w.cfg, w.s, q2, &buf)
	require.NoError(t, err)
	require.GreaterOrEqual(t, other.calls.Load(), int64(3), "another counter counts the brief and both breadcrumbs")

	q3 := q
	q3.Role = "reviewer"
	c.calls.Store(0)
	p, err := frames.AssemblePack(w.cfg, w.s, q3, &buf)
	require.NoError(t, err)
	require.Equal(t, p.BriefTokens, compaction.EstimateCounter{}.Count(p.Brief))
	require.Positive(t, c.calls.Load(), "a new brief is counted")
}
