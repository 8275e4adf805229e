package actors

import (
	"container/heap"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// The spend ledger's outbox sender (issue 14 item 3; frames/ledger.go keeps
// the outbox itself: a scope's bindings to other scopes' reservations).
//
// A root frame bound to another scope's reservation reports its final
// spend when it finishes (or its scope is destroyed): its binding becomes
// Pending. The server's outbox worker delivers it:
//
//	read S's pending bindings (outboxSweep, on S's shard)
//	→ SettleSpend{Scope: b.Scope, RequestID: settle-…}   the reserving scope
//	→ AckSettlement{Scope: S, RequestID: settled-…}      S records the delivery
//
// Both request ids are a hash of (S, the binding, its Reported, Final): a
// delivery repeated after a crash between the two writes is the same
// request, answered as the original was (and settlements are cumulative
// anyway: one that arrives anew charges nothing). The ids carry no time,
// so the request horizon never refuses them.
//
// Finding work: a commit that leaves a scope with a pending binding kicks
// the worker for it (handler.finish). Across restarts, the store's table
// "outbox" lists the scopes that may have one: a scope's row is written
// (durably) before the append of any request that can create or grow a
// binding — a PushFrame with another scope's reservation, a SettleSpend in
// a scope that has bindings (a late charge routed to one) — and removed,
// with the scope held, once every binding of the scope finished and was
// delivered (outboxSweep). Start scans the table and kicks every scope in
// it. A store without eventstore.Tables has no such list: the worker then
// delivers on kicks only. A settlement whose kick a crash lost is not lost
// (the binding stays pending in the scope's state) but nothing finds it by
// itself: it is delivered after the scope's next commit.
//
// Deliveries run at most outboxConcurrency at once, from one scheduler
// goroutine (a goroutine per delivery running, none per scope waiting).
// The bound is high enough that the settlements of many children finishing
// at once reach their parent together, where they share its appends (a
// batch, batch.go): with 4, 64 spawners' settlements queued for seconds
// behind one another (docs/BENCHMARKS.md, issue 14). A failed delivery is retried with a
// backoff from outboxMinBackoff doubling to outboxMaxBackoff; one the
// reserving scope refuses (reservation_invalid: members that do not share
// Config.LedgerKey, or any refusal that will not pass by itself) is logged
// and retried at the slow pace. An entry is never dropped.

const (
	outboxTable       = "outbox"
	outboxConcurrency = 64
	outboxMinBackoff  = 100 * time.Millisecond
	outboxMaxBackoff  = 30 * time.Second
	// outboxRounds bounds the sweeps one delivery makes of its scope (a
	// scope whose bindings keep growing yields to the others).
	outboxRounds = 4
)

// OutboxStats is what the outbox worker did so far.
type OutboxStats struct {
	// Pending is the scopes the worker holds (due, running or waiting for
	// a retry).
	Pending int
	// Delivered counts settlements delivered and acknowledged; Retries
	// deliveries that failed and were scheduled again.
	Delivered, Retries int64
}

// outbox is the server's outbox worker.
type outbox struct {
	// owns says which scopes are this server's (placement.go).
	owns   func(scope string) bool
	log    *slog.Logger
	key    []byte            // the ledger key: settlements are signed
	tables eventstore.Tables // nil: no durable discovery (kicks only)
	local  *Client           // the server's own shards (the sweep)
	client *Client           // where settlements go (set by start)

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	kicked  map[string]bool // scope → forced (due now, backoff or not)
	wake    chan struct{}
	waiters []chan struct{} // DrainOutbox calls, closed when idle
	started bool

	// The scheduler's own (its goroutine alone touches them).
	entries map[string]*obEntry
	ready   []string
	delayed obHeap
	active  int
	results chan obResult

	delivered, retries atomic.Int64
	pending            atomic.Int64

	// hook, for tests: called at "settle" (before a SettleSpend) and
	// "ack" (after its reply, before the AckSettlement); true stops the
	// delivery there, as a crash would (the entry waits outboxMaxBackoff).
	hook atomic.Pointer[func(stage, scope string) bool]
}

type obEntry struct {
	at      time.Time // due (zero: now)
	backoff time.Duration
	running bool
	dirty   bool // kicked while running: run again
	queued  bool // in ready
}

type obResult struct {
	scope string
	err   error
	slow  bool // a refusal that will not pass by itself
}

func newOutbox(s *Server) *outbox {
	o := &outbox{owns: s.owns, log: s.cfg.Logger, key: s.cfg.LedgerKey, kicked: map[string]bool{}, wake: make(chan struct{}, 1), done: make(chan struct{}),
		entries: map[string]*obEntry{}, results: make(chan obResult, outboxConcurrency)}
	if t, ok := s.store.(eventstore.Tables); ok {
		o.tables = t
	}
	o.ctx, o.cancel = context.WithCancel(context.Background())
	return o
}

// start runs the worker, sending settlements through c (the server's own
// Client standalone; the member's cluster Client in a cluster, which
// reaches a reserving scope at its home member).
func (o *outbox) start(local, c *Client) {
	o.mu.Lock()
	if o.started || o.ctx.Err() != nil {
		o.mu.Unlock()
		return
	}
	o.started, o.local, o.client = true, local, c
	o.mu.Unlock()
	go o.run()
}

// stop ends the worker: deliveries in flight are cancelled (what they did
// not finish is found again on the next start). Safe to call more than
// once, and without start.
func (o *outbox) stop() {
	o.cancel()
	o.mu.Lock()
	started := o.started
	o.started = true // a start after stop does nothing
	o.mu.Unlock()
	if started {
		<-o.done
	}
}

// kick tells the worker that scope may have a pending settlement. It never
// blocks (shards call it).
func (o *outbox) kick(scope string, force bool) {
	o.mu.Lock()
	o.kicked[scope] = o.kicked[scope] || force
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// scan kicks every scope the table lists.
func (o *outbox) scan(ctx context.Context, force bool) error {
	if o.tables == nil {
		return nil
	}
	var scopes []string
	err := o.tables.TableScan(ctx, outboxTable, nil, nil, false, func(k, _ []byte) (bool, error) {
		scopes = append(scopes, string(k))
		return true, nil
	})
	for _, sc := range scopes {
		if o.owns(sc) { // a shared store's table lists every member's scopes
			o.kick(sc, force)
		}
	}
	return err
}

func (o *outbox) run() {
	defer close(o.done)
	if err := o.scan(o.ctx, false); err != nil && o.ctx.Err() == nil {
		o.log.Warn("stateindex: reading the outbox table failed; pending settlements are delivered when their scopes are written to", "error", err)
	}
	var timer *time.Timer
	for {
		o.take()
		now := time.Now()
		o.promote(now)
		o.dispatch()
		o.notifyIdle()
		var tc <-chan time.Time
		if len(o.delayed) > 0 {
			d := time.Until(o.delayed[0].at)
			if timer == nil {
				timer = time.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			tc = timer.C
		}
		select {
		case <-o.ctx.Done():
			for ; o.active > 0; o.active-- {
				<-o.results
			}
			o.mu.Lock()
			for _, w := range o.waiters {
				close(w)
			}
			o.waiters = nil
			o.mu.Unlock()
			return
		case <-o.wake:
		case r := <-o.results:
			o.finish(r)
		case <-tc:
		}
		if timer != nil && !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// take moves the kicks into the entries.
func (o *outbox) take() {
	o.mu.Lock()
	kicked := o.kicked
	o.kicked = map[string]bool{}
	o.mu.Unlock()
	if kicked[""] { // DrainOutbox: every entry is due now
		delete(kicked, "")
		for sc, e := range o.entries {
			e.backoff = 0
			if e.running {
				e.dirty = true
			} else {
				e.at = time.Time{}
				o.enqueue(sc, e)
			}
		}
	}
	for sc, force := range kicked {
		e := o.entries[sc]
		switch {
		case e == nil:
			e = &obEntry{}
			o.entries[sc] = e
			o.enqueue(sc, e)
		case e.running:
			e.dirty = true
			if force {
				e.backoff = 0
			}
		case e.queued:
		case force || e.backoff == 0:
			// Due now (a kick from a commit does not cut a retry's wait
			// short: DrainOutbox does).
			e.at, e.backoff = time.Time{}, 0
			o.enqueue(sc, e)
		}
	}
	o.pending.Store(int64(len(o.entries)))
}

func (o *outbox) enqueue(sc string, e *obEntry) {
	if !e.queued {
		e.queued = true
		o.ready = append(o.ready, sc)
	}
}

// promote moves the entries whose retry is due into ready.
func (o *outbox) promote(now time.Time) {
	for len(o.delayed) > 0 && !o.delayed[0].at.After(now) {
		d := heap.Pop(&o.delayed).(obDelay)
		if e := o.entries[d.scope]; e != nil && !e.running && !e.queued && e.at.Equal(d.at) {
			o.enqueue(d.scope, e)
		}
	}
}

// dispatch starts deliveries of ready scopes, up to the bound.
func (o *outbox) dispatch() {
	for o.active < outboxConcurrency && len(o.ready) > 0 {
		sc := o.ready[0]
		o.ready = o.ready[1:]
		e := o.entries[sc]
		if e == nil || !e.queued {
			continue
		}
		e.queued, e.running, e.dirty = false, true, false
		o.active++
		go func() { o.results <- o.deliver(o.ctx, sc) }()
	}
	if len(o.ready) == 0 {
		o.ready = nil // let the backing array go
	}
}

// finish records a delivery's outcome: done (the entry goes), or a retry.
func (o *outbox) finish(r obResult) {
	o.active--
	e := o.entries[r.scope]
	if e == nil {
		return
	}
	e.running = false
	switch {
	case r.err == nil && e.dirty:
		e.backoff, e.at = 0, time.Time{}
		o.enqueue(r.scope, e)
	case r.err == nil:
		delete(o.entries, r.scope)
	default:
		o.retries.Add(1)
		switch {
		case r.slow:
			e.backoff = outboxMaxBackoff
		case e.backoff == 0:
			e.backoff = outboxMinBackoff
		default:
			e.backoff = min(2*e.backoff, outboxMaxBackoff)
		}
		if e.dirty && e.backoff < outboxMaxBackoff {
			e.backoff = 0 // kicked meanwhile: new work, try again now
		}
		if e.backoff == 0 {
			o.enqueue(r.scope, e)
		} else {
			e.at = time.Now().Add(e.backoff)
			heap.Push(&o.delayed, obDelay{at: e.at, scope: r.scope})
		}
	}
	o.pending.Store(int64(len(o.entries)))
}

// notifyIdle answers the DrainOutbox calls once nothing is pending.
func (o *outbox) notifyIdle() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.waiters) == 0 || len(o.entries) > 0 || len(o.kicked) > 0 || o.active > 0 {
		return
	}
	for _, w := range o.waiters {
		close(w)
	}
	o.waiters = nil
}

// deliver delivers scope's pending settlements.
func (o *outbox) deliver(ctx context.Context, scope string) obResult {
	for round := 0; ; round++ {
		sw, err := call[*outboxSwept](ctx, o.local, &outboxSweep{scope: scope, drop: true})
		if err != nil {
			return o.failed(scope, "reading the scope's outbox", err)
		}
		if len(sw.pending) == 0 {
			return obResult{scope: scope}
		}
		if round == outboxRounds {
			return obResult{scope: scope, err: errors.New("more to deliver")}
		}
		for _, b := range sw.pending {
			if o.stopAt("settle", scope) {
				return obResult{scope: scope, err: errors.New("stopped (test hook)"), slow: true}
			}
			settle := &messages.SettleSpend{Header: messages.Header{Scope: b.Scope, RequestID: settleRequestID("settle-", scope, &b)},
				Token: b.Token, From: scope, FrameID: b.Root, Spent: b.Reported, Previous: b.Delivered, Final: b.Final}
			SignSettlement(o.key, settle)
			_, err := o.client.SettleSpend(ctx, settle)
			if err != nil {
				return o.failed(scope, "settling reservation "+b.Reservation+" in scope "+b.Scope, err)
			}
			if o.stopAt("ack", scope) {
				return obResult{scope: scope, err: errors.New("stopped (test hook)"), slow: true}
			}
			ack := &messages.AckSettlement{Header: messages.Header{Scope: scope, RequestID: settleRequestID("settled-", scope, &b)},
				ReservationID: b.Reservation, Through: b.Reported, Final: b.Final}
			SignAck(o.key, ack)
			_, err = o.client.AckSettlement(ctx, ack)
			if err != nil {
				return o.failed(scope, "recording the delivery of reservation "+b.Reservation, err)
			}
			o.delivered.Add(1)
		}
	}
}

func (o *outbox) stopAt(stage, scope string) bool {
	if h := o.hook.Load(); h != nil {
		return (*h)(stage, scope)
	}
	return false
}

// failed classifies a delivery's error: transient ones are retried soon,
// refusals at the slow pace, with a warning.
func (o *outbox) failed(scope, what string, err error) obResult {
	r := obResult{scope: scope, err: err}
	if o.ctx.Err() != nil {
		return r // stopping
	}
	var me *messages.Error
	if errors.As(err, &me) {
		switch me.Code {
		case messages.CodeUnavailable, messages.CodeOverloaded, messages.CodeStoreFailed, messages.CodeInternal, messages.CodeVersionConflict:
			return r
		case messages.CodeReservationInvalid:
			r.slow = true
			o.log.Warn("stateindex: the reserving scope refuses the reservation token of a pending settlement (reservation_invalid): "+
				"cluster members that do not share Config.LedgerKey cannot settle each other's reservations; retrying every 30s, the settlement is kept",
				"scope", scope, "doing", what, "error", err)
			return r
		}
		r.slow = true
		o.log.Warn("stateindex: a pending settlement was refused; retrying every 30s, the settlement is kept", "scope", scope, "doing", what, "error", err)
	}
	return r // a timeout or a transport error: retried soon
}

// settleRequestID is the deterministic request id of a delivery step of
// binding b of scope: the same delivery sent again is the same request.
func settleRequestID(prefix, scope string, b *frames.Binding) string {
	h := sha256.New()
	var n [8]byte
	for _, s := range []string{scope, b.Scope, b.Reservation, b.Root, b.Token} {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	for _, v := range []int64{b.Reported, b.Delivered} {
		binary.BigEndian.PutUint64(n[:], uint64(v))
		h.Write(n[:])
	}
	if b.Final {
		h.Write([]byte{1})
	} else {
		h.Write([]byte{0})
	}
	return prefix + hex.EncodeToString(h.Sum(nil))[:32]
}

// DrainOutbox delivers every settlement pending now — of the scopes kicked
// and of those the outbox table lists — and returns once none is pending,
// or with ctx's error when it ends first (a settlement the reserving scope
// keeps refusing is retried until then). Tests and tools call it instead
// of waiting.
func (s *Server) DrainOutbox(ctx context.Context) error {
	o := s.outbox
	if o == nil {
		return nil
	}
	o.mu.Lock()
	started := o.started && o.ctx.Err() == nil
	o.mu.Unlock()
	if !started {
		return errors.New("actors: the outbox worker is not running")
	}
	if err := o.scan(ctx, true); err != nil {
		return err
	}
	w := make(chan struct{})
	o.mu.Lock()
	for sc := range o.kicked {
		o.kicked[sc] = true
	}
	o.kicked[""] = true // a marker: every entry is due now (take skips it)
	o.waiters = append(o.waiters, w)
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
	select {
	case <-w:
		if o.ctx.Err() != nil {
			return errors.New("actors: the server stopped")
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// OutboxStats says what the outbox worker holds and did.
func (s *Server) OutboxStats() OutboxStats {
	if s.outbox == nil {
		return OutboxStats{}
	}
	return OutboxStats{Pending: int(s.outbox.pending.Load()), Delivered: s.outbox.delivered.Load(), Retries: s.outbox.retries.Load()}
}

// obDelay is a retry due at at.
type obDelay struct {
	at    time.Time
	scope string
}

type obHeap []obDelay

func (h obHeap) Len() int           { return len(h) }
func (h obHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h obHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *obHeap) Push(x any)        { *h = append(*h, x.(obDelay)) }
func (h *obHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// outboxSweep is the internal request that reads a scope's pending
// settlements on its shard and, when drop is set and every binding of the
// scope finished and was delivered, removes its outbox row (with the scope
// held, so that no request that writes the row runs meanwhile).
type outboxSweep struct {
	scope string
	drop  bool
}

func (r *outboxSweep) ScopeName() string      { return r.scope }
func (r *outboxSweep) Head() *messages.Header { return &messages.Header{Scope: r.scope} }
func (r *outboxSweep) Op() messages.Op        { return messages.NumOps }

// outboxSwept answers an outboxSweep.
type outboxSwept struct {
	messages.Result
	pending []frames.Binding
	removed bool
}

// sweepOutbox answers an outboxSweep of a cached scope.
func (h *handler) sweepOutbox(r *outboxSweep, e *entry) outcome {
	st := e.st
	reply := &outboxSwept{Result: messages.Result{Version: st.Version}, pending: st.PendingSettlements()}
	open := false
	for _, b := range st.Bindings {
		if !b.Final {
			open = true
			break
		}
	}
	if len(reply.pending) > 0 || open || !r.drop || h.ob == nil || h.ob.tables == nil {
		return replied(reply)
	}
	// Every binding finished and was delivered (those left are kept until
	// LedgerKeep prunes them; a late charge routed to one writes the row
	// again before its append).
	e.outboxRow = false
	tables, scope := h.ob.tables, st.Scope
	return outcome{job: &job{scope: scope,
		run: func() any {
			return tables.TableWrite(context.Background(), outboxTable, []eventstore.TableOp{{Key: []byte(scope), Delete: true}})
		},
		finish: func(v any) outcome {
			if err, _ := v.(error); err != nil {
				return replied(failure(r, toWire(err)))
			}
			reply.removed = true
			return replied(reply)
		}}}
}

// outboxPrepared marks a mutation whose outbox row is written.
type outboxPrepared struct{}

// outboxPrepare is the prepare of the requests that can create or grow a
// binding (PushFrame with another scope's reservation; SettleSpend in a
// scope that has bindings): it writes the scope's outbox row, durably,
// before the request is decided and appended, unless the row is known to
// be there.
func (h *handler) outboxPrepare(st *frames.State, req messages.Request) *job {
	if h.ob == nil || h.ob.tables == nil {
		return nil
	}
	scope := st.Scope
	if e, ok := h.cache.Peek(scope); !ok || e.outboxRow {
		return nil
	}
	switch r := req.(type) {
	case *messages.PushFrame:
		if r.Reservation == "" {
			return nil
		}
		cl, err := parseReservation(h.cfg.LedgerKey, r.Reservation)
		if err != nil || cl.Scope == scope {
			return nil // refused by decide, or a child here: no binding
		}
	case *messages.SettleSpend:
		if len(st.Bindings) == 0 {
			return nil
		}
	default:
		return nil
	}
	tables := h.ob.tables
	return &job{scope: scope,
		run: func() any {
			return tables.TableWrite(context.Background(), outboxTable, []eventstore.TableOp{{Key: []byte(scope), Value: []byte{1}}})
		},
		finish: func(v any) outcome {
			if err, _ := v.(error); err != nil {
				return replied(failure(req, toWire(err)))
			}
			e, ok := h.cache.Peek(scope)
			if !ok {
				// Evicted (by count) while the row was written. The scope
				// was held, so the row is there: the reload must know it,
				// or it writes the row again, and under cache pressure
				// again and again while the request ages.
				return outcome{job: h.loadJobThen(req, func(e *entry) { e.outboxRow = true })}
			}
			e.outboxRow = true
			m, _ := req.(messages.MutatingRequest)
			h.prepared = outboxPrepared{}
			defer func() { h.prepared = nil }()
			return h.mutate(m, entryFor(req), e, LoadInfo{}, nil)
		}}
}

// kickOutbox kicks the worker for a scope whose state, after a commit, has
// a pending settlement.
func (h *handler) kickOutbox(st *frames.State) {
	if h.ob == nil || len(st.Bindings) == 0 {
		return
	}
	for _, b := range st.Bindings {
		if b.Pending() {
			h.ob.kick(st.Scope, false)
			return
		}
	}
}
