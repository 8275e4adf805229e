package actors_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

func chunk(t *testing.T, c *actors.Client, scope, frame, delta string, percent int64, final bool) *messages.RecordPartialOutputReply {
	t.Helper()
	r, err := c.RecordPartialOutput(ctx, &messages.RecordPartialOutput{Header: mut(scope), FrameID: frame, Delta: delta, Percent: percent, Final: final})
	require.NoError(t, err)
	return r
}

// A frame's output streams in, survives a restart, is returned by
// ResumeActor until the turn is recorded, and a resent chunk is answered
// with its original reply without being appended again.
func TestPartialOutputThroughTheClient(t *testing.T) {
	e := newEnv(t)
	const s = "stream"
	h := messages.Header{Scope: s}
	root := push(t, e.c, s, "", 1000)
	deltas := []string{"Let me ", "analyze the ", "requirements: ", "CRUD, ", "auth ", "and ünïcödé"}
	var text string
	for i, d := range deltas {
		r := chunk(t, e.c, s, root, d, int64(7*i), false)
		text += d
		assert.Equal(t, messages.RecordPartialOutputReply{Result: r.Result, FrameID: root, Chunk: int64(i + 1), Bytes: int64(len(text)),
			IsPartial: true, Percent: int64(7 * i)}, *r)
	}

	// A resend (same request id) gets the very reply, and writes nothing.
	req := &messages.RecordPartialOutput{Header: mut(s), Delta: "!", Percent: 40} // the top of the stack
	first, err := e.c.RecordPartialOutput(ctx, req)
	require.NoError(t, err)
	text += "!"
	v := e.version(s)
	again, err := e.c.RecordPartialOutput(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, first, again)
	assert.Equal(t, v, e.version(s), "a resend appends nothing")
	assert.Equal(t, int64(len(text)), again.Bytes)

	// The log carries deltas: each record holds its chunk, not the text so far.
	var payload, chunks int
	require.NoError(t, e.store.ReadStream(ctx, s, 1, func(r eventstore.Record) error {
		if r.Type == frames.TypePartialOutput {
			chunks++
			payload += len(r.Data)
		}
		return nil
	}))
	assert.Equal(t, len(deltas)+1, chunks)
	assert.Less(t, payload, len(text)+chunks*200, "records grow with the deltas")

	check := func(when string) {
		t.Helper()
		rs, err := e.c.ResumeActor(ctx, &messages.ResumeActor{Header: h})
		require.NoError(t, err)
		require.Len(t, rs.Outputs, 1, when)
		o := rs.Outputs[0]
		assert.Equal(t, root, o.FrameID, when)
		assert.Equal(t, text, o.Text, when)
		assert.True(t, o.IsPartial, when)
		assert.Equal(t, int64(40), o.Percent, when)
		assert.Equal(t, int64(len(deltas)+1), o.Chunks, when)
		f, err := e.c.GetFrame(ctx, &messages.GetFrame{Header: h, FrameID: root})
		require.NoError(t, err)
		require.NotNil(t, f.Frame.Partial, when)
		assert.Equal(t, text, f.Frame.Partial.Text, when)
	}
	check("live")
	e.restart()
	check("after a restart")

	// Finishing the turn replaces it.
	r := chunk(t, e.c, s, root, "", 100, true)
	assert.False(t, r.IsPartial)
	_, err = e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, FrameID: root, Role: "assistant", Priority: compaction.Medium, Content: text})
	require.NoError(t, err)
	_, err = e.c.RecordUsage(ctx, &messages.RecordUsage{Header: h, FrameID: root, Cost: budget.Cost{InputTokens: 100, OutputTokens: 20, Turns: 1}})
	require.NoError(t, err)
	rs, err := e.c.ResumeActor(ctx, &messages.ResumeActor{Header: h})
	require.NoError(t, err)
	assert.Empty(t, rs.Outputs)
	f, err := e.c.GetFrame(ctx, &messages.GetFrame{Header: h, FrameID: root})
	require.NoError(t, err)
	assert.Nil(t, f.Frame.Partial)
	require.NoError(t, e.store.Verify(ctx, nil))
}

// Many streams write at once, several frames of one scope (whose waiting
// chunks share appends) and frames of their own scopes: every frame ends
// with exactly its deltas, in order.
func TestPartialOutputConcurrentStreams(t *testing.T) {
	e := newEnv(t)
	const streams, chunks = 12, 40
	type stream struct{ scope, frame string }
	ss := make([]stream, streams)
	for i := range ss {
		scope := "shared"
		if i%2 == 1 {
			scope = fmt.Sprintf("own-%02d", i)
		}
		ss[i] = stream{scope, push(t, e.c, scope, "", 100)}
	}
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for i, st := range ss {
		wg.Go(func() {
			for j := range chunks {
				_, err := e.c.RecordPartialOutput(ctx, &messages.RecordPartialOutput{Header: mut(st.scope), FrameID: st.frame,
					Delta: fmt.Sprintf("[%d.%d]", i, j), Percent: int64(j * 100 / chunks)})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for i, st := range ss {
		var want strings.Builder
		for j := range chunks {
			fmt.Fprintf(&want, "[%d.%d]", i, j)
		}
		f, err := e.c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: st.scope}, FrameID: st.frame})
		require.NoError(t, err)
		require.NotNil(t, f.Frame.Partial)
		assert.Equal(t, want.String(), f.Frame.Partial.Text)
		assert.Equal(t, int64(chunks), f.Frame.Partial.Chunks)
	}
}

// Retention drops the deltas with the finished runs; a live frame's
// output whose first chunks were removed lives on in the snapshot.
func TestRetentionDropsFinishedOutputs(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) { c.RequestHorizon = time.Minute; c.ClockSkew = time.Second })
	const s = "chat"
	h := messages.Header{Scope: s}
	root := push(t, e.c, s, "", 1_000_000)
	chunk(t, e.c, s, root, "the root's answer, ", 10, false)
	for i := range 6 {
		kid := push(t, e.c, s, root, 1000)
		for j := range 3 {
			chunk(t, e.c, s, kid, fmt.Sprintf("run %d chunk %d; ", i, j), int64(30*j), false)
		}
		_, err := e.c.RecordUsage(ctx, &messages.RecordUsage{Header: h, FrameID: kid, Cost: budget.Cost{OutputTokens: 10, Turns: 1}})
		require.NoError(t, err)
		pop(t, e.c, s, kid)
	}
	chunk(t, e.c, s, root, "still streaming", 60, false)
	e.clock.Advance(time.Hour)
	rep := retain(t, e, frames.RetentionPolicy{KeepLastN: 1, OnCompletion: frames.CompletionDelete}, "")
	require.Len(t, rep.Scopes, 1)
	require.Positive(t, rep.Scopes[0].Removed)
	base, err := e.store.StreamBase(ctx, s)
	require.NoError(t, err)
	var left int
	require.NoError(t, e.store.ReadStream(ctx, s, base.Version+1, func(r eventstore.Record) error {
		if r.Type == frames.TypePartialOutput {
			left++
		}
		return nil
	}))
	assert.Equal(t, 4, left, "the kept run's three chunks and the root's last one; the rest went with their runs")

	e.restart()
	rs, err := e.c.ResumeActor(ctx, &messages.ResumeActor{Header: h})
	require.NoError(t, err)
	require.Len(t, rs.Outputs, 1)
	assert.Equal(t, "the root's answer, still streaming", rs.Outputs[0].Text, "the first chunk's record is gone; the snapshot holds the text")
	require.NoError(t, e.store.Verify(ctx, nil))
}
