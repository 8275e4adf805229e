package actors

// Token counters per scope, and the work that keeps a scope's handles
// under one counter.
//
// Which counter: Config.Counters, the longest matching scope prefix, else
// Config.Counter. What a scope's handles are counted under is its state's
// (frames.State.Counter, "" the estimate); the two differ when the
// configuration changed, and then the scope is recounted:
//
//   - in the background when the scope's counter is known to this server:
//     the live handles' content is copied on the shard's goroutine, counted
//     on another without holding the scope (which goes on serving under its
//     old counter: new handles are counted under it, packs use it), and an
//     internal request (recountReq) appends scope.counter_changed through
//     the normal write path, counting then the handles added meanwhile;
//   - before anything else when it is not (CounterByName does not know
//     it): a job holding the scope counts, writes, then serves the request;
//   - with no event of its own for a scope with no live handle (a new
//     scope): the change (no counts) is written just before the first
//     request that counts content, whose reply's version is then one more
//     than the scope's before it (an IfVersion guard on that request,
//     computed before, fails with version_conflict; resend it with the
//     new version).
//
// A counting mutation under a counter that is not the O(1) estimate counts
// its content off the shard's goroutine too: a job (the scope held) counts
// the texts its entry's count names, then the request is handled again
// with those counts at hand (precount), under the scope's counter as it is
// then.

import (
	"crypto/sha256"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// CounterRule selects the counter of the scopes whose name starts with
// Prefix: the longest matching prefix of Config.Counters wins.
type CounterRule struct {
	Prefix string
	// Name is the counter's canonical name (what packs' metadata and the
	// scope's state record).
	Name    string
	Counter compaction.Counter
}

// estimateRule is the estimate as a rule.
var estimateRule = CounterRule{Name: frames.EstimateCounterName, Counter: compaction.EstimateCounter{}}

// checkCounters validates and orders the rules (longest prefix first).
func (c *Config) checkCounters() error {
	rules := append([]CounterRule(nil), c.Counters...)
	for i, r := range rules {
		if r.Name == "" || r.Counter == nil {
			return fmt.Errorf("actors: Counters[%d] (prefix %q) needs a name and a counter", i, r.Prefix)
		}
		if err := frames.ValidateID("counter name", r.Name, c.Frames.MaxIDBytes); err != nil {
			return fmt.Errorf("actors: Counters[%d] (prefix %q): %w", i, r.Prefix, err)
		}
		rules[i].Name = frames.CanonicalCounter(r.Name)
	}
	if err := frames.ValidateID("counter name", frames.CanonicalCounter(c.CounterName), c.Frames.MaxIDBytes); err != nil {
		return fmt.Errorf("actors: CounterName: %w", err)
	}
	sort.SliceStable(rules, func(i, j int) bool { return len(rules[i].Prefix) > len(rules[j].Prefix) })
	c.Counters = rules
	c.CounterName = frames.CanonicalCounter(c.CounterName)
	return nil
}

// CounterFor is the counter configured for scope.
func (c Config) CounterFor(scope string) CounterRule {
	for _, r := range c.Counters { // longest prefix first (checkCounters)
		if strings.HasPrefix(scope, r.Prefix) {
			return r
		}
	}
	if c.Counter == nil {
		return estimateRule
	}
	return CounterRule{Name: frames.CanonicalCounter(c.CounterName), Counter: c.Counter}
}

// counterNamed finds a counter by name: the configured ones, the estimate,
// then CounterByName.
func (c Config) counterNamed(name string) (compaction.Counter, bool) {
	name = frames.CanonicalCounter(name)
	if c.Counter != nil && frames.CanonicalCounter(c.CounterName) == name {
		return c.Counter, true
	}
	for _, r := range c.Counters {
		if r.Name == name {
			return r.Counter, true
		}
	}
	if name == frames.EstimateCounterName {
		return compaction.EstimateCounter{}, true
	}
	if c.CounterByName != nil {
		if ct, ok := c.CounterByName(name); ok && ct != nil {
			return ct, true
		}
	}
	return nil, false
}

// scopeCounter is the counter st's handles are under, with its name; ok is
// false when this server does not know it.
func (h *handler) scopeCounter(st *frames.State) (compaction.Counter, string, bool) {
	name := st.CounterOf()
	ct, ok := h.cfg.counterNamed(name)
	return ct, name, ok
}

// packCounter is the counter a pack of st is built under: its handles'
// (scopeCounter), or the configured one when it has no live handle (none
// was counted under another).
func (h *handler) packCounter(st *frames.State) (compaction.Counter, string, bool) {
	if want := h.cfg.CounterFor(st.Scope); !frames.SameCounter(want.Name, st.Counter) && !st.HasLiveHandles() {
		return want.Counter, want.Name, true
	}
	return h.scopeCounter(st)
}

// counted is a text's size under a counter: as is and light.
type counted struct{ tokens, light int64 }

// precount is what a counting job counted for a request: its texts under
// the counter named counter.
type precount struct {
	counter string
	texts   map[string]counted
}

// countTexts counts texts under ct, skipping those over the content limit
// (the decide refuses them before counting). Each text's light form is
// kept under its own key too, so that a counter answering from the counts
// (continueWith's) has the light count without counting again.
func countTexts(ct compaction.Counter, max int, texts []string) map[string]counted {
	out := make(map[string]counted, 2*len(texts))
	for _, t := range texts {
		if _, done := out[t]; done || len(t) > max {
			continue
		}
		light := compaction.LightTokens(t, ct)
		out[t] = counted{ct.Count(t), light}
		if lt := compaction.LightText(t); lt != t {
			if _, done := out[lt]; !done {
				out[lt] = counted{light, light}
			}
		}
	}
	return out
}

// offShardCounter is the scope's counter when counting under it is worth a
// job off the shard's goroutine: not the estimate, which costs nothing.
func (h *handler) offShardCounter(st *frames.State) (compaction.Counter, string, bool) {
	ct, name, _ := h.scopeCounter(st)
	return ct, name, name != frames.EstimateCounterName && ct != nil
}

// count measures content under the counter of the scope being decided
// (frames.CountContent), or takes what a counting job counted for it.
func (h *handler) count(what, content string) (tokens, light int64, err error) {
	if c, ok := h.pre[content]; ok && len(content) <= h.cfg.Frames.MaxContentBytes {
		return c.tokens, c.light, nil
	}
	return frames.CountContent(h.cfg.Frames, h.cur, what, content)
}

// countFirst returns the job that counts a counting mutation's texts off
// the shard's goroutine before it is decided, or nil when the scope's
// counter is the estimate (it costs nothing) or there is nothing to count.
func (h *handler) countFirst(req messages.Request, d *opEntry, st *frames.State) *job {
	if d.count == nil {
		return nil
	}
	ct, name, ok := h.offShardCounter(st)
	if !ok {
		return nil
	}
	texts := d.count(st, req)
	if len(texts) == 0 {
		return nil
	}
	max := h.cfg.Frames.MaxContentBytes
	return &job{scope: st.Scope,
		run: func() any { return &precount{counter: name, texts: countTexts(ct, max, texts)} },
		finish: func(v any) outcome {
			return h.handleWith(req, v.(*precount))
		}}
}

// recountReq is the internal request that moves a scope to another counter
// with the counts a recount made: handled on the shard like any request of
// its scope (held while the scope is busy), answered to no one.
type recountReq struct {
	scope, from, to string
	version         int64 // the scope's version when its handles were copied
	counts          map[handleKey]counted
	written         int // handles the change counts
	started         time.Time
	// then is the request that waits for this one (a blocking recount):
	// the outcomes that follow answer it (outcome.req).
	then messages.Request
}

type handleKey struct{ frame, handle string }

func (r *recountReq) ScopeName() string      { return r.scope }
func (r *recountReq) Head() *messages.Header { return &messages.Header{Scope: r.scope} }
func (r *recountReq) Op() messages.Op        { return messages.NumOps }

// recounting is a recount in flight for a scope.
type recounting struct {
	to string
}

// recountInline bounds what a recount's write counts on the shard's
// goroutine (handles added while the background counted); past it the
// recount counts again in the background.
const (
	recountInlineHandles = 64
	recountInlineBytes   = 256 << 10
)

// checkCounter compares the counter configured for e's scope with the one
// its handles are under. When they differ it starts a background recount
// (false: serve req meanwhile), or, when this server does not know the
// scope's counter, returns a job that recounts before req is served. A
// scope with no live handle has nothing to recount: the change is written
// (no counts) just before the first request that counts content, which
// then counts under the configured counter; requests that count nothing
// add no event.
func (h *handler) checkCounter(req messages.Request, e *entry) (outcome, bool) {
	st := e.st
	want := h.cfg.CounterFor(st.Scope)
	if frames.SameCounter(want.Name, st.Counter) {
		return outcome{}, false
	}
	if _, running := h.recounts[st.Scope]; running {
		return outcome{}, false
	}
	if !st.HasLiveHandles() {
		if d := entryFor(req); d == nil || d.count == nil {
			return outcome{}, false
		}
		h.recounts[st.Scope] = &recounting{to: want.Name}
		rc := &recountReq{scope: st.Scope, from: st.CounterOf(), to: want.Name, version: st.Version, started: time.Now(),
			counts: map[handleKey]counted{}, then: req}
		return h.recountWrite(rc, e), true
	}
	if _, _, known := h.scopeCounter(st); !known {
		h.log.Info("stateindex: the scope's token counter is unknown to this server: recounting its handles before serving it",
			"scope", st.Scope, "from", st.CounterOf(), "to", want.Name)
		return outcome{job: h.recountJob(st, want, req)}, true
	}
	if e.recountFailed || h.send == nil {
		return outcome{}, false
	}
	h.startRecount(st, want, nil)
	return outcome{}, false
}

// startRecount counts st's live handles under want on a goroutine of its
// own, then sends the shard the recountReq that writes the change. prev
// holds counts already made (handles counted by an earlier round).
func (h *handler) startRecount(st *frames.State, want CounterRule, prev map[handleKey]counted) {
	live := st.LiveHandles()
	rc := &recountReq{scope: st.Scope, from: st.CounterOf(), to: want.Name, version: st.Version, started: time.Now()}
	h.recounts[st.Scope] = &recounting{to: want.Name}
	if prev == nil {
		h.log.Info("stateindex: recounting a scope's handles under its configured counter",
			"scope", st.Scope, "from", rc.from, "to", rc.to, "handles", len(live))
	}
	send := h.send
	go func() {
		rc.counts = countHandles(want.Counter, live, prev)
		send(rc)
	}()
}

// countHandles counts the live handles' content under ct, reusing prev.
func countHandles(ct compaction.Counter, live []frames.LiveHandle, prev map[handleKey]counted) map[handleKey]counted {
	out := make(map[handleKey]counted, len(live))
	for _, lh := range live {
		k := handleKey{lh.Frame, lh.Handle}
		if c, ok := prev[k]; ok {
			out[k] = c
			continue
		}
		out[k] = counted{ct.Count(lh.Content), compaction.LightTokens(lh.Content, ct)}
	}
	return out
}

// recountJob recounts with the scope held, then serves req.
func (h *handler) recountJob(st *frames.State, want CounterRule, req messages.Request) *job {
	live := st.LiveHandles()
	rc := &recountReq{scope: st.Scope, from: st.CounterOf(), to: want.Name, version: st.Version, started: time.Now(), then: req}
	h.recounts[st.Scope] = &recounting{to: want.Name}
	return &job{scope: st.Scope,
		run: func() any { return countHandles(want.Counter, live, nil) },
		finish: func(v any) outcome {
			rc.counts = v.(map[handleKey]counted)
			return h.handleWith(rc, nil)
		}}
}

// recountWrite turns a finished count into the scope.counter_changed write
// (handles added meanwhile counted now, or another round started when they
// are many), or drops it when it no longer applies.
func (h *handler) recountWrite(rc *recountReq, e *entry) outcome {
	st := e.st
	want := h.cfg.CounterFor(st.Scope)
	if !frames.SameCounter(st.Counter, rc.from) || !frames.SameCounter(want.Name, rc.to) {
		return h.recountOver(rc, nil) // moved on meanwhile: nothing to write
	}
	live := st.LiveHandles()
	var missing []frames.LiveHandle
	var bytes int
	for _, lh := range live {
		if _, ok := rc.counts[handleKey{lh.Frame, lh.Handle}]; !ok {
			missing = append(missing, lh)
			bytes += len(lh.Content)
		}
	}
	if rc.then == nil && h.send != nil && (len(missing) > recountInlineHandles || bytes > recountInlineBytes) {
		h.startRecount(st, want, rc.counts) // too many to count here: another round
		return replied(&recounted{})
	}
	extra := countHandles(want.Counter, missing, nil)
	counts := make([]frames.HandleCount, 0, len(live))
	for _, lh := range live {
		k := handleKey{lh.Frame, lh.Handle}
		c, ok := rc.counts[k]
		if !ok {
			c = extra[k]
		}
		counts = append(counts, frames.HandleCount{Frame: lh.Frame, Handle: lh.Handle, Tokens: c.tokens, Light: c.light})
	}
	rc.written = len(counts)
	// The id is the same for the same change at the same version: a crash
	// or a restart before it committed starts over under the same id.
	sum := sha256.Sum256([]byte(frames.TypeCounterChanged + " " + rc.to))
	id := fmt.Sprintf("stateindex-recount-%x-%d", sum[:8], rc.version)
	now := h.cfg.Clock().UnixNano()
	if _, dup, err := st.CheckRequest(id, sum[:], now); err != nil || dup {
		return h.recountOver(rc, err)
	}
	evs, err := frames.Decide(h.cfg.Frames, st, &frames.ChangeCounter{
		Header: frames.Header{RequestID: id, RequestHash: sum[:], Now: now}, To: rc.to, Counts: counts})
	if err != nil {
		return h.recountOver(rc, err)
	}
	w, err := h.begin(rc, e, evs)
	if err != nil {
		return h.recountOver(rc, err)
	}
	w.d = &recountEntry
	return outcome{w: w}
}

// recounted answers a recountReq (no one reads it).
type recounted struct{ messages.Result }

var recountEntry = opEntry{
	reply: func(_ *handler, _ messages.Request, _ []frames.Event, version int64) (messages.Reply, error) {
		return &recounted{Result: messages.Result{Version: version}}, nil
	},
}

// recountOver ends a recount that wrote nothing (err says why, if it
// failed) and serves the request that waited for it, if any.
func (h *handler) recountOver(rc *recountReq, err error) outcome {
	delete(h.recounts, rc.scope)
	if err != nil {
		h.log.Warn("stateindex: recounting a scope's handles failed; it is retried when the scope is next loaded",
			"scope", rc.scope, "from", rc.from, "to", rc.to, "error", err)
		if e, ok := h.cache.Peek(rc.scope); ok {
			e.recountFailed = true
		}
		if rc.then != nil {
			return replied(failure(rc.then, messages.Errorf(messages.CodeInternal,
				"scope %q is counted under %q, unknown to this server, and recounting it under %q failed: %v", rc.scope, rc.from, rc.to, err)))
		}
	}
	if rc.then != nil {
		return h.serveNext(rc.then)
	}
	return replied(&recounted{})
}

// recountDone follows a recount's write: logged, and the request that
// waited for it (if any) served.
func (h *handler) recountDone(rc *recountReq, reply messages.Reply) outcome {
	delete(h.recounts, rc.scope)
	if f := reply.Failure(); f != nil {
		h.log.Warn("stateindex: recounting a scope's handles failed; it is retried when the scope is next loaded",
			"scope", rc.scope, "from", rc.from, "to", rc.to, "error", f)
		if e, ok := h.cache.Peek(rc.scope); ok {
			e.recountFailed = true
		}
		if rc.then != nil {
			return outcome{reply: failure(rc.then, f), req: rc.then}
		}
		return replied(reply)
	}
	h.log.Info("stateindex: recounted a scope's handles under its configured counter",
		"scope", rc.scope, "from", rc.from, "to", rc.to, "handles", rc.written, "ms", time.Since(rc.started).Milliseconds())
	if rc.then != nil {
		return h.serveNext(rc.then)
	}
	return replied(reply)
}

// serveNext handles the request that waited for a recount: the outcome
// answers it, not the recount.
func (h *handler) serveNext(req messages.Request) outcome {
	o := h.handleWith(req, nil)
	o.req = req
	return o
}

// recountingTo is the counter a recount in flight moves scope to ("" if none).
func (h *handler) recountingTo(scope string) string {
	if r := h.recounts[scope]; r != nil {
		return r.to
	}
	return ""
}
