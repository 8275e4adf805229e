package actors

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sort"
	"strings"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// The registry's index (issue 13, DESIGN §11) is the store table
// "registry", written by the follower (registry.go) from the log and read
// by ListFrames. Its keys:
//
//	m                                   position: the last global sequence applied (8 bytes) and the format
//	r scope 0 frame                     the row (frames.RegistryRow, msgpack), stored once
//	t S                                 every frame, newest first
//	s status S                          by status
//	c scope 0 S                         by scope (exact, and a scope prefix)
//	g goal[:200] 0 S                    by goal (a goal prefix)
//	p scope 0 parent 0 S                by parent
//	h scope 0 chainRoot 0 S             by chain
//	v scope 0 pushVersion(8)            → frame: a scope's rows in log order, for retention and destroy
//
// where S, the order suffix, is inv(createdAt) (8 bytes, big-endian: the
// newest first in key order) + scope + 0 + frame: every index lists the
// same total order (newest first, then scope, then frame), so a page
// resumes in any index from the suffix of the last entry it examined, and
// the members of a cluster, whose scopes are disjoint, merge by it. Scope
// names, frame ids and goals hold no NUL, so 0 separates them. An index
// entry holds no value: the row is looked up by the suffix (r + S[8:]).
// The position is written in the same TableWrite as the rows it covers.

const (
	registryTable  = "registry"
	registryFormat = 1
	// goalKeyBytes bounds the goal in a g key (longer prefixes are
	// checked on the row).
	goalKeyBytes = 200
	// registryChunk is how many keys a scan of one index reads at once.
	registryChunk = 128
	// registryExamine bounds the index entries one page examines: a page
	// may end short of its limit, with a cursor, when its filters match
	// rarely in the index it reads.
	registryExamine = 10_000
	// registryCollect bounds what a prefix index (goal, scope prefix)
	// collects before the query reads a time-ordered index instead.
	registryCollect = 20_000
	// Page sizes.
	defaultListLimit = 100
	maxListLimit     = 1000
	cursorVersion    = 1
)

var registryMetaKey = []byte("m")

// invTime maps a time to 8 bytes that sort the newest first.
func invTime(t int64) uint64 { return ^(uint64(t) ^ 1<<63) }

func appendSuffix(b []byte, created int64, scope, frame string) []byte {
	b = binary.BigEndian.AppendUint64(b, invTime(created))
	b = append(b, scope...)
	b = append(b, 0)
	return append(b, frame...)
}

func rowKey(scope, frame string) []byte {
	b := make([]byte, 0, 2+len(scope)+len(frame))
	b = append(append(append(append(b, 'r'), scope...), 0), frame...)
	return b
}

func goalKey(goal string) string {
	if len(goal) > goalKeyBytes {
		return goal[:goalKeyBytes]
	}
	return goal
}

// indexKeys returns the index entries of row r (nil for none) as
// key → value.
func indexKeys(r *frames.RegistryRow) map[string][]byte {
	if r == nil {
		return nil
	}
	suf := appendSuffix(nil, r.CreatedAt, r.Scope, r.FrameID)
	k := func(parts ...string) string {
		return strings.Join(parts, "\x00") + "\x00" + string(suf)
	}
	out := map[string][]byte{
		"t" + string(suf): nil,
		"s" + string([]byte{byte(r.Status)}) + string(suf): nil,
		k("c" + r.Scope):         nil,
		k("g" + goalKey(r.Goal)): nil,
	}
	if r.ParentID != "" {
		out[k("p"+r.Scope, r.ParentID)] = nil
	}
	if r.ChainRoot != "" {
		out[k("h"+r.Scope, r.ChainRoot)] = nil
	}
	v := binary.BigEndian.AppendUint64([]byte("v"+r.Scope+"\x00"), uint64(r.PushVersion))
	out[string(v)] = []byte(r.FrameID)
	return out
}

// rowFits reports whether every key of r fits a table key.
func rowFits(r *frames.RegistryRow) bool {
	for k := range indexKeys(r) {
		if len(k) > eventstore.MaxTableKey {
			return false
		}
	}
	return len(rowKey(r.Scope, r.FrameID)) <= eventstore.MaxTableKey
}

func encodeRow(r *frames.RegistryRow) ([]byte, error) { return eventstore.Marshal(r) }

func decodeRow(b []byte) (*frames.RegistryRow, error) {
	var r frames.RegistryRow
	if err := eventstore.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("registry: undecodable row: %w", err)
	}
	return &r, nil
}

// registryPosition reads the index's position (0 for an index never
// written).
func registryPosition(ctx context.Context, t eventstore.Tables) (uint64, error) {
	v, ok, err := t.TableGet(ctx, registryTable, registryMetaKey)
	if err != nil || !ok {
		return 0, err
	}
	if len(v) != 9 || v[8] != registryFormat {
		return 0, fmt.Errorf("registry: position record of %d bytes (format %v) is not this release's", len(v), v)
	}
	return binary.BigEndian.Uint64(v), nil
}

func positionOp(pos uint64) eventstore.TableOp {
	return eventstore.TableOp{Key: registryMetaKey, Value: append(binary.BigEndian.AppendUint64(nil, pos), registryFormat)}
}

// regBatch folds a batch of events: the rows it touches are read from
// the table once and kept in memory until the batch is written.
type regBatch struct {
	ctx   context.Context
	t     eventstore.Tables
	orig  map[string]*frames.RegistryRow // as in the table (nil: none)
	cur   map[string]*frames.RegistryRow // as folded (nil: none)
	order []string
	err   error
}

func newRegBatch(ctx context.Context, t eventstore.Tables) *regBatch {
	return &regBatch{ctx: ctx, t: t, orig: map[string]*frames.RegistryRow{}, cur: map[string]*frames.RegistryRow{}}
}

func (b *regBatch) load(k string) *frames.RegistryRow {
	if r, ok := b.cur[k]; ok {
		return r
	}
	var r *frames.RegistryRow
	if b.err == nil {
		v, ok, err := b.t.TableGet(b.ctx, registryTable, []byte(k))
		switch {
		case err != nil:
			b.err = err
		case ok:
			r, b.err = decodeRow(v)
		}
	}
	b.orig[k], b.cur[k] = r, r
	b.order = append(b.order, k)
	return r
}

func (b *regBatch) get(scope, frame string) (frames.RegistryRow, bool) {
	if r := b.load(string(rowKey(scope, frame))); r != nil {
		return *r, true
	}
	return frames.RegistryRow{}, false
}

func (b *regBatch) apply(ch frames.RegistryChange) {
	for i := range ch.Put {
		r := ch.Put[i]
		k := string(rowKey(r.Scope, r.FrameID))
		b.load(k)
		b.cur[k] = &r
	}
	if d := ch.Drop; d != nil {
		b.drop(*d)
	}
}

// drop removes the rows d removes: those of the table (found in the
// scope's v entries, in push order, up to d.Through) and those of the
// batch.
func (b *regBatch) drop(d frames.RegistryDrop) {
	prefix := []byte("v" + d.Scope + "\x00")
	var ids []string
	if b.err == nil {
		b.err = b.t.TableScan(b.ctx, registryTable, prefix, nil, false, func(k, v []byte) (bool, error) {
			if len(k) != len(prefix)+8 || int64(binary.BigEndian.Uint64(k[len(prefix):])) > d.Through {
				return false, nil
			}
			ids = append(ids, string(v))
			return true, nil
		})
	}
	for _, id := range ids {
		b.load(string(rowKey(d.Scope, id)))
	}
	for k, r := range b.cur {
		if r != nil && d.Removes(*r) {
			b.cur[k] = nil
		}
	}
}

// seed adds the rows of the scope's live frames pushed at or before
// through that the index has none of: a retention removed their pushes
// before the follower read them (an old file, a follower far behind). They
// come from the scope's snapshot (retention leaves one at or after its
// cut); each one's live children are counted from the rows the index has
// (the children whose pushes it read, and those seeded with it).
func (b *regBatch) seed(store eventstore.Store, scope string, through int64) {
	if b.err != nil {
		return
	}
	snap, ok, err := store.LoadSnapshot(b.ctx, scope)
	if err != nil || !ok {
		b.err = err
		return
	}
	st, ok, err := eventstore.DecodeState(scope, snap)
	if err != nil || !ok {
		b.err = err
		return
	}
	var seeded []string
	for id, f := range st.Frames {
		if !f.Status.Live() || f.PushSeq > through {
			continue
		}
		if _, has := b.get(scope, id); has || b.err != nil {
			continue
		}
		r := frames.RowOfFrame(scope, f)
		b.apply(frames.RegistryChange{Put: []frames.RegistryRow{r}})
		seeded = append(seeded, id)
	}
	for _, id := range seeded {
		kids := map[string]bool{}
		prefix := []byte("p" + scope + "\x00" + id + "\x00")
		if err := b.t.TableScan(b.ctx, registryTable, prefix, nil, false, func(k, _ []byte) (bool, error) {
			if _, _, frame, ok := splitSuffix(k[len(prefix):]); ok {
				kids[frame] = true
			}
			return true, nil
		}); err != nil {
			b.err = err
			return
		}
		for _, r := range b.cur {
			if r != nil && r.Scope == scope && r.ParentID == id {
				kids[r.FrameID] = true
			}
		}
		row, _ := b.get(scope, id)
		row.LiveKids = 0
		for kid := range kids {
			if k, ok := b.get(scope, kid); ok && k.ParentID == id && k.Status.Live() {
				row.LiveKids++
			}
		}
		if row.Status != frames.StatusSuspended {
			row.Status = frames.StatusActive
			if row.LiveKids > 0 {
				row.Status = frames.StatusWaiting
			}
		}
		b.apply(frames.RegistryChange{Put: []frames.RegistryRow{row}})
	}
}

// ops returns the table writes of the batch.
func (b *regBatch) ops() ([]eventstore.TableOp, error) {
	var ops []eventstore.TableOp
	for _, k := range b.order {
		o, c := b.orig[k], b.cur[k]
		if c != nil && !rowFits(c) {
			c = nil // not indexable (ids beyond the table's key size): left out
		}
		ok, ck := indexKeys(o), indexKeys(c)
		for key := range ok {
			if _, keep := ck[key]; !keep {
				ops = append(ops, eventstore.TableOp{Key: []byte(key), Delete: true})
			}
		}
		for key, v := range ck {
			if ov, had := ok[key]; !had || !bytes.Equal(ov, v) {
				ops = append(ops, eventstore.TableOp{Key: []byte(key), Value: v})
			}
		}
		switch {
		case c != nil:
			v, err := encodeRow(c)
			if err != nil {
				return nil, err
			}
			ops = append(ops, eventstore.TableOp{Key: []byte(k), Value: v})
		case o != nil:
			ops = append(ops, eventstore.TableOp{Key: []byte(k), Delete: true})
		}
	}
	// In key order: the store's B+tree takes sorted writes far faster.
	// Each key appears once (a row's keys are its own; rows are distinct).
	sort.Slice(ops, func(i, j int) bool { return bytes.Compare(ops[i].Key, ops[j].Key) < 0 })
	return ops, nil
}

// --- queries ---

// regQuery is a validated ListFrames.
type regQuery struct {
	statuses                       [frames.StatusContinued + 1]bool
	nStatus                        int
	goalPrefix, scopePrefix, scope string
	parent, chain                  string
	cAfter, cBefore                int64
	fAfter, fBefore                int64
	limit                          int
	after                          []byte // the cursor's suffix
}

func invalidList(format string, a ...any) *messages.Error {
	return messages.Errorf(messages.CodeInvalidArgument, "ListFrames: "+format, a...)
}

// compileList validates req.
func compileList(req *messages.ListFrames) (*regQuery, *messages.Error) {
	q := &regQuery{goalPrefix: req.GoalPrefix, scopePrefix: req.ScopePrefix, scope: req.InScope, parent: req.ParentID,
		chain: req.ChainRoot, cAfter: req.CreatedAfter, cBefore: req.CreatedBefore, fAfter: req.FinishedAfter,
		fBefore: req.FinishedBefore, limit: req.Limit}
	if req.Scope != "" {
		return nil, invalidList("a global request names no scope in its header (got %q): use InScope or ScopePrefix", req.Scope)
	}
	if len(req.Statuses) > 16 {
		return nil, invalidList("%d statuses (at most 16)", len(req.Statuses))
	}
	for _, name := range req.Statuses {
		st, err := frames.ParseStatus(name)
		if err != nil {
			return nil, invalidList("unknown status %q (want active, waiting, suspended, completed, failed, cancelled or continued)", name)
		}
		if !q.statuses[st] {
			q.nStatus++
		}
		q.statuses[st] = true
	}
	for _, f := range []struct{ what, v string }{{"scope", q.scope}, {"parent id", q.parent}, {"chain root", q.chain}} {
		if f.v != "" {
			if err := frames.ValidateID(f.what, f.v, eventstore.MaxTableKey/4); err != nil {
				return nil, invalidList("%v", err)
			}
		}
	}
	if len(q.goalPrefix) > 4<<10 || len(q.scopePrefix) > eventstore.MaxTableKey/4 || strings.ContainsRune(q.goalPrefix, 0) || strings.ContainsRune(q.scopePrefix, 0) {
		return nil, invalidList("goal prefix (at most 4096 bytes) or scope prefix (at most 256) too long or holding a NUL")
	}
	if (q.parent != "" || q.chain != "") && q.scope == "" {
		return nil, invalidList("ParentID and ChainRoot name frames of one scope: set InScope too")
	}
	if q.cAfter < 0 || q.cBefore < 0 || q.fAfter < 0 || q.fBefore < 0 {
		return nil, invalidList("negative time bound")
	}
	if q.cBefore != 0 && q.cAfter >= q.cBefore {
		return nil, invalidList("CreatedAfter %d is not before CreatedBefore %d", q.cAfter, q.cBefore)
	}
	if q.fBefore != 0 && q.fAfter >= q.fBefore {
		return nil, invalidList("FinishedAfter %d is not before FinishedBefore %d", q.fAfter, q.fBefore)
	}
	switch {
	case q.limit < 0 || q.limit > maxListLimit:
		return nil, invalidList("limit %d not in 0..%d", q.limit, maxListLimit)
	case q.limit == 0:
		q.limit = defaultListLimit
	}
	if req.WaitMillis < 0 {
		return nil, invalidList("negative WaitMillis %d", req.WaitMillis)
	}
	if req.Cursor != "" {
		c, err := decodeCursor(req.Cursor)
		if err != nil {
			return nil, invalidList("%v", err)
		}
		q.after = c
	}
	return q, nil
}

// listCursor is a page's position: the order suffix of the last entry
// examined. On the wire: base64url(version byte, msgpack, CRC-32 of
// both): opaque, and a cursor altered anywhere is refused (it is not
// signed: a forged one only moves where a page starts).
type listCursor struct {
	Created int64  `msgpack:"t"`
	Scope   string `msgpack:"s"`
	Frame   string `msgpack:"f"`
}

func encodeCursor(suffix []byte) string {
	created, scope, frame, ok := splitSuffix(suffix)
	if !ok {
		return ""
	}
	b, err := eventstore.Marshal(&listCursor{Created: created, Scope: scope, Frame: frame})
	if err != nil {
		return ""
	}
	b = append([]byte{cursorVersion}, b...)
	return base64.RawURLEncoding.EncodeToString(binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b)))
}

var errBadCursor = errors.New("the cursor is not one a ListFrames reply gave (truncated, altered or of another release)")

func decodeCursor(s string) ([]byte, error) {
	if len(s) > 2048 {
		return nil, errBadCursor
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 6 || b[0] != cursorVersion {
		return nil, errBadCursor
	}
	body := b[:len(b)-4]
	if crc32.ChecksumIEEE(body) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		return nil, errBadCursor
	}
	var c listCursor
	if err := eventstore.Unmarshal(body[1:], &c); err != nil {
		return nil, errBadCursor
	}
	if frames.ValidateID("scope", c.Scope, 512) != nil || frames.ValidateID("frame", c.Frame, 512) != nil {
		return nil, errBadCursor
	}
	return appendSuffix(nil, c.Created, c.Scope, c.Frame), nil
}

// splitSuffix reads an order suffix.
func splitSuffix(s []byte) (created int64, scope, frame string, ok bool) {
	if len(s) < 10 {
		return 0, "", "", false
	}
	created = int64(^binary.BigEndian.Uint64(s) ^ 1<<63)
	i := bytes.IndexByte(s[8:], 0)
	if i < 0 {
		return 0, "", "", false
	}
	return created, string(s[8 : 8+i]), string(s[9+i:]), true
}

// entrySuffix is the order suffix of an entry (a cluster Client merges
// its members' pages by it).
func entrySuffix(e *messages.FrameEntry) []byte {
	return appendSuffix(nil, e.CreatedAt, e.Scope, e.FrameID)
}

// matches reports whether row r passes every filter of q.
func (q *regQuery) matches(r *frames.RegistryRow) bool {
	switch {
	case q.nStatus > 0 && (int(r.Status) >= len(q.statuses) || !q.statuses[r.Status]),
		!strings.HasPrefix(r.Goal, q.goalPrefix),
		!strings.HasPrefix(r.Scope, q.scopePrefix),
		q.scope != "" && r.Scope != q.scope,
		q.parent != "" && r.ParentID != q.parent,
		q.chain != "" && r.ChainRoot != q.chain,
		q.cAfter != 0 && r.CreatedAt < q.cAfter,
		q.cBefore != 0 && r.CreatedAt >= q.cBefore,
		(q.fAfter != 0 || q.fBefore != 0) && r.FinishedAt == 0,
		q.fAfter != 0 && r.FinishedAt < q.fAfter,
		q.fBefore != 0 && r.FinishedAt >= q.fBefore:
		return false
	}
	return true
}

// start is the first suffix a page reads: after the cursor, and not
// before CreatedBefore.
func (q *regQuery) start() []byte {
	var s []byte
	if q.cBefore != 0 {
		s = binary.BigEndian.AppendUint64(nil, invTime(q.cBefore-1))
	}
	if q.after != nil {
		if c := append(bytes.Clone(q.after), 0); bytes.Compare(c, s) > 0 {
			s = c
		}
	}
	return s
}

// past reports whether suffix s lies beyond CreatedAfter (older): an
// ordered source ends there.
func (q *regQuery) past(s []byte) bool {
	return q.cAfter != 0 && binary.BigEndian.Uint64(s) > invTime(q.cAfter)
}

// source yields order suffixes, in order.
type source interface {
	next() (suffix []byte, ok bool, err error)
}

// streamSource reads one index prefix in order, a chunk at a time.
type streamSource struct {
	ctx    context.Context
	t      eventstore.Tables
	q      *regQuery
	prefix []byte
	from   []byte
	buf    [][]byte
	done   bool
}

func newStream(ctx context.Context, t eventstore.Tables, q *regQuery, prefix []byte) *streamSource {
	return &streamSource{ctx: ctx, t: t, q: q, prefix: prefix, from: append(bytes.Clone(prefix), q.start()...)}
}

func (s *streamSource) next() ([]byte, bool, error) {
	if len(s.buf) == 0 && !s.done {
		n := 0
		err := s.t.TableScan(s.ctx, registryTable, s.prefix, s.from, false, func(k, _ []byte) (bool, error) {
			suf := bytes.Clone(k[len(s.prefix):])
			if len(suf) < 10 || s.q.past(suf) {
				s.done = true
				return false, nil
			}
			s.buf = append(s.buf, suf)
			n++
			return n < registryChunk, nil
		})
		if err != nil {
			return nil, false, err
		}
		if n < registryChunk {
			s.done = true
		}
		if n > 0 {
			s.from = append(append(bytes.Clone(s.prefix), s.buf[len(s.buf)-1]...), 0)
		}
	}
	if len(s.buf) == 0 {
		return nil, false, nil
	}
	suf := s.buf[0]
	s.buf = s.buf[1:]
	return suf, true, nil
}

// mergeSource merges ordered sources (several statuses).
type mergeSource struct {
	srcs  []source
	heads [][]byte
	init  bool
}

func (m *mergeSource) next() ([]byte, bool, error) {
	if !m.init {
		m.init = true
		m.heads = make([][]byte, len(m.srcs))
		for i, s := range m.srcs {
			h, _, err := s.next()
			if err != nil {
				return nil, false, err
			}
			m.heads[i] = h
		}
	}
	best := -1
	for i, h := range m.heads {
		if h != nil && (best < 0 || bytes.Compare(h, m.heads[best]) < 0) {
			best = i
		}
	}
	if best < 0 {
		return nil, false, nil
	}
	out := m.heads[best]
	h, _, err := m.srcs[best].next()
	if err != nil {
		return nil, false, err
	}
	m.heads[best] = h
	return out, true, nil
}

// sliceSource yields collected suffixes.
type sliceSource struct{ s [][]byte }

func (s *sliceSource) next() ([]byte, bool, error) {
	if len(s.s) == 0 {
		return nil, false, nil
	}
	out := s.s[0]
	s.s = s.s[1:]
	return out, true, nil
}

// collect reads a prefix index whose entries are ordered by their value
// (a goal, a scope) before the time: it gathers the suffixes of the page's
// range and sorts them; ok is false when the prefix holds more than
// registryCollect entries, in the range or not (another index serves
// better, and a page never reads more than that here).
func collect(ctx context.Context, t eventstore.Tables, q *regQuery, prefix []byte) (*sliceSource, bool, error) {
	start := q.start()
	var out [][]byte
	over, read := false, 0
	err := t.TableScan(ctx, registryTable, prefix, nil, false, func(k, _ []byte) (bool, error) {
		if read++; read > registryCollect {
			over = true
			return false, nil
		}
		i := bytes.IndexByte(k[len(prefix):], 0)
		if i < 0 {
			return true, nil
		}
		suf := k[len(prefix)+i+1:]
		if len(suf) < 10 || bytes.Compare(suf, start) < 0 || q.past(suf) {
			return true, nil
		}
		out = append(out, bytes.Clone(suf))
		return true, nil
	})
	if err != nil || over {
		return nil, false, err
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i], out[j]) < 0 })
	return &sliceSource{s: out}, true, nil
}

// plan picks the index that serves q: the most selective of parent,
// chain, scope, goal prefix, scope prefix, statuses, then every frame.
func (q *regQuery) plan(ctx context.Context, t eventstore.Tables) (source, error) {
	stream := func(p string) source { return newStream(ctx, t, q, []byte(p)) }
	switch {
	case q.parent != "":
		return stream("p" + q.scope + "\x00" + q.parent + "\x00"), nil
	case q.chain != "":
		return stream("h" + q.scope + "\x00" + q.chain + "\x00"), nil
	case q.scope != "":
		return stream("c" + q.scope + "\x00"), nil
	}
	if q.goalPrefix != "" {
		if s, ok, err := collect(ctx, t, q, []byte("g"+goalKey(q.goalPrefix))); err != nil || ok {
			return s, err
		}
	}
	if q.scopePrefix != "" {
		if s, ok, err := collect(ctx, t, q, []byte("c"+q.scopePrefix)); err != nil || ok {
			return s, err
		}
	}
	switch {
	case q.nStatus == 1:
		for st, on := range q.statuses {
			if on {
				return stream("s" + string([]byte{byte(st)})), nil
			}
		}
	case q.nStatus > 1:
		m := &mergeSource{}
		for st, on := range q.statuses {
			if on {
				m.srcs = append(m.srcs, stream("s"+string([]byte{byte(st)})))
			}
		}
		return m, nil
	}
	return stream("t"), nil
}

// queryRegistry answers q from the index: a page of rows and the suffix
// the next page starts after (nil at the end).
func queryRegistry(ctx context.Context, t eventstore.Tables, q *regQuery) ([]frames.RegistryRow, []byte, error) {
	src, err := q.plan(ctx, t)
	if err != nil {
		return nil, nil, err
	}
	var rows []frames.RegistryRow
	var last, examinedLast []byte // the suffixes of the last row returned and the last entry examined
	for examined := 0; ; examined++ {
		suf, ok, err := src.next()
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			return rows, nil, nil
		}
		if examined >= registryExamine {
			return rows, examinedLast, nil // the next page resumes at suf
		}
		examinedLast = suf
		v, found, err := t.TableGet(ctx, registryTable, append([]byte{'r'}, suf[8:]...))
		if err != nil {
			return nil, nil, err
		}
		if !found {
			continue // removed since the index entry was read
		}
		r, err := decodeRow(v)
		if err != nil {
			return nil, nil, err
		}
		if !q.matches(r) {
			continue
		}
		if len(rows) == q.limit {
			return rows, last, nil // one more matches: there is a next page
		}
		rows = append(rows, *r)
		last = suf
	}
}

// entryOf is the wire form of a row.
func entryOf(r *frames.RegistryRow) messages.FrameEntry {
	return messages.FrameEntry{Scope: r.Scope, FrameID: r.FrameID, ParentID: r.ParentID, Goal: r.Goal, Status: r.Status.String(),
		Depth: r.Depth, ChainRoot: r.ChainRoot, ContinuedFrom: r.ContinuedFrom, ContinuedTo: r.ContinuedTo, CreatedAt: r.CreatedAt,
		FinishedAt: r.FinishedAt, PushVersion: r.PushVersion, TokensUsed: r.TokensUsed, Cost: r.Cost, SuspendReason: string(r.SuspendReason)}
}
