package actors

import (
	"container/heap"
	"context"
	"errors"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// Waiting on a frame (messages.AwaitFrame). The core decides what a wait
// learns (frames.State.AwaitOutcome); this file parks the waits that must
// wait, in their shard:
//
//   - a parked wait is a small struct in a map scope → frame → waiters,
//     not a goroutine, and holds no place in its scope's queue: the scope
//     goes on serving requests (parking is not a write or a job);
//   - deadlines sit in one min-heap per shard with one timer
//     (time.AfterFunc), re-armed to the earliest deadline, that sends the
//     shard an awaitTick;
//   - after the shard applies a committed write of a scope with waiters,
//     it re-checks the waits whose chain head the write ended (a
//     continuation moves the head in the same append); a write that ends
//     no frame costs one scan of its events;
//   - a scope evicted from the cache keeps its waiters (they live here,
//     and every write of the scope passes through this shard);
//   - a destroyed scope answers its waiters frame_not_found, as a wait
//     sent after the destroy is answered;
//   - a shard that stops (Server.Stop) or restarts answers its waiters
//     unavailable: nothing is lost that resending the await would not give
//     back, since the answer is a function of the durable log.
//
// Deadlines are measured with the monotonic clock (time.Now), not
// Config.Clock, which tests may freeze. Parked waits are bounded per shard
// (Config.MaxWaiters; past it an await is answered overloaded) and are not
// counted in the gate's MaxPending, so that waiting never blocks writes.

// parking holds a shard's parked waits.
type parking struct {
	scopes map[string]*scopeWaits
	dl     deadlines
	n      int // waits parked
	max    int
	alarm  alarm // for the earliest deadline
}

// scopeWaits are a scope's parked waits by the frame asked for, and the
// scope's version as last seen.
type scopeWaits struct {
	frames  map[string]*awaitGroup
	version int64
}

// awaitGroup is the waits of one frame: one outcome, answered together.
type awaitGroup struct {
	scope string
	frame string              // asked for
	o     frames.AwaitOutcome // as of the last write that could change it
	ws    []*waiter
	live  int
}

// waiter is one parked wait.
type waiter struct {
	req      *messages.AwaitFrame
	to       replyTo
	g        *awaitGroup
	deadline time.Time
	idx      int // in the heap; -1 once answered
}

// parkAwait is a read's outcome that asks the shard to park the wait.
type parkAwait struct {
	req  *messages.AwaitFrame
	wait time.Duration
	o    frames.AwaitOutcome
	ver  int64
}

// awaitTick tells a shard that its earliest parked deadline has come.
type awaitTick struct{}

// deadlines is a min-heap of waiters by deadline.
type deadlines []*waiter

func (d deadlines) Len() int           { return len(d) }
func (d deadlines) Less(i, j int) bool { return d[i].deadline.Before(d[j].deadline) }
func (d deadlines) Swap(i, j int) {
	d[i], d[j] = d[j], d[i]
	d[i].idx, d[j].idx = i, j
}
func (d *deadlines) Push(x any) {
	w := x.(*waiter)
	w.idx = len(*d)
	*d = append(*d, w)
}
func (d *deadlines) Pop() any {
	old := *d
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*d = old[:len(old)-1]
	w.idx = -1
	return w
}

// await is AwaitFrame's entry (dispatch.go): the core's outcome; an
// ended head's record read from the log when the state no longer holds it;
// a live head parked, unless the wait is 0.
func (h *handler) await(st *frames.State, r *messages.AwaitFrame) outcome {
	wait, err := frames.AwaitWait(int64(r.Wait), 0)
	if err != nil {
		return replied(failure(r, toWire(err)))
	}
	o, err := st.AwaitOutcome(h.cfg.Frames, r.FrameID, nil)
	switch {
	case err != nil:
		return replied(failure(r, toWire(err)))
	case o.Terminal && o.Record == nil:
		return outcome{job: h.awaitRecordJob(r, st.Version, o)}
	case o.Terminal || wait == 0:
		return replied(awaitReply(r, st.Version, o))
	}
	return outcome{park: &parkAwait{req: r, wait: time.Duration(wait), o: o, ver: st.Version}}
}

// awaitRecordJob reads an ended head's final record from its frame.popped
// (an earlier build's pop carries none: the frame is rebuilt from the
// log), then answers. A head whose records retention removed is answered
// with its status and its chain link's summary.
func (h *handler) awaitRecordJob(r *messages.AwaitFrame, version int64, o frames.AwaitOutcome) *job {
	scope := r.Scope
	type read struct {
		rec *frames.FrameRecord
		err error
	}
	return &job{scope: scope,
		run: func() any {
			ctx := context.Background()
			sp, ok, err := h.store.Lookup(ctx, scope, eventstore.FrameKey(o.Head))
			if err != nil || !ok {
				return read{err: err}
			}
			rec, ok, err := eventstore.ReadRecord(ctx, h.store, scope, sp.Last)
			if err != nil || !ok {
				return read{err: err}
			}
			ev, err := eventstore.DecodeFrameEvent(rec)
			if err != nil {
				return read{err: err}
			}
			if p, ok := ev.(*frames.FramePopped); ok && p.Frame == o.Head && p.Final != nil {
				return read{rec: p.Final}
			}
			f, err := eventstore.LoadFinishedFrame(ctx, h.store, scope, o.Head)
			if err != nil {
				if errors.Is(err, frames.ErrFrameNotFound) {
					err = nil // its history is gone: its status stands
				}
				return read{err: err}
			}
			fr := frames.RecordOf(f)
			return read{rec: &fr}
		},
		finish: func(v any) outcome {
			rd := v.(read)
			if rd.err != nil {
				return replied(failure(r, toWire(rd.err)))
			}
			o.SetRecord(rd.rec)
			return replied(awaitReply(r, version, o))
		}}
}

// awaitReply answers a wait with an outcome: TimedOut while the head is
// live.
func awaitReply(r *messages.AwaitFrame, version int64, o frames.AwaitOutcome) *messages.AwaitFrameReply {
	out := &messages.AwaitFrameReply{Result: messages.Result{Version: version}, FrameID: r.FrameID, Head: o.Head,
		Status: o.Status, Terminal: o.Terminal, TimedOut: !o.Terminal, Summary: o.Summary}
	if rec := o.Record; rec != nil {
		out.Results = append([]frames.ResultRef(nil), rec.Results...)
		out.Cost, out.UsedTokens, out.FinishedAt = rec.Cost, rec.Budget.Used, rec.CompletedAt
	}
	return out
}

func awaitOverloaded(r messages.Request, max int) messages.Reply {
	return failure(r, messages.Errorf(messages.CodeOverloaded,
		"the shard of scope %q holds %d parked awaits, its limit (Config.MaxWaiters): retry later", r.ScopeName(), max))
}

// park parks a wait in the shard (the request's outcome was p).
func (s *shard) park(c actor.Context, p *parkAwait, to replyTo) {
	pk := &s.parked
	if pk.n >= pk.max {
		s.reply(c, to, p.req, awaitOverloaded(p.req, pk.max))
		return
	}
	if pk.scopes == nil {
		pk.scopes = map[string]*scopeWaits{}
	}
	scope := p.req.Scope
	sw := pk.scopes[scope]
	if sw == nil {
		sw = &scopeWaits{frames: map[string]*awaitGroup{}}
		pk.scopes[scope] = sw
	}
	sw.version = p.ver
	g := sw.frames[p.req.FrameID]
	if g == nil {
		g = &awaitGroup{scope: scope, frame: p.req.FrameID, o: p.o}
		sw.frames[p.req.FrameID] = g
	}
	w := &waiter{req: p.req, to: to, g: g, deadline: time.Now().Add(p.wait)}
	g.ws = append(g.ws, w)
	g.live++
	pk.n++
	heap.Push(&pk.dl, w)
	s.arm(c)
}

// arm sets the shard's timer to its earliest deadline, unless it fires
// earlier already (a tick that finds nothing due only re-arms it).
func (s *shard) arm(c actor.Context) {
	pk := &s.parked
	if len(pk.dl) == 0 {
		pk.alarm.stop()
		return
	}
	pk.alarm.set(pk.dl[0].deadline, c.ActorSystem().Root, c.Self(), &awaitTick{})
}

// expire answers the waits whose deadline has passed (TimedOut, with the
// outcome as last seen), then re-arms.
func (s *shard) expire(c actor.Context) {
	pk := &s.parked
	pk.alarm.fired()
	now := time.Now()
	for len(pk.dl) > 0 && !pk.dl[0].deadline.After(now) {
		w := heap.Pop(&pk.dl).(*waiter)
		g := w.g
		s.unpark(w)
		ver := int64(0)
		if sw := pk.scopes[g.scope]; sw != nil {
			ver = sw.version
		}
		s.reply(c, w.to, w.req, awaitReply(w.req, ver, g.o))
		s.dropIfEmpty(g)
	}
	s.arm(c)
}

// unpark removes an answered waiter from its group (the heap already
// popped it, or removes it here).
func (s *shard) unpark(w *waiter) {
	if w.idx >= 0 {
		heap.Remove(&s.parked.dl, w.idx)
	}
	w.idx = -1
	g := w.g
	g.live--
	s.parked.n--
	// Compact once half the group's list is answered: a group whose waits
	// time out one by one stays linear in its live waits.
	if g.live > 0 && g.live <= len(g.ws)/2 {
		live := g.ws[:0]
		for _, x := range g.ws {
			if x.idx >= 0 {
				live = append(live, x)
			}
		}
		clear(g.ws[len(live):])
		g.ws = live
	}
}

// dropIfEmpty forgets a group with no live waits, and its scope's entry
// with no groups.
func (s *shard) dropIfEmpty(g *awaitGroup) {
	if g.live > 0 {
		return
	}
	sw := s.parked.scopes[g.scope]
	if sw == nil {
		return
	}
	if sw.frames[g.frame] == g {
		delete(sw.frames, g.frame)
	}
	if len(sw.frames) == 0 {
		delete(s.parked.scopes, g.scope)
	}
}

// answerGroup answers every live wait of g with reply (shared: replies
// are immutable once sent); the caller forgets g.
func (s *shard) answerGroup(c actor.Context, g *awaitGroup, reply messages.Reply) {
	for _, w := range s.takeGroup(g) {
		s.reply(c, w.to, w.req, reply)
	}
}

// takeGroup unparks g's live waits and returns them.
func (s *shard) takeGroup(g *awaitGroup) []*waiter {
	var out []*waiter
	for _, w := range g.ws {
		if w.idx < 0 {
			continue
		}
		heap.Remove(&s.parked.dl, w.idx)
		w.idx = -1
		s.parked.n--
		out = append(out, w)
	}
	g.ws, g.live = nil, 0
	return out
}

// awaitWrite re-checks, after a committed write of its scope was applied
// to st, the waits whose chain head the write ended (or all of them, if
// it destroyed the scope).
func (s *shard) awaitWrite(c actor.Context, st *frames.State, evs []frames.Event) {
	sw := s.parked.scopes[st.Scope]
	if sw == nil {
		return
	}
	sw.version = st.Version
	ended, destroyed := frames.AwaitEnded(evs)
	if len(ended) == 0 && !destroyed {
		return
	}
	for id, g := range sw.frames {
		if !destroyed && !contains(ended, g.o.Head) {
			continue
		}
		o, err := st.AwaitOutcome(s.h.cfg.Frames, id, evs)
		switch {
		case err != nil:
			s.answerGroup(c, g, failure(g.ws[0].req, toWire(err)))
		case o.Terminal && o.Record == nil:
			// Not among the events (never so for a pop of this build):
			// each wait is handled again, and reads the record.
			for _, w := range s.takeGroup(g) {
				s.request(c, w.req, w.to)
			}
		case o.Terminal:
			s.answerGroup(c, g, awaitReply(g.ws[0].req, st.Version, o))
		default:
			g.o = o // the head moved on to a continuation
			continue
		}
		delete(sw.frames, id)
	}
	if len(sw.frames) == 0 {
		delete(s.parked.scopes, st.Scope)
	}
	s.arm(c)
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// unparkAll answers every parked wait unavailable (the shard stops or
// restarts): a resent await is answered from the log as this one would
// have been.
func (s *shard) unparkAll(c actor.Context) {
	pk := &s.parked
	pk.alarm.stop()
	for _, sw := range pk.scopes {
		for _, g := range sw.frames {
			if len(g.ws) > 0 {
				s.answerGroup(c, g, failure(g.ws[0].req, messages.Errorf(messages.CodeUnavailable,
					"the StateIndex is stopping: the wait on frame %q ended unanswered; resend it", g.ws[0].req.FrameID)))
			}
		}
	}
	pk.scopes, pk.dl, pk.n = nil, nil, 0
}

// ParkedAwaits is how many AwaitFrame requests the server's shards hold
// parked, as each shard last saw it.
func (s *Server) ParkedAwaits() int {
	n := int64(0)
	for _, g := range s.gates {
		n += g.parked.Load()
	}
	return int(n)
}
