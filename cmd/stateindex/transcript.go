package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
)

// A chain's transcript (export --chain): JSON Lines verifiable offline
// (eventstore.WriteTranscript, verify --transcript), or Markdown for a
// person or a model — the knowledge transcript: per link its goal, status,
// budget and cost, its handles in order, tool calls with their results,
// results, and the handoffs between links.

// mdContentCut is how much of a handle's content the Markdown shows.
const mdContentCut = 2000

// resolveExportChain resolves the chain id is a link of in scope: as the
// scope's state keeps it (its chains: a resume is linked there, while the
// log records it only on the new link's side), else — a frame the state
// keeps in no chain — from the links' records, live links from the state.
func resolveExportChain(ctx context.Context, store *eventstore.BoltStore, scope, id string) (eventstore.Chain, error) {
	info, err := store.Stream(ctx, scope)
	if err != nil {
		return eventstore.Chain{}, err
	}
	if info.Version == 0 {
		return eventstore.Chain{}, fmt.Errorf("no scope %q", scope)
	}
	st, _, err := eventstore.LoadState(ctx, store, scope, 0, 0, nil)
	if err != nil {
		return eventstore.Chain{}, err
	}
	if c, ok, err := eventstore.StateChain(st, id); err != nil || ok {
		return c, err
	}
	return eventstore.ResolveChain(ctx, id, eventstore.StoreLinks(store, scope, func(id string) (eventstore.ChainLink, bool) {
		if f := st.Frame(id); f != nil {
			return eventstore.FrameLink(f), true
		}
		return eventstore.ChainLink{}, false
	}))
}

// exportChain writes the transcript of the chain id is a link of.
func exportChain(ctx context.Context, store *eventstore.BoltStore, scope, id, format, archiveDir string, w io.Writer, stderr io.Writer) error {
	c, err := resolveExportChain(ctx, store, scope, id)
	if err != nil {
		return err
	}
	from, through, unreadable, err := eventstore.ChainRange(ctx, store, scope, c.Links, archiveDir)
	if err != nil {
		return err
	}
	if from == 0 {
		return fmt.Errorf("chain of %q in scope %q: no record of it is left", id, scope)
	}
	note := ""
	for _, u := range unreadable {
		// A transcript is one unbroken stretch of the log: it starts after
		// what cannot be read.
		if u.Through >= from {
			from = u.Through + 1
			note = fmt.Sprintf("versions %d..%d are not in this transcript: %s", u.From, u.Through, u.Why)
			fmt.Fprintf(stderr, "warning: %s\n", note)
		}
	}
	if from > through {
		return fmt.Errorf("chain of %q in scope %q: none of its versions can be read (%s)", id, scope, note)
	}
	if format == "md" {
		return writeChainMarkdown(ctx, store, scope, c, archiveDir, from, through, note, w)
	}
	h := eventstore.TranscriptHeader{Scope: scope, Chain: c.Root, Links: c.IDs(), HeadLink: c.Head, From: from, Through: through, Note: note}
	if err := eventstore.WriteTranscript(ctx, store, h, c.Links, archiveDir, w); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "exported the transcript of chain %q (%d link(s), head %q): scope %q versions %d..%d\n",
		c.Root, len(c.Links), c.Head, scope, from, through)
	return nil
}

// mdLink is what the Markdown says of one link.
type mdLink struct {
	id      string
	pushed  *frames.FramePushed
	popped  *frames.FramePopped
	cost    budget.Cost
	carried bool              // cost starts with what the continuation carried
	tools   map[string]string // call id -> name
	content map[string]string // stored content by hash
}

func writeChainMarkdown(ctx context.Context, store eventstore.Store, scope string, c eventstore.Chain, archiveDir string, from, through int64, note string, w io.Writer) error {
	links := map[string]*mdLink{}
	for _, l := range c.Links {
		links[l.ID] = &mdLink{id: l.ID, tools: map[string]string{}, content: map[string]string{}}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Chain %s — scope %s\n\n", c.Root, scope)
	fmt.Fprintf(&b, "Links (root first): %s. Head: %s. Log versions %d..%d.\n", strings.Join(c.IDs(), " → "), c.Head, from, through)
	if note != "" {
		fmt.Fprintf(&b, "\n> Note: %s\n", note)
	}
	n := 0
	index := map[string]int{}
	for i, l := range c.Links {
		index[l.ID] = i + 1
	}
	body := func(l *mdLink, h *frames.ContextHandle) string {
		text := h.Content
		if text == "" && h.ContentRef != "" {
			text = l.content[h.ContentRef]
		}
		if h.StoresContent {
			l.content[frames.ContentHash(h.Content)] = h.Content
		}
		if len(text) > mdContentCut {
			cut := mdContentCut
			for cut > 0 && !utf8Start(text[cut]) {
				cut--
			}
			text = text[:cut] + fmt.Sprintf("\n\n[… %d more bytes cut]", len(text)-cut)
		}
		return quote(text)
	}
	err := eventstore.ReadChainRange(ctx, store, scope, c.Links, archiveDir, from, through, func(r eventstore.Record) error {
		if r.Type == frames.TypeContentStored {
			ev, err := eventstore.DecodeFrameEvent(r)
			if err != nil {
				return err
			}
			cs := ev.(*frames.ContentStored)
			for _, l := range links {
				l.content[cs.Hash] = cs.Content
			}
			return nil
		}
		ev, err := eventstore.DecodeFrameEvent(r)
		if err != nil {
			return err
		}
		l := links[ev.EventMeta().Frame]
		if l == nil {
			return nil
		}
		switch e := ev.(type) {
		case *frames.FramePushed:
			n++
			l.pushed = e
			if e.Cost != nil { // a continuation carries the chain's cost on
				l.cost, l.carried = *e.Cost, true
			}
			fmt.Fprintf(&b, "\n## Link %d: %s\n\n", index[l.id], l.id)
			if from := e.ContinuedFrom; from != "" {
				// A continuation follows its predecessor's pop in one
				// append; a resume follows a link that had ended.
				if p := links[from]; p != nil && p.popped != nil && p.popped.Status != frames.StatusContinued {
					fmt.Fprintf(&b, "Resumes %s, which had ended %s, with a user's message (the last handle below).\n\n", from, p.popped.Status)
				} else {
					fmt.Fprintf(&b, "Continues %s.\n\n", from)
				}
			}
			fmt.Fprintf(&b, "- **Goal:** %s\n- **Budget:** %d tokens\n", oneLine(e.Goal), e.Budget.Total)
			if lim := e.Limits; lim != (budget.Limits{}) {
				fmt.Fprintf(&b, "- **Limits:** %+v\n", lim)
			}
			fmt.Fprintf(&b, "- **Pushed at version:** %d\n\n", r.Version)
		case *frames.FrameUpdated:
			if e.Goal != nil {
				fmt.Fprintf(&b, "- *Goal changed (v%d):* %s\n\n", r.Version, oneLine(*e.Goal))
			}
		case *frames.HandleAdded:
			role := string(e.Handle.Role)
			if role == "" {
				role = "unknown"
			}
			fmt.Fprintf(&b, "### %s (%s, %s) — v%d\n\n%s\n\n", e.Handle.ID, role, e.Handle.Kind, r.Version, body(l, &e.Handle))
		case *frames.ToolStarted:
			l.tools[e.CallID] = e.Name
		case *frames.ToolFinished:
			status := "ok"
			if e.IsError {
				status = "error"
			}
			fmt.Fprintf(&b, "### Tool call %s: %s (%s) — v%d\n\nCall:\n\n%s\n\nResult:\n\n%s\n\n", e.CallID, l.tools[e.CallID], status, r.Version,
				body(l, &e.CallHandle), body(l, &e.ResultHandle))
		case *frames.FrameCompacted:
			fmt.Fprintf(&b, "*Compacted (v%d, %s): %d handle(s) removed from the live context (%d → %d tokens); they stay above.*\n\n",
				r.Version, e.Strategy, len(e.Removed), e.OriginalTokens, e.FinalTokens)
			if e.Summary != nil {
				fmt.Fprintf(&b, "Summary %s:\n\n%s\n\n", e.Summary.ID, body(l, e.Summary))
			}
		case *frames.ResultAdded:
			fmt.Fprintf(&b, "- **Result %s** (%s): `%s`", e.Result.ID, e.Result.Kind, e.Result.Ref)
			if e.Result.Summary != "" {
				fmt.Fprintf(&b, " — %s", oneLine(e.Result.Summary))
			}
			b.WriteString("\n\n")
		case *frames.UsageRecorded:
			l.cost, _ = l.cost.PlusSaturating(e.Cost)
		case *frames.FramePopped:
			l.popped = e
			fmt.Fprintf(&b, "**Ended (v%d): %s.** Cost: %d input + %d output tokens, %d turn(s), %d µ$ spent%s; %d tokens charged.\n\n",
				r.Version, e.Status, l.cost.InputTokens, l.cost.OutputTokens, l.cost.Turns, l.cost.SpendMicros, l.costNote(), e.ChargedTokens)
			if e.ContinuedTo != "" {
				at := int64(0)
				if e.Final != nil {
					at = e.Final.ContextTokens
				}
				fmt.Fprintf(&b, "➜ **Handoff:** continued at %d tokens to %s.\n\n", at, e.ContinuedTo)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, l := range c.Links {
		if ml := links[l.ID]; ml.pushed == nil {
			fmt.Fprintf(&b, "\n## Link %d: %s\n\n*Its records are not in this transcript (removed).*\n", index[l.ID], l.ID)
		} else if ml.popped == nil {
			fmt.Fprintf(&b, "**Live** (%s): cost so far %d input + %d output tokens, %d turn(s)%s.\n", l.Status, ml.cost.InputTokens, ml.cost.OutputTokens, ml.cost.Turns, ml.costNote())
		}
	}
	_, err = io.WriteString(w, b.String())
	return err
}

// costNote says when a link's cost is the chain's so far (a continuation
// carries its predecessor's cost on: limits apply to the chain).
func (l *mdLink) costNote() string {
	if l.carried {
		return " (the chain's so far, carried on by the continuation)"
	}
	return ""
}

func utf8Start(c byte) bool { return c&0xC0 != 0x80 }

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// quote renders text as a Markdown block quote.
func quote(s string) string {
	if s == "" {
		return "> (empty)"
	}
	return "> " + strings.ReplaceAll(s, "\n", "\n> ")
}

// verifyTranscript checks a transcript file (verify --transcript).
func verifyTranscript(path, pubPath string, stdout io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var pub []byte
	if pubPath != "" {
		k, err := loadPublicKey(pubPath)
		if err != nil {
			return fmt.Errorf("--public-key: %w", err)
		}
		pub = k
	}
	info, err := eventstore.VerifyTranscript(f, pub)
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("%s: %w", path, err)}
	}
	sig := "signatures not checked (no public key)"
	if pub != nil {
		sig = fmt.Sprintf("%d signatures verified", info.SignaturesVerified)
	}
	h := info.Header
	fmt.Fprintf(stdout, "ok: transcript %s: chain %q of scope %q (%d links, head %q), versions %d..%d, %d records chained from %s… to %s…, %d checkpoints, %s\n",
		path, h.Chain, h.Scope, len(h.Links), h.HeadLink, h.From, h.Through, info.Records, h.Prev[:8], h.Head[:8], info.Checkpoints, sig)
	return nil
}
