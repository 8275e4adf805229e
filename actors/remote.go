package actors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
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
// that requests to a peer that is down fail within about two seconds; a
// connection whose messages make Proto.Actor panic is closed instead of
// crashing the process, and so is a call of the service's unary methods
// (Proto.Actor's panic). opts are applied last (remote.WithServerOptions
// replaces these server options; WithSecurity adds TLS and the shared
// secret to them).
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
		remote.WithServerOptions(grpc.MaxRecvMsgSize(recv), grpc.ChainStreamInterceptor(recoverStream), grpc.ChainUnaryInterceptor(refuseUnary)),
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

// refuseUnary answers every unary call of the remoting service: Proto.Actor
// implements its unary methods (ListProcesses, GetProcessDiagnostics) as
// panics, which would let any caller crash the process; remoting itself
// uses only the Receive stream.
func refuseUnary(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) {
	return nil, status.Error(codes.Unimplemented, "stateindex: remoting serves only its message stream")
}

// StartRemote starts remoting on sys with cfg (see RemoteConfig). Unlike
// remote.Start it returns an error, instead of panicking, when the address
// cannot be listened on. It watches the connections sys dials, so that a
// request refused by a peer (a TLS handshake that fails, a missing secret)
// says why.
func StartRemote(sys *actor.ActorSystem, cfg *remote.Config) (r *remote.Remote, err error) {
	if err := checkListen(net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port))); err != nil {
		return nil, err
	}
	defer func() {
		if p := recover(); p != nil {
			r, err = nil, fmt.Errorf("actors: starting remoting on %s:%d: %v", cfg.Host, cfg.Port, p)
		}
	}()
	cfg = watchConnections(sys, cfg)
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

// notDeliveredError is errNotDelivered with the reason the connection to
// the peer failed, when the transport saw it.
type notDeliveredError struct{ reason string }

func (e *notDeliveredError) Error() string        { return "not delivered: " + e.reason }
func (e *notDeliveredError) Is(target error) bool { return target == errNotDelivered }

// notDeliveredWhy returns ": reason" for an error that carries the reason
// a connection failed, "" otherwise.
func notDeliveredWhy(err error) string {
	var nd *notDeliveredError
	if errors.As(err, &nd) {
		return ": " + nd.reason
	}
	return ""
}

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
	// failed holds, by peer address, why the last attempt to connect to it
	// failed (cleared when one succeeds).
	failed map[string]connectFailure
	limit  logLimiter
}

// connectFailure is a failed connection attempt.
type connectFailure struct {
	reason string
	at     time.Time
	// opened: the stream was opened and the peer refused it (the secret);
	// Proto.Actor then drops the messages queued for that connection
	// instead of answering them with dead letters.
	opened bool
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
	t := &remoteTransport{sys: sys, pending: map[string]map[*pendingCall]struct{}{}, connected: map[string]bool{}, failed: map[string]connectFailure{}}
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
		var lost, dropped []*pendingCall
		f, failed := t.failed[e.Address]
		for p := range t.pending[e.Address] {
			switch {
			case p.mayHaveLeft.Load():
				lost = append(lost, p)
			case failed && f.opened && !p.sent.IsZero():
				dropped = append(dropped, p)
			}
		}
		t.mu.Unlock()
		// Requests that never had a connection are left alone: the writer
		// that failed to connect answers them with dead letters (not
		// delivered), or their deadline does — except after a refused
		// stream, whose writer drops them: almost surely not applied, but
		// one sent at this very moment may have gone to the next
		// connection, so "outcome unknown", at once rather than at the
		// deadline.
		for _, p := range lost {
			p.finish(nil, &OutcomeUnknownError{Address: e.Address, Reason: "the connection was lost"})
		}
		for _, p := range dropped {
			p.finish(nil, &OutcomeUnknownError{Address: e.Address, Reason: "the connection could not be set up: " + f.reason})
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
	// sent is when the request had been handed to Proto.Actor's endpoint
	// (zero before; guarded by the transport's mu).
	sent time.Time
	res  any
	err  error
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

	start := time.Now()
	injectTrace(ctx, msg)
	t.sys.Root.RequestWithCustomSender(target, msg, pid)
	t.mu.Lock()
	p.sent = time.Now() // the message is in the queue of the endpoint's writer
	t.mu.Unlock()
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
	if p.err == errNotDelivered {
		if reason := t.failedSince(addr, start); reason != "" {
			return nil, &notDeliveredError{reason: reason}
		}
	}
	return p.res, p.err
}

// failedSince returns why the last connection attempt to addr failed, if
// it failed around or after start: Proto.Actor answers the requests queued
// for a connection that could not be made with dead letters, up to about
// two seconds after the attempt failed (its writer sleeps before giving
// up), and a success clears the record.
func (t *remoteTransport) failedSince(addr string, start time.Time) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if f, ok := t.failed[addr]; ok && f.at.After(start.Add(-5*time.Second)) {
		return f.reason
	}
	return ""
}

// watchConnections returns a copy of cfg whose dialing side reports to
// sys's transport how each connection attempt ended: Proto.Actor only logs
// it, and answers the waiting requests with bare dead letters.
//
// With one attempt per connection (RemoteConfig's MaxRetryCount), a failed
// attempt also ends at once, as not delivered, the requests already queued
// for it: Proto.Actor queues a request for the connection being made
// before returning from the send, and a connection whose only attempt
// failed never sends anything.
func watchConnections(sys *actor.ActorSystem, cfg *remote.Config) *remote.Config {
	t := transportFor(sys)
	w := &connWatch{t: t, final: cfg.MaxRetryCount <= 1}
	c := *cfg
	c.DialOptions = append(slices.Clip(cfg.DialOptions), grpc.WithChainStreamInterceptor(w.watchStream))
	return &c
}

// connWatch watches the connections of one remoting configuration.
type connWatch struct {
	t *remoteTransport
	// final: a failed attempt is the connection's last (no retry).
	final bool
}

// watchStream wraps the stream Proto.Actor's endpoint writer opens to a
// peer. The attempt to connect ends with the stream's first reply (the
// peer's ConnectResponse) or with the error that comes instead: a TLS
// handshake that failed, the peer's refusal (unauthenticated), a peer
// that is not there.
func (w *connWatch) watchStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	addr := cc.Target()
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		w.t.connectEnded(addr, err, false, w.final)
		return nil, err
	}
	return &watchedStream{ClientStream: cs, w: w, addr: addr}, nil
}

type watchedStream struct {
	grpc.ClientStream
	w       *connWatch
	addr    string
	settled atomic.Bool
}

func (w *watchedStream) SendMsg(m any) error {
	err := w.ClientStream.SendMsg(m)
	if errors.Is(err, io.EOF) && !w.settled.Load() {
		// The stream ended before it was set up; its status says why
		// (gRPC's contract for io.EOF from SendMsg).
		if rerr := w.ClientStream.RecvMsg(new(remote.RemoteMessage)); rerr != nil {
			w.settle(rerr)
		}
	}
	return err
}

func (w *watchedStream) RecvMsg(m any) error {
	err := w.ClientStream.RecvMsg(m)
	if !w.settled.Load() {
		w.settle(err)
	}
	return err
}

func (w *watchedStream) settle(err error) {
	if w.settled.CompareAndSwap(false, true) {
		w.w.t.connectEnded(w.addr, err, true, w.w.final)
	}
}

// connectEnded records how an attempt to connect to addr ended (err nil:
// connected; opened: the stream was opened first), ends the requests that
// were queued for it when it failed for good (final), and logs a peer that
// refused this node.
func (t *remoteTransport) connectEnded(addr string, err error, opened, final bool) {
	now := time.Now()
	t.mu.Lock()
	if err == nil {
		delete(t.failed, addr)
		t.mu.Unlock()
		return
	}
	reason, refused := connectReason(err)
	t.failed[addr] = connectFailure{reason: reason, at: now, opened: opened}
	var never []*pendingCall
	if final {
		for p := range t.pending[addr] {
			// Queued before the attempt failed, on no connection since
			// (a connection that came up would have set mayHaveLeft): in
			// the queue of the writer that failed, which sends nothing.
			if !p.mayHaveLeft.Load() && !p.sent.IsZero() && p.sent.Before(now) {
				never = append(never, p)
			}
		}
	}
	t.mu.Unlock()
	for _, p := range never {
		p.finish(nil, &notDeliveredError{reason: reason})
	}
	if refused {
		if n, ok := t.limit.allow(now); ok {
			attrs := []any{"peer", addr, "reason", reason}
			if n > 0 {
				attrs = append(attrs, "suppressed", n)
			}
			t.sys.Logger().Warn("stateindex: a peer refused this node's connection", attrs...)
		}
	}
}

// connectReason says why a connection attempt failed, for a Client's
// error, and whether the peer refused this node (TLS or the secret)
// rather than being unreachable.
func connectReason(err error) (reason string, refused bool) {
	msg := err.Error()
	st, isStatus := status.FromError(err)
	if isStatus {
		msg = st.Message()
	}
	switch {
	case isStatus && st.Code() == codes.Unauthenticated:
		return "unauthenticated: " + msg, true
	case strings.Contains(msg, "authentication handshake failed: "):
		_, after, _ := strings.Cut(msg, "authentication handshake failed: ")
		return "TLS handshake failed: " + strings.TrimSuffix(after, `"`), true
	case strings.Contains(msg, "tls: ") || strings.Contains(msg, "x509: "):
		return "TLS handshake failed: " + msg, true
	case strings.Contains(msg, "server preface"), strings.Contains(msg, "broken pipe"), strings.Contains(msg, "connection reset by peer"):
		// A TLS server closes a plaintext caller's connection at once, and
		// under TLS 1.3 one that refuses a client certificate does so
		// after the caller's side of the handshake has completed.
		return "the peer closed the connection while it was set up (" + msg + "): does it require TLS, or refuse this node's certificate?", true
	}
	return "the connection failed: " + msg, false
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
		why := "not running there, or not reachable"
		var nd *notDeliveredError
		if errors.As(err, &nd) {
			why = nd.reason
		}
		return nil, messages.Errorf(messages.CodeUnavailable,
			"the StateIndex at %s did not receive the request (%s); it was not applied", target.Address, why)
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
