package frames_test

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/frames"
)

// kvModel is the property test's model of a scope's key-value state, kept
// from the rules kv.go states (its doc and DESIGN §12), not from its code:
// a map per level (the scope's, "", and each live frame's) of key → value
// or list, version and expiry. It predicts every read and every refusal.
type kvModel struct {
	cfg    frames.Config
	levels map[string]map[string]*mEntry
	order  []string // live frames, in push order
}

type mEntry struct {
	value   []byte
	items   [][]byte
	list    bool
	version int64
	expires int64 // 0: never
	ttl     int64
	sliding bool
}

func (e *mEntry) expired(now int64) bool { return e.expires != 0 && now >= e.expires }

// size is what an entry counts against the scope's limit: its key, its
// value or each item (+4), and 32 for the entry.
func mSize(key string, e *mEntry) int64 {
	n := int64(len(key)+len(e.value)) + 32
	for _, it := range e.items {
		n += int64(len(it)) + 4
	}
	return n
}

// mValueSize is what counts against the per-value limit.
func mValueSize(e *mEntry) int64 { return mSize("", e) - 32 }

func newKVModel(cfg frames.Config) *kvModel {
	return &kvModel{cfg: cfg, levels: map[string]map[string]*mEntry{"": {}}}
}

func (m *kvModel) clone() *kvModel {
	c := &kvModel{cfg: m.cfg, levels: map[string]map[string]*mEntry{}, order: append([]string(nil), m.order...)}
	for f, lv := range m.levels {
		c.levels[f] = map[string]*mEntry{}
		for k, e := range lv {
			ec := *e
			ec.items = append([][]byte(nil), e.items...)
			c.levels[f][k] = &ec
		}
	}
	return c
}

// total is what the scope's state counts: every entry of every level,
// expired ones not yet removed included.
func (m *kvModel) total() int64 {
	var n int64
	for _, lv := range m.levels {
		for k, e := range lv {
			n += mSize(k, e)
		}
	}
	return n
}

func (m *kvModel) validKey(k string) bool {
	return k != "" && len(k) <= m.cfg.MaxStateKeyBytes && utf8.ValidString(k) && !strings.Contains(k, "\x00")
}

// mOutcome is what the model predicts of a ChangeState.
type mOutcome struct {
	err      error // nil, or the sentinel the refusal must match
	conflict *frames.StateConflictError
	tooLarge *frames.StateTooLargeError
	expired  []frames.ExpiredKey
}

// change applies ops at now as version: the model after them and the
// outcome (on a refusal, m unchanged).
func (m *kvModel) change(ops []frames.StateOp, now, version int64) (*kvModel, mOutcome) {
	if len(ops) == 0 || len(ops) > frames.MaxStateOps {
		return m, mOutcome{err: frames.ErrInvalidArgument}
	}
	n := m.clone()
	total := m.total()
	var out mOutcome
	seen := map[string]bool{}
	// level is frame's level, its expired keys removed (sorted by key)
	// the first time the request touches it.
	level := func(frame string) map[string]*mEntry {
		lv := n.levels[frame]
		if !seen[frame] {
			seen[frame] = true
			var keys []string
			for k, e := range lv {
				if e.expired(now) {
					keys = append(keys, k)
				}
			}
			sort.Strings(keys)
			for _, k := range keys {
				out.expired = append(out.expired, frames.ExpiredKey{Frame: frame, Key: k, Version: lv[k].version})
				total -= mSize(k, lv[k])
				delete(lv, k)
			}
		}
		return lv
	}
	refuse := func(err error) (*kvModel, mOutcome) { return m, mOutcome{err: err} }
	for _, op := range ops {
		if _, live := n.levels[op.Frame]; !live {
			return refuse(frames.ErrFrameNotFound)
		}
		if op.TTL < -1 {
			return refuse(frames.ErrInvalidArgument)
		}
		if op.Kind == frames.StateClear {
			if op.Key != "" || op.Value != nil || op.IfVersion != nil || op.TTL != 0 || op.Keep != 0 || op.Sliding || (op.Prefix != "" && !m.validKey(op.Prefix)) {
				return refuse(frames.ErrInvalidArgument)
			}
			lv := level(op.Frame)
			for k, e := range lv {
				if strings.HasPrefix(k, op.Prefix) {
					total -= mSize(k, e)
					delete(lv, k)
				}
			}
			continue
		}
		if op.Prefix != "" || !m.validKey(op.Key) {
			return refuse(frames.ErrInvalidArgument)
		}
		lv := level(op.Frame)
		cur := lv[op.Key]
		var have int64
		if cur != nil {
			have = cur.version
		}
		if op.IfVersion != nil {
			if *op.IfVersion < 0 {
				return refuse(frames.ErrInvalidArgument)
			}
			if *op.IfVersion != have {
				return m, mOutcome{err: frames.ErrStateConflict, conflict: &frames.StateConflictError{Key: op.Key, Frame: op.Frame, Want: *op.IfVersion, Have: have, Op: op.Kind}}
			}
		}
		var next *mEntry
		switch op.Kind {
		case frames.StateDelete:
			if op.Value != nil || op.TTL != 0 || op.Keep != 0 || op.Sliding {
				return refuse(frames.ErrInvalidArgument)
			}
		case frames.StateSet, frames.StatePush, frames.StateTouch:
			// The key's expiry: a new TTL from now; -1 none; 0 the key's
			// own rule (a sliding TTL pushed back from now).
			next = &mEntry{version: version}
			if cur != nil {
				next.expires, next.ttl, next.sliding = cur.expires, cur.ttl, cur.sliding
			}
			switch {
			case op.TTL > 0:
				next.expires, next.ttl, next.sliding = now+op.TTL, op.TTL, op.Sliding
			case op.TTL == -1:
				if op.Sliding {
					return refuse(frames.ErrInvalidArgument) // no TTL to slide
				}
				next.expires, next.ttl, next.sliding = 0, 0, false
			case op.Sliding:
				return refuse(frames.ErrInvalidArgument)
			case next.sliding:
				next.expires = now + next.ttl
			}
			switch op.Kind {
			case frames.StateSet:
				if op.Keep != 0 {
					return refuse(frames.ErrInvalidArgument)
				}
				next.value = op.Value
			case frames.StatePush:
				if op.Keep < 0 || op.Keep > frames.MaxPushKeep || (cur != nil && !cur.list) {
					return refuse(frames.ErrInvalidArgument)
				}
				next.list = true
				if cur != nil {
					next.items = append(next.items, cur.items...)
				}
				next.items = append(next.items, op.Value)
				if op.Keep > 0 && int64(len(next.items)) > op.Keep {
					next.items = next.items[int64(len(next.items))-op.Keep:]
				}
			case frames.StateTouch:
				if cur == nil {
					return refuse(frames.ErrStateKeyNotFound)
				}
				if op.Value != nil || op.Keep != 0 {
					return refuse(frames.ErrInvalidArgument)
				}
				next.value, next.items, next.list = cur.value, cur.items, cur.list
			}
			if vs := mValueSize(next); vs > int64(m.cfg.MaxStateValueBytes) {
				return m, mOutcome{err: frames.ErrStateTooLarge, tooLarge: &frames.StateTooLargeError{Key: op.Key, Frame: op.Frame, What: "value", Size: vs, Limit: int64(m.cfg.MaxStateValueBytes)}}
			}
		default:
			return refuse(frames.ErrInvalidArgument)
		}
		if cur != nil {
			total -= mSize(op.Key, cur)
			delete(lv, op.Key)
		}
		if next != nil {
			total += mSize(op.Key, next)
			if total > int64(m.cfg.MaxStateBytes) {
				return m, mOutcome{err: frames.ErrStateTooLarge, tooLarge: &frames.StateTooLargeError{Key: op.Key, Frame: op.Frame, What: "state", Size: total, Limit: int64(m.cfg.MaxStateBytes)}}
			}
			lv[op.Key] = next
		}
	}
	return n, out
}

// expire removes every expired key at now: the scope's level first, then
// the frames' in push order, each sorted by key.
func (m *kvModel) expire(now int64) []frames.ExpiredKey {
	var out []frames.ExpiredKey
	for _, f := range append([]string{""}, m.order...) {
		lv := m.levels[f]
		var keys []string
		for k, e := range lv {
			if e.expired(now) {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			out = append(out, frames.ExpiredKey{Frame: f, Key: k, Version: lv[k].version})
			delete(lv, k)
		}
	}
	return out
}

// live lists a level's entries that reads show at now, sorted by key.
func (m *kvModel) live(frame string, now int64) []frames.StateEntry {
	var out []frames.StateEntry
	for k, e := range m.levels[frame] {
		if !e.expired(now) {
			out = append(out, frames.StateEntry{Key: k, Value: e.value, Items: e.items, List: e.list, Version: e.version, ExpiresAt: e.expires, Sliding: e.sliding})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// sameEntries compares entries, an empty value or item equal to none (the
// log does not tell them apart).
func sameEntries(t *rapid.T, what string, want, got []frames.StateEntry) {
	if len(want) != len(got) {
		t.Fatalf("%s: %d entries, the model has %d:\n got %+v\nwant %+v", what, len(got), len(want), got, want)
	}
	for i := range want {
		w, g := want[i], got[i]
		same := w.Key == g.Key && bytes.Equal(w.Value, g.Value) && w.List == g.List && len(w.Items) == len(g.Items) &&
			w.Version == g.Version && w.ExpiresAt == g.ExpiresAt && w.Sliding == g.Sliding
		for j := 0; same && j < len(w.Items); j++ {
			same = bytes.Equal(w.Items[j], g.Items[j])
		}
		if !same {
			t.Fatalf("%s: entry %d is %+v, the model's %+v", what, i, g, w)
		}
	}
}

// checkAgainstModel compares the state with the model: what every read at
// now answers, for every live level, and what each level holds, expired
// keys not yet removed included.
func checkAgainstModel(t *rapid.T, cfg frames.Config, s *frames.State, m *kvModel, now int64, keys []string) {
	if got, want := s.KVBytes, m.total(); got != want {
		t.Fatalf("KVBytes %d, the model's state counts %d", got, want)
	}
	for _, f := range append([]string{""}, m.order...) {
		var held map[string]*frames.KVEntry
		if f == "" {
			held = s.KV
		} else if fr := s.Frames[f]; fr != nil {
			held = fr.KV
		}
		if len(held) != len(m.levels[f]) {
			t.Fatalf("level %q holds %d keys, the model %d", f, len(held), len(m.levels[f]))
		}
		for k, e := range m.levels[f] {
			h := held[k]
			same := h != nil && bytes.Equal(h.Value, e.value) && h.List == e.list && len(h.Items) == len(e.items) &&
				h.Version == e.version && h.ExpiresAt == e.expires && h.TTL == e.ttl && h.Sliding == e.sliding
			for i := 0; same && i < len(e.items); i++ {
				same = bytes.Equal(h.Items[i], e.items[i])
			}
			if !same {
				t.Fatalf("level %q key %q: held %+v, the model's %+v", f, k, h, e)
			}
		}

		want := m.live(f, now)
		es, next, size, err := frames.RangeState(s, f, "", "", frames.MaxStateOps, now, cfg)
		if err != nil || next != "" {
			t.Fatalf("RangeState(%q): %v, next %q", f, err, next)
		}
		sameEntries(t, fmt.Sprintf("RangeState(%q)", f), want, es)
		var bytes int64
		for _, e := range want {
			bytes += mSize(e.Key, m.levels[f][e.Key])
		}
		if size != (frames.StateSize{Keys: int64(len(want)), Bytes: bytes, Total: m.total(), Limit: int64(cfg.MaxStateBytes)}) {
			t.Fatalf("RangeState(%q) size %+v; the model: %d keys, %d bytes, %d in all", f, size, len(want), bytes, m.total())
		}
		// Page by page through a prefix, one key a page.
		var paged, prefixed []frames.StateEntry
		for _, e := range want {
			if strings.HasPrefix(e.Key, "c/") {
				prefixed = append(prefixed, e)
			}
		}
		after := ""
		for range len(prefixed) + 1 {
			es, next, _, err := frames.RangeState(s, f, "c/", after, 1, now, cfg)
			if err != nil {
				t.Fatalf("RangeState(%q, c/ after %q): %v", f, after, err)
			}
			paged = append(paged, es...)
			if next == "" {
				break
			}
			after = next
		}
		sameEntries(t, fmt.Sprintf("RangeState(%q, c/) by pages", f), prefixed, paged)
		// GetState of every key, in the order asked.
		found, missing, err := frames.GetState(s, f, keys, now, cfg)
		if err != nil {
			t.Fatalf("GetState(%q): %v", f, err)
		}
		var wantFound []frames.StateEntry
		var wantMissing []string
		byKey := map[string]frames.StateEntry{}
		for _, e := range want {
			byKey[e.Key] = e
		}
		for _, k := range keys {
			if e, ok := byKey[k]; ok {
				wantFound = append(wantFound, e)
			} else {
				wantMissing = append(wantMissing, k)
			}
		}
		sameEntries(t, fmt.Sprintf("GetState(%q)", f), wantFound, found)
		if !reflect.DeepEqual(wantMissing, missing) {
			t.Fatalf("GetState(%q) missing %v, the model %v", f, missing, wantMissing)
		}
	}
}

// Random sequences of ChangeState (several operations each, keys from a
// small set, both levels, conditional writes, TTLs, now and then a
// malformed operation), ExpireState, frames pushed and popped and the
// clock moving, against the model: every refusal is the one the model
// predicts (a conflict and a size error with their fields) and decides no
// events; every accepted change is one state.changed removing exactly the
// expired keys the model does; after every step the state holds what the
// model holds, every read (GetState, RangeState, by pages) answers what
// it predicts, the invariants hold, and the fold of the log equals the
// state.
func TestPropertyScopeState(t *testing.T) {
	keys := []string{"a", "b", "c/1", "c/2"}
	counts := map[string]int{} // what the runs exercised, for the log
	defer func() { t.Logf("scope state property: %v", counts) }()
	rapid.Check(t, func(t *rapid.T) {
		cfg := frames.DefaultConfig()
		cfg.MaxStateKeyBytes = 8
		cfg.MaxStateValueBytes = 60
		cfg.MaxStateBytes = 400
		s := frames.NewState("prop", 0)
		m := newKVModel(cfg)
		var log []frames.Event
		now := int64(1_000)
		n := 0
		hdr := func() frames.Header {
			n++
			return frames.Header{RequestID: fmt.Sprintf("q%d", n), RequestHash: []byte{byte(n)}, Now: now}
		}
		apply := func(evs []frames.Event) {
			for _, e := range evs {
				if err := frames.Apply(s, e); err != nil {
					t.Fatalf("decided %s does not apply: %v", e.EventType(), err)
				}
				if err := frames.CheckInvariants(s); err != nil {
					t.Fatalf("after %s: %v", e.EventType(), err)
				}
			}
			log = append(log, evs...)
		}
		decide := func(cmd frames.Command) ([]frames.Event, error) {
			before := s.Clone()
			evs, err := frames.Decide(cfg, s, cmd)
			if !reflect.DeepEqual(before, s.Clone()) {
				t.Fatalf("Decide(%T) changed the state", cmd)
			}
			if err != nil && evs != nil {
				t.Fatalf("Decide(%T) refused (%v) and decided events", cmd, err)
			}
			return evs, err
		}
		evs, err := decide(&frames.PushFrame{Header: hdr(), FrameID: "r", Goal: "g", Budget: budget.TokenBudget{Total: 1_000_000}})
		if err != nil {
			t.Fatal(err)
		}
		apply(evs)
		m.levels["r"], m.order = map[string]*mEntry{}, []string{"r"}
		pushed := []string{"r"} // every frame pushed, live or not
		counts["runs"]++

		steps := rapid.IntRange(1, 60).Draw(t, "steps")
		for step := 0; step < steps; step++ {
			now += rapid.Int64Range(0, 60).Draw(t, "tick")
			switch k := rapid.IntRange(0, 19).Draw(t, "step"); {
			case k < 14:
				ops := make([]frames.StateOp, rapid.IntRange(1, 4).Draw(t, "nops"))
				for i := range ops {
					ops[i] = genStateOp(t, s, m, pushed, keys)
				}
				want, out := m.change(ops, now, s.Version+1)
				evs, err := decide(&frames.ChangeState{Header: hdr(), Ops: ops})
				switch {
				case out.err == nil && err != nil:
					t.Fatalf("ChangeState %+v refused (%v); the model accepts it", ops, err)
				case out.err != nil && err == nil:
					t.Fatalf("ChangeState %+v accepted; the model refuses it (%v)", ops, out.err)
				case err != nil:
					counts["refused "+strings.TrimPrefix(out.err.Error(), "frames: ")]++
					if out.err == frames.ErrFrameNotFound {
						if !errors.Is(err, frames.ErrFrameNotFound) && !errors.Is(err, frames.ErrFrameNotLive) {
							t.Fatalf("ChangeState %+v: %v, want a frame that is not live", ops, err)
						}
						break
					}
					if !errors.Is(err, out.err) {
						t.Fatalf("ChangeState %+v: %v, want %v", ops, err, out.err)
					}
					if out.conflict != nil {
						var ce *frames.StateConflictError
						if !errors.As(err, &ce) || *ce != *out.conflict {
							t.Fatalf("ChangeState %+v: %v, want %+v", ops, err, *out.conflict)
						}
					}
					if out.tooLarge != nil {
						var tl *frames.StateTooLargeError
						if !errors.As(err, &tl) || *tl != *out.tooLarge {
							t.Fatalf("ChangeState %+v: %v, want %+v", ops, err, *out.tooLarge)
						}
					}
				default:
					counts[fmt.Sprintf("applied %d ops", len(ops))]++
					if len(evs) != 1 {
						t.Fatalf("ChangeState decided %d events", len(evs))
					}
					sc := evs[0].(*frames.StateChanged)
					if len(sc.Changes) != len(ops) || !reflect.DeepEqual(sc.Expired, out.expired) {
						t.Fatalf("state.changed of %d changes removing %v; the model: %d, removing %v", len(sc.Changes), sc.Expired, len(ops), out.expired)
					}
					if len(out.expired) > 0 {
						counts["expired by a change"]++
					}
					apply(evs)
					m = want
				}
			case k < 16:
				removed := m.expire(now)
				evs, err := decide(&frames.ExpireState{Header: hdr()})
				if err != nil {
					t.Fatalf("ExpireState: %v", err)
				}
				if len(removed) == 0 {
					if len(evs) != 0 {
						t.Fatalf("ExpireState with nothing expired decided %d events", len(evs))
					}
					break
				}
				counts["expired by ExpireState"]++
				if len(evs) != 1 || !reflect.DeepEqual(evs[0].(*frames.StateExpired).Keys, removed) {
					t.Fatalf("ExpireState decided %v; the model removes %v", evs, removed)
				}
				apply(evs)
			case k < 17:
				id := fmt.Sprintf("f%d", n)
				evs, err := decide(&frames.PushFrame{Header: hdr(), FrameID: id, ParentID: "r", Goal: "g", Budget: budget.TokenBudget{Total: 10}})
				if err != nil {
					t.Fatalf("push: %v", err)
				}
				apply(evs)
				pushed = append(pushed, id)
				m.levels[id], m.order = map[string]*mEntry{}, append(m.order, id)
			case k < 18:
				if len(m.order) < 2 {
					break
				}
				id := rapid.SampledFrom(m.order[1:]).Draw(t, "pop")
				evs, err := decide(&frames.PopFrame{Header: hdr(), FrameID: id, Status: frames.StatusCompleted})
				if err != nil {
					t.Fatalf("pop: %v", err)
				}
				apply(evs)
				counts["frames popped"]++
				delete(m.levels, id)
				for i, f := range m.order {
					if f == id {
						m.order = append(m.order[:i:i], m.order[i+1:]...)
						break
					}
				}
			default:
				now += rapid.Int64Range(100, 400).Draw(t, "jump")
			}

			checkAgainstModel(t, cfg, s, m, now, append(keys, "zz"))
			for _, f := range pushed {
				if _, live := m.levels[f]; !live {
					if _, _, err := frames.GetState(s, f, keys, now, cfg); !errors.Is(err, frames.ErrFrameNotFound) {
						t.Fatalf("GetState of the popped frame %q: %v", f, err)
					}
				}
			}
			r := frames.NewState("prop", 0)
			for _, e := range log {
				if err := frames.Apply(r, e); err != nil {
					t.Fatalf("replay: %v", err)
				}
			}
			if !reflect.DeepEqual(r.Clone(), s.Clone()) {
				t.Fatalf("the fold of the log differs from the state after step %d", step)
			}
		}
	})
}

// genStateOp draws an operation that is mostly valid and sometimes not: a
// level (the scope's, a live frame's, now and then one popped), a key of
// the small set (or a bad one), a value of up to 70 bytes, a condition on
// the key's version (its own, 0, another), a TTL (fixed or sliding, -1, a
// bad one), a window.
func genStateOp(t *rapid.T, s *frames.State, m *kvModel, pushed, keys []string) frames.StateOp {
	var op frames.StateOp
	switch rapid.IntRange(0, 9).Draw(t, "level") {
	case 0, 1, 2, 3, 4:
	case 5:
		op.Frame = rapid.SampledFrom(pushed).Draw(t, "anyframe")
	default:
		op.Frame = rapid.SampledFrom(m.order).Draw(t, "frame")
	}
	op.Kind = rapid.SampledFrom([]string{frames.StateSet, frames.StateSet, frames.StateSet, frames.StatePush, frames.StatePush, frames.StatePush,
		frames.StateDelete, frames.StateTouch, frames.StateTouch, frames.StateClear}).Draw(t, "kind")
	if op.Kind == frames.StateClear {
		op.Prefix = rapid.SampledFrom([]string{"", "c/", "a"}).Draw(t, "prefix")
		if rare(t, "badclear") {
			op.Key = "a"
		}
		op.Sliding = rare(t, "slidingclear")
		return op
	}
	// Sets mostly on a and b, pushes on c/1 and c/2 (a push onto a value
	// is refused), touches mostly on a key the level holds.
	switch {
	case rapid.IntRange(0, 99).Draw(t, "anykey") >= 80:
		op.Key = rapid.SampledFrom(keys).Draw(t, "key")
	case op.Kind == frames.StatePush:
		op.Key = rapid.SampledFrom([]string{"c/1", "c/2"}).Draw(t, "listkey")
	case op.Kind == frames.StateTouch && len(m.levels[op.Frame]) > 0:
		held := make([]string, 0, len(m.levels[op.Frame]))
		for k := range m.levels[op.Frame] {
			held = append(held, k)
		}
		sort.Strings(held)
		op.Key = rapid.SampledFrom(held).Draw(t, "heldkey")
	default:
		op.Key = rapid.SampledFrom([]string{"a", "b"}).Draw(t, "valuekey")
	}
	if rare(t, "badkey") {
		op.Key = rapid.SampledFrom([]string{"", "toolongkey", "a\x00", "\xff"}).Draw(t, "bad")
	}
	if op.Kind == frames.StateSet || op.Kind == frames.StatePush {
		if n := rapid.IntRange(-1, 70).Draw(t, "len"); n >= 0 {
			op.Value = bytes.Repeat([]byte{byte('a' + n%26)}, n)
		}
	}
	if op.Kind == frames.StatePush {
		op.Keep = rapid.SampledFrom([]int64{0, 0, 1, 2, 3}).Draw(t, "keep")
	}
	if op.Kind != frames.StateDelete {
		switch n := rapid.IntRange(0, 99).Draw(t, "ttl"); {
		case n < 75:
		case n < 90:
			op.TTL = rapid.SampledFrom([]int64{30, 100, 250}).Draw(t, "d")
			op.Sliding = rapid.Bool().Draw(t, "sliding")
		case n < 95:
			op.TTL = -1
			op.Sliding = rare(t, "slidingnone")
		case n < 97:
			op.TTL = -3
		case n < 99:
			op.Sliding = true // without a TTL: refused
		}
	}
	if rapid.IntRange(0, 99).Draw(t, "conditional") >= 70 {
		var v int64
		if e := m.levels[op.Frame][op.Key]; e != nil {
			v = e.version // expired or not: the raw stored version
		}
		switch n := rapid.IntRange(0, 99).Draw(t, "ifversion"); {
		case n < 60:
		case n < 80:
			v = 0
		case n < 97:
			v = rapid.Int64Range(1, s.Version+2).Draw(t, "anyversion")
		default:
			v = -1
		}
		op.IfVersion = &v
	}
	if rare(t, "malformed") {
		switch rapid.IntRange(0, 4).Draw(t, "how") {
		case 0:
			op.Prefix = "c/"
		case 1:
			op.Keep = 2 // on a set, delete or touch
		case 2:
			op.Value = []byte("x") // on a delete or touch
		case 3:
			op.Kind = "merge"
		default:
			op.Keep = -1
		}
	}
	return op
}

// rare draws true now and then (3%): rapid favours small numbers, so the
// rare case is the top of the range.
func rare(t *rapid.T, label string) bool { return rapid.IntRange(0, 99).Draw(t, label) >= 97 }
