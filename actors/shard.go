package actors

import (
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stateindex/stateindex/messages"
)

// shard is the actor around a handler. It decides and applies on its own
// goroutine but never waits for the disk: each write is appended, each cold
// scope loaded and each repeated request's events read on a goroutine of
// their own, so the store can group-commit writes of many scopes and the
// shard goes on serving other scopes meanwhile. A scope with a write or a
// read in flight holds its later requests (reads too) until it is done:
// per-scope order is request order, and nothing is visible before it is
// durable. Pending work is bounded (Config.MaxPending): past it a request
// is answered overloaded at once, not queued.
type shard struct {
	h       *handler
	gate    *gate
	waiting map[string][]envelope // busy scopes → requests held
	held    int                   // requests held in waiting
	drains  []*actor.PID          // Drain requests answered once nothing is in flight
	// backlog is the rest of the requests resume is taking up, which a
	// write's batch may take (batch.go); nil otherwise.
	backlog []envelope
	parked  parking // AwaitFrame's parked waits (await.go)
	// place is the server's share of the scopes (placement.go): a scope
	// it does not own is not kept once idle.
	place *placement
}

type envelope struct {
	req messages.Request
	to  replyTo
}

// replyTo is where a request's reply goes: a PID, and for a remote caller
// (wire set by the gateway) the wire limit its reply is encoded with, on
// the shard's goroutine, so that the reply can travel over remoting.
type replyTo struct {
	pid   *actor.PID
	wire  bool
	limit int
	obs   *reqObs // the request's telemetry (metrics.go), nil when none
}

// outcome is what handling a request comes to: a reply now, a write to
// append (in a batch: batch.go), or a job: store reads to run off the
// shard's goroutine before the request can be answered.
type outcome struct {
	reply messages.Reply
	w     *write
	job   *job
	// req, when set, is the request the outcome answers, if not the one
	// that led to it (a request that waited for its scope's recount).
	req messages.Request
	// park, when set, parks a wait in the shard (await.go): the scope
	// stays free.
	park *parkAwait
}

// job is I/O a request needs: run on a goroutine of its own (it touches
// only the store and its own data), then finish on the shard's goroutine,
// which may come to another outcome. Its scope's later requests wait.
type job struct {
	scope  string
	run    func() any
	finish func(any) outcome
}

func replied(r messages.Reply) outcome { return outcome{reply: r} }

// gate bounds a shard's pending work as its senders see it: requests sent
// and not yet taken from the mailbox, plus what the shard holds.
type gate struct {
	max     int64
	mailbox atomic.Int64
	pending atomic.Int64 // held requests + busy scopes, as the shard last saw it
	parked  atomic.Int64 // parked awaits (not pending: they hold no scope)
}

// enter admits one request into the shard's mailbox, or refuses it.
func (g *gate) enter() bool {
	if g.mailbox.Load()+g.pending.Load() >= g.max {
		return false
	}
	g.mailbox.Add(1)
	return true
}

// gated is a request admitted by the gate: the shard counts it out of the
// mailbox when it takes it. wire marks a remote caller's request (the
// message's sender is that caller): its reply is encoded for the wire,
// within limit bytes (see encodeReply).
type gated struct {
	req   messages.Request
	wire  bool
	limit int
	obs   *reqObs // set where the request was admitted (metrics.go)
}

func overloaded(req messages.Request, max int64) messages.Reply {
	return failure(req, messages.Errorf(messages.CodeOverloaded,
		"the shard of scope %q holds %d pending requests, its limit: not applied, retry later", req.ScopeName(), max))
}

// jobDone reports a job's result to its shard.
type jobDone struct {
	job *job
	req messages.Request
	to  replyTo
	v   any
}

// drain asks a shard to answer once no write is in flight.
type drain struct{}

func (s *shard) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *gated:
		s.gate.mailbox.Add(-1)
		s.request(c, m.req, replyTo{pid: c.Sender(), wire: m.wire, limit: m.limit, obs: m.obs})
	case messages.Request:
		s.request(c, m, replyTo{pid: c.Sender()})
	case *committed:
		s.committed(c, m)
	case *jobDone:
		if !s.run(c, m.job.scope, m.req, m.to, m.job.finish(m.v)) {
			s.resume(c, m.job.scope)
		}
	case *drain:
		if len(s.waiting) == 0 {
			c.Respond(&drain{})
		} else if c.Sender() != nil {
			s.drains = append(s.drains, c.Sender())
		}
	case *awaitTick:
		s.expire(c)
	case *placementChanged:
		s.dropUnowned(c)
	case *listCached:
		c.Respond(s.h.cache.Keys())
	case *actor.Started:
		s.waiting = map[string][]envelope{}
		s.parked.max = s.h.cfg.MaxWaiters
		self, root := c.Self(), c.ActorSystem().Root
		s.h.send = func(m any) { root.Send(self, m) } // a recount's result comes back as a request
	case *actor.Stopping, *actor.Restarting:
		s.unparkAll(c)
	case *actor.Stopped:
	default:
		if c.Sender() != nil {
			c.Respond(failure(nil, messages.Errorf(messages.CodeBadRequest, "not a StateIndex request: %T", m)))
		}
	}
	s.gate.pending.Store(int64(s.held + len(s.waiting)))
	s.gate.parked.Store(int64(s.parked.n))
	s.h.stats.sync(s.h)
}

func (s *shard) request(c actor.Context, m messages.Request, to replyTo) {
	if int64(s.held+len(s.waiting)) >= s.gate.max {
		s.reply(c, to, m, overloaded(m, s.gate.max))
		return
	}
	if q, busy := s.waiting[m.ScopeName()]; busy {
		s.waiting[m.ScopeName()] = append(q, envelope{m, to})
		s.held++
		return
	}
	if !s.process(c, m, to) {
		s.idle(m.ScopeName())
	}
}

// resume runs the requests a scope held once its write or job is done,
// until one of them starts another; a write takes the requests after it
// into its batch (batch.go) as far as they go.
func (s *shard) resume(c actor.Context, scope string) {
	q := s.waiting[scope]
	delete(s.waiting, scope)
	s.held -= len(q)
	for len(q) > 0 {
		env := q[0]
		s.backlog = q[1:]
		busy := s.process(c, env.req, env.to)
		q, s.backlog = s.backlog, nil
		if busy {
			s.waiting[scope] = append(s.waiting[scope], q...)
			s.held += len(q)
			break
		}
	}
	s.idle(scope)
	if len(s.waiting) == 0 {
		for _, p := range s.drains {
			c.Send(p, &drain{})
		}
		s.drains = nil
	}
}

// process handles one request; it reports whether a write or job is now in
// flight for the request's scope.
func (s *shard) process(c actor.Context, req messages.Request, to replyTo) bool {
	return s.run(c, req.ScopeName(), req, to, s.h.handle(req))
}

// run carries out an outcome: a reply is sent, a write appended, a job
// started; the last two leave the scope busy (true).
func (s *shard) run(c actor.Context, scope string, req messages.Request, to replyTo, o outcome) bool {
	self, root := c.Self(), c.ActorSystem().Root
	if o.req != nil {
		req = o.req
	}
	switch {
	case o.w != nil:
		if !s.write(c, req, to, o.w) {
			return false
		}
	case o.job != nil:
		j := o.job
		go func() { root.Send(self, &jobDone{job: j, req: req, to: to, v: j.run()}) }()
	case o.park != nil:
		s.park(c, o.park, to)
		return false
	default:
		s.reply(c, to, req, o.reply)
		return false
	}
	if _, busy := s.waiting[scope]; !busy {
		s.waiting[scope] = nil
	}
	return true
}

// reply sends req's reply, encoded for the wire when to is a remote caller.
func (s *shard) reply(c actor.Context, to replyTo, req messages.Request, reply messages.Reply) {
	to.send(c, req, reply)
}
