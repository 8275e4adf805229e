package actors

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"reflect"
	"sync"
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
	store    eventstore.Store
	ret      *retainer
	// services serve the global operations (services.go).
	services [messages.NumOps]*actor.PID
	subs     *subService
	mu       sync.Mutex
	hooks    []*Hooks // StartHooks
	// registry keeps the index ListFrames reads (registry.go).
	registry    *registryFollower
	registryPID *actor.PID
	// outbox delivers the spend ledger's cross-scope settlements (outbox.go).
	outbox *outbox
	// expiry removes scope state's expired keys (state_expiry.go).
	expiry *stateExpirer
	// place is this server's share of the scopes: every scope, except on
	// a member of a shared-store cluster (placement.go).
	place *placement
	// shared: a member of a shared-store cluster.
	shared bool
}

// startOptions are what a cluster member sets up before the shards start.
type startOptions struct {
	// shared: a member of a shared-store cluster. It owns no scope until
	// its first topology (placement.go), and keeps its registry index in
	// a table of its own (registryTable).
	shared bool
	// registryTable names the table of the registry index ("" is
	// registryTable's default).
	registryTable string
}

// Start spawns the StateIndex on sys over store. The store stays the
// caller's: Stop does not close it. A nil store, or a nil pointer in a
// store interface (what eventstore.Open returns beside its error), is
// refused.
func Start(sys *actor.ActorSystem, store eventstore.Store, cfg Config) (*Server, error) {
	s, err := start(sys, store, cfg, startOptions{})
	if err != nil {
		return nil, err
	}
	// Standalone, settlements go to this server's own scopes.
	if !s.cfg.OutboxOff {
		s.outbox.start(s.Client(), s.Client())
	}
	return s, nil
}

// start is Start without the outbox worker running: a cluster member
// starts it once its cluster Client can reach every member (StartMember);
// until then commits only note the scopes to deliver from.
func start(sys *actor.ActorSystem, store eventstore.Store, cfg Config, o startOptions) (*Server, error) {
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
	if _, ok := store.(eventstore.Fencer); cfg.Owner != "" && !ok {
		return nil, errNotFencer(cfg.Owner, store)
	}
	cfg.obs = newObserver(cfg)
	s := &Server{sys: sys, cfg: cfg, store: store, place: &placement{}, shared: o.shared}
	if o.shared {
		s.place.set(ownsNone, nil)
	}
	s.outbox = newOutbox(s)
	s.expiry = newStateExpirer(s)
	perScopes := max(cfg.CacheScopes/cfg.Shards, 1)
	perBytes := max(cfg.CacheBytes/int64(cfg.Shards), 1)
	for i := 0; i < cfg.Shards; i++ {
		h, err := newHandler(cfg, store, perScopes, perBytes)
		if err != nil {
			s.Stop()
			return nil, err
		}
		h.ob, h.sx = s.outbox, s.expiry
		s.handlers = append(s.handlers, h)
		g := &gate{max: int64(cfg.MaxPending)}
		s.gates = append(s.gates, g)
		place := s.place
		props := actor.PropsFromProducer(func() actor.Actor { return &shard{h: h, gate: g, place: place} })
		s.shards = append(s.shards, sys.Root.Spawn(props))
	}
	s.startSubscriptions()
	s.router = sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case messages.Request:
			if reflect.ValueOf(m).IsNil() {
				answer(c, failure(nil, messages.Errorf(messages.CodeBadRequest, "nil %T", m)), nil, 0)
				return
			}
			pid, msg, refusal := s.target(m)
			if refusal != nil {
				s.cfg.obs.begin(context.Background(), m).end(m, refusal)
				c.Respond(refusal)
				return
			}
			msg.obs = s.cfg.obs.begin(context.Background(), m)
			c.RequestWithCustomSender(pid, msg, c.Sender())
		case actor.SystemMessage, actor.AutoReceiveMessage:
		default:
			answer(c, failure(nil, messages.Errorf(messages.CodeBadRequest, "not a StateIndex request: %T", m)), nil, 0)
		}
	}))
	if err := s.startRegistry(o.registryTable); err != nil {
		s.Stop()
		return nil, err
	}
	s.expiry.start(s.Client())
	s.cfg.obs.watch(s)
	return s, nil
}

// PID is the address any request can be sent to (it forwards to the shard).
func (s *Server) PID() *actor.PID { return s.router }

// Client returns a Client that sends each request straight to its shard.
func (s *Server) Client() *Client {
	shards, gates := s.shards, s.gates
	clock := s.cfg.Clock // the server's clock stamps in-process ids, so test clocks agree
	return &Client{root: s.sys.Root, timeout: s.cfg.RequestTimeout, newID: func() string { return requestIDAt(clock()) }, positions: newWritePositions(), obs: s.cfg.obs,
		route:  func(scope string) *actor.PID { return shards[shardOf(scope, len(shards))] },
		global: func(op messages.Op) *actor.PID { return s.services[op] },
		admit: func(req messages.Request) (any, error) {
			if messages.IsGlobal(req) {
				if s.services[req.Op()] == nil {
					return nil, notServed(req).Failure()
				}
				return &gated{req: req}, nil
			}
			g := gates[shardOf(req.ScopeName(), len(shards))]
			if !g.enter() {
				return nil, overloaded(req, g.max).Failure()
			}
			return &gated{req: req}, nil
		}}
}

// Stop waits for the writes in flight to be answered, then stops the
// shards after the requests already in their mailboxes.
func (s *Server) Stop() {
	s.cfg.obs.unwatch()
	if s.outbox != nil {
		s.outbox.stop() // its deliveries write through the shards
	}
	if s.expiry != nil {
		s.expiry.close() // so do its expiries
	}
	if s.ret != nil {
		s.ret.close() // a pass in progress ends at its next scope
	}
	s.mu.Lock()
	hooks := s.hooks
	s.hooks = nil
	s.mu.Unlock()
	for _, h := range hooks {
		h.Stop() // before the subscriptions they read
	}
	if s.subs != nil {
		s.subs.stop() // parked polls are answered; reads in flight end first
	}
	s.stopRegistry()
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

// ShardOf is the shard a scope lands on among n (exported for tests and
// tools that place scopes).
func ShardOf(scope string, n int) int { return shardOf(scope, n) }
