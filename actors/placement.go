package actors

import (
	"context"
	"hash/fnv"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/messages"
)

// A server's share of the scopes (DESIGN §5, §13). A standalone server and
// a member of a node-local cluster own every scope that reaches them (a
// node-local member's gateway refuses the others by home). A member of a
// shared-store cluster serves any scope asked of it, but owns — keeps in
// its cache and runs background work for — only the scopes that placement
// gives it under its current view of the live members (SharedOwner): when
// that view changes, each shard drops the cached scopes it no longer owns
// and answers their parked waits "moved: resend", and a scope it does not
// own is dropped again as soon as the request a stale caller sent here is
// answered. A dropped scope is loaded from the shared store the next time,
// taking a new owner epoch; the fencing of the store (eventstore.Fencer),
// not placement, is what keeps a second writer out.

// placement is a server's current share of the scopes.
type placement struct {
	p atomic.Pointer[ownership]
}

// ownership is one view: owns says whether a scope is this server's;
// live is the view it was computed from (nil for "every scope").
type ownership struct {
	owns func(scope string) bool
	live []string
}

func ownsNone(string) bool { return false }

// set installs a new view.
func (p *placement) set(owns func(string) bool, live []string) {
	p.p.Store(&ownership{owns: owns, live: live})
}

// owns reports whether scope is this server's under the current view.
func (p *placement) owns(scope string) bool {
	if p == nil {
		return true
	}
	o := p.p.Load()
	return o == nil || o.owns(scope)
}

// owns reports whether scope is this server's to keep and to run
// background work for (retention, expiry, the outbox).
func (s *Server) owns(scope string) bool { return s.place.owns(scope) }

// placementChanged tells a shard that its server's share changed.
type placementChanged struct{}

// replace installs a view and tells every shard.
func (s *Server) replacePlacement(owns func(string) bool, live []string) {
	s.place.set(owns, live)
	for _, pid := range s.shards {
		s.sys.Root.Send(pid, &placementChanged{})
	}
}

// dropUnowned drops every cached scope the server no longer owns that has
// nothing in flight, and answers the parked waits of every scope it no
// longer owns (the caller resends them to the new owner).
func (s *shard) dropUnowned(c actor.Context) {
	for _, scope := range s.h.cache.Keys() {
		s.idle(scope)
	}
	for scope, sw := range s.parked.scopes {
		if s.place.owns(scope) {
			continue
		}
		for _, g := range sw.frames {
			if len(g.ws) > 0 {
				s.answerGroup(c, g, failure(g.ws[0].req, messages.Errorf(messages.CodeUnavailable,
					"scope %q moved to another member: the wait on frame %q ended unanswered; resend it", scope, g.ws[0].req.FrameID)))
			}
		}
	}
}

// idle drops scope from the cache when this server does not own it and
// nothing of it is in flight (see the top of this file).
func (s *shard) idle(scope string) {
	if s.place.owns(scope) {
		return
	}
	if _, busy := s.waiting[scope]; busy || s.h.inFlight[scope] > 0 {
		return
	}
	s.h.cache.Remove(scope)
}

// SharedOwner returns the member among live that serves scope in a
// shared-store cluster: the one with the highest rendezvous score (as
// HomeOf, over the live members instead of the configured ones), "" when
// none is live. A scope moves only when its owner leaves or a member
// with a higher score for it joins.
func SharedOwner(scope string, live []string) string { return HomeOf(scope, live) }

// globalKey is the placement key of a global request (one that names no
// scope) on a shared-store cluster Client that is not a member: every
// member reads the same log, so any will do; the operation picks one.
func globalKey(op messages.Op) string { return "\x00global/" + strconv.Itoa(int(op)) }

// memberTable is the name of a table of member's own (for a member of a
// shared-store cluster, which shares the store's tables with the others):
// base, a dot, and a hash of the member's name (table names are
// [a-z0-9._-]).
func memberTable(base, member string) string {
	h := fnv.New64a()
	h.Write([]byte(member))
	return base + ".m" + strconv.FormatUint(h.Sum64(), 16)
}

// renamedTables is a store whose table from is table to: the registry
// index of a member of a shared-store cluster, which folds the shared log
// into an index of its own (two followers folding into one index would
// count some events twice).
type renamedTables struct {
	eventstore.Store
	t        eventstore.Tables
	from, to string
}

func (r renamedTables) name(table string) string {
	if table == r.from {
		return r.to
	}
	return table
}

func (r renamedTables) TableWrite(ctx context.Context, table string, ops []eventstore.TableOp) error {
	return r.t.TableWrite(ctx, r.name(table), ops)
}

func (r renamedTables) TableGet(ctx context.Context, table string, key []byte) ([]byte, bool, error) {
	return r.t.TableGet(ctx, r.name(table), key)
}

func (r renamedTables) TableScan(ctx context.Context, table string, prefix, from []byte, reverse bool, fn func(k, v []byte) (bool, error)) error {
	return r.t.TableScan(ctx, r.name(table), prefix, from, reverse, fn)
}

// WatchCommits passes the store's CommitWatcher through (the follower
// wakes on it), or polls LastSeq as watchCommits does for a store without.
func (r renamedTables) WatchCommits(fn func(lastSeq uint64)) (stop func()) {
	return watchCommits(r.Store, fn)
}

// listCached asks a shard for the scopes it holds in memory.
type listCached struct{}

// CachedScopes lists the scopes the server holds in memory (its shards'
// caches), sorted. On a member of a shared-store cluster they are, once
// idle, the scopes it owns.
func (s *Server) CachedScopes() []string {
	var out []string
	for _, pid := range s.shards {
		r, err := s.sys.Root.RequestFuture(pid, &listCached{}, 10*time.Second).Result()
		if keys, ok := r.([]string); ok && err == nil {
			out = append(out, keys...)
		}
	}
	slices.Sort(out)
	return out
}
