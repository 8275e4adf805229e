package eventstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/stateindex/stateindex/frames"
)

// A continuation chain's links, resolved from the links' own records: the
// backward pointer (ContinuedFrom), the forward one (ContinuedTo) and the
// root (ChainRoot) every link carries. Live links come from the scope's
// state (the caller's LinkSource), finished ones from their frame.popped
// record (its FrameRecord), so that resolving a chain never folds a
// link's handles.

// ChainLink is one link of a chain as its records tell it.
type ChainLink struct {
	ID            string
	Status        frames.Status
	ContinuedFrom string
	ContinuedTo   string
	ChainRoot     string
	// PushSeq is the version of its frame.pushed (0: not known).
	PushSeq int64
	// Gone says the scope's store no longer holds any record of it (its
	// history was removed): a link known only because a neighbour names
	// it. Nothing beyond it, in that direction, is known.
	Gone bool
}

// Chain is a resolved chain: its links in order, root first.
type Chain struct {
	Links []ChainLink
	// Root is the chain's first link as the links record it (the first
	// of Links unless that one is gone and names no root).
	Root string
	// Head is the last link: the one that continues the work.
	Head string
}

// IDs returns the links' frame ids, root first.
func (c Chain) IDs() []string {
	out := make([]string, len(c.Links))
	for i, l := range c.Links {
		out[i] = l.ID
	}
	return out
}

// LinkSource answers one frame of the scope: ok false when the scope has
// no record of it at all.
type LinkSource func(ctx context.Context, id string) (link ChainLink, ok bool, err error)

// ErrChainCycle is what a chain whose links loop matches (errors.Is); the
// error names the frame met twice. It is a corruption of the store.
var ErrChainCycle = errors.New("eventstore: continuation chain links form a cycle")

// maxChainLinks bounds a walk whatever the links say.
const maxChainLinks = 1 << 20

// ResolveChain returns the chain id is a link of: backward from id by
// ContinuedFrom to the root, then forward by ContinuedTo to the head,
// with a visited set, so that corrupted links that loop are an error
// naming the frame (matching ErrCorrupt and ErrChainCycle), never a hang.
// A frame in no chain is a chain of one link. A frame src does not know
// is frames.ErrFrameNotFound. A neighbour src does not know ends the walk
// in its direction as a Gone link.
func ResolveChain(ctx context.Context, id string, src LinkSource) (Chain, error) {
	start, ok, err := src(ctx, id)
	if err != nil {
		return Chain{}, err
	}
	if !ok {
		return Chain{}, fmt.Errorf("%w: %q", frames.ErrFrameNotFound, id)
	}
	seen := map[string]bool{id: true}
	cycle := func(at string, from string) error {
		return &CorruptionError{Reason: fmt.Sprintf("frame %s: the chain of %s comes back to it from %s (its links form a cycle)",
			quoteString(at), quoteString(id), quoteString(from)), Err: ErrChainCycle}
	}
	var back []ChainLink
	for cur := start; cur.ContinuedFrom != "" && !cur.Gone; {
		if err := ctx.Err(); err != nil {
			return Chain{}, err
		}
		prev := cur.ContinuedFrom
		if seen[prev] || len(seen) > maxChainLinks {
			return Chain{}, cycle(prev, cur.ID)
		}
		seen[prev] = true
		l, ok, err := src(ctx, prev)
		if err != nil {
			return Chain{}, err
		}
		if !ok {
			l = ChainLink{ID: prev, Gone: true, ContinuedTo: cur.ID, ChainRoot: cur.ChainRoot}
		} else if l.ContinuedTo != "" && l.ContinuedTo != cur.ID {
			return Chain{}, &CorruptionError{Reason: fmt.Sprintf("frame %s: continued to %s, but %s says it continues it",
				quoteString(prev), quoteString(l.ContinuedTo), quoteString(cur.ID))}
		}
		back = append(back, l)
		cur = l
	}
	links := make([]ChainLink, 0, len(back)+1)
	for i := len(back) - 1; i >= 0; i-- {
		links = append(links, back[i])
	}
	links = append(links, start)
	for cur := start; cur.ContinuedTo != "" && !cur.Gone; {
		if err := ctx.Err(); err != nil {
			return Chain{}, err
		}
		next := cur.ContinuedTo
		if seen[next] || len(seen) > maxChainLinks {
			return Chain{}, cycle(next, cur.ID)
		}
		seen[next] = true
		l, ok, err := src(ctx, next)
		if err != nil {
			return Chain{}, err
		}
		if !ok {
			l = ChainLink{ID: next, Gone: true, ContinuedFrom: cur.ID, ChainRoot: cur.ChainRoot}
		} else if l.ContinuedFrom != "" && l.ContinuedFrom != cur.ID {
			return Chain{}, &CorruptionError{Reason: fmt.Sprintf("frame %s: continues %s, but %s says it is continued by it",
				quoteString(next), quoteString(l.ContinuedFrom), quoteString(cur.ID))}
		}
		links = append(links, l)
		cur = l
	}
	c := Chain{Links: links, Head: links[len(links)-1].ID, Root: links[0].ChainRoot}
	if c.Root == "" {
		c.Root = links[0].ID
	}
	return c, nil
}

// StoreLinks is the LinkSource of a scope: live links from live (the
// scope's state; nil: a frame whose last record is not its frame.popped
// is live, known from its frame.pushed), the others from their frame.popped record in
// store (a frame.popped written before it carried its record is rebuilt
// by LoadFinishedFrame). A pointer a link's record lacks is taken from the
// events that set it (FramePushed.ContinuedFrom and ChainRoot,
// FramePopped.ContinuedTo), so a chain resolves whether or not the fold
// copies them into the frame.
func StoreLinks(store Store, scope string, live func(id string) (ChainLink, bool)) LinkSource {
	return func(ctx context.Context, id string) (ChainLink, bool, error) {
		sp, indexed, err := store.Lookup(ctx, scope, FrameKey(id))
		if err != nil {
			return ChainLink{}, false, err
		}
		if live != nil {
			if l, ok := live(id); ok {
				if indexed && (l.ContinuedFrom == "" || l.ChainRoot == "") {
					if err := fillFromPush(ctx, store, scope, sp, &l); err != nil {
						return ChainLink{}, false, err
					}
				}
				return l, true, nil
			}
		}
		if !indexed {
			return ChainLink{}, false, nil
		}
		ev, err := readOne(ctx, store, scope, sp.Last)
		if err != nil {
			return ChainLink{}, false, err
		}
		var l ChainLink
		p, popped := ev.(*frames.FramePopped)
		popped = popped && p.Frame == id
		switch {
		case !popped:
			// Live (a caller without the state): what its push says.
			l = ChainLink{ID: id, Status: frames.StatusActive}
		case p.Final != nil:
			l = linkOf(*p.Final)
		default:
			f, err := LoadFinishedFrame(ctx, store, scope, id)
			if errors.Is(err, frames.ErrFrameNotFound) {
				return ChainLink{}, false, nil
			}
			if err != nil {
				return ChainLink{}, false, err
			}
			l = FrameLink(f)
		}
		if popped && l.ContinuedTo == "" {
			l.ContinuedTo = p.ContinuedTo
		}
		if l.ContinuedFrom == "" || l.ChainRoot == "" {
			if err := fillFromPush(ctx, store, scope, sp, &l); err != nil {
				return ChainLink{}, false, err
			}
		}
		return l, true, nil
	}
}

// fillFromPush takes the backward pointer and the root a link lacks from
// its frame.pushed record, when the store still holds it.
func fillFromPush(ctx context.Context, store Store, scope string, sp Span, l *ChainLink) error {
	base, err := store.StreamBase(ctx, scope)
	if err != nil || sp.First <= base.Version {
		return err
	}
	ev, err := readOne(ctx, store, scope, sp.First)
	if err != nil {
		return err
	}
	if p, ok := ev.(*frames.FramePushed); ok && p.Frame == l.ID {
		if l.ContinuedFrom == "" {
			l.ContinuedFrom = p.ContinuedFrom
		}
		if l.ChainRoot == "" {
			l.ChainRoot = p.ChainRoot
		}
		if l.PushSeq == 0 {
			l.PushSeq = sp.First
		}
	}
	return nil
}

// FrameLink is f as a link.
func FrameLink(f *frames.Frame) ChainLink { return linkOf(frames.RecordOf(f)) }

func linkOf(r frames.FrameRecord) ChainLink {
	return ChainLink{ID: r.ID, Status: r.Status, ContinuedFrom: r.ContinuedFrom, ContinuedTo: r.ContinuedTo,
		ChainRoot: r.ChainRoot, PushSeq: r.PushSeq}
}

// StateChain returns the chain holding id as the scope's projection keeps
// it (frames.State.ChainLinks: O(links), no log read), root first, each
// link with its pointers and the version of its push. ok is false when the
// state keeps no chain holding id (a frame in no chain, or one the state
// does not know). A chain the state keeps that does not lead from its root
// to its head (a cycle or a broken link: corrupted state) is an error
// matching ErrCorrupt and frames.ErrChainCorrupt, never a hang.
//
// The state knows what the log alone may not: a chain resumed after its
// head finished is linked only by the new link's frame.pushed, so a walk
// of the log (ResolveChain with StoreLinks) from a link before the resume
// stops at the head it resumed.
func StateChain(st *frames.State, id string) (c Chain, ok bool, err error) {
	links, root, err := st.ChainLinks(id)
	if err != nil {
		return Chain{}, false, &CorruptionError{Stream: st.Scope, Err: err,
			Reason: fmt.Sprintf("the continuation chain of frame %s as the scope's state keeps it (a cycle or a broken link)", quoteString(id))}
	}
	if root == "" {
		return Chain{}, false, nil
	}
	c = Chain{Root: root, Head: links[len(links)-1].ID, Links: make([]ChainLink, len(links))}
	prev := ""
	for i, l := range links {
		c.Links[i] = ChainLink{ID: l.ID, Status: l.Status, ContinuedFrom: prev, ContinuedTo: l.To, ChainRoot: root, PushSeq: l.PushSeq}
		prev = l.ID
	}
	return c, true, nil
}
