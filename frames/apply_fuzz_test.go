package frames_test

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"testing"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/frames"
)

// program reads a fuzzer's bytes as a sequence of choices; once the bytes
// run out every choice is zero.
type program struct {
	b []byte
	n int // choices made, for fresh ids
}

func (p *program) byte() byte {
	if len(p.b) == 0 {
		return 0
	}
	c := p.b[0]
	p.b = p.b[1:]
	return c
}

func (p *program) intn(n int) int { return int(p.byte()) % n }

// amount is a small number, sometimes negative, sometimes huge.
func (p *program) amount() int64 {
	switch c := p.byte(); {
	case c < 200:
		return int64(c) * int64(1+p.intn(40))
	case c < 240:
		return -int64(c - 199)
	case c < 250:
		return 1<<62 + int64(c)
	default:
		return -1 << 63
	}
}

// frame names an existing frame (in sorted order, for reproducibility) or
// a fresh one.
func (p *program) frame(s *frames.State) string {
	ids := make([]string, 0, len(s.Frames))
	for id := range s.Frames {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	c := p.intn(len(ids) + 2)
	if c < len(ids) {
		return ids[c]
	}
	if c == len(ids) {
		return ""
	}
	p.n++
	return fmt.Sprintf("f%d", p.n)
}

func (p *program) status() frames.Status { return frames.Status(p.intn(9)) }

func (p *program) priority() compaction.Priority { return compaction.Priority(p.intn(7)) }

func (p *program) handle(s *frames.State, frame string) frames.ContextHandle {
	id := fmt.Sprintf("h%d", p.intn(6))
	if f := s.Frames[frame]; f != nil && len(f.Handles) > 0 && p.intn(2) == 0 {
		id = f.Handles[p.intn(len(f.Handles))].ID
	}
	return frames.ContextHandle{ID: id, Kind: "text", Priority: p.priority(), Content: "c", Tokens: p.amount()}
}

func (p *program) budget() budget.TokenBudget {
	return budget.TokenBudget{Total: p.amount(), Used: p.amount() * int64(p.intn(2)), Reserved: p.amount() * int64(p.intn(2)),
		SubcallAllocation: p.amount() * int64(p.intn(2)), MaxSubframeDepth: int64(p.intn(6)) - 1}
}

func (p *program) cost() budget.Cost {
	return budget.Cost{InputTokens: p.amount(), OutputTokens: p.amount() * int64(p.intn(2)), Turns: int64(p.intn(3)),
		SpendMicros: p.amount() * int64(p.intn(2)), Spawns: int64(p.intn(2)) * p.amount()}
}

// event builds an arbitrary event — not necessarily one Decide would make.
func (p *program) event(s *frames.State, now int64) frames.Event {
	f := p.frame(s)
	m := frames.Meta{Scope: s.Scope, Frame: f, At: now, RequestID: fmt.Sprintf("q%d", p.intn(4)), Reason: frames.Reason(p.intn(6))}
	if p.intn(16) == 0 {
		m.Scope = "elsewhere"
	}
	tok := fmt.Sprintf("t%d", p.intn(5))
	if fr := s.Frames[f]; fr != nil && fr.Suspension != nil && p.intn(2) == 0 {
		tok = fr.Suspension.TokenID
	}
	switch p.intn(15) {
	case 0:
		parent := ""
		depth := int64(0)
		if p.intn(2) == 0 {
			parent = p.frame(s)
			if pf := s.Frames[parent]; pf != nil {
				depth = pf.Depth + 1
			}
		}
		depth += int64(p.intn(3)) - 1
		if depth < 0 || p.intn(3) == 0 {
			depth = 0
		}
		return &frames.FramePushed{Meta: m, ParentID: parent, Goal: "g", Depth: depth, Budget: p.budget(),
			Limits: budget.Limits{Turns: int64(p.intn(4)), Tokens: p.amount() * int64(p.intn(2))}}
	case 1:
		goal := "new"
		lim := budget.Limits{Turns: int64(p.intn(4)) - 1}
		e := &frames.FrameUpdated{Meta: m, ReserveDelta: p.amount() * int64(p.intn(2))}
		if p.intn(2) == 0 {
			e.Goal = &goal
		}
		if p.intn(3) == 0 {
			e.Limits = &lim
		}
		return e
	case 2:
		e := &frames.FramePopped{Meta: m, Status: p.status()}
		if fr := s.Frames[f]; fr != nil && s.Frames[fr.ParentID] != nil && p.intn(4) > 0 {
			e.Released, e.ChargedTokens = fr.Budget.Total, fr.Budget.Used
			e.ChargedCost = budget.Cost{InputTokens: fr.Cost.InputTokens, OutputTokens: fr.Cost.OutputTokens, Turns: fr.Cost.Turns, SpendMicros: fr.Cost.SpendMicros}
		} else if p.intn(4) == 0 {
			e.Released, e.ChargedTokens = p.amount(), p.amount()
		}
		return e
	case 3:
		reasons := []frames.SuspendReason{frames.SuspendApproval, frames.SuspendLimit, "bogus", ""}
		return &frames.FrameSuspended{Meta: m, Suspension: frames.Suspension{Reason: reasons[p.intn(4)], TokenID: tok, At: now, ExpiresAt: now + p.amount()}}
	case 4:
		return &frames.FrameResumed{Meta: m, TokenID: tok}
	case 5:
		return &frames.HandleAdded{Meta: m, Handle: p.handle(s, f)}
	case 6:
		return &frames.ResultAdded{Meta: m, Result: frames.ResultRef{ID: fmt.Sprintf("r%d", p.intn(3)), Kind: "k", Ref: "x"}}
	case 7:
		var removed []string
		if fr := s.Frames[f]; fr != nil {
			for _, h := range fr.Handles {
				if p.intn(2) == 0 {
					removed = append(removed, h.ID)
				}
			}
		}
		if p.intn(4) == 0 {
			removed = append(removed, "ghost")
		}
		e := &frames.FrameCompacted{Meta: m, Strategy: "s", Removed: removed, Level: compaction.Level(p.intn(5))}
		if p.intn(2) == 0 {
			h := p.handle(s, f)
			h.Covers = removed
			e.Summary = &h
		}
		return e
	case 8:
		return &frames.ActorResumed{Meta: m, FramesRecovered: p.amount(), PendingItems: p.amount()}
	case 9:
		return &frames.UsageRecorded{Meta: m, Cost: p.cost()}
	case 10:
		return &frames.ToolStarted{Meta: m, CallID: fmt.Sprintf("c%d", p.intn(4)), Name: "tool"}
	case 11:
		return &frames.PartialOutputRecorded{Meta: m, Delta: "chunk", Offset: int64(p.intn(12)), Chunk: int64(p.intn(4)), Percent: int64(p.intn(120)), Final: p.intn(3) == 0}
	case 12:
		e := &frames.StateChanged{Meta: m, Expired: p.expiredKeys(s, f, p.intn(3))}
		for range p.intn(4) {
			ch := frames.StateChange{Kind: []string{"set", "push", "delete", "touch", "clear", "bogus"}[p.intn(6)], Key: p.stateKey(s, f),
				Value: []byte("v")[:p.intn(2)], Item: []byte("item")[:p.intn(5)], Trim: int64(p.intn(4)) - 1,
				ExpiresAt: p.amount(), TTL: p.amount() * int64(p.intn(2)), Sliding: p.intn(2) == 0}
			if p.intn(2) == 0 {
				ch.Frame = f
			}
			if ch.Kind == "clear" {
				for range p.intn(3) {
					ch.Keys = append(ch.Keys, p.stateKey(s, ch.Frame))
				}
			}
			e.Changes = append(e.Changes, ch)
		}
		return e
	case 13:
		return &frames.StateExpired{Meta: m, Keys: p.expiredKeys(s, f, p.intn(4))}
	default:
		return &frames.ToolFinished{Meta: m, CallID: fmt.Sprintf("c%d", p.intn(4)), IsError: p.intn(2) == 0,
			CallHandle: p.handle(s, f), ResultHandle: p.handle(s, f)}
	}
}

// stateKey names a key of frame's level ("" the scope's) that the state
// holds, or another.
func (p *program) stateKey(s *frames.State, frame string) string {
	kv := s.KV
	if f := s.Frames[frame]; frame != "" && f != nil {
		kv = f.KV
	}
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if c := p.intn(len(keys) + 2); c < len(keys) {
		return keys[c]
	}
	return fmt.Sprintf("k%d", p.intn(3))
}

// expiredKeys names n keys as expired, at the scope's level or frame's,
// mostly at the version the state holds them at.
func (p *program) expiredKeys(s *frames.State, frame string, n int) []frames.ExpiredKey {
	var out []frames.ExpiredKey
	for range n {
		x := frames.ExpiredKey{Key: p.stateKey(s, ""), Version: int64(p.intn(4))}
		if p.intn(2) == 0 {
			x.Frame, x.Key = frame, p.stateKey(s, frame)
		}
		kv := s.KV
		if f := s.Frames[x.Frame]; x.Frame != "" && f != nil {
			kv = f.KV
		}
		if e := kv[x.Key]; e != nil && p.intn(4) > 0 {
			x.Version = e.Version
		}
		out = append(out, x)
	}
	return out
}

// command builds a command for Decide from the same choices.
func (p *program) command(s *frames.State, hdr frames.Header) frames.Command {
	f := p.frame(s)
	mint := frames.Mint{TokenID: fmt.Sprintf("m%d", p.n), ExpiresAt: hdr.Now + 1 + int64(p.intn(100))}
	p.n++
	switch p.intn(13) {
	case 0, 1:
		parent := ""
		if p.intn(2) == 0 {
			parent = p.frame(s)
		}
		p.n++
		return &frames.PushFrame{Header: hdr, FrameID: fmt.Sprintf("f%d", p.n), ParentID: parent, Goal: "g",
			Budget: budget.TokenBudget{Total: int64(p.intn(200)) * 10, MaxSubframeDepth: int64(p.intn(4))},
			Limits: budget.Limits{Turns: int64(p.intn(4)), Spawns: int64(p.intn(3))}}
	case 2:
		return &frames.PopFrame{Header: hdr, FrameID: f, Status: p.status(), Cascade: p.intn(2) == 0, Mint: mint}
	case 3:
		h := p.handle(s, f)
		h.ID = fmt.Sprintf("h%d", p.n)
		h.Tokens = int64(p.intn(100))
		return &frames.AddContextHandle{Header: hdr, FrameID: f, Handle: h}
	case 4:
		return &frames.RecordUsage{Header: hdr, FrameID: f, Cost: budget.Cost{InputTokens: int64(p.intn(200)), Turns: int64(p.intn(2))}, Mint: mint}
	case 5:
		return &frames.SuspendFrame{Header: hdr, FrameID: f, Reason: frames.SuspendApproval, Mint: mint}
	case 6:
		tok := "none"
		if fr := s.Frames[f]; fr != nil && fr.Suspension != nil {
			tok = fr.Suspension.TokenID
		}
		return &frames.ResumeFrame{Header: hdr, FrameID: f, TokenID: tok}
	case 7:
		return &frames.StartToolCall{Header: hdr, FrameID: f, CallID: fmt.Sprintf("c%d", p.intn(4)), Name: "tool"}
	case 9:
		return &frames.RecordPartialOutput{Header: hdr, FrameID: f, Delta: "delta ", Percent: int64(p.intn(101)), Final: p.intn(4) == 0, Start: p.intn(8) == 0}
	case 8:
		ch, rh := p.handle(s, f), p.handle(s, f)
		ch.ID, rh.ID = fmt.Sprintf("hc%d", p.n), fmt.Sprintf("hr%d", p.n)
		ch.Tokens, rh.Tokens = 1, 2
		return &frames.FinishToolCall{Header: hdr, FrameID: f, CallID: fmt.Sprintf("c%d", p.intn(4)), CallHandle: ch, ResultHandle: rh}
	case 10:
		var ops []frames.StateOp
		for range 1 + p.intn(3) {
			op := frames.StateOp{Kind: []string{"set", "push", "delete", "touch", "clear"}[p.intn(5)], Key: fmt.Sprintf("k%d", p.intn(3)),
				Value: []byte("value")[:p.intn(6)], Keep: int64(p.intn(3)), TTL: int64(p.intn(4)) * 7}
			if op.TTL > 0 {
				op.Sliding = p.intn(2) == 0
			}
			if p.intn(2) == 0 {
				op.Frame = f
			}
			if op.Kind == "clear" {
				op = frames.StateOp{Kind: "clear", Frame: op.Frame}
			}
			ops = append(ops, op)
		}
		return &frames.ChangeState{Header: hdr, Ops: ops}
	case 11:
		return &frames.ExpireState{Header: hdr}
	default:
		var removed []string
		if fr := s.Frames[f]; fr != nil {
			for _, h := range fr.Handles {
				if p.intn(2) == 0 {
					removed = append(removed, h.ID)
				}
			}
		}
		return &frames.CompactContext{Header: hdr, FrameID: f, Removed: removed, Strategy: "s"}
	}
}

// FuzzApply folds random event sequences — events Decide made from random
// commands, mixed with arbitrary events it would never make, as a corrupt
// or forged log would hold. Apply never panics; it either accepts an event
// and the invariants hold after it, or refuses it with a named error
// (ErrInconsistentEvent, ErrUnknownEventType) and leaves the state as it
// was.
func FuzzApply(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0x80, 0, 0, 0x80, 1, 0, 3, 5, 0x80, 2, 4, 1})
	f.Add([]byte("\x80\x00\x00\x00\x80\x00\x01\x00\x02\x02\x00\x00\x03\x03\x00\x80\x04\x00\x05\x80\x05\x00"))
	f.Add([]byte{0x00, 0x02, 0x00, 0x05, 0x07, 0x09, 0x0b, 0x11, 0x13, 0x20, 0x40, 0xff, 0xfe})
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := frames.DefaultConfig()
		s := frames.NewState("fuzz", 0)
		p := &program{b: data}
		now := int64(1)
		for step := 0; len(p.b) > 0 && step < 200; step++ {
			now += int64(p.intn(5)) + 1
			var evs []frames.Event
			if p.byte()&0x80 != 0 {
				hdr := frames.Header{RequestID: fmt.Sprintf("q%d", step), RequestHash: []byte{byte(step)}, Now: now}
				var err error
				if evs, err = frames.Decide(cfg, s, p.command(s, hdr)); err != nil {
					continue
				}
			} else {
				evs = []frames.Event{p.event(s, now)}
			}
			for _, e := range evs {
				before := s.Clone()
				err := frames.Apply(s, e)
				if err != nil {
					if !errors.Is(err, frames.ErrInconsistentEvent) && !errors.Is(err, frames.ErrUnknownEventType) {
						t.Fatalf("Apply(%s) failed with an unnamed error: %v", e.EventType(), err)
					}
					if !reflect.DeepEqual(before, s.Clone()) {
						t.Fatalf("Apply(%s) refused the event (%v) but changed the state", e.EventType(), err)
					}
					continue
				}
				if err := frames.CheckInvariants(s); err != nil {
					t.Fatalf("Apply accepted %s %+v, which breaks an invariant: %v", e.EventType(), e, err)
				}
			}
		}
	})
}
