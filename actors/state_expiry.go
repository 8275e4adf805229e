package actors

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// Background expiry of scope state (issue 15; frames/kv.go has the rules).
//
// An expired key is absent to every read at once; it leaves the state, and
// so its snapshots, with the next change of its level or with an
// ExpireState (state.expired). This file makes sure that ExpireState comes
// by itself, through the scope's actor like every write, without loading
// scopes on a schedule:
//
//   - The store's table "state.expiry" (eventstore.Tables) holds a row
//     (time, scope) — the key is the time as 8 big-endian bytes, then the
//     scope — at or before the earliest expiry of every scope with a key
//     that has a TTL. Rows are wake-ups: one early, or for a scope with
//     nothing left to expire, costs an ExpireState that writes nothing.
//   - A ChangeState that sets a TTL writes the row, durably, before it is
//     decided and appended (stateExpiryPrepare), unless the scope's entry
//     knows a row at or before the new expiry is there (entry.stateRow). A
//     write-ahead row rather than an index a follower derives from the log
//     (as the registry's): it is correct across restarts with no position
//     to keep and no log to read, and it costs a table write only when a
//     scope's earliest expiry moves earlier — a scope's first TTL, or one
//     shorter than any it has — never for a sliding TTL pushed back or a
//     fixed one set again. Written before the append, a row can never be
//     missing for a key that is durable (a crash between the two leaves a
//     row with no key: a wake-up that finds nothing).
//   - The expirer (one goroutine per server) reads the table from its
//     first row: the rows due by the server's clock, at most
//     stateExpiryBatch scopes a pass, stateExpiryConcurrency at once. For
//     each scope it sends ExpireState, then an internal stateExpirySweep
//     that, on the scope's shard with the scope held, writes a row at the
//     scope's next expiry and deletes the rows that fired (in one table
//     write). Holding the scope keeps the invariant: no ChangeState runs
//     between reading the next expiry and replacing the rows.
//   - It then sleeps until the earliest row not yet due, but never longer
//     than Config.StateExpiryCheck (1 s): a row written earlier than the
//     expirer's wake-up kicks it; the bound covers the clock jumping ahead.
//     A pass that stopped at its bound runs the next at once. At start the
//     first pass runs at once: keys that expired while the server was down
//     are removed by it.
//   - A scope whose expiry fails (the store refusing writes, overload) is
//     retried after stateExpiryRetry; its rows stay until a sweep succeeds.
//
// The bound, for the README: an expired key leaves disk (a state.expired
// in the log, gone from the state and the next snapshot) within
// StateExpiryCheck (default 1 s) of its expiry while the server runs —
// usually within milliseconds, the expirer's timer being set to the
// earliest expiry — plus the time to expire the scopes due before it
// (stateExpiryBatch scopes a pass, each one ExpireState append, 16 at
// once, group-committed); a key that expired while the server was down,
// by the first pass after it starts. Reads never show it meanwhile.
//
// A store without tables keeps the rows in memory (a MemoryStore's
// tables): expiry then works while the server runs, and a restart forgets
// the schedule (a scope's expired keys then leave with the next change of
// their level or an ExpireState sent by hand).

const (
	stateExpiryTable = "state.expiry"
	// stateExpiryBatch bounds the scopes one pass expires;
	// stateExpiryScan the rows it reads (due rows of scopes waiting for a
	// retry are read and skipped).
	stateExpiryBatch = 256
	stateExpiryScan  = 4 * stateExpiryBatch
	// stateExpiryConcurrency bounds the scopes expired at once: their
	// ExpireState appends share group commits.
	stateExpiryConcurrency = 16
	// stateExpiryRetry is how long a scope whose expiry failed waits.
	stateExpiryRetry = 30 * time.Second
	// defaultStateExpiryCheck is Config.StateExpiryCheck's default.
	defaultStateExpiryCheck = time.Second
)

// StateExpiryReport is what one pass of the state expirer did.
type StateExpiryReport struct {
	// Scopes are the scopes the pass expired (every scope whose row was
	// due, whether or not a key had expired).
	Scopes []ScopeStateExpiry
	Errors []error
	// More says the pass stopped at its bound with rows still due (the
	// expirer runs the next pass at once).
	More bool
	// Next is the earliest row not yet due (server time, unix ns; 0:
	// none).
	Next int64
}

// Removed is how many keys the pass removed.
func (r StateExpiryReport) Removed() int {
	n := 0
	for _, s := range r.Scopes {
		n += s.Removed
	}
	return n
}

// ScopeStateExpiry is one scope of a pass.
type ScopeStateExpiry struct {
	Scope string
	// Removed is the keys its ExpireState removed; Next the scope's next
	// expiry after it (unix ns; 0: no key with a TTL left).
	Removed int
	Next    int64
}

// stateExpirer runs the passes; one at a time.
type stateExpirer struct {
	owns   func(scope string) bool // this server's scopes (placement.go): a shared store's table lists every member's
	tables eventstore.Tables
	rows   rowWriter // the prepares' and sweeps' writes to tables
	clock  func() time.Time
	log    *slog.Logger
	check  time.Duration // <0: no background loop
	batch  int
	c      *Client // set by start

	mu    sync.Mutex           // one pass at a time; guards retry
	retry map[string]time.Time // scope → not before (monotonic time)

	// armed is the server time the loop looks next (unix ns; 0: not
	// sleeping): a row written earlier kicks it.
	armed   atomic.Int64
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	started bool
	// hook, for tests: called with the report of every background pass.
	hook atomic.Pointer[func(StateExpiryReport)]
}

func newStateExpirer(s *Server) *stateExpirer {
	x := &stateExpirer{owns: s.owns, clock: s.cfg.Clock, log: s.cfg.Logger, check: s.cfg.StateExpiryCheck, batch: stateExpiryBatch,
		retry: map[string]time.Time{}, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if t, ok := s.store.(eventstore.Tables); ok {
		x.tables = t
	} else {
		x.tables = eventstore.NewMemory() // its tables only: a schedule that lasts while the server runs
	}
	x.rows.tables = x.tables
	return x
}

// rowWriter writes the rows of the state expirer's table for the shards'
// jobs, the writes that arrive while one is committed gathered into the
// next TableWrite: a table write is a bbolt commit of its own (two
// fsyncs), and 64 scopes writing their first TTL at once would otherwise
// queue behind one another's (docs/BENCHMARKS.md, issue 15: set+row).
// Ops keep their order (a batch applies them in order); two writes of one
// scope never share a batch anyway, its scope being held by the first.
type rowWriter struct {
	tables  eventstore.Tables
	mu      sync.Mutex
	ops     []eventstore.TableOp
	waiters []chan error
	running bool
}

// write applies ops, durably, and returns once they are (or failed, with
// the other writes of their batch).
func (w *rowWriter) write(ops []eventstore.TableOp) error {
	done := make(chan error, 1)
	w.mu.Lock()
	w.ops = append(w.ops, ops...)
	w.waiters = append(w.waiters, done)
	if !w.running {
		w.running = true
		go w.flush()
	}
	w.mu.Unlock()
	return <-done
}

func (w *rowWriter) flush() {
	for {
		w.mu.Lock()
		ops, waiters := w.ops, w.waiters
		w.ops, w.waiters = nil, nil
		if len(waiters) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		err := w.tables.TableWrite(context.Background(), stateExpiryTable, ops)
		for _, d := range waiters {
			d <- err
		}
	}
}

// start runs the background loop (unless Config.StateExpiryCheck is
// negative) through c, the server's own Client.
func (x *stateExpirer) start(c *Client) {
	x.c = c
	if x.check < 0 {
		return
	}
	x.started = true
	go x.loop()
}

// close ends the loop; a pass in flight ends at its next request.
func (x *stateExpirer) close() {
	select {
	case <-x.stop:
	default:
		close(x.stop)
	}
	if x.started {
		<-x.done
	}
}

// kick wakes the loop when a row at (server time, unix ns) comes before
// its next look. It never blocks (shards call it).
func (x *stateExpirer) kick(at int64) {
	if a := x.armed.Load(); a != 0 && at >= a {
		return
	}
	select {
	case x.wake <- struct{}{}:
	default:
	}
}

func (x *stateExpirer) loop() {
	defer close(x.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-x.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	timer := time.NewTimer(0) // the first pass at once: what expired while the server was down
	defer timer.Stop()
	for {
		select {
		case <-x.stop:
			return
		case <-timer.C:
		case <-x.wake:
		}
		x.armed.Store(0)
		rep := x.pass(ctx)
		if ctx.Err() != nil {
			return
		}
		for _, err := range rep.Errors {
			x.log.Warn("stateindex: state expiry", "error", err)
		}
		if n := rep.Removed(); n > 0 {
			x.log.Debug("stateindex: state expiry removed expired keys", "scopes", len(rep.Scopes), "keys", n)
		}
		if h := x.hook.Load(); h != nil {
			(*h)(rep)
		}
		wait := x.check
		now := x.clock().UnixNano()
		switch {
		case rep.More:
			wait = 0
		case rep.Next > 0:
			wait = min(wait, time.Duration(max(rep.Next-now, 0)))
		}
		x.armed.Store(now + int64(wait))
		timer.Reset(wait)
	}
}

// pass expires the scopes whose rows are due.
func (x *stateExpirer) pass(ctx context.Context) StateExpiryReport {
	x.mu.Lock()
	defer x.mu.Unlock()
	var rep StateExpiryReport
	now := x.clock().UnixNano()
	mono := time.Now()
	due := map[string][]int64{}
	var order []string
	var bad [][]byte
	scanned := 0
	err := x.tables.TableScan(ctx, stateExpiryTable, nil, nil, false, func(k, _ []byte) (bool, error) {
		at, scope, ok := parseExpiryRow(k)
		if !ok {
			bad = append(bad, slices.Clone(k))
			return true, nil
		}
		if at > now {
			rep.Next = at
			return false, nil
		}
		if !x.owns(scope) {
			return true, nil
		}
		if scanned++; scanned > stateExpiryScan {
			rep.More = true
			return false, nil
		}
		if until, wait := x.retry[scope]; wait && mono.Before(until) {
			return true, nil
		}
		if _, seen := due[scope]; !seen {
			if len(order) == x.batch {
				rep.More = true
				return false, nil
			}
			order = append(order, scope)
		}
		due[scope] = append(due[scope], at)
		return true, nil
	})
	if err != nil {
		rep.Errors = append(rep.Errors, fmt.Errorf("reading the %s table: %w", stateExpiryTable, err))
		return rep
	}
	if len(bad) > 0 { // written by nothing this package knows: dropped
		ops := make([]eventstore.TableOp, len(bad))
		for i, k := range bad {
			ops[i] = eventstore.TableOp{Key: k, Delete: true}
		}
		if err := x.tables.TableWrite(ctx, stateExpiryTable, ops); err != nil {
			rep.Errors = append(rep.Errors, err)
		}
	}
	results := make([]ScopeStateExpiry, len(order))
	errs := make([]error, len(order))
	sem := make(chan struct{}, stateExpiryConcurrency)
	var wg sync.WaitGroup
	for i, scope := range order {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			results[i], errs[i] = x.expire(ctx, scope, due[scope])
		})
	}
	wg.Wait()
	for i, scope := range order {
		if errs[i] != nil {
			if ctx.Err() == nil {
				x.retry[scope] = time.Now().Add(stateExpiryRetry)
				rep.Errors = append(rep.Errors, fmt.Errorf("scope %q: %w (retried in %s)", scope, errs[i], stateExpiryRetry))
			}
			continue
		}
		delete(x.retry, scope)
		rep.Scopes = append(rep.Scopes, results[i])
	}
	return rep
}

// StateExpiryRequestPrefix starts the request ids of the expirer's
// ExpireState requests, so that tools telling the server's own writes from
// callers' (the crash checker) know them.
const StateExpiryRequestPrefix = "state-expiry:"

// expire removes scope's expired keys (ExpireState) and replaces the rows
// that fired by one at the scope's next expiry (stateExpirySweep).
func (x *stateExpirer) expire(ctx context.Context, scope string, fired []int64) (ScopeStateExpiry, error) {
	out := ScopeStateExpiry{Scope: scope}
	r, err := x.c.ExpireState(ctx, &messages.ExpireState{Header: messages.Header{Scope: scope, RequestID: StateExpiryRequestPrefix + NewID()}})
	if err != nil {
		return out, fmt.Errorf("expire state: %w", err)
	}
	out.Removed = r.Removed
	sw, err := call[*stateExpirySwept](ctx, x.c, &stateExpirySweep{scope: scope, fired: fired})
	if err != nil {
		return out, fmt.Errorf("its next expiry: %w", err)
	}
	out.Next = sw.next
	return out, nil
}

// expiryRow is the table key of a wake-up for scope at (unix ns): at most
// 8 + eventstore.MaxStreamBytes (128) bytes, within a table key's bound.
func expiryRow(at int64, scope string) []byte {
	k := make([]byte, 8, 8+len(scope))
	binary.BigEndian.PutUint64(k, uint64(max(at, 0)))
	return append(k, scope...)
}

// A row's key fits a table key (a compile-time check).
var _ [eventstore.MaxTableKey - 8 - eventstore.MaxStreamBytes]struct{}

func parseExpiryRow(k []byte) (at int64, scope string, ok bool) {
	if len(k) <= 8 {
		return 0, "", false
	}
	v := binary.BigEndian.Uint64(k[:8])
	if v > math.MaxInt64 {
		return 0, "", false
	}
	return int64(v), string(k[8:]), true
}

// RunStateExpiry runs one pass of the state expirer now: every scope whose
// earliest expiry has passed gets an ExpireState (at most a pass's bound of
// them: the report says More when some are left). The background expirer
// runs the same passes by itself; tools and tests call this instead of
// waiting.
func (s *Server) RunStateExpiry(ctx context.Context) (StateExpiryReport, error) {
	if s.expiry == nil || s.expiry.c == nil {
		return StateExpiryReport{}, errors.New("actors: the state expirer is not running")
	}
	return s.expiry.pass(ctx), nil
}

// stateRowWritten marks a ChangeState whose expiry row is written.
type stateRowWritten struct{}

// stateExpiryPrepare is ChangeState's prepare: when an operation sets a
// TTL that would expire before any row the scope is known to have, the row
// is written, durably, before the request is decided and appended. The
// row is at the request's time now plus the shortest TTL it sets: the
// decision's time comes later, so every expiry it decides is at or after
// the row.
func (h *handler) stateExpiryPrepare(st *frames.State, req messages.Request) *job {
	x := h.sx
	r, ok := req.(*messages.ChangeState)
	if x == nil || !ok {
		return nil
	}
	var ttl int64 // ms
	for _, op := range r.Ops {
		if op.TTLMillis > 0 && (ttl == 0 || op.TTLMillis < ttl) {
			ttl = op.TTLMillis
		}
	}
	scope := st.Scope
	e, cached := h.cache.Peek(scope)
	if ttl == 0 || ttl > math.MaxInt64/1_000_000 || !cached {
		return nil // no TTL, or one decide refuses
	}
	now := h.cfg.Clock().UnixNano()
	at := now + ttl*1_000_000
	if at < now || (e.stateRow != 0 && e.stateRow <= at) {
		return nil
	}
	return &job{scope: scope,
		run: func() any {
			return x.rows.write([]eventstore.TableOp{{Key: expiryRow(at, scope), Value: []byte{1}}})
		},
		finish: func(v any) outcome {
			if err, _ := v.(error); err != nil {
				return replied(failure(req, toWire(err)))
			}
			x.kick(at)
			mark := func(e *entry) {
				if e.stateRow == 0 || at < e.stateRow {
					e.stateRow = at
				}
			}
			e, ok := h.cache.Peek(scope)
			if !ok {
				// Evicted (by count) while the row was written: the reload
				// must know of it, or it writes the row again.
				return outcome{job: h.loadJobThen(req, mark)}
			}
			mark(e)
			h.prepared = stateRowWritten{}
			defer func() { h.prepared = nil }()
			return h.mutate(r, entryFor(req), e, LoadInfo{}, nil)
		}}
}

// stateExpirySweep is the internal request that, after an ExpireState,
// replaces the rows of scope that fired by one at its next expiry, on its
// shard with the scope held (so that no ChangeState writes a row
// meanwhile and finds it deleted).
type stateExpirySweep struct {
	scope string
	fired []int64
}

func (r *stateExpirySweep) ScopeName() string      { return r.scope }
func (r *stateExpirySweep) Head() *messages.Header { return &messages.Header{Scope: r.scope} }
func (r *stateExpirySweep) Op() messages.Op        { return messages.NumOps }

// stateExpirySwept answers a stateExpirySweep: the scope's next expiry
// (unix ns; 0: none).
type stateExpirySwept struct {
	messages.Result
	next int64
}

// sweepStateExpiry answers a stateExpirySweep of a cached scope. Its next
// expiry may have passed already (a key expired since the ExpireState):
// the row written for it is due, and the next pass takes it.
func (h *handler) sweepStateExpiry(r *stateExpirySweep, e *entry) outcome {
	st := e.st
	next := st.NextStateExpiry()
	reply := &stateExpirySwept{Result: messages.Result{Version: st.Version}, next: next}
	var ops []eventstore.TableOp
	if next > 0 {
		ops = append(ops, eventstore.TableOp{Key: expiryRow(next, st.Scope), Value: []byte{1}})
	}
	for _, at := range r.fired {
		if at != next {
			ops = append(ops, eventstore.TableOp{Key: expiryRow(at, st.Scope), Delete: true})
		}
	}
	if h.sx == nil || len(ops) == 0 {
		return replied(reply)
	}
	x, scope := h.sx, st.Scope
	return outcome{job: &job{scope: scope,
		run: func() any {
			return x.rows.write(ops)
		},
		finish: func(v any) outcome {
			if err, _ := v.(error); err != nil {
				return replied(failure(r, toWire(err)))
			}
			if e, ok := h.cache.Peek(scope); ok {
				e.stateRow = next // the row just written; the ones that fired are gone
			}
			return replied(reply)
		}}}
}
