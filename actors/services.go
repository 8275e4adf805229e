package actors

import (
	"context"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/messages"
)

// Global operations (messages.Operation.Global: subscriptions, the
// registry) name no scope. Each is served by one service actor of the
// server, registered with serve when Start spawns it; the router, the
// in-process Client and the remote gateway all send a global request there
// (target), wrapped in *gated like a shard's requests, so that the service
// answers a remote caller with an encoded reply (replyTo.send) exactly as a
// shard does. A service may hold a request and answer it later (a long
// poll): it keeps the replyTo, and nothing else waits.

// serve registers pid as the service actor of op. Start calls it before the
// server is handed out; it is not safe to call afterwards.
func (s *Server) serve(op messages.Op, pid *actor.PID) {
	if op < messages.NumOps {
		s.services[op] = pid
	}
}

// target returns where req goes and the message to send there: its scope's
// shard, or the service of a global operation; or the reply that refuses
// it (the shard's gate is full, no service serves the operation).
func (s *Server) target(req messages.Request) (*actor.PID, *gated, messages.Reply) {
	if messages.IsGlobal(req) {
		pid := s.services[req.Op()]
		if pid == nil {
			return nil, nil, notServed(req)
		}
		return pid, &gated{req: req}, nil
	}
	return s.admitted(req)
}

func notServed(req messages.Request) messages.Reply {
	return failure(req, messages.Errorf(messages.CodeUnavailable,
		"%s is not served by this StateIndex (the service is not started): not applied", req.Op()))
}

// receiveGated unwraps a service's request: the request and where its
// reply goes.
func receiveGated(c actor.Context) (messages.Request, replyTo, bool) {
	switch m := c.Message().(type) {
	case *gated:
		return m.req, replyTo{pid: c.Sender(), wire: m.wire, limit: m.limit, obs: m.obs}, true
	case messages.Request:
		return m, replyTo{pid: c.Sender()}, true
	}
	return nil, replyTo{}, false
}

// send delivers req's reply to its caller, encoded for the wire when the
// caller is remote. Any sender works (an actor's context or the root), so
// a service may answer a request it held from a later message.
func (to replyTo) send(sender actor.SenderContext, req messages.Request, reply messages.Reply) {
	switch {
	case to.pid == nil:
		to.obs.end(req, reply)
	case to.wire:
		m := encodeReply(reply, req, to.limit)
		to.obs.end(req, reply) // before the caller can see the reply
		sender.Send(to.pid, m)
	default:
		to.obs.end(req, reply)
		sender.Send(to.pid, reply)
	}
}

// Members lists where the Client's global requests can go: the storage
// members of a cluster Client, sorted; a single "" for a Client of one
// server. A global operation's Client method calls each of them (callOn)
// and merges the answers.
func (c *Client) Members() []string {
	if c.members != nil {
		return c.members()
	}
	return []string{""}
}

// callOn is call for a global request sent to one member (a name from
// Members; "" for a Client of one server).
func callOn[R messages.Reply](ctx context.Context, c *Client, member string, req messages.Request) (R, error) {
	if c.sendTo == nil || member == "" {
		return call[R](ctx, c, req)
	}
	cc := *c
	cc.send = func(ctx context.Context, req messages.Request, timeout time.Duration) (any, error) {
		return c.sendTo(ctx, member, req, timeout)
	}
	return call[R](ctx, &cc, req)
}

// commitPoll is how often watchCommits asks a store without a
// CommitWatcher for its last sequence.
const commitPoll = 20 * time.Millisecond

// watchCommits calls fn after the store's durable commits, with its last
// sequence: from the store's CommitWatcher, or — for a store without one —
// from a goroutine that polls LastSeq every commitPoll and calls fn when
// it moved. fn must not block. The log's readers (the subscription
// service, the registry's follower) wake on it. stop ends it; fn is not
// called after stop returns.
func watchCommits(store eventstore.Store, fn func(seq uint64)) (stop func()) {
	if w, ok := store.(eventstore.CommitWatcher); ok {
		return w.WatchCommits(fn)
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(commitPoll)
		defer t.Stop()
		var last uint64
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				if seq, err := store.LastSeq(context.Background()); err == nil && seq != last {
					last = seq
					fn(seq)
				}
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(quit)
			<-done
		})
	}
}

// alarm is an actor's one timer for the earliest of its deadlines (the
// shard's parked awaits, the registry's held ListFrames): no timer per
// waiter. set arms it for at unless it already fires at or before then;
// when it fires it sends msg to the actor, which calls fired and then
// answers what is due and sets it again for the next deadline.
type alarm struct {
	timer *time.Timer
	at    time.Time // when it fires; zero while disarmed
}

// set arms the alarm for at, to send msg to pid.
func (a *alarm) set(at time.Time, root *actor.RootContext, pid *actor.PID, msg any) {
	if !a.at.IsZero() && !at.Before(a.at) {
		return // a tick at or before at is coming
	}
	a.at = at
	if a.timer == nil {
		a.timer = time.AfterFunc(time.Until(at), func() { root.Send(pid, msg) })
		return
	}
	a.timer.Reset(time.Until(at))
}

// fired records that the alarm's message arrived: it is disarmed.
func (a *alarm) fired() { a.at = time.Time{} }

// stop disarms the alarm.
func (a *alarm) stop() {
	if a.timer != nil && !a.at.IsZero() {
		a.timer.Stop()
	}
	a.at = time.Time{}
}
