package actors

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// The subscription service (messages.Subscribe, ReadEvents, AckEvents,
// Unsubscribe; DESIGN §11). It is pull-based: a subscriber long-polls
// ReadEvents, and the service holds nothing per subscriber but the parked
// poll itself (its request and where its reply goes) — no buffer of
// events, no goroutine. A read runs on a goroutine of its own (at most
// maxSubReads at once, the others queued), scanning the log with ReadAll
// from the position and filtering by stream name and record type without
// decoding; it stops at the read's Max/MaxBytes. A read that finds nothing
// parks until the store reports a commit past its position
// (eventstore.CommitWatcher; stores without it are polled every 20 ms) or
// its Wait ends. Durable subscriptions keep their filter and acknowledged
// position in the store's table subscriptionsTable.

const (
	subscriptionsTable = "subscriptions"
	// maxSubReads bounds the service's concurrent log reads.
	maxSubReads = 4
	// subScanCap bounds the records one read job scans: a read whose
	// filter matched nothing in them goes on from there in a new job.
	subScanCap = 65_536
)

// subRecord is a durable subscription as stored (msgpack).
type subRecord struct {
	Filter   messages.EventFilter `msgpack:"fl"`
	Position uint64               `msgpack:"p"`
	AckedAt  int64                `msgpack:"at"` // unix ns of the last ack (or of the creation)
	Created  int64                `msgpack:"cr"`
}

// subService is the state of the subscription service actor.
type subService struct {
	store  eventstore.Store
	tables eventstore.Tables // nil: durable subscriptions are not served
	cfg    Config
	pid    *actor.PID // for the Server (set by startSubscriptions)
	root   *actor.RootContext

	// self is the actor's own PID, set when it starts (the goroutines it
	// launches report to it).
	self *actor.PID

	// Owned by the actor's goroutine.
	head     uint64
	nextID   uint64
	parked   map[uint64]*poll
	running  int
	queue    []*poll
	shared   map[string][]*poll // reads in flight by readSpec.key: the polls they answer
	stopping bool

	jobs      sync.WaitGroup // read and table jobs in flight
	tableMu   sync.Mutex     // serializes a subscription's read-modify-writes
	stopWatch func()
}

// poll is one ReadEvents being served: resolved to its filter and
// position, parked while nothing matched.
type poll struct {
	id       uint64
	req      *messages.ReadEvents
	to       replyTo
	name     string // resolved once: "" after the first read
	filter   messages.EventFilter
	from     uint64
	max      int
	maxBytes int
	deadline time.Time
	timer    *time.Timer
	reading  bool // a job is in flight
	again    bool // a commit arrived while reading
	expired  bool
	queued   bool
}

// Messages of the service actor.
type (
	subAdvanced struct{ seq uint64 }
	subExpire   struct{ id uint64 }
	subReadDone struct {
		p   *poll
		key string // the shared read's key ("" for one of its own)
		res readResult
	}
	subTableDone struct {
		req   messages.Request
		to    replyTo
		reply messages.Reply
	}
	subStop struct{}
	// subStats asks for SubscriptionStats.
	subStats struct{}
)

// SubscriptionStats is what the subscription service holds: parked long
// polls, reads in flight and queued. It holds no events between reads.
type SubscriptionStats struct {
	Parked, Reading, Queued int
	Head                    uint64
}

// SubscriptionStats reports the subscription service's load.
func (s *Server) SubscriptionStats() SubscriptionStats {
	if s.subs == nil {
		return SubscriptionStats{}
	}
	r, err := s.sys.Root.RequestFuture(s.subs.pid, &subStats{}, 10*time.Second).Result()
	if st, ok := r.(*SubscriptionStats); ok && err == nil {
		return *st
	}
	return SubscriptionStats{}
}

// startSubscriptions spawns the service and registers it for its operations.
func (s *Server) startSubscriptions() {
	svc := &subService{store: s.store, cfg: s.cfg, root: s.sys.Root, parked: map[uint64]*poll{}, shared: map[string][]*poll{}}
	svc.tables, _ = s.store.(eventstore.Tables)
	pid := s.sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return svc }))
	svc.pid = pid
	s.subs = svc
	for _, op := range []messages.Op{messages.OpSubscribe, messages.OpReadEvents, messages.OpAckEvents, messages.OpUnsubscribe} {
		s.serve(op, pid)
	}
}

// stop answers the parked polls (with no events: the caller polls again
// and finds the server gone), waits for the jobs in flight and stops the
// actor.
func (svc *subService) stop() {
	_, _ = svc.root.RequestFuture(svc.pid, &subStop{}, time.Minute).Result()
	svc.jobs.Wait()
	_ = svc.root.PoisonFuture(svc.pid).Wait()
}

func (svc *subService) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		svc.self = c.Self()
		svc.watch()
	case *actor.Stopping:
		svc.unwatch()
	case *subStop:
		svc.stopping = true
		svc.unwatch()
		for id, p := range svc.parked {
			if !p.reading { // a read in flight answers when it ends
				svc.answer(c, p, readResult{next: p.from, head: svc.head})
				delete(svc.parked, id)
			}
		}
		svc.queue = nil // no read starts after this: stop waits for those in flight
		c.Respond(&subStop{})
	case *subStats:
		c.Respond(&SubscriptionStats{Parked: len(svc.parked), Reading: svc.running, Queued: len(svc.queue), Head: svc.head})
	case *subAdvanced:
		if m.seq > svc.head {
			svc.head = m.seq
		}
		for _, p := range svc.parked {
			if p.from <= svc.head {
				svc.schedule(c, p)
			}
		}
	case *subExpire:
		p := svc.parked[m.id]
		if p == nil {
			return
		}
		p.expired = true
		if !p.reading && !p.queued {
			delete(svc.parked, p.id)
			svc.answer(c, p, readResult{next: p.from, head: svc.head})
		}
	case *subReadDone:
		svc.running--
		polls := []*poll{m.p}
		if m.key != "" {
			polls = svc.shared[m.key]
			delete(svc.shared, m.key)
		}
		for _, p := range polls {
			svc.finishRead(c, p, m.res)
		}
		svc.startQueued(c)
	case *subTableDone:
		m.to.send(c, m.req, m.reply)
	default:
		req, to, ok := receiveGated(c)
		if !ok {
			return
		}
		if svc.stopping {
			to.send(c, req, failure(req, messages.Errorf(messages.CodeUnavailable, "the StateIndex is stopping: %s not served", req.Op())))
			return
		}
		svc.request(c, req, to)
	}
}

// watch subscribes to the store's commits (watchCommits).
func (svc *subService) watch() {
	pid, root := svc.self, svc.root
	svc.stopWatch = watchCommits(svc.store, func(seq uint64) { root.Send(pid, &subAdvanced{seq: seq}) })
}

func (svc *subService) unwatch() {
	if svc.stopWatch != nil {
		svc.stopWatch()
		svc.stopWatch = nil
	}
}

func (svc *subService) request(c actor.Context, req messages.Request, to replyTo) {
	switch r := req.(type) {
	case *messages.ReadEvents:
		svc.readEvents(c, r, to)
	case *messages.Subscribe:
		svc.tableJob(c, req, to, checkSubscribe(r), func() messages.Reply { return svc.subscribe(r) })
	case *messages.AckEvents:
		svc.tableJob(c, req, to, checkAck(r), func() messages.Reply { return svc.ack(r) })
	case *messages.Unsubscribe:
		svc.tableJob(c, req, to, checkNamed(r, r.Name), func() messages.Reply { return svc.unsubscribe(r) })
	default:
		to.send(c, req, failure(req, errUnknown(req)))
	}
}

// checkGlobal refuses a global request that names a scope or carries a
// mutation's fields.
func checkGlobal(req messages.Request) *messages.Error {
	h := req.Head()
	if h.Scope != "" || h.IfVersion != nil || h.Reason != 0 || h.RequestID != "" {
		return messages.Errorf(messages.CodeInvalidArgument, "%s names no scope, request id, version guard or reason", req.Op())
	}
	return nil
}

func (svc *subService) readEvents(c actor.Context, r *messages.ReadEvents, to replyTo) {
	if e := checkRead(r); e != nil {
		to.send(c, r, failure(r, e))
		return
	}
	if r.Name != "" && svc.tables == nil {
		to.send(c, r, failure(r, noTables()))
		return
	}
	svc.nextID++
	p := &poll{id: svc.nextID, req: r, to: to, name: r.Name, from: r.From,
		max: r.Max, maxBytes: r.MaxBytes}
	if r.Filter != nil {
		p.filter = *r.Filter
	}
	if p.max == 0 {
		p.max = messages.DefaultReadEvents
	}
	if p.maxBytes == 0 {
		p.maxBytes = messages.DefaultReadBytes
	}
	if r.Wait > 0 {
		p.deadline = time.Now().Add(r.Wait)
		id, pid, root := p.id, svc.self, svc.root
		p.timer = time.AfterFunc(r.Wait, func() { root.Send(pid, &subExpire{id: id}) })
	}
	svc.parked[p.id] = p
	svc.schedule(c, p)
}

func checkRead(r *messages.ReadEvents) *messages.Error {
	if e := checkGlobal(r); e != nil {
		return e
	}
	switch {
	case r.Name != "" && r.Filter != nil:
		return messages.Errorf(messages.CodeInvalidArgument, "ReadEvents takes a subscription name or a filter, not both")
	case r.FromNow && r.From != 0:
		return messages.Errorf(messages.CodeInvalidArgument, "ReadEvents reads from a position or from now, not both")
	case r.Name == "" && r.Filter == nil:
		return messages.Errorf(messages.CodeInvalidArgument, "ReadEvents needs a subscription name or a filter")
	case r.Max < 0 || r.Max > messages.MaxReadEvents:
		return messages.Errorf(messages.CodeInvalidArgument, "max %d events is out of range (0: %d; at most %d)", r.Max, messages.DefaultReadEvents, messages.MaxReadEvents)
	case r.MaxBytes < 0 || r.MaxBytes > messages.MaxReadBytes:
		return messages.Errorf(messages.CodeInvalidArgument, "max_bytes %d is out of range (0: %d; at most %d)", r.MaxBytes, messages.DefaultReadBytes, messages.MaxReadBytes)
	case r.Wait < 0 || r.Wait > messages.MaxReadWait:
		return messages.Errorf(messages.CodeInvalidArgument, "wait %s is out of range (0 to %s)", r.Wait, messages.MaxReadWait)
	}
	if r.Name != "" {
		return messages.CheckSubscriptionName(r.Name)
	}
	return r.Filter.Check()
}

func noTables() *messages.Error {
	return messages.Errorf(messages.CodeUnavailable, "this store keeps no tables: durable subscriptions are not served (read with a filter instead)")
}

// schedule starts a read for p, or queues it behind the reads in flight.
func (svc *subService) schedule(c actor.Context, p *poll) {
	switch {
	case p.reading || p.queued:
		p.again = p.reading
	case svc.running < maxSubReads:
		svc.startRead(c, p)
	default:
		p.queued = true
		svc.queue = append(svc.queue, p)
	}
}

func (svc *subService) startQueued(c actor.Context) {
	for svc.running < maxSubReads && len(svc.queue) > 0 {
		p := svc.queue[0]
		svc.queue[0] = nil
		svc.queue = svc.queue[1:]
		p.queued = false
		svc.startRead(c, p)
	}
}

func (svc *subService) startRead(c actor.Context, p *poll) {
	p.reading, p.again = true, false
	spec := readSpec{name: p.name, filter: p.filter, from: p.from, max: p.max, maxBytes: p.maxBytes, fromNow: p.req.FromNow}
	// Polls that read the same thing from the same position (subscribers
	// of one filter that keep up) share one read: a commit wakes them all.
	key := ""
	if p.name == "" && !spec.fromNow {
		key = spec.key()
		if polls, ok := svc.shared[key]; ok {
			svc.shared[key] = append(polls, p)
			return
		}
		svc.shared[key] = []*poll{p}
	}
	svc.running++
	pid, root := svc.self, svc.root
	svc.jobs.Add(1)
	go func() {
		defer svc.jobs.Done()
		res := svc.read(spec)
		root.Send(pid, &subReadDone{p: p, key: key, res: res})
	}()
}

// finishRead answers p, or parks it until a commit or its deadline.
func (svc *subService) finishRead(c actor.Context, p *poll, res readResult) {
	p.reading = false
	if res.head > svc.head {
		svc.head = res.head
	}
	if res.resolved {
		p.name, p.filter, p.from = "", res.filter, res.from
	}
	done := res.err != nil || len(res.events) > 0 || p.req.Wait == 0 || p.req.FromNow || p.expired || svc.stopping ||
		!time.Now().Before(p.deadline)
	if done && res.err == nil && len(res.events) == 0 && res.capped && !p.expired && !svc.stopping && p.req.Wait > 0 {
		done = false // only scanned: go on scanning
	}
	if done {
		delete(svc.parked, p.id)
		if p.timer != nil {
			p.timer.Stop()
		}
		svc.answer(c, p, res)
		return
	}
	p.from = res.next
	if res.capped || p.again || p.from <= svc.head {
		svc.schedule(c, p)
	}
}

func (svc *subService) answer(c actor.Context, p *poll, res readResult) {
	if p.timer != nil {
		p.timer.Stop()
	}
	if res.err != nil {
		p.to.send(c, p.req, failure(p.req, res.err))
		return
	}
	p.to.send(c, p.req, &messages.ReadEventsReply{Events: res.events, Next: res.next, Head: max(res.head, svc.head)})
}

// readSpec is what one read job reads.
type readSpec struct {
	name     string
	filter   messages.EventFilter
	from     uint64
	max      int
	maxBytes int
	fromNow  bool
}

// key identifies what a read reads.
func (r readSpec) key() string {
	return fmt.Sprintf("%d\x00%d\x00%d\x00%q\x00%q\x00%q", r.from, r.max, r.maxBytes, r.filter.Scope, r.filter.Prefix, r.filter.Kinds)
}

type readResult struct {
	events     []messages.SubscribedEvent
	next, head uint64
	err        *messages.Error
	capped     bool // stopped at subScanCap with nothing matched
	// resolved: a named read's filter and position, read from its table.
	resolved bool
	filter   messages.EventFilter
	from     uint64
}

var errReadFull = errors.New("read full")

// read runs off the actor's goroutine: it touches the store and spec only.
func (svc *subService) read(spec readSpec) (res readResult) {
	ctx := context.Background()
	if spec.name != "" {
		rec, ok, err := svc.getSub(ctx, spec.name)
		switch {
		case err != nil:
			res.err = storeErr(err)
			return res
		case !ok:
			res.err = messages.Errorf(messages.CodeSubscriptionNotFound, "no subscription named %q (Subscribe creates it)", spec.name)
			return res
		}
		if spec.from == 0 {
			spec.from = rec.Position
		}
		spec.filter = rec.Filter
		res.resolved, res.filter, res.from = true, rec.Filter, spec.from
	}
	if spec.fromNow {
		head, err := svc.store.LastSeq(ctx)
		if err != nil {
			res.err = storeErr(err)
		}
		res.next, res.head = head+1, head
		return res
	}
	spec.from = max(spec.from, 1)
	// removedErr is position_removed when retention removed the position
	// of a matching stream. It is checked before the read and again after
	// it: a removal that commits while the log is scanned (ReadAll reads in
	// chunks) takes records the scan then never sees, and the position is
	// a removed one by the time the reply would leave.
	removedErr := func() *messages.Error {
		rr, ok := svc.store.(eventstore.RemovalReporter)
		if !ok {
			return nil
		}
		prefix, exact := spec.filter.Prefix, false
		if spec.filter.Scope != "" {
			prefix, exact = spec.filter.Scope, true
		}
		removed, err := rr.RemovedThrough(ctx, prefix, exact)
		if err != nil {
			return storeErr(err)
		}
		if spec.from <= removed {
			e := messages.Errorf(messages.CodePositionRemoved,
				"position %d of %s was removed by retention: the oldest position still available is %d", spec.from, spec.filter, removed+1)
			e.Version = int64(removed + 1)
			return e
		}
		return nil
	}
	if res.err = removedErr(); res.err != nil {
		return res
	}
	res.next = spec.from
	size, scanned := 0, 0
	err := svc.store.ReadAll(ctx, spec.from, func(r eventstore.Record) error {
		if len(res.events) >= spec.max || (len(res.events) > 0 && size >= spec.maxBytes) {
			return errReadFull
		}
		if scanned >= subScanCap && len(res.events) == 0 {
			res.capped = true
			return errReadFull
		}
		scanned++
		if spec.filter.Matches(r.Stream, r.Type) {
			ev := messages.SubscribedEvent{Seq: r.Seq, Scope: r.Stream, Version: r.Version, Type: r.Type, Data: r.Data}
			var meta frames.Meta
			if eventstore.Unmarshal(r.Data, &meta) == nil {
				ev.Frame, ev.At = meta.Frame, meta.At
			}
			n := len(ev.Data) + len(ev.Scope) + len(ev.Type) + len(ev.Frame) + 48
			if len(res.events) > 0 && size+n > spec.maxBytes {
				return errReadFull
			}
			size += n
			res.events = append(res.events, ev)
		}
		res.next = r.Seq + 1
		return nil
	})
	if err != nil && !errors.Is(err, errReadFull) {
		res.err = storeErr(err)
		return res
	}
	if res.err = removedErr(); res.err != nil {
		res.events = nil
		return res
	}
	head, err := svc.store.LastSeq(ctx)
	if err != nil {
		res.err = storeErr(err)
		return res
	}
	res.head = head
	return res
}

func storeErr(err error) *messages.Error {
	if errors.Is(err, eventstore.ErrClosed) {
		return messages.Errorf(messages.CodeUnavailable, "the store is closed: %v", err)
	}
	return messages.Errorf(messages.CodeStoreFailed, "%v", err)
}

// tableJob runs a durable subscription's table work off the actor's
// goroutine and answers from the actor.
func (svc *subService) tableJob(c actor.Context, req messages.Request, to replyTo, bad *messages.Error, run func() messages.Reply) {
	if bad != nil {
		to.send(c, req, failure(req, bad))
		return
	}
	if svc.tables == nil {
		to.send(c, req, failure(req, noTables()))
		return
	}
	pid, root := svc.self, svc.root
	svc.jobs.Add(1)
	go func() {
		defer svc.jobs.Done()
		root.Send(pid, &subTableDone{req: req, to: to, reply: run()})
	}()
}

func (svc *subService) getSub(ctx context.Context, name string) (subRecord, bool, error) {
	v, ok, err := svc.tables.TableGet(ctx, subscriptionsTable, []byte(name))
	if err != nil || !ok {
		return subRecord{}, false, err
	}
	var rec subRecord
	if err := eventstore.Unmarshal(v, &rec); err != nil {
		return subRecord{}, false, fmt.Errorf("subscription %q: undecodable record: %w", name, err)
	}
	return rec, true, nil
}

func (svc *subService) putSub(ctx context.Context, name string, rec subRecord) error {
	v, err := eventstore.Marshal(&rec)
	if err != nil {
		return err
	}
	return svc.tables.TableWrite(ctx, subscriptionsTable, []eventstore.TableOp{{Key: []byte(name), Value: v}})
}

func checkNamed(req messages.Request, name string) *messages.Error {
	if e := checkGlobal(req); e != nil {
		return e
	}
	return messages.CheckSubscriptionName(name)
}

func checkSubscribe(r *messages.Subscribe) *messages.Error {
	if e := checkNamed(r, r.Name); e != nil {
		return e
	}
	if e := r.Filter.Check(); e != nil {
		return e
	}
	if r.FromNow && r.From != 0 {
		return messages.Errorf(messages.CodeInvalidArgument, "a subscription starts from a position or from now, not both")
	}
	return nil
}

func checkAck(r *messages.AckEvents) *messages.Error {
	if e := checkNamed(r, r.Name); e != nil {
		return e
	}
	if r.Position == 0 {
		return messages.Errorf(messages.CodeInvalidArgument, "an ack's position is the next sequence needed: at least 1")
	}
	return nil
}

func (svc *subService) subscribe(r *messages.Subscribe) messages.Reply {
	ctx := context.Background()
	svc.tableMu.Lock()
	defer svc.tableMu.Unlock()
	head, err := svc.store.LastSeq(ctx)
	if err != nil {
		return failure(r, storeErr(err))
	}
	rec, ok, err := svc.getSub(ctx, r.Name)
	if err != nil {
		return failure(r, storeErr(err))
	}
	reply := &messages.SubscribeReply{Name: r.Name, Head: head}
	if ok && !r.Reset {
		if !rec.Filter.Equal(r.Filter) {
			return failure(r, messages.Errorf(messages.CodeInvalidArgument,
				"subscription %q exists with another filter (%s, asked %s): Reset replaces it, or choose another name", r.Name, rec.Filter, r.Filter))
		}
		reply.Filter, reply.Position = rec.Filter, rec.Position
		return reply
	}
	if r.From > head+1 {
		return failure(r, messages.Errorf(messages.CodeInvalidArgument, "position %d is past the log's head %d (at most %d)", r.From, head, head+1))
	}
	now := svc.cfg.Clock().UnixNano()
	rec = subRecord{Filter: r.Filter, Position: max(r.From, 1), AckedAt: now, Created: now}
	if r.FromNow {
		rec.Position = head + 1
	}
	if err := svc.putSub(ctx, r.Name, rec); err != nil {
		return failure(r, storeErr(err))
	}
	reply.Filter, reply.Position, reply.Created = rec.Filter, rec.Position, true
	return reply
}

func (svc *subService) ack(r *messages.AckEvents) messages.Reply {
	ctx := context.Background()
	svc.tableMu.Lock()
	defer svc.tableMu.Unlock()
	rec, ok, err := svc.getSub(ctx, r.Name)
	if err != nil {
		return failure(r, storeErr(err))
	}
	if !ok {
		return failure(r, messages.Errorf(messages.CodeSubscriptionNotFound, "no subscription named %q", r.Name))
	}
	head, err := svc.store.LastSeq(ctx)
	if err != nil {
		return failure(r, storeErr(err))
	}
	if r.Position > head+1 {
		return failure(r, messages.Errorf(messages.CodeInvalidArgument, "ack position %d is past the log's head %d (at most %d)", r.Position, head, head+1))
	}
	if r.Position > rec.Position {
		rec.Position = r.Position
	}
	rec.AckedAt = svc.cfg.Clock().UnixNano()
	if err := svc.putSub(ctx, r.Name, rec); err != nil {
		return failure(r, storeErr(err))
	}
	return &messages.AckEventsReply{Position: rec.Position}
}

func (svc *subService) unsubscribe(r *messages.Unsubscribe) messages.Reply {
	ctx := context.Background()
	svc.tableMu.Lock()
	defer svc.tableMu.Unlock()
	_, ok, err := svc.getSub(ctx, r.Name)
	if err != nil {
		return failure(r, storeErr(err))
	}
	if ok {
		if err := svc.tables.TableWrite(ctx, subscriptionsTable, []eventstore.TableOp{{Key: []byte(r.Name), Delete: true}}); err != nil {
			return failure(r, storeErr(err))
		}
	}
	return &messages.UnsubscribeReply{Existed: ok}
}

// heldPosition returns the lowest acknowledged position of the durable
// subscriptions that match scope and acknowledged within hold of now (0:
// none): retention does not cut records at or above it (Config.SubscriptionHold).
func heldPosition(ctx context.Context, store eventstore.Store, scope string, now time.Time, hold time.Duration) (uint64, string, error) {
	t, ok := store.(eventstore.Tables)
	if !ok || hold <= 0 {
		return 0, "", nil
	}
	var low uint64
	var who string
	err := t.TableScan(ctx, subscriptionsTable, nil, nil, false, func(k, v []byte) (bool, error) {
		var rec subRecord
		if eventstore.Unmarshal(v, &rec) != nil {
			return true, nil
		}
		f := rec.Filter
		f.Kinds = nil // a kind filter does not narrow the scopes it reads
		if !f.Matches(scope, "") || now.UnixNano()-rec.AckedAt > int64(hold) {
			return true, nil
		}
		if low == 0 || rec.Position < low {
			low, who = rec.Position, string(k)
		}
		return true, nil
	})
	return low, who, err
}
