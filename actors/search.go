package actors

import (
	"context"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// SearchChain in the shell: the chain is resolved from the scope's state
// (its chains, on the shard) or, for what the state keeps in no chain, from
// the log, and the log is searched in a job off the shard
// (eventstore.Search).

// chainQuery is what the shard copies of the scope's state for resolving
// the chain frame id is a link of: the chain as the state keeps it (known),
// or, when the state keeps none holding a frame it does not hold live, the
// live frames as links for a walk of the log.
type chainQuery struct {
	id    string
	known bool
	chain eventstore.Chain
	err   error // the state's chain is corrupt
	live  map[string]eventstore.ChainLink
}

// chainQueryOf reads what resolveChain needs of st for frame id (on the
// shard; O(links) for a chain the state keeps, no log read).
func chainQueryOf(st *frames.State, id string) chainQuery {
	q := chainQuery{id: id}
	if q.chain, q.known, q.err = eventstore.StateChain(st, id); q.err != nil || q.known {
		return q
	}
	if f := st.Frames[id]; f != nil { // live, in no chain: a chain of one
		l := eventstore.FrameLink(f)
		q.known, q.chain = true, eventstore.Chain{Links: []eventstore.ChainLink{l}, Root: id, Head: id}
		return q
	}
	q.live = liveLinks(st)
	return q
}

// chainResolver resolves the chain of q (off the shard).
type chainResolver func(ctx context.Context, store eventstore.Store, scope string, q chainQuery) (eventstore.Chain, error)

// resolveChain is the one place that knows how a chain is found: with the
// projection's chain (State.ChainLinks, copied on the shard) whenever the
// state keeps one holding the frame; otherwise — a finished frame the
// state keeps in no chain — by walking the links' records in the log
// (eventstore.ResolveChain: a cycle in corrupted records is an error
// naming the frame, never a hang), the live links from the state's copy.
var resolveChain chainResolver = func(ctx context.Context, store eventstore.Store, scope string, q chainQuery) (eventstore.Chain, error) {
	switch {
	case q.err != nil:
		return eventstore.Chain{}, q.err
	case q.known:
		return q.chain, nil
	}
	return eventstore.ResolveChain(ctx, q.id, eventstore.StoreLinks(store, scope, func(id string) (eventstore.ChainLink, bool) {
		l, ok := q.live[id]
		return l, ok
	}))
}

// liveLinks copies the scope's live frames as links (on the shard: the
// job reads the log only): for a walk of the log, whose pointers may name
// a live frame.
func liveLinks(st *frames.State) map[string]eventstore.ChainLink {
	out := make(map[string]eventstore.ChainLink, len(st.Frames))
	for id, f := range st.Frames {
		if f.Status.Live() {
			out[id] = eventstore.FrameLink(f)
		}
	}
	return out
}

// searchChain answers SearchChain: the frame is looked up on the shard (a
// frame the scope never had, another scope's included, is not found) and
// the chain resolved and searched in a job.
func (h *handler) searchChain(st *frames.State, r *messages.SearchChain) outcome {
	id, _, _, err := h.lookupLink(st, r.FrameID)
	if err != nil {
		return replied(failure(r, toWire(err)))
	}
	q := chainQueryOf(st, id)
	scope, version := st.Scope, st.Version
	type found struct {
		chain eventstore.Chain
		res   eventstore.SearchResult
		err   error
	}
	return outcome{job: &job{scope: scope,
		run: func() any {
			ctx := context.Background()
			c, err := resolveChain(ctx, h.store, scope, q)
			if err != nil {
				return found{err: err}
			}
			res, err := eventstore.Search(ctx, h.store, eventstore.SearchQuery{Scope: scope, Links: c.Links,
				Text: r.Query, Regex: r.Regex, Limit: r.Limit, Cursor: r.Cursor})
			return found{chain: c, res: res, err: err}
		},
		finish: func(v any) outcome {
			fd := v.(found)
			if fd.err != nil {
				return replied(failure(r, toWire(fd.err)))
			}
			out := &messages.SearchChainReply{Result: messages.Result{Version: version}, Next: fd.res.Next,
				Links: fd.chain.IDs(), Head: fd.chain.Head}
			for _, hit := range fd.res.Hits {
				out.Hits = append(out.Hits, messages.SearchHit{FrameID: hit.FrameID, ItemID: hit.ItemID, Version: hit.Version,
					Kind: hit.Kind, Snippet: hit.Snippet})
			}
			for _, u := range fd.res.Unsearched {
				out.Unsearched = append(out.Unsearched, messages.VersionRange{From: u.From, Through: u.Through, Why: u.Why})
			}
			return replied(out)
		}}}
}
