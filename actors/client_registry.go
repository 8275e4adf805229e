package actors

import (
	"bytes"
	"context"
	"sort"
	"sync"
	"time"

	"github.com/stateindex/stateindex/messages"
)

// writePositions remembers a Client's highest write position per member
// ("" for a Client of one server), for read-your-writes.
type writePositions struct {
	mu  sync.Mutex
	pos map[string]uint64
}

func newWritePositions() *writePositions { return &writePositions{pos: map[string]uint64{}} }

func (w *writePositions) note(member string, p uint64) {
	if w == nil || p == 0 {
		return
	}
	w.mu.Lock()
	if p > w.pos[member] {
		w.pos[member] = p
	}
	w.mu.Unlock()
}

func (w *writePositions) get(member string) uint64 {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pos[member]
}

// noteWrite records a write reply's position under the member that holds
// req's scope.
func (c *Client) noteWrite(req messages.Request, reply any) {
	r, ok := reply.(interface{ WritePosition() uint64 })
	if !ok || c.positions == nil {
		return
	}
	member := ""
	if c.home != nil {
		member = c.home(req.ScopeName())
	}
	c.positions.note(member, r.WritePosition())
}

// WritePosition is the highest Position of a write this Client made on
// member ("" for a Client of one server; a cluster member's name
// otherwise).
func (c *Client) WritePosition(member string) uint64 { return c.positions.get(member) }

// ListFramesOptions are a ListFrames call's options beyond its request.
type ListFramesOptions struct {
	// SeeOwnWrites asks for an answer that reflects every write this
	// Client made (on each member: its highest write Position there), held
	// until the index reaches it or the context's deadline nears.
	SeeOwnWrites bool
}

// waitFor is how long the server may hold a request for its MinPosition:
// a little less than the context leaves, so that the server's answer
// (unavailable, naming the positions) arrives before the deadline.
func waitFor(ctx context.Context, def time.Duration) int64 {
	left := def
	if dl, ok := ctx.Deadline(); ok {
		left = time.Until(dl)
	}
	left -= min(left/5, time.Second)
	return max(left.Milliseconds(), 1)
}

// ListFrames lists frames across scopes, newest first, a page at a time
// (messages.ListFrames). A cluster Client asks every member and merges
// their pages by the same order (a member's scopes are its own, so one
// cursor serves them all); its reply's Positions has each member's, its
// entries their Member.
func (c *Client) ListFrames(ctx context.Context, req *messages.ListFrames, opts ...ListFramesOptions) (*messages.ListFramesReply, error) {
	var o ListFramesOptions
	for _, x := range opts {
		o.SeeOwnWrites = o.SeeOwnWrites || x.SeeOwnWrites
	}
	members := c.Members()
	ask := func(member string) (*messages.ListFramesReply, error) {
		r := *req
		if o.SeeOwnWrites {
			r.MinPosition = max(r.MinPosition, c.positions.get(member))
		}
		if r.MinPosition > 0 && r.WaitMillis == 0 {
			r.WaitMillis = waitFor(ctx, c.timeout)
		}
		return callOn[*messages.ListFramesReply](ctx, c, member, &r)
	}
	if len(members) == 1 {
		return ask(members[0])
	}
	replies := make([]*messages.ListFramesReply, len(members))
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i], errs[i] = ask(m)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return mergeLists(req, members, replies), nil
}

// mergeLists merges members' pages of one request: entries in the
// registry's order, no further than the first point some member has not
// examined beyond (its NextCursor), at most the limit.
func mergeLists(req *messages.ListFrames, members []string, replies []*messages.ListFramesReply) *messages.ListFramesReply {
	limit := req.Limit
	if limit <= 0 {
		limit = defaultListLimit
	}
	out := &messages.ListFramesReply{Positions: map[string]uint64{}}
	type keyed struct {
		k []byte
		e messages.FrameEntry
	}
	var all []keyed
	var frontier []byte // the earliest point up to which every member answered
	for i, r := range replies {
		out.Positions[members[i]] = r.Position
		for _, e := range r.Frames {
			e.Member = members[i]
			all = append(all, keyed{entrySuffix(&e), e})
		}
		if r.NextCursor != "" {
			if s, err := decodeCursor(r.NextCursor); err == nil && (frontier == nil || bytes.Compare(s, frontier) < 0) {
				frontier = s
			}
		}
	}
	sort.Slice(all, func(i, j int) bool { return bytes.Compare(all[i].k, all[j].k) < 0 })
	var last []byte
	more := false
	for _, k := range all {
		if frontier != nil && bytes.Compare(k.k, frontier) > 0 {
			more = true
			break
		}
		if len(out.Frames) == limit {
			more = true
			break
		}
		out.Frames = append(out.Frames, k.e)
		last = k.k
	}
	switch {
	case more && last != nil:
		out.NextCursor = encodeCursor(last)
	case frontier != nil:
		// Every entry up to the frontier was taken: resume there.
		if last == nil || bytes.Compare(frontier, last) > 0 {
			out.NextCursor = encodeCursor(frontier)
		} else {
			out.NextCursor = encodeCursor(last)
		}
	}
	return out
}
