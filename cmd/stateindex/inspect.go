package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
)

func init() {
	register(command{name: "inspect", summary: "--data DIR | --store URL|env:NAME [--scope S]   print each scope's frame tree", run: inspect})
}

func inspect(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("data", "./data", "data directory")
	scope := fs.String("scope", "", "only this scope")
	storeFlag := fs.String("store", "", storeFlagUsage)
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: stateindex inspect --data DIR [--scope S]\n"+
			"       stateindex inspect --store URL|env:NAME [--scope S]\n\n"+
			"Prints the journal's state (of a data directory), then each scope's frame tree.\n\n"+recoveryNote+"\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return errUsage
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
			return err
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
		printScope(stdout, st)
	}
	return nil
}

func printScope(w io.Writer, st *frames.State) {
	live := len(st.LiveFrames())
	fmt.Fprintf(w, "scope %s  version %d  frames %d (%d live)  pending %d\n", st.Scope, st.Version, len(st.Frames), live, len(st.Pending()))
	var roots []*frames.Frame
	for _, id := range st.Order {
		if f := st.Frames[id]; f.ParentID == "" {
			roots = append(roots, f)
		}
	}
	top := st.TopOfStack()
	for i, r := range roots {
		printFrame(w, st, r, "", i == len(roots)-1, top)
	}
	fmt.Fprintln(w)
}

func printFrame(w io.Writer, st *frames.State, f *frames.Frame, indent string, last bool, top *frames.Frame) {
	branch, next := "├─ ", "│  "
	if last {
		branch, next = "└─ ", "   "
	}
	marker := ""
	if f == top {
		marker = "  ◀ top"
	}
	extra := ""
	if f.Suspension != nil {
		extra = " (" + string(f.Suspension.Reason)
		if l := f.Suspension.Limit; l != nil {
			extra += fmt.Sprintf(": %s %d/%d", l.Code, l.Current, l.Max)
		}
		extra += ")"
	}
	if doubt := f.InDoubt(); len(doubt) > 0 {
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
	if ab := f.Abandoned(); len(ab) > 0 {
		names := make([]string, len(ab))
		for i, c := range ab {
			names[i] = clip(c.Name, 24) + " " + short(c.ID) + startedBy(c)
		}
		extra += fmt.Sprintf("  %d tool call(s) abandoned: %s", len(ab), strings.Join(names, ", "))
	}
	fmt.Fprintf(w, "%s%s%s %-9s depth %d  tokens %d/%d  handles %d%s  %q%s\n", indent, branch, short(f.ID), f.Status, f.Depth,
		f.Budget.Used, f.Budget.Total, len(f.Handles), extra, clip(f.Goal, 60), marker)
	for i, id := range f.Children {
		printFrame(w, st, st.Frames[id], indent+next, i == len(f.Children)-1, top)
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

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	i := n - len("…")
	for i > 0 && s[i]&0xC0 == 0x80 { // back off to a rune boundary
		i--
	}
	return s[:i] + "…"
}
