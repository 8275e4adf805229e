// Package crashtest proves that StateIndex keeps every acknowledged write
// across SIGKILL: a child process runs a write storm (many scopes, every
// mutating operation) and records each request in a side file before it
// sends it and each reply after it arrives; the parent kills the child at
// random moments, restarts it, and checks the data file against the side
// file (Check). The child resends the request each scope had in flight,
// with the same request id, before it goes on — as a real agent would.
// The child also runs retention passes that remove finished runs to
// archives (retention.go); the checker then finds those writes in the
// archives (history.go). Beside the storm it runs a durable subscriber
// (subscriber.go) and a spend-ledger workload whose cross-scope
// settlements the checker proves neither lost nor doubled (ledger.go); its
// steps change the scopes' key-value state too, which the checker folds
// from the requests and compares with what recovery holds (kv.go).
//
// A SIGKILL leaves the page cache intact, so this cannot catch a missing
// fsync: the held-commit test in package actors (no reply leaves before the
// commit returns) covers that side. Power loss is not simulated.
package crashtest

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// Side file lines, one write(2) each (O_APPEND), fields separated by
// spaces:
//
//	I <scope> <request id> <op> <base64 msgpack request>   before sending
//	A <scope> <request id> <op> <version> <wrote 0|1> [tok=<frame>:<token>] [cont=<from>:<to>] [resumed=<from>:<to>]   after a success
//	R <scope> <request id> <op> <error code>               after a refusal
//
// A line cut short by the kill has no newline and is ignored. cont= is a
// continuation the reply reported (ContinueFrame, or automatic on
// AddContextHandle and FinishToolCall): from became continued, to is the
// new link; resumed= is a ResumeChain's new link after the finished head.

// SideLog appends request records to the side file.
type SideLog struct {
	mu sync.Mutex
	f  *os.File
}

// OpenSideLog opens (creating) the side file for appending.
// A last line a kill cut short is dropped first: appending after it would
// glue the next line onto it.
func OpenSideLog(path string) (*SideLog, error) {
	if b, err := os.ReadFile(path); err == nil && len(b) > 0 && b[len(b)-1] != '\n' {
		if err := os.Truncate(path, int64(bytes.LastIndexByte(b, '\n')+1)); err != nil {
			return nil, err
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	return &SideLog{f: f}, nil
}

func (l *SideLog) write(fields ...string) error {
	if l == nil {
		return nil
	}
	line := strings.Join(fields, " ") + "\n"
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := l.f.Write([]byte(line))
	return err
}

// Close closes the side file.
func (l *SideLog) Close() error {
	if l == nil {
		return nil
	}
	return l.f.Close()
}

// Ops are the request types the storm sends, by name.
var newRequest = map[string]func() messages.MutatingRequest{
	"PushFrame":        func() messages.MutatingRequest { return &messages.PushFrame{} },
	"PopFrame":         func() messages.MutatingRequest { return &messages.PopFrame{} },
	"UpdateFrame":      func() messages.MutatingRequest { return &messages.UpdateFrame{} },
	"AddContextHandle": func() messages.MutatingRequest { return &messages.AddContextHandle{} },
	"AddResult":        func() messages.MutatingRequest { return &messages.AddResult{} },
	"RecordUsage":      func() messages.MutatingRequest { return &messages.RecordUsage{} },
	"StartToolCall":    func() messages.MutatingRequest { return &messages.StartToolCall{} },
	"FinishToolCall":   func() messages.MutatingRequest { return &messages.FinishToolCall{} },
	"SuspendFrame":     func() messages.MutatingRequest { return &messages.SuspendFrame{} },
	"ResumeFrame":      func() messages.MutatingRequest { return &messages.ResumeFrame{} },
	"CompactContext":   func() messages.MutatingRequest { return &messages.CompactContext{} },
	"ContinueFrame":    func() messages.MutatingRequest { return &messages.ContinueFrame{} },
	"ResumeChain":      func() messages.MutatingRequest { return &messages.ResumeChain{} },
	"ChangeState":      func() messages.MutatingRequest { return &messages.ChangeState{} }, // scope state (kv.go)
	// The spend ledger's workload (ledger.go).
	"ReserveSpend":       func() messages.MutatingRequest { return &messages.ReserveSpend{} },
	"ReleaseReservation": func() messages.MutatingRequest { return &messages.ReleaseReservation{} },
	// Partial output, streamed between the other requests (partial.go).
	"RecordPartialOutput": func() messages.MutatingRequest { return &messages.RecordPartialOutput{} },
}

// opName is the name of a request's type.
func opName(req messages.Request) string {
	if _, ok := req.(*messages.ResumeActor); ok {
		return "ResumeActor"
	}
	name := fmt.Sprintf("%T", req)
	return name[strings.LastIndexByte(name, '.')+1:]
}

// mframe is the storm's view of a frame.
type mframe struct {
	id, parent string
	status     frames.Status
	depth      int64
	calls      []string // tool calls started, not finished
	handles    int
	token      string // the suspension token, if suspended and known
	// next is the chain's next link: the frame that continued this one
	// (status continued) or resumed it (a finished status), "" for a head.
	next string
}

// scope is the storm's view of one scope: what it needs to pick requests
// that are mostly valid. The server stays the authority: a refusal makes
// the storm re-read the scope.
type scope struct {
	name   string
	frames map[string]*mframe
	stale  bool
}

// head follows f's chain in the view to its head; "" when a link on the
// way is not in the view (the view is not sure).
func (s *scope) head(id string) string {
	for range len(s.frames) + 1 {
		f := s.frames[id]
		if f == nil {
			return ""
		}
		if f.next == "" {
			return id
		}
		id = f.next
	}
	return "" // a cycle in the view: never trust it
}

// finished returns the frames of the view that finished (completed,
// failed, cancelled) and are their chain's head: those ResumeChain
// resumes.
func (s *scope) finished() []*mframe {
	var out []*mframe
	for _, f := range s.frames {
		if f.next == "" && f.status.Terminal() && f.status != frames.StatusContinued {
			out = append(out, f)
		}
	}
	sortFrames(out)
	return out
}

// continued returns the frames of the view that were continued.
func (s *scope) continued() []*mframe {
	var out []*mframe
	for _, f := range s.frames {
		if f.status == frames.StatusContinued && f.next != "" {
			out = append(out, f)
		}
	}
	sortFrames(out)
	return out
}

// continuedTo records in the view that f was continued to the new link
// to: its tool calls in doubt move there.
func (s *scope) continuedTo(f *mframe, to string, handles int) {
	f.status, f.next = frames.StatusContinued, to
	s.frames[to] = &mframe{id: to, parent: f.parent, status: frames.StatusActive, depth: f.depth, calls: f.calls, handles: handles}
	f.calls = nil
}

// keepFinished is how many finished frames a view keeps across a re-read
// (the newest by id), for ResumeChain and the frame_continued probe.
const keepFinished = 48

func (s *scope) live() []*mframe {
	var out []*mframe
	for _, f := range s.frames {
		if f.status.Live() {
			out = append(out, f)
		}
	}
	// Map order is random; sort for reproducible choices from the seed.
	sortFrames(out)
	return out
}

func (s *scope) liveChildren(id string) int {
	n := 0
	for _, f := range s.frames {
		if f.parent == id && f.status.Live() {
			n++
		}
	}
	return n
}

// Storm drives a StateIndex with random valid requests on its scopes.
// Request ids are minted as the Client mints them (actors.NewRequestID: a
// UUIDv7 carrying its first-send time), so that a resend older than the
// idempotency horizon is refused as expired, never applied twice.
type Storm struct {
	C   *actors.Client
	Log *SideLog
	// Tokens known from earlier runs (side file), by scope and frame.
	Tokens map[string]map[string]string
}

// errRefused marks a request the server refused with a domain error.
var errRefused = errors.New("refused")

// send sends one mutating request with the side-file protocol.
func (w *Storm) send(ctx context.Context, req messages.Request) (messages.Reply, error) {
	op := opName(req)
	var id, scopeName string
	if r, ok := req.(messages.MutatingRequest); ok { // ResumeActor too: it appends
		if r.Mut().RequestID == "" {
			r.Mut().RequestID = actors.NewRequestID()
		}
		id, scopeName = r.Mut().RequestID, r.Mut().Scope
	}
	enc, err := eventstore.Marshal(req)
	if err != nil {
		return nil, err
	}
	if err := w.Log.write("I", scopeName, id, op, base64.StdEncoding.EncodeToString(enc)); err != nil {
		return nil, err
	}
	reply, err := call(ctx, w.C, req)
	if err != nil {
		var me *messages.Error
		if errors.As(err, &me) && refusable(me.Code) {
			if lerr := w.Log.write("R", scopeName, id, op, string(me.Code)); lerr != nil {
				return nil, lerr
			}
			return nil, fmt.Errorf("%w: %s %s: %w", errRefused, op, id, err)
		}
		return nil, fmt.Errorf("%s %s on scope %q: %w", op, id, scopeName, err)
	}
	version, wrote, extra := outcome(req, reply)
	fields := []string{"A", scopeName, id, op, fmt.Sprint(version), wrote}
	if extra != "" {
		fields = append(fields, extra)
	}
	if err := w.Log.write(fields...); err != nil {
		return nil, err
	}
	return reply, nil
}

// refusable codes are domain refusals the storm can cause by racing its
// own model (a budget that ran out, a limit crossed); anything else — a
// store failure, an internal error — fails the storm.
func refusable(c messages.Code) bool {
	switch c {
	case messages.CodeStoreFailed, messages.CodeInternal, messages.CodeUnavailable, messages.CodeBadRequest,
		messages.CodeRequestIDReused, messages.CodeVersionConflict:
		return false
	}
	return true
}

// outcome is what the side file records of a reply.
func outcome(req messages.Request, reply messages.Reply) (version int64, wrote, extra string) {
	wrote = "1"
	switch r := reply.(type) {
	case *messages.ActorResumeState:
		if r.Version == 0 {
			wrote = "0"
		}
	case *messages.SuspensionToken:
		extra = "tok=" + r.FrameID + ":" + r.Token
	case *messages.RecordUsageReply:
		if r.Suspension != nil {
			extra = "tok=" + r.Suspension.FrameID + ":" + r.Suspension.Token
		}
	case *messages.PopFrameReply:
		if r.ParentSuspension != nil {
			extra = "tok=" + r.ParentSuspension.FrameID + ":" + r.ParentSuspension.Token
		}
	case *messages.ResumeChainReply:
		extra = "resumed=" + r.From + ":" + r.FrameID
	}
	if cc, ok := reply.(messages.ContextChanger); ok && cc.Change().Continued != nil {
		extra = "cont=" + cc.Change().Continued.From + ":" + cc.Change().Continued.To
	}
	return resultVersion(reply), wrote, extra
}

func resultVersion(r messages.Reply) int64 {
	switch x := r.(type) {
	case *messages.PushFrameReply:
		return x.Version
	case *messages.PopFrameReply:
		return x.Version
	case *messages.UpdateFrameReply:
		return x.Version
	case *messages.AddContextHandleReply:
		return x.Version
	case *messages.AddResultReply:
		return x.Version
	case *messages.RecordUsageReply:
		return x.Version
	case *messages.StartToolCallReply:
		return x.Version
	case *messages.FinishToolCallReply:
		return x.Version
	case *messages.SuspensionToken:
		return x.Version
	case *messages.ResumeFrameReply:
		return x.Version
	case *messages.CompactionResult:
		return x.Version
	case *messages.ActorResumeState:
		return x.Version
	case *messages.ContinueFrameReply:
		return x.Version
	case *messages.ResumeChainReply:
		return x.Version
	case *messages.ChangeStateReply:
		return x.Version
	case *messages.ReserveSpendReply:
		return x.Version
	case *messages.ReleaseReservationReply:
		return x.Version
	case *messages.RecordPartialOutputReply:
		return x.Version
	}
	return -1
}

// call sends req through the Client.
func call(ctx context.Context, c *actors.Client, req messages.Request) (messages.Reply, error) {
	return c.Do(ctx, req)
}

// Resume rebuilds the storm's view of a scope with ResumeActor, as an
// agent actor's Started handler would.
func (w *Storm) Resume(ctx context.Context, name string) (*scope, error) {
	reply, err := w.send(ctx, &messages.ResumeActor{Header: messages.Header{Scope: name}})
	if err != nil {
		return nil, err
	}
	st := reply.(*messages.ActorResumeState)
	s := &scope{name: name, frames: map[string]*mframe{}}
	for _, f := range st.LiveFrames {
		m := &mframe{id: f.ID, parent: f.ParentID, status: f.Status, depth: f.Depth, handles: f.Handles}
		for _, c := range f.InDoubt {
			m.calls = append(m.calls, c.ID)
		}
		if f.Status == frames.StatusSuspended {
			m.token = w.Tokens[name][f.ID]
		}
		s.frames[f.ID] = m
	}
	return s, nil
}

// refresh re-reads s with ResumeActor, keeping what the live frames do
// not say: the finished and continued frames of the old view (the newest
// keepFinished), whose status no longer changes, with their chains' links.
func (w *Storm) refresh(ctx context.Context, s *scope) error {
	fresh, err := w.Resume(ctx, s.name)
	if err != nil {
		return err
	}
	var done []*mframe
	for _, f := range s.frames {
		if !f.status.Live() && fresh.frames[f.id] == nil {
			done = append(done, f)
		}
	}
	sortFrames(done)
	if len(done) > keepFinished {
		done = done[len(done)-keepFinished:]
	}
	for _, f := range done {
		f.calls = nil
		fresh.frames[f.id] = f
	}
	*s = *fresh
	return nil
}

// Seed adds to s the chain links the side file's acknowledged replies
// name (Side.Links): what a new process knows of the chains its scopes
// hold.
func (s *scope) Seed(links []Link) {
	for _, l := range links {
		if l.Scope != s.name || s.frames[l.From] != nil {
			continue
		}
		status := frames.StatusContinued
		if l.Resumed {
			status = frames.StatusCompleted // some finished status: the view needs only "not live"
		}
		s.frames[l.From] = &mframe{id: l.From, status: status, next: l.To}
	}
}

func mut(s *scope) messages.Header { return messages.Header{Scope: s.name} }

// Step sends one random request on s (reads now and then too). A refusal
// is not an error: the view is marked stale and re-read next time.
func (w *Storm) Step(ctx context.Context, rng *rand.Rand, s *scope) error {
	if s.stale {
		if err := w.refresh(ctx, s); err != nil {
			return err
		}
	}
	err := w.step(ctx, rng, s)
	if errors.Is(err, errRefused) {
		s.stale = true
		return nil
	}
	return err
}

func (w *Storm) step(ctx context.Context, rng *rand.Rand, s *scope) error {
	live := s.live()
	if len(live) == 0 || (len(live) < 3 && rng.IntN(8) == 0) {
		limits := budget.Limits{}
		if rng.IntN(3) == 0 {
			limits.Turns = 2 + int64(rng.IntN(3))
		}
		r, err := w.send(ctx, &messages.PushFrame{Header: mut(s), Goal: fmt.Sprintf("root goal %d", rng.IntN(1000)),
			Inputs: inputs(rng), Budget: budget.TokenBudget{Total: 1_000_000, MaxSubframeDepth: 4}, Limits: limits,
			ContextWindow: ContextWindowMin + int64(rng.IntN(ContextWindowMin))})
		if err != nil {
			return err
		}
		p := r.(*messages.PushFrameReply)
		s.frames[p.FrameID] = &mframe{id: p.FrameID, status: frames.StatusActive}
		return nil
	}
	if rng.IntN(40) == 0 {
		_, err := w.Resume(ctx, s.name) // an actor restarted: actor.resumed
		return err
	}
	f := live[rng.IntN(len(live))]
	if rng.IntN(StateEvery) == 0 {
		return w.changeState(ctx, rng, s, f) // scope state (kv.go)
	}
	switch f.status {
	case frames.StatusSuspended:
		if rng.IntN(8) == 0 {
			return w.stream(ctx, rng, s, f) // output arriving as the frame is suspended
		}
		if f.token == "" || rng.IntN(6) == 0 {
			return w.pop(ctx, rng, s, f, true)
		}
		if _, err := w.send(ctx, &messages.ResumeFrame{Header: mut(s), Token: f.token}); err != nil {
			return err
		}
		f.status, f.token = frames.StatusActive, ""
		if s.liveChildren(f.id) > 0 {
			f.status = frames.StatusWaiting
		}
		return nil
	case frames.StatusWaiting:
		switch rng.IntN(7) {
		case 0:
			return w.pop(ctx, rng, s, f, true)
		case 1, 2:
			return w.addHandle(ctx, rng, s, f)
		case 6:
			return w.stream(ctx, rng, s, f) // the frame's model call streams beside its subcalls
		case 3:
			return w.update(ctx, rng, s, f)
		case 4:
			if f.handles >= 2 {
				// A parent's context outgrows its budget while children work.
				return w.compact(ctx, rng, s, f)
			}
			return w.read(ctx, rng, s, f)
		default:
			return w.read(ctx, rng, s, f)
		}
	}
	switch op := rng.IntN(30); {
	case op < 3 && f.depth < 3:
		r, err := w.send(ctx, &messages.PushFrame{Header: mut(s), ParentID: f.id, Goal: fmt.Sprintf("subtask %d", rng.IntN(1000)),
			Budget: budget.TokenBudget{Total: 2000 + int64(rng.IntN(3000))}, Inputs: inputs(rng)})
		if err != nil {
			return err
		}
		p := r.(*messages.PushFrameReply)
		s.frames[p.FrameID] = &mframe{id: p.FrameID, parent: f.id, status: frames.StatusActive, depth: p.Depth}
		f.status = frames.StatusWaiting
		return nil
	case op < 7:
		// A turn adds a few messages: frames fill, and some reach the
		// automatic continuation's threshold.
		for n := 1 + rng.IntN(4); n > 0 && f.status.Live(); n-- {
			if err := w.addHandle(ctx, rng, s, f); err != nil {
				return err
			}
		}
		return nil
	case op < 8:
		_, err := w.send(ctx, &messages.AddResult{Header: mut(s), FrameID: f.id, Kind: "file", Ref: fmt.Sprintf("/out/%d.txt", rng.IntN(1e6)),
			Summary: "a result"})
		return err
	case op < 10:
		r, err := w.send(ctx, &messages.RecordUsage{Header: mut(s), FrameID: f.id,
			Cost: budget.Cost{InputTokens: int64(rng.IntN(200)), OutputTokens: int64(rng.IntN(100)), Turns: 1, SpendMicros: int64(rng.IntN(500))}})
		if err != nil {
			return err
		}
		if sp := r.(*messages.RecordUsageReply).Suspension; sp != nil {
			f.status, f.token = frames.StatusSuspended, sp.Token
		}
		return nil
	case op < 12:
		r, err := w.send(ctx, &messages.StartToolCall{Header: mut(s), FrameID: f.id, Name: "search", Input: []byte(`{"q":"x"}`)})
		if err != nil {
			return err
		}
		f.calls = append(f.calls, r.(*messages.StartToolCallReply).CallID)
		return nil
	case op < 14 && len(f.calls) > 0:
		i := rng.IntN(len(f.calls))
		r, err := w.send(ctx, &messages.FinishToolCall{Header: mut(s), FrameID: f.id, CallID: f.calls[i],
			Output: strings.Repeat("result text ", 1+rng.IntN(40)), IsError: rng.IntN(10) == 0})
		if err != nil {
			return err
		}
		f.calls = append(f.calls[:i], f.calls[i+1:]...)
		f.handles += 2
		return followContinuation(s, f, r.(*messages.FinishToolCallReply).ContextChange)
	case op < 15:
		return w.update(ctx, rng, s, f)
	case op < 16:
		r, err := w.send(ctx, &messages.SuspendFrame{Header: mut(s), FrameID: f.id, Reason: frames.SuspendApproval, Note: "needs a human"})
		if err != nil {
			return err
		}
		f.status, f.token = frames.StatusSuspended, r.(*messages.SuspensionToken).Token
		return nil
	case op < 18 && f.handles >= 2:
		return w.compact(ctx, rng, s, f)
	case op < 20:
		return w.pop(ctx, rng, s, f, s.liveChildren(f.id) > 0)
	case op < 22 && f.handles >= 4 && s.liveChildren(f.id) == 0:
		return w.continueFrame(ctx, rng, s, f)
	case op < 23:
		if fs := s.finished(); len(fs) > 0 {
			return w.resumeChain(ctx, rng, s, fs[rng.IntN(len(fs))])
		}
		return w.read(ctx, rng, s, f)
	case op < 24:
		if cs := s.continued(); len(cs) > 0 {
			return w.probeContinued(ctx, rng, s, cs[rng.IntN(len(cs))])
		}
		return w.read(ctx, rng, s, f)
	case op < 28:
		return w.stream(ctx, rng, s, f)
	default:
		return w.read(ctx, rng, s, f)
	}
}

// continueFrame continues f explicitly, with a random resume ceiling.
func (w *Storm) continueFrame(ctx context.Context, rng *rand.Rand, s *scope, f *mframe) error {
	r, err := w.send(ctx, &messages.ContinueFrame{Header: mut(s), FrameID: f.id, ResumeCeiling: 50 + int64(rng.IntN(250))})
	if err != nil {
		return err
	}
	c := r.(*messages.ContinueFrameReply)
	if c.From != f.id || c.Continued == nil || c.Continued.To != c.FrameID {
		return fmt.Errorf("ContinueFrame of %s on scope %q answered %+v", f.id, s.name, c)
	}
	s.continuedTo(f, c.FrameID, c.Carried+1)
	return nil
}

// resumeChain resumes the finished head f with a user's message, naming
// the chain by f or, now and then, by its root as the view knows it.
func (w *Storm) resumeChain(ctx context.Context, rng *rand.Rand, s *scope, f *mframe) error {
	req := &messages.ResumeChain{Header: mut(s), ChainID: f.id, Message: fmt.Sprintf("user: go on with step %d", rng.IntN(1000)),
		ResumeCeiling: int64(rng.IntN(800))}
	for _, c := range s.continued() { // an earlier link names the same chain
		if c.next == f.id && rng.IntN(2) == 0 {
			req.ChainID = c.id
		}
	}
	parent := s.frames[f.parent]
	if parent == nil || !parent.status.Live() {
		req.Budget = budget.TokenBudget{Total: 1_000_000, MaxSubframeDepth: 4} // a new root
	}
	r, err := w.send(ctx, req)
	if err != nil {
		return err
	}
	c := r.(*messages.ResumeChainReply)
	if c.From != f.id {
		return fmt.Errorf("ResumeChain of %s (head %s in the view) on scope %q resumed %s", req.ChainID, f.id, s.name, c.From)
	}
	f.next = c.FrameID
	depth := int64(0)
	if c.ParentID != "" {
		depth = f.depth
		if p := s.frames[c.ParentID]; p != nil && p.status == frames.StatusActive {
			p.status = frames.StatusWaiting
		}
	}
	s.frames[c.FrameID] = &mframe{id: c.FrameID, parent: c.ParentID, status: frames.StatusActive, depth: depth, handles: c.Carried + 2}
	return nil
}

// probeContinued sends a mutation naming the continued frame f: it must be
// refused with frame_continued, naming the head the view follows f's links
// to (when the view knows every link).
func (w *Storm) probeContinued(ctx context.Context, rng *rand.Rand, s *scope, f *mframe) error {
	var req messages.MutatingRequest = &messages.AddResult{Header: mut(s), FrameID: f.id, Kind: "file", Ref: "/late"}
	if rng.IntN(2) == 0 {
		req = &messages.AddContextHandle{Header: mut(s), FrameID: f.id, Priority: compaction.Low, Content: "late words"}
	}
	_, err := w.send(ctx, req)
	var me *messages.Error
	switch {
	case err == nil:
		return fmt.Errorf("%s naming the continued frame %s on scope %q was applied", opName(req), f.id, s.name)
	case !errors.As(err, &me) || me.Code != messages.CodeFrameContinued:
		return fmt.Errorf("%s naming the continued frame %s on scope %q: want frame_continued, got %w", opName(req), f.id, s.name, err)
	}
	if want := s.head(f.id); want != "" && me.Head != want {
		return fmt.Errorf("%s naming the continued frame %s on scope %q: frame_continued names head %q, the view's is %q", opName(req), f.id, s.name, me.Head, want)
	}
	return nil // an expected refusal: the view stands
}

func inputs(rng *rand.Rand) []byte {
	b, _ := eventstore.Marshal(map[string]any{"n": rng.IntN(1000), "tags": []string{"a", "b"}})
	return b
}

func (w *Storm) addHandle(ctx context.Context, rng *rand.Rand, s *scope, f *mframe) error {
	prio := []compaction.Priority{compaction.Low, compaction.Medium, compaction.High, compaction.Critical}[rng.IntN(4)]
	if prio == compaction.Critical && rng.IntN(3) > 0 {
		prio = compaction.Low
	}
	r, err := w.send(ctx, &messages.AddContextHandle{Header: mut(s), FrameID: f.id, Role: []string{"user", "assistant", "tool", ""}[rng.IntN(4)],
		Priority: prio, Content: strings.Repeat("context words ", 1+rng.IntN(60))})
	if err != nil {
		return err
	}
	f.handles++
	return followContinuation(s, f, r.(*messages.AddContextHandleReply).ContextChange)
}

// followContinuation records an automatic continuation a reply reports.
func followContinuation(s *scope, f *mframe, c messages.ContextChange) error {
	if c.Continued == nil {
		return nil
	}
	if c.Continued.From != f.id {
		return fmt.Errorf("a write to %s on scope %q continued %s", f.id, s.name, c.Continued.From)
	}
	s.continuedTo(f, c.Continued.To, 2)
	return nil
}

func (w *Storm) compact(ctx context.Context, rng *rand.Rand, s *scope, f *mframe) error {
	r, err := w.send(ctx, &messages.CompactContext{Header: mut(s), FrameID: f.id, TargetTokens: int64(rng.IntN(200)),
		Strategy: messages.Strategy{Kind: []string{messages.StrategyPriorityBased, messages.StrategySummarizeOldest}[rng.IntN(2)], KeepRecent: 1}})
	if err != nil {
		return err
	}
	c := r.(*messages.CompactionResult)
	f.handles -= len(c.Removed)
	if c.SummaryID != "" {
		f.handles++
	}
	return nil
}

func (w *Storm) update(ctx context.Context, rng *rand.Rand, s *scope, f *mframe) error {
	goal := fmt.Sprintf("revised goal %d", rng.IntN(1000))
	_, err := w.send(ctx, &messages.UpdateFrame{Header: mut(s), FrameID: f.id, Goal: &goal, ReserveDelta: int64(rng.IntN(50))})
	return err
}

func (w *Storm) pop(ctx context.Context, rng *rand.Rand, s *scope, f *mframe, cascade bool) error {
	status := []frames.Status{frames.StatusCompleted, frames.StatusCompleted, frames.StatusFailed, frames.StatusCancelled}[rng.IntN(4)]
	r, err := w.send(ctx, &messages.PopFrame{Header: mut(s), FrameID: f.id, Status: status, Cascade: cascade})
	if err != nil {
		return err
	}
	p := r.(*messages.PopFrameReply)
	f.status = p.Status
	for _, id := range p.Cancelled {
		if c := s.frames[id]; c != nil {
			c.status = frames.StatusCancelled
		}
	}
	if parent := s.frames[f.parent]; parent != nil && parent.status == frames.StatusWaiting && s.liveChildren(parent.id) == 0 {
		parent.status = frames.StatusActive
	}
	if ps := p.ParentSuspension; ps != nil {
		if parent := s.frames[ps.FrameID]; parent != nil {
			parent.status, parent.token = frames.StatusSuspended, ps.Token
		}
	}
	return nil
}

// read sends a read now and then: packs and stacks must work mid-storm.
func (w *Storm) read(ctx context.Context, rng *rand.Rand, s *scope, f *mframe) error {
	var err error
	if rng.IntN(2) == 0 {
		_, err = w.C.AssembleContextPack(ctx, &messages.AssembleContextPack{Header: messages.Header{Scope: s.name}, FrameID: f.id, BudgetTokens: 600 + int64(rng.IntN(4000))})
	} else {
		_, err = w.C.GetStack(ctx, &messages.GetStack{Header: messages.Header{Scope: s.name}, FrameID: f.id})
	}
	var me *messages.Error
	if errors.As(err, &me) && refusable(me.Code) {
		return nil // a pack whose critical content outgrew the budget, say
	}
	return err
}

func sortFrames(fs []*mframe) {
	sort.Slice(fs, func(i, j int) bool { return fs[i].id < fs[j].id })
}
