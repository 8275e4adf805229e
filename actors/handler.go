package actors

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// handler is one shard's logic: decide → durable append → apply → reply.
// It owns its cache and is used by one goroutine at a time (its shard actor).
type handler struct {
	cfg      Config
	store    eventstore.Store
	cache    *simplelru.LRU[string, *entry]
	bytes    int64 // approximate bytes of the cached states
	maxBytes int64
	log      *slog.Logger
	// snapshots counts snapshot saves still running.
	snapshots sync.WaitGroup
	// inFlight counts, per scope, writes begun and not yet finished; such a
	// scope is never evicted.
	inFlight map[string]int
	// pack is reused by every pack this shard assembles.
	pack frames.PackBuffers
	// prepared is what an entry's prepare job read for the mutation being
	// decided (see opEntry.prepare), nil otherwise.
	prepared any
	// recounts are the scopes with a recount in flight (counters.go);
	// send hands the shard a message (set when it starts).
	recounts map[string]*recounting
	send     func(any)
	// cur is the counter of the scope being decided, and pre what a
	// counting job counted for the request (counters.go).
	cur compaction.Counter
	pre map[string]counted
	// ob is the server's outbox worker (outbox.go): a commit that leaves a
	// pending settlement kicks it.
	ob *outbox
	// sx is the server's state expirer (state_expiry.go): a ChangeState
	// that sets a TTL writes its schedule's row first.
	sx *stateExpirer
	// fencer is the shared store's owner registry when fencing is on
	// (Config.Owner set): a scope loaded takes its next epoch (fence.go).
	fencer eventstore.Fencer
	// stats are what the shard publishes for the gauges, and reloaded says
	// the request being handled was the one that loaded its scope (it
	// counted as a cache miss) (metrics.go).
	stats    *shardStats
	reloaded bool
}

// entry is a cached scope.
type entry struct {
	st          *frames.State
	size        int64 // approximate bytes
	snapVersion int64 // version of the latest snapshot written or loaded
	snapBytes   int64 // its encoded size
	sinceSnap   int64 // encoded bytes of the events appended since
	// info says how the scope was loaded, until a ResumeActor reports it.
	info LoadInfo
	// recountFailed stops recounts of the scope until it is loaded again.
	recountFailed bool
	// outboxRow says the scope's outbox row is known to be written
	// (outbox.go): the requests that need it skip writing it again.
	outboxRow bool
	// stateRow is a time (unix ns) at or after which the scope is known to
	// have a row in the state expirer's table (state_expiry.go); 0: none
	// known. Loaded, a scope knows one at its next expiry, if any: a row is
	// written before any key with a TTL is.
	stateRow int64
	// fence is the owner epoch this server took when it loaded the scope
	// (zero when fencing is off): every append of the scope carries it.
	fence eventstore.Fence
}

func newHandler(cfg Config, store eventstore.Store, cacheScopes int, cacheBytes int64) (*handler, error) {
	h := &handler{cfg: cfg, store: store, maxBytes: cacheBytes, log: cfg.Logger, inFlight: map[string]int{}, recounts: map[string]*recounting{}, stats: cfg.obs.newShard()}
	if cfg.Owner != "" {
		f, ok := store.(eventstore.Fencer)
		if !ok {
			return nil, errNotFencer(cfg.Owner, store)
		}
		h.fencer = f
	}
	cache, err := simplelru.NewLRU[string, *entry](max(cacheScopes, 1), func(scope string, e *entry) { h.bytes -= e.size; h.stats.scopeOut(scope) })
	if err != nil {
		return nil, err
	}
	h.cache = cache
	return h, nil
}

// write is a decided change on its way to the store: begun and applied on
// the shard's goroutine, appended (in its batch) on another, settled back
// on the shard's.
type write struct {
	req      messages.Request
	e        *entry
	evs      []frames.Event
	enc      []eventstore.Event
	expected int64
	size     int64
	// d builds the reply once the events are applied: from the events, or
	// from the state with info and start (ResumeActor).
	d     *opEntry
	info  LoadInfo
	start time.Time
	// reply is the write's reply, built when its events were applied
	// (speculate), sent once they are durable.
	reply messages.Reply
}

// handle answers one request: with a reply now, a write, or a job. A scope
// not in the cache is loaded by a job first, so that no request ever reads
// a cold scope from the store on the shard's goroutine. It never panics.
func (h *handler) handle(req messages.Request) outcome { return h.handleWith(req, nil) }

// handleWith is handle with what a counting job counted for req (nil: none).
func (h *handler) handleWith(req messages.Request, pre *precount) (out outcome) {
	defer func() {
		if r := recover(); r != nil {
			h.log.Error("stateindex: request handler panicked", "error", r, "request", fmt.Sprintf("%T", req))
			if req != nil {
				h.cache.Remove(req.ScopeName()) // its state may be half-changed
			}
			out = replied(failure(req, messages.Errorf(messages.CodeInternal, "internal error handling %T", req)))
		}
	}()
	if req == nil {
		return replied(failure(nil, messages.Errorf(messages.CodeBadRequest, "nil request")))
	}
	if err := frames.ValidateScope(req.ScopeName(), h.cfg.Frames.MaxScopeBytes); err != nil {
		return replied(failure(req, toWire(err)))
	}
	if _, mutating := req.(messages.MutatingRequest); !mutating {
		if hd := req.Head(); hd.RequestID != "" || hd.IfVersion != nil || hd.Reason != 0 {
			return replied(failure(req, messages.Errorf(messages.CodeInvalidArgument,
				"%T changes nothing: it takes no request id, version guard or checkpoint reason", req)))
		}
	}
	e, ok := h.cache.Get(req.ScopeName())
	if !h.reloaded {
		h.cfg.obs.lookup(ok)
	}
	if !ok {
		return outcome{job: h.loadJob(req)}
	}
	if rc, ok := req.(*recountReq); ok {
		return h.recountWrite(rc, e)
	}
	if sw, ok := req.(*outboxSweep); ok {
		return h.sweepOutbox(sw, e)
	}
	if sw, ok := req.(*stateExpirySweep); ok {
		return h.sweepStateExpiry(sw, e)
	}
	if o, held := h.checkCounter(req, e); held {
		return o
	}
	d := entryFor(req)
	if d == nil {
		return replied(failure(req, errUnknown(req)))
	}
	// How the scope was loaded is reported once, to the request that
	// comes first after the load (a ResumeActor reports it).
	info := e.info
	e.info = LoadInfo{}
	if d.read != nil {
		return d.read(h, e.st, req)
	}
	m, ok := req.(messages.MutatingRequest)
	if !ok {
		return replied(failure(req, errUnknown(req)))
	}
	return h.mutate(m, d, e, info, pre)
}

type loaded struct {
	st    *frames.State
	info  LoadInfo
	fence eventstore.Fence
	err   error
}

// loadJob rebuilds a cold scope off the shard, then handles req.
func (h *handler) loadJob(req messages.Request) *job { return h.loadJobThen(req, nil) }

// loadJobThen is loadJob that hands the loaded entry to then (if not nil)
// before it handles req.
func (h *handler) loadJobThen(req messages.Request, then func(*entry)) *job {
	scope := req.ScopeName()
	return &job{scope: scope,
		run: func() any {
			// With fencing, the epoch is taken before the state is read:
			// once it is, no earlier owner can append, so the state read
			// after it holds every write the store will ever accept from
			// them.
			fence, err := h.acquire(scope)
			if err != nil {
				return loaded{err: err}
			}
			st, info, err := LoadState(context.Background(), h.store, scope, h.cfg.Recall(), h.log)
			return loaded{st, info, fence, err}
		},
		finish: func(v any) outcome {
			l := v.(loaded)
			if l.err != nil {
				return replied(failure(req, toWire(l.err)))
			}
			if _, ok := h.cache.Peek(scope); !ok { // the scope was held: nothing can have loaded it meanwhile
				h.cfg.obs.loaded(l.info)
				h.put(scope, &entry{st: l.st, size: estimateState(l.st), snapVersion: l.info.SnapshotVersion,
					snapBytes: l.info.SnapshotBytes, sinceSnap: l.info.ReplayedBytes, info: l.info, stateRow: l.st.NextStateExpiry(),
					fence: l.fence})
			}
			if e, ok := h.cache.Peek(scope); ok && then != nil {
				then(e)
			}
			h.reloaded = true // its miss is counted
			defer func() { h.reloaded = false }()
			return h.handle(req)
		}}
}

// failure returns req's reply type carrying err (a bare *messages.ContextPack
// would do for none, but callers type-assert the reply they expect).
func failure(req messages.Request, err *messages.Error) messages.Reply {
	var r messages.Reply
	if req != nil {
		r = messages.ReplyFor(req)
	}
	if r == nil {
		r = &Undecodable{}
	}
	r.SetFailure(err)
	return r
}

// Undecodable answers a request the StateIndex could not read at all.
type Undecodable struct {
	messages.Result
}

// LoadInfo says how a scope's state was rebuilt (eventstore.LoadInfo).
type LoadInfo = eventstore.LoadInfo

// Recall says how long a scope remembers request ids (zero: the defaults).
type Recall struct {
	Horizon, Skew time.Duration
}

// Recall returns the configuration's request-id horizon.
func (c Config) Recall() Recall { return Recall{c.RequestHorizon, c.ClockSkew} }

// LoadState rebuilds a scope's state from the store with the request-id
// horizon recall: eventstore.LoadState, which it calls, says how.
func LoadState(ctx context.Context, store eventstore.Store, scope string, recall Recall, log *slog.Logger) (*frames.State, LoadInfo, error) {
	return eventstore.LoadState(ctx, store, scope, int64(recall.Horizon), int64(recall.Skew), log)
}

func (h *handler) put(scope string, e *entry) {
	if h.cache.Add(scope, e) {
		h.cfg.obs.evicted()
	}
	h.bytes += e.size
	h.stats.scopeIn(scope, e.st)
	h.trim()
}

// trim evicts least recently used scopes while the cache is over its byte
// bound, keeping at least the most recent one and every scope with a write
// in flight.
func (h *handler) trim() {
	for tries := h.cache.Len(); h.bytes > h.maxBytes && h.cache.Len() > 1 && tries > 0; tries-- {
		k, _, _ := h.cache.GetOldest()
		if h.inFlight[k] > 0 {
			h.cache.Get(k) // pinned: move it to the front and look further
			continue
		}
		h.cache.RemoveOldest()
		h.cfg.obs.evicted()
	}
}

// estimateState approximates a state's memory: what its strings and byte
// slices hold plus a fixed cost per object.
func estimateState(st *frames.State) int64 {
	n := int64(512 + 64*len(st.Tokens) + 128*len(st.Abandoned))
	for _, f := range st.Frames {
		n += 512 + int64(len(f.Goal)+len(f.Inputs))
		for i := range f.Handles {
			n += 128 + int64(len(f.Handles[i].Content))
		}
		for i := range f.ToolCalls {
			n += 96 + int64(len(f.ToolCalls[i].Input))
		}
		n += int64(96 * len(f.Results))
	}
	return n
}

// setPosition sets a write's reply's Position (messages.Result).
func setPosition(r messages.Reply, pos uint64) {
	if p, ok := r.(interface{ SetPosition(uint64) }); ok && r.Failure() == nil {
		p.SetPosition(pos)
	}
}

// requestHash is the digest of a request as sent (its id included: the
// window is keyed by id, so including it changes nothing).
func requestHash(req messages.Request) ([]byte, error) {
	b, err := eventstore.Marshal(req)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	return sum[:], nil
}

// mutate runs a mutation, the same way for every operation: the request
// id checked against the scope's memory of ids (a repeat answered as the
// original was), the IfVersion guard, then the entry's command decided by
// frames.Decide into a write that carries the events to append.
func (h *handler) mutate(req messages.MutatingRequest, d *opEntry, e *entry, info LoadInfo, pre *precount) outcome {
	var start time.Time
	if d.state != nil {
		start = time.Now()
	}
	m := req.Mut()
	// Required (an empty id is refused here too; the Client fills one in).
	if err := frames.ValidateID("request id", m.RequestID, h.cfg.Frames.MaxIDBytes); err != nil {
		return replied(failure(req, toWire(err)))
	}
	hash, err := requestHash(req)
	if err != nil {
		return replied(failure(req, messages.Errorf(messages.CodeBadRequest, "request cannot be encoded: %v", err)))
	}
	st := e.st
	now := h.cfg.Clock().UnixNano()
	rec, dup, err := st.CheckRequest(m.RequestID, hash, now)
	if err != nil {
		return replied(failure(req, toWire(err)))
	}
	if dup {
		if d.state != nil {
			// A position at or above the original write's: the store's.
			r := h.fromState(req, d, st, info, start)
			if pos, err := h.store.LastSeq(context.Background()); err == nil {
				setPosition(r, pos)
			}
			return replied(r)
		}
		return outcome{job: h.repeatJob(req, d, rec, st)}
	}
	if m.IfVersion != nil && *m.IfVersion != st.Version {
		return replied(failure(req, &messages.Error{Code: messages.CodeVersionConflict, Version: st.Version,
			Message: fmt.Sprintf("scope %q is at version %d, request expected %d", m.Scope, st.Version, *m.IfVersion)}))
	}
	if d.prepare != nil && h.prepared == nil {
		if j := d.prepare(h, st, req); j != nil {
			return outcome{job: j}
		}
	}
	ct, name, _ := h.scopeCounter(st)
	if pre == nil || pre.counter != name { // none, or counted under a counter the scope has left
		if j := h.countFirst(req, d, st); j != nil {
			return outcome{job: j}
		}
		pre = nil
	}
	hdr := frames.Header{RequestID: m.RequestID, RequestHash: hash, Now: now, Reason: m.Reason, Owner: e.fence.Owner, Epoch: e.fence.Epoch}
	h.cur, h.pre = ct, nil
	if pre != nil {
		h.pre = pre.texts
	}
	cmd, err := d.decide(h, st, req, hdr)
	h.pre = nil
	if err != nil {
		return replied(failure(req, toWire(err)))
	}
	if cmd == nil { // nothing to write: the state is the answer
		return replied(h.fromState(req, d, st, info, start))
	}
	evs, err := frames.Decide(h.cfg.Frames, st, cmd)
	if err != nil {
		return replied(failure(req, toWire(err)))
	}
	if len(evs) == 0 { // decided, with nothing to write (ExpireState finding nothing)
		r, err := d.reply(h, req, nil, st.Version)
		if err != nil {
			return replied(failure(req, toWire(err)))
		}
		return replied(r)
	}
	w, err := h.begin(req, e, evs)
	if err != nil {
		return replied(failure(req, toWire(err)))
	}
	w.d, w.info, w.start = d, info, start
	return outcome{w: w}
}

// afterWrite is what follows a write's reply: the entry's after job, if
// it has one and the write succeeded, else the reply itself.
func (h *handler) afterWrite(w *write, reply messages.Reply) outcome {
	if rc, ok := w.req.(*recountReq); ok {
		return h.recountDone(rc, reply)
	}
	if w.d == nil || w.d.after == nil || reply.Failure() != nil {
		return replied(reply)
	}
	if j := w.d.after(h, w.e.st, w.req, reply); j != nil {
		return outcome{job: j}
	}
	return replied(reply)
}

// fromState answers a mutation of an entry with state without a write.
func (h *handler) fromState(req messages.Request, d *opEntry, st *frames.State, info LoadInfo, start time.Time) messages.Reply {
	if d.state == nil {
		return failure(req, messages.Errorf(messages.CodeInternal, "%T decided no command", req))
	}
	r, err := d.state(h, st, info, start)
	if err != nil {
		return failure(req, toWire(err))
	}
	return r
}

// written builds a write's reply once its events are applied.
func (h *handler) written(w *write) (messages.Reply, error) {
	if w.d.state != nil {
		return w.d.state(h, w.e.st, w.info, w.start)
	}
	r, err := w.d.reply(h, w.req, w.evs, w.e.st.Version)
	if err == nil {
		h.contextChange(w.e.st, w.req, r)
	}
	return r, err
}

// begin encodes decided events into a write at the state's version.
func (h *handler) begin(req messages.Request, e *entry, evs []frames.Event) (*write, error) {
	w := &write{req: req, e: e, evs: evs, enc: make([]eventstore.Event, len(evs)), expected: e.st.Version}
	for i, ev := range evs {
		var err error
		if w.enc[i], err = eventstore.EncodeFrameEvent(ev); err != nil {
			return nil, err
		}
		w.size += int64(len(w.enc[i].Data)) + 64
	}
	h.inFlight[e.st.Scope]++
	return w, nil
}

// speculate applies a decided write's events to its scope's cached state
// at once, before they are durable, and builds its reply (w.reply), so
// that the scope's next request can be decided after it and appended in
// the same batch (batch.go). Nothing can see the state meanwhile: the
// scope stays busy, its requests held, until the batch's append returns,
// and a failed append drops the state from the cache (settle). It reports
// false when the events do not apply (the state is then half-changed: the
// batch drops it) — never so for events Decide returned.
func (h *handler) speculate(w *write) bool {
	st := w.e.st
	for _, ev := range w.evs {
		if err := frames.Apply(st, ev); err != nil {
			w.reply = failure(w.req, messages.Errorf(messages.CodeInternal, "decided events do not apply: %v", err))
			return false
		}
	}
	if want := w.expected + int64(len(w.enc)); st.Version != want {
		w.reply = failure(w.req, messages.Errorf(messages.CodeInternal, "scope %q at version %d after events that end at %d", st.Scope, st.Version, want))
		return false
	}
	if w.d == nil || w.d.state == nil { // a reply from the state reads the store too: built once durable (settle)
		w.reply = h.reply(w)
	}
	return true
}

// reply builds a write's reply once its events are applied.
func (h *handler) reply(w *write) messages.Reply {
	reply, err := h.written(w)
	if err != nil {
		return failure(w.req, toWire(err))
	}
	return reply
}

// settle finishes a batch whose append returned: with an error nothing
// was written, and every write of the batch fails with it; else the
// writes are durable and their replies (built by speculate) get the
// batch's position. It reports whether the cached state is the truth; when
// not (the append failed, or a write's events did not apply) the scope is
// dropped from the cache, to be loaded again from the store.
func (h *handler) settle(b *batch, res eventstore.AppendResult, err error) (kept bool) {
	st := b.e.st
	for range b.writes {
		if h.inFlight[st.Scope]--; h.inFlight[st.Scope] <= 0 {
			delete(h.inFlight, st.Scope)
		}
	}
	if err != nil {
		h.cache.Remove(st.Scope)
		if errors.Is(err, eventstore.ErrFenced) {
			h.deposed(b, err)
		}
		for _, w := range b.writes {
			w.reply = failure(w.req, toWire(err))
		}
		return false
	}
	if b.broken || st.Version != res.LastVersion {
		h.cache.Remove(st.Scope)
		if !b.broken {
			for _, w := range b.writes {
				w.reply = failure(w.req, messages.Errorf(messages.CodeInternal, "scope %q at version %d after an append that ended at %d", st.Scope, st.Version, res.LastVersion))
			}
		}
		return false
	}
	if cur, ok := h.cache.Peek(st.Scope); !ok || cur != b.e {
		// Evicted by count while its batch was in flight: no other request
		// of the scope ran meanwhile, so this entry is still the truth.
		h.put(st.Scope, b.e)
	}
	for _, w := range b.writes {
		b.e.size += w.size
		b.e.sinceSnap += w.size
		h.bytes += w.size
		if w.reply == nil {
			w.reply = h.reply(w)
		}
		setPosition(w.reply, res.LastSeq)
	}
	h.cfg.obs.committed(h, b)
	h.checkpointRunFinished(st.Scope, b.events(), res)
	h.kickOutbox(st)
	h.maybeSnapshot(b.e)
	h.trim()
	return true
}

// maybeSnapshot snapshots a scope once at least SnapshotEvery events and
// at least half the last snapshot's size in event bytes were appended since
// the last one. The second rule keeps a scope whose state keeps growing from
// rewriting its whole state every SnapshotEvery events (quadratic in its
// history); recovery still reads at most about one and a half snapshots'
// worth. The snapshot is saved in the background: it only shortens
// recovery, so no reply waits for it.
func (h *handler) maybeSnapshot(e *entry) {
	if e.st.Version-e.snapVersion < h.cfg.SnapshotEvery || e.sinceSnap < e.snapBytes/2 {
		return
	}
	snap, err := eventstore.EncodeState(e.st)
	if err != nil {
		h.log.Warn("stateindex: snapshot encoding failed; recovery will replay more events", "scope", e.st.Scope, "error", err)
		return
	}
	e.snapVersion, e.snapBytes, e.sinceSnap = e.st.Version, int64(len(snap.Data)), 0
	scope := e.st.Scope
	h.snapshots.Add(1)
	go func() {
		defer h.snapshots.Done()
		start := time.Now()
		err := h.store.SaveSnapshot(context.Background(), scope, snap)
		h.cfg.obs.snapshotted(len(snap.Data), time.Since(start), err)
		if err != nil {
			h.log.Warn("stateindex: snapshot failed; recovery will replay more events", "scope", scope, "version", snap.Version, "error", err)
		} else {
			h.checkpoint(scope, snap.Version, eventstore.CheckpointSnapshot)
		}
	}()
}

// errStop ends a bounded stream read.
var errStop = errors.New("stop")

// repeatJob answers a request id seen before with the reply the original
// got, rebuilt from the events it appended, which it reads off the shard.
// An entry's after job runs again (it is idempotent): a repeat finishes
// what a crash interrupted.
func (h *handler) repeatJob(req messages.Request, d *opEntry, rec frames.RequestRecord, st *frames.State) *job {
	type read struct {
		evs []frames.Event
		pos uint64
		err error
	}
	scope := req.ScopeName()
	return &job{scope: scope,
		run: func() any {
			var evs []frames.Event
			var pos uint64 // the original write's last record
			err := h.store.ReadStream(context.Background(), scope, rec.FirstVersion, func(r eventstore.Record) error {
				if r.Version > rec.LastVersion {
					return errStop
				}
				pos = r.Seq
				ev, err := eventstore.DecodeFrameEvent(r)
				if err != nil {
					return err
				}
				evs = append(evs, ev)
				return nil
			})
			if errors.Is(err, errStop) {
				err = nil
			}
			return read{evs, pos, err}
		},
		finish: func(v any) outcome {
			r := v.(read)
			if r.err != nil {
				return replied(failure(req, toWire(r.err)))
			}
			if int64(len(r.evs)) != rec.LastVersion-rec.FirstVersion+1 {
				return replied(failure(req, messages.Errorf(messages.CodeStoreFailed, "events %d..%d of request %q are missing", rec.FirstVersion, rec.LastVersion, rec.ID)))
			}
			reply, err := d.reply(h, req, r.evs, rec.LastVersion)
			if err != nil {
				return replied(failure(req, toWire(err)))
			}
			setPosition(reply, r.pos)
			h.contextChange(st, req, reply)
			if d.after != nil {
				if j := d.after(h, st, req, reply); j != nil {
					return outcome{job: j}
				}
			}
			return replied(reply)
		}}
}
