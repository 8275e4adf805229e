package actors

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stateindex/stateindex/messages"
)

// Subscribe, ReadEvents, AckEvents and Unsubscribe are the plain requests
// of subscriptions (messages.Subscribe …), for callers that drive their
// own reads; member names a cluster member (Members; "" for one server).

// SubscribeOn creates or opens a durable subscription on member.
func (c *Client) SubscribeOn(ctx context.Context, member string, req *messages.Subscribe) (*messages.SubscribeReply, error) {
	return callOn[*messages.SubscribeReply](ctx, c, member, req)
}

// ReadEvents reads (long-polls, with Wait) events on member.
func (c *Client) ReadEvents(ctx context.Context, member string, req *messages.ReadEvents) (*messages.ReadEventsReply, error) {
	return callOn[*messages.ReadEventsReply](ctx, c, member, req)
}

// AckEvents acknowledges a durable subscription's position on member.
func (c *Client) AckEvents(ctx context.Context, member string, req *messages.AckEvents) (*messages.AckEventsReply, error) {
	return callOn[*messages.AckEventsReply](ctx, c, member, req)
}

// Unsubscribe deletes a durable subscription on every member; existed says
// whether any member had it.
func (c *Client) Unsubscribe(ctx context.Context, name string) (existed bool, err error) {
	for _, m := range c.Members() {
		r, e := callOn[*messages.UnsubscribeReply](ctx, c, m, &messages.Unsubscribe{Name: name})
		if e != nil {
			err = errors.Join(err, memberErr(m, e))
			continue
		}
		existed = existed || r.Existed
	}
	return existed, err
}

func memberErr(member string, err error) error {
	if member == "" {
		return err
	}
	return fmt.Errorf("member %s: %w", member, err)
}

// SubscribeOptions configures Client.Subscribe.
type SubscribeOptions struct {
	// Name makes the subscription durable: its acknowledged positions are
	// stored on the server(s), and a later Subscribe with the same Name
	// resumes from them. "" is an ad-hoc subscription (nothing stored).
	Name   string
	Filter messages.EventFilter
	// Where a new subscription starts: From (a position of every member;
	// for one server, a Seq), FromNow (after the last durable event), or
	// the beginning of the log (neither). A durable subscription that
	// exists resumes from its acknowledged position instead.
	From    uint64
	FromNow bool
	// Handler receives each event, in order per member, one at a time
	// (members are delivered concurrently). An error from it ends the
	// subscription (Err returns it); the event is delivered again by a new
	// subscription of the same Name.
	Handler func(ctx context.Context, ev messages.SubscribedEvent) error
	// Target, instead of Handler, receives each event as a
	// *messages.SubscribedEvent request: any reply means processed; no
	// reply within TargetTimeout (0: 30 s) delivers it again.
	Target        *actor.PID
	TargetTimeout time.Duration
	// Batch is how many events one read asks for (0: 256); Wait a long
	// poll's wait (0: 10 s).
	Batch int
	Wait  time.Duration
	// AckEvery and AckAfter coalesce acknowledgements: an ack goes after
	// AckEvery events (0: 64) or AckAfter since the last (0: 100 ms),
	// whichever first, and at Close. A lost ack only repeats deliveries.
	AckEvery int
	AckAfter time.Duration
}

// Subscription is a running Client.Subscribe: one puller per member that
// long-polls ReadEvents and delivers to the handler. At least once and in
// order per member.
type Subscription struct {
	c      *Client
	opts   SubscribeOptions
	cancel context.CancelFunc
	wg     sync.WaitGroup
	done   chan struct{}

	mu   sync.Mutex
	err  error
	pos  map[string]uint64 // member → position processed (next needed)
	once sync.Once
}

// Subscribe starts a subscription (see SubscribeOptions). For a durable
// one it first creates or opens it on every member, so an error in the
// options (a bad filter, a name used with another filter) comes back
// here.
func (c *Client) Subscribe(ctx context.Context, opts SubscribeOptions) (*Subscription, error) {
	if (opts.Handler == nil) == (opts.Target == nil) {
		return nil, messages.Errorf(messages.CodeInvalidArgument, "Subscribe needs a Handler or a Target (one of them)")
	}
	if opts.FromNow && opts.From != 0 {
		return nil, messages.Errorf(messages.CodeInvalidArgument, "a subscription starts from a position or from now, not both")
	}
	if e := opts.Filter.Check(); e != nil {
		return nil, e
	}
	if opts.Name != "" {
		if e := messages.CheckSubscriptionName(opts.Name); e != nil {
			return nil, e
		}
	}
	if opts.Batch <= 0 || opts.Batch > messages.MaxReadEvents {
		opts.Batch = messages.DefaultReadEvents
	}
	if opts.Wait <= 0 || opts.Wait > messages.MaxReadWait {
		opts.Wait = 10 * time.Second
	}
	if opts.AckEvery <= 0 {
		opts.AckEvery = 64
	}
	if opts.AckAfter <= 0 {
		opts.AckAfter = 100 * time.Millisecond
	}
	if opts.TargetTimeout <= 0 {
		opts.TargetTimeout = 30 * time.Second
	}
	members := c.Members()
	pos := map[string]uint64{}
	for _, m := range members {
		switch {
		case opts.Name != "":
			r, err := c.SubscribeOn(ctx, m, &messages.Subscribe{Name: opts.Name, Filter: opts.Filter, From: opts.From, FromNow: opts.FromNow})
			if err != nil {
				return nil, memberErr(m, err)
			}
			pos[m] = r.Position
		case opts.FromNow:
			r, err := c.ReadEvents(ctx, m, &messages.ReadEvents{Filter: &opts.Filter, FromNow: true})
			if err != nil {
				return nil, memberErr(m, err)
			}
			pos[m] = r.Next
		default:
			pos[m] = max(opts.From, 1)
		}
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s := &Subscription{c: c, opts: opts, cancel: cancel, pos: pos, done: make(chan struct{})}
	for _, m := range members {
		s.wg.Add(1)
		go s.pull(runCtx, m, pos[m])
	}
	go func() {
		s.wg.Wait()
		close(s.done)
	}()
	return s, nil
}

// Close stops the pullers, acknowledges what was processed and returns
// Err. A handler call in progress sees its context cancelled.
func (s *Subscription) Close() error {
	s.cancel()
	<-s.done
	return s.Err()
}

// Done is closed once every puller has stopped (Close, or an error).
func (s *Subscription) Done() <-chan struct{} { return s.done }

// Err returns the error that ended the subscription, nil while it runs or
// after Close.
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Positions returns each member's position: every matching event below it
// was processed.
func (s *Subscription) Positions() map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]uint64, len(s.pos))
	for k, v := range s.pos {
		out[k] = v
	}
	return out
}

func (s *Subscription) fail(member string, err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = memberErr(member, err)
	}
	s.mu.Unlock()
	s.cancel()
}

// transient says a read or an ack may succeed if tried again.
func transient(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrTimeout) || errors.Is(err, ErrOverloaded) ||
		errors.Is(err, messages.ErrStoreFailed)
}

// pull is one member's puller.
func (s *Subscription) pull(ctx context.Context, member string, from uint64) {
	defer s.wg.Done()
	acked, pending, lastAck := from, 0, time.Now()
	ack := func(ctx context.Context) {
		if s.opts.Name == "" {
			return
		}
		s.mu.Lock()
		p := s.pos[member]
		s.mu.Unlock()
		if p <= acked {
			return
		}
		if _, err := s.c.AckEvents(ctx, member, &messages.AckEvents{Name: s.opts.Name, Position: p}); err == nil {
			acked, pending, lastAck = p, 0, time.Now()
		}
	}
	defer func() {
		actx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ack(actx)
		cancel()
	}()
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		req := &messages.ReadEvents{From: from, Max: s.opts.Batch, Wait: s.opts.Wait}
		if s.opts.Name != "" {
			req.Name = s.opts.Name
		} else {
			f := s.opts.Filter
			req.Filter = &f
		}
		rctx, cancel := context.WithTimeout(ctx, s.opts.Wait+s.c.timeout)
		r, err := s.c.ReadEvents(rctx, member, req)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if !transient(err) {
				s.fail(member, err)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		for i := range r.Events {
			if err := s.deliver(ctx, &r.Events[i]); err != nil {
				if ctx.Err() == nil {
					s.fail(member, err)
				}
				return
			}
			s.mu.Lock()
			s.pos[member] = r.Events[i].Seq + 1
			s.mu.Unlock()
			pending++
			if pending >= s.opts.AckEvery || time.Since(lastAck) >= s.opts.AckAfter {
				ack(ctx)
			}
		}
		from = max(from, r.Next)
		s.mu.Lock()
		s.pos[member] = max(s.pos[member], from)
		s.mu.Unlock()
		if time.Since(lastAck) >= s.opts.AckAfter {
			ack(ctx)
		}
	}
}

// deliver hands one event to the handler or the target.
func (s *Subscription) deliver(ctx context.Context, ev *messages.SubscribedEvent) error {
	if s.opts.Handler != nil {
		return s.opts.Handler(ctx, *ev)
	}
	for ctx.Err() == nil {
		e := *ev
		_, err := s.c.root.RequestFuture(s.opts.Target, &e, s.opts.TargetTimeout).Result()
		if err == nil {
			return nil
		}
		if !errors.Is(err, actor.ErrTimeout) {
			return fmt.Errorf("delivering event %d to %s: %w", ev.Seq, s.opts.Target, err)
		}
	}
	return ctx.Err()
}
