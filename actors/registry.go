package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// The registry (issue 13): ListFrames across scopes, from an index
// (registry_index.go) that a follower keeps from the log. The follower
// reads the log from the index's position (ReadAll), folds the frames'
// events (frames.FoldRegistry) a batch at a time — up to registryBatch
// records, the rows they touch held in memory for the batch only — and
// writes each batch's rows with the new position in one TableWrite. It
// wakes on the store's commits (CommitWatcher; else it polls LastSeq every
// 20 ms) and catches up at most once per Config.RegistryInterval (at once
// when it was idle longer), so that under load its writes add at most one
// commit per interval to the store. At start it
// resumes from the stored position: no rescan.
//
// The service actor answers ListFrames from the index. A request with a
// MinPosition the index has not reached is parked in the actor (no
// goroutine: a list and one timer for the earliest deadline) until the
// follower reports the position, or its WaitMillis pass.

const (
	registryBatch    = 1000
	maxRegistryWait  = 5 * time.Minute
	registryRetryGap = time.Second
)

// registryFollower keeps the index up to date with the log.
type registryFollower struct {
	store  eventstore.Store
	tables eventstore.Tables
	log    *slog.Logger
	every  time.Duration

	mu  sync.Mutex
	pos uint64
	// advanced is told each new position (the service actor).
	advanced func(pos uint64)

	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	unwatch func()
	// skipped counts records the fold could not decode (logged, skipped).
	skipped int64
}

// newRegistryFollower opens the index of store (which must implement
// eventstore.Tables) at its stored position.
func newRegistryFollower(ctx context.Context, store eventstore.Store, log *slog.Logger, every time.Duration) (*registryFollower, error) {
	t, ok := store.(eventstore.Tables)
	if !ok {
		return nil, fmt.Errorf("actors: the registry needs a store with tables; %T has none", store)
	}
	pos, err := registryPosition(ctx, t)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	return &registryFollower{store: store, tables: t, log: log, every: every, pos: pos,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}, nil
}

// position is the last global sequence the index reflects.
func (f *registryFollower) position() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pos
}

// start runs the follower until close.
func (f *registryFollower) start() {
	f.unwatch = watchCommits(f.store, func(uint64) {
		select {
		case f.wake <- struct{}{}:
		default:
		}
	})
	go f.loop()
}

func (f *registryFollower) loop() {
	defer close(f.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-f.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	var last time.Time // the last catch-up
	for {
		last = time.Now()
		for {
			more, err := f.catchUp(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				f.log.Warn("stateindex: the registry could not apply the log; retrying", "position", f.position(), "error", err)
				select {
				case <-f.stop:
					return
				case <-time.After(registryRetryGap):
				}
				continue
			}
			if !more {
				break
			}
		}
		select {
		case <-f.stop:
			return
		case <-f.wake:
		}
		if wait := f.every - time.Since(last); wait > 0 {
			// At most one catch-up per interval: the commits of the rest of
			// it gather into one index write. An idle follower answers at once.
			select {
			case <-f.stop:
				return
			case <-time.After(wait):
			}
		}
	}
}

// close stops the follower and waits for it.
func (f *registryFollower) close() {
	if f.unwatch != nil {
		f.unwatch()
	}
	select {
	case <-f.stop:
	default:
		close(f.stop)
	}
	<-f.done
}

var errBatchFull = errors.New("registry batch full")

// catchUp applies one batch of the log after the position; more says a
// further batch may be waiting.
func (f *registryFollower) catchUp(ctx context.Context) (more bool, err error) {
	from := f.position()
	last, err := f.store.LastSeq(ctx)
	if err != nil || last <= from {
		return false, err
	}
	b := newRegBatch(ctx, f.tables)
	n, through := 0, from
	err = f.store.ReadAll(ctx, from+1, func(r eventstore.Record) error {
		if n >= registryBatch {
			return errBatchFull
		}
		n++
		through = r.Seq
		if !frames.RegistryEvent(r.Type) {
			return nil
		}
		ev, err := eventstore.DecodeFrameEvent(r)
		if err != nil {
			f.skipped++
			f.log.Warn("stateindex: the registry skips a record it cannot decode", "stream", r.Stream, "version", r.Version, "error", err)
			return nil
		}
		b.apply(frames.FoldRegistry(ev, r.Version, b.get))
		if ra, ok := ev.(*frames.RetentionApplied); ok {
			b.seed(f.store, r.Stream, ra.Through)
		}
		return b.err
	})
	full := errors.Is(err, errBatchFull)
	if err != nil && !full {
		return false, err
	}
	if !full {
		// Everything up to last was read: records below it that were not
		// read were removed (retention) and hold nothing for the index.
		through = max(through, last)
	}
	ops, err := b.ops()
	if err != nil {
		return false, err
	}
	ops = append(ops, positionOp(through))
	if err := f.tables.TableWrite(ctx, registryTable, ops); err != nil {
		return false, err
	}
	f.mu.Lock()
	f.pos = through
	adv := f.advanced
	f.mu.Unlock()
	if adv != nil {
		adv(through)
	}
	return full, nil
}

// CatchUpRegistry brings the registry index of store up to the end of its
// log (for tools that open a store without a server: stateindex threads)
// and returns its position. The store must implement eventstore.Tables.
func CatchUpRegistry(ctx context.Context, store eventstore.Store) (uint64, error) {
	f, err := newRegistryFollower(ctx, store, nil, 0)
	if err != nil {
		return 0, err
	}
	for {
		more, err := f.catchUp(ctx)
		if err != nil {
			return f.position(), err
		}
		if !more {
			return f.position(), nil
		}
	}
}

// QueryRegistry answers req from store's registry index as it stands (see
// CatchUpRegistry); MinPosition and WaitMillis are not used.
func QueryRegistry(ctx context.Context, store eventstore.Store, req *messages.ListFrames) (*messages.ListFramesReply, error) {
	t, ok := store.(eventstore.Tables)
	if !ok {
		return nil, messages.Errorf(messages.CodeUnavailable, "the store %T keeps no registry", store)
	}
	q, e := compileList(req)
	if e != nil {
		return nil, e
	}
	pos, err := registryPosition(ctx, t)
	if err != nil {
		return nil, toWire(err)
	}
	return answerList(ctx, t, q, pos)
}

func answerList(ctx context.Context, t eventstore.Tables, q *regQuery, pos uint64) (*messages.ListFramesReply, error) {
	rows, next, err := queryRegistry(ctx, t, q)
	if err != nil {
		return nil, toWire(err)
	}
	out := &messages.ListFramesReply{Position: pos, Frames: make([]messages.FrameEntry, len(rows))}
	for i := range rows {
		out.Frames[i] = entryOf(&rows[i])
	}
	if next != nil {
		out.NextCursor = encodeCursor(next)
	}
	return out, nil
}

// --- the service actor ---

// registryAdvanced reports the follower's new position to the service.
type registryAdvanced struct{ pos uint64 }

// registryTick wakes the service at its earliest waiter's deadline.
type registryTick struct{}

type registryWaiter struct {
	req      *messages.ListFrames
	q        *regQuery
	to       replyTo
	deadline time.Time
}

type registryService struct {
	tables  eventstore.Tables
	pos     uint64
	waiters []registryWaiter
	// maxWaiters bounds the requests held for a MinPosition
	// (Config.MaxWaiters): past it, overloaded.
	maxWaiters int
	alarm      alarm // for the earliest held request's deadline
	self       *actor.PID
	root       *actor.RootContext
}

func (s *registryService) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		s.self, s.root = c.Self(), c.ActorSystem().Root
		return
	case *actor.Stopping:
		s.alarm.stop()
		for _, w := range s.waiters {
			w.to.send(c, w.req, failure(w.req, messages.Errorf(messages.CodeUnavailable, "the StateIndex is stopping")))
		}
		s.waiters = nil
		return
	case *registryAdvanced:
		s.pos = max(s.pos, m.pos)
		s.wakeWaiters(c, false)
		return
	case *registryTick:
		s.alarm.fired()
		s.wakeWaiters(c, true)
		return
	case actor.SystemMessage, actor.AutoReceiveMessage:
		return
	}
	req, to, ok := receiveGated(c)
	if !ok {
		if c.Sender() != nil {
			c.Respond(failure(nil, messages.Errorf(messages.CodeBadRequest, "not a StateIndex request: %T", c.Message())))
		}
		return
	}
	lf, ok := req.(*messages.ListFrames)
	if !ok {
		to.send(c, req, notServed(req))
		return
	}
	q, e := compileList(lf)
	if e != nil {
		to.send(c, req, failure(req, e))
		return
	}
	if lf.MinPosition > s.pos {
		wait := min(time.Duration(lf.WaitMillis)*time.Millisecond, maxRegistryWait)
		if wait <= 0 {
			to.send(c, req, behind(lf, s.pos))
			return
		}
		if len(s.waiters) >= s.maxWaiters {
			to.send(c, req, failure(req, messages.Errorf(messages.CodeOverloaded,
				"%d ListFrames requests already wait for the registry to reach their position, the limit: not answered, retry later", s.maxWaiters)))
			return
		}
		s.waiters = append(s.waiters, registryWaiter{req: lf, q: q, to: to, deadline: time.Now().Add(wait)})
		s.arm()
		return
	}
	s.answer(c, lf, q, to)
}

func behind(req *messages.ListFrames, pos uint64) messages.Reply {
	return failure(req, messages.Errorf(messages.CodeUnavailable,
		"the registry index is at position %d, the request asked for at least %d: retry later", pos, req.MinPosition))
}

func (s *registryService) answer(c actor.Context, req *messages.ListFrames, q *regQuery, to replyTo) {
	reply, err := answerList(context.Background(), s.tables, q, s.pos)
	if err != nil {
		to.send(c, req, failure(req, toWire(err)))
		return
	}
	to.send(c, req, reply)
}

// wakeWaiters answers the waiters the position reached and, at a tick,
// those whose deadline passed.
func (s *registryService) wakeWaiters(c actor.Context, tick bool) {
	now := time.Now()
	keep := s.waiters[:0]
	for _, w := range s.waiters {
		switch {
		case w.req.MinPosition <= s.pos:
			s.answer(c, w.req, w.q, w.to)
		case tick && !now.Before(w.deadline):
			w.to.send(c, w.req, behind(w.req, s.pos))
		default:
			keep = append(keep, w)
		}
	}
	clear(s.waiters[len(keep):])
	s.waiters = keep
	s.arm()
}

// arm sets the one timer to the earliest deadline.
func (s *registryService) arm() {
	if len(s.waiters) == 0 {
		return
	}
	at := s.waiters[0].deadline
	for _, w := range s.waiters[1:] {
		if w.deadline.Before(at) {
			at = w.deadline
		}
	}
	s.alarm.set(at, s.root, s.self, &registryTick{})
}

// startRegistry starts the follower and the service of ListFrames, when
// the store keeps tables and the configuration does not turn it off.
func (s *Server) startRegistry(table string) error {
	if s.cfg.RegistryOff {
		return nil
	}
	t, ok := s.store.(eventstore.Tables)
	if !ok {
		return nil // ListFrames is answered unavailable (not served)
	}
	var store eventstore.Store = s.store
	if table != "" && table != registryTable {
		store = renamedTables{Store: s.store, t: t, from: registryTable, to: table}
	}
	f, err := newRegistryFollower(context.Background(), store, s.cfg.Logger, s.cfg.RegistryInterval)
	if err != nil {
		return err
	}
	svc := &registryService{tables: f.tables, pos: f.position(), maxWaiters: s.cfg.MaxWaiters}
	pid := s.sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return svc }))
	root := s.sys.Root
	f.mu.Lock()
	f.advanced = func(pos uint64) { root.Send(pid, &registryAdvanced{pos: pos}) }
	f.mu.Unlock()
	f.start()
	s.registry, s.registryPID = f, pid
	s.serve(messages.OpListFrames, pid)
	return nil
}

// stopRegistry stops the follower and the service (Stop).
func (s *Server) stopRegistry() {
	if s.registry != nil {
		s.registry.close()
		s.registry = nil
	}
	if s.registryPID != nil {
		_ = s.sys.Root.PoisonFuture(s.registryPID).Wait()
		s.registryPID = nil
	}
}

// RegistryPosition is the last global sequence the server's registry
// index reflects (0 when the registry is off).
func (s *Server) RegistryPosition() uint64 {
	if f := s.registry; f != nil {
		return f.position()
	}
	return 0
}
