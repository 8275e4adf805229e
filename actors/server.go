package actors

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"reflect"
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
		props := actor.PropsFromProducer(func() actor.Actor { return &shard{h: h} })
		s.shards = append(s.shards, sys.Root.Spawn(props))
	}
	shards := s.shards
	s.router = sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case messages.Request:
			if reflect.ValueOf(m).IsNil() {
				answer(c, failure(nil, messages.Errorf(messages.CodeBadRequest, "nil %T", m)), nil, 0)
				return
			}
			c.Forward(shards[shardOf(m.ScopeName(), len(shards))])
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
	shards := s.shards
	return &Client{root: s.sys.Root, timeout: s.cfg.RequestTimeout, newID: s.cfg.NewID,
		route: func(scope string) *actor.PID { return shards[shardOf(scope, len(shards))] }}
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
// goroutine but never waits for the disk: each write is appended on a
// goroutine of its own, so the store can group-commit writes of many
// scopes, and the shard goes on serving other scopes meanwhile. A scope
// with a write in flight holds its later requests (reads too) until the
// write is durable, applied and answered: per-scope order is request order,
// and nothing is visible before it is durable.
type shard struct {
	h       *handler
	waiting map[string][]envelope // scopes with a write in flight → requests held
	drains  []*actor.PID          // Drain requests answered once nothing is in flight
}

type envelope struct {
	req    messages.Request
	sender *actor.PID
}

// committed reports a write's append outcome to its shard.
type committed struct {
	w      *write
	sender *actor.PID
	res    eventstore.AppendResult
	err    error
}

// drain asks a shard to answer once no write is in flight.
type drain struct{}

func (s *shard) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case messages.Request:
		if q, busy := s.waiting[m.ScopeName()]; busy {
			s.waiting[m.ScopeName()] = append(q, envelope{m, c.Sender()})
			return
		}
		s.process(c, m, c.Sender())
	case *committed:
		s.reply(c, m.sender, s.h.finish(m.w, m.res, m.err))
		scope := m.w.e.st.Scope
		q := s.waiting[scope]
		delete(s.waiting, scope)
		for i, env := range q {
			if s.process(c, env.req, env.sender) {
				s.waiting[scope] = append(s.waiting[scope], q[i+1:]...)
				break
			}
		}
		if len(s.waiting) == 0 {
			for _, p := range s.drains {
				c.Send(p, &drain{})
			}
			s.drains = nil
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
}

// process handles one request; it reports whether a write is now in flight
// for the request's scope.
func (s *shard) process(c actor.Context, req messages.Request, sender *actor.PID) bool {
	reply, w := s.h.handle(req)
	if w == nil {
		s.reply(c, sender, reply)
		return false
	}
	s.waiting[req.ScopeName()] = nil
	self, root := c.Self(), c.ActorSystem().Root
	done := func(res eventstore.AppendResult, err error) {
		root.Send(self, &committed{w: w, sender: sender, res: res, err: err})
	}
	if a, ok := s.h.store.(eventstore.AsyncAppender); ok {
		a.AppendAsync(context.Background(), w.e.st.Scope, w.expected, w.enc, done)
	} else {
		go func() { done(s.h.runAppend(w)) }()
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
