package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/internal/views"
	"github.com/stateindex/stateindex/messages"
)

func init() {
	register(command{name: "inspect", summary: "(--data DIR | --store URL|env:NAME | --server HOST:PORT) [--scope S]   print each scope's frame tree", run: inspect})
}

// inspectMaxScopes bounds the scopes `inspect --server` without --scope
// prints (found in the registry, newest frames first).
const inspectMaxScopes = 100

func inspect(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("inspect")
	fs.SetOutput(stderr)
	dir := fs.String("data", "", "data directory (read the file; no server may hold it; default ./data without --server)")
	conn := addConnectFlags(fs)
	server := conn.server
	scope := fs.String("scope", "", "only this scope")
	timeout := fs.Duration("timeout", 30*time.Second, "the command's deadline (--server)")
	storeFlag := fs.String("store", "", storeFlagUsage)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: stateindex inspect --data DIR [--scope S]\n"+
			"       stateindex inspect --store URL|env:NAME [--scope S]\n"+
			"       stateindex inspect --server HOST:PORT [--config FILE] [--scope S]\n\n"+
			"Prints each scope's frame tree: status, depth, tokens used/total, handles,\n"+
			"suspensions, tool calls in doubt and abandoned. On a data file it first prints\n"+
			"the journal's state; --store reads a shared store (PostgreSQL); with --server\n"+
			"it asks a running server (reads only: it records nothing), finished frames\n"+
			"from its registry.\n\n"+recoveryNote+"\n")
		fs.PrintDefaults()
	}
	if err := parseArgs(fs, args, stdout, stderr); err != nil {
		return err
	}
	if n := btoi(*dir != "") + btoi(*server != "") + btoi(*storeFlag != ""); n > 1 {
		fmt.Fprintln(stderr, "stateindex inspect: give one of --data, --store and --server")
		return errUsage
	}
	if *server != "" {
		return inspectServer(conn, *scope, *timeout, stdout, stderr)
	}
	if *dir == "" && *storeFlag == "" {
		*dir = "./data"
	}
	ctx := context.Background()
	var store eventstore.Store
	where := *dir
	if *storeFlag != "" {
		url, err := resolveStoreFlag(*storeFlag)
		if err != nil {
			return err
		}
		st, db, err := openSharedStore(ctx, url, nil)
		if err != nil {
			return err
		}
		defer st.Close()
		store, where = st, "postgres "+db
	} else {
		bolt, err := openStore(*dir, false, time.Second, true)
		if err != nil {
			return heldHint(*dir, "inspect", err)
		}
		defer bolt.Close()
		fmt.Fprintln(stdout, journalLine(storeJournal(bolt)))
		for _, w := range bolt.Warnings() {
			fmt.Fprintln(stdout, "warning:", w)
		}
		store = bolt
	}
	var scopes []eventstore.StreamInfo
	if *scope != "" {
		info, err := store.Stream(ctx, *scope)
		if err != nil {
			return err
		}
		if info.Version == 0 {
			return fmt.Errorf("no scope %q in %s", *scope, where)
		}
		scopes = append(scopes, info)
	} else if err := store.Streams(ctx, func(i eventstore.StreamInfo) error { scopes = append(scopes, i); return nil }); err != nil {
		return err
	}
	if len(scopes) == 0 {
		fmt.Fprintln(stdout, "no scopes yet")
		return nil
	}
	for _, info := range scopes {
		st, err := eventstore.LoadAll(ctx, store, info.Stream, 0) // finished frames too
		if err != nil {
			return fmt.Errorf("scope %q: %w", info.Stream, err)
		}
		printScope(stdout, views.TreeFromState(st))
	}
	return nil
}

// inspectServer prints the trees of a running server's scopes: scope's, or
// those the registry lists (the newest frames' scopes first).
func inspectServer(conn connectFlags, scope string, timeout time.Duration, stdout, stderr io.Writer) error {
	c, _, err := readerClient("", conn, timeout, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	scopes := []string{scope}
	if scope == "" {
		if scopes, err = registryScopes(ctx, c, inspectMaxScopes); err != nil {
			return fmt.Errorf("listing scopes from the registry (give --scope to read one without it): %w", err)
		}
		if len(scopes) == 0 {
			fmt.Fprintln(stdout, "no scopes yet")
			return nil
		}
	}
	for _, s := range scopes {
		t, err := views.ReadScopeTree(ctx, c, s, views.TreeOptions{})
		if err != nil {
			return fmt.Errorf("scope %q: %w", s, err)
		}
		printScope(stdout, t)
	}
	if scope == "" && len(scopes) == inspectMaxScopes {
		fmt.Fprintf(stdout, "(the first %d scopes the registry lists; give --scope for another)\n", inspectMaxScopes)
	}
	return nil
}

// registryScopes lists up to max scopes from the registry, in the order
// of their newest frames.
func registryScopes(ctx context.Context, c *actors.Client, max int) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	cursor := ""
	for len(out) < max {
		page, err := c.ListFrames(ctx, &messages.ListFrames{Limit: 1000, Cursor: cursor})
		if err != nil {
			return nil, err
		}
		for _, f := range page.Frames {
			if !seen[f.Scope] && len(out) < max {
				seen[f.Scope] = true
				out = append(out, f.Scope)
			}
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	return out, nil
}

func printScope(w io.Writer, t *views.ScopeTree) {
	fmt.Fprintf(w, "scope %s  version %d  frames %d (%d live)  pending %d\n", t.Scope, t.Version, t.Frames, t.Live, t.PendingTotal)
	for _, n := range t.Notes {
		fmt.Fprintf(w, "  (%s)\n", n)
	}
	for i, r := range t.Roots {
		printFrame(w, r, "", i == len(t.Roots)-1)
	}
	fmt.Fprintln(w)
}

func printFrame(w io.Writer, f *views.FrameNode, indent string, last bool) {
	branch, next := branches(last)
	marker := ""
	if f.Top {
		marker = "  ◀ top"
	}
	if f.Orphan {
		marker += "  (parent " + short(f.ParentID) + " not shown)"
	}
	extra := ""
	if f.Suspension != nil {
		extra = " (" + string(f.Suspension.Reason)
		if l := f.Suspension.Limit; l != nil {
			extra += fmt.Sprintf(": %s %d/%d", l.Code, l.Current, l.Max)
		}
		extra += ")"
	}
	if doubt := f.InDoubt; len(doubt) > 0 {
		extra += fmt.Sprintf("  %d tool call(s) in doubt", len(doubt))
		var fenced []string
		for _, c := range doubt {
			if c.Epoch != 0 {
				fenced = append(fenced, clip(c.Name, 24)+" "+short(c.ID)+startedBy(c))
			}
		}
		if len(fenced) > 0 {
			extra += ": " + strings.Join(fenced, ", ")
		}
	}
	if ab := f.Abandoned; len(ab) > 0 {
		names := make([]string, len(ab))
		for i, c := range ab {
			names[i] = clip(c.Name, 24) + " " + short(c.ID) + startedBy(c)
		}
		extra += fmt.Sprintf("  %d tool call(s) abandoned: %s", len(ab), strings.Join(names, ", "))
	}
	total, handles := fmt.Sprint(f.Budget.Total), fmt.Sprint(f.Handles)
	if !f.Known {
		total, handles = "?", "?"
	}
	fmt.Fprintf(w, "%s%s%s %-9s depth %d  tokens %d/%s  handles %s%s  %q%s\n", indent, branch, short(f.ID), f.Status, f.Depth,
		f.Budget.Used, total, handles, extra, clip(f.Goal, 60), marker)
	for i, c := range f.Children {
		printFrame(w, c, indent+next, i == len(f.Children)-1)
	}
}

// startedBy names the owner that recorded a tool call's intent, when
// servers share the store (DESIGN §13): " by OWNER epoch N".
func startedBy(c frames.ToolCall) string {
	if c.Epoch == 0 {
		return ""
	}
	return fmt.Sprintf(" by %s epoch %d", clip(c.Owner, 40), c.Epoch)
}

var (
	short = views.Short
	clip  = views.Clip
)

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
