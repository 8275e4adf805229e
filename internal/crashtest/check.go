package crashtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/internal/verify"
	"github.com/stateindex/stateindex/messages"
)

// Record is what the side file says about one request id.
type Record struct {
	Scope, ID, Op string
	b64           string
	Acked         bool  // a success was recorded
	Version       int64 // the reply's version
	Wrote         bool  // the success appended events
	Refused       string
}

// Request decodes the request as it was sent.
func (r *Record) Request() (messages.Request, error) { return decodeRequest(r.Op, r.b64) }

// Side is a parsed side file.
type Side struct {
	ByID   map[string]*Record
	order  []string // ids in the order first sent
	tokens map[string]map[string]string
	links  []Link
}

// Link is a chain link an acknowledged reply reported: From continued
// (or, Resumed, finished and resumed) by To, in Scope, by request ID.
type Link struct {
	Scope, ID, From, To string
	Resumed             bool
}

// Links returns the chain links acknowledged replies reported, in the
// order acknowledged.
func (s *Side) Links() []Link { return s.links }

// ParseSide reads a side file; a missing file is an empty one. A last line
// without its newline (cut by a kill) is ignored.
func ParseSide(path string) (*Side, error) {
	s := &Side{ByID: map[string]*Record{}, tokens: map[string]map[string]string{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, err
	}
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[:i+1]
	} else {
		b = nil
	}
	for n, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 5 {
			return nil, fmt.Errorf("%s:%d: malformed line %q", path, n+1, line)
		}
		id := f[2]
		r := s.ByID[id]
		if r == nil {
			r = &Record{Scope: f[1], ID: id, Op: f[3]}
			s.ByID[id] = r
			s.order = append(s.order, id)
		}
		switch f[0] {
		case "I":
			r.b64 = f[4]
		case "A":
			if len(f) < 6 {
				return nil, fmt.Errorf("%s:%d: malformed line %q", path, n+1, line)
			}
			r.Acked, r.Refused = true, ""
			r.Version, _ = strconv.ParseInt(f[4], 10, 64)
			r.Wrote = f[5] == "1"
			for _, x := range f[6:] {
				for _, kind := range []string{"cont=", "resumed="} {
					if t, ok := strings.CutPrefix(x, kind); ok {
						from, to, _ := strings.Cut(t, ":")
						s.links = append(s.links, Link{Scope: r.Scope, ID: id, From: from, To: to, Resumed: kind == "resumed="})
					}
				}
				if t, ok := strings.CutPrefix(x, "tok="); ok {
					frame, tok, _ := strings.Cut(t, ":")
					if s.tokens[r.Scope] == nil {
						s.tokens[r.Scope] = map[string]string{}
					}
					s.tokens[r.Scope][frame] = tok
				}
			}
		case "R":
			if !r.Acked {
				r.Refused = f[4]
			}
		default:
			return nil, fmt.Errorf("%s:%d: malformed line %q", path, n+1, line)
		}
	}
	return s, nil
}

// Tokens returns the suspension tokens recorded, by scope and frame.
func (s *Side) Tokens() map[string]map[string]string { return s.tokens }

// InFlight returns the requests sent and never answered, in the order sent:
// those a kill interrupted.
func (s *Side) InFlight() []*Record {
	var out []*Record
	for _, id := range s.order {
		if r := s.ByID[id]; !r.Acked && r.Refused == "" && r.b64 != "" {
			out = append(out, r)
		}
	}
	return out
}

// Stats is what one check found.
type Stats struct {
	Acked             int // acknowledged writes, each found in the log where its reply said
	Lost              int // acknowledged writes missing: must be 0
	InFlightCommitted int // unacknowledged requests found whole in the log
	InFlightAbsent    int // unacknowledged requests absent from the log
	Requests, Events  int
	Streams           int
	Snapshots         int
	Signatures        int
	// What reopening found in the journal the kill left: acknowledged
	// records bbolt did not have yet (replayed into it before anything
	// was served), and the bytes of a torn final frame that were cut.
	Replayed  int
	TornBytes int64
	// Retention (the child's passes): acknowledged writes whose records
	// were removed and found, whole, in the archives; resends the server
	// refused as older than the idempotency horizon (in doubt: committed
	// before the kill or not, never twice); the removals the scopes record
	// (finished and not), the records they removed from the store; the
	// archive files verified, those no record names (a kill between an
	// archive's write and the removal's record) and those a kill left half
	// written; frames GetFrame answered as removed, and frames whose first
	// records were removed (answered from their record, without handles).
	AckedArchived    int
	Compactions      int // acknowledged CompactContext requests among Acked
	ExpiredResends   int // of the whole side file; ExpiredCommitted of them had committed before their kill
	ExpiredCommitted int
	Removals         int
	RemovedRecords   int64
	Archives         int
	OrphanArchives   int
	PartialArchives  int
	FramesRemoved    int
	FramesCut        int
	// Unfinished are the removals recorded and not carried out yet (a kill
	// between the record and the store's removal), by scope: verify
	// warned about each. Bases are the scopes' bases.
	Unfinished map[string]int64
	Bases      map[string]int64
	Orphans    map[string]int // orphan archives by scope
	Warnings   []string
	// Chains: the chains recovered and their links, each read with
	// GetChain from every link; ContinuedRefusals the mutations naming a
	// link before its head refused with frame_continued naming it;
	// LinksAcked the links acknowledged replies reported, each found.
	Chains, ChainLinks, ContinuedRefusals, LinksAcked int
	// RemovedLinks are finished links whose records retention removed,
	// each answered by GetChain, with its tombstone.
	RemovedLinks int
	// Continuations and Resumes are the acknowledged ContinueFrame and
	// ResumeChain requests, AutoContinued the acknowledged writes that
	// continued their frame automatically (all among Acked).
	Continuations, Resumes, AutoContinued int
	// Sub is the durable subscriber's check (zero when the child ran
	// none).
	Sub SubStats
	// Ledger is the spend ledger's check (zero when the child ran no
	// ledger workload).
	Ledger LedgerStats
	// State is the scope state's check (kv.go).
	State StateStats
	// Partial is the partial-output check (partial.go).
	Partial PartialStats
}

func (s Stats) String() string {
	return fmt.Sprintf("%d acknowledged writes present (%d lost), %d requests / %d events in %d scopes, "+
		"%d snapshots equal to their replay, %d checkpoint signatures verified; "+
		"%d chains (%d links) read from every link, %d acknowledged links found, %d mutations of earlier links refused",
		s.Acked, s.Lost, s.Requests, s.Events, s.Streams, s.Snapshots, s.Signatures, s.Chains, s.ChainLinks, s.LinksAcked, s.ContinuedRefusals)
}

// group is one request's events in the log.
type group struct {
	scope       string
	base        int64 // the scope's base: at or below it, the events are archived
	id          string
	first, last int64
	events      []frames.Event
	pre         pre
}

// Check verifies the crash test directory after a kill:
//
//   - the store reopens as the next process's would, replaying the
//     journal's records bbolt lacks (Stats.Replayed, Stats.TornBytes);
//   - stateindex verify's checks pass: every hash chain, the global index,
//     a replay of every stream with the invariants, every snapshot equal to
//     the replay it covers, every checkpoint signature;
//   - every acknowledged write is in the log, ending at the version its
//     reply named;
//   - every request in the log was sent (no phantom write), none that was
//     refused is there, and each is whole: the events a request makes are
//     all there or none is (a pop with all its cascade and the parent's
//     limit suspension, a usage with its suspension);
//   - the state LoadState rebuilds (snapshot plus tail) equals a full
//     replay, and ResumeActor's reply, and every frame GetFrame returns,
//     equal that replay;
//   - the spend ledger's settlements are neither lost nor doubled, before
//     and after a server on the file delivers its outbox (checkLedger).
//
// The ResumeActor requests it sends are recorded in the side file like the
// child's. cycle names them.
func Check(ctx context.Context, dir string, cycle int) (Stats, error) {
	var st Stats
	path := filepath.Join(dir, DataFile)
	// Reopen as the next process would: the journal the kill left is
	// replayed into bbolt here, and what that took is recorded.
	first, err := eventstore.Open(path, &eventstore.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return st, fmt.Errorf("reopening after the kill: %w", err)
	}
	ri := first.Replay()
	st.Replayed, st.TornBytes = ri.Records, ri.TornBytes
	if err := first.Close(); err != nil {
		return st, err
	}
	var problems []string
	vs, err := verify.File(ctx, path, verify.Options{PublicKey: PublicKey()}, func(p verify.Problem) {
		problems = append(problems, p.String())
	})
	if err != nil {
		return st, err
	}
	if len(problems) > 0 {
		return st, fmt.Errorf("verify found %d problem(s):\n  %s", len(problems), strings.Join(problems, "\n  "))
	}
	st.Snapshots, st.Signatures, st.Warnings = int(vs.Snapshots), int(vs.SignaturesVerified), vs.Warnings
	st.Unfinished, st.Bases, st.Orphans = map[string]int64{}, map[string]int64{}, map[string]int{}

	side, err := ParseSide(filepath.Join(dir, SideFile))
	if err != nil {
		return st, err
	}
	store, err := eventstore.Open(path, nil)
	if err != nil {
		return st, err
	}
	defer store.Close()

	groups := map[string]*group{}
	replayed := map[string]*frames.State{} // every frame, finished ones too
	live := map[string]*frames.State{}     // the live projection the server keeps
	spans := map[string]map[string]eventstore.Span{}
	subRef := map[uint64]SubRef{} // the events the subscription's filter matches, archived ones too
	lf := newLedgerFold()         // the spend ledger's parent scope, event by event
	sf := newStateFold(side)      // the scopes' key-value state, from the requests
	var streams []string
	if err := store.Streams(ctx, func(i eventstore.StreamInfo) error { streams = append(streams, i.Stream); return nil }); err != nil {
		return st, err
	}
	st.Streams = len(streams)
	var errs []string
	fail := func(format string, args ...any) {
		if len(errs) < 50 {
			errs = append(errs, fmt.Sprintf(format, args...))
		}
	}
	for _, name := range streams {
		h, err := scopeHistory(ctx, dir, store, name)
		if err != nil {
			return st, fmt.Errorf("scope %q: %w", name, err)
		}
		st.Bases[name] = h.base.Version
		st.RemovedRecords += h.base.Version
		st.Removals += len(h.removals)
		st.Archives += len(h.archives)
		st.OrphanArchives += h.orphans
		st.Orphans[name] = h.orphans
		st.PartialArchives += h.temps
		if h.unfinished > 0 {
			st.Unfinished[name] = h.unfinished
			warned := fmt.Sprintf("stream %q: a removal through version %d is recorded", name, h.unfinished)
			if !slices.ContainsFunc(vs.Warnings, func(w string) bool { return strings.HasPrefix(w, warned) }) {
				return st, fmt.Errorf("scope %q: a removal through %d is recorded and not carried out (base %d), and verify did not warn about it", name, h.unfinished, h.base.Version)
			}
		}
		fs := map[string]eventstore.Span{}
		spans[name] = fs
		state := frames.NewState(name, 0)
		state.KeepFinished = true
		lstate := frames.NewState(name, 0)
		pf := newPartialFold(fail)
		var g *group
		finish := func() {
			if g != nil {
				checkWhole(g, side, state, fail)
			}
		}
		// The whole history: the archived records, then the stored ones.
		visit := func(r eventstore.Record) error {
			ev, err := eventstore.DecodeFrameEvent(r)
			if err != nil {
				return err
			}
			if f := ev.EventMeta().Frame; f != "" {
				sp, ok := fs[f]
				if !ok {
					sp.First = r.Version
				}
				sp.Last = r.Version
				fs[f] = sp
			}
			id := ev.EventMeta().RequestID
			if g == nil || g.id != id {
				finish()
				key := id
				if groups[id] != nil {
					if !outboxRequest(id) {
						fail("request %s appears twice in the log (scope %q versions %d and %d)", id, name, groups[id].first, r.Version)
					}
					// The outbox's ids carry no time: one the request
					// horizon forgot is applied again (a settlement
					// charges what it did not before: checkLedger).
					key = fmt.Sprintf("%s@%s:%d", id, name, r.Version)
				}
				g = &group{scope: name, id: id, first: r.Version, base: h.base.Version}
				groups[key] = g
				st.Requests++
				recordPre(g, side, state)
			}
			if err := frames.Apply(state, ev); err != nil {
				return fmt.Errorf("stream %q version %d: %w", name, r.Version, err)
			}
			if err := frames.Apply(lstate, ev); err != nil {
				return fmt.Errorf("stream %q version %d (live projection): %w", name, r.Version, err)
			}
			if name == LedgerParent {
				lf.apply(state, ev, r.Version)
			}
			sf.apply(name, ev, r.Version)
			pf.apply(side, ev, r.Version)
			g.last = r.Version
			g.events = append(g.events, ev)
			st.Events++
			return nil
		}
		for _, r := range h.records {
			if err := visit(r); err != nil {
				return st, err
			}
			if SubFilter.Matches(name, r.Type) {
				if o, ok := subRef[r.Seq]; ok {
					return st, fmt.Errorf("seq %d is both scope %q version %d and scope %q version %d", r.Seq, o.Scope, o.Version, name, r.Version)
				}
				subRef[r.Seq] = SubRef{Scope: name, Version: r.Version, Removed: r.Version <= h.base.Version}
			}
		}
		finish()
		replayed[name], live[name] = state, lstate
		outputs, chunks := pf.check(side, name, lstate)
		st.Partial.Outputs += outputs
		st.Partial.OutputChunks += chunks
	}

	// Every acknowledged write is there; nothing refused or unsent is.
	for _, id := range side.order {
		r := side.ByID[id]
		g := groups[id]
		switch {
		case r.Acked && r.Wrote:
			switch {
			case g == nil:
				st.Lost++
				fail("LOST: acknowledged %s %s (scope %q, reply version %d) is not in the log", r.Op, id, r.Scope, r.Version)
			case g.scope != r.Scope:
				st.Lost++
				fail("acknowledged %s %s of scope %q is in scope %q", r.Op, id, r.Scope, g.scope)
			case r.Op == "ResumeActor" && g.last > r.Version, r.Op != "ResumeActor" && g.last != r.Version:
				st.Lost++
				fail("acknowledged %s %s replied version %d, but its events end at version %d", r.Op, id, r.Version, g.last)
			default:
				st.Acked++
				switch {
				case r.Op == "CompactContext":
					st.Compactions++
				case r.Op == "ContinueFrame":
					st.Continuations++
				case r.Op == "ResumeChain":
					st.Resumes++
				case r.Op == "RecordPartialOutput":
					st.Partial.Chunks++
				case len(g.events) > 1 && (r.Op == "AddContextHandle" || r.Op == "FinishToolCall"):
					st.AutoContinued++
				}
				if g.last <= g.base {
					st.AckedArchived++
				}
			}
		case r.Acked:
			if g != nil {
				fail("%s %s was answered as writing nothing, yet its events are at versions %d..%d", r.Op, id, g.first, g.last)
			}
		case r.Refused == string(messages.CodeRequestExpired):
			// A resend after the horizon: the first send may or may not
			// have committed before the kill; it was not applied again
			// (the log holds the request at most once: checked above).
			st.ExpiredResends++
			if g != nil {
				st.ExpiredCommitted++
			}
		case r.Refused != "":
			if g != nil {
				fail("%s %s was refused (%s), yet its events are at versions %d..%d", r.Op, id, r.Refused, g.first, g.last)
			}
		case g != nil:
			st.InFlightCommitted++
			if r.Op == "RecordPartialOutput" {
				st.Partial.InFlightCommitted++
			}
		default:
			st.InFlightAbsent++
			if r.Op == "RecordPartialOutput" {
				st.Partial.InFlightAbsent++
			}
		}
	}
	for _, g := range groups {
		id := g.id
		if outboxRequest(id) {
			checkOutboxGroup(g, fail)
			continue
		}
		if strings.HasPrefix(id, retentionRequest) {
			// The retention pass's own request: one scope.retention_applied.
			if _, ok := g.events[0].(*frames.RetentionApplied); !ok || len(g.events) != 1 {
				fail("retention request %q (scope %q versions %d..%d) wrote %d events, not one scope.retention_applied", id, g.scope, g.first, g.last, len(g.events))
			}
			continue
		}
		if strings.HasPrefix(id, actors.StateExpiryRequestPrefix) {
			// The state expirer's own request: one state.expired.
			if _, ok := g.events[0].(*frames.StateExpired); !ok || len(g.events) != 1 {
				fail("state expiry request %q (scope %q versions %d..%d) wrote %d events, not one state.expired", id, g.scope, g.first, g.last, len(g.events))
			}
			continue
		}
		if side.ByID[id] == nil {
			fail("PHANTOM: request %q (scope %q versions %d..%d) was never sent", id, g.scope, g.first, g.last)
		}
	}
	if len(errs) > 0 {
		return st, errors.New(strings.Join(errs, "\n"))
	}

	// Recovery equals replay.
	for _, name := range streams {
		loaded, _, err := actors.LoadState(ctx, store, name, actors.Recall{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			return st, fmt.Errorf("LoadState(%q): %w", name, err)
		}
		if d := verify.DiffStates(loaded.Clone(), live[name].Clone()); d != "" {
			return st, fmt.Errorf("scope %q: LoadState (snapshot plus tail) differs from a full replay: %s", name, d)
		}
	}
	// The durable subscriber's deliveries and acks (before checkResume
	// writes to the log).
	if st.Sub, err = checkSubscription(ctx, dir, store, subRef, cycle); err != nil {
		return st, err
	}
	if err := checkResume(ctx, dir, store, streams, replayed, live, spans, &st, cycle); err != nil {
		return st, err
	}
	if st.State, err = checkState(ctx, store, sf, live); err != nil {
		return st, fmt.Errorf("cycle %d: %w", cycle, err)
	}
	// Last: it delivers the outbox the kill left, writing to the log.
	if st.Ledger, err = checkLedger(ctx, store, side, replayed, lf); err != nil {
		return st, fmt.Errorf("cycle %d: %w", cycle, err)
	}
	return st, nil
}

// retentionRequest starts the request ids of a retention pass's removals.
const retentionRequest = "retention:"

// pre is what a multi-event request's check needs from the state before it.
type pre struct {
	parentID        string
	parentSuspended bool
	liveBelow       int // live descendants of the popped frame
}

func recordPre(g *group, side *Side, s *frames.State) {
	r := side.ByID[g.id]
	if r == nil || r.Op != "PopFrame" {
		return
	}
	req, err := r.Request()
	if err != nil {
		return
	}
	f := s.Frame(req.(*messages.PopFrame).FrameID)
	if f == nil {
		return
	}
	p := pre{parentID: f.ParentID}
	if pf := s.Frame(f.ParentID); pf != nil {
		p.parentSuspended = pf.Status == frames.StatusSuspended
	}
	var count func(*frames.Frame)
	count = func(x *frames.Frame) {
		for _, c := range s.LiveChildren(x) {
			p.liveBelow++
			count(c)
		}
	}
	count(f)
	g.pre = p
}

// checkWhole checks that a request's events are all there: single-event
// requests trivially; a pop has one frame.popped per live descendant plus
// the frame, and then its parent is suspended or within its limits; a
// usage record leaves its frame suspended or within its limits.
func checkWhole(g *group, side *Side, s *frames.State, fail func(string, ...any)) {
	r := side.ByID[g.id]
	if r == nil || r.b64 == "" {
		return // reported as a phantom
	}
	req, err := r.Request()
	if err != nil {
		fail("side file: %v", err)
		return
	}
	n := len(g.events)
	where := fmt.Sprintf("%s %s (scope %q versions %d..%d)", r.Op, g.id, g.scope, g.first, g.last)
	switch q := req.(type) {
	case *messages.PopFrame:
		p := g.pre
		popped := 0
		for _, e := range g.events {
			if _, ok := e.(*frames.FramePopped); ok {
				popped++
			}
		}
		f := s.Frame(q.FrameID)
		if popped != p.liveBelow+1 || f == nil || f.Status.Live() {
			fail("PARTIAL: %s popped %d frames, want %d (the frame and its %d live descendants)", where, popped, p.liveBelow+1, p.liveBelow)
		}
		if pf := s.Frame(p.parentID); pf != nil && !p.parentSuspended && pf.Status != frames.StatusSuspended && pf.Limits.Check(pf.Cost) != nil {
			fail("PARTIAL: %s left parent %q over its limits and not suspended", where, pf.ID)
		}
	case *messages.RecordUsage:
		f := s.Frame(q.FrameID)
		if f == nil || n > 2 || (f.Status != frames.StatusSuspended && f.Limits.Check(f.Cost) != nil) {
			fail("PARTIAL: %s left frame %q over its limits and not suspended (%d events)", where, q.FrameID, n)
		}
	case *messages.ContinueFrame:
		checkContinuation(where, q.FrameID, g.events, s, fail)
	case *messages.RecordPartialOutput:
		checkChunk(where, q, g.events, fail)
	case *messages.ReserveSpend:
		// The frame's expired reservations returned, then the new one.
		if _, ok := g.events[n-1].(*frames.SpendReserved); !ok || n > 2 {
			fail("PARTIAL: %s is %d events, not a spend.reserved after the expired ones' spend.returned", where, n)
		} else if _, ok := g.events[0].(*frames.SpendReturned); n == 2 && !ok {
			fail("PARTIAL: %s starts with %s, not spend.returned", where, g.events[0].EventType())
		}
	case *messages.AddContextHandle, *messages.FinishToolCall:
		// The write, then, if it reached the threshold, the frame's
		// automatic continuation, whole.
		if n > 1 {
			checkContinuation(where, g.events[0].EventMeta().Frame, g.events[1:], s, fail)
		}
	case *messages.ResumeChain:
		push, ok := g.events[0].(*frames.FramePushed)
		if !ok || push.ContinuedFrom == "" || n < 3 {
			fail("PARTIAL: %s is %d events, not a linked frame.pushed, its segment and the user's message", where, n)
			return
		}
		for _, e := range g.events[1:] {
			if h, ok := e.(*frames.HandleAdded); !ok || h.Frame != push.Frame {
				fail("PARTIAL: %s: %s among the resumed link %q's handles", where, e.EventType(), push.Frame)
				return
			}
		}
		last := g.events[n-1].(*frames.HandleAdded)
		if last.Handle.Content != q.Message || last.Handle.Role != frames.RoleUser {
			fail("%s: the resumed link's last handle is %q (%s), not the user's message", where, last.Handle.Content, last.Handle.Role)
		}
		from := s.Frame(push.ContinuedFrom)
		if from == nil || from.ContinuedTo != push.Frame || s.ChainOf(push.Frame) != s.ChainOf(push.ContinuedFrom) || s.ChainOf(push.Frame) == "" {
			fail("PARTIAL: %s: the resumed head %q does not lead to the new link %q in one chain", where, push.ContinuedFrom, push.Frame)
		}
	default:
		if n != 1 {
			fail("%s has %d events, want 1", where, n)
		}
	}
}

// checkContinuation checks the events of the continuation of the frame
// from, whole: its frame.popped (continued, naming the new link), the new
// link's frame.pushed (continuing from, in from's chain) and the handles
// it carries (the segment first); and, in s just after them, from
// continued and the new link in its chain.
func checkContinuation(where, from string, evs []frames.Event, s *frames.State, fail func(string, ...any)) {
	if len(evs) < 3 {
		fail("PARTIAL: %s: a continuation of %d events", where, len(evs))
		return
	}
	pop, ok1 := evs[0].(*frames.FramePopped)
	push, ok2 := evs[1].(*frames.FramePushed)
	if !ok1 || !ok2 || pop.Frame != from || pop.Status != frames.StatusContinued || pop.ContinuedTo != push.Frame || push.ContinuedFrom != from {
		fail("PARTIAL: %s: the continuation of %q is not a frame.popped (continued) then the new link's frame.pushed", where, from)
		return
	}
	for _, e := range evs[2:] {
		if h, ok := e.(*frames.HandleAdded); !ok || h.Frame != push.Frame {
			fail("PARTIAL: %s: %s among the new link %q's handles", where, e.EventType(), push.Frame)
			return
		}
	}
	if h := evs[2].(*frames.HandleAdded); h.Handle.Kind != frames.ContinuationKind {
		fail("%s: the new link %q starts with a %q handle, not its continuation segment", where, push.Frame, h.Handle.Kind)
	}
	f, next := s.Frame(from), s.Frame(push.Frame)
	if f == nil || next == nil || f.Status != frames.StatusContinued || f.ContinuedTo != push.Frame || next.ContinuedFrom != from ||
		s.ChainOf(from) == "" || s.ChainOf(from) != s.ChainOf(push.Frame) || next.ParentID != f.ParentID {
		fail("PARTIAL: %s: after it, %q and its continuation %q are not linked siblings of one chain", where, from, push.Frame)
	}
}

// checkChains checks every chain of the replay st through the server:
// GetChain from every link answers the same root, head and links, as the
// replay's chain has them, every link's forward pointer names the next
// link, and every link before the head refuses a mutation with
// frame_continued naming the head (a finished head's links with
// frame_not_live: it is the head that refuses, not as continued); every
// link the side file's acknowledged replies reported is in its chain,
// after the link it continued. Links whose records retention removed are
// not read from (they are not found; the other links list them: the
// projection keeps chains).
func checkChains(ctx context.Context, w *Storm, name string, st *frames.State, links []Link, removed, gone func(id string) bool, stats *Stats) error {
	roots := make([]string, 0, len(st.Chains))
	for r := range st.Chains {
		roots = append(roots, r)
	}
	sort.Strings(roots)
	for _, root := range roots {
		want, _, err := st.ChainLinks(root)
		if err != nil {
			return fmt.Errorf("scope %q: the replay's chain %q: %w", name, root, err)
		}
		head := want[len(want)-1].ID
		ids := make([]string, len(want))
		for i, l := range want {
			ids[i] = l.ID
			if f := st.Frame(l.ID); f != nil && i+1 < len(want) && f.ContinuedTo != want[i+1].ID {
				return fmt.Errorf("scope %q: chain %q: link %q points at %q, the next link is %q", name, root, l.ID, f.ContinuedTo, want[i+1].ID)
			}
		}
		stats.Chains++
		stats.ChainLinks += len(ids)
		live := func(id string) bool { f := st.Frame(id); return f != nil && f.Status.Live() }
		for _, id := range ids {
			if gone(id) && !live(id) {
				// Retention removed the finished link's records (while no
				// link of its chain was live: the core refuses a cut into a
				// live chain; a later resume makes it live again); its
				// chain keeps a tombstone, checked below from every link.
				stats.RemovedLinks++
			}
			got, err := w.C.GetChain(ctx, &messages.GetChain{Header: messages.Header{Scope: name}, FrameID: id})
			if err != nil {
				return fmt.Errorf("scope %q: GetChain(%s) of chain %q: %w", name, id, root, err)
			}
			gotIDs := make([]string, len(got.Links))
			for i, l := range got.Links {
				gotIDs[i] = l.FrameID
				if gone(l.FrameID) && !live(l.FrameID) && l.Removed == nil {
					return fmt.Errorf("scope %q: GetChain(%s): link %q of chain %q was removed and has no tombstone", name, id, l.FrameID, root)
				}
			}
			if got.Root != root || got.Head != head || !slices.Equal(gotIDs, ids) {
				return fmt.Errorf("scope %q: GetChain(%s) answered root %q head %q links %v; the replay's chain is %q → %q %v",
					name, id, got.Root, got.Head, gotIDs, root, head, ids)
			}
		}
		// A mutation naming the root and the link before the head (two
		// probes a chain: each is a refused request in the side file).
		for _, i := range []int{0, len(want) - 2} {
			id := ids[max(i, 0)]
			if id == head || removed(id) {
				continue
			}
			_, err = w.send(ctx, &messages.AddResult{Header: messages.Header{Scope: name}, FrameID: id, Kind: "file", Ref: "/after-recovery"})
			var me *messages.Error
			ok := errors.As(err, &me)
			switch {
			case want[i].Status == frames.StatusContinued && (!ok || me.Code != messages.CodeFrameContinued || me.Head != head):
				return fmt.Errorf("scope %q: a mutation naming the continued link %q of chain %q (head %q): want frame_continued naming the head, got %v",
					name, id, root, head, err)
			case want[i].Status != frames.StatusContinued && (!ok || me.Code != messages.CodeFrameNotLive):
				return fmt.Errorf("scope %q: a mutation naming the finished (resumed) link %q of chain %q: want frame_not_live, got %v", name, id, root, err)
			}
			stats.ContinuedRefusals++
		}
	}
	for _, l := range links {
		if l.Scope != name {
			continue
		}
		root := st.ChainOf(l.From)
		f, next := st.Frame(l.From), st.Frame(l.To)
		if root == "" || st.ChainOf(l.To) != root || f == nil || next == nil || f.ContinuedTo != l.To || next.ContinuedFrom != l.From ||
			(l.Resumed == (f.Status == frames.StatusContinued)) {
			return fmt.Errorf("LOST: scope %q: the acknowledged link %q → %q (request %s, resumed %v) is not in the recovered chains", name, l.From, l.To, l.ID, l.Resumed)
		}
		stats.LinksAcked++
	}
	return nil
}

// checkResume starts a StateIndex on the store and compares what
// ResumeActor and GetFrame return with the full replay.
//
// A finished frame whose records were all removed by retention is not
// found; one whose first records were removed (it was live when they went)
// answers with its record, without handles; every other frame in full.
func checkResume(ctx context.Context, dir string, store *eventstore.BoltStore, streams []string, replayed, live map[string]*frames.State,
	spans map[string]map[string]eventstore.Span, st *Stats, cycle int) error {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys := quietSystem(quiet)
	defer sys.Shutdown()
	cfg := Config(quiet)
	cfg.OutboxOff = true // nothing writes while the replay is compared (checkLedger delivers)
	cfg.StateExpiryCheck = -1
	srv, err := actors.Start(sys, store, cfg)
	if err != nil {
		return err
	}
	defer srv.Stop()
	sl, err := OpenSideLog(filepath.Join(dir, SideFile))
	if err != nil {
		return err
	}
	defer sl.Close()
	w := &Storm{C: srv.Client(), Log: sl}
	side, err := ParseSide(filepath.Join(dir, SideFile))
	if err != nil {
		return err
	}
	for _, name := range streams {
		want, all := live[name], replayed[name]
		reply, err := w.send(ctx, &messages.ResumeActor{Header: messages.Header{Scope: name}})
		if err != nil {
			return err
		}
		got := reply.(*messages.ActorResumeState)
		if got.Version != want.Version+1 {
			return fmt.Errorf("scope %q: ResumeActor at version %d, replay at %d (+1 for actor.resumed)", name, got.Version, want.Version)
		}
		if d := verify.Diff(summaries(want, want.LiveFrames()), got.LiveFrames); d != "" {
			return fmt.Errorf("scope %q: ResumeActor's live frames differ from the replay: %s", name, d)
		}
		if d := verify.Diff(want.Pending(), got.PendingWork); d != "" {
			return fmt.Errorf("scope %q: ResumeActor's pending work differs from the replay: %s", name, d)
		}
		if d := verify.Diff(frames.InterruptedOutputs(want.LiveFrames()), got.Outputs); d != "" {
			return fmt.Errorf("scope %q: ResumeActor's interrupted outputs differ from the replay: %s", name, d)
		}
		var top *messages.FrameSummary
		var stack []messages.FrameSummary
		if f := want.TopOfStack(); f != nil {
			s := summary(want, f)
			top, stack = &s, summaries(want, want.Ancestry(f.ID))
		}
		if d := verify.Diff(top, got.CurrentFrame); d != "" {
			return fmt.Errorf("scope %q: ResumeActor's current frame differs from the replay: %s", name, d)
		}
		if d := verify.Diff(stack, got.FrameStack); d != "" {
			return fmt.Errorf("scope %q: ResumeActor's frame stack differs from the replay: %s", name, d)
		}
		// Every frame, finished ones too (read back from the log).
		ids := make([]string, 0, len(all.Frames))
		for id := range all.Frames {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		base := st.Bases[name]
		for _, id := range ids {
			sp, ok := spans[name][id]
			if !ok {
				return fmt.Errorf("scope %q: no record names frame %s", name, id)
			}
			finished := !all.Frames[id].Status.Live()
			fr, err := w.C.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: name}, FrameID: id, WithHandles: true})
			if finished && sp.Last <= base {
				var me *messages.Error
				if !errors.As(err, &me) || me.Code != messages.CodeFrameNotFound {
					return fmt.Errorf("scope %q: frame %s's records (versions %d..%d) were removed (base %d), yet GetFrame answered %v, %v", name, id, sp.First, sp.Last, base, fr, err)
				}
				st.FramesRemoved++
				continue
			}
			if err != nil {
				return fmt.Errorf("scope %q: GetFrame(%s): %w", name, id, err)
			}
			f := all.Frames[id].Clone()
			if finished && sp.First <= base {
				rec := frames.RecordOf(f)
				f = frames.FromRecord(&rec)
				st.FramesCut++
			}
			f.Children = nil // the live projection keeps no children lists
			if finished {
				// What the last attempts freed serves the refusal rule of a
				// live frame; a finished frame's record does not keep it.
				f.Freed = nil
			}
			if d := verify.Diff(f, fr.Frame.Clone()); d != "" {
				return fmt.Errorf("scope %q: frame %s (%s) differs from the replay: %s", name, id, f.Status, d)
			}
		}
		removed := func(id string) bool { sp, ok := spans[name][id]; return !ok || sp.First <= base }
		gone := func(id string) bool { sp, ok := spans[name][id]; return !ok || sp.Last <= base } // every record of it
		if err := checkChains(ctx, w, name, all, side.Links(), removed, gone, st); err != nil {
			return err
		}
	}
	return nil
}

// summary mirrors what the StateIndex reports of a frame: its children are
// its live children in st.
func summary(st *frames.State, f *frames.Frame) messages.FrameSummary {
	s := messages.FrameSummary{
		ID: f.ID, ParentID: f.ParentID, Goal: f.Goal, Status: f.Status, Depth: f.Depth, Budget: f.Budget,
		Limits: f.Limits, Cost: f.Cost, Handles: len(f.Handles), ContextTokens: f.ContextTokens, Results: len(f.Results),
		InDoubt: f.InDoubt(), Suspension: f.Suspension, CreatedAt: f.CreatedAt, CompletedAt: f.CompletedAt,
	}
	for _, c := range st.LiveChildren(f) {
		s.Children = append(s.Children, c.ID)
	}
	return s
}

func summaries(st *frames.State, fs []*frames.Frame) []messages.FrameSummary {
	out := make([]messages.FrameSummary, len(fs))
	for i, f := range fs {
		out[i] = summary(st, f)
	}
	return out
}
