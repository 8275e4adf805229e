package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"

	"github.com/stateindex/stateindex/actors/wire"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// Hook sends a messages.HookNotification to a target on the notices On of
// frames in the scopes under ScopePrefix whose goal starts with GoalPrefix
// (DESIGN §11; the configuration file's hooks). It is built on a durable
// subscription named "hook."+Name to the server's own log: at least once,
// in log order, resumed after a restart from the last acknowledged
// notification.
type Hook struct {
	Name        string
	On          []frames.Notice
	ScopePrefix string
	GoalPrefix  string
	// Actor is the target: a name registered in the server's actor system,
	// or HOST:PORT/NAME for an actor on another node (it receives the
	// notification as a wire message: wire.Decode gives the
	// *messages.HookNotification, and its reply is encoded the same way).
	Actor string
	// Kind, instead of Actor, sends to the grain Identity of a cluster kind
	// ("" identity: the frame's scope). It needs HookOptions.Cluster.
	Kind     string
	Identity string
	// Timeout bounds the wait for the target's reply (default 10 s); after
	// it, or a refusal, the notification is sent again, after a backoff that
	// doubles up to 30 s.
	Timeout time.Duration
}

// HookOptions are what hooks need beyond the server.
type HookOptions struct {
	// Cluster, when the server is a cluster member, reaches kinds.
	Cluster *cluster.Cluster
	// Member is the member's address, copied into each notification.
	Member string
	Logger *slog.Logger
}

// Hooks are the running hooks of a server.
type Hooks struct {
	stops []func()
	wg    sync.WaitGroup
}

// Stop ends the hooks: a notification in flight is abandoned (it is sent
// again after a restart: at least once).
func (h *Hooks) Stop() {
	if h == nil {
		return
	}
	for _, stop := range h.stops {
		stop()
	}
	h.wg.Wait()
}

const maxHookBackoff = 30 * time.Second

// StartHooks starts hooks on the server (each on a durable subscription
// named "hook."+Name: a hook seen for the first time starts from now; one
// whose notices or scope prefix changed starts over from now, which is
// logged). It refuses a hook that cannot work, starting none. Stop stops
// them (Server.Stop does too).
func (s *Server) StartHooks(hooks []Hook, o HookOptions) (*Hooks, error) {
	if s.shared && len(hooks) > 0 {
		// Every member would run the same durable subscription over the
		// one shared log, and deliver each notification once per member.
		return nil, errors.New("hooks are not served by the members of a shared-store cluster yet: each member would deliver every notification of the shared log")
	}
	names := map[string]bool{}
	for _, h := range hooks {
		if err := checkHook(h, o); err != nil {
			return nil, err
		}
		if names[h.Name] {
			return nil, fmt.Errorf("hook %s is given twice", h.Name)
		}
		names[h.Name] = true
	}
	if o.Logger == nil {
		o.Logger = s.cfg.Logger
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	hs := &Hooks{}
	client := s.Client()
	for _, h := range hooks {
		r := &hookRunner{hook: h, opts: o, sys: s.sys, client: client, on: map[frames.Notice]bool{}, log: o.Logger}
		for _, n := range h.On {
			r.on[n] = true
		}
		ctx, cancel := context.WithCancel(context.Background())
		hs.stops = append(hs.stops, cancel)
		hs.wg.Add(1)
		go func() {
			defer hs.wg.Done()
			r.run(ctx)
		}()
	}
	s.mu.Lock()
	s.hooks = append(s.hooks, hs)
	s.mu.Unlock()
	return hs, nil
}

// run keeps the hook's subscription going until ctx ends: a subscription
// that ends with an error (a position retention removed, the store
// failing) is logged and started again after a backoff.
func (r *hookRunner) run(ctx context.Context) {
	name := "hook." + r.hook.Name
	filter := messages.EventFilter{Prefix: r.hook.ScopePrefix, Kinds: frames.NoticeEventTypes(r.hook.On)}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := r.open(ctx, name, filter)
		var e *messages.Error
		if errors.As(err, &e) && e.Code == messages.CodePositionRemoved {
			r.log.Error("stateindex: hook fell behind retention: notifications were lost; it goes on from the oldest position kept",
				"hook", r.hook.Name, "err", err)
			_, err = r.client.SubscribeOn(ctx, "", &messages.Subscribe{Name: name, Filter: filter, Reset: true, From: uint64(e.Version)})
		}
		if err == nil || ctx.Err() != nil {
			backoff = 100 * time.Millisecond
			continue
		}
		r.log.Warn("stateindex: hook stopped; starting it again", "hook", r.hook.Name, "err", err, "retry_in", backoff)
		backoff = pause(ctx, backoff)
	}
}

// pause waits d or until ctx ends, and returns the next backoff: d
// doubled, at most maxHookBackoff.
func pause(ctx context.Context, d time.Duration) time.Duration {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return min(2*d, maxHookBackoff)
}

// open runs the hook's subscription until it ends (nil when ctx ended it).
func (r *hookRunner) open(ctx context.Context, name string, filter messages.EventFilter) error {
	if _, err := r.client.SubscribeOn(ctx, "", &messages.Subscribe{Name: name, Filter: filter, FromNow: true}); err != nil {
		var e *messages.Error
		if !errors.As(err, &e) || e.Code != messages.CodeInvalidArgument {
			return err
		}
		r.log.Warn("stateindex: hook changed its notices or scope prefix: it starts over from now", "hook", r.hook.Name, "was", err)
		if _, err := r.client.SubscribeOn(ctx, "", &messages.Subscribe{Name: name, Filter: filter, FromNow: true, Reset: true}); err != nil {
			return err
		}
	}
	sub, err := r.client.Subscribe(ctx, SubscribeOptions{Name: name, Filter: filter,
		Handler: func(ctx context.Context, ev messages.SubscribedEvent) error {
			fe, err := ev.Decode()
			if err != nil {
				// Retrying cannot help: the event is skipped, loudly,
				// rather than stalling every notice after it.
				r.log.Error("stateindex: hook skips an event it cannot decode", "hook", r.hook.Name,
					"scope", ev.Scope, "version", ev.Version, "position", ev.Seq, "type", ev.Type, "err", err)
				return nil
			}
			return r.handle(ctx, ev.Scope, ev.Seq, ev.Version, ev.At, fe)
		}})
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		_ = sub.Close()
		return nil
	case <-sub.Done():
		return sub.Err()
	}
}

// checkHook refuses a hook that cannot work.
func checkHook(h Hook, o HookOptions) error {
	switch {
	case h.Name == "":
		return errors.New("a hook needs a name")
	case len(h.On) == 0:
		return fmt.Errorf("hook %s fires on no notice", h.Name)
	case (h.Actor == "") == (h.Kind == ""):
		return fmt.Errorf("hook %s needs exactly one target: an actor or a cluster kind", h.Name)
	case h.Kind != "" && o.Cluster == nil:
		return fmt.Errorf("hook %s sends to cluster kind %q, but this server is not a cluster member", h.Name, h.Kind)
	}
	for _, n := range h.On {
		if _, err := frames.ParseNotice(string(n)); err != nil {
			return fmt.Errorf("hook %s: %w", h.Name, err)
		}
	}
	return nil
}

// hookRunner is one hook at work.
type hookRunner struct {
	hook   Hook
	opts   HookOptions
	sys    *actor.ActorSystem
	client *Client
	on     map[frames.Notice]bool
	log    *slog.Logger
}

// handle sends the notifications one event gives, in order, each until it
// is acknowledged or ctx ends; it returns nil once all are (the
// subscription then acknowledges the event's position).
func (r *hookRunner) handle(ctx context.Context, scope string, seq uint64, version, at int64, ev frames.Event) error {
	for _, n := range frames.NoticesOf(ev) {
		if !r.on[n.Notice] {
			continue
		}
		goal := n.Goal
		if goal == "" && n.Frame != "" {
			var err error
			if goal, err = r.goalOf(ctx, scope, n.Frame); err != nil {
				return err // the event comes again: a notice is never dropped for a failed lookup
			}
		}
		if !strings.HasPrefix(goal, r.hook.GoalPrefix) {
			continue
		}
		note := &messages.HookNotification{Hook: r.hook.Name, Notice: string(n.Notice), Scope: scope, FrameID: n.Frame,
			Goal: goal, Reason: string(n.Reason), Position: seq, Version: version, At: at, Member: r.opts.Member}
		if n.Status != 0 {
			note.Status = n.Status.String()
		}
		if err := r.deliver(ctx, note); err != nil {
			return err
		}
	}
	return nil
}

// goalOf looks a frame's goal up (events other than frame.pushed and
// frame.popped do not carry it; a notification names it all the same):
// "" when the frame is gone (retention or a destroy removed it: a hook
// with a goal prefix does not hear of it then). Any other failure is an
// error, and the event is handled again.
func (r *hookRunner) goalOf(ctx context.Context, scope, frame string) (string, error) {
	rep, err := r.client.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: scope}, FrameID: frame})
	switch {
	case errors.Is(err, messages.ErrFrameNotFound):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("looking up the goal of frame %s in %s: %w", frame, scope, err)
	case rep.Frame == nil:
		return "", nil
	}
	return rep.Frame.Goal, nil
}

// deliver sends note until the target acknowledges it or ctx ends.
func (r *hookRunner) deliver(ctx context.Context, note *messages.HookNotification) error {
	backoff := 100 * time.Millisecond
	for {
		err := r.send(note)
		if err == nil {
			return nil
		}
		r.log.Warn("stateindex: hook target did not acknowledge; sending again", "hook", r.hook.Name,
			"notice", note.Notice, "scope", note.Scope, "frame", note.FrameID, "position", note.Position, "err", err, "retry_in", backoff)
		if backoff = pause(ctx, backoff); ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// send makes one attempt: the notification to the target, and its reply.
func (r *hookRunner) send(note *messages.HookNotification) error {
	timeout := r.hook.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	var msg any = note
	var res any
	var err error
	switch {
	case r.hook.Kind != "":
		id := r.hook.Identity
		if id == "" {
			id = note.Scope
		}
		if msg, err = wire.Encode(note, 0); err != nil {
			return err
		}
		res, err = r.opts.Cluster.Request(id, r.hook.Kind, msg, cluster.WithTimeout(timeout))
	default:
		pid := r.targetPID()
		if pid.Address != r.sys.Address() {
			if msg, err = wire.Encode(note, 0); err != nil {
				return err
			}
		}
		res, err = r.sys.Root.RequestFuture(pid, msg, timeout).Result()
	}
	if err != nil {
		return err
	}
	if m, ok := res.(*wire.Message); ok {
		if m.Err != nil {
			return m.Err
		}
		res = m.Value
	}
	if rep, ok := res.(messages.Reply); ok && rep.Failure() != nil {
		// An error reply (a node that could not read the notification
		// answers a wire Failure) has not taken it: send it again.
		return fmt.Errorf("error reply: %w", rep.Failure())
	}
	switch v := res.(type) {
	case *actor.DeadLetterResponse:
		return fmt.Errorf("no actor %s", r.targetPID())
	case *messages.HookAck:
		if v.Refused != "" {
			return fmt.Errorf("refused: %s", v.Refused)
		}
	case nil:
		return errors.New("empty reply")
	}
	return nil
}

func (r *hookRunner) targetPID() *actor.PID {
	if addr, name, ok := strings.Cut(r.hook.Actor, "/"); ok && strings.Contains(addr, ":") {
		return actor.NewPID(addr, name)
	}
	return actor.NewPID(r.sys.Address(), r.hook.Actor)
}
