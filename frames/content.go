package frames

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
)

// Large content once (DESIGN §9).
//
// A handle whose content is at least Config.ContentRefBytes long names it
// by its SHA-256 (ContextHandle.ContentRef). The event that adds it first
// carries the content, marked StoresContent (the hash is computed on
// Apply): that record stores it. Handles of the same frame that add the
// same content again carry the reference only, so the
// content is in the log once per frame that uses it (a tool call and its
// result with the same text: once). Every record the chain hashes names
// the content's hash or holds the content, so integrity holds, and an
// append still writes one record per operation. The scope counts the live
// handles that refer to each hash (State.Content); at zero the entry is
// forgotten: the content stays in the log for the events that named it,
// and is stored again if it is added again. Deduplication is per scope,
// since the map is: one scope never learns what another holds.
//
// The rule that keeps finished frames answerable: a handle refers only to
// content stored by its own frame's events, or stored again by a retention
// pass at or after its frame's push — always within its frame's span of the
// log, which retention keeps or removes with the frame. A live handle's
// content may be older than any record retention keeps: ApplyRetention
// stores it again at the head, in a content.stored event of the removal's
// own append, before the prefix goes.
//
// The snapshot holds the refs and the versions of their records, not the
// content (SnapshotView); the in-memory state keeps the content too, so
// packs need no I/O. A state loaded from a snapshot lists what it lacks
// (UnresolvedContent), read from those records (ContentOf), and is given
// it (ResolveContent) by the shell.

// DefaultContentRefBytes is the default of Config.ContentRefBytes: content
// of 1 KiB or more is stored once, by reference.
const DefaultContentRefBytes = 1 << 10

// StoredContent is the scope's record of one piece of content stored by
// reference: how many live handles refer to it, the version of the latest
// record that holds it and the frame whose event that is ("" for a
// content.stored of a retention pass). The content itself is kept in memory
// only (never in a snapshot).
type StoredContent struct {
	Refs    int64  `msgpack:"n"`
	Version int64  `msgpack:"v"`
	Frame   string `msgpack:"f,omitempty"`

	content string
}

// Content returns the content, or "" when it was not loaded yet (a state
// decoded from a snapshot, before ResolveContent).
func (c *StoredContent) Content() string { return c.content }

// ContentStored: content stored again under its SHA-256 (hex, lowercase) at
// the head of the log, by a retention pass about to remove the record that
// held it while live handles still refer to it. Meta.Frame is "".
type ContentStored struct {
	Meta    `msgpack:",inline"`
	Hash    string `msgpack:"h"`
	Content string `msgpack:"c"`
}

// EventType implements Event.
func (e *ContentStored) EventType() string { return TypeContentStored }

// ContentHash is the reference of content: its SHA-256 in lowercase hex.
func ContentHash(content string) string {
	sum := sha256.Sum256([]byte(content))
	return hex.EncodeToString(sum[:])
}

// checkStored checks a content.stored event on its own.
func checkStored(e *ContentStored) error {
	if e.Content == "" {
		return inconsistent("content %q stored empty", e.Hash)
	}
	if ContentHash(e.Content) != e.Hash {
		return inconsistent("content stored under %q has another hash", e.Hash)
	}
	return nil
}

func applyContentStored(s *State, e *ContentStored, version int64) error {
	if err := checkStored(e); err != nil {
		return err
	}
	if e.Frame != "" {
		if _, err := s.liveFrameFor(&e.Meta); err != nil {
			return err
		}
	}
	s.store(e.Hash, version, e.Frame, e.Content)
	return nil
}

// store records content held by the record at version.
func (s *State) store(hash string, version int64, frame, content string) {
	if s.Content == nil {
		s.Content = map[string]*StoredContent{}
	}
	if c := s.Content[hash]; c != nil {
		c.Version, c.Frame, c.content = version, frame, content
		return
	}
	s.Content[hash] = &StoredContent{Version: version, Frame: frame, content: content}
}

// reusable reports whether a handle of f may refer to the stored content c
// without storing it again: c was stored by f's own events, or stored again
// by a retention pass since f was pushed.
func reusable(c *StoredContent, f *Frame) bool {
	return c != nil && (c.Frame == f.ID || (c.Frame == "" && c.Version >= f.PushSeq))
}

// checkRef checks a handle of f that names its content by hash: one that
// stores it must carry content and no reference; one that refers to it
// must carry no content and find it stored by f (see reusable), or by a
// handle before it in the same event (here). Inline handles pass.
func (s *State) checkRef(f *Frame, h *ContextHandle, here map[string]bool) error {
	if h.StoresContent {
		if h.Content == "" || h.ContentRef != "" {
			return inconsistent("handle %q stores content %q with reference %q", h.ID, h.Content, h.ContentRef)
		}
		here[ContentHash(h.Content)] = true
		return nil
	}
	if h.ContentRef == "" {
		return nil
	}
	if h.Content != "" {
		return inconsistent("handle %q carries content and a reference", h.ID)
	}
	if c := s.Content[h.ContentRef]; !here[h.ContentRef] && !reusable(c, f) {
		if c == nil {
			return inconsistent("handle %q refers to content %q the scope does not store", h.ID, h.ContentRef)
		}
		return inconsistent("handle %q of %q refers to content %q stored by %q at %d", h.ID, f.ID, h.ContentRef, c.Frame, c.Version)
	}
	return nil
}

// ref counts one more live reference to hash and returns the content.
func (s *State) ref(hash string) string {
	c := s.Content[hash]
	c.Refs++
	return c.content
}

// unref drops the live references of handles; an entry no live handle
// refers to any more is forgotten.
func (s *State) unref(hs ...ContextHandle) {
	for i := range hs {
		if c := s.Content[hs[i].ContentRef]; hs[i].ContentRef != "" && c != nil {
			if c.Refs--; c.Refs <= 0 {
				delete(s.Content, hs[i].ContentRef)
			}
		}
	}
	if len(s.Content) == 0 {
		s.Content = nil
	}
}

// byRef names the content of each handle of f at or above the threshold by
// its hash; a handle whose content f already stores (see reusable), or
// that an earlier handle of the same event stores, carries the reference
// only.
func (d decider) byRef(f *Frame, hs ...*ContextHandle) {
	if d.cfg.ContentRefBytes <= 0 {
		return
	}
	var here map[string]bool
	for _, h := range hs {
		if h == nil || len(h.Content) < d.cfg.ContentRefBytes {
			continue
		}
		if here == nil {
			here = map[string]bool{}
		}
		hash := ContentHash(h.Content)
		if here[hash] || reusable(d.s.Content[hash], f) {
			h.Content, h.ContentRef = "", hash
		} else {
			h.StoresContent = true
		}
		here[hash] = true
	}
}

// restoreLive stores again, at the head, the content live handles refer to
// whose latest record is at or before through (a retention pass is about
// to remove it), in hash order.
func (d decider) restoreLive(through int64) ([]Event, error) {
	var hashes []string
	for h, c := range d.s.Content {
		if c.Refs > 0 && c.Version <= through {
			hashes = append(hashes, h)
		}
	}
	sort.Strings(hashes)
	evs := make([]Event, 0, len(hashes))
	for _, h := range hashes {
		c := d.s.Content[h]
		if c.content == "" {
			return nil, fmt.Errorf("%w: content %q was not loaded", ErrInvalidArgument, h)
		}
		evs = append(evs, &ContentStored{Meta: d.meta("", ReasonUserMessage), Hash: h, Content: c.content})
	}
	return evs, nil
}

// ContentNeed is content a state refers to and does not hold yet: the hash
// and the version of the content.stored record that holds it.
type ContentNeed struct {
	Hash    string
	Version int64
}

// UnresolvedContent lists the stored content the state refers to without
// holding it (after decoding a snapshot), in version order.
func (s *State) UnresolvedContent() []ContentNeed {
	var out []ContentNeed
	for h, c := range s.Content {
		if c.content == "" {
			out = append(out, ContentNeed{Hash: h, Version: c.Version})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out
}

// ResolveContent gives the state the content it lacks, by hash (read from
// the content.stored records UnresolvedContent names), and fills every
// live handle that refers to content without holding it (found may be
// empty: a content.stored replayed after a snapshot brings the content
// back to its entry, not to the handles the snapshot held). Content whose hash does not match, or that the
// state does not refer to, is an error matching ErrInconsistentEvent and
// changes nothing.
func (s *State) ResolveContent(found map[string]string) error {
	for h, content := range found {
		if s.Content[h] == nil {
			return inconsistent("content %q is not referred to", h)
		}
		if err := checkStored(&ContentStored{Hash: h, Content: content}); err != nil {
			return err
		}
	}
	for h, content := range found {
		s.Content[h].content = content
	}
	for _, f := range s.Frames {
		for i := range f.Handles {
			if hd := &f.Handles[i]; hd.ContentRef != "" && hd.Content == "" {
				if c := s.Content[hd.ContentRef]; c != nil {
					hd.Content = c.content
				}
			}
		}
	}
	return nil
}

// SnapshotView returns what a snapshot of s holds: s itself, except that
// handles that refer to their content carry the reference only. It shares
// everything else with s and must not be changed.
func (s *State) SnapshotView() *State {
	if len(s.Content) == 0 {
		return s
	}
	v := *s
	v.Frames = make(map[string]*Frame, len(s.Frames))
	for id, f := range s.Frames {
		v.Frames[id] = f
		for i := range f.Handles {
			if f.Handles[i].ContentRef != "" && f.Handles[i].Content != "" {
				fc := *f
				fc.handleIdx = nil
				fc.Handles = append([]ContextHandle(nil), f.Handles...)
				for j := range fc.Handles {
					if fc.Handles[j].ContentRef != "" {
						fc.Handles[j].Content = ""
					}
				}
				v.Frames[id] = &fc
				break
			}
		}
	}
	return &v
}

// WithoutStoredContent returns a clone of s that holds, like a state
// decoded from its snapshot, the references of stored content and not the
// content: what a snapshot of s is compared with.
func (s *State) WithoutStoredContent() *State {
	c := s.Clone()
	for _, sc := range c.Content {
		sc.content = ""
	}
	for _, f := range c.Frames {
		for i := range f.Handles {
			if f.Handles[i].ContentRef != "" {
				f.Handles[i].Content = ""
			}
		}
	}
	return c
}

// inlineRefs puts the content of handles back inline, from stored, which
// handles that store content add to (a finished frame rebuilt from its
// span of the log).
func inlineRefs(stored map[string]string, hs ...*ContextHandle) error {
	for _, h := range hs {
		if h == nil {
			continue
		}
		if h.StoresContent {
			if h.Content == "" || h.ContentRef != "" {
				return inconsistent("handle %q stores content %q with reference %q", h.ID, h.Content, h.ContentRef)
			}
			stored[ContentHash(h.Content)] = h.Content
			h.StoresContent = false
			continue
		}
		if h.ContentRef == "" {
			continue
		}
		if h.Content != "" {
			return inconsistent("handle %q carries content and a reference", h.ID)
		} else if c, ok := stored[h.ContentRef]; ok {
			h.Content = c
		} else {
			return inconsistent("handle %q refers to content %q not stored in its frame's span", h.ID, h.ContentRef)
		}
		h.ContentRef = ""
	}
	return nil
}

// ContentOf returns the content with hash that the event e stores: a
// handle it adds that carries it, or a content.stored.
func ContentOf(e Event, hash string) (string, bool) {
	var hs []*ContextHandle
	switch ev := e.(type) {
	case *ContentStored:
		return ev.Content, ev.Hash == hash && ev.Content != ""
	case *HandleAdded:
		hs = []*ContextHandle{&ev.Handle}
	case *ToolFinished:
		hs = []*ContextHandle{&ev.CallHandle, &ev.ResultHandle}
	case *FrameCompacted:
		hs = []*ContextHandle{ev.Summary}
	}
	for _, h := range hs {
		if h != nil && h.StoresContent && h.Content != "" && ContentHash(h.Content) == hash {
			return h.Content, true
		}
	}
	return "", false
}

// checkContentInvariants: every live handle that names content names an
// entry, and every entry counts exactly the live handles naming it.
func checkContentInvariants(s *State) error {
	refs := map[string]int64{}
	for _, f := range s.Frames {
		if !f.Status.Live() {
			continue
		}
		for _, h := range f.Handles {
			if h.ContentRef == "" {
				continue
			}
			c := s.Content[h.ContentRef]
			if c == nil {
				return fmt.Errorf("%w: handle %q of %q refers to content %q the scope does not store", ErrInvariantViolation, h.ID, f.ID, h.ContentRef)
			}
			// (Either may be missing in a state decoded from a snapshot and
			// not resolved yet.)
			if c.content != "" && h.Content != "" && h.Content != c.content {
				return fmt.Errorf("%w: handle %q of %q does not hold the content it refers to", ErrInvariantViolation, h.ID, f.ID)
			}
			refs[h.ContentRef]++
		}
	}
	for h, c := range s.Content {
		if c.Refs != refs[h] || c.Version < 1 || c.Version > s.Version {
			return fmt.Errorf("%w: content %q counts %d references at version %d, live handles hold %d", ErrInvariantViolation, h, c.Refs, c.Version, refs[h])
		}
	}
	return nil
}
