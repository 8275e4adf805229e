package eventstore

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/stateindex/stateindex/frames"
)

// Searching a continuation chain (SearchChain): the log, not the state.
//
// A chain's links are frames of one scope; everything they ever held is in
// the scope's log: every handle as it was added (compaction removes
// handles from the live context, never from the log), tool calls with
// their results, results, goals. The search reads the version range that
// covers the links (the per-stream index gives each link's first and last
// version), decodes the links' own events and matches their text. Content
// stored once by reference is resolved to its text from the record that
// stores it. History retention removed is read from its archive file when
// that is still there; what can be read from nowhere is named in the
// reply, never skipped silently.

// Hit kinds: what a hit's text is.
const (
	HitGoal       = "goal"        // a link's goal (frame.pushed, frame.updated)
	HitHandle     = "handle"      // a context handle's content
	HitToolCall   = "tool_call"   // a tool call's handle
	HitToolResult = "tool_result" // a tool result's handle
	HitSummary    = "summary"     // a summary handle: a compaction's, or one a continuation carries
	HitResultRef  = "result_ref"  // a result's reference
	HitResult     = "result"      // a result's summary
)

// Search limits.
const (
	DefaultSearchLimit = 50
	MaxSearchLimit     = 500
	MaxSearchQuery     = 4 << 10
	// SnippetContext is how many bytes a snippet shows on each side of a
	// match (fewer where a UTF-8 sequence would be cut).
	SnippetContext = 80
)

// SearchQuery is one page of a chain search.
type SearchQuery struct {
	Scope string
	// Links are the chain's links, root first (ResolveChain).
	Links []ChainLink
	Text  string
	Regex bool // Text is an RE2 expression
	Limit int  // 0: DefaultSearchLimit
	// Cursor is the Next of the page before ("" for the first).
	Cursor string
	// ArchiveDir, if set, is looked in (ARCHIVEDIR/SCOPE/FILE) before the
	// path a removal recorded.
	ArchiveDir string
}

// SearchHit is one match: the link, the handle or result (or the goal:
// ItemID ""), the version of the record, what the text is, and a snippet
// around the match.
type SearchHit struct {
	FrameID string `json:"frame_id" msgpack:"f"`
	ItemID  string `json:"item_id,omitempty" msgpack:"i,omitempty"`
	Version int64  `json:"version" msgpack:"v"`
	Kind    string `json:"kind" msgpack:"k"`
	Snippet string `json:"snippet" msgpack:"s"`

	item int // position within the record
}

// VersionRange is a range of a scope's versions (both included) the
// search could not read, and why.
type VersionRange struct {
	From    int64  `json:"from" msgpack:"fr"`
	Through int64  `json:"through" msgpack:"th"`
	Why     string `json:"why" msgpack:"w"`
}

// SearchResult is one page.
type SearchResult struct {
	Hits []SearchHit
	// Next is the cursor of the next page ("": none).
	Next       string
	Unsearched []VersionRange
	// From and Through are the version range the chain covers.
	From, Through int64
}

// matcher finds the first match in a text.
type matcher interface {
	find(s string) (start, end int, ok bool)
}

type substring string

func (m substring) find(s string) (int, int, bool) {
	i := strings.Index(s, string(m))
	if i < 0 {
		return 0, 0, false
	}
	return i, i + len(m), true
}

type rx struct{ *regexp.Regexp }

func (m rx) find(s string) (int, int, bool) {
	loc := m.FindStringIndex(s)
	if loc == nil {
		return 0, 0, false
	}
	return loc[0], loc[1], true
}

// Snippet returns s around s[start:end]: SnippetContext bytes either side,
// cut back to UTF-8 boundaries.
func Snippet(s string, start, end int) string {
	lo, hi := max(0, start-SnippetContext), min(len(s), end+SnippetContext)
	for lo < start && !utf8.RuneStart(s[lo]) {
		lo++
	}
	for hi > end && hi < len(s) && !utf8.RuneStart(s[hi]) {
		hi--
	}
	return s[lo:hi]
}

// cursor is a page's position: after item i of the record at version v.
type cursor struct {
	F string `json:"f"` // the search's fingerprint
	V int64  `json:"v"`
	I int    `json:"i"`
}

func fingerprint(q *SearchQuery) string {
	root := ""
	if len(q.Links) > 0 {
		root = q.Links[0].ID
	}
	sum := sha256.Sum256([]byte(q.Scope + "\x00" + root + "\x00" + strconv.FormatBool(q.Regex) + "\x00" + q.Text))
	return hex.EncodeToString(sum[:8])
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{frames.ErrInvalidArgument}, args...)...)
}

// Search reads one page of hits of q in the chain's links.
func Search(ctx context.Context, store Store, q SearchQuery) (SearchResult, error) {
	var res SearchResult
	switch {
	case q.Text == "":
		return res, invalid("empty search query")
	case len(q.Text) > MaxSearchQuery:
		return res, invalid("search query of %d bytes (at most %d)", len(q.Text), MaxSearchQuery)
	case !utf8.ValidString(q.Text):
		return res, invalid("search query is not valid UTF-8")
	case q.Limit < 0 || q.Limit > MaxSearchLimit:
		return res, invalid("search limit %d (1..%d; 0 for %d)", q.Limit, MaxSearchLimit, DefaultSearchLimit)
	case len(q.Links) == 0:
		return res, invalid("a search needs a chain's links")
	}
	limit := q.Limit
	if limit == 0 {
		limit = DefaultSearchLimit
	}
	var m matcher = substring(q.Text)
	if q.Regex {
		re, err := regexp.Compile(q.Text)
		if err != nil {
			return res, invalid("bad regular expression: %v", err)
		}
		m = rx{re}
	}
	fp := fingerprint(&q)
	var at cursor
	if q.Cursor != "" {
		raw, err := base64.RawURLEncoding.DecodeString(q.Cursor)
		if err != nil || json.Unmarshal(raw, &at) != nil || at.V < 1 || at.I < 0 {
			return res, invalid("undecodable search cursor")
		}
		if at.F != fp {
			return res, invalid("the search cursor belongs to another search (scope, chain or query)")
		}
	}

	s := &searcher{store: store, scope: q.Scope, m: m, links: map[string]bool{},
		matched: map[string]string{}, seen: map[string]bool{}, archiveDir: q.ArchiveDir}
	if !q.Regex {
		s.lit = []byte(q.Text)
	} else if prefix, _ := m.(rx).LiteralPrefix(); prefix != "" {
		// Every match begins with it, and text is stored as it is
		// (msgpack strings are their UTF-8 bytes).
		s.lit = []byte(prefix)
	}
	if err := s.plan(ctx, q.Links); err != nil {
		return res, err
	}
	res.From, res.Through = s.from, s.through
	if s.from == 0 {
		return res, nil // nothing of the chain is on record
	}
	start := s.from
	if q.Cursor != "" {
		if at.V < s.from || at.V > s.through {
			return res, invalid("stale search cursor: version %d is outside the chain's versions %d..%d", at.V, s.from, s.through)
		}
		start = at.V
	}
	s.after = at
	s.resumed = q.Cursor != ""
	s.limit = limit
	err := s.walk(ctx, start, s.through, s.visit)
	if err != nil && !errors.Is(err, errPageFull) {
		return res, err
	}
	stopped := errors.Is(err, errPageFull)
	if len(s.pending) > 0 && start > s.from {
		// Content stored before the page's first record.
		if err := s.walk(ctx, s.from, start-1, s.collect); err != nil {
			return res, err
		}
	}
	for _, p := range s.pending {
		if c, ok := s.matched[p.hash]; ok {
			if i, j, ok := m.find(c); ok {
				p.hit.Snippet = Snippet(c, i, j)
				s.hits = append(s.hits, p.hit)
			}
		} else if !s.seen[p.hash] {
			s.unsearched = append(s.unsearched, VersionRange{From: p.hit.Version, Through: p.hit.Version,
				Why: fmt.Sprintf("%s %s of %s refers to content %s no readable record holds", p.hit.Kind, p.hit.ItemID, p.hit.FrameID, p.hash)})
		}
	}
	sort.SliceStable(s.hits, func(i, j int) bool {
		a, b := &s.hits[i], &s.hits[j]
		return a.Version < b.Version || a.Version == b.Version && a.item < b.item
	})
	if len(s.hits) > limit || stopped {
		if len(s.hits) > limit {
			s.hits = s.hits[:limit]
		}
		last := s.hits[len(s.hits)-1]
		b, _ := json.Marshal(cursor{F: fp, V: last.Version, I: last.item})
		res.Next = base64.RawURLEncoding.EncodeToString(b)
	}
	res.Hits = s.hits
	res.Unsearched = mergeRanges(s.unsearched)
	return res, nil
}

type pendingRef struct {
	hit  SearchHit
	hash string
}

type searcher struct {
	store      Store
	scope      string
	m          matcher
	lit        []byte // the literal for the raw prefilter (substring search)
	links      map[string]bool
	archiveDir string

	from, through int64 // the chain's range
	base          Base
	removedFrom   int64 // the first removed version the chain may have (0: none)
	segs          []removedSeg

	after   cursor
	resumed bool
	limit   int

	hits       []SearchHit
	pending    []pendingRef
	matched    map[string]string // stored content that matches, by hash
	seen       map[string]bool   // stored content seen, by hash
	unsearched []VersionRange
}

// plan finds the version range the links cover and, if part of it was
// removed, where the removed records are.
func (s *searcher) plan(ctx context.Context, links []ChainLink) error {
	var err error
	if s.base, err = s.store.StreamBase(ctx, s.scope); err != nil {
		return err
	}
	for _, l := range links {
		s.links[l.ID] = true
		sp, ok := Span{}, false
		if !l.Gone {
			if sp, ok, err = s.store.Lookup(ctx, s.scope, FrameKey(l.ID)); err != nil {
				return err
			}
		}
		if ok {
			s.widen(max(sp.First, s.base.Version+1), sp.Last)
		}
		if s.base.Version > 0 && (!ok || sp.First <= s.base.Version) {
			lo := l.PushSeq
			if lo < 1 || lo > s.base.Version {
				lo = 1
			}
			if s.removedFrom == 0 || lo < s.removedFrom {
				s.removedFrom = lo
			}
		}
	}
	if s.removedFrom > 0 {
		s.widen(s.removedFrom, s.base.Version)
		if s.segs, err = removedSegments(ctx, s.store, s.scope, s.base, s.archiveDir); err != nil {
			return err
		}
	}
	return nil
}

func (s *searcher) widen(from, through int64) {
	if from > through {
		return
	}
	if s.from == 0 || from < s.from {
		s.from = from
	}
	if through > s.through {
		s.through = through
	}
}

// walk calls fn for each readable record of versions from..through: the
// removed ones from their archives (naming those in none), then the stored
// ones.
func (s *searcher) walk(ctx context.Context, from, through int64, fn func(Record) error) error {
	if from <= s.base.Version {
		for _, sg := range s.segs {
			lo, hi := max(from, sg.from, s.removedFrom), min(through, sg.through)
			if lo > hi {
				continue
			}
			if sg.path == "" {
				s.unsearched = append(s.unsearched, VersionRange{From: lo, Through: hi, Why: sg.why})
				continue
			}
			err := readArchiveRecords(sg.path, s.scope, func(r Record) error {
				if r.Version < lo || r.Version > hi {
					return nil
				}
				return fn(r)
			})
			if err != nil {
				return err
			}
		}
	}
	from = max(from, s.base.Version+1)
	if from > through {
		return nil
	}
	err := s.store.ReadStream(ctx, s.scope, from, func(r Record) error {
		if r.Version > through {
			return errStopRead
		}
		return fn(r)
	})
	if errors.Is(err, errStopRead) {
		return nil
	}
	return err
}

// errPageFull stops a walk once a page has its hits.
var errPageFull = errors.New("page full")

var (
	keyContentRef    = []byte("\xa2cr")
	keyStoresContent = []byte("\xa2sc")
)

// interesting says whether a record may hold text of the links.
func (s *searcher) interesting(r *Record) bool {
	switch r.Type {
	case frames.TypeContentStored:
		return true
	case frames.TypeFramePushed, frames.TypeFrameUpdated, frames.TypeHandleAdded, frames.TypeResultAdded,
		frames.TypeFrameCompacted, frames.TypeToolFinished:
	default:
		return false
	}
	f, _ := metaKeys(r.Data)
	if !s.links[string(f)] {
		return false
	}
	return s.lit == nil || bytes.Contains(r.Data, s.lit) || bytes.Contains(r.Data, keyContentRef) || bytes.Contains(r.Data, keyStoresContent)
}

// visit searches one record.
func (s *searcher) visit(r Record) error {
	if !s.interesting(&r) {
		return nil
	}
	ev, err := DecodeFrameEvent(r)
	if err != nil {
		return err
	}
	item := 0
	text := func(frame, id, kind, content string) {
		item++
		if content == "" || s.resumed && (r.Version < s.after.V || r.Version == s.after.V && item <= s.after.I) {
			return
		}
		if i, j, ok := s.m.find(content); ok {
			s.hits = append(s.hits, SearchHit{FrameID: frame, ItemID: id, Version: r.Version, Kind: kind, Snippet: Snippet(content, i, j), item: item})
		}
	}
	handle := func(frame, kind string, h *frames.ContextHandle) {
		switch {
		case h == nil:
		case h.StoresContent:
			s.learn(h.Content)
			text(frame, h.ID, kind, h.Content)
		case h.ContentRef != "" && h.Content == "":
			item++
			if s.resumed && (r.Version < s.after.V || r.Version == s.after.V && item <= s.after.I) {
				return
			}
			hit := SearchHit{FrameID: frame, ItemID: h.ID, Version: r.Version, Kind: kind, item: item}
			if c, ok := s.matched[h.ContentRef]; ok {
				if i, j, ok := s.m.find(c); ok {
					hit.Snippet = Snippet(c, i, j)
					s.hits = append(s.hits, hit)
				}
			} else if !s.seen[h.ContentRef] {
				s.pending = append(s.pending, pendingRef{hit: hit, hash: h.ContentRef})
			}
		default:
			text(frame, h.ID, kind, h.Content)
		}
	}
	switch e := ev.(type) {
	case *frames.ContentStored:
		s.storeHashed(e.Hash, e.Content)
	case *frames.FramePushed:
		text(e.Frame, "", HitGoal, e.Goal)
	case *frames.FrameUpdated:
		if e.Goal != nil {
			text(e.Frame, "", HitGoal, *e.Goal)
		}
	case *frames.HandleAdded:
		kind := HitHandle
		if e.Handle.Kind == frames.SummaryKind {
			kind = HitSummary
		}
		handle(e.Frame, kind, &e.Handle)
	case *frames.ToolFinished:
		handle(e.Frame, HitToolCall, &e.CallHandle)
		handle(e.Frame, HitToolResult, &e.ResultHandle)
	case *frames.FrameCompacted:
		handle(e.Frame, HitSummary, e.Summary)
	case *frames.ResultAdded:
		text(e.Frame, e.Result.ID, HitResultRef, e.Result.Ref)
		text(e.Frame, e.Result.ID, HitResult, e.Result.Summary)
	}
	if len(s.hits) > s.limit && len(s.pending) == 0 {
		return errPageFull
	}
	return nil
}

// collect only learns stored content (the records before a page).
func (s *searcher) collect(r Record) error {
	if r.Type != frames.TypeContentStored && !bytes.Contains(r.Data, keyStoresContent) {
		return nil
	}
	if !s.interesting(&r) {
		return nil
	}
	ev, err := DecodeFrameEvent(r)
	if err != nil {
		return err
	}
	if e, ok := ev.(*frames.ContentStored); ok {
		s.storeHashed(e.Hash, e.Content)
		return nil
	}
	var hs []*frames.ContextHandle
	switch e := ev.(type) {
	case *frames.HandleAdded:
		hs = []*frames.ContextHandle{&e.Handle}
	case *frames.ToolFinished:
		hs = []*frames.ContextHandle{&e.CallHandle, &e.ResultHandle}
	case *frames.FrameCompacted:
		hs = []*frames.ContextHandle{e.Summary}
	}
	for _, h := range hs {
		if h != nil && h.StoresContent {
			s.learn(h.Content)
		}
	}
	return nil
}

func (s *searcher) learn(content string) { s.storeHashed(frames.ContentHash(content), content) }

func (s *searcher) storeHashed(hash, content string) {
	s.seen[hash] = true
	if _, _, ok := s.m.find(content); ok {
		s.matched[hash] = content
	}
}

// mergeRanges sorts ranges and merges those that touch and say the same.
func mergeRanges(rs []VersionRange) []VersionRange {
	if len(rs) == 0 {
		return nil
	}
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].From < rs[j].From })
	out := []VersionRange{rs[0]}
	for _, r := range rs[1:] {
		l := &out[len(out)-1]
		if r.Why == l.Why && r.From <= l.Through+1 {
			l.Through = max(l.Through, r.Through)
			continue
		}
		out = append(out, r)
	}
	return out
}

// removedSeg is a removed part of a scope's history: an archive file, or
// versions no readable file holds (path "", why says so).
type removedSeg struct {
	from, through int64
	path          string
	why           string
}

// removedSegments walks back from the scope's base through the removals
// its records (stored, then archived) name, as export does: each removal
// through cur names the archive that holds its records or deleted them.
func removedSegments(ctx context.Context, store Store, scope string, base Base, archiveDir string) ([]removedSeg, error) {
	removals := map[int64]*frames.RetentionApplied{}
	note := func(r Record) error {
		if r.Type != frames.TypeRetention {
			return nil
		}
		ev, err := DecodeFrameEvent(r)
		if err != nil {
			return err
		}
		ra := ev.(*frames.RetentionApplied)
		if _, ok := removals[ra.Through]; !ok {
			removals[ra.Through] = ra
		}
		return nil
	}
	if err := store.ReadStream(ctx, scope, base.Version+1, note); err != nil {
		return nil, err
	}
	var segs []removedSeg // newest first
	for cur := base.Version; cur > 0; {
		rm, ok := removals[cur]
		if !ok {
			segs = append(segs, removedSeg{from: 1, through: cur, why: fmt.Sprintf("removed, and no record this search can read says where versions through %d went", cur)})
			break
		}
		lo := int64(0)
		for t := range removals {
			if t < cur && t > lo {
				lo = t
			}
		}
		if rm.Archive == "" {
			segs = append(segs, removedSeg{from: lo + 1, through: cur, why: "deleted by retention without an archive"})
			cur = lo
			continue
		}
		from, ok := archiveFrom(rm.Archive)
		if !ok || from > cur {
			from = lo + 1
		}
		path := findArchiveFile(rm.Archive, scope, archiveDir)
		if path == "" {
			segs = append(segs, removedSeg{from: from, through: cur, why: fmt.Sprintf("archived to %s, which is no longer there", rm.Archive)})
			cur = from - 1
			continue
		}
		sg := removedSeg{from: from, through: cur, path: path}
		if err := readArchiveRecords(path, scope, note); err != nil {
			return nil, err
		}
		segs = append(segs, sg)
		cur = from - 1
	}
	for i, j := 0, len(segs)-1; i < j; i, j = i+1, j-1 {
		segs[i], segs[j] = segs[j], segs[i]
	}
	return segs, nil
}

// archiveFrom reads the first version from an archive's name (F-T.jsonl).
func archiveFrom(path string) (int64, bool) {
	name := strings.TrimSuffix(filepath.Base(path), ".jsonl")
	f, _, ok := strings.Cut(name, "-")
	v, err := strconv.ParseInt(f, 10, 64)
	return v, ok && err == nil && v >= 1
}

// findArchiveFile returns where an archive is: ARCHIVEDIR/SCOPE/FILE, or
// where its removal said; "" if in neither.
func findArchiveFile(recorded, scope, archiveDir string) string {
	if archiveDir != "" {
		p := filepath.Join(archiveDir, scope, filepath.Base(recorded))
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if _, err := os.Stat(recorded); err == nil {
		return recorded
	}
	return ""
}

// readArchiveRecords calls fn with each record of an archive file, in
// order, checking each record's bytes against its hash and the chain from
// the header's prev hash (checkChainedLines, as VerifyArchive does without
// a key); damage is an error matching ErrCorrupt naming the line.
func readArchiveRecords(path, scope string, fn func(Record) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	bad := func(line int, format string, args ...any) error {
		return fmt.Errorf("%w: %s line %d: %s", ErrCorrupt, path, line, fmt.Sprintf(format, args...))
	}
	if !sc.Scan() {
		return bad(1, "no header")
	}
	var h archiveHeader
	if err := json.Unmarshal(sc.Bytes(), &h); err != nil || h.Format != ArchiveFormat || h.Stream != scope {
		return bad(1, "not an archive of %q", scope)
	}
	prev, err := parseHash(h.Prev)
	if err != nil {
		return bad(1, "prev hash: %v", err)
	}
	_, err = checkChainedLines(sc, scope, h.From, prev, nil, "archive", bad, fn)
	return err
}
