package actors_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

var seeOwn = actors.ListFramesOptions{SeeOwnWrites: true}

// listAll pages through req (limit per page) and returns every entry.
func listAll(t *testing.T, c *actors.Client, req messages.ListFrames, limit int) []messages.FrameEntry {
	t.Helper()
	var out []messages.FrameEntry
	req.Limit = limit
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10_000, "pagination ends")
		r, err := c.ListFrames(ctx, &req, seeOwn)
		require.NoError(t, err)
		require.LessOrEqual(t, len(r.Frames), limit)
		out = append(out, r.Frames...)
		if r.NextCursor == "" {
			return out
		}
		req.Cursor = r.NextCursor
	}
}

func ids(es []messages.FrameEntry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Scope+"/"+e.FrameID)
	}
	return out
}

// newestFirst reports whether es is in the registry's order.
func newestFirst(es []messages.FrameEntry) bool {
	return sort.SliceIsSorted(es, func(i, j int) bool {
		a, b := es[i], es[j]
		if a.CreatedAt != b.CreatedAt {
			return a.CreatedAt > b.CreatedAt
		}
		if a.Scope != b.Scope {
			return a.Scope < b.Scope
		}
		return a.FrameID < b.FrameID
	})
}

// registryWorld fills scopes with frames of known goals and statuses, one
// clock millisecond apart (two pairs share a creation time, to test the
// order's ties).
func registryWorld(t *testing.T, e *env) {
	t.Helper()
	c := e.c
	pushG := func(scope, parent, goal string) string {
		total := int64(1000)
		if parent == "" {
			total = 100_000
		}
		r, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(scope), ParentID: parent, Goal: goal, Budget: budget.TokenBudget{Total: total}})
		require.NoError(t, err)
		e.clock.Advance(time.Millisecond)
		return r.FrameID
	}
	pop := func(scope, id string, st frames.Status) {
		_, err := c.PopFrame(ctx, &messages.PopFrame{Header: mut(scope), FrameID: id, Status: st})
		require.NoError(t, err)
		e.clock.Advance(time.Millisecond)
	}
	for _, scope := range []string{"team-a.s1", "team-a.s2", "team-b.s1"} {
		root := pushG(scope, "", "plan "+scope)
		for i := 0; i < 4; i++ {
			goal := "build " + scope
			if i%2 == 1 {
				goal = "test " + scope
			}
			kid := pushG(scope, root, goal)
			switch i {
			case 0:
				pop(scope, kid, frames.StatusCompleted)
			case 1:
				pop(scope, kid, frames.StatusFailed)
			case 2:
				_, err := c.SuspendFrame(ctx, &messages.SuspendFrame{Header: mut(scope), FrameID: kid, Reason: frames.SuspendApproval})
				require.NoError(t, err)
			}
		}
	}
	// Same creation time in two scopes (the clock does not move).
	for _, scope := range []string{"tie-b", "tie-a"} {
		_, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(scope), Goal: "tie", Budget: budget.TokenBudget{Total: 10}})
		require.NoError(t, err)
	}
}

// Every filter, alone and combined, answers exactly the frames a scan of
// every entry would, newest first, through pages of any size.
func TestListFramesFilters(t *testing.T) {
	e := newEnv(t)
	registryWorld(t, e)
	all := listAll(t, e.c, messages.ListFrames{}, 1000)
	require.Len(t, all, 3*5+2)
	assert.True(t, newestFirst(all), "newest first: %v", ids(all))
	assert.Equal(t, []string{"tie-a", "tie-b"}, []string{all[0].Scope, all[1].Scope}, "a tie is ordered by scope")

	byID := map[string]messages.FrameEntry{}
	for _, en := range all {
		byID[en.Scope+"/"+en.FrameID] = en
	}
	var suspended, failed, waiting int
	for _, en := range all {
		switch en.Status {
		case "suspended":
			suspended++
			assert.Equal(t, "approval", en.SuspendReason)
		case "failed":
			failed++
			assert.NotZero(t, en.FinishedAt)
		case "waiting":
			waiting++
			assert.Empty(t, en.ParentID)
		}
		assert.Positive(t, en.PushVersion)
	}
	assert.Equal(t, []int{3, 3, 3}, []int{suspended, failed, waiting}, "each root waits on its live children")

	a1 := all[len(all)-1] // the oldest: team-a.s1's root
	require.Equal(t, "team-a.s1", a1.Scope)
	mid := all[len(all)/2].CreatedAt
	cases := []struct {
		name string
		req  messages.ListFrames
		keep func(messages.FrameEntry) bool
	}{
		{"status", messages.ListFrames{Statuses: []string{"failed"}}, func(f messages.FrameEntry) bool { return f.Status == "failed" }},
		{"statuses", messages.ListFrames{Statuses: []string{"completed", "suspended", "completed"}},
			func(f messages.FrameEntry) bool { return f.Status == "completed" || f.Status == "suspended" }},
		{"goal prefix", messages.ListFrames{GoalPrefix: "build team-a"}, func(f messages.FrameEntry) bool { return strings.HasPrefix(f.Goal, "build team-a") }},
		{"scope prefix", messages.ListFrames{ScopePrefix: "team-a."}, func(f messages.FrameEntry) bool { return strings.HasPrefix(f.Scope, "team-a.") }},
		{"scope", messages.ListFrames{InScope: "team-b.s1"}, func(f messages.FrameEntry) bool { return f.Scope == "team-b.s1" }},
		{"parent", messages.ListFrames{InScope: a1.Scope, ParentID: a1.FrameID},
			func(f messages.FrameEntry) bool { return f.Scope == a1.Scope && f.ParentID == a1.FrameID }},
		{"created range", messages.ListFrames{CreatedAfter: a1.CreatedAt + 1, CreatedBefore: mid},
			func(f messages.FrameEntry) bool { return f.CreatedAt > a1.CreatedAt && f.CreatedAt < mid }},
		{"finished range", messages.ListFrames{FinishedAfter: 1, FinishedBefore: mid},
			func(f messages.FrameEntry) bool { return f.FinishedAt != 0 && f.FinishedAt < mid }},
		{"status and goal prefix", messages.ListFrames{Statuses: []string{"failed", "active"}, GoalPrefix: "test"},
			func(f messages.FrameEntry) bool {
				return (f.Status == "failed" || f.Status == "active") && strings.HasPrefix(f.Goal, "test")
			}},
		{"scope prefix, status and time", messages.ListFrames{ScopePrefix: "team-", Statuses: []string{"completed"}, CreatedBefore: mid},
			func(f messages.FrameEntry) bool {
				return strings.HasPrefix(f.Scope, "team-") && f.Status == "completed" && f.CreatedAt < mid
			}},
		{"a prefix nothing has", messages.ListFrames{GoalPrefix: "deploy"}, func(messages.FrameEntry) bool { return false }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var want []string
			for _, f := range all {
				if tc.keep(f) {
					want = append(want, f.Scope+"/"+f.FrameID)
				}
			}
			for _, limit := range []int{1, 2, 1000} {
				got := listAll(t, e.c, tc.req, limit)
				assert.Equal(t, want, ids(got), "limit %d", limit)
			}
		})
	}
	t.Run("chain", func(t *testing.T) {
		s := "chains"
		r, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: mut(s), Goal: "long task", Budget: budget.TokenBudget{Total: 100_000}, ContextWindow: 1000})
		require.NoError(t, err)
		for i := 0; i < 8; i++ {
			addHandle(t, e.c, s, r.FrameID, compaction.Medium, strings.Repeat("talk ", 40))
		}
		e.clock.Advance(time.Millisecond) // the new link is newer
		cont, err := e.c.ContinueFrame(ctx, &messages.ContinueFrame{Header: mut(s), FrameID: r.FrameID, ResumeCeiling: 100})
		require.NoError(t, err)
		got := listAll(t, e.c, messages.ListFrames{InScope: s, ChainRoot: r.FrameID}, 10)
		require.Len(t, got, 2)
		assert.Equal(t, cont.FrameID, got[0].FrameID, "the new link first")
		assert.Equal(t, r.FrameID, got[0].ContinuedFrom)
		assert.Equal(t, "continued", got[1].Status)
		assert.Equal(t, cont.FrameID, got[1].ContinuedTo)
		assert.Equal(t, r.FrameID, got[1].ChainRoot)
	})
}

// Bad requests are refused with invalid_argument and a message that says
// what is wrong.
func TestListFramesRefusesBadRequests(t *testing.T) {
	e := newEnv(t)
	push(t, e.c, "s", "", 10)
	first, err := e.c.ListFrames(ctx, &messages.ListFrames{Limit: 1}, seeOwn)
	require.NoError(t, err)
	good := first.NextCursor
	push(t, e.c, "s", "", 10)
	first, err = e.c.ListFrames(ctx, &messages.ListFrames{Limit: 1}, seeOwn)
	require.NoError(t, err)
	good = first.NextCursor
	require.NotEmpty(t, good)
	tampered := []byte(good)
	tampered[len(tampered)/2] ^= 0x01
	cases := []struct {
		name string
		req  messages.ListFrames
		want string
	}{
		{"unknown status", messages.ListFrames{Statuses: []string{"done"}}, `unknown status "done"`},
		{"created range reversed", messages.ListFrames{CreatedAfter: 10, CreatedBefore: 5}, "is not before"},
		{"finished range empty", messages.ListFrames{FinishedAfter: 5, FinishedBefore: 5}, "is not before"},
		{"negative time", messages.ListFrames{CreatedAfter: -1}, "negative"},
		{"limit too large", messages.ListFrames{Limit: 1001}, "limit 1001"},
		{"negative limit", messages.ListFrames{Limit: -1}, "limit -1"},
		{"tampered cursor", messages.ListFrames{Cursor: string(tampered)}, "cursor"},
		{"not a cursor", messages.ListFrames{Cursor: "%%%"}, "cursor"},
		{"a cursor of another version", messages.ListFrames{Cursor: "AgAA"}, "cursor"},
		{"parent without its scope", messages.ListFrames{ParentID: "f-1"}, "InScope"},
		{"chain without its scope", messages.ListFrames{ChainRoot: "f-1"}, "InScope"},
		{"a scope in the header", messages.ListFrames{Header: messages.Header{Scope: "s"}}, "names no scope"},
		{"a goal prefix with a NUL", messages.ListFrames{GoalPrefix: "a\x00b"}, "NUL"},
		{"a parent id that is no id", messages.ListFrames{InScope: "s", ParentID: "a b"}, "parent id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			_, err := e.c.ListFrames(ctx, &req)
			require.ErrorIs(t, err, actors.ErrInvalidArgument)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err = e.c.ListFrames(ctx, &messages.ListFrames{Cursor: good})
	assert.NoError(t, err, "the untampered cursor is good")
}

// Pages are stable while writes go on: walking the listing a page at a
// time while new frames are pushed between pages returns every frame that
// existed at the start exactly once, in order (new frames are newer: they
// come before the cursor).
func TestListFramesPaginationIsStableUnderWrites(t *testing.T) {
	e := newEnv(t)
	for i := 0; i < 40; i++ {
		push(t, e.c, fmt.Sprintf("p-%d", i%3), "", 10)
		e.clock.Advance(time.Millisecond)
	}
	before := listAll(t, e.c, messages.ListFrames{}, 1000)
	require.Len(t, before, 40)
	var got []messages.FrameEntry
	req := messages.ListFrames{Limit: 7}
	for {
		r, err := e.c.ListFrames(ctx, &req, seeOwn)
		require.NoError(t, err)
		got = append(got, r.Frames...)
		// Writes between pages: new frames, and a status change.
		push(t, e.c, "p-new", "", 10)
		e.clock.Advance(time.Millisecond)
		if r.NextCursor == "" {
			break
		}
		req.Cursor = r.NextCursor
	}
	assert.Equal(t, ids(before), ids(got), "no duplicate, no gap")
}

// Read-your-writes: a write's reply carries its position; a listing that
// asks for it sees the write, one asked for a position not reached waits
// for it (parked) and answers once a write reaches it, and one whose
// position is never reached fails unavailable naming both positions.
func TestListFramesMinPosition(t *testing.T) {
	e := newEnv(t)
	r, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: mut("ryw"), Goal: "mine", Budget: budget.TokenBudget{Total: 10}})
	require.NoError(t, err)
	assert.Equal(t, e.seq(), r.Position, "a write's position is its last record's global sequence")
	assert.Equal(t, r.Position, e.c.WritePosition(""))
	got, err := e.c.ListFrames(ctx, &messages.ListFrames{InScope: "ryw"}, seeOwn)
	require.NoError(t, err)
	require.Len(t, got.Frames, 1, "the own write is seen")
	assert.GreaterOrEqual(t, got.Position, r.Position)

	// A repeated request answers with a position at or above the original's.
	req := &messages.PushFrame{Header: messages.Header{Scope: "ryw", RequestID: "rep-1"}, Goal: "again", Budget: budget.TokenBudget{Total: 10}}
	first, err := e.c.PushFrame(ctx, req)
	require.NoError(t, err)
	push(t, e.c, "other", "", 10)
	again, err := e.c.PushFrame(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, first.FrameID, again.FrameID)
	assert.GreaterOrEqual(t, again.Position, first.Position)
	assert.Positive(t, first.Position)

	// Parked until a write reaches the position.
	want := e.seq() + 1
	type answer struct {
		r   *messages.ListFramesReply
		err error
	}
	done := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		r, err := e.c.ListFrames(ctx, &messages.ListFrames{InScope: "later", MinPosition: want})
		done <- answer{r, err}
	}()
	select {
	case a := <-done:
		t.Fatalf("answered before the position was written: %+v %v", a.r, a.err)
	default:
	}
	later := push(t, e.c, "later", "", 10)
	a := <-done
	require.NoError(t, a.err)
	assert.GreaterOrEqual(t, a.r.Position, want)
	require.Len(t, a.r.Frames, 1)
	assert.Equal(t, later, a.r.Frames[0].FrameID)

	// Never reached: unavailable at the deadline, naming both positions.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	far := e.seq() + 1000
	_, err = e.c.ListFrames(short, &messages.ListFrames{MinPosition: far})
	require.ErrorIs(t, err, actors.ErrUnavailable)
	assert.Contains(t, err.Error(), fmt.Sprintf("asked for at least %d", far))
	assert.Contains(t, err.Error(), "registry index is at position")
}

// Removed runs leave the index: a retention pass removes the finished
// runs it deletes (the live root and the kept runs stay), destroy removes
// every frame of the scope; no entry is left whose frame is gone.
func TestListFramesAfterRetentionAndDestroy(t *testing.T) {
	e, root := chatEnv(t, "chat", 6)
	push(t, e.c, "bystander", "", 10)
	before := listAll(t, e.c, messages.ListFrames{InScope: "chat"}, 100)
	require.Len(t, before, 7)
	rep := retain(t, e, frames.RetentionPolicy{KeepLastN: 2, OnCompletion: frames.CompletionDelete}, "")
	var runs int
	for _, sc := range rep.Scopes {
		if sc.Scope == "chat" {
			runs = sc.Runs
		}
	}
	require.Equal(t, 4, runs)
	after := listAllAt(t, e, messages.ListFrames{InScope: "chat"})
	require.Len(t, after, 3, "the live root and the two kept runs: %v", ids(after))
	for _, f := range after {
		if f.FrameID == root {
			assert.Equal(t, "active", f.Status, "its runs finished")
			continue
		}
		g, err := e.c.GetFrame(ctx, &messages.GetFrame{Header: mut("chat"), FrameID: f.FrameID})
		require.NoError(t, err, "every listed frame is still there")
		assert.Equal(t, f.FrameID, g.Frame.ID)
	}

	_, err := e.c.DestroyScope(ctx, &messages.DestroyScope{Header: mut("chat"), Force: true})
	require.NoError(t, err)
	assert.Empty(t, listAllAt(t, e, messages.ListFrames{InScope: "chat"}), "destroy removes every frame of the scope")
	assert.Empty(t, listAllAt(t, e, messages.ListFrames{ScopePrefix: "chat"}))
	rest := listAllAt(t, e, messages.ListFrames{})
	require.Len(t, rest, 1)
	assert.Equal(t, "bystander", rest[0].Scope)

	// The scope starts over and lists again.
	again := push(t, e.c, "chat", "", 10)
	got := listAllAt(t, e, messages.ListFrames{InScope: "chat"})
	require.Len(t, got, 1)
	assert.Equal(t, again, got[0].FrameID)
}

// listAllAt lists at the store's current position (writes made by the
// server's own retention Client included).
func listAllAt(t *testing.T, e *env, req messages.ListFrames) []messages.FrameEntry {
	t.Helper()
	req.MinPosition = e.seq()
	return listAll(t, e.c, req, 1000)
}

// countingStore records where the registry reads the log from.
type countingStore struct {
	*eventstore.BoltStore
	mu    sync.Mutex
	froms []uint64
}

func (s *countingStore) ReadAll(ctx context.Context, from uint64, fn func(eventstore.Record) error) error {
	s.mu.Lock()
	s.froms = append(s.froms, from)
	s.mu.Unlock()
	return s.BoltStore.ReadAll(ctx, from, fn)
}

// After a restart the registry resumes from the position stored with its
// rows: it reads the log only after it (no rescan), and answers as before.
func TestRegistryResumesFromItsPosition(t *testing.T) {
	e := newEnv(t)
	for i := 0; i < 30; i++ {
		push(t, e.c, fmt.Sprintf("r-%d", i%4), "", 10)
		e.clock.Advance(time.Millisecond)
	}
	before := listAll(t, e.c, messages.ListFrames{}, 1000)
	require.Len(t, before, 30)
	stored := e.srv.RegistryPosition()
	require.Equal(t, e.seq(), stored)
	e.stop()

	st, err := eventstore.Open(e.path, &eventstore.Options{NoSync: true})
	require.NoError(t, err)
	cs := &countingStore{BoltStore: st}
	sys := quietSystem()
	srv, err := actors.Start(sys, cs, e.cfg)
	require.NoError(t, err)
	defer func() { srv.Stop(); sys.Shutdown(); _ = st.Close() }()
	assert.Equal(t, stored, srv.RegistryPosition(), "the follower starts at the stored position")
	c := srv.Client()
	r, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut("r-new"), Goal: "after restart", Budget: budget.TokenBudget{Total: 10}})
	require.NoError(t, err)
	after, err := c.ListFrames(ctx, &messages.ListFrames{Limit: 1000}, seeOwn)
	require.NoError(t, err)
	require.Len(t, after.Frames, 31)
	assert.Equal(t, r.FrameID, after.Frames[0].FrameID)
	assert.Equal(t, ids(before), ids(after.Frames[1:]))
	cs.mu.Lock()
	defer cs.mu.Unlock()
	require.NotEmpty(t, cs.froms)
	for _, from := range cs.froms {
		assert.Greater(t, from, stored, "the log is read after the stored position only")
	}
}

// Concurrent writers and readers (run with -race): every frame pushed is
// listed once the reader asks for its writes.
func TestListFramesUnderConcurrentWrites(t *testing.T) {
	e := newEnv(t)
	const writers, each = 4, 25
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				_, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: mut(fmt.Sprintf("cw-%d", w)), Goal: "g", Budget: budget.TokenBudget{Total: 1}})
				assert.NoError(t, err)
			}
		}()
	}
	stop := make(chan struct{})
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			r, err := e.c.ListFrames(ctx, &messages.ListFrames{Limit: 50})
			assert.NoError(t, err)
			assert.True(t, newestFirst(r.Frames))
		}
	}()
	wg.Wait()
	close(stop)
	<-readerDone
	all := listAll(t, e.c, messages.ListFrames{}, 1000)
	assert.Len(t, all, writers*each)
	seen := map[string]bool{}
	for _, k := range ids(all) {
		assert.False(t, seen[k], "listed twice: %s", k)
		seen[k] = true
	}
}

// A store without tables does not serve ListFrames: unavailable, said so.
func TestListFramesNotServedWithoutTables(t *testing.T) {
	sys := quietSystem()
	defer sys.Shutdown()
	cfg := testConfig(newFakeClock())
	cfg.RegistryOff = true
	srv, err := actors.Start(sys, eventstore.NewMemory(), cfg)
	require.NoError(t, err)
	defer srv.Stop()
	_, err = srv.Client().ListFrames(ctx, &messages.ListFrames{})
	require.ErrorIs(t, err, actors.ErrUnavailable)
	assert.Contains(t, err.Error(), "not served")
}

// A registry that first reads the log after a retention removed a live
// frame's push (an old file, a follower far behind) still lists that
// frame: from the scope's projection when it meets the retention's
// record, with its live children counted (a child live across the cut,
// and a child pushed after it), and not the runs the retention removed.
func TestRegistryStartedAfterRetentionListsLiveFrames(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) {
		c.RequestHorizon, c.ClockSkew = time.Minute, time.Second
		c.RegistryOff = true
	})
	const scope = "late"
	root, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: mut(scope), Goal: "chat", Budget: budget.TokenBudget{Total: 1_000_000}})
	require.NoError(t, err)
	var runs []string
	for i := range 5 {
		runs = append(runs, runChild(t, e.c, scope, root.FrameID, i))
	}
	e.clock.Advance(time.Hour)
	rep := retain(t, e, frames.RetentionPolicy{KeepLastN: 1, OnCompletion: frames.CompletionDelete}, "")
	require.Equal(t, 4, rep.Scopes[0].Runs)
	kid := push(t, e.c, scope, root.FrameID, 10) // after the cut: the root waits on it

	e.cfg.RegistryOff = false
	e.restart()
	got := listAllAt(t, e, messages.ListFrames{InScope: scope})
	byID := map[string]messages.FrameEntry{}
	for _, f := range got {
		byID[f.FrameID] = f
	}
	require.Len(t, got, 3, "the live root, the kept run and the new child: %v", ids(got))
	assert.Equal(t, "waiting", byID[root.FrameID].Status, "the seeded root counts its live child")
	assert.Equal(t, "chat", byID[root.FrameID].Goal)
	assert.Equal(t, "completed", byID[runs[4]].Status)
	assert.Equal(t, "active", byID[kid].Status)

	_, err = e.c.PopFrame(ctx, &messages.PopFrame{Header: mut(scope), FrameID: kid, Status: frames.StatusCompleted})
	require.NoError(t, err)
	r, err := e.c.ListFrames(ctx, &messages.ListFrames{InScope: scope, Statuses: []string{"active"}}, seeOwn)
	require.NoError(t, err)
	require.Len(t, r.Frames, 1)
	assert.Equal(t, root.FrameID, r.Frames[0].FrameID, "its last child ended: active again")
}

// TestListFramesHeldRequestsAreBounded: the registry holds at most
// Config.MaxWaiters requests for a MinPosition; past it, overloaded at
// once (not held), and a request without a MinPosition is still answered.
func TestListFramesHeldRequestsAreBounded(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) { c.MaxWaiters = 1 })
	errs := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() {
			short, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, err := e.c.ListFrames(short, &messages.ListFrames{MinPosition: 1 << 62})
			errs <- err
		}()
	}
	// The one that came second is refused at once; the other is held
	// until its deadline.
	assert.ErrorIs(t, <-errs, actors.ErrOverloaded)
	_, err := e.c.ListFrames(ctx, &messages.ListFrames{})
	require.NoError(t, err, "a request without a MinPosition is answered meanwhile")
	assert.ErrorIs(t, <-errs, actors.ErrUnavailable, "the held one ends at its deadline")
}
