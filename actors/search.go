package actors

import (
	"context"
	"errors"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// SearchChain in the shell: the links are resolved from the scope (live
// ones from its state, on the shard) and the log (finished ones), and the
// log is searched in a job off the shard (eventstore.Search).

// chainResolver resolves the chain id is a link of. live are the chain's
// links the scope's state holds (copied on the shard); the rest are read
// from store. It is the one place that knows how a chain is found: chain
// state kept by the scope can replace it.
type chainResolver func(ctx context.Context, store eventstore.Store, scope, id string, live map[string]eventstore.ChainLink) (eventstore.Chain, error)

var resolveChain chainResolver = func(ctx context.Context, store eventstore.Store, scope, id string, live map[string]eventstore.ChainLink) (eventstore.Chain, error) {
	return eventstore.ResolveChain(ctx, id, eventstore.StoreLinks(store, scope, func(id string) (eventstore.ChainLink, bool) {
		l, ok := live[id]
		return l, ok
	}))
}

// liveLinks copies the scope's live frames as links (on the shard: the
// job reads the log only). A chain has one live link in practice, but
// which live frame it is may only be known from the log (pointers the fold
// does not copy), and a copy of each is small.
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
	id := r.FrameID
	f, err := frames.LookupFrame(h.cfg.Frames, st, r.FrameID)
	var fin *frames.FinishedError
	switch {
	case errors.As(err, &fin):
		id = fin.ID
	case err != nil:
		return replied(failure(r, toWire(err)))
	default:
		id = f.ID
	}
	live := liveLinks(st)
	scope, version := st.Scope, st.Version
	type found struct {
		chain eventstore.Chain
		res   eventstore.SearchResult
		err   error
	}
	return outcome{job: &job{scope: scope,
		run: func() any {
			ctx := context.Background()
			c, err := resolveChain(ctx, h.store, scope, id, live)
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
