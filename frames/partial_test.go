package frames_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/frames"
)

// chunk records a chunk of frame's output and returns its event.
func (w *world) chunk(frame, delta string, percent int64, final bool) *frames.PartialOutputRecorded {
	w.t.Helper()
	evs := w.must(&frames.RecordPartialOutput{Header: w.hdr(), FrameID: frame, Delta: delta, Percent: percent, Final: final})
	require.Len(w.t, evs, 1)
	return evs[0].(*frames.PartialOutputRecorded)
}

func TestPartialOutputAccumulatesDeltas(t *testing.T) {
	w := newWorld(t)
	w.push("r", "", 1000)
	deltas := []string{"Let me ", "analyze ", "the requirements", "… ", "日本語 ", ""}
	var text string
	for i, d := range deltas {
		e := w.chunk("r", d, int64(10*i), false)
		assert.Equal(t, int64(i+1), e.Chunk)
		assert.Equal(t, int64(len(text)), e.Offset, "the offset is the output's length before the delta")
		assert.Equal(t, d, e.Delta, "the event carries the delta, not the text so far")
		text += d
		assert.Equal(t, int64(len(text)), e.Bytes())
	}
	p := w.s.Frame("r").Clone().Partial
	require.NotNil(t, p)
	assert.Equal(t, frames.PartialOutput{Text: text, IsPartial: true, Percent: 50, Chunks: int64(len(deltas)), StartedAt: p.StartedAt, UpdatedAt: w.now}, *p)
	assert.Less(t, p.StartedAt, p.UpdatedAt)

	// The log grows with the text: the deltas add up to it.
	var logged int
	for _, e := range w.log {
		if c, ok := e.(*frames.PartialOutputRecorded); ok {
			logged += len(c.Delta)
		}
	}
	assert.Equal(t, len(text), logged)
	assert.Equal(t, w.s.Clone(), w.replay().Clone(), "replay rebuilds the output")

	// A clone shares nothing with the state.
	c := w.s.Frame("r").Clone()
	c.Partial.Text = "changed"
	assert.Equal(t, text, w.s.Frame("r").Partial.Text)
}

func TestPartialOutputEnds(t *testing.T) {
	t.Run("a final chunk completes it; it stays until the next output", func(t *testing.T) {
		w := newWorld(t)
		w.push("r", "", 1000)
		w.chunk("r", "one ", 40, false)
		e := w.chunk("r", "two", 100, true)
		assert.True(t, e.Final)
		p := w.s.Frame("r").Partial
		require.NotNil(t, p)
		assert.False(t, p.IsPartial)
		assert.Equal(t, "one two", p.Text)
		// The next chunk starts a new output.
		e = w.chunk("r", "three", 5, false)
		assert.Equal(t, int64(1), e.Chunk)
		assert.Equal(t, int64(0), e.Offset)
		assert.Equal(t, "three", w.s.Frame("r").Partial.Text)
		assert.True(t, w.s.Frame("r").Partial.IsPartial)
	})
	t.Run("a chunk with Start replaces an output in progress", func(t *testing.T) {
		w := newWorld(t)
		w.push("r", "", 1000)
		w.chunk("r", "a broken stream", 30, false)
		evs := w.must(&frames.RecordPartialOutput{Header: w.hdr(), FrameID: "r", Delta: "retry", Percent: 1, Start: true})
		assert.Equal(t, int64(1), evs[0].(*frames.PartialOutputRecorded).Chunk)
		assert.Equal(t, "retry", w.s.Frame("r").Partial.Text)
		assert.Equal(t, int64(1), w.s.Frame("r").Partial.Chunks)
	})
	t.Run("a usage that records a turn ends it; one without a turn does not", func(t *testing.T) {
		w := newWorld(t)
		w.push("r", "", 1000)
		w.chunk("r", "streaming", 50, false)
		w.must(&frames.RecordUsage{Header: w.hdr(), FrameID: "r", Cost: budget.Cost{SpendMicros: 3, DurationMillis: 10}})
		assert.NotNil(t, w.s.Frame("r").Partial, "spend or time alone is no turn")
		w.must(&frames.RecordUsage{Header: w.hdr(), FrameID: "r", Cost: budget.Cost{InputTokens: 10, OutputTokens: 20, Turns: 1}})
		assert.Nil(t, w.s.Frame("r").Partial, "the turn is committed: the output ended")
		assert.Equal(t, w.s.Clone(), w.replay().Clone())
	})
	t.Run("a usage that suspends the frame for a limit ends it with the turn", func(t *testing.T) {
		w := newWorld(t)
		w.must(&frames.PushFrame{Header: w.hdr(), FrameID: "r", Goal: "g", Budget: budget.TokenBudget{Total: 1000}, Limits: budget.Limits{Turns: 1}})
		w.chunk("r", "over the limit", 90, false)
		w.must(&frames.RecordUsage{Header: w.hdr(), FrameID: "r", Cost: budget.Cost{Turns: 2}, Mint: w.mint()})
		assert.Equal(t, frames.StatusSuspended, w.s.Frame("r").Status)
		assert.Nil(t, w.s.Frame("r").Partial)
	})
	t.Run("the frame's end ends it", func(t *testing.T) {
		w := newWorld(t)
		w.KeepFinished()
		w.push("r", "", 1000)
		w.push("c", "r", 100)
		w.chunk("c", "child output", 20, false)
		w.chunk("r", "parent output", 20, false)
		w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "r", Status: frames.StatusCancelled, Cascade: true})
		assert.Nil(t, w.s.Frame("c").Partial, "cancelled by the cascade")
		assert.Nil(t, w.s.Frame("r").Partial)
	})
}

// KeepFinished makes the world's state keep finished frames.
func (w *world) KeepFinished() { w.s.KeepFinished = true }

func TestPartialOutputOnEveryLiveFrame(t *testing.T) {
	w := newWorld(t)
	w.push("r", "", 1000)
	w.push("c", "r", 100)
	assert.Equal(t, frames.StatusWaiting, w.s.Frame("r").Status)
	w.chunk("r", "while the subcall runs", 10, false)
	w.must(&frames.SuspendFrame{Header: w.hdr(), FrameID: "c", Reason: frames.SuspendApproval, Mint: w.mint()})
	w.chunk("c", "arriving as it is suspended", 100, true)
	assert.Equal(t, "arriving as it is suspended", w.s.Frame("c").Partial.Text)
	assert.Equal(t, frames.StatusSuspended, w.s.Frame("c").Status, "a chunk does not resume the frame")
}

func TestPartialOutputRefusals(t *testing.T) {
	w := newWorld(t)
	w.cfg.MaxContentBytes = 100
	w.push("r", "", 1000)
	w.push("done", "", 10)
	w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "done", Status: frames.StatusCompleted})
	w.chunk("r", strings.Repeat("x", 60), 50, false)
	before := w.s.Clone()
	cases := []struct {
		name string
		cmd  frames.RecordPartialOutput
		want error
		says []string
	}{
		{"percentage below 0", frames.RecordPartialOutput{FrameID: "r", Percent: -1}, frames.ErrInvalidArgument, []string{`"r"`, "-1", "0..100"}},
		{"percentage above 100", frames.RecordPartialOutput{FrameID: "r", Percent: 101}, frames.ErrInvalidArgument, []string{"101"}},
		{"invalid UTF-8", frames.RecordPartialOutput{FrameID: "r", Delta: "ok \xff\xfe"}, frames.ErrInvalidArgument, []string{`"r"`, "UTF-8"}},
		{"a NUL byte", frames.RecordPartialOutput{FrameID: "r", Delta: "a\x00b"}, frames.ErrInvalidArgument, []string{"NUL"}},
		{"a delta over the bound", frames.RecordPartialOutput{FrameID: "r", Delta: strings.Repeat("d", 101)}, frames.ErrTooLarge, []string{`"r"`, "101 bytes", "limit 100"}},
		{"an output over the bound", frames.RecordPartialOutput{FrameID: "r", Delta: strings.Repeat("d", 41)}, frames.ErrTooLarge, []string{`"r"`, "101 bytes", "limit 100"}},
		{"an unknown frame", frames.RecordPartialOutput{FrameID: "ghost"}, frames.ErrFrameNotFound, []string{"ghost"}},
		{"a finished frame", frames.RecordPartialOutput{FrameID: "done"}, frames.ErrFrameNotLive, []string{"done", "completed"}},
		{"a bad frame id", frames.RecordPartialOutput{FrameID: "no spaces"}, frames.ErrInvalidID, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := tc.cmd
			cmd.Header = w.hdr()
			_, err := w.do(&cmd)
			require.ErrorIs(t, err, tc.want)
			for _, s := range tc.says {
				assert.Contains(t, err.Error(), s)
			}
			assert.Equal(t, before, w.s.Clone(), "nothing changed")
		})
	}
	// A new output is measured alone: a Start chunk fits where an append
	// would not.
	w.must(&frames.RecordPartialOutput{Header: w.hdr(), FrameID: "r", Delta: strings.Repeat("n", 100), Start: true})
	assert.Len(t, w.s.Frame("r").Partial.Text, 100)

	// The chunk bound.
	w.s.Frame("r").Partial.Chunks = frames.MaxPartialChunks
	_, err := w.do(&frames.RecordPartialOutput{Header: w.hdr(), FrameID: "r"})
	require.ErrorIs(t, err, frames.ErrTooLarge)
	assert.Contains(t, err.Error(), "100001 chunks, limit 100000")
}

func TestPartialOutputMovesWithContinuation(t *testing.T) {
	w := chainWorld(t)
	w.chunk("a", "half of ", 50, false)
	w.must(&frames.ContinueFrame{Header: w.hdr(), FrameID: "a", ResumeCeiling: 100, With: w.with("a2")})
	p := w.s.Frame("a2").Partial
	require.NotNil(t, p, "the continuation took the output along")
	assert.Equal(t, "half of ", p.Text)
	assert.Nil(t, w.s.Frame("a"), "the continued link left the projection")

	_, err := w.do(&frames.RecordPartialOutput{Header: w.hdr(), FrameID: "a", Delta: "late"})
	require.ErrorIs(t, err, frames.ErrFrameContinued, "chunks go on at the head")
	e := w.chunk("a2", "the answer", 100, true)
	assert.Equal(t, int64(2), e.Chunk)
	assert.Equal(t, int64(len("half of ")), e.Offset)
	assert.Equal(t, "half of the answer", w.s.Frame("a2").Partial.Text)
	assert.Equal(t, w.s.Clone(), w.replay().Clone())
}

func TestPartialOutputApplyRefusesGaps(t *testing.T) {
	w := newWorld(t)
	w.push("r", "", 1000)
	w.chunk("r", "abc", 1, false)
	meta := frames.Meta{Scope: w.s.Scope, Frame: "r", At: w.now + 1}
	for name, e := range map[string]*frames.PartialOutputRecorded{
		"a chunk missing":          {Meta: meta, Delta: "x", Offset: 3, Chunk: 3},
		"a wrong offset":           {Meta: meta, Delta: "x", Offset: 2, Chunk: 2},
		"a first chunk at 5":       {Meta: meta, Delta: "x", Offset: 5, Chunk: 1},
		"a percentage of 200":      {Meta: meta, Delta: "x", Offset: 3, Chunk: 2, Percent: 200},
		"a chunk of an unknown id": {Meta: frames.Meta{Scope: w.s.Scope, Frame: "ghost", At: w.now + 1}, Chunk: 1},
	} {
		t.Run(name, func(t *testing.T) {
			before := w.s.Clone()
			require.ErrorIs(t, frames.Apply(w.s, e), frames.ErrInconsistentEvent)
			assert.Equal(t, before, w.s.Clone())
		})
	}
	w.chunk("r", "", 100, true)
	err := frames.Apply(w.s, &frames.PartialOutputRecorded{Meta: meta, Offset: 3, Chunk: 3})
	assert.ErrorIs(t, err, frames.ErrInconsistentEvent, "a complete output takes no more chunks")
}

func TestRecoverListsInterruptedOutputs(t *testing.T) {
	w := newWorld(t)
	w.cfg.MaxContentBytes = 1 << 20
	w.push("a", "", 1000)
	w.push("b", "", 1000)
	w.push("c", "", 1000)
	w.push("quiet", "", 1000)
	piece := strings.Repeat("b", 60<<10)
	for _, id := range []string{"a", "b", "c"} {
		for i := range 5 {
			w.chunk(id, piece, int64(10*i), false)
		}
	}
	w.chunk("b", "", 100, true)
	w.add("quiet", "h", frames.RoleUser, compaction.Low, 1)

	r := frames.Recover(w.s)
	require.Len(t, r.Outputs, 3, "the frame without output is not listed")
	for i, id := range []string{"a", "b", "c"} {
		o := r.Outputs[i]
		assert.Equal(t, id, o.FrameID, "push order")
		assert.Equal(t, int64(300<<10), o.Bytes)
		assert.Equal(t, id != "b", o.IsPartial)
	}
	assert.Equal(t, strings.Repeat(piece, 5), r.Outputs[0].Text)
	assert.False(t, r.Outputs[0].Omitted)
	assert.True(t, r.Outputs[1].Omitted, "past ResumeOutputBytes the text is left out")
	assert.Empty(t, r.Outputs[1].Text)
	assert.Equal(t, int64(6), r.Outputs[1].Chunks)
	assert.True(t, r.Outputs[2].Omitted)
	assert.Equal(t, int64(40), r.Outputs[2].Percent)
}

// A chunk costs its delta, not the text so far: 32,768 chunks of 8 bytes
// (a 256 KiB output) allocate a few times the output, where copying the
// text at every chunk would allocate 4 GiB. A state cloned between chunks
// keeps its text while the original goes on growing.
func TestPartialOutputAppendsInAmortizedTime(t *testing.T) {
	s := frames.NewState("s", 0)
	at := int64(1)
	apply := func(e frames.Event) {
		t.Helper()
		at++
		e.EventMeta().At = at
		require.NoError(t, frames.Apply(s, e))
	}
	apply(&frames.FramePushed{Meta: frames.Meta{Scope: "s", Frame: "f"}, Goal: "g"})
	const chunks, size = 32768, 8
	delta := strings.Repeat("x", size)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var clone *frames.State
	for i := range chunks {
		apply(&frames.PartialOutputRecorded{Meta: frames.Meta{Scope: "s", Frame: "f"}, Delta: delta, Offset: int64(i * size), Chunk: int64(i + 1)})
		if i == chunks/2 {
			clone = s.Clone()
		}
	}
	runtime.ReadMemStats(&after)
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(64<<20), "allocated %d bytes for a %d-byte output", after.TotalAlloc-before.TotalAlloc, chunks*size)
	assert.Equal(t, strings.Repeat(delta, chunks), s.Frame("f").Partial.Text)
	assert.Equal(t, strings.Repeat(delta, chunks/2+1), clone.Frame("f").Partial.Text, "the clone's text is its own")

	// The clone appends on its own: neither sees the other's chunks.
	c := clone.Frame("f").Partial
	require.NoError(t, frames.Apply(clone, &frames.PartialOutputRecorded{Meta: frames.Meta{Scope: "s", Frame: "f", At: at + 1}, Delta: "clone",
		Offset: int64(len(c.Text)), Chunk: c.Chunks + 1}))
	apply(&frames.PartialOutputRecorded{Meta: frames.Meta{Scope: "s", Frame: "f"}, Delta: "original", Offset: chunks * size, Chunk: chunks + 1})
	assert.True(t, strings.HasSuffix(clone.Frame("f").Partial.Text, delta+"clone"))
	assert.True(t, strings.HasSuffix(s.Frame("f").Partial.Text, delta+"original"))
	assert.Len(t, s.Frame("f").Partial.Text, chunks*size+len("original"))
}
