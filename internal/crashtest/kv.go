package crashtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// Scope state in the storm (issue 15): one step in StateEvery on a live
// frame is a ChangeState of 1–4 operations over a few keys of the scope's
// level or the frame's — sets, pushes keeping a window, deletes, clears of
// a prefix, touches, some with an hour's TTL (fixed or sliding) — and one
// in four is conditional on the version of its first key, read with
// GetState just before (a worker owns its scopes, so the condition holds;
// now and then the step names a stale version on purpose and must be
// refused state_conflict). The requests go through the side file like
// every other and are resent with their ids after a kill.
//
// After every kill, the checker folds, event by event in version order,
// the ChangeStates the log holds — from the requests the side file
// recorded, not from the events — with the frames' ends and continuations
// the log records, into a model of each scope's state (stateFold), and
// requires (checkState):
//
//   - every ChangeState in the log is one state.changed carrying exactly its
//     request's operations, in order (no partial multi-key change);
//   - a conditional one was applied only with its key at the version it
//     named (the model's);
//   - every acknowledged ChangeState is in the log (nothing lost), and one
//     a kill left unanswered is there whole or not at all;
//   - the state the replay folds equals the model, level by level and key
//     by key (value or list, version, expiry), and so do GetState and
//     RangeState through a server on the file.

// StateEvery is how often (one in StateEvery) a step on a live frame
// changes the scope's state.
const StateEvery = 6

// The storm's keys: values, lists, and the prefix its clears remove.
var (
	stateValueKeys = []string{"plan", "count", "flags/a", "flags/b"}
	stateListKeys  = []string{"msgs", "events"}
	stateKeys      = append(append([]string(nil), stateValueKeys...), stateListKeys...)
)

const (
	statePrefix = "flags/"
	stateTTL    = 3_600_000 // ms: an hour, longer than any storm, so that nothing expires under it
)

// changeState sends one ChangeState on s, at the scope's level or f's.
func (w *Storm) changeState(ctx context.Context, rng *rand.Rand, s *scope, f *mframe) error {
	frame := ""
	if rng.IntN(2) == 0 {
		frame = f.id
	}
	ops := make([]messages.StateOp, 1+rng.IntN(4))
	for i := range ops {
		op := messages.StateOp{FrameID: frame}
		switch k := rng.IntN(10); {
		case k < 4:
			op.Kind, op.Key = frames.StateSet, stateValueKeys[rng.IntN(len(stateValueKeys))]
			op.Value = stateValue(rng, op.Key)
		case k < 7:
			op.Kind, op.Key = frames.StatePush, stateListKeys[rng.IntN(len(stateListKeys))]
			op.Value = stateValue(rng, op.Key)
			op.Keep = 1 + int64(rng.IntN(4)) // bounded: lists never outgrow the limits, kill after kill
		case k < 8:
			op.Kind, op.Key = frames.StateDelete, stateKeys[rng.IntN(len(stateKeys))]
		default:
			op.Kind, op.Prefix = frames.StateClear, statePrefix
		}
		if (op.Kind == frames.StateSet || op.Kind == frames.StatePush) && rng.IntN(8) == 0 {
			op.TTLMillis, op.Sliding = stateTTL, rng.IntN(2) == 0
			if rng.IntN(4) == 0 {
				op.TTLMillis, op.Sliding = -1, false
			}
		}
		ops[i] = op
	}
	stale := false
	if ops[0].Key != "" && rng.IntN(4) == 0 {
		// Read-modify-write: the first key's version, then the change
		// conditional on it (a touch if it is there, now and then).
		r, err := w.C.GetState(ctx, &messages.GetState{Header: messages.Header{Scope: s.name}, FrameID: frame, Keys: []string{ops[0].Key}})
		if err != nil {
			var me *messages.Error
			if errors.As(err, &me) && refusable(me.Code) {
				return fmt.Errorf("%w: GetState: %w", errRefused, err) // the view is stale: the frame ended
			}
			return err
		}
		var v int64
		if len(r.Entries) == 1 {
			v = r.Entries[0].Version
			if rng.IntN(3) == 0 {
				ops[0] = messages.StateOp{Kind: frames.StateTouch, FrameID: frame, Key: ops[0].Key}
				if rng.IntN(2) == 0 {
					ops[0].TTLMillis, ops[0].Sliding = stateTTL, true
				}
			}
		}
		if rng.IntN(8) == 0 {
			v, stale = v+1+rng.Int64N(3), true // a version the key is not at
		}
		ops[0].IfVersion = &v
	}
	_, err := w.send(ctx, &messages.ChangeState{Header: mut(s), Ops: ops})
	var me *messages.Error
	switch {
	case stale && err == nil:
		return fmt.Errorf("ChangeState on scope %q conditional on a version its key is not at was applied", s.name)
	case stale && errors.As(err, &me) && me.Code == messages.CodeStateConflict:
		return nil // refused as it must be: the view stands
	case stale:
		return fmt.Errorf("ChangeState on scope %q conditional on a stale version: want state_conflict, got %w", s.name, err)
	}
	return err
}

// stateValue is a value for key: its name, a number, and up to 200 bytes
// more (now and then none at all).
func stateValue(rng *rand.Rand, key string) []byte {
	if rng.IntN(16) == 0 {
		return nil
	}
	return fmt.Appendf(nil, "%s=%d%s", key, rng.IntN(1e6), strings.Repeat(".", rng.IntN(200)))
}

// StateStats is what the scope-state check found after a kill.
type StateStats struct {
	// Requests are the ChangeStates in the log, each checked whole against
	// its request: Acked acknowledged, InFlight unanswered at a kill;
	// Absent those unanswered and not in the log; Ops their operations,
	// Conditional and FrameLevel among them (of requests), Trimmed the
	// pushes whose window dropped items.
	Requests, Acked, InFlight, Absent int
	Ops, Conditional, FrameLevel      int
	Trimmed                           int
	// Conflicts are the ChangeStates refused state_conflict (stale
	// conditions the storm sent on purpose), none of them in the log.
	// Expired are resends refused as older than the idempotency horizon,
	// ExpiredWhole of them in the log (committed before their kill, whole).
	Conflicts, Expired, ExpiredWhole int
	// Carried are frame levels a continuation carried to its new link,
	// Ended those that ended with their frame.
	Carried, Ended int
	// Levels and Keys are what the replay's state and the server's reads
	// were compared with the model on.
	Levels, Keys int
	// Lost are acknowledged ChangeStates not in the log; Partial those
	// whose event or effect differs from their request: both must be 0.
	Lost, Partial int
}

func (s StateStats) String() string {
	return fmt.Sprintf("%d ChangeStates in the log (%d acknowledged, %d in flight at a kill and whole, %d in flight and absent; %d operations, "+
		"%d requests conditional, %d at a frame's level, %d pushes trimmed), %d refused state_conflict on purpose and absent, "+
		"%d resends refused as past the request horizon (%d of them committed before their kill, whole); "+
		"%d frame levels carried to a continuation, %d ended with their frame; %d levels / %d keys equal to the fold of the requests "+
		"in the replay and through GetState and RangeState; lost %d, partial %d",
		s.Requests, s.Acked, s.InFlight, s.Absent, s.Ops, s.Conditional, s.FrameLevel, s.Trimmed, s.Conflicts, s.Expired, s.ExpiredWhole,
		s.Carried, s.Ended, s.Levels, s.Keys, s.Lost, s.Partial)
}

// stateEntry is the model's value of a key.
type stateEntry struct {
	value   []byte
	items   [][]byte
	list    bool
	version int64
	expires int64 // unix ns; 0: never
	ttl     int64
	sliding bool
}

// stateFold is the model: each scope's levels ("" the scope's, else a
// live frame's), folded from the requests of the ChangeStates in the log.
type stateFold struct {
	side   *Side
	scopes map[string]map[string]map[string]*stateEntry
	seen   map[string]bool // request ids of the ChangeStates folded
	stats  StateStats
	errs   []string
}

func newStateFold(side *Side) *stateFold {
	return &stateFold{side: side, scopes: map[string]map[string]map[string]*stateEntry{}, seen: map[string]bool{}}
}

func (sf *stateFold) fail(partial bool, format string, args ...any) {
	if partial {
		sf.stats.Partial++
	}
	if len(sf.errs) < 20 {
		sf.errs = append(sf.errs, fmt.Sprintf(format, args...))
	}
}

func (sf *stateFold) level(scope, frame string) map[string]*stateEntry {
	if sf.scopes[scope] == nil {
		sf.scopes[scope] = map[string]map[string]*stateEntry{}
	}
	lv := sf.scopes[scope][frame]
	if lv == nil {
		lv = map[string]*stateEntry{}
		sf.scopes[scope][frame] = lv
	}
	return lv
}

// apply follows ev, the event at version of scope, in the model (Check's
// replay calls it for every event, in order).
func (sf *stateFold) apply(scope string, ev frames.Event, version int64) {
	switch e := ev.(type) {
	case *frames.FramePopped:
		lv := sf.scopes[scope][e.Frame]
		if len(lv) > 0 {
			if e.ContinuedTo != "" {
				sf.stats.Carried++
			} else {
				sf.stats.Ended++
			}
		}
		if e.ContinuedTo != "" && lv != nil {
			sf.scopes[scope][e.ContinuedTo] = lv
		}
		delete(sf.scopes[scope], e.Frame)
	case *frames.ScopeDestroyed:
		delete(sf.scopes, scope)
	case *frames.StateExpired:
		for _, x := range e.Keys {
			sf.expire(scope, x, e.At, version)
		}
	case *frames.StateChanged:
		sf.changed(scope, e, version)
	}
}

// expire removes x, which must have expired by at.
func (sf *stateFold) expire(scope string, x frames.ExpiredKey, at, version int64) {
	lv := sf.level(scope, x.Frame)
	k := lv[x.Key]
	if k == nil || k.version != x.Version || k.expires == 0 || at < k.expires {
		sf.fail(true, "scope %q version %d removes key %q of level %q as expired at version %d; the model has %+v", scope, version, x.Key, x.Frame, x.Version, k)
		return
	}
	delete(lv, x.Key)
}

// changed folds the request of the ChangeState e records, checking that e
// carries exactly its operations.
func (sf *stateFold) changed(scope string, e *frames.StateChanged, version int64) {
	id := e.RequestID
	where := fmt.Sprintf("ChangeState %s (scope %q version %d)", id, scope, version)
	r := sf.side.ByID[id]
	if r == nil || r.b64 == "" || r.Op != "ChangeState" {
		return // a phantom: Check reports it
	}
	req, err := r.Request()
	if err != nil {
		sf.fail(false, "%s: side file: %v", where, err)
		return
	}
	ops := req.(*messages.ChangeState).Ops
	sf.seen[id] = true
	sf.stats.Requests++
	sf.stats.Ops += len(ops)
	if len(e.Changes) != len(ops) {
		sf.fail(true, "PARTIAL: %s carries %d changes for its %d operations", where, len(e.Changes), len(ops))
		return
	}
	at := e.At
	// The expired keys of each level the request touches leave first (the
	// storm's TTLs outlast it: normally none).
	var expired []frames.ExpiredKey
	touched := map[string]bool{}
	for _, op := range ops {
		if touched[op.FrameID] {
			continue
		}
		touched[op.FrameID] = true
		lv := sf.level(scope, op.FrameID)
		var keys []string
		for k, v := range lv {
			if v.expires != 0 && at >= v.expires {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			expired = append(expired, frames.ExpiredKey{Frame: op.FrameID, Key: k, Version: lv[k].version})
		}
	}
	if fmt.Sprint(expired) != fmt.Sprint(e.Expired) {
		sf.fail(true, "%s removes %v as expired; the model: %v", where, e.Expired, expired)
	}
	for _, x := range expired {
		delete(sf.level(scope, x.Frame), x.Key)
	}
	if ops[0].IfVersion != nil {
		sf.stats.Conditional++
	}
	if ops[0].FrameID != "" {
		sf.stats.FrameLevel++
	}
	for i, op := range ops {
		ch := e.Changes[i]
		if ch.Kind != op.Kind || ch.Frame != op.FrameID || ch.Key != op.Key || ch.Prefix != op.Prefix ||
			(op.Kind == frames.StateSet && !bytes.Equal(ch.Value, op.Value)) || (op.Kind == frames.StatePush && !bytes.Equal(ch.Item, op.Value)) {
			sf.fail(true, "PARTIAL: %s: change %d is %s %q/%q, its operation %s %q/%q", where, i+1, ch.Kind, ch.Frame, ch.Key, op.Kind, op.FrameID, op.Key)
			return
		}
		if err := sf.op(scope, op, at, version); err != nil {
			sf.fail(true, "%s: operation %d (%s %q of level %q): %v", where, i+1, op.Kind, op.Key, op.FrameID, err)
			return
		}
	}
}

// op folds one operation as the rules say (frames/kv.go, messages.StateOp).
func (sf *stateFold) op(scope string, op messages.StateOp, at, version int64) error {
	lv := sf.level(scope, op.FrameID)
	if op.Kind == frames.StateClear {
		for k := range lv {
			if strings.HasPrefix(k, op.Prefix) {
				delete(lv, k)
			}
		}
		return nil
	}
	cur := lv[op.Key]
	var have int64
	if cur != nil {
		have = cur.version
	}
	if op.IfVersion != nil && *op.IfVersion != have {
		return fmt.Errorf("CONDITION: applied on the condition that the key is at version %d; the model has it at %d", *op.IfVersion, have)
	}
	if op.Kind == frames.StateDelete {
		delete(lv, op.Key)
		return nil
	}
	next := &stateEntry{version: version}
	if cur != nil {
		next.expires, next.ttl, next.sliding = cur.expires, cur.ttl, cur.sliding
	}
	switch ttl := op.TTLMillis * 1_000_000; {
	case op.TTLMillis > 0:
		next.expires, next.ttl, next.sliding = at+ttl, ttl, op.Sliding
	case op.TTLMillis == -1:
		next.expires, next.ttl, next.sliding = 0, 0, false
	case next.sliding:
		next.expires = at + next.ttl
	}
	switch op.Kind {
	case frames.StateSet:
		next.value = op.Value
	case frames.StatePush:
		if cur != nil && !cur.list {
			return errors.New("a push onto a value was applied")
		}
		next.list = true
		if cur != nil {
			next.items = append(next.items, cur.items...)
		}
		next.items = append(next.items, op.Value)
		if op.Keep > 0 && int64(len(next.items)) > op.Keep {
			next.items = next.items[int64(len(next.items))-op.Keep:]
			sf.stats.Trimmed++
		}
	case frames.StateTouch:
		if cur == nil {
			return errors.New("a touch of an absent key was applied")
		}
		next.value, next.items, next.list = cur.value, cur.items, cur.list
	default:
		return fmt.Errorf("operation %q applied", op.Kind)
	}
	lv[op.Key] = next
	return nil
}

// same compares an entry the state holds with the model's.
func (e *stateEntry) same(value []byte, items [][]byte, list bool, version, expires int64, sliding bool) bool {
	if !bytes.Equal(e.value, value) || e.list != list || len(e.items) != len(items) || e.version != version || e.expires != expires || e.sliding != sliding {
		return false
	}
	for i := range items {
		if !bytes.Equal(e.items[i], items[i]) {
			return false
		}
	}
	return true
}

// checkState finishes the scope-state check after a kill: the side file's
// ChangeStates against the log (lost, in flight, refused), the replay's
// state (live: the projection of each scope at the kill) against the
// model, and a server on store answering GetState and RangeState as the
// model says.
func checkState(ctx context.Context, store *eventstore.BoltStore, sf *stateFold, live map[string]*frames.State) (StateStats, error) {
	for _, id := range sf.side.order {
		r := sf.side.ByID[id]
		if r.Op != "ChangeState" {
			continue
		}
		switch {
		case r.Acked && !sf.seen[id]:
			sf.stats.Lost++
			sf.fail(false, "LOST: the acknowledged ChangeState %s of scope %q is not in the log", id, r.Scope)
		case r.Acked:
			sf.stats.Acked++
		case r.Refused == string(messages.CodeStateConflict):
			sf.stats.Conflicts++
			if sf.seen[id] {
				sf.fail(true, "ChangeState %s of scope %q was refused state_conflict, yet it is in the log", id, r.Scope)
			}
		case r.Refused == string(messages.CodeRequestExpired):
			sf.stats.Expired++
			if sf.seen[id] {
				sf.stats.ExpiredWhole++
			}
		case r.Refused != "":
			if sf.seen[id] {
				sf.fail(true, "ChangeState %s of scope %q was refused (%s), yet it is in the log", id, r.Scope, r.Refused)
			}
		case sf.seen[id]:
			sf.stats.InFlight++
		default:
			sf.stats.Absent++
		}
	}
	if n := sf.stats.Acked + sf.stats.InFlight + sf.stats.ExpiredWhole; n != sf.stats.Requests {
		sf.fail(false, "%d ChangeStates in the log; the side file accounts for %d (acknowledged, in flight, resent past the horizon)", sf.stats.Requests, n)
	}
	names := make([]string, 0, len(live))
	for name := range live {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		st := live[name]
		levels := sf.scopes[name]
		for frame, lv := range levels {
			var held map[string]*frames.KVEntry
			if frame == "" {
				held = st.KV
			} else if f := st.Frames[frame]; f != nil && f.Status.Live() {
				held = f.KV
			} else if len(lv) > 0 {
				sf.fail(true, "scope %q: the model holds %d keys at the level of %q, which is not live in the replay", name, len(lv), frame)
				continue
			}
			if len(held) != len(lv) {
				sf.fail(true, "scope %q level %q: the replay holds %d keys, the requests folded %d", name, frame, len(held), len(lv))
				continue
			}
			for k, m := range lv {
				h := held[k]
				if h == nil || !m.same(h.Value, h.Items, h.List, h.Version, h.ExpiresAt, h.Sliding) || h.TTL != m.ttl {
					sf.fail(true, "scope %q level %q key %q: the replay holds %+v, the requests folded %+v", name, frame, k, h, m)
				}
			}
			if len(lv) > 0 {
				sf.stats.Levels++
				sf.stats.Keys += len(lv)
			}
		}
		// No level the model does not know holds anything.
		if len(st.KV) > 0 && levels[""] == nil {
			sf.fail(true, "scope %q holds %d keys no request wrote", name, len(st.KV))
		}
		for id, f := range st.Frames {
			if len(f.KV) > 0 && levels[id] == nil {
				sf.fail(true, "scope %q frame %q holds %d keys no request wrote", name, id, len(f.KV))
			}
		}
	}
	if len(sf.errs) == 0 {
		if err := sf.read(ctx, store, names); err != nil {
			return sf.stats, err
		}
	}
	if len(sf.errs) > 0 {
		return sf.stats, fmt.Errorf("scope state:\n  %s", strings.Join(sf.errs, "\n  "))
	}
	return sf.stats, nil
}

// read compares what a server on store answers with the model: RangeState
// of every level the model holds keys at, a page of 3 at a time, and
// GetState of every key of the storm at the scope's level.
func (sf *stateFold) read(ctx context.Context, store *eventstore.BoltStore, names []string) error {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys := quietSystem(quiet)
	defer sys.Shutdown()
	cfg := Config(quiet)
	cfg.OutboxOff, cfg.RegistryOff = true, true // it only reads
	cfg.StateExpiryCheck = -1
	srv, err := actors.Start(sys, store, cfg)
	if err != nil {
		return err
	}
	defer srv.Stop()
	c := srv.Client()
	for _, name := range names {
		frameIDs := make([]string, 0, len(sf.scopes[name]))
		for f, lv := range sf.scopes[name] {
			if len(lv) > 0 {
				frameIDs = append(frameIDs, f)
			}
		}
		sort.Strings(frameIDs)
		for _, frame := range frameIDs {
			lv := sf.scopes[name][frame]
			var got []frames.StateEntry
			after := ""
			for page := 0; ; page++ {
				r, err := c.RangeState(ctx, &messages.RangeState{Header: messages.Header{Scope: name}, FrameID: frame, After: after, Limit: 3})
				if err != nil {
					return fmt.Errorf("scope %q: RangeState of level %q after %q: %w", name, frame, after, err)
				}
				got = append(got, r.Entries...)
				if r.Next == "" || page > len(lv) {
					break
				}
				after = r.Next
			}
			sf.compare(fmt.Sprintf("scope %q: RangeState of level %q", name, frame), lv, got)
		}
		g, err := c.GetState(ctx, &messages.GetState{Header: messages.Header{Scope: name}, Keys: stateKeys})
		if err != nil {
			return fmt.Errorf("scope %q: GetState: %w", name, err)
		}
		sf.compare(fmt.Sprintf("scope %q: GetState", name), sf.scopes[name][""], g.Entries)
		if len(g.Entries)+len(g.Missing) != len(stateKeys) {
			sf.fail(true, "scope %q: GetState of %d keys answered %d found and %d missing", name, len(stateKeys), len(g.Entries), len(g.Missing))
		}
	}
	return nil
}

// compare checks entries a read answered against the model's level, key
// for key (sorted by key, as the model's are).
func (sf *stateFold) compare(where string, lv map[string]*stateEntry, got []frames.StateEntry) {
	if len(got) != len(lv) {
		sf.fail(true, "%s answered %d keys, the requests folded %d", where, len(got), len(lv))
		return
	}
	for _, e := range got {
		m := lv[e.Key]
		if m == nil || !m.same(e.Value, e.Items, e.List, e.Version, e.ExpiresAt, e.Sliding) {
			sf.fail(true, "%s: key %q is %+v, the requests folded %+v", where, e.Key, e, m)
		}
	}
}
