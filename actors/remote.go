package actors

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/extensions"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stateindex/stateindex/actors/wire"
	"github.com/stateindex/stateindex/messages"
)

// This file puts the StateIndex on Proto.Actor remoting: the gateway that
// remote callers address (it decodes wire messages, checks them and hands
// them to the shards, and encodes the replies), and the client transport
// that sends a Client's requests to a remote PID and tells a lost
// connection ("outcome unknown") from a request that never left
// ("unavailable").

// GatewayName is the name under which Expose registers a StateIndex on its
// actor system; remote callers address it as RemotePID(address).
const GatewayName = "stateindex"

// RemotePID returns the PID of the StateIndex exposed at address
// (host:port, the --listen address of `stateindex serve`).
func RemotePID(address string) *actor.PID { return actor.NewPID(address, GatewayName) }

// writerBatch caps how many messages Proto.Actor's endpoint writer packs
// into one gRPC message: with every message up to the message limit, the
// receiving side's gRPC limit must hold a whole batch.
const writerBatch = 32

// RemoteConfig returns the remoting configuration a StateIndex server or a
// remote Client needs on host:port (port 0 picks a free port). Against
// Proto.Actor's defaults it raises gRPC's receive limit so that a batch of
// messages of up to wire.DefaultMaxBytes each fits (the default 4 MiB
// would break the connection instead of failing one request), and makes
// one connection attempt per endpoint instead of five two seconds apart, so
// that requests to a peer that is down fail within about two seconds; and
// a connection whose messages make Proto.Actor panic is closed instead of
// crashing the process. opts are applied last (remote.WithServerOptions
// replaces these server options).
func RemoteConfig(host string, port int, opts ...remote.ConfigOption) *remote.Config {
	return RemoteConfigWithLimit(host, port, wire.DefaultMaxBytes, opts...)
}

// RemoteConfigWithLimit is RemoteConfig for messages of up to maxMessage
// bytes (the MaxMessageBytes of ExposeOptions and ClusterConfig). Give the
// servers and their clients the same limit.
func RemoteConfigWithLimit(host string, port, maxMessage int, opts ...remote.ConfigOption) *remote.Config {
	if maxMessage <= 0 {
		maxMessage = wire.DefaultMaxBytes
	}
	recv := writerBatch*(maxMessage+4096) + 1<<20
	base := []remote.ConfigOption{
		remote.WithServerOptions(grpc.MaxRecvMsgSize(recv), grpc.ChainStreamInterceptor(recoverStream)),
		remote.WithEndpointWriterBatchSize(writerBatch),
	}
	cfg := remote.Configure(host, port, append(base, opts...)...)
	cfg.MaxRetryCount = 1
	return cfg
}

// recoverStream turns a panic while serving a connection into an error
// that closes that connection only. Proto.Actor's endpoint reader panics on
// a message whose protobuf type the process does not know, which would
// otherwise let any peer crash the server.
func recoverStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = status.Errorf(codes.InvalidArgument, "stateindex: connection closed: undecodable message (%v)", p)
		}
	}()
	return handler(srv, ss)
}

// StartRemote starts remoting on sys with cfg (see RemoteConfig). Unlike
// remote.Start it returns an error, instead of panicking, when the address
// cannot be listened on.
func StartRemote(sys *actor.ActorSystem, cfg *remote.Config) (r *remote.Remote, err error) {
	if err := checkListen(net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port))); err != nil {
		return nil, err
	}
	defer func() {
		if p := recover(); p != nil {
			r, err = nil, fmt.Errorf("actors: starting remoting on %s:%d: %v", cfg.Host, cfg.Port, p)
		}
	}()
	r = remote.NewRemote(sys, cfg)
	r.Start()
	return r, nil
}

// checkListen fails early, with a plain error, for an address that cannot
// be listened on (Proto.Actor panics, or for its health endpoint only logs).
func checkListen(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("actors: cannot listen on %s: %w", addr, err)
	}
	return l.Close()
}

// ExposeOptions configures Expose. The zero value is usable.
type ExposeOptions struct {
	// MaxMessageBytes bounds one encoded request or reply (default
	// wire.DefaultMaxBytes, 1 MiB).
	MaxMessageBytes int
}

// Expose registers the StateIndex under GatewayName on its actor system,
// so that remote actors reach it at RemotePID(address) with the wire
// messages of package actors/wire (a Client built by NewClient on that PID
// does it for them). Local actors may send it plain messages too. Stop the
// returned PID (before Server.Stop) to stop serving remote callers: requests
// that reach it afterwards fail as unavailable, never half-done.
func (s *Server) Expose(opts *ExposeOptions) (*actor.PID, error) {
	var o ExposeOptions
	if opts != nil {
		o = *opts
	}
	return s.expose(o.MaxMessageBytes, nil)
}

// expose spawns the named gateway; owns, when set, refuses scopes whose home
// is another member.
func (s *Server) expose(limit int, owns func(scope string) (home string, ok bool)) (*actor.PID, error) {
	g := &gateway{srv: s, limit: limit, owns: owns}
	pid, err := s.sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return g }), GatewayName)
	if err != nil {
		return nil, fmt.Errorf("actors: registering the StateIndex as %q: %w", GatewayName, err)
	}
	return pid, nil
}

// admitted returns the shard that owns req's scope and the message to send
// it, or the overloaded reply when the shard's gate refuses it.
func (s *Server) admitted(req messages.Request) (*actor.PID, *gated, messages.Reply) {
	i := shardOf(req.ScopeName(), len(s.shards))
	if !s.gates[i].enter() {
		return nil, nil, overloaded(req, s.gates[i].max)
	}
	return s.shards[i], &gated{req: req}, nil
}

// gateway is the StateIndex as remote callers see it: the named PID of
// Expose, or one grain of a member's cluster kind. It decodes nothing
// itself (Proto.Actor calls wire.Envelope.Deserialize on the connection's
// goroutine) but answers what could not be decoded, checks the size and the
// scope's home, and hands each request to its shard with the remote caller
// as the sender and the request marked for the wire: the shard encodes its
// reply (encodeReply) and sends it straight to the caller. If the shard is
// gone (the StateIndex is stopping), Proto.Actor answers the caller with a
// dead letter, which its Client reports as unavailable. It never blocks.
type gateway struct {
	srv   *Server
	limit int
	owns  func(scope string) (home string, ok bool)
}

func (g *gateway) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *wire.Message:
		g.serveWire(c, m)
	case messages.Request:
		if e := g.check(m); e != nil {
			answer(c, failure(m, e), m, g.limit)
			return
		}
		pid, msg, refusal := g.srv.target(m)
		if refusal != nil {
			g.srv.cfg.obs.begin(context.Background(), m).end(m, refusal)
			if c.Sender() != nil {
				c.Respond(refusal)
			}
			return
		}
		msg.obs = g.srv.cfg.obs.begin(context.Background(), m)
		c.RequestWithCustomSender(pid, msg, c.Sender())
	case actor.AutoReceiveMessage, actor.SystemMessage, *actor.Started, *actor.Stopping, *actor.Stopped, *actor.Restarting:
	default:
		// Any other message: a protobuf message a remote peer sent (remoting
		// carries those), or *cluster.ClusterInit, which has no sender; only
		// a caller waiting for an answer gets one.
		answer(c, failure(nil, messages.Errorf(messages.CodeBadRequest, "not a StateIndex request: %T", m)), nil, g.limit)
	}
}

// answer responds to the sender of c's message, if any, with r: as it is
// to a sender in this process, encoded for the wire to a remote one (a reply
// remoting cannot serialize is dropped, and its caller would wait for its
// deadline instead). req is the request r answers, nil when there is none.
func answer(c actor.Context, r messages.Reply, req messages.Request, limit int) {
	to := c.Sender()
	switch {
	case to == nil:
	case isRemote(c.ActorSystem(), to):
		c.Respond(encodeReply(r, req, limit))
	default:
		c.Respond(r)
	}
}

func (g *gateway) serveWire(c actor.Context, m *wire.Message) {
	to := c.Sender()
	req, isReq := m.Value.(messages.Request)
	switch {
	case m.Err != nil:
		if to != nil {
			r := wire.ReplyTo(m.Type)
			r.SetFailure(m.Err)
			c.Send(to, encodeReply(r, nil, g.limit))
		}
		return
	case !isReq:
		if to != nil {
			c.Send(to, encodeReply(&wire.Failure{Result: messages.Result{Err: messages.Errorf(messages.CodeBadRequest, "%s is not a request", m.Type)}}, nil, g.limit))
		}
		return
	}
	if e := g.check(req); e != nil || m.Size() > g.maxBytes() {
		if e == nil {
			e = messages.Errorf(messages.CodeTooLarge, "request %s is %d bytes encoded, over the %d-byte limit of this StateIndex", m.Type, m.Size(), g.maxBytes())
		}
		if to != nil {
			c.Send(to, encodeReply(failure(req, e), req, g.limit))
		}
		return
	}
	shard, msg, refusal := g.srv.target(req)
	if o := g.srv.cfg.obs; o != nil {
		r := o.begin(extractTrace(m), req)
		if refusal != nil {
			r.end(req, refusal)
		} else {
			msg.obs = r
		}
	}
	switch {
	case refusal != nil:
		if to != nil {
			c.Send(to, encodeReply(refusal, req, g.limit))
		}
	case to == nil:
		c.Send(shard, msg)
	default:
		msg.wire, msg.limit = true, g.limit
		c.RequestWithCustomSender(shard, msg, to)
	}
}

func (g *gateway) maxBytes() int {
	if g.limit <= 0 {
		return wire.DefaultMaxBytes
	}
	return g.limit
}

// check refuses a request this member must not serve.
func (g *gateway) check(req messages.Request) *messages.Error {
	if g.owns == nil || messages.IsGlobal(req) {
		return nil
	}
	if home, ok := g.owns(req.ScopeName()); !ok {
		return messages.Errorf(messages.CodeBadRequest,
			"scope %q belongs to member %s, not to this one: the caller's list of storage members differs from this member's", req.ScopeName(), home)
	}
	return nil
}

// encodeReply prepares a reply for the wire. A reply over the limit is
// replaced by an error of the same type saying so (for a mutating request
// that succeeded: that it was applied, so that nobody sends it again under
// a new id); a reply that cannot be encoded at all becomes an internal
// error. The result always encodes.
func encodeReply(r messages.Reply, req messages.Request, limit int) *wire.Message {
	m, err := wire.Encode(r, limit)
	if err == nil {
		return m
	}
	var e *messages.Error
	if !errors.As(err, &e) {
		e = messages.Errorf(messages.CodeInternal, "%v", err)
	}
	if _, mutating := req.(messages.MutatingRequest); mutating && e.Code == messages.CodeTooLarge && r.Failure() == nil {
		e = messages.Errorf(messages.CodeTooLarge, "the request was applied, but its reply cannot travel: %s", e.Message)
	} else if e.Code != messages.CodeTooLarge {
		e = messages.Errorf(messages.CodeInternal, "the reply cannot travel: %s", e.Message)
	}
	if m, err = wire.Encode(failure(req, e), limit); err == nil {
		return m
	}
	m, _ = wire.Encode(&wire.Failure{Result: messages.Result{Err: e}}, 0)
	return m
}

// OutcomeUnknownError reports that the connection to the StateIndex serving
// a request, or the cluster member that is its scope's home, was lost while
// the request was in flight: it may or may not have been applied. It
// matches ErrTimeout with errors.Is, whose remedy it shares: resend the
// same request (the same request id), which applies it at most once.
type OutcomeUnknownError struct {
	// Address is the lost peer's host:port.
	Address string
	// Reason says what was lost.
	Reason string
}

func (e *OutcomeUnknownError) Error() string {
	return fmt.Sprintf("stateindex: outcome unknown: %s (%s) while the request was in flight; retry with the same request id", e.Reason, e.Address)
}

// Is makes errors.Is(err, ErrTimeout) hold.
func (e *OutcomeUnknownError) Is(target error) bool { return target == ErrTimeout }

// errNotDelivered: Proto.Actor answered with a dead letter, so the request
// never reached a StateIndex.
var errNotDelivered = errors.New("not delivered")

// remoteTransport sends the remote requests of every Client of one actor system
// and watches the connections: a request pending on a connection that is
// lost after it may have been written fails at once with an
// OutcomeUnknownError instead of waiting for its deadline. One per actor
// system (an extension), so Clients can be created freely.
type remoteTransport struct {
	sys *actor.ActorSystem
	mu  sync.Mutex
	// pending holds the requests waiting for a reply, by peer address.
	pending map[string]map[*pendingCall]struct{}
	// connected says which peers have a live connection.
	connected map[string]bool
}

var (
	transportExtID = extensions.NextExtensionID()
	transportMu    sync.Mutex
)

func (t *remoteTransport) ExtensionID() extensions.ExtensionID { return transportExtID }

// transportFor returns sys's transport, creating it on first use.
func transportFor(sys *actor.ActorSystem) *remoteTransport {
	transportMu.Lock()
	defer transportMu.Unlock()
	if t, ok := sys.Extensions.Get(transportExtID).(*remoteTransport); ok {
		return t
	}
	t := &remoteTransport{sys: sys, pending: map[string]map[*pendingCall]struct{}{}, connected: map[string]bool{}}
	sys.EventStream.SubscribeWithPredicate(t.onEvent, func(evt any) bool {
		switch evt.(type) {
		case *remote.EndpointConnectedEvent, *remote.EndpointTerminatedEvent:
			return true
		}
		return false
	})
	sys.Extensions.Register(t)
	return t
}

func (t *remoteTransport) onEvent(evt any) {
	switch e := evt.(type) {
	case *remote.EndpointConnectedEvent:
		t.mu.Lock()
		t.connected[e.Address] = true
		for p := range t.pending[e.Address] {
			p.mayHaveLeft.Store(true) // the new connection will carry it
		}
		t.mu.Unlock()
	case *remote.EndpointTerminatedEvent:
		t.mu.Lock()
		delete(t.connected, e.Address)
		var lost []*pendingCall
		for p := range t.pending[e.Address] {
			if p.mayHaveLeft.Load() {
				lost = append(lost, p)
			}
		}
		t.mu.Unlock()
		// Requests that never had a connection are left alone: the writer
		// that failed to connect answers them with dead letters (not
		// delivered), or their deadline does.
		for _, p := range lost {
			p.finish(nil, &OutcomeUnknownError{Address: e.Address, Reason: "the connection was lost"})
		}
	}
}

// failAll ends every request pending on address with err (for example when
// the cluster marks that member down).
func (t *remoteTransport) failAll(address string, err error) {
	t.mu.Lock()
	var lost []*pendingCall
	for p := range t.pending[address] {
		lost = append(lost, p)
	}
	t.mu.Unlock()
	for _, p := range lost {
		p.finish(nil, err)
	}
}

// pendingCall is one request waiting for its reply: the reply address the
// request carries is this process, not a future, so that the transport can
// end it early.
type pendingCall struct {
	done        chan struct{}
	finished    atomic.Bool
	mayHaveLeft atomic.Bool
	res         any
	err         error
}

func (p *pendingCall) finish(res any, err error) {
	if p.finished.CompareAndSwap(false, true) {
		p.res, p.err = res, err
		close(p.done)
	}
}

func (p *pendingCall) SendUserMessage(_ *actor.PID, message any) {
	m := actor.UnwrapEnvelopeMessage(message)
	if _, dead := m.(*actor.DeadLetterResponse); dead {
		p.finish(nil, errNotDelivered)
		return
	}
	p.finish(m, nil)
}

func (p *pendingCall) SendSystemMessage(*actor.PID, any) {}

func (p *pendingCall) Stop(*actor.PID) { p.finish(nil, errNotDelivered) }

// request sends msg to target and waits for the reply, the end of ctx (the
// request's deadline: call gives every request one), or the loss of the
// connection; timeout is a backstop that the Client sets strictly later than
// ctx's deadline. The reply is returned as received (a
// *wire.Message for a remote peer); errors are those of the Client:
// ErrTimeout (possibly an *OutcomeUnknownError) or errNotDelivered, which
// the caller turns into an unavailable error.
func (t *remoteTransport) request(ctx context.Context, target *actor.PID, msg any, timeout time.Duration) (any, error) {
	p := &pendingCall{done: make(chan struct{})}
	pid, _ := t.sys.ProcessRegistry.Add(p, "si-call"+t.sys.ProcessRegistry.NextId())
	addr := target.Address
	t.mu.Lock()
	if t.pending[addr] == nil {
		t.pending[addr] = map[*pendingCall]struct{}{}
	}
	t.pending[addr][p] = struct{}{}
	p.mayHaveLeft.Store(t.connected[addr])
	t.mu.Unlock()
	defer func() {
		t.sys.ProcessRegistry.Remove(pid)
		t.mu.Lock()
		delete(t.pending[addr], p)
		if len(t.pending[addr]) == 0 {
			delete(t.pending, addr)
		}
		t.mu.Unlock()
	}()

	injectTrace(ctx, msg)
	t.sys.Root.RequestWithCustomSender(target, msg, pid)
	// ctx carries the request's deadline; the timer is only a backstop for
	// a context without one, and ends the request as the deadline would.
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-ctx.Done():
		p.finish(nil, timeoutError(ctx))
	case <-timer.C:
		p.finish(nil, timeoutError(ctx))
	}
	<-p.done
	return p.res, p.err
}

// remoteSend is a Client's send function for a remote PID: it encodes the
// request, sends it through the actor system's transport and decodes the
// reply.
func remoteSend(sys *actor.ActorSystem, route func(scope string) (*actor.PID, error), limit int) func(context.Context, messages.Request, time.Duration) (any, error) {
	t := transportFor(sys)
	return func(ctx context.Context, req messages.Request, timeout time.Duration) (any, error) {
		msg, err := wire.Encode(req, limit)
		if err != nil {
			return nil, err
		}
		target, err := route(req.ScopeName())
		if err != nil {
			return nil, err
		}
		res, err := t.request(ctx, target, msg, timeout)
		return unwrapReply(target, res, err)
	}
}

// unwrapReply turns what a remote request returned into a reply or a
// Client error.
func unwrapReply(target *actor.PID, res any, err error) (any, error) {
	if errors.Is(err, errNotDelivered) {
		return nil, messages.Errorf(messages.CodeUnavailable,
			"the StateIndex at %s did not receive the request (not running there, or not reachable); it was not applied", target.Address)
	}
	if err != nil {
		return nil, err
	}
	if m, ok := res.(*wire.Message); ok {
		if m.Err != nil {
			return nil, messages.Errorf(messages.CodeInternal, "the reply from %s could not be read: %s", target.Address, m.Err.Message)
		}
		return m.Value, nil
	}
	return res, nil
}

// isRemote reports whether pid lives outside sys.
func isRemote(sys *actor.ActorSystem, pid *actor.PID) bool {
	return pid != nil && pid.Address != sys.Address() && pid.Address != "nonhost"
}
