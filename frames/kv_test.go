package frames_test

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/frames"
)

// Scope state's rules (kv.go), driven through Decide and Apply by the world
// of frames_test.go: every Apply is followed by CheckInvariants
// (checkKVInvariants among them), every Decide is checked to change
// nothing, and refusals go through world.refused (no events, the state
// as it was).

func ifv(n int64) *int64 { return &n }

func kvSet(key, v string) frames.StateOp {
	return frames.StateOp{Kind: frames.StateSet, Key: key, Value: []byte(v)}
}

func kvPush(key, v string, keep int64) frames.StateOp {
	return frames.StateOp{Kind: frames.StatePush, Key: key, Value: []byte(v), Keep: keep}
}

func kvDel(key string) frames.StateOp { return frames.StateOp{Kind: frames.StateDelete, Key: key} }

func kvTouch(key string) frames.StateOp { return frames.StateOp{Kind: frames.StateTouch, Key: key} }

func kvClear(prefix string) frames.StateOp {
	return frames.StateOp{Kind: frames.StateClear, Prefix: prefix}
}

// on puts op on frame's level.
func on(frame string, op frames.StateOp) frames.StateOp { op.Frame = frame; return op }

// when makes op conditional on version v (0: absent).
func when(v int64, op frames.StateOp) frames.StateOp { op.IfVersion = ifv(v); return op }

// ttl gives op a TTL (ns), sliding or fixed.
func ttl(d int64, sliding bool, op frames.StateOp) frames.StateOp {
	op.TTL, op.Sliding = d, sliding
	return op
}

func (w *world) change(ops ...frames.StateOp) *frames.ChangeState {
	return &frames.ChangeState{Header: w.hdr(), Ops: ops}
}

// mustChange applies ops as one ChangeState and returns its one event.
func (w *world) mustChange(ops ...frames.StateOp) *frames.StateChanged {
	w.t.Helper()
	evs := w.must(w.change(ops...))
	require.Len(w.t, evs, 1, "one state.changed a request")
	return evs[0].(*frames.StateChanged)
}

// level renders frame's level ("" the scope's) as reads see it at the
// world's time: key → "=value" or "[item item]".
func (w *world) level(frame string) map[string]string {
	w.t.Helper()
	return w.levelAt(frame, w.now)
}

func (w *world) levelAt(frame string, now int64) map[string]string {
	w.t.Helper()
	es, next, _, err := frames.RangeState(w.s, frame, "", "", frames.MaxStateOps, now, w.cfg)
	require.NoError(w.t, err)
	require.Empty(w.t, next)
	out := map[string]string{}
	for _, e := range es {
		out[e.Key] = render(e)
	}
	return out
}

func render(e frames.StateEntry) string {
	if !e.List {
		return "=" + string(e.Value)
	}
	items := make([]string, len(e.Items))
	for i, it := range e.Items {
		items[i] = string(it)
	}
	return "[" + strings.Join(items, " ") + "]"
}

// entry is key of frame's level as GetState answers it at now (nil:
// missing).
func (w *world) entryAt(frame, key string, now int64) *frames.StateEntry {
	w.t.Helper()
	found, missing, err := frames.GetState(w.s, frame, []string{key}, now, w.cfg)
	require.NoError(w.t, err)
	if len(found) == 0 {
		require.Equal(w.t, []string{key}, missing)
		return nil
	}
	require.Len(w.t, found, 1)
	return &found[0]
}

func (w *world) entry(frame, key string) *frames.StateEntry {
	w.t.Helper()
	return w.entryAt(frame, key, w.now)
}

// kvBytes is what the scope's entries count, added up from the state (both
// levels), to hold KVBytes against.
func kvBytes(s *frames.State) int64 {
	var n int64
	add := func(m map[string]*frames.KVEntry) {
		for k, e := range m {
			n += int64(len(k)+len(e.Value)) + 32
			for _, it := range e.Items {
				n += int64(len(it)) + 4
			}
		}
	}
	add(s.KV)
	for _, f := range s.Frames {
		add(f.KV)
	}
	return n
}

// checkReplay checks that the fold of the log equals the live state, and
// that a Clone equals it too and shares no bytes with it.
func (w *world) checkReplay() {
	w.t.Helper()
	r := w.replay()
	require.NoError(w.t, frames.CheckInvariants(r))
	assert.True(w.t, reflect.DeepEqual(w.s.Clone(), r.Clone()), "the fold of the log equals the live state")
	assert.Equal(w.t, w.s.KVBytes, kvBytes(w.s), "KVBytes is what the entries count")
	c := w.s.Clone()
	assert.Equal(w.t, w.s.KV, c.KV, "a Clone holds the scope's state")
	for id, f := range w.s.Frames {
		assert.Equal(w.t, f.KV, c.Frames[id].KV, "a Clone holds frame %q's state", id)
	}
	// Scribbling over the clone's bytes leaves the state alone.
	before := w.s.Clone()
	scribble := func(m map[string]*frames.KVEntry) {
		for _, e := range m {
			for i := range e.Value {
				e.Value[i] ^= 0xff
			}
			for _, it := range e.Items {
				for i := range it {
					it[i] ^= 0xff
				}
			}
			e.Version = -7
		}
	}
	scribble(c.KV)
	for _, f := range c.Frames {
		scribble(f.KV)
	}
	assert.True(w.t, reflect.DeepEqual(before, w.s.Clone()), "a Clone shares nothing with the state")
}

// Every operation kind on its own and in the combinations that matter,
// at both levels: what reads see after it, and the event it decides.
func TestStateOperations(t *testing.T) {
	seed := []frames.StateOp{kvSet("plan", "v1"), kvSet("flags/a", "1"), kvSet("flags/b", "2"), kvSet("other", "o"),
		kvPush("msgs", "m1", 0), kvPush("msgs", "m2", 0)}
	all := map[string]string{"plan": "=v1", "flags/a": "=1", "flags/b": "=2", "other": "=o", "msgs": "[m1 m2]"}
	with := func(changes map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range all {
			out[k] = v
		}
		for k, v := range changes {
			if v == "" {
				delete(out, k)
			} else {
				out[k] = v
			}
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		ops    []frames.StateOp
		want   map[string]string // the level after ("": the key is gone)
		change []frames.StateChange
	}{
		{name: "set a new key", ops: []frames.StateOp{kvSet("new", "n")}, want: with(map[string]string{"new": "=n"}),
			change: []frames.StateChange{{Kind: "set", Key: "new", Value: []byte("n")}}},
		{name: "set over a value", ops: []frames.StateOp{kvSet("plan", "v2")}, want: with(map[string]string{"plan": "=v2"})},
		{name: "set an empty value", ops: []frames.StateOp{kvSet("plan", "")}, want: with(map[string]string{"plan": "="})},
		{name: "set over a list makes it a value", ops: []frames.StateOp{kvSet("msgs", "flat")}, want: with(map[string]string{"msgs": "=flat"})},
		{name: "delete a key", ops: []frames.StateOp{kvDel("plan")}, want: with(map[string]string{"plan": ""}),
			change: []frames.StateChange{{Kind: "delete", Key: "plan"}}},
		{name: "delete a list", ops: []frames.StateOp{kvDel("msgs")}, want: with(map[string]string{"msgs": ""})},
		{name: "delete an absent key is a no-op", ops: []frames.StateOp{kvDel("ghost")}, want: all},
		{name: "push onto a new list", ops: []frames.StateOp{kvPush("log", "l1", 0)}, want: with(map[string]string{"log": "[l1]"}),
			change: []frames.StateChange{{Kind: "push", Key: "log", Item: []byte("l1")}}},
		{name: "push onto a list", ops: []frames.StateOp{kvPush("msgs", "m3", 0)}, want: with(map[string]string{"msgs": "[m1 m2 m3]"})},
		{name: "push an empty item", ops: []frames.StateOp{kvPush("msgs", "", 0)}, want: with(map[string]string{"msgs": "[m1 m2 ]"}),
			change: []frames.StateChange{{Kind: "push", Key: "msgs", Item: []byte{}}}},
		{name: "push keeping the last 2", ops: []frames.StateOp{kvPush("msgs", "m3", 2)}, want: with(map[string]string{"msgs": "[m2 m3]"}),
			change: []frames.StateChange{{Kind: "push", Key: "msgs", Item: []byte("m3"), Trim: 1}}},
		{name: "push keeping the last 1", ops: []frames.StateOp{kvPush("msgs", "m3", 1)}, want: with(map[string]string{"msgs": "[m3]"}),
			change: []frames.StateChange{{Kind: "push", Key: "msgs", Item: []byte("m3"), Trim: 2}}},
		{name: "push keeping more than there are", ops: []frames.StateOp{kvPush("msgs", "m3", 10)}, want: with(map[string]string{"msgs": "[m1 m2 m3]"})},
		{name: "touch keeps the value", ops: []frames.StateOp{kvTouch("plan")}, want: all,
			change: []frames.StateChange{{Kind: "touch", Key: "plan"}}},
		{name: "touch keeps the list", ops: []frames.StateOp{kvTouch("msgs")}, want: all},
		{name: "clear everything", ops: []frames.StateOp{kvClear("")}, want: map[string]string{},
			change: []frames.StateChange{{Kind: "clear", Keys: []string{"flags/a", "flags/b", "msgs", "other", "plan"}}}},
		{name: "clear a prefix", ops: []frames.StateOp{kvClear("flags/")}, want: with(map[string]string{"flags/a": "", "flags/b": ""}),
			change: []frames.StateChange{{Kind: "clear", Prefix: "flags/", Keys: []string{"flags/a", "flags/b"}}}},
		{name: "clear a prefix nothing has", ops: []frames.StateOp{kvClear("zzz")}, want: all,
			change: []frames.StateChange{{Kind: "clear", Prefix: "zzz"}}},
		{name: "ops see the ones before them", ops: []frames.StateOp{kvDel("plan"), kvPush("plan", "p", 0), kvPush("plan", "q", 1), kvSet("x", "1"), kvSet("x", "2")},
			want: with(map[string]string{"plan": "[q]", "x": "=2"})},
		{name: "clear then set", ops: []frames.StateOp{kvClear(""), kvSet("plan", "fresh")}, want: map[string]string{"plan": "=fresh"}},
		{name: "set then clear", ops: []frames.StateOp{kvSet("flags/c", "3"), kvClear("flags/")}, want: with(map[string]string{"flags/a": "", "flags/b": ""}),
			change: []frames.StateChange{{Kind: "set", Key: "flags/c", Value: []byte("3")}, {Kind: "clear", Prefix: "flags/", Keys: []string{"flags/a", "flags/b", "flags/c"}}}},
	} {
		for _, frame := range []string{"", "r"} {
			name := tc.name + "/scope"
			if frame != "" {
				name = tc.name + "/frame"
			}
			t.Run(name, func(t *testing.T) {
				w := newWorld(t)
				w.push("r", "", 100)
				w.push("other", "", 100)
				w.mustChange(on("other", kvSet("untouched", "u"))) // another level: never touched
				for _, op := range seed {
					w.mustChange(on(frame, op))
				}
				before := map[string]*frames.StateEntry{}
				for k := range all {
					before[k] = w.entry(frame, k)
				}
				ops := make([]frames.StateOp, len(tc.ops))
				for i, op := range tc.ops {
					ops[i] = on(frame, op)
				}
				ev := w.mustChange(ops...)
				v := w.s.Version
				assert.Equal(t, tc.want, w.level(frame))
				assert.Equal(t, map[string]string{"untouched": "=u"}, w.level("other"))
				if frame == "" {
					assert.Equal(t, map[string]string{}, w.level("r"))
				} else {
					assert.Equal(t, map[string]string{}, w.level(""))
				}
				if tc.change != nil {
					for i := range tc.change {
						tc.change[i].Frame = frame
					}
					assert.Equal(t, tc.change, ev.Changes)
				}
				assert.Empty(t, ev.Expired)
				// The keys the request wrote are at its version, the others
				// where they were.
				written := map[string]bool{}
				for _, op := range tc.ops {
					if op.Kind != frames.StateDelete && op.Kind != frames.StateClear {
						written[op.Key] = true
					}
				}
				for k := range tc.want {
					e := w.entry(frame, k)
					require.NotNil(t, e, k)
					if written[k] {
						assert.Equal(t, v, e.Version, "%s is at the request's version", k)
					} else {
						assert.Equal(t, before[k].Version, e.Version, "%s is where it was", k)
					}
				}
				w.checkReplay()
			})
		}
	}
}

// Conditional writes: set, delete, push and touch with IfVersion apply
// when the key is at that version (0: absent, an expired key counting as
// absent), and are refused whole otherwise, with a *StateConflictError
// naming the key and both versions, deciding no events.
func TestStateConditionalWrites(t *testing.T) {
	for _, tc := range []struct {
		name     string
		op       frames.StateOp
		ifv      string // "v", "0", "v+1", "old"
		expired  bool   // the key expired before the write
		conflict bool
		after    string // the key after a write that applied ("": gone)
	}{
		{name: "set at its version", op: kvSet("k", "new"), ifv: "v", after: "=new"},
		{name: "set at another version", op: kvSet("k", "new"), ifv: "v+1", conflict: true},
		{name: "set at an older version", op: kvSet("k", "new"), ifv: "old", conflict: true},
		{name: "set if absent, present", op: kvSet("k", "new"), ifv: "0", conflict: true},
		{name: "set if absent, absent", op: kvSet("fresh", "new"), ifv: "0", after: "=new"},
		{name: "set at a version, absent", op: kvSet("fresh", "new"), ifv: "v", conflict: true},
		{name: "set if absent, expired", op: kvSet("k", "new"), ifv: "0", expired: true, after: "=new"},
		{name: "set at its version, expired", op: kvSet("k", "new"), ifv: "v", expired: true, conflict: true},
		{name: "delete at its version", op: kvDel("k"), ifv: "v", after: ""},
		{name: "delete at another version", op: kvDel("k"), ifv: "v+1", conflict: true},
		{name: "delete if absent, absent", op: kvDel("fresh"), ifv: "0", after: ""},
		{name: "push at its version", op: kvPush("l", "i2", 0), ifv: "v", after: "[i1 i2]"},
		{name: "push if absent, present", op: kvPush("l", "i2", 0), ifv: "0", conflict: true},
		{name: "push if absent, absent", op: kvPush("fresh", "i", 0), ifv: "0", after: "[i]"},
		{name: "touch at its version", op: kvTouch("k"), ifv: "v", after: "=old"},
		{name: "touch at another version", op: kvTouch("k"), ifv: "old", conflict: true},
	} {
		for _, frame := range []string{"", "r"} {
			t.Run(fmt.Sprintf("%s/frame=%q", tc.name, frame), func(t *testing.T) {
				w := newWorld(t)
				w.push("r", "", 100)
				w.mustChange(on(frame, kvSet("k", "older")), on(frame, kvPush("l", "i1", 0)))
				old := w.s.Version
				w.mustChange(on(frame, ttl(50, false, kvSet("k", "old"))), on(frame, ttl(50, false, kvPush("l", "i1", 1))))
				v := w.s.Version
				if tc.expired {
					w.now += 100
				}
				want := map[string]int64{"v": v, "0": 0, "v+1": v + 1, "old": old}[tc.ifv]
				op := on(frame, when(want, tc.op))
				if !tc.conflict {
					w.mustChange(op)
					if tc.after == "" {
						assert.Nil(t, w.entry(frame, op.Key))
					} else {
						e := w.entry(frame, op.Key)
						require.NotNil(t, e)
						assert.Equal(t, tc.after, render(*e))
						assert.Equal(t, w.s.Version, e.Version)
					}
					w.checkReplay()
					return
				}
				have := v
				if tc.expired || op.Key == "fresh" {
					have = 0
				}
				err := w.refused(w.change(op), frames.ErrStateConflict)
				var ce *frames.StateConflictError
				require.ErrorAs(t, err, &ce)
				assert.Equal(t, frames.StateConflictError{Key: op.Key, Frame: frame, Want: want, Have: have, Op: op.Kind}, *ce)
				assert.Contains(t, err.Error(), fmt.Sprintf("%q", op.Key), "the error names the key")
				for _, n := range []int64{want, have} {
					if n == 0 {
						assert.Contains(t, err.Error(), "absent")
					} else {
						assert.Contains(t, err.Error(), fmt.Sprintf("version %d", n), "the error names both versions")
					}
				}
				assert.Contains(t, err.Error(), "nothing was changed")
			})
		}
	}

	t.Run("a negative version is refused", func(t *testing.T) {
		w := newWorld(t)
		w.refused(w.change(when(-1, kvSet("k", "v"))), frames.ErrInvalidArgument)
	})
	t.Run("later ops of a request see the versions earlier ones wrote", func(t *testing.T) {
		w := newWorld(t)
		next := w.s.Version + 1
		w.mustChange(when(0, kvSet("k", "a")), when(next, kvSet("k", "b")), when(0, kvPush("l", "x", 0)), when(next, kvPush("l", "y", 0)))
		assert.Equal(t, map[string]string{"k": "=b", "l": "[x y]"}, w.level(""))
		err := w.refused(w.change(kvSet("j", "a"), when(0, kvSet("j", "b"))), frames.ErrStateConflict)
		assert.Contains(t, err.Error(), "operation 2 of 2 (set)", "a multi-op refusal names the operation")
	})
}

// Several operations apply together or not at all: whatever refuses a
// later one, nothing of the earlier ones is left.
func TestStateChangeIsAtomic(t *testing.T) {
	w := newWorld(t)
	w.cfg.MaxStateValueBytes = 100
	w.cfg.MaxStateBytes = 1000
	w.push("r", "", 100)
	w.mustChange(kvSet("k", "v"), kvPush("l", "i", 0), on("r", kvSet("fk", "fv")))
	v := w.s.Version
	first := []frames.StateOp{kvSet("k", "changed"), kvDel("l"), kvClear(""), on("r", kvSet("fk", "changed")), kvPush("new", "n", 0)}
	for _, tc := range []struct {
		name string
		last frames.StateOp
		want error
	}{
		{"a conflict", when(v+5, kvSet("k", "x")), frames.ErrStateConflict},
		{"a value too large", kvSet("big", strings.Repeat("b", 101)), frames.ErrStateTooLarge},
		{"the state too large", on("r", kvSet("fbig", strings.Repeat("b", 100))), nil}, // with 10 such ops below
		{"a push onto a value", on("r", kvPush("fk", "x", 0)), frames.ErrInvalidArgument},
		{"a touch of an absent key", kvTouch("ghost"), frames.ErrStateKeyNotFound},
		{"a bad key", kvSet("a\x00b", "x"), frames.ErrInvalidArgument},
		{"an unknown kind", frames.StateOp{Kind: "merge", Key: "k"}, frames.ErrInvalidArgument},
		{"a dead frame's level", on("ghost", kvSet("k", "x")), frames.ErrFrameNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops := append(append([]frames.StateOp(nil), first...), tc.last)
			want := tc.want
			if want == nil {
				for i := range 10 {
					ops = append(ops, on("r", kvSet(fmt.Sprint("fbig", i), strings.Repeat("b", 100))))
				}
				want = frames.ErrStateTooLarge
			}
			err := w.refused(w.change(ops...), want)
			assert.Contains(t, err.Error(), fmt.Sprintf("of %d (", len(ops)), "the error names the operation")
			assert.Equal(t, map[string]string{"k": "=v", "l": "[i]"}, w.level(""))
			assert.Equal(t, map[string]string{"fk": "=fv"}, w.level("r"))
			assert.Equal(t, v, w.s.Version)
		})
	}
	t.Run("no operations", func(t *testing.T) { w.refused(w.change(), frames.ErrInvalidArgument) })
	t.Run("too many operations", func(t *testing.T) {
		ops := make([]frames.StateOp, frames.MaxStateOps+1)
		for i := range ops {
			ops[i] = kvSet(fmt.Sprint("k", i), "v")
		}
		err := w.refused(w.change(ops...), frames.ErrInvalidArgument)
		assert.Contains(t, err.Error(), "1001 operations")
		w.cfg.MaxStateBytes = 1 << 20
		w.mustChange(ops[:frames.MaxStateOps]...) // the limit itself is fine
	})
	w.checkReplay()
}

// Push windows: Keep bounds a list to its last N items as it grows, the
// event carrying the item and its trim (not the list); a push onto a value
// is refused, a set onto a list replaces it.
func TestStatePushWindow(t *testing.T) {
	w := newWorld(t)
	var trims []int64
	for i := 1; i <= 6; i++ {
		ev := w.mustChange(kvPush("win", fmt.Sprint("m", i), 3))
		trims = append(trims, ev.Changes[0].Trim)
		assert.Equal(t, []byte(fmt.Sprint("m", i)), ev.Changes[0].Item, "the event carries the item")
		assert.Nil(t, ev.Changes[0].Value)
	}
	assert.Equal(t, []int64{0, 0, 0, 1, 1, 1}, trims)
	assert.Equal(t, "[m4 m5 m6]", w.level("")["win"])
	// A narrower window trims what is over it at once; 0 lets it grow.
	ev := w.mustChange(kvPush("win", "m7", 1))
	assert.Equal(t, int64(3), ev.Changes[0].Trim)
	assert.Equal(t, "[m7]", w.level("")["win"])
	w.mustChange(kvPush("win", "m8", 0), kvPush("win", "m9", 0))
	assert.Equal(t, "[m7 m8 m9]", w.level("")["win"])

	w.mustChange(kvSet("val", "v"))
	err := w.refused(w.change(kvPush("val", "x", 0)), frames.ErrInvalidArgument)
	assert.Contains(t, err.Error(), `"val", which holds a value`)
	w.mustChange(kvSet("win", "flat"))
	assert.Equal(t, "=flat", w.level("")["win"])
	w.refused(w.change(kvPush("win", "x", 0)), frames.ErrInvalidArgument)
	w.mustChange(kvDel("win"), kvPush("win", "again", 0))
	assert.Equal(t, "[again]", w.level("")["win"])

	for _, keep := range []int64{-1, frames.MaxPushKeep + 1} {
		err := w.refused(w.change(kvPush("win", "x", keep)), frames.ErrInvalidArgument)
		assert.Contains(t, err.Error(), fmt.Sprint("keep ", keep))
	}
	w.mustChange(kvPush("win", "x", frames.MaxPushKeep))
	w.checkReplay()
}

// Malformed operations are refused whole, naming what is wrong.
func TestStateMalformedOperations(t *testing.T) {
	w := newWorld(t)
	w.push("r", "", 100)
	w.mustChange(kvSet("k", "v"))
	for _, tc := range []struct {
		name string
		op   frames.StateOp
		has  string
	}{
		{"clear with a key", frames.StateOp{Kind: "clear", Key: "k"}, "clear takes a prefix only"},
		{"clear with a value", frames.StateOp{Kind: "clear", Value: []byte("x")}, "clear takes a prefix only"},
		{"clear with a condition", frames.StateOp{Kind: "clear", IfVersion: ifv(0)}, "clear takes a prefix only"},
		{"clear with a TTL", frames.StateOp{Kind: "clear", TTL: 5}, "clear takes a prefix only"},
		{"clear with a keep", frames.StateOp{Kind: "clear", Keep: 2}, "clear takes a prefix only"},
		{"clear sliding", frames.StateOp{Kind: "clear", Sliding: true}, "clear takes a prefix only"},
		{"sliding with TTL -1", frames.StateOp{Kind: "set", Key: "k", TTL: -1, Sliding: true}, "sliding with TTL -1"},
		{"clear with a NUL prefix", kvClear("a\x00"), "clear prefix"},
		{"set with a prefix", frames.StateOp{Kind: "set", Key: "k", Prefix: "p"}, "takes a key, not a prefix"},
		{"set with a keep", frames.StateOp{Kind: "set", Key: "k", Keep: 1}, "set takes no keep"},
		{"delete with a value", frames.StateOp{Kind: "delete", Key: "k", Value: []byte("x")}, "delete takes a key only"},
		{"delete with a TTL", frames.StateOp{Kind: "delete", Key: "k", TTL: 5}, "delete takes a key only"},
		{"delete sliding", frames.StateOp{Kind: "delete", Key: "k", Sliding: true}, "delete takes a key only"},
		{"touch with a value", frames.StateOp{Kind: "touch", Key: "k", Value: []byte("x")}, "touch takes a key and a TTL only"},
		{"touch with a keep", frames.StateOp{Kind: "touch", Key: "k", Keep: 1}, "touch takes a key and a TTL only"},
		{"sliding without a TTL", frames.StateOp{Kind: "set", Key: "k", Sliding: true}, "sliding needs a TTL"},
		{"a TTL below -1", frames.StateOp{Kind: "set", Key: "k", TTL: -2}, "a TTL of -2 ns"},
		{"an absurd TTL", frames.StateOp{Kind: "set", Key: "k", TTL: 1<<62 + 1}, "a TTL of"},
		{"no kind", frames.StateOp{Key: "k"}, "unknown state operation"},
		{"an unknown kind", frames.StateOp{Kind: "SET", Key: "k"}, `unknown state operation "SET"`},
		{"an empty key", kvSet("", "v"), "an empty state key"},
		{"a frame id of invalid UTF-8", on("\xff", kvSet("k", "v")), "frame id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := frames.ErrInvalidArgument
			if strings.HasPrefix(tc.name, "a frame id") {
				want = frames.ErrInvalidID
			}
			err := w.refused(w.change(tc.op), want)
			assert.Contains(t, err.Error(), tc.has)
		})
	}
	err := w.refused(w.change(kvTouch("ghost")), frames.ErrStateKeyNotFound)
	assert.Contains(t, err.Error(), `"ghost"`)
}

// TTLs: decided as absolute times from the request's time; fixed ones
// stay, sliding ones are pushed back by every write and touch; -1 removes
// a TTL, 0 keeps the key's own rule. An expired key is absent to every
// read at once.
func TestStateTTL(t *testing.T) {
	w := newWorld(t)
	expiry := func(key string) (int64, bool) {
		t.Helper()
		e := w.entry("", key)
		require.NotNil(t, e, key)
		return e.ExpiresAt, e.Sliding
	}

	// Fixed: kept by writes without a TTL.
	ev := w.mustChange(ttl(100, false, kvSet("fixed", "a")))
	t0 := w.now
	assert.Equal(t, frames.StateChange{Kind: "set", Key: "fixed", Value: []byte("a"), ExpiresAt: t0 + 100, TTL: 100}, ev.Changes[0])
	w.mustChange(kvSet("fixed", "b"))
	w.mustChange(kvTouch("fixed"))
	x, sliding := expiry("fixed")
	assert.Equal(t, t0+100, x, "a fixed TTL is not pushed back")
	assert.False(t, sliding)
	// Sliding: pushed back by set, push and touch.
	w.mustChange(ttl(100, true, kvSet("slide", "a")), ttl(100, true, kvPush("slist", "a", 0)))
	for _, op := range []frames.StateOp{kvSet("slide", "b"), kvPush("slist", "b", 0), kvTouch("slide"), kvTouch("slist")} {
		w.now += 20
		ev := w.mustChange(op)
		x, sliding := expiry(op.Key)
		assert.Equal(t, w.now+100, x, "%s pushes a sliding TTL back", op.Kind)
		assert.True(t, sliding)
		assert.Equal(t, w.now+100, ev.Changes[0].ExpiresAt, "the event carries the expiry decided")
	}
	// A new TTL replaces the rule; -1 removes it; 0 on a key without one
	// keeps none.
	w.mustChange(ttl(500, false, kvTouch("slide")))
	x, sliding = expiry("slide")
	assert.Equal(t, w.now+500, x)
	assert.False(t, sliding, "a touch with a fixed TTL makes it fixed")
	w.refused(w.change(ttl(-1, true, kvTouch("slist"))), frames.ErrInvalidArgument)
	w.mustChange(ttl(-1, false, kvSet("slide", "c")), ttl(-1, false, kvTouch("slist")))
	for _, k := range []string{"slide", "slist"} {
		x, sliding = expiry(k)
		assert.Zero(t, x, "-1 removes the TTL of %s", k)
		assert.False(t, sliding)
		assert.Zero(t, w.s.KV[k].TTL)
	}
	w.mustChange(kvSet("plain", "p"))
	x, _ = expiry("plain")
	assert.Zero(t, x)

	// Expiry: present until ExpiresAt, absent from it on, to every read.
	w.mustChange(ttl(50, false, kvSet("soon", "s")), ttl(50, false, kvSet("p/soon", "s")))
	at := w.now + 50
	assert.NotNil(t, w.entryAt("", "soon", at-1))
	assert.Nil(t, w.entryAt("", "soon", at))
	found, missing, err := frames.GetState(w.s, "", []string{"soon", "plain"}, at, w.cfg)
	require.NoError(t, err)
	assert.Equal(t, []string{"soon"}, missing)
	require.Len(t, found, 1)
	before := w.levelAt("", at-1)
	after := w.levelAt("", at)
	assert.Contains(t, before, "soon")
	assert.NotContains(t, after, "soon")
	assert.NotContains(t, after, "p/soon")
	_, _, size1, err := frames.RangeState(w.s, "", "", "", 100, at-1, w.cfg)
	require.NoError(t, err)
	es, _, size2, err := frames.RangeState(w.s, "", "p/", "", 100, at, w.cfg)
	require.NoError(t, err)
	assert.Empty(t, es, "a prefix read skips the expired key")
	assert.Equal(t, size1.Keys-2, size2.Keys, "the level's size leaves expired keys out")
	assert.Equal(t, size1.Total, size2.Total, "the total counts them until they are removed")
	assert.Equal(t, w.s.KVBytes, size2.Total)

	// Bad TTLs.
	w.refused(w.change(ttl(-2, false, kvSet("k", "v"))), frames.ErrInvalidArgument)
	w.refused(w.change(ttl(0, true, kvSet("k", "v"))), frames.ErrInvalidArgument)
	w.refused(w.change(ttl(1<<62+1, false, kvSet("k", "v"))), frames.ErrInvalidArgument)
	w.mustChange(ttl(1<<62, false, kvSet("far", "v"))) // the largest TTL: no overflow
	x, _ = expiry("far")
	assert.Equal(t, w.now+1<<62, x)
	w.checkReplay()
}

// Expired keys leave the state with the next change of their level (the
// event lists them, with the versions they expired at, removed before the
// request's operations), or with an ExpireState; a change of another
// level leaves them. Until then they are absent to reads, to conditions
// and to the limits of their own level.
func TestStateExpiryRemoval(t *testing.T) {
	const limit = 500
	w := newWorld(t)
	w.cfg.MaxStateBytes = limit
	w.push("r", "", 100)
	w.push("q", "", 100)
	w.mustChange(ttl(50, false, kvSet("a", strings.Repeat("a", 100))), ttl(50, true, kvPush("b", "b", 0)), kvSet("keep", "k"),
		on("r", ttl(50, false, kvSet("fa", "x"))), on("q", ttl(50, false, kvSet("qa", "x"))))
	v := w.s.Version
	w.now += 60
	assert.Equal(t, map[string]string{"keep": "=k"}, w.level(""))
	require.Len(t, w.s.KV, 3, "expired keys are still in the state")

	// A change of frame r's level removes r's expired key alone.
	ev := w.mustChange(on("r", kvSet("fb", "y")))
	assert.Equal(t, []frames.ExpiredKey{{Frame: "r", Key: "fa", Version: v}}, ev.Expired)
	assert.Len(t, w.s.KV, 3, "the scope's level is untouched")
	assert.NotContains(t, w.s.Frame("r").KV, "fa")
	assert.Contains(t, w.s.Frame("q").KV, "qa")

	// A change of the scope's level removes its expired keys first: the
	// room they held is free for it, and a condition sees them absent.
	big := strings.Repeat("z", 100)
	ev = w.mustChange(when(0, kvSet("a", big)), kvSet("c", big))
	assert.Equal(t, []frames.ExpiredKey{{Key: "a", Version: v}, {Key: "b", Version: v}}, ev.Expired, "sorted by key")
	assert.Equal(t, map[string]string{"a": "=" + big, "c": "=" + big, "keep": "=k"}, w.level(""))
	assert.Equal(t, kvBytes(w.s), w.s.KVBytes)

	// Another level's expired key still counts until it is removed (the
	// total RangeState reports includes it): q's 35 bytes.
	room := limit - w.s.KVBytes
	require.Greater(t, room, int64(100))
	err := w.refused(w.change(kvSet("d", strings.Repeat("d", int(room)-32))), frames.ErrStateTooLarge)
	var tl *frames.StateTooLargeError
	require.ErrorAs(t, err, &tl)
	assert.Equal(t, frames.StateTooLargeError{Key: "d", What: "state", Size: limit + 1, Limit: limit}, *tl)

	// ExpireState removes every expired key, both levels; with none left,
	// it decides nothing.
	evs := w.must(&frames.ExpireState{Header: w.hdr()})
	require.Len(t, evs, 1)
	assert.Equal(t, []frames.ExpiredKey{{Frame: "q", Key: "qa", Version: v}}, evs[0].(*frames.StateExpired).Keys)
	assert.Empty(t, w.s.Frame("q").KV)
	assert.Nil(t, w.s.Frame("q").KV, "an emptied level is nil, as a snapshot decodes it")
	evs = w.must(&frames.ExpireState{Header: w.hdr()})
	assert.Empty(t, evs, "nothing expired: nothing to write")
	w.mustChange(kvSet("d", strings.Repeat("d", int(room)-32)))
	assert.Equal(t, int64(limit-35+1), w.s.KVBytes, "it fits in the room q's expired key held")

	// Several levels at once, in level order (the scope's, then frames in
	// push order), each sorted by key.
	w.mustChange(kvClear(""), ttl(10, false, kvSet("z", "1")), ttl(10, false, kvSet("y", "1")),
		on("q", ttl(10, false, kvSet("q2", "1"))), on("r", ttl(10, false, kvSet("r1", "1"))))
	v = w.s.Version
	w.now += 20
	assert.Equal(t, []frames.ExpiredKey{{Key: "y", Version: v}, {Key: "z", Version: v}, {Frame: "r", Key: "r1", Version: v}, {Frame: "q", Key: "q2", Version: v}},
		w.s.ExpiredKeys(w.now))
	assert.Equal(t, w.now-20+10, w.s.NextStateExpiry())
	evs = w.must(&frames.ExpireState{Header: w.hdr()})
	assert.Len(t, evs[0].(*frames.StateExpired).Keys, 4)
	assert.Zero(t, w.s.NextStateExpiry())
	assert.Empty(t, w.s.ExpiredKeys(w.now+1<<40))
	w.checkReplay()
}

// Apply refuses state events that do not match the state they follow.
func TestStateApplyChecksEvents(t *testing.T) {
	w := newWorld(t)
	w.push("r", "", 100)
	w.mustChange(kvSet("v", "1"), kvPush("l", "x", 0), ttl(10, false, kvSet("t", "1")))
	v := w.s.Version
	meta := frames.Meta{Scope: "agent-1", At: w.now}
	for name, e := range map[string]frames.Event{
		"a change of a frame not live":     &frames.StateChanged{Meta: meta, Changes: []frames.StateChange{{Kind: "set", Frame: "ghost", Key: "k"}}},
		"a push onto a value":              &frames.StateChanged{Meta: meta, Changes: []frames.StateChange{{Kind: "push", Key: "v", Item: []byte("x")}}},
		"a trim past the list":             &frames.StateChanged{Meta: meta, Changes: []frames.StateChange{{Kind: "push", Key: "l", Item: []byte("x"), Trim: 3}}},
		"a negative trim":                  &frames.StateChanged{Meta: meta, Changes: []frames.StateChange{{Kind: "push", Key: "l", Item: []byte("x"), Trim: -1}}},
		"a touch of an absent key":         &frames.StateChanged{Meta: meta, Changes: []frames.StateChange{{Kind: "touch", Key: "ghost"}}},
		"a clear of an absent key":         &frames.StateChanged{Meta: meta, Changes: []frames.StateChange{{Kind: "clear", Keys: []string{"ghost"}}}},
		"an unknown kind":                  &frames.StateChanged{Meta: meta, Changes: []frames.StateChange{{Kind: "merge", Key: "v"}}},
		"an expiry at another version":     &frames.StateExpired{Meta: meta, Keys: []frames.ExpiredKey{{Key: "t", Version: v - 1}}},
		"an expiry of an absent key":       &frames.StateExpired{Meta: meta, Keys: []frames.ExpiredKey{{Key: "ghost", Version: v}}},
		"an expiry of a dead frame's":      &frames.StateExpired{Meta: meta, Keys: []frames.ExpiredKey{{Frame: "ghost", Key: "t", Version: v}}},
		"an expiry of nothing":             &frames.StateExpired{Meta: meta},
		"a change removing absent keys":    &frames.StateChanged{Meta: meta, Expired: []frames.ExpiredKey{{Key: "ghost", Version: v}}, Changes: []frames.StateChange{{Kind: "set", Key: "k"}}},
		"a change of another scope":        &frames.StateChanged{Meta: frames.Meta{Scope: "other", At: 1}, Changes: []frames.StateChange{{Kind: "set", Key: "k"}}},
		"an expiry of another level's key": &frames.StateExpired{Meta: meta, Keys: []frames.ExpiredKey{{Frame: "r", Key: "t", Version: v}}},
		// A consistent part first, then an inconsistent one: nothing of
		// the first part may stay.
		"a set, then a push onto a value": &frames.StateChanged{Meta: meta, Changes: []frames.StateChange{
			{Kind: "set", Key: "new", Value: []byte("n")}, {Kind: "delete", Key: "l"}, {Kind: "set", Frame: "r", Key: "f", Value: []byte("f")},
			{Kind: "push", Key: "v", Item: []byte("x")}}},
		"an expiry, then a bad change": &frames.StateChanged{Meta: meta, Expired: []frames.ExpiredKey{{Key: "t", Version: v}},
			Changes: []frames.StateChange{{Kind: "clear", Keys: []string{"v", "ghost"}}}},
		"a negative TTL":            &frames.StateChanged{Meta: meta, Changes: []frames.StateChange{{Kind: "set", Key: "k", TTL: -18, ExpiresAt: 5}}},
		"sliding without a TTL":     &frames.StateChanged{Meta: meta, Changes: []frames.StateChange{{Kind: "touch", Key: "v", Sliding: true}}},
		"an expiry, then a bad one": &frames.StateExpired{Meta: meta, Keys: []frames.ExpiredKey{{Key: "t", Version: v}, {Key: "v", Version: v + 1}}},
	} {
		t.Run(name, func(t *testing.T) {
			before := w.s.Clone()
			require.ErrorIs(t, frames.Apply(w.s, e), frames.ErrInconsistentEvent)
			assert.True(t, reflect.DeepEqual(before, w.s.Clone()), "a refused event leaves the state as it was")
			require.NoError(t, frames.CheckInvariants(w.s))
		})
	}
}

// The limits: a key is 1..MaxStateKeyBytes of valid UTF-8 without NUL; a
// value (a list: all its items) at most MaxStateValueBytes; the scope's
// state, both levels, at most MaxStateBytes. Each refusal names the key,
// the size and the limit, and changes nothing; the limits themselves are
// fine.
func TestStateLimits(t *testing.T) {
	w := newWorld(t)
	w.cfg.MaxStateKeyBytes = 16
	w.cfg.MaxStateValueBytes = 100
	w.cfg.MaxStateBytes = 400
	w.push("r", "", 100)
	w.push("q", "", 100)

	for _, tc := range []struct{ name, key, has string }{
		{"a key over the limit", strings.Repeat("k", 17), "state key of 17 bytes; the limit is 16"},
		{"invalid UTF-8", "a\xffb", `state key "a\xffb" is not valid UTF-8`},
		{"a NUL", "a\x00b", `state key "a\x00b" contains NUL`},
		{"an empty key", "", "an empty state key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, frame := range []string{"", "r"} {
				for _, op := range []frames.StateOp{kvSet(tc.key, "v"), kvPush(tc.key, "v", 0), kvDel(tc.key), kvTouch(tc.key)} {
					err := w.refused(w.change(on(frame, op)), frames.ErrInvalidArgument)
					assert.Contains(t, err.Error(), tc.has)
				}
			}
			_, _, err := frames.GetState(w.s, "", []string{"fine", tc.key}, w.now, w.cfg)
			assert.ErrorIs(t, err, frames.ErrInvalidArgument, "reads check keys too")
		})
	}
	w.mustChange(kvSet(strings.Repeat("k", 16), "v"), kvSet("é", "v"), kvDel(strings.Repeat("k", 16)), kvDel("é"))

	tooLarge := func(cmd frames.Command, want frames.StateTooLargeError) {
		t.Helper()
		err := w.refused(cmd, frames.ErrStateTooLarge)
		var tl *frames.StateTooLargeError
		require.ErrorAs(t, err, &tl)
		assert.Equal(t, want, *tl)
		msg := err.Error()
		assert.Contains(t, msg, fmt.Sprintf("%q", want.Key), "names the key")
		assert.Contains(t, msg, fmt.Sprint(want.Size), "names the size")
		assert.Contains(t, msg, fmt.Sprint(want.Limit), "names the limit")
		if want.Frame != "" {
			assert.Contains(t, msg, fmt.Sprintf("frame %q", want.Frame), "names the level")
		}
	}
	{ // A value.
		tooLarge(w.change(kvSet("v", strings.Repeat("v", 101))), frames.StateTooLargeError{Key: "v", What: "value", Size: 101, Limit: 100})
		tooLarge(w.change(on("r", kvSet("v", strings.Repeat("v", 101)))), frames.StateTooLargeError{Key: "v", Frame: "r", What: "value", Size: 101, Limit: 100})
		w.mustChange(kvSet("v", strings.Repeat("v", 100)))
		w.mustChange(kvDel("v"))
	}
	{ // A list counts all its items.
		// 3 items of 26 bytes: 3×(26+4) = 90; a fourth makes 120.
		for i := range 3 {
			w.mustChange(on("r", kvPush("l", strings.Repeat(fmt.Sprint(i), 26), 0)))
		}
		tooLarge(w.change(on("r", kvPush("l", strings.Repeat("x", 26), 0))), frames.StateTooLargeError{Key: "l", Frame: "r", What: "value", Size: 120, Limit: 100})
		w.mustChange(on("r", kvPush("l", strings.Repeat("x", 26), 3)), on("r", kvPush("l", strings.Repeat("y", 6), 0)))
		assert.Equal(t, int64(100), valueBytes(w.s.Frame("r").KV["l"]), "the window made room: 100 exactly")
		w.mustChange(on("r", kvDel("l")))
	}
	{ // The scope's state across both levels.
		// 3 × (1+100+32) = 399 bytes at three levels; one more byte is over.
		w.mustChange(kvSet("a", strings.Repeat("a", 100)), on("r", kvSet("b", strings.Repeat("b", 100))))
		w.mustChange(on("q", kvSet("c", strings.Repeat("c", 99))))
		require.Equal(t, int64(398), w.s.KVBytes)
		tooLarge(w.change(on("q", kvSet("c", strings.Repeat("c", 101)))), frames.StateTooLargeError{Key: "c", Frame: "q", What: "value", Size: 101, Limit: 100})
		tooLarge(w.change(kvSet("x", "")), frames.StateTooLargeError{Key: "x", What: "state", Size: 398 + 33, Limit: 400})
		tooLarge(w.change(on("q", kvSet("c", strings.Repeat("c", 100))), kvSet("x", "")), frames.StateTooLargeError{Key: "x", What: "state", Size: 399 + 33, Limit: 400})
		// Freeing room in the same request makes it fit: a delete first.
		w.mustChange(kvDel("a"), on("q", kvSet("c", strings.Repeat("c", 100))), kvSet("ab", strings.Repeat("a", 100)))
		assert.Equal(t, int64(400), w.s.KVBytes, "exactly the limit")
		tooLarge(w.change(kvTouch("ab"), on("r", kvPush("l", "", 0))), frames.StateTooLargeError{Key: "l", Frame: "r", What: "state", Size: 400 + 1 + 32 + 4, Limit: 400})
		// A touch adds nothing: it fits at the limit.
		w.mustChange(kvTouch("ab"), on("r", kvTouch("b")))
	}
	w.checkReplay()
}

func valueBytes(e *frames.KVEntry) int64 {
	n := int64(len(e.Value))
	for _, it := range e.Items {
		n += int64(len(it)) + 4
	}
	return n
}

// Frame-level state ends with its frame: a pop drops it (a cascade too),
// the accounting gives the room back, and the level answers as the frame
// does (not live); a continuation carries it, versions and expiries as
// they were, to the new link, explicitly or automatically; a destroy ends
// every level.
func TestFrameStateLifetime(t *testing.T) {
	t.Run("ends at pop", func(t *testing.T) {
		w := newWorld(t)
		w.push("r", "", 1000)
		w.push("c", "r", 100)
		w.push("gc", "c", 10)
		w.mustChange(kvSet("s", "scope"), on("r", kvSet("k", "r")), on("c", kvSet("k", "c")), on("gc", kvPush("k", "gc", 0)))
		scopeOnly := int64(1+5+32) + int64(1+1+32)
		w.popFrame("gc")
		assert.Nil(t, w.s.Frame("gc"))
		w.must(&frames.PopFrame{Header: w.hdr(), FrameID: "r", Status: frames.StatusCancelled, Cascade: true})
		assert.Equal(t, scopeOnly-int64(1+1+32), w.s.KVBytes, "the frames' room is given back")
		assert.Equal(t, map[string]string{"s": "=scope"}, w.level(""), "the scope's state lives on")
		for _, id := range []string{"r", "c", "gc"} {
			assert.ErrorIs(t, frames.CheckStateLevel(w.s, id, w.cfg), frames.ErrFrameNotLive, id)
			_, _, err := frames.GetState(w.s, id, []string{"k"}, w.now, w.cfg)
			assert.ErrorIs(t, err, frames.ErrFrameNotFound, "the level is gone")
			w.refused(w.change(on(id, kvSet("k", "late"))), frames.ErrFrameNotLive)
		}
		w.checkReplay()
	})
	t.Run("a finished frame kept by the history is not live", func(t *testing.T) {
		w := newWorld(t)
		w.push("r", "", 1000)
		w.mustChange(on("r", kvSet("k", "r")))
		w.popFrame("r")
		s := w.keepAll()
		assert.ErrorIs(t, frames.CheckStateLevel(s, "r", w.cfg), frames.ErrFrameNotLive)
		assert.Nil(t, s.Frame("r").KV, "a finished frame holds no state")
	})
	t.Run("carried by ContinueFrame", func(t *testing.T) {
		w := chainWorld(t)
		w.mustChange(on("a", kvSet("plan", "p")), on("a", ttl(1_000_000, true, kvPush("msgs", "m1", 2))), on("root", kvSet("r", "r")))
		v, x := w.s.Version, w.now+1_000_000
		total := w.s.KVBytes
		want := w.s.Frame("a").KV
		w.must(&frames.ContinueFrame{Header: w.hdr(), FrameID: "a", ResumeCeiling: 200, With: w.with("b")})
		assert.Equal(t, want, w.s.Frame("b").KV, "the new link holds the state, versions and expiries as they were")
		assert.Equal(t, v, w.s.Frame("b").KV["plan"].Version)
		assert.Equal(t, x, w.s.Frame("b").KV["msgs"].ExpiresAt)
		assert.Equal(t, total, w.s.KVBytes, "carried, not copied")
		assert.Equal(t, map[string]string{"r": "=r"}, w.level("root"))
		_, _, err := frames.GetState(w.s, "a", []string{"plan"}, w.now, w.cfg)
		assert.Error(t, err, "the old link's level is gone")
		err = w.refused(w.change(on("a", kvSet("plan", "late"))), frames.ErrFrameContinued)
		var ce *frames.ContinuedError
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, "b", ce.Head, "a write to the old link names the head")
		// The head goes on; a condition on a carried key holds.
		w.mustChange(on("b", when(v, kvSet("plan", "p2"))), on("b", kvPush("msgs", "m2", 2)), on("b", kvPush("msgs", "m3", 2)))
		assert.Equal(t, map[string]string{"plan": "=p2", "msgs": "[m2 m3]"}, w.level("b"))
		w.checkReplay()
		// And again, to a third link; then the chain's end drops it.
		w.must(&frames.ContinueFrame{Header: w.hdr(), FrameID: "b", ResumeCeiling: 50, Summary: frames.NoSummary, With: w.with("c")})
		assert.Equal(t, map[string]string{"plan": "=p2", "msgs": "[m2 m3]"}, w.level("c"))
		w.checkReplay()
		w.popFrame("c")
		assert.Equal(t, int64(1+1+32), w.s.KVBytes, "only the root's key is left")
		w.checkReplay()
	})
	t.Run("carried by an automatic continuation", func(t *testing.T) {
		w := newWorld(t)
		w.cfg.ContinueAt = 900
		w.cfg.ResumeCeiling = 300
		pushWindow(w, "a", "", 100_000, 1_000)
		w.mustChange(on("a", kvSet("plan", "p")))
		with := w.with("b")
		for i := 0; i < 9; i++ {
			w.must(&frames.AddContextHandle{Header: w.hdr(), FrameID: "a", Handle: frames.ContextHandle{
				ID: fmt.Sprint("h", i), Kind: "text", Role: frames.RoleUser, Priority: compaction.Medium, Content: strings.Repeat("x", 400), Tokens: 100}, Continue: &with})
		}
		require.NotNil(t, w.s.Frame("b"), "continued automatically")
		assert.Equal(t, map[string]string{"plan": "=p"}, w.level("b"))
		w.checkReplay()
	})
	t.Run("gone after a destroy", func(t *testing.T) {
		w := newWorld(t)
		w.push("r", "", 1000)
		w.mustChange(kvSet("s", "scope"), on("r", kvSet("k", "r")), ttl(10, false, kvSet("t", "t")))
		w.must(&frames.DestroyScope{Header: w.hdr(), Force: true, Hash: headHash})
		assert.Nil(t, w.s.KV)
		assert.Zero(t, w.s.KVBytes)
		assert.Equal(t, map[string]string{}, w.level(""))
		assert.Zero(t, w.s.NextStateExpiry())
		w.push("r", "", 1000)
		assert.Equal(t, map[string]string{}, w.level("r"), "a frame of the same id starts empty")
		w.mustChange(when(0, kvSet("s", "again")))
		w.checkReplay()
	})
	t.Run("a scope with state alone is destroyed like any", func(t *testing.T) {
		w := newWorld(t)
		w.mustChange(kvSet("s", "scope"))
		w.must(&frames.DestroyScope{Header: w.hdr(), Hash: headHash})
		assert.Zero(t, w.s.KVBytes)
		w.checkReplay()
	})
}

// Reads: GetState answers in the order asked with the missing keys apart;
// RangeState pages by cursor through a prefix, sorted, with the level's
// size; both refuse bad keys, prefixes, cursors and limits.
func TestStateReads(t *testing.T) {
	w := newWorld(t)
	w.push("r", "", 100)
	var ops []frames.StateOp
	for i := range 25 {
		ops = append(ops, kvSet(fmt.Sprintf("p/%02d", i), fmt.Sprint(i)))
	}
	ops = append(ops, kvSet("q", "q"), kvPush("a", "x", 0), on("r", kvSet("p/own", "r")))
	w.mustChange(ops...)

	found, missing, err := frames.GetState(w.s, "", []string{"q", "ghost", "p/03", "q", "p/own"}, w.now, w.cfg)
	require.NoError(t, err)
	var keys []string
	for _, e := range found {
		keys = append(keys, e.Key)
	}
	assert.Equal(t, []string{"q", "p/03", "q"}, keys)
	assert.Equal(t, []string{"ghost", "p/own"}, missing, "each level is its own")
	found, missing, err = frames.GetState(w.s, "", nil, w.now, w.cfg)
	require.NoError(t, err)
	assert.Empty(t, found)
	assert.Empty(t, missing)

	var paged []string
	after := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10)
		es, next, size, err := frames.RangeState(w.s, "", "p/", after, 7, w.now, w.cfg)
		require.NoError(t, err)
		assert.LessOrEqual(t, len(es), 7)
		assert.Equal(t, int64(27), size.Keys, "the level's size, not the page's")
		assert.Equal(t, w.s.KVBytes, size.Total)
		assert.Equal(t, int64(w.cfg.MaxStateBytes), size.Limit)
		for _, e := range es {
			paged = append(paged, e.Key)
		}
		if next == "" {
			break
		}
		after = next
	}
	assert.Len(t, paged, 25)
	assert.True(t, sort.StringsAreSorted(paged))
	assert.Equal(t, "p/00", paged[0])
	es, next, _, err := frames.RangeState(w.s, "", "", "p/24", 100, w.now, w.cfg)
	require.NoError(t, err)
	assert.Empty(t, next)
	require.Len(t, es, 1)
	assert.Equal(t, "q", es[0].Key, "the cursor is exclusive")
	es, next, _, err = frames.RangeState(w.s, "", "", "zzz", 100, w.now, w.cfg)
	require.NoError(t, err)
	assert.Empty(t, es)
	assert.Empty(t, next)

	long := strings.Repeat("k", w.cfg.MaxStateKeyBytes+1)
	for name, read := range map[string]func() error{
		"get: too many keys": func() error {
			_, _, err := frames.GetState(w.s, "", make([]string, frames.MaxStateOps+1), w.now, w.cfg)
			return err
		},
		"get: an empty key": func() error { _, _, err := frames.GetState(w.s, "", []string{"q", ""}, w.now, w.cfg); return err },
		"get: a long key":   func() error { _, _, err := frames.GetState(w.s, "", []string{long}, w.now, w.cfg); return err },
		"range: a NUL prefix": func() error {
			_, _, _, err := frames.RangeState(w.s, "", "p\x00", "", 10, w.now, w.cfg)
			return err
		},
		"range: a cursor of invalid UTF-8": func() error {
			_, _, _, err := frames.RangeState(w.s, "", "", "\xff", 10, w.now, w.cfg)
			return err
		},
		"range: a long prefix": func() error { _, _, _, err := frames.RangeState(w.s, "", long, "", 10, w.now, w.cfg); return err },
		"range: limit 0":       func() error { _, _, _, err := frames.RangeState(w.s, "", "", "", 0, w.now, w.cfg); return err },
		"range: limit -1":      func() error { _, _, _, err := frames.RangeState(w.s, "", "", "", -1, w.now, w.cfg); return err },
		"range: limit 1001": func() error {
			_, _, _, err := frames.RangeState(w.s, "", "", "", frames.MaxStateOps+1, w.now, w.cfg)
			return err
		},
	} {
		assert.ErrorIs(t, read(), frames.ErrInvalidArgument, name)
	}
	_, _, err = frames.GetState(w.s, "ghost", []string{"q"}, w.now, w.cfg)
	assert.ErrorIs(t, err, frames.ErrFrameNotFound)
	_, _, _, err = frames.RangeState(w.s, "ghost", "", "", 10, w.now, w.cfg)
	assert.ErrorIs(t, err, frames.ErrFrameNotFound)
	assert.ErrorIs(t, frames.CheckStateLevel(w.s, "a\x00", w.cfg), frames.ErrInvalidID)
	assert.NoError(t, frames.CheckStateLevel(w.s, "", w.cfg))
	assert.NoError(t, frames.CheckStateLevel(w.s, "r", w.cfg))
}

// StateHistoryOf says what one state event did to a key of a level: each
// operation kind, the last of several in one event, expiries in both
// events, and nothing for another key or level.
func TestStateHistoryOf(t *testing.T) {
	w := newWorld(t)
	w.push("r", "", 100)
	set := w.mustChange(ttl(100, true, kvSet("k", "v1")))
	x := w.now + 100
	push := w.mustChange(kvPush("l", "i1", 0), kvPush("l", "i2", 1))
	touch := w.mustChange(kvTouch("k"))
	del := w.mustChange(kvDel("k"))
	clr := w.mustChange(kvSet("c/1", "1"), kvSet("c/2", "2"), kvClear("c/"))
	resurrect := w.mustChange(kvSet("c/1", "1"), kvClear("c/"), kvSet("c/1", "again"))
	frame := w.mustChange(on("r", kvSet("k", "framed")))
	w.mustChange(ttl(10, false, kvSet("t", "t")), on("r", ttl(10, false, kvSet("ft", "t"))))
	tv := w.s.Version
	w.now += 20
	expiredByChange := w.mustChange(kvSet("other", "o"))
	expired := w.must(&frames.ExpireState{Header: w.hdr()})[0]

	for _, tc := range []struct {
		name       string
		e          frames.Event
		frame, key string
		kind       string
		entry      frames.StateEntry
	}{
		{"set", set, "", "k", "set", frames.StateEntry{Key: "k", Value: []byte("v1"), ExpiresAt: x, Sliding: true}},
		{"push: the last of two, its item alone", push, "", "l", "push", frames.StateEntry{Key: "l", List: true, Items: [][]byte{[]byte("i2")}}},
		{"touch", touch, "", "k", "touch", frames.StateEntry{Key: "k", ExpiresAt: touch.Meta.At + 100, Sliding: true}},
		{"delete", del, "", "k", "delete", frames.StateEntry{Key: "k"}},
		{"clear", clr, "", "c/2", "clear", frames.StateEntry{Key: "c/2"}},
		{"set then cleared: the clear", clr, "", "c/1", "clear", frames.StateEntry{Key: "c/1"}},
		{"cleared then set: the set", resurrect, "", "c/1", "set", frames.StateEntry{Key: "c/1", Value: []byte("again")}},
		{"a frame's level", frame, "r", "k", "set", frames.StateEntry{Key: "k", Value: []byte("framed")}},
		{"removed by a change", expiredByChange, "", "t", "expired", frames.StateEntry{Key: "t", Version: tv}},
		{"removed by state.expired", expired, "r", "ft", "expired", frames.StateEntry{Key: "ft", Version: tv}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entry, kind, found := frames.StateHistoryOf(tc.e, tc.frame, tc.key)
			require.True(t, found)
			assert.Equal(t, tc.kind, kind)
			assert.Equal(t, tc.entry, entry)
		})
	}
	for _, tc := range []struct {
		name       string
		e          frames.Event
		frame, key string
	}{
		{"another key", set, "", "l"},
		{"another level", frame, "", "k"},
		{"the scope's key at a frame's level", set, "r", "k"},
		{"a key the clear did not remove", clr, "", "c/3"},
		{"an expiry of another level", expired, "", "ft"},
		{"not a state event", &frames.FramePushed{}, "", "k"},
	} {
		t.Run("not found: "+tc.name, func(t *testing.T) {
			_, _, found := frames.StateHistoryOf(tc.e, tc.frame, tc.key)
			assert.False(t, found)
		})
	}
	w.checkReplay()
}

// Decide works on a draft: a refused or accepted ChangeState leaves the
// state it was given as it was, and the events it decides do not alias
// the command's bytes into the state.
func TestStateDecideDoesNotAlias(t *testing.T) {
	w := newWorld(t)
	val := []byte("value")
	item := []byte("item")
	w.mustChange(frames.StateOp{Kind: "set", Key: "k", Value: val}, frames.StateOp{Kind: "push", Key: "l", Value: item})
	val[0], item[0] = 'X', 'X'
	assert.Equal(t, map[string]string{"k": "=value", "l": "[item]"}, w.level(""), "the state keeps its own copies")
}
