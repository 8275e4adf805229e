package frames_test

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"testing"

	"pgregory.net/rapid"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/frames"
)

// genCommand draws a command that is often valid and sometimes not: ids come
// from the state's frames (sorted, so draws are reproducible) or are fresh.
func genCommand(t *rapid.T, s *frames.State, hdr frames.Header, n int) frames.Command {
	ids := make([]string, 0, len(s.Frames))
	for id := range s.Frames {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	frame := func() string {
		if len(ids) == 0 || rapid.IntRange(0, 9).Draw(t, "fresh") == 0 {
			return fmt.Sprintf("f%d", n)
		}
		return rapid.SampledFrom(ids).Draw(t, "frame")
	}
	amount := func(label string) int64 { return rapid.Int64Range(0, 300).Draw(t, label) }
	mint := frames.Mint{TokenID: fmt.Sprintf("t%d", n), ExpiresAt: hdr.Now + rapid.Int64Range(1, 100).Draw(t, "ttl")}
	handle := func(k string) frames.ContextHandle {
		return frames.ContextHandle{ID: fmt.Sprintf("h%d%s", n, k), Kind: "text", Priority: compaction.Priority(rapid.IntRange(1, 5).Draw(t, "prio")),
			Content: rapid.SampledFrom([]string{"c", "shared content", "other content"}).Draw(t, "content"), Tokens: amount("tokens")}
	}
	rids := make([]string, 0, len(s.Reservations))
	for id := range s.Reservations {
		rids = append(rids, id)
	}
	sort.Strings(rids)
	reservation := func() string {
		if len(rids) == 0 || rapid.IntRange(0, 9).Draw(t, "freshrv") == 0 {
			return fmt.Sprintf("rv%d", n)
		}
		return rapid.SampledFrom(rids).Draw(t, "reservation")
	}
	// claims of a reservation here, or of scope "up" for this one (a
	// root bound to it), sometimes tampered with.
	claims := func() *frames.ReservationClaims {
		var cl frames.ReservationClaims
		if r := s.Reservations[reservation()]; r != nil && rapid.Bool().Draw(t, "ownclaims") {
			cl = frames.ClaimsOf(s.Scope, r)
		} else {
			cl = frames.ReservationClaims{Scope: "up", Frame: "u", ID: fmt.Sprintf("up%d", n), For: s.Scope,
				Amount: amount("upamount"), ExpiresAt: hdr.Now + rapid.Int64Range(-10, 100).Draw(t, "upttl")}
			cl.Ceiling = cl.Amount
		}
		if rapid.IntRange(0, 9).Draw(t, "tamper") == 0 {
			cl.For = "elsewhere"
		}
		return &cl
	}
	switch rapid.IntRange(0, 20).Draw(t, "op") {
	case 0, 1:
		parent := ""
		if rapid.Bool().Draw(t, "child") {
			parent = frame()
		}
		var cl *frames.ReservationClaims
		if rapid.IntRange(0, 3).Draw(t, "withreservation") == 0 {
			cl = claims()
		}
		return &frames.PushFrame{Header: hdr, FrameID: fmt.Sprintf("f%d", n), ParentID: parent, Goal: "g",
			Budget: budget.TokenBudget{Total: amount("total"), MaxSubframeDepth: rapid.Int64Range(0, 4).Draw(t, "maxdepth")},
			Limits: budget.Limits{Tokens: rapid.Int64Range(0, 2000).Draw(t, "toklimit"), Spawns: rapid.Int64Range(0, 3).Draw(t, "spawnlimit"),
				SpendMicros: rapid.SampledFrom([]int64{0, 0, 50, 300}).Draw(t, "spendlimit")},
			Reservation: cl, ReservationToken: "tk"}
	case 2:
		st := rapid.SampledFrom([]frames.Status{frames.StatusCompleted, frames.StatusFailed, frames.StatusCancelled, frames.StatusActive}).Draw(t, "status")
		return &frames.PopFrame{Header: hdr, FrameID: frame(), Status: st, Cascade: rapid.Bool().Draw(t, "cascade"), Mint: mint}
	case 3:
		return &frames.AddContextHandle{Header: hdr, FrameID: frame(), Handle: handle("")}
	case 4:
		return &frames.RecordUsage{Header: hdr, FrameID: frame(), Cost: budget.Cost{InputTokens: amount("in"), OutputTokens: amount("out"),
			Turns: rapid.Int64Range(0, 2).Draw(t, "turns"), SpendMicros: rapid.SampledFrom([]int64{0, 0, 5, 40, 200}).Draw(t, "spend")}, Mint: mint}
	case 5:
		return &frames.UpdateFrame{Header: hdr, FrameID: frame(), ReserveDelta: rapid.Int64Range(-100, 100).Draw(t, "reserve")}
	case 6:
		return &frames.SuspendFrame{Header: hdr, FrameID: frame(), Reason: frames.SuspendApproval, Mint: mint}
	case 7:
		f := frame()
		tok := "none"
		if fr := s.Frames[f]; fr != nil && fr.Suspension != nil && rapid.IntRange(0, 4).Draw(t, "goodtoken") > 0 {
			tok = fr.Suspension.TokenID
		}
		return &frames.ResumeFrame{Header: hdr, FrameID: f, TokenID: tok}
	case 8:
		return &frames.StartToolCall{Header: hdr, FrameID: frame(), CallID: fmt.Sprintf("call%d", rapid.IntRange(0, n).Draw(t, "call")), Name: "tool"}
	case 9:
		return &frames.FinishToolCall{Header: hdr, FrameID: frame(), CallID: fmt.Sprintf("call%d", rapid.IntRange(0, n).Draw(t, "call")),
			CallHandle: handle("c"), ResultHandle: handle("r")}
	case 10:
		f := frame()
		var removed []string
		if fr := s.Frames[f]; fr != nil {
			for _, h := range fr.Handles {
				if rapid.Bool().Draw(t, "remove") {
					removed = append(removed, h.ID)
				}
			}
		}
		var sum *frames.ContextHandle
		if rapid.Bool().Draw(t, "summary") {
			h := handle("s")
			h.Covers = removed
			sum = &h
		}
		return &frames.CompactContext{Header: hdr, FrameID: f, Removed: removed, Summary: sum, Strategy: "test"}
	case 12, 13:
		rid := fmt.Sprintf("rv%d", n)
		if rapid.IntRange(0, 9).Draw(t, "reuse") == 0 {
			rid = reservation()
		}
		est, lease := rapid.Int64Range(1, 300).Draw(t, "estimate"), rapid.Int64Range(1, 200).Draw(t, "lease")
		if rapid.IntRange(0, 9).Draw(t, "hostile") == 0 {
			est = rapid.SampledFrom([]int64{-1, 0, math.MaxInt64}).Draw(t, "badestimate")
			lease = rapid.SampledFrom([]int64{-5, 0, frames.MaxReservationAge + 1}).Draw(t, "badlease")
		}
		return &frames.ReserveSpend{Header: hdr, FrameID: frame(), For: rapid.SampledFrom([]string{"", "", "prop", "other"}).Draw(t, "for"),
			Estimate: est, HasEstimate: rapid.IntRange(0, 4).Draw(t, "hasestimate") > 0,
			Partial: rapid.Bool().Draw(t, "partial"), ReservationID: rid, ExpiresAt: hdr.Now + lease}
	case 14:
		if rapid.Bool().Draw(t, "renew") {
			return &frames.RenewReservation{Header: hdr, ReservationID: reservation(), ExpiresAt: hdr.Now + rapid.Int64Range(-5, 300).Draw(t, "lease")}
		}
		return &frames.ReleaseReservation{Header: hdr, ReservationID: reservation()}
	case 15:
		cl := claims()
		cl.Scope, cl.For = s.Scope, "other"
		if r := s.Reservations[cl.ID]; r != nil {
			cl.For, cl.Frame = r.For, r.Frame
		}
		spent := rapid.Int64Range(-1, 400).Draw(t, "spent")
		return &frames.SettleSpend{Header: hdr, Claims: *cl, From: cl.For, FrameID: fmt.Sprintf("w%d", rapid.IntRange(0, 2).Draw(t, "work")),
			Spent: spent, Previous: rapid.Int64Range(0, max(spent, 0)).Draw(t, "previous"), Final: rapid.Bool().Draw(t, "final"), Mint: mint}
	case 16:
		id := reservation()
		var through int64
		if b := s.Bindings[id]; b != nil {
			through = rapid.Int64Range(0, b.Reported).Draw(t, "through")
		}
		return &frames.AckSettlement{Header: hdr, ReservationID: id, Through: through, Final: rapid.Bool().Draw(t, "ackfinal")}
	case 17:
		// Scope state at the scope's level or a frame's (frames pop,
		// cascade and are destroyed around it), sometimes conditional,
		// sometimes with a short TTL that ExpireState or a later change
		// removes.
		ops := make([]frames.StateOp, rapid.IntRange(1, 3).Draw(t, "nstate"))
		for i := range ops {
			op := frames.StateOp{Kind: rapid.SampledFrom([]string{frames.StateSet, frames.StatePush, frames.StateDelete, frames.StateTouch, frames.StateClear}).Draw(t, "statekind"),
				Key: rapid.SampledFrom([]string{"k1", "k2", "l/1"}).Draw(t, "statekey")}
			if rapid.Bool().Draw(t, "framelevel") {
				op.Frame = frame()
			}
			switch op.Kind {
			case frames.StateClear:
				op.Key, op.Prefix = "", rapid.SampledFrom([]string{"", "l/"}).Draw(t, "stateprefix")
			case frames.StateSet, frames.StatePush:
				op.Value = []byte(rapid.SampledFrom([]string{"", "v", "a longer value"}).Draw(t, "statevalue"))
			}
			if op.Kind == frames.StatePush {
				op.Keep = rapid.Int64Range(0, 3).Draw(t, "statekeep")
			}
			if op.Kind != frames.StateClear && rapid.IntRange(0, 3).Draw(t, "stateconditional") == 0 {
				v := rapid.Int64Range(0, s.Version+1).Draw(t, "stateversion")
				op.IfVersion = &v
			}
			if op.Kind != frames.StateClear && op.Kind != frames.StateDelete && rapid.IntRange(0, 3).Draw(t, "statettl") == 0 {
				op.TTL, op.Sliding = rapid.Int64Range(1, 60).Draw(t, "statettlns"), rapid.Bool().Draw(t, "statesliding")
			}
			ops[i] = op
		}
		return &frames.ChangeState{Header: hdr, Ops: ops}
	case 18:
		return &frames.ExpireState{Header: hdr}
	case 19:
		return &frames.RecordPartialOutput{Header: hdr, FrameID: frame(), Delta: rapid.SampledFrom([]string{"", "chunk ", "日本 ", "\xff"}).Draw(t, "delta"),
			Percent: rapid.Int64Range(-1, 101).Draw(t, "percent"), Final: rapid.IntRange(0, 4).Draw(t, "final") == 0, Start: rapid.IntRange(0, 7).Draw(t, "start") == 0}
	default:
		return &frames.AddResult{Header: hdr, FrameID: frame(), Result: frames.ResultRef{ID: fmt.Sprintf("r%d", n), Kind: "file", Ref: "/tmp/x"}}
	}
}

// Random command sequences (the spend ledger's operations, scope state
// and partial output among them):
// every accepted command's events apply cleanly,
// every invariant holds after every event, rejected commands change nothing,
// and replaying the log yields the same state.
func TestPropertyDecideApplyReplay(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := frames.DefaultConfig()
		cfg.ContentRefBytes = 8 // the longer contents are stored by reference, shared
		s := frames.NewState("prop", 0)
		var log []frames.Event
		steps := rapid.IntRange(1, 80).Draw(t, "steps")
		now := int64(1)
		for i := 0; i < steps; i++ {
			now += rapid.Int64Range(1, 30).Draw(t, "tick")
			hdr := frames.Header{RequestID: fmt.Sprintf("q%d", i), RequestHash: []byte{byte(i)}, Now: now}
			cmd := genCommand(t, s, hdr, i)
			before := s.Clone()
			evs, err := frames.Decide(cfg, s, cmd)
			if !reflect.DeepEqual(before, s.Clone()) {
				t.Fatalf("Decide(%T) changed the state", cmd)
			}
			if err != nil {
				continue
			}
			for _, e := range evs {
				if err := frames.Apply(s, e); err != nil {
					t.Fatalf("decided %s does not apply: %v", e.EventType(), err)
				}
				if err := frames.CheckInvariants(s); err != nil {
					t.Fatalf("after %s: %v", e.EventType(), err)
				}
			}
			log = append(log, evs...)
		}
		r := frames.NewState("prop", 0)
		for _, e := range log {
			if err := frames.Apply(r, e); err != nil {
				t.Fatalf("replay: %v", err)
			}
		}
		if !reflect.DeepEqual(r.Clone(), s.Clone()) {
			t.Fatalf("replay differs from live state")
		}
	})
}
