package frames

import (
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"
)

// Scope state (DESIGN §12; thread-state-scopes.md): durable key-value state
// at two levels — the scope's own (it lives until deleted, expired or the
// scope is destroyed) and a frame's (it ends with the frame: the seed's
// request and session state, made durable, and it moves to a continuation
// with the rest of the frame).
//
// Values are bytes. A key holds a value (Set) or a list (Push, optionally
// keeping the last N items). Every change is one event, state.changed,
// carrying the request's operations as decided: several changes in one
// request apply together or not at all. A key's Version is the scope
// version of the event that last wrote it, so a write can be made
// conditional on it (IfVersion; 0: the key is absent) — two workers racing
// on one key cannot both win. A key's past values are the events that
// wrote it: the shell's History reads them from the log, newest first, as
// far back as retention keeps them (StateHistoryOf says what one event did
// to a key).
//
// TTLs are absolute times decided from the request's time: a key expires at
// ExpiresAt; a sliding TTL is pushed back by every write to the key (and by
// Touch, a write: refreshing on reads costs a durable write per read).
// Expired keys are gone from every read at once (reads take the server's
// time), count as absent for conditions and limits, and leave the state
// (and so its snapshots) with the next state.changed of their level or a
// state.expired that the shell's background pass writes.
//
// Limits: a key is 1..MaxStateKeyBytes bytes of valid UTF-8 without NUL; a
// value (a list: all its items) at most MaxStateValueBytes; one scope's
// state, both levels, at most MaxStateBytes (KVSize's accounting). A write
// that would exceed one fails with an error naming the key, its size and
// the limit, and changes nothing.

// Defaults of the state's limits.
const (
	// DefaultMaxStateBytes is the seed's 1 MB thread state limit, as 1 MiB.
	DefaultMaxStateBytes = 1 << 20
	// DefaultMaxStateValueBytes fits one value, with its key and the
	// request around it, in one request under the 1 MiB message cap.
	DefaultMaxStateValueBytes = 512 << 10
	// DefaultMaxStateKeyBytes bounds a key.
	DefaultMaxStateKeyBytes = 512
	// MaxStateOps bounds the operations of one ChangeState.
	MaxStateOps = 1000
	// MaxPushKeep bounds a Push's Keep.
	MaxPushKeep = 1_000_000
	// kvEntryOverhead and kvItemOverhead are what KVSize counts for an
	// entry and for each list item besides their bytes (the encoding's
	// framing, roughly).
	kvEntryOverhead = 32
	kvItemOverhead  = 4
)

// KVEntry is a key's value, as the state keeps it.
type KVEntry struct {
	// Value is a Set's value; Items a list's, oldest first (List says
	// which: an empty list is a list).
	Value []byte   `msgpack:"v,omitempty"`
	Items [][]byte `msgpack:"it,omitempty"`
	List  bool     `msgpack:"l,omitempty"`
	// Version is the scope version of the event that last wrote it.
	Version int64 `msgpack:"ver"`
	// ExpiresAt is when it expires (unix ns; 0: never). TTL, with Sliding,
	// is pushed back by every write: ExpiresAt = the write's time + TTL.
	ExpiresAt int64 `msgpack:"x,omitempty"`
	TTL       int64 `msgpack:"ttl,omitempty"`
	Sliding   bool  `msgpack:"sl,omitempty"`
}

// Expired reports whether the entry has expired at now.
func (e *KVEntry) Expired(now int64) bool { return e.ExpiresAt != 0 && now >= e.ExpiresAt }

// kvSize is what an entry of key counts against the limits.
func kvSize(key string, e *KVEntry) int64 {
	n := int64(len(key)+len(e.Value)) + kvEntryOverhead
	for _, it := range e.Items {
		n += int64(len(it)) + kvItemOverhead
	}
	return n
}

// valueSize is what the value (or list) of an entry counts against
// MaxStateValueBytes.
func valueSize(e *KVEntry) int64 {
	n := int64(len(e.Value))
	for _, it := range e.Items {
		n += int64(len(it)) + kvItemOverhead
	}
	return n
}

func cloneKV(m map[string]*KVEntry) map[string]*KVEntry {
	if m == nil {
		return nil
	}
	c := make(map[string]*KVEntry, len(m))
	for k, e := range m {
		ec := *e
		ec.Value = cloneBytes(e.Value)
		if e.Items != nil {
			ec.Items = make([][]byte, len(e.Items))
			for i, it := range e.Items {
				ec.Items[i] = cloneBytes(it)
			}
		}
		c[k] = &ec
	}
	return c
}

// State operation kinds.
const (
	StateSet    = "set"
	StateDelete = "delete"
	StateClear  = "clear"
	StatePush   = "push"
	StateTouch  = "touch"
)

// StateOp is one operation of a ChangeState. Frame names the level: "" the
// scope's state, else that live frame's. Set and Push write Value; Clear
// removes every key of the level starting with Prefix ("" all); Touch
// pushes back a sliding TTL (or sets TTL). IfVersion makes Set, Delete,
// Push and Touch conditional on the key's version (0: absent). TTL (unix
// ns; 0: keep the key's own TTL rule — a sliding one is pushed back, a
// fixed one kept; -1: no TTL) with Sliding sets the key's expiry. Keep
// bounds a Push's list to its last Keep items (0: unbounded).
type StateOp struct {
	Kind      string
	Frame     string
	Key       string
	Prefix    string
	Value     []byte
	IfVersion *int64
	TTL       int64
	Sliding   bool
	Keep      int64
}

// ChangeState applies Ops to the scope's state, all or none.
type ChangeState struct {
	Header
	Ops []StateOp
}

// ExpireState removes the scope's expired keys from its state (the shell's
// background pass; a no-op with none).
type ExpireState struct {
	Header
}

// StateChange is one operation of a state.changed, as decided: for a set,
// the value; for a push, the item and how many items it trimmed; the key's
// expiry after it; for a clear, the keys it removed.
type StateChange struct {
	Kind   string   `msgpack:"k"`
	Frame  string   `msgpack:"f,omitempty"`
	Key    string   `msgpack:"key,omitempty"`
	Prefix string   `msgpack:"px,omitempty"`
	Keys   []string `msgpack:"ks,omitempty"`
	// Item is a Push's new item and Trim how many items it dropped from
	// the front (the list's window), so that the log carries the item, not
	// the whole list.
	Item []byte `msgpack:"i,omitempty"`
	Trim int64  `msgpack:"tr,omitempty"`
	// Value is a Set's value. ExpiresAt, TTL and Sliding are the key's
	// expiry after the operation.
	Value     []byte `msgpack:"v,omitempty"`
	ExpiresAt int64  `msgpack:"x,omitempty"`
	TTL       int64  `msgpack:"ttl,omitempty"`
	Sliding   bool   `msgpack:"sl,omitempty"`
}

// ExpiredKey names a key that expired: its level and the version it
// expired at.
type ExpiredKey struct {
	Frame   string `msgpack:"f,omitempty"`
	Key     string `msgpack:"key"`
	Version int64  `msgpack:"ver"`
}

// State event type names.
const (
	TypeStateChanged = "state.changed"
	TypeStateExpired = "state.expired"
)

// StateChanged: a ChangeState's operations, in order; Expired, the keys of
// the levels it touched that had expired by its time, removed first.
type StateChanged struct {
	Meta    `msgpack:",inline"`
	Expired []ExpiredKey  `msgpack:"ex,omitempty"`
	Changes []StateChange `msgpack:"ch"`
}

// StateExpired: keys that had expired, removed from the state.
type StateExpired struct {
	Meta `msgpack:",inline"`
	Keys []ExpiredKey `msgpack:"ks"`
}

func (e *StateChanged) EventType() string { return TypeStateChanged }
func (e *StateExpired) EventType() string { return TypeStateExpired }

// CheckStateLevel checks that frame ("" the scope's own state) is a level
// whose state can be read or written: a live frame of this scope. It
// answers as every frame operation does (frame_not_found for a frame of
// another scope, frame_continued naming the head of a continued one).
func CheckStateLevel(s *State, frame string, cfg Config) error {
	if frame == "" {
		return nil
	}
	if err := ValidateID("frame id", frame, cfg.MaxIDBytes); err != nil {
		return err
	}
	_, err := decider{cfg: cfg, s: s}.liveFrame(frame)
	return err
}

// kvLevel returns the map of a level, or an error for a frame that is not
// live here. create makes the map when it is nil.
func (s *State) kvLevel(frame string, create bool) (map[string]*KVEntry, error) {
	if frame == "" {
		if s.KV == nil && create {
			s.KV = map[string]*KVEntry{}
		}
		return s.KV, nil
	}
	f := s.Frames[frame]
	if f == nil || !f.Status.Live() {
		return nil, fmt.Errorf("%w: %q", ErrFrameNotFound, frame)
	}
	if f.KV == nil && create {
		f.KV = map[string]*KVEntry{}
	}
	return f.KV, nil
}

// ValidateStateKey checks a key: 1..max bytes of valid UTF-8, no NUL.
func ValidateStateKey(key string, max int) error {
	switch {
	case key == "":
		return invalid("an empty state key")
	case len(key) > max:
		return invalid("state key of %d bytes; the limit is %d", len(key), max)
	case !utf8.ValidString(key):
		return invalid("state key %q is not valid UTF-8", key)
	case strings.IndexByte(key, 0) >= 0:
		return invalid("state key %q contains NUL", key)
	}
	return nil
}

// StateTooLargeError: a write would take a value or the scope's state past
// its limit. It matches ErrStateTooLarge.
type StateTooLargeError struct {
	Key   string
	Frame string // the level ("": the scope's)
	// What is "value" (the key's value or list) or "state" (the scope's
	// whole state); Size what it would be, Limit its bound.
	What        string
	Size, Limit int64
}

func (e *StateTooLargeError) Error() string {
	where := ""
	if e.Frame != "" {
		where = fmt.Sprintf(" of frame %q", e.Frame)
	}
	if e.What == "value" {
		return fmt.Sprintf("%v: key %q%s: its value would be %d bytes; the limit is %d", ErrStateTooLarge, e.Key, where, e.Size, e.Limit)
	}
	return fmt.Sprintf("%v: key %q%s: the scope's state would be %d bytes; its limit is %d (nothing was changed)", ErrStateTooLarge, e.Key, where, e.Size, e.Limit)
}

// Is makes errors.Is(e, ErrStateTooLarge) true.
func (e *StateTooLargeError) Is(target error) bool { return target == ErrStateTooLarge }

// StateConflictError: a conditional operation found the key at another
// version. It matches ErrStateConflict.
type StateConflictError struct {
	Key, Frame       string
	Want, Have       int64 // 0: absent
	Op               string
	HaveVersionKnown bool
}

func (e *StateConflictError) Error() string {
	have := "absent"
	if e.Have != 0 {
		have = fmt.Sprintf("at version %d", e.Have)
	}
	want := "absent"
	if e.Want != 0 {
		want = fmt.Sprintf("at version %d", e.Want)
	}
	return fmt.Sprintf("%v: %s of key %q expects it %s; it is %s (nothing was changed)", ErrStateConflict, e.Op, e.Key, want, have)
}

// Is makes errors.Is(e, ErrStateConflict) true.
func (e *StateConflictError) Is(target error) bool { return target == ErrStateConflict }

// kvDraft is a level's entries as a ChangeState's operations leave them,
// decided on copies: the state is never touched by Decide.
type kvDraft struct {
	d       decider
	levels  map[string]map[string]*KVEntry // frame ("" scope) → entries changed (nil: deleted)
	expired []ExpiredKey
	seen    map[string]bool // levels whose expired keys were collected
	total   int64           // the scope's state size after the ops so far
}

func (k *kvDraft) level(frame string) (map[string]*KVEntry, error) {
	m, err := k.d.s.kvLevel(frame, false)
	if err != nil {
		return nil, err
	}
	if !k.seen[frame] {
		k.seen[frame] = true
		keys := make([]string, 0)
		for key, e := range m {
			if e.Expired(k.d.h.Now) {
				keys = append(keys, key)
			}
		}
		sort.Strings(keys)
		for _, key := range keys {
			k.expired = append(k.expired, ExpiredKey{Frame: frame, Key: key, Version: m[key].Version})
			k.total -= kvSize(key, m[key])
			k.set(frame, key, nil)
		}
	}
	return m, nil
}

// get is key's entry as the draft has it (nil: absent or expired).
func (k *kvDraft) get(frame, key string) (*KVEntry, error) {
	m, err := k.level(frame)
	if err != nil {
		return nil, err
	}
	if l, ok := k.levels[frame]; ok {
		if e, ok := l[key]; ok {
			return e, nil
		}
	}
	return m[key], nil
}

func (k *kvDraft) set(frame, key string, e *KVEntry) {
	if k.levels[frame] == nil {
		k.levels[frame] = map[string]*KVEntry{}
	}
	k.levels[frame][key] = e
}

// keys lists the draft's live keys of a level with prefix, sorted.
func (k *kvDraft) keys(frame, prefix string) ([]string, error) {
	m, err := k.level(frame)
	if err != nil {
		return nil, err
	}
	var out []string
	for key, e := range m {
		if strings.HasPrefix(key, prefix) {
			if d, ok := k.levels[frame][key]; ok {
				e = d
			}
			if e != nil {
				out = append(out, key)
			}
		}
	}
	for key, e := range k.levels[frame] {
		if _, inState := m[key]; !inState && e != nil && strings.HasPrefix(key, prefix) {
			out = append(out, key)
		}
	}
	sort.Strings(out)
	return out, nil
}

func (d decider) changeState(c *ChangeState) ([]Event, error) {
	if len(c.Ops) == 0 {
		return nil, invalid("a state change with no operations")
	}
	if len(c.Ops) > MaxStateOps {
		return nil, invalid("a state change of %d operations; at most %d", len(c.Ops), MaxStateOps)
	}
	k := &kvDraft{d: d, levels: map[string]map[string]*KVEntry{}, seen: map[string]bool{}, total: d.s.KVBytes}
	version := d.s.Version + 1 // the event's
	var changes []StateChange
	for i := range c.Ops {
		op := &c.Ops[i]
		ch, err := k.apply(op, version)
		if err != nil {
			if len(c.Ops) > 1 {
				return nil, fmt.Errorf("operation %d of %d (%s): %w", i+1, len(c.Ops), op.Kind, err)
			}
			return nil, err
		}
		changes = append(changes, ch)
	}
	return []Event{&StateChanged{Meta: d.meta("", ReasonUserMessage), Expired: k.expired, Changes: changes}}, nil
}

// apply decides one operation on the draft.
func (k *kvDraft) apply(op *StateOp, version int64) (StateChange, error) {
	d := k.d
	cfg := d.cfg
	ch := StateChange{Kind: op.Kind, Frame: op.Frame}
	if err := CheckStateLevel(d.s, op.Frame, cfg); err != nil {
		return ch, err
	}
	if op.TTL < -1 {
		return ch, invalid("a TTL of %d ns: positive, 0 (keep the key's own) or -1 (none)", op.TTL)
	}
	if op.Kind == StateClear {
		if op.Key != "" || op.Value != nil || op.IfVersion != nil || op.TTL != 0 || op.Keep != 0 || op.Sliding {
			return ch, invalid("clear takes a prefix only")
		}
		if op.Prefix != "" {
			if err := ValidateStateKey(op.Prefix, cfg.MaxStateKeyBytes); err != nil {
				return ch, fmt.Errorf("clear prefix: %w", err)
			}
		}
		keys, err := k.keys(op.Frame, op.Prefix)
		if err != nil {
			return ch, err
		}
		for _, key := range keys {
			e, _ := k.get(op.Frame, key)
			k.total -= kvSize(key, e)
			k.set(op.Frame, key, nil)
		}
		ch.Prefix, ch.Keys = op.Prefix, keys
		return ch, nil
	}
	if op.Prefix != "" {
		return ch, invalid("%s takes a key, not a prefix", op.Kind)
	}
	if err := ValidateStateKey(op.Key, cfg.MaxStateKeyBytes); err != nil {
		return ch, err
	}
	ch.Key = op.Key
	cur, err := k.get(op.Frame, op.Key)
	if err != nil {
		return ch, err
	}
	have := int64(0)
	if cur != nil {
		have = cur.Version
	}
	if op.IfVersion != nil {
		if *op.IfVersion < 0 {
			return ch, invalid("if_version %d: a key's version (0: absent)", *op.IfVersion)
		}
		if *op.IfVersion != have {
			return ch, &StateConflictError{Key: op.Key, Frame: op.Frame, Want: *op.IfVersion, Have: have, Op: op.Kind}
		}
	}
	var next *KVEntry
	switch op.Kind {
	case StateDelete:
		if op.Value != nil || op.TTL != 0 || op.Keep != 0 || op.Sliding {
			return ch, invalid("delete takes a key only")
		}
	case StateSet, StatePush, StateTouch:
		next = &KVEntry{Version: version}
		if cur != nil {
			next.ExpiresAt, next.TTL, next.Sliding = cur.ExpiresAt, cur.TTL, cur.Sliding
		}
		switch {
		case op.TTL > 0:
			if d.h.Now > 1<<62 || op.TTL > 1<<62 {
				return ch, invalid("a TTL of %d ns", op.TTL)
			}
			next.ExpiresAt, next.TTL, next.Sliding = d.h.Now+op.TTL, op.TTL, op.Sliding
		case op.TTL == -1:
			if op.Sliding {
				return ch, invalid("sliding with TTL -1 (none): a sliding TTL needs a length")
			}
			next.ExpiresAt, next.TTL, next.Sliding = 0, 0, false
		case op.Sliding:
			return ch, invalid("sliding needs a TTL")
		case next.Sliding:
			next.ExpiresAt = d.h.Now + next.TTL
		}
		switch op.Kind {
		case StateSet:
			if op.Keep != 0 {
				return ch, invalid("set takes no keep (push keeps the last N items)")
			}
			next.Value = op.Value
			ch.Value = op.Value
		case StatePush:
			if op.Keep < 0 || op.Keep > MaxPushKeep {
				return ch, invalid("push keep %d: 0 (unbounded) to %d", op.Keep, MaxPushKeep)
			}
			if cur != nil && !cur.List {
				return ch, invalid("push to key %q, which holds a value, not a list (set it or delete it first)", op.Key)
			}
			next.List = true
			var items [][]byte
			if cur != nil {
				items = cur.Items
			}
			items = append(items[:len(items):len(items)], op.Value)
			if op.Keep > 0 && int64(len(items)) > op.Keep {
				ch.Trim = int64(len(items)) - op.Keep
				items = items[ch.Trim:]
			}
			next.Items = items
			ch.Item = op.Value
			if ch.Item == nil {
				ch.Item = []byte{}
			}
		case StateTouch:
			if cur == nil {
				return ch, fmt.Errorf("%w: touch of key %q, which is absent", ErrStateKeyNotFound, op.Key)
			}
			if op.Value != nil || op.Keep != 0 {
				return ch, invalid("touch takes a key and a TTL only")
			}
			next.Value, next.Items, next.List = cur.Value, cur.Items, cur.List
		}
		if vs := valueSize(next); vs > int64(cfg.MaxStateValueBytes) {
			return ch, &StateTooLargeError{Key: op.Key, Frame: op.Frame, What: "value", Size: vs, Limit: int64(cfg.MaxStateValueBytes)}
		}
		ch.ExpiresAt, ch.TTL, ch.Sliding = next.ExpiresAt, next.TTL, next.Sliding
	default:
		return ch, invalid("unknown state operation %q (set, delete, clear, push, touch)", op.Kind)
	}
	if cur != nil {
		k.total -= kvSize(op.Key, cur)
	}
	if next != nil {
		k.total += kvSize(op.Key, next)
		if k.total > int64(cfg.MaxStateBytes) {
			return ch, &StateTooLargeError{Key: op.Key, Frame: op.Frame, What: "state", Size: k.total, Limit: int64(cfg.MaxStateBytes)}
		}
	}
	k.set(op.Frame, op.Key, next)
	return ch, nil
}

func (d decider) expireState(*ExpireState) ([]Event, error) {
	keys := d.s.ExpiredKeys(d.h.Now)
	if len(keys) == 0 {
		return nil, nil
	}
	return []Event{&StateExpired{Meta: d.meta("", ReasonUserMessage), Keys: keys}}, nil
}

// ExpiredKeys lists the scope's keys, at both levels, that have expired by
// now: by level (the scope's first, then frames in push order) and key.
func (s *State) ExpiredKeys(now int64) []ExpiredKey {
	var out []ExpiredKey
	collect := func(frame string, m map[string]*KVEntry) {
		var keys []string
		for key, e := range m {
			if e.Expired(now) {
				keys = append(keys, key)
			}
		}
		sort.Strings(keys)
		for _, key := range keys {
			out = append(out, ExpiredKey{Frame: frame, Key: key, Version: m[key].Version})
		}
	}
	collect("", s.KV)
	for _, id := range s.Order {
		if f := s.Frames[id]; f != nil && f.Status.Live() {
			collect(id, f.KV)
		}
	}
	return out
}

// NextStateExpiry is the earliest expiry of the scope's keys (0: none).
func (s *State) NextStateExpiry() int64 {
	var next int64
	check := func(m map[string]*KVEntry) {
		for _, e := range m {
			if e.ExpiresAt != 0 && (next == 0 || e.ExpiresAt < next) {
				next = e.ExpiresAt
			}
		}
	}
	check(s.KV)
	for _, f := range s.Frames {
		if f.Status.Live() {
			check(f.KV)
		}
	}
	return next
}

// kvUndo is what the application of a state event changed so far: Apply
// leaves the state as it was when a later part of the event turns out
// inconsistent (a corrupt or forged log), so what the earlier parts did is
// put back.
type kvUndo struct {
	bytes int64 // KVBytes before the event
	prev  []kvPrev
}

// kvPrev is an entry as it was before the event replaced it.
type kvPrev struct {
	m   map[string]*KVEntry
	key string
	e   *KVEntry // nil: absent
}

// putKV sets key of level m to e (nil: removes it), keeping KVBytes in
// step and recording in u what it replaced.
func (s *State) putKV(u *kvUndo, m map[string]*KVEntry, key string, e *KVEntry) {
	old := m[key]
	u.prev = append(u.prev, kvPrev{m: m, key: key, e: old})
	if old != nil {
		s.KVBytes -= kvSize(key, old)
		delete(m, key)
	}
	if e != nil {
		m[key] = e
		s.KVBytes += kvSize(key, e)
	}
}

// endKV ends a state event's application: on an error, what it changed is
// put back, newest first; either way empty levels are left nil.
func (s *State) endKV(u *kvUndo, err error) {
	if err != nil {
		for i := len(u.prev) - 1; i >= 0; i-- {
			p := u.prev[i]
			if p.e == nil {
				delete(p.m, p.key)
			} else {
				p.m[p.key] = p.e
			}
		}
		s.KVBytes = u.bytes
	}
	s.dropEmptyKV()
}

func (s *State) removeExpired(u *kvUndo, keys []ExpiredKey) error {
	for _, x := range keys {
		m, err := s.kvLevel(x.Frame, false)
		if err != nil {
			return inconsistent("expired key %q of %q: %v", x.Key, x.Frame, err)
		}
		e := m[x.Key]
		if e == nil || e.Version != x.Version {
			return inconsistent("expired key %q of %q at version %d", x.Key, x.Frame, x.Version)
		}
		s.putKV(u, m, x.Key, nil)
	}
	return nil
}

func applyStateChanged(s *State, e *StateChanged, version int64) (err error) {
	u := &kvUndo{bytes: s.KVBytes}
	defer func() { s.endKV(u, err) }()
	if err := s.removeExpired(u, e.Expired); err != nil {
		return err
	}
	for _, ch := range e.Changes {
		m, err := s.kvLevel(ch.Frame, true)
		if err != nil {
			return inconsistent("state change of %q: %v", ch.Frame, err)
		}
		switch ch.Kind {
		case StateClear:
			for _, key := range ch.Keys {
				if m[key] == nil {
					return inconsistent("clear of %q, which is absent", key)
				}
				s.putKV(u, m, key, nil)
			}
		case StateDelete:
			s.putKV(u, m, ch.Key, nil)
		case StateSet, StatePush, StateTouch:
			if ch.TTL < 0 || (ch.Sliding && ch.TTL == 0) {
				return inconsistent("%s of %q with TTL %d (sliding: %v)", ch.Kind, ch.Key, ch.TTL, ch.Sliding)
			}
			cur := m[ch.Key]
			next := &KVEntry{Version: version, ExpiresAt: ch.ExpiresAt, TTL: ch.TTL, Sliding: ch.Sliding}
			switch ch.Kind {
			case StateSet:
				next.Value = cloneBytes(ch.Value)
			case StatePush:
				next.List = true
				if cur != nil {
					if !cur.List {
						return inconsistent("push to %q, a value", ch.Key)
					}
					next.Items = cur.Items
				}
				if ch.Trim < 0 || ch.Trim > int64(len(next.Items))+1 {
					return inconsistent("push to %q trims %d of %d", ch.Key, ch.Trim, len(next.Items))
				}
				next.Items = append(next.Items[:len(next.Items):len(next.Items)], cloneBytes(ch.Item))[ch.Trim:]
				if next.Items == nil {
					next.Items = [][]byte{}
				}
			case StateTouch:
				if cur == nil {
					return inconsistent("touch of %q, absent", ch.Key)
				}
				next.Value, next.Items, next.List = cur.Value, cur.Items, cur.List
			}
			s.putKV(u, m, ch.Key, next)
		default:
			return inconsistent("state change %q", ch.Kind)
		}
	}
	return nil
}

func applyStateExpired(s *State, e *StateExpired) (err error) {
	if len(e.Keys) == 0 {
		return inconsistent("state expired with no keys")
	}
	u := &kvUndo{bytes: s.KVBytes}
	defer func() { s.endKV(u, err) }()
	return s.removeExpired(u, e.Keys)
}

// dropEmptyKV leaves empty maps nil, as a snapshot decodes them.
func (s *State) dropEmptyKV() {
	if len(s.KV) == 0 {
		s.KV = nil
	}
	for _, f := range s.Frames {
		if len(f.KV) == 0 {
			f.KV = nil
		}
	}
}

// kvFrameEnded removes a finished frame's state from the accounting (at
// its pop), or hands it to its continuation (carried to the link's push in
// the same append).
func (s *State) kvFrameEnded(f *Frame, continuedTo string) {
	if continuedTo != "" && f.KV != nil {
		s.carry = &kvCarry{to: continuedTo, kv: f.KV}
		f.KV = nil
		return
	}
	for key, e := range f.KV {
		s.KVBytes -= kvSize(key, e)
	}
	f.KV = nil
}

// kvCarry is a continued frame's state on its way to the link that
// continues it (between the two events of one append).
type kvCarry struct {
	to string
	kv map[string]*KVEntry
}

// kvLinkPushed gives a continuation link the state its predecessor carried.
func (s *State) kvLinkPushed(f *Frame) {
	if s.carry != nil && s.carry.to == f.ID {
		f.KV = s.carry.kv
		s.carry = nil
	}
}

// StateEntry is a key as a read answers it.
type StateEntry struct {
	Key       string   `msgpack:"key"`
	Value     []byte   `msgpack:"v,omitempty"`
	Items     [][]byte `msgpack:"it,omitempty"`
	List      bool     `msgpack:"l,omitempty"`
	Version   int64    `msgpack:"ver"`
	ExpiresAt int64    `msgpack:"x,omitempty"`
	Sliding   bool     `msgpack:"sl,omitempty"`
}

func entryOf(key string, e *KVEntry) StateEntry {
	return StateEntry{Key: key, Value: e.Value, Items: e.Items, List: e.List, Version: e.Version, ExpiresAt: e.ExpiresAt, Sliding: e.Sliding}
}

// GetState reads keys of a level at now: each found entry, and the keys
// absent (or expired).
func GetState(s *State, frame string, keys []string, now int64, cfg Config) (found []StateEntry, missing []string, err error) {
	m, err := s.kvLevel(frame, false)
	if err != nil {
		return nil, nil, err
	}
	if len(keys) > MaxStateOps {
		return nil, nil, invalid("a read of %d keys; at most %d", len(keys), MaxStateOps)
	}
	for _, key := range keys {
		if err := ValidateStateKey(key, cfg.MaxStateKeyBytes); err != nil {
			return nil, nil, err
		}
		if e := m[key]; e != nil && !e.Expired(now) {
			found = append(found, entryOf(key, e))
		} else {
			missing = append(missing, key)
		}
	}
	return found, missing, nil
}

// StateSize is a level's size at now: its live keys and what they count
// against MaxStateBytes; Total the whole scope's (both levels, expired
// keys not yet removed included: they count until removed).
type StateSize struct {
	Keys  int64 `msgpack:"n"`
	Bytes int64 `msgpack:"b"`
	Total int64 `msgpack:"t"`
	Limit int64 `msgpack:"lim"`
}

// RangeState lists a level's live keys with prefix, sorted, after the key
// after (a cursor: ""), at most limit of them; next is the cursor of the
// following page ("" at the end). It also returns the level's size.
func RangeState(s *State, frame, prefix, after string, limit int, now int64, cfg Config) (entries []StateEntry, next string, size StateSize, err error) {
	m, err := s.kvLevel(frame, false)
	if err != nil {
		return nil, "", size, err
	}
	if prefix != "" {
		if err := ValidateStateKey(prefix, cfg.MaxStateKeyBytes); err != nil {
			return nil, "", size, fmt.Errorf("prefix: %w", err)
		}
	}
	if after != "" {
		if err := ValidateStateKey(after, cfg.MaxStateKeyBytes); err != nil {
			return nil, "", size, fmt.Errorf("cursor: %w", err)
		}
	}
	if limit <= 0 || limit > MaxStateOps {
		return nil, "", size, invalid("a page of %d keys: 1 to %d", limit, MaxStateOps)
	}
	var keys []string
	for key, e := range m {
		if e.Expired(now) {
			continue
		}
		size.Keys++
		size.Bytes += kvSize(key, e)
		if strings.HasPrefix(key, prefix) && key > after {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	if len(keys) > limit {
		keys, next = keys[:limit], keys[limit-1]
	}
	for _, key := range keys {
		entries = append(entries, entryOf(key, m[key]))
	}
	size.Total, size.Limit = s.KVBytes, int64(cfg.MaxStateBytes)
	return entries, next, size, nil
}

// StateHistoryOf returns what state event e (state.changed or
// state.expired) did to key of level frame: found false when it did not
// touch it. For a push the entry's Items hold the pushed item alone (the
// list at that version is not in the event, only its window's trim);
// kind is the operation, or "expired".
func StateHistoryOf(e Event, frame, key string) (entry StateEntry, kind string, found bool) {
	switch ev := e.(type) {
	case *StateChanged:
		for i := len(ev.Changes) - 1; i >= 0; i-- {
			ch := &ev.Changes[i]
			if ch.Frame != frame {
				continue
			}
			switch {
			case ch.Kind == StateClear:
				for _, k := range ch.Keys {
					if k == key {
						return StateEntry{Key: key}, ch.Kind, true
					}
				}
			case ch.Key == key:
				en := StateEntry{Key: key, Value: ch.Value, ExpiresAt: ch.ExpiresAt, Sliding: ch.Sliding}
				if ch.Kind == StatePush {
					en.List, en.Items = true, [][]byte{ch.Item}
				}
				return en, ch.Kind, true
			}
		}
		for _, x := range ev.Expired {
			if x.Frame == frame && x.Key == key {
				return StateEntry{Key: key, Version: x.Version}, "expired", true
			}
		}
	case *StateExpired:
		for _, x := range ev.Keys {
			if x.Frame == frame && x.Key == key {
				return StateEntry{Key: key, Version: x.Version}, "expired", true
			}
		}
	}
	return StateEntry{}, "", false
}
