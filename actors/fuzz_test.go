package actors

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stateindex/stateindex/actors/wire"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

var fuzzKey = []byte("fuzzing key, thirty-two bytes!!!")

// FuzzSuspensionToken: the token parser never panics, checks the
// signature before it reads the payload (so only tokens signed with the key
// pass), and what it accepts signs back into a token with the same claims.
func FuzzSuspensionToken(f *testing.F) {
	good := signToken(fuzzKey, tokenClaims{Scope: "agent-1", FrameID: "f1", TokenID: "t1", ExpiresAt: 1 << 60})
	f.Add(good)
	f.Add(good[:len(good)-5])
	f.Add(strings.Replace(good, ".", "..", 1))
	f.Add(signToken([]byte("another server's key, 32 bytes!!"), tokenClaims{Scope: "agent-1", FrameID: "f1", TokenID: "t1"}))
	f.Add("")
	f.Add(".")
	f.Add("AAAA.AAAA")
	f.Add(strings.Repeat("A", 2000))
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := parseToken(fuzzKey, tok)
		if err != nil {
			return
		}
		again, err := parseToken(fuzzKey, signToken(fuzzKey, c))
		if err != nil || again != c {
			t.Fatalf("accepted claims %+v do not sign back: %+v, %v", c, again, err)
		}
		if _, err := parseToken([]byte("another server's key, 32 bytes!!"), tok); err == nil {
			t.Fatalf("a token passes under two keys")
		}
	})
}

// FuzzReservationToken: the reservation token parser never panics, checks
// the signature before it reads the payload, and what it accepts (the
// ancestors included) signs back into a token with the same claims.
func FuzzReservationToken(f *testing.F) {
	good := signReservation(fuzzKey, frames.ReservationClaims{Scope: "planner", Frame: "f2", ID: "r1", For: "researcher",
		Path: []string{"f0", "f1"}, Amount: 400, Ceiling: 400, ExpiresAt: 1 << 60})
	f.Add(good)
	f.Add(good[:len(good)-5])
	f.Add(strings.Replace(good, ".", "..", 1))
	f.Add(signReservation([]byte("another server's key, 32 bytes!!"), frames.ReservationClaims{Scope: "planner", ID: "r1"}))
	f.Add(signToken(fuzzKey, tokenClaims{Scope: "agent-1", FrameID: "f1", TokenID: "t1"})) // a suspension token
	f.Add("")
	f.Add(strings.Repeat("A", 9000))
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := parseReservation(fuzzKey, tok)
		if err != nil {
			return
		}
		again, err := parseReservation(fuzzKey, signReservation(fuzzKey, c))
		if err != nil || !reflect.DeepEqual(again, c) {
			t.Fatalf("accepted claims %+v do not sign back: %+v, %v", c, again, err)
		}
		if _, err := parseReservation([]byte("another server's key, 32 bytes!!"), tok); err == nil {
			t.Fatalf("a token passes under two keys")
		}
	})
}

// fuzzServer is a handler over a memory store, driven synchronously, with
// a scope "s" holding a root frame id1, a child id2 with a handle and a
// tool call in flight, and a suspended root id4 whose token is tok.
type fuzzServer struct {
	h   *handler
	tok string
}

func newFuzzServer(tb testing.TB) *fuzzServer {
	cfg := DefaultConfig()
	cfg.TokenKey = fuzzKey
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg.Clock = func() time.Time { return now }
	n := 0
	cfg.NewID = func() string { n++; return fmt.Sprintf("id%d", n) }
	cfg, err := cfg.withDefaults()
	if err != nil {
		tb.Fatal(err)
	}
	h, err := newHandler(cfg, eventstore.NewMemory(), 64, 1<<30)
	if err != nil {
		tb.Fatal(err)
	}
	s := &fuzzServer{h: h}
	m := func(id string) messages.Header { return messages.Header{Scope: "s", RequestID: id} }
	for _, req := range []messages.Request{
		&messages.PushFrame{Header: m("r1"), Goal: "root", Budget: budget.TokenBudget{Total: 10000}, Limits: budget.Limits{Turns: 3}},
		&messages.PushFrame{Header: m("r2"), ParentID: "id1", Goal: "child", Budget: budget.TokenBudget{Total: 1000}},
		&messages.AddContextHandle{Header: m("r3"), FrameID: "id2", Priority: compaction.High, Content: "some context"},
		&messages.StartToolCall{Header: m("r4"), FrameID: "id2", CallID: "call1", Name: "search"},
		&messages.PushFrame{Header: m("r5"), Goal: "other root", Budget: budget.TokenBudget{Total: 100}},
		&messages.SuspendFrame{Header: m("r6"), FrameID: "id4", Reason: frames.SuspendApproval},
	} {
		r := s.do(req)
		if r.Failure() != nil {
			tb.Fatalf("setup %T: %v", req, r.Failure())
		}
		if st, ok := r.(*messages.SuspensionToken); ok {
			s.tok = st.Token
		}
	}
	return s
}

// do answers a request as the shard would: decide, append, apply, reply.
func (s *fuzzServer) do(req messages.Request) messages.Reply {
	o := s.h.handle(req)
	for o.job != nil { // run jobs inline: the fuzz server has no shard
		o = o.job.finish(o.job.run())
	}
	if o.w != nil {
		return s.h.commitNow(req, o.w)
	}
	return o.reply
}

func (s *fuzzServer) version(scope string) int64 {
	info, err := s.h.store.Stream(context.Background(), scope)
	if err != nil {
		return -1
	}
	return info.Version
}

// FuzzWireRequest: bytes off the wire — an envelope's type name and
// payload — are decoded as the remoting codec does (actors/wire) and, when
// they decode, answered by the StateIndex. Nothing panics; every request
// gets a reply of its own type; no reply is an internal error (that would
// be a bug: hostile input must get a specific error); an accepted write
// leaves the scope's invariants intact, and the same request again returns
// the same reply and writes nothing.
func FuzzWireRequest(f *testing.F) {
	seed := newFuzzServer(f)
	m := func(id string) messages.Header { return messages.Header{Scope: "s", RequestID: id} }
	goal := "new goal"
	for _, req := range []any{
		&messages.PushFrame{Header: m("q1"), ParentID: "id1", Goal: "g", Budget: budget.TokenBudget{Total: 10}},
		&messages.PopFrame{Header: m("q2"), FrameID: "id2", Status: frames.StatusCompleted, Cascade: true},
		&messages.UpdateFrame{Header: m("q3"), FrameID: "id1", Goal: &goal, ReserveDelta: 5},
		&messages.AddContextHandle{Header: m("q4"), FrameID: "id1", Priority: compaction.Low, Content: "x"},
		&messages.AddResult{Header: m("q5"), FrameID: "id2", Kind: "file", Ref: "/x"},
		&messages.RecordUsage{Header: m("q6"), FrameID: "id1", Cost: budget.Cost{Turns: 5}},
		&messages.StartToolCall{Header: m("q7"), FrameID: "id1", Name: "t"},
		&messages.FinishToolCall{Header: m("q8"), FrameID: "id2", CallID: "call1", Output: "out"},
		&messages.SuspendFrame{Header: m("q9"), FrameID: "id2", Reason: frames.SuspendError},
		&messages.ResumeFrame{Header: m("q10"), Token: seed.tok},
		&messages.CompactContext{Header: m("q11"), FrameID: "id2", Strategy: messages.Strategy{Kind: messages.StrategySummarizeOldest}},
		&messages.ResumeActor{Header: messages.Header{Scope: "s", RequestID: "q12"}},
		&messages.AssembleContextPack{Header: messages.Header{Scope: "s"}, FrameID: "id2", BudgetTokens: 600, IncludeHandles: []string{"id3"}},
		&messages.GetFrame{Header: messages.Header{Scope: "s"}, FrameID: "id2", WithHandles: true},
		&messages.GetStack{Header: messages.Header{Scope: "s"}},
	} {
		msg, err := wire.Encode(req, 0)
		if err != nil {
			f.Fatal(err)
		}
		env, _ := msg.Serialize()
		f.Add(msg.Type, env.(*wire.Envelope).Payload)
	}
	f.Add("PushFrame", []byte{0x80})
	f.Add("NoSuchThing", []byte{0xc1})
	f.Fuzz(func(t *testing.T, name string, payload []byte) {
		msg := wire.Decode(&wire.Envelope{Type: name, Payload: payload})
		if msg.Err != nil {
			if msg.Err.Code != messages.CodeBadRequest {
				t.Fatalf("an undecodable envelope is a bad request, got %v", msg.Err)
			}
			return
		}
		req, ok := msg.Value.(messages.Request)
		if !ok {
			return // a reply type: the server never takes one as a request
		}
		s := newFuzzServer(t)
		before := s.version(req.ScopeName())
		reply := s.do(req)
		if reply == nil || reflect.TypeOf(reply) != reflect.TypeOf(messages.ReplyFor(req)) {
			t.Fatalf("%T answered with %T", req, reply)
		}
		if e := reply.Failure(); e != nil {
			if e.Code == messages.CodeInternal {
				t.Fatalf("%s %+v: internal error: %v", name, req, e)
			}
			if after := s.version(req.ScopeName()); after != before {
				t.Fatalf("%s failed (%v) but the scope moved from %d to %d", name, e, before, after)
			}
			return
		}
		if e, ok := s.h.cache.Peek(req.ScopeName()); ok {
			if err := frames.CheckInvariants(e.st); err != nil {
				t.Fatalf("%s %+v broke an invariant: %v", name, req, err)
			}
		}
		mr, mutating := req.(messages.MutatingRequest)
		if !mutating {
			return
		}
		after := s.version(req.ScopeName())
		again := s.do(req)
		if a, ok := reply.(*messages.ActorResumeState); ok {
			// A resent ResumeActor reports the scope as it is now (nothing
			// was appended); only its own timing differs.
			a.Recovery.RecoveryMicros, again.(*messages.ActorResumeState).Recovery.RecoveryMicros = 0, 0
		}
		if !reflect.DeepEqual(reply, again) {
			t.Fatalf("%s %s sent twice: %+v then %+v", name, mr.Mut().RequestID, reply, again)
		}
		if v := s.version(req.ScopeName()); v != after {
			t.Fatalf("%s sent twice wrote again (%d -> %d)", name, after, v)
		}
	})
}
