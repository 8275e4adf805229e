package actors

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stateindex/stateindex/messages"
)

// Client is the typed Go API of a StateIndex: one method per operation,
// errors matching the sentinels of this package with errors.Is. It is safe
// for concurrent use.
//
// A request's context is its one deadline (a context without one gets the
// Client's timeout); a request whose context ends fails with ErrTimeout
// wrapping the context's error.
//
// A mutating request whose RequestID is empty gets a fresh one, written into
// the request itself, so that resending the same request after ErrTimeout
// applies it at most once.
//
// A request answered scope_moved — the server was deposed as the scope's
// owner in a shared store and applied nothing — is resent with the same
// request id, up to moveRetries times within its deadline, so that the
// caller sees it applied once by the scope's current owner; ErrScopeMoved
// reaches the caller only when those resends were refused too.
type Client struct {
	root    *actor.RootContext
	route   func(scope string) *actor.PID
	timeout time.Duration
	newID   func() string
	// admit, when set, admits a request into its shard's bounded mailbox
	// (returning what to send) or refuses it with ErrOverloaded.
	admit func(req messages.Request) (any, error)
	// send, when set, carries each request instead of a local call to
	// route(scope): remote PIDs and the cluster (remote.go, cluster.go). It
	// returns the reply as received, or an error of this package.
	send func(ctx context.Context, req messages.Request, timeout time.Duration) (any, error)
	// global, when set, is where an in-process Client sends a global
	// request (the operation's service); otherwise route("") is.
	global func(op messages.Op) *actor.PID
	// members and sendTo, when set (a cluster Client), list the storage
	// members and carry a global request to one of them (services.go).
	members func() []string
	sendTo  func(ctx context.Context, member string, req messages.Request, timeout time.Duration) (any, error)
	// positions holds the highest write position per member (home says
	// which member holds a scope; nil: one server), for ListFrames'
	// SeeOwnWrites (client_registry.go).
	positions *writePositions
	home      func(scope string) string
	// obs, when set, observes the requests this Client admits (metrics.go).
	obs *observer
}

// NewClient returns a Client that sends every request to pid: a Server's
// PID, or a StateIndex on another node (RemotePID; the actor system must
// run remoting, see RemoteConfig), whose requests and replies then travel
// as actors/wire messages. timeout is the deadline of a request whose
// context has none (DefaultConfig().RequestTimeout when <= 0).
func NewClient(root *actor.RootContext, pid *actor.PID, timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = DefaultConfig().RequestTimeout
	}
	c := &Client{root: root, timeout: timeout, newID: NewRequestID, route: func(string) *actor.PID { return pid }, positions: newWritePositions()}
	if isRemote(root.ActorSystem(), pid) {
		c.send = remoteSend(root.ActorSystem(), func(string) (*actor.PID, error) { return pid, nil }, 0)
	}
	return c
}

// backstopGrace is how much later than a request's context deadline the
// timers of its transport may fire. The context is the one source of truth
// for a request's deadline (call gives every request one); those timers are
// only a backstop, strictly later, so that which of two timers fires first
// never decides the error.
const backstopGrace = time.Second

func call[R messages.Reply](ctx context.Context, c *Client, req messages.Request) (R, error) {
	var zero R
	if req == nil || reflect.ValueOf(req).IsNil() {
		return zero, messages.Errorf(messages.CodeInvalidArgument, "nil request")
	}
	if m, ok := req.(messages.MutatingRequest); ok && m.Mut().RequestID == "" {
		m.Mut().RequestID = c.newID()
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	if ctx.Err() != nil {
		return zero, timeoutError(ctx)
	}
	dl, _ := ctx.Deadline()
	send := c.send
	if send == nil {
		send = c.request
	}
	res, err := send(ctx, req, time.Until(dl)+backstopGrace)
	for attempt := 0; attempt < moveRetries && scopeMoved(res, err); attempt++ {
		// The server was deposed as the scope's owner and wrote nothing
		// (fence.go): resend, with the same request id, to whoever holds
		// the scope now.
		if !backOff(ctx, moveBackoff[attempt]) {
			break // the deadline ends first: the caller gets scope_moved, a definite "not applied"
		}
		res, err = send(ctx, req, time.Until(dl)+backstopGrace)
	}
	if err != nil {
		return zero, err
	}
	if r, ok := res.(R); ok {
		if e := r.Failure(); e != nil {
			return r, e
		}
		if _, ok := req.(messages.MutatingRequest); ok {
			c.noteWrite(req, r)
		}
		return r, nil
	}
	if r, ok := res.(messages.Reply); ok && r.Failure() != nil {
		return zero, r.Failure()
	}
	return zero, messages.Errorf(messages.CodeInternal, "unexpected reply %T to %T", res, req)
}

// moveRetries bounds the resends of a request answered scope_moved, and
// moveBackoff is the pause before each: the first goes at once (the
// deposed server dropped the scope; the resend finds its current owner),
// later ones back off, so that two servers that both take a scope over
// again and again (placement disagreeing while membership changes) are
// not hammered. Each stays within the request's deadline.
const moveRetries = 4

var moveBackoff = [moveRetries]time.Duration{0, 5 * time.Millisecond, 25 * time.Millisecond, 100 * time.Millisecond}

// scopeMoved reports whether a send came back scope_moved.
func scopeMoved(res any, err error) bool {
	if err != nil {
		return errors.Is(err, ErrScopeMoved)
	}
	r, ok := res.(messages.Reply)
	return ok && r != nil && r.Failure() != nil && r.Failure().Code == messages.CodeScopeMoved
}

// backOff waits d, or less if ctx ends first (then false).
func backOff(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Do sends any request and returns its reply, of the type
// messages.ReplyFor(req) names (a typed method of the Client is the same
// call with the reply's type spelled out). Tools that hold requests of
// many operations — replays, drivers, proxies — use it instead of a switch
// over the Client's methods.
func (c *Client) Do(ctx context.Context, req messages.Request) (messages.Reply, error) {
	r, err := call[messages.Reply](ctx, c, req)
	if r != nil && req != nil && reflect.TypeOf(r) != reflect.TypeOf(messages.ReplyFor(req)) {
		return nil, messages.Errorf(messages.CodeInternal, "unexpected reply %T to %T", r, req)
	}
	return r, err
}

// timeoutError is the error of a request whose context ended: ErrTimeout
// wrapping the context's error (context.DeadlineExceeded or
// context.Canceled).
func timeoutError(ctx context.Context) error {
	err := ctx.Err()
	if err == nil { // a backstop fired first: the deadline has passed
		err = context.DeadlineExceeded
	}
	return fmt.Errorf("%w: %w", ErrTimeout, err)
}

// request sends req to its shard's PID in this actor system and waits for
// the reply or the end of ctx (which call gives a deadline); it arms no
// timer of its own.
func (c *Client) request(ctx context.Context, req messages.Request, _ time.Duration) (any, error) {
	var msg any = req
	if c.admit != nil {
		var err error
		if msg, err = c.admit(req); err != nil {
			c.obs.refuse(ctx, req, err)
			return nil, err
		}
		if g, ok := msg.(*gated); ok {
			g.obs = c.obs.begin(ctx, req)
		}
	}
	sys := c.root.ActorSystem()
	p := &pendingCall{done: make(chan struct{})}
	pid, _ := sys.ProcessRegistry.Add(p, "si-call"+sys.ProcessRegistry.NextId())
	defer sys.ProcessRegistry.Remove(pid)
	to := c.route(req.ScopeName())
	if c.global != nil && messages.IsGlobal(req) {
		to = c.global(req.Op())
	}
	c.root.RequestWithCustomSender(to, msg, pid)
	select {
	case <-p.done:
	case <-ctx.Done():
		p.finish(nil, timeoutError(ctx))
	}
	<-p.done
	if errors.Is(p.err, errNotDelivered) {
		return nil, fmt.Errorf("%w: the StateIndex is not running (the request was not delivered)", ErrUnavailable)
	}
	return p.res, p.err
}

// DestroyScope removes everything a scope holds and starts it over empty
// (messages.DestroyScope); without Force a scope with live frames is
// refused with ErrLiveChildren.
func (c *Client) DestroyScope(ctx context.Context, req *messages.DestroyScope) (*messages.DestroyScopeReply, error) {
	return call[*messages.DestroyScopeReply](ctx, c, req)
}

// ApplyRetention records that a scope's history through a version is
// removed (the server's retention pass uses it).
func (c *Client) ApplyRetention(ctx context.Context, req *messages.ApplyRetention) (*messages.ApplyRetentionReply, error) {
	return call[*messages.ApplyRetentionReply](ctx, c, req)
}

// PushFrame creates a frame.
func (c *Client) PushFrame(ctx context.Context, req *messages.PushFrame) (*messages.PushFrameReply, error) {
	return call[*messages.PushFrameReply](ctx, c, req)
}

// PopFrame ends a frame.
func (c *Client) PopFrame(ctx context.Context, req *messages.PopFrame) (*messages.PopFrameReply, error) {
	return call[*messages.PopFrameReply](ctx, c, req)
}

// UpdateFrame changes a frame's goal, inputs, limits, reservation or hash.
func (c *Client) UpdateFrame(ctx context.Context, req *messages.UpdateFrame) (*messages.UpdateFrameReply, error) {
	return call[*messages.UpdateFrameReply](ctx, c, req)
}

// AddContextHandle adds context to a frame.
func (c *Client) AddContextHandle(ctx context.Context, req *messages.AddContextHandle) (*messages.AddContextHandleReply, error) {
	return call[*messages.AddContextHandleReply](ctx, c, req)
}

// AddResult records a result reference.
func (c *Client) AddResult(ctx context.Context, req *messages.AddResult) (*messages.AddResultReply, error) {
	return call[*messages.AddResultReply](ctx, c, req)
}

// RecordUsage records consumption; crossing a limit suspends the frame.
func (c *Client) RecordUsage(ctx context.Context, req *messages.RecordUsage) (*messages.RecordUsageReply, error) {
	return call[*messages.RecordUsageReply](ctx, c, req)
}

// StartToolCall journals a tool call before it is dispatched.
func (c *Client) StartToolCall(ctx context.Context, req *messages.StartToolCall) (*messages.StartToolCallReply, error) {
	return call[*messages.StartToolCallReply](ctx, c, req)
}

// FinishToolCall records a tool call's output.
func (c *Client) FinishToolCall(ctx context.Context, req *messages.FinishToolCall) (*messages.FinishToolCallReply, error) {
	return call[*messages.FinishToolCallReply](ctx, c, req)
}

// AssembleContextPack returns a frame's context fitted to a budget.
func (c *Client) AssembleContextPack(ctx context.Context, req *messages.AssembleContextPack) (*messages.ContextPack, error) {
	return call[*messages.ContextPack](ctx, c, req)
}

// SuspendFrame pauses a frame and returns its signed token.
func (c *Client) SuspendFrame(ctx context.Context, req *messages.SuspendFrame) (*messages.SuspensionToken, error) {
	return call[*messages.SuspensionToken](ctx, c, req)
}

// ResumeFrame resumes a suspended frame with its token.
func (c *Client) ResumeFrame(ctx context.Context, req *messages.ResumeFrame) (*messages.ResumeFrameReply, error) {
	return call[*messages.ResumeFrameReply](ctx, c, req)
}

// CompactContext compacts a frame's live context with a strategy.
func (c *Client) CompactContext(ctx context.Context, req *messages.CompactContext) (*messages.CompactionResult, error) {
	return call[*messages.CompactionResult](ctx, c, req)
}

// ResumeActor recovers a scope after a restart.
func (c *Client) ResumeActor(ctx context.Context, req *messages.ResumeActor) (*messages.ActorResumeState, error) {
	return call[*messages.ActorResumeState](ctx, c, req)
}

// GetFrame reads a frame.
func (c *Client) GetFrame(ctx context.Context, req *messages.GetFrame) (*messages.GetFrameReply, error) {
	return call[*messages.GetFrameReply](ctx, c, req)
}

// GetStack reads the path root → frame.
func (c *Client) GetStack(ctx context.Context, req *messages.GetStack) (*messages.GetStackReply, error) {
	return call[*messages.GetStackReply](ctx, c, req)
}

// SearchChain searches every link of a frame's continuation chain (one
// page of hits; pass the reply's Next as Cursor for the next).
func (c *Client) SearchChain(ctx context.Context, req *messages.SearchChain) (*messages.SearchChainReply, error) {
	return call[*messages.SearchChainReply](ctx, c, req)
}

// ContinueFrame continues a frame whose context fills as a new linked
// frame (messages.ContinueFrame).
func (c *Client) ContinueFrame(ctx context.Context, req *messages.ContinueFrame) (*messages.ContinueFrameReply, error) {
	return call[*messages.ContinueFrameReply](ctx, c, req)
}

// GetChain reads the continuation chain a frame is a link of.
func (c *Client) GetChain(ctx context.Context, req *messages.GetChain) (*messages.GetChainReply, error) {
	return call[*messages.GetChainReply](ctx, c, req)
}

// ResumeChain resumes a finished chain with a user's message
// (messages.ResumeChain).
func (c *Client) ResumeChain(ctx context.Context, req *messages.ResumeChain) (*messages.ResumeChainReply, error) {
	return call[*messages.ResumeChainReply](ctx, c, req)
}
