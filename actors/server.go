package actors

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/messages"
)

// Server is a running StateIndex: shard actors that own the scopes, and a
// router that forwards any request to its scope's shard.
type Server struct {
	sys      *actor.ActorSystem
	cfg      Config
	shards   []*actor.PID
	handlers []*handler
	gates    []*gate
	router   *actor.PID
}

// Start spawns the StateIndex on sys over store. The store stays the
// caller's: Stop does not close it. A nil store, or a nil pointer in a
// store interface (what eventstore.Open returns beside its error), is
// refused.
func Start(sys *actor.ActorSystem, store eventstore.Store, cfg Config) (*Server, error) {
	if sys == nil {
		return nil, errors.New("actors: Start needs an actor system, got nil")
	}
	if store == nil {
		return nil, errors.New("actors: Start needs a store, got nil")
	}
	if v := reflect.ValueOf(store); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, fmt.Errorf("actors: Start needs a store, got a nil %T (did opening it fail?)", store)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Server{sys: sys, cfg: cfg}
	perScopes := max(cfg.CacheScopes/cfg.Shards, 1)
	perBytes := max(cfg.CacheBytes/int64(cfg.Shards), 1)
	for i := 0; i < cfg.Shards; i++ {
		h, err := newHandler(cfg, store, perScopes, perBytes)
		if err != nil {
			s.Stop()
			return nil, err
		}
		s.handlers = append(s.handlers, h)
		g := &gate{max: int64(cfg.MaxPending)}
		s.gates = append(s.gates, g)
		props := actor.PropsFromProducer(func() actor.Actor { return &shard{h: h, gate: g} })
		s.shards = append(s.shards, sys.Root.Spawn(props))
	}
	shards, gates := s.shards, s.gates
	s.router = sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case messages.Request:
			if reflect.ValueOf(m).IsNil() {
				answer(c, failure(nil, messages.Errorf(messages.CodeBadRequest, "nil %T", m)), nil, 0)
				return
			}
			i := shardOf(m.ScopeName(), len(shards))
			if !gates[i].enter() {
				c.Respond(overloaded(m, gates[i].max))
				return
			}
			c.RequestWithCustomSender(shards[i], &gated{m}, c.Sender())
		case actor.SystemMessage, actor.AutoReceiveMessage:
		default:
			answer(c, failure(nil, messages.Errorf(messages.CodeBadRequest, "not a StateIndex request: %T", m)), nil, 0)
		}
	}))
	return s, nil
}

// PID is the address any request can be sent to (it forwards to the shard).
func (s *Server) PID() *actor.PID { return s.router }

// Client returns a Client that sends each request straight to its shard.
func (s *Server) Client() *Client {
	shards, gates := s.shards, s.gates
	clock := s.cfg.Clock // the server's clock stamps in-process ids, so test clocks agree
	return &Client{root: s.sys.Root, timeout: s.cfg.RequestTimeout, newID: func() string { return requestIDAt(clock()) },
		route: func(scope string) *actor.PID { return shards[shardOf(scope, len(shards))] },
		admit: func(req messages.Request) (any, error) {
			g := gates[shardOf(req.ScopeName(), len(shards))]
			if !g.enter() {
				return nil, overloaded(req, g.max).Failure()
			}
			return &gated{req}, nil
		}}
}

// Stop waits for the writes in flight to be answered, then stops the
// shards after the requests already in their mailboxes.
func (s *Server) Stop() {
	for _, pid := range s.shards {
		_, _ = s.sys.Root.RequestFuture(pid, &drain{}, time.Minute).Result()
	}
	var futures []*actor.Future
	for _, pid := range append(append([]*actor.PID(nil), s.shards...), s.router) {
		if pid != nil {
			futures = append(futures, s.sys.Root.PoisonFuture(pid))
		}
	}
	for _, f := range futures {
		_ = f.Wait() // a timeout only means the actor was already gone
	}
	for _, h := range s.handlers {
		h.snapshots.Wait() // the store may be closed once Stop returns
	}
}

// shardOf maps a scope to its shard: stable for a given shard count.
func shardOf(scope string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(scope))
	return int(h.Sum32() % uint32(n))
}

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
}

type envelope struct {
	req    messages.Request
	sender *actor.PID
}

// gate bounds a shard's pending work as its senders see it: requests sent
// and not yet taken from the mailbox, plus what the shard holds.
type gate struct {
	max     int64
	mailbox atomic.Int64
	pending atomic.Int64 // held requests + busy scopes, as the shard last saw it
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
// mailbox when it takes it.
type gated struct{ req messages.Request }

func overloaded(req messages.Request, max int64) messages.Reply {
	return failure(req, messages.Errorf(messages.CodeOverloaded,
		"the shard of scope %q holds %d pending requests, its limit: not applied, retry later", req.ScopeName(), max))
}

// committed reports a write's append outcome to its shard.
type committed struct {
	w      *write
	sender *actor.PID
	res    eventstore.AppendResult
	err    error
}

// jobDone reports a job's result to its shard.
type jobDone struct {
	job    *job
	sender *actor.PID
	v      any
}

// drain asks a shard to answer once no write is in flight.
type drain struct{}

func (s *shard) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *gated:
		s.gate.mailbox.Add(-1)
		s.request(c, m.req)
	case messages.Request:
		s.request(c, m)
	case *committed:
		s.reply(c, m.sender, s.h.finish(m.w, m.res, m.err))
		s.resume(c, m.w.e.st.Scope)
	case *jobDone:
		if !s.run(c, m.job.scope, m.sender, m.job.finish(m.v)) {
			s.resume(c, m.job.scope)
		}
	case *drain:
		if len(s.waiting) == 0 {
			c.Respond(&drain{})
		} else if c.Sender() != nil {
			s.drains = append(s.drains, c.Sender())
		}
	case *actor.Started:
		s.waiting = map[string][]envelope{}
	case *actor.Stopping, *actor.Stopped, *actor.Restarting:
	default:
		if c.Sender() != nil {
			c.Respond(failure(nil, messages.Errorf(messages.CodeBadRequest, "not a StateIndex request: %T", m)))
		}
	}
	s.gate.pending.Store(int64(s.held + len(s.waiting)))
}

func (s *shard) request(c actor.Context, m messages.Request) {
	if int64(s.held+len(s.waiting)) >= s.gate.max {
		s.reply(c, c.Sender(), overloaded(m, s.gate.max))
		return
	}
	if q, busy := s.waiting[m.ScopeName()]; busy {
		s.waiting[m.ScopeName()] = append(q, envelope{m, c.Sender()})
		s.held++
		return
	}
	s.process(c, m, c.Sender())
}

// resume runs the requests a scope held once its write or job is done,
// until one of them starts another.
func (s *shard) resume(c actor.Context, scope string) {
	q := s.waiting[scope]
	delete(s.waiting, scope)
	s.held -= len(q)
	for i, env := range q {
		if s.process(c, env.req, env.sender) {
			rest := q[i+1:]
			s.waiting[scope] = append(s.waiting[scope], rest...)
			s.held += len(rest)
			break
		}
	}
	if len(s.waiting) == 0 {
		for _, p := range s.drains {
			c.Send(p, &drain{})
		}
		s.drains = nil
	}
}

// process handles one request; it reports whether a write or job is now in
// flight for the request's scope.
func (s *shard) process(c actor.Context, req messages.Request, sender *actor.PID) bool {
	return s.run(c, req.ScopeName(), sender, s.h.handle(req))
}

// run carries out an outcome: a reply is sent, a write appended, a job
// started; the last two leave the scope busy (true).
func (s *shard) run(c actor.Context, scope string, sender *actor.PID, o outcome) bool {
	self, root := c.Self(), c.ActorSystem().Root
	switch {
	case o.w != nil:
		w := o.w
		done := func(res eventstore.AppendResult, err error) {
			root.Send(self, &committed{w: w, sender: sender, res: res, err: err})
		}
		if a, ok := s.h.store.(eventstore.AsyncAppender); ok {
			a.AppendAsync(context.Background(), w.e.st.Scope, w.expected, w.enc, done)
		} else {
			go func() { done(s.h.runAppend(w)) }()
		}
	case o.job != nil:
		j := o.job
		go func() { root.Send(self, &jobDone{job: j, sender: sender, v: j.run()}) }()
	default:
		s.reply(c, sender, o.reply)
		return false
	}
	if _, busy := s.waiting[scope]; !busy {
		s.waiting[scope] = nil
	}
	return true
}

func (s *shard) reply(c actor.Context, to *actor.PID, reply messages.Reply) {
	if to != nil {
		c.Send(to, reply)
	}
}

// ShardOf is the shard a scope lands on among n (exported for tests and
// tools that place scopes).
func ShardOf(scope string, n int) int { return shardOf(scope, n) }
