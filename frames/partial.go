package frames

import (
	"fmt"
	"strings"
)

// Partial output (issue 15; the state schema's partial_cognition): a
// frame's model output while it streams, kept durable chunk by chunk so
// that an actor that restarts mid-stream finds what the model had said.
//
// Each chunk is one event carrying its delta (not the text so far), its
// offset in the output and its number, so the log grows with the text,
// and replay checks that no chunk is missing or doubled. The state keeps
// the frame's current output — text so far, whether it is still partial,
// the completion percentage, the chunk count — and nothing of the outputs
// before it.
//
// An output starts with its first chunk (or a chunk with Start, which
// replaces any output the frame has). A chunk with Final completes it:
// IsPartial becomes false and the complete output stays, so that an actor
// that restarts before it recorded the turn still finds it; the next
// chunk starts a new output. What ends an output (the state no longer
// carries it; its deltas stay in the log, and go with the frame's run when
// retention removes it):
//
//   - the frame's next RecordUsage that records a turn (Turns > 0): the
//     model call the output came from is committed as a turn;
//   - the frame's end (PopFrame, a cascade, a destroy of the scope);
//   - a chunk with Start, or any chunk after a Final one (a new output).
//
// A continuation does not end it: the new link takes the output along
// (FramePushed.Partial), as frame-level things move to a continuation, so
// that later chunks go on at the chain's head.
//
// Chunks are accepted on any live frame: active, waiting (its model call
// runs beside its subcalls) and suspended (output may still arrive as a
// frame is suspended for a limit).

// Bounds of partial output. The whole output is bounded by
// Config.MaxContentBytes: a complete output must fit in one context
// handle (the assistant's message the turn records).
const (
	// MaxPartialDeltaBytes bounds one chunk's delta (and Config.MaxContentBytes,
	// when smaller).
	MaxPartialDeltaBytes = 64 << 10
	// MaxPartialChunks bounds the chunks of one output (a 64k-token
	// output streamed a token a chunk fits).
	MaxPartialChunks = 100_000
	// ResumeOutputBytes bounds the text ResumeActor returns of the live
	// frames' outputs together: the outputs that do not fit are listed
	// without their text (Omitted); GetFrame returns each whole.
	ResumeOutputBytes = 512 << 10
)

// TypePartialOutput is the event type of a chunk of partial output.
const TypePartialOutput = "frame.partial_output"

// PartialOutput is a frame's current model output (the seed's
// partial_cognition): Text so far, IsPartial until a Final chunk
// completed it, the completion percentage its last chunk gave (0..100),
// how many chunks made it, and the server times of its first and last.
type PartialOutput struct {
	Text      string `msgpack:"t"`
	IsPartial bool   `msgpack:"p"`
	Percent   int64  `msgpack:"pc"`
	Chunks    int64  `msgpack:"n"`
	StartedAt int64  `msgpack:"at"`
	UpdatedAt int64  `msgpack:"u"`

	// text holds Text with room to grow, so that a chunk appends in
	// amortized O(delta) rather than copying the text so far (an output of
	// 64k one-token chunks would copy gigabytes). Text is a view of its
	// bytes, which appends never change; nil in a clone or a decoded
	// state, which start a builder of their own at their next chunk.
	text *strings.Builder
}

func (p *PartialOutput) clone() *PartialOutput {
	if p == nil {
		return nil
	}
	c := *p
	c.text = nil // never two appenders on one builder
	return &c
}

// appendText appends delta to Text.
func (p *PartialOutput) appendText(delta string) {
	if p.text == nil || p.text.Len() != len(p.Text) {
		b := &strings.Builder{}
		b.Grow(2*len(p.Text) + len(delta))
		b.WriteString(p.Text)
		p.text = b
	}
	p.text.WriteString(delta)
	p.Text = p.text.String()
}

// RecordPartialOutput appends a chunk of a live frame's model output:
// Delta (valid UTF-8, no NUL), Percent (0..100), Final when it completes
// the output, Start when it begins a new one whatever the frame has.
type RecordPartialOutput struct {
	Header
	FrameID string
	Delta   string
	Percent int64
	Final   bool
	Start   bool
}

// PartialOutputRecorded: a chunk of a frame's model output. Offset is the
// output's length before Delta, Chunk the chunk's number in it (1: the
// chunk starts an output, replacing the one the frame had).
type PartialOutputRecorded struct {
	Meta    `msgpack:",inline"`
	Delta   string `msgpack:"d"`
	Offset  int64  `msgpack:"o"`
	Chunk   int64  `msgpack:"n"`
	Percent int64  `msgpack:"pc"`
	Final   bool   `msgpack:"fi,omitempty"`
}

// EventType returns TypePartialOutput.
func (e *PartialOutputRecorded) EventType() string { return TypePartialOutput }

// Bytes is the output's length after the chunk.
func (e *PartialOutputRecorded) Bytes() int64 { return e.Offset + int64(len(e.Delta)) }

func (d decider) partialOutput(c *RecordPartialOutput) ([]Event, error) {
	f, err := d.liveFrame(c.FrameID)
	if err != nil {
		return nil, err
	}
	if c.Percent < 0 || c.Percent > 100 {
		return nil, invalid("partial output of frame %q: completion percentage %d is not in 0..100", f.ID, c.Percent)
	}
	if err := checkText("delta", c.Delta, min(MaxPartialDeltaBytes, d.cfg.MaxContentBytes)); err != nil {
		return nil, fmt.Errorf("partial output of frame %q: %w", f.ID, err)
	}
	e := &PartialOutputRecorded{Meta: d.meta(f.ID, ReasonUserMessage), Delta: c.Delta, Chunk: 1, Percent: c.Percent, Final: c.Final}
	if p := f.Partial; p != nil && p.IsPartial && !c.Start {
		e.Offset, e.Chunk = int64(len(p.Text)), p.Chunks+1
	}
	if n := e.Bytes(); n > int64(d.cfg.MaxContentBytes) {
		return nil, fmt.Errorf("%w: partial output of frame %q would be %d bytes, limit %d (a complete output must fit one context handle: "+
			"record the turn, or start a new output)", ErrTooLarge, f.ID, n, d.cfg.MaxContentBytes)
	}
	if e.Chunk > MaxPartialChunks {
		return nil, fmt.Errorf("%w: partial output of frame %q would be %d chunks, limit %d", ErrTooLarge, f.ID, e.Chunk, MaxPartialChunks)
	}
	return []Event{e}, nil
}

func applyPartialOutput(s *State, e *PartialOutputRecorded) error {
	f, err := s.liveFrameFor(&e.Meta)
	if err != nil {
		return err
	}
	if e.Percent < 0 || e.Percent > 100 || e.Chunk < 1 || e.Chunk > MaxPartialChunks {
		return inconsistent("partial output of %q: chunk %d at %d%%", f.ID, e.Chunk, e.Percent)
	}
	if e.Chunk == 1 {
		if e.Offset != 0 {
			return inconsistent("partial output of %q starts at offset %d", f.ID, e.Offset)
		}
		f.Partial = &PartialOutput{Text: e.Delta, IsPartial: !e.Final, Percent: e.Percent, Chunks: 1, StartedAt: e.At, UpdatedAt: e.At}
		return nil
	}
	p := f.Partial
	if p == nil || !p.IsPartial || p.Chunks != e.Chunk-1 || int64(len(p.Text)) != e.Offset {
		have := "none"
		if p != nil {
			have = fmt.Sprintf("%d chunks, %d bytes, partial %v", p.Chunks, len(p.Text), p.IsPartial)
		}
		return inconsistent("partial output of %q: chunk %d at offset %d, the frame has %s", f.ID, e.Chunk, e.Offset, have)
	}
	p.appendText(e.Delta)
	p.IsPartial, p.Percent, p.Chunks, p.UpdatedAt = !e.Final, e.Percent, e.Chunk, e.At
	return nil
}

// endPartialOnTurn ends f's output when a usage records a turn.
func endPartialOnTurn(f *Frame, e *UsageRecorded) {
	if e.Cost.Turns > 0 {
		f.Partial = nil
	}
}

// InterruptedOutput is a live frame's output as ResumeActor returns it:
// the frame's PartialOutput, its Text left out (Omitted) when the outputs
// before it in push order took ResumeOutputBytes already.
type InterruptedOutput struct {
	FrameID   string `msgpack:"f"`
	Text      string `msgpack:"t,omitempty"`
	Bytes     int64  `msgpack:"b"`
	IsPartial bool   `msgpack:"p"`
	Percent   int64  `msgpack:"pc"`
	Chunks    int64  `msgpack:"n"`
	StartedAt int64  `msgpack:"at"`
	UpdatedAt int64  `msgpack:"u"`
	Omitted   bool   `msgpack:"om,omitempty"`
}

// InterruptedOutputs lists the outputs of live, in push order, with their
// text while the total stays within ResumeOutputBytes.
func InterruptedOutputs(live []*Frame) []InterruptedOutput {
	var out []InterruptedOutput
	var total int64
	for _, f := range live {
		p := f.Partial
		if p == nil {
			continue
		}
		o := InterruptedOutput{FrameID: f.ID, Bytes: int64(len(p.Text)), IsPartial: p.IsPartial, Percent: p.Percent, Chunks: p.Chunks,
			StartedAt: p.StartedAt, UpdatedAt: p.UpdatedAt}
		if total+o.Bytes <= ResumeOutputBytes {
			o.Text, total = p.Text, total+o.Bytes
		} else {
			o.Omitted = true
		}
		out = append(out, o)
	}
	return out
}

// checkPartialInvariants: only a live frame has an output, of at least
// one chunk, at most MaxPartialChunks, at a percentage in 0..100.
func checkPartialInvariants(s *State) error {
	for id, f := range s.Frames {
		p := f.Partial
		if p == nil {
			continue
		}
		if !f.Status.Live() || p.Chunks < 1 || p.Chunks > MaxPartialChunks || p.Percent < 0 || p.Percent > 100 || p.UpdatedAt < p.StartedAt {
			return fmt.Errorf("%w: frame %q (%s) has an output of %d chunks at %d%%", ErrInvariantViolation, id, f.Status, p.Chunks, p.Percent)
		}
	}
	return nil
}
