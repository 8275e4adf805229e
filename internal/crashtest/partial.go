package crashtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// Partial output under the kills. The storm streams chunks of model
// output to its frames (RecordPartialOutput), a few at a time between its
// other requests, so that kills land among them; the usage it records
// with a turn, pops and continuations end or carry the outputs.
//
// After every kill the checker proves, from the side file and the log,
// that each live frame's output in the recovered state is exactly the
// concatenation of the deltas its chunks were sent with (as the side file
// recorded the requests, not as the log has them), that every chunk
// acknowledged since the output began is among them (nothing acknowledged
// lost), and that a chunk in flight at the kill is there whole or not at
// all (checkWhole holds each chunk's event to its request).

// deltas are what the storm streams: ASCII, and multi-byte UTF-8 whose
// bytes a torn write would cut.
var deltas = []string{"Let me ", "analyze ", "the requirements", ", then ", "plan: ", "état ", "日本語 ", "→ ", "🙂 ", "done. "}

// stream sends 1–4 chunks of f's output; now and then the first starts a
// new output and the last completes it.
func (w *Storm) stream(ctx context.Context, rng *rand.Rand, s *scope, f *mframe) error {
	n := 1 + rng.IntN(4)
	for i := range n {
		req := &messages.RecordPartialOutput{Header: mut(s), FrameID: f.id, Delta: deltas[rng.IntN(len(deltas))], Percent: int64(rng.IntN(101)),
			Start: i == 0 && rng.IntN(10) == 0, Final: i == n-1 && rng.IntN(6) == 0}
		if _, err := w.send(ctx, req); err != nil {
			return err
		}
	}
	return nil
}

// output is the checker's model of a frame's current output: the request
// ids of its chunks in log order, the frames it was streamed to (a
// continuation carries it to the next link), and whether a final chunk
// completed it.
type output struct {
	ids      []string
	frames   map[string]bool
	complete bool
}

// partialFold follows one scope's outputs event by event, by the rules of
// frames/partial.go written again from the requests the side file holds.
type partialFold struct {
	out  map[string]*output // by frame
	fail func(string, ...any)
}

func newPartialFold(fail func(string, ...any)) *partialFold {
	return &partialFold{out: map[string]*output{}, fail: fail}
}

func (p *partialFold) apply(side *Side, ev frames.Event, version int64) {
	m := ev.EventMeta()
	switch e := ev.(type) {
	case *frames.PartialOutputRecorded:
		r := side.ByID[m.RequestID]
		if r == nil || r.Op != "RecordPartialOutput" || r.b64 == "" {
			return // a phantom: reported by Check
		}
		q, err := r.Request()
		if err != nil {
			p.fail("side file: %v", err)
			return
		}
		req := q.(*messages.RecordPartialOutput)
		o := p.out[m.Frame]
		if req.Start || o == nil || o.complete {
			o = &output{frames: map[string]bool{m.Frame: true}}
			p.out[m.Frame] = o
		}
		o.ids = append(o.ids, m.RequestID)
		o.complete = req.Final
		if e.Chunk != int64(len(o.ids)) {
			p.fail("scope %q version %d: chunk %s of frame %q is numbered %d; it is the output's chunk %d", m.Scope, version, m.RequestID, m.Frame, e.Chunk, len(o.ids))
		}
	case *frames.UsageRecorded:
		if e.Cost.Turns > 0 {
			delete(p.out, m.Frame)
		}
	case *frames.FramePopped:
		if o := p.out[m.Frame]; o != nil && e.ContinuedTo != "" {
			o.frames[e.ContinuedTo] = true
			p.out[e.ContinuedTo] = o
		}
		delete(p.out, m.Frame)
	case *frames.ScopeDestroyed:
		clear(p.out)
	}
}

// check holds the scope's live frames' outputs to the model and the side
// file; it returns how many outputs and chunks it checked.
func (p *partialFold) check(side *Side, name string, live *frames.State) (outputs, chunks int) {
	pos := map[string]int{}
	for i, id := range side.order {
		pos[id] = i
	}
	for id, f := range live.Frames {
		o := p.out[id]
		switch {
		case f.Partial == nil && o == nil:
			continue
		case f.Partial == nil:
			p.fail("scope %q: frame %q has no output; its chunks %v were not ended", name, id, o.ids)
			continue
		case o == nil:
			p.fail("scope %q: frame %q has an output of %d chunks that no chunk in the log began", name, id, f.Partial.Chunks)
			continue
		}
		var text strings.Builder
		in := map[string]bool{}
		for _, rid := range o.ids {
			q, err := side.ByID[rid].Request()
			if err != nil {
				p.fail("side file: %v", err)
				return
			}
			text.WriteString(q.(*messages.RecordPartialOutput).Delta)
			in[rid] = true
		}
		if got, want := f.Partial.Text, text.String(); got != want {
			p.fail("scope %q: frame %q's output is %q; its chunks were sent with %q", name, id, got, want)
		}
		if f.Partial.Chunks != int64(len(o.ids)) || f.Partial.IsPartial == o.complete {
			p.fail("scope %q: frame %q's output has %d chunks (partial %v), its log %d (complete %v)", name, id, f.Partial.Chunks, f.Partial.IsPartial, len(o.ids), o.complete)
		}
		// Every chunk acknowledged since the output began is in it.
		for _, rid := range side.order[pos[o.ids[0]]:] {
			r := side.ByID[rid]
			if r.Scope != name || r.Op != "RecordPartialOutput" || !r.Acked || in[rid] {
				continue
			}
			q, err := r.Request()
			if err != nil {
				p.fail("side file: %v", err)
				return
			}
			if o.frames[q.(*messages.RecordPartialOutput).FrameID] {
				p.fail("LOST: scope %q: acknowledged chunk %s (reply version %d) of frame %q is not in its output", name, rid, r.Version, id)
			}
		}
		outputs++
		chunks += len(o.ids)
	}
	return outputs, chunks
}

// checkChunk holds a chunk's event to its request: the delta whole, the
// percentage and finality as sent.
func checkChunk(where string, q *messages.RecordPartialOutput, evs []frames.Event, fail func(string, ...any)) {
	e, ok := evs[0].(*frames.PartialOutputRecorded)
	switch {
	case len(evs) != 1 || !ok:
		fail("PARTIAL: %s is %d events, not one frame.partial_output", where, len(evs))
	case e.Delta != q.Delta || e.Percent != q.Percent || e.Final != q.Final:
		fail("PARTIAL: %s recorded delta %q (%d%%, final %v); it was sent with %q (%d%%, final %v)", where, e.Delta, e.Percent, e.Final, q.Delta, q.Percent, q.Final)
	}
}

// PartialStats is what the partial-output check found after a kill.
type PartialStats struct {
	// Chunks is the acknowledged RecordPartialOutput requests (among
	// Acked); Outputs the live frames' outputs checked against their
	// chunks, OutputChunks the chunks they hold.
	Chunks, Outputs, OutputChunks int
	// InFlightCommitted and InFlightAbsent are the chunks in flight at the
	// kill found whole in the log, and not found.
	InFlightCommitted, InFlightAbsent int
}

func (p PartialStats) String() string {
	return fmt.Sprintf("%d acknowledged chunks; %d live outputs (%d chunks) equal to the concatenation of their chunks' deltas as sent, none acknowledged missing; "+
		"in flight at the kill: %d whole, %d absent", p.Chunks, p.Outputs, p.OutputChunks, p.InFlightCommitted, p.InFlightAbsent)
}
