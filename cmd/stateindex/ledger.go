package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/internal/views"
)

func init() {
	register(command{name: "ledger", summary: "(--data DIR | --server HOST:PORT [--config FILE]) --scope S [--frame F] [--depth N] [--json]   print the spend ledger: max, reserved, outstanding, actual per frame, across scopes", run: ledgerCmd})
}

const defaultLedgerDepth = views.DefaultLedgerDepth

// The ledger tree is built in internal/views (the web inspector shows the
// same tree).
type (
	LedgerTree        = views.LedgerTree
	LedgerNode        = views.LedgerNode
	LedgerReservation = views.LedgerReservation
)

var dollars = views.Dollars

// ledgerCmd prints a scope's spend ledger as a tree: each frame with its
// spend limit, the ceiling its reservation gave it, what its reservations
// hold and what it spent, and under it its reservations; a reservation for
// another scope leads to the frames that work runs as there.
func ledgerCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("ledger")
	fs.SetOutput(stderr)
	dir := fs.String("data", "", "data directory (read the file; no server may hold it)")
	conn := addConnectFlags(fs)
	scope := fs.String("scope", "", "the scope whose ledger to print")
	frame := fs.String("frame", "", "start at this frame (default: every live frame of the scope)")
	depth := fs.Int("depth", defaultLedgerDepth, "follow reservations at most this many scopes deep")
	asJSON := fs.Bool("json", false, "print the tree as JSON (amounts in micro-units, budget.MicrosPerUnit per unit)")
	timeout := fs.Duration("timeout", 10*time.Second, "the command's deadline")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: stateindex ledger (--data DIR | --server HOST:PORT [--config FILE]) --scope S [--frame F] [--depth N] [--json]\n\n"+
			"Prints a scope's spend ledger: per frame its max (spend limit), reserved (the\n"+
			"ceiling the reservation it was pushed with gave it), outstanding (what its\n"+
			"reservations hold now) and actual (what it spent, settled children included),\n"+
			"in dollars; under each frame its reservations. A reservation for another\n"+
			"scope leads to the root frame it paid for there, printed with its subtree.\n\n")
		fs.PrintDefaults()
	}
	if err := parseArgs(fs, args, stdout, stderr); err != nil {
		return err
	}
	if (*dir == "") == (*conn.server == "") || *scope == "" || fs.NArg() > 0 || *depth < 0 {
		fmt.Fprintln(stderr, "stateindex ledger: give one of --data and --server, and --scope")
		return errUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	c, stop, err := readerClient(*dir, conn, *timeout, stderr)
	if err != nil {
		return heldHint(*dir, "ledger", err)
	}
	defer stop()
	tree, err := views.ReadLedger(ctx, c, *scope, *frame, *depth)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(tree)
	}
	printLedger(stdout, tree)
	return nil
}

// readerClient is the Client of a reading command: a read-only StateIndex
// in this process over dir's data file (ledgerOnFile), or the server at
// --server; stop ends what it started.
func readerClient(dir string, conn connectFlags, timeout time.Duration, stderr io.Writer) (*actors.Client, func(), error) {
	if dir != "" {
		return ledgerOnFile(dir, timeout)
	}
	c, err := conn.client(timeout, stderr)
	if err != nil {
		return nil, nil, err
	}
	return c, func() {}, nil
}

// ledgerOnFile starts a StateIndex in this process over dir's data file
// (no server may hold it) and returns its client and what stops it.
func ledgerOnFile(dir string, timeout time.Duration) (*actors.Client, func(), error) {
	store, err := openStore(dir, false, time.Second, true)
	if err != nil {
		return nil, nil, err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	cfg := actors.DefaultConfig()
	// The ledger is only read: nothing is signed with this key.
	cfg.TokenKey = make([]byte, keySize)
	if _, err := rand.Read(cfg.TokenKey); err != nil {
		store.Close()
		return nil, nil, err
	}
	// Nor are settlements delivered: the outbox stays off (a server does it),
	// and so does the state expirer.
	cfg.Logger, cfg.RegistryOff, cfg.OutboxOff, cfg.RequestTimeout = quiet, true, true, timeout
	cfg.StateExpiryCheck = -1
	srv, err := actors.Start(sys, store, cfg)
	if err != nil {
		sys.Shutdown()
		store.Close()
		return nil, nil, err
	}
	return srv.Client(), func() { srv.Stop(); sys.Shutdown(); store.Close() }, nil
}

// printLedger writes the tree: each frame, then its reservations (with the
// work each paid for under it), then its other children.
func printLedger(w io.Writer, t *LedgerTree) {
	var b bytes.Buffer
	at := t.Scope
	if t.Frame != "" {
		at += " from frame " + t.Frame
	}
	fmt.Fprintf(&b, "ledger of scope %s  version %d  at %s  (amounts in dollars)\n", at, t.Version, t.Now.Format(time.RFC3339))
	if len(t.Roots) == 0 {
		fmt.Fprintf(&b, "empty ledger: scope %s has no live frame and keeps no reservation\n", t.Scope)
	}
	for i, n := range t.Roots {
		printLedgerNode(&b, t.Scope, n, "", i == len(t.Roots)-1)
	}
	_, _ = w.Write(b.Bytes())
}

func printLedgerNode(w io.Writer, scope string, n *LedgerNode, indent string, last bool) {
	branch, next := branches(last)
	mark := ""
	if n.Scope != scope {
		mark = "[" + n.Scope + "] "
	}
	limit, reserved := "none", "-"
	switch {
	case n.Unread != "":
		limit = "?"
	case n.Max > 0:
		limit = dollars(n.Max)
	}
	if n.Reserved > 0 {
		reserved = dollars(n.Reserved)
	}
	late := ""
	if n.Late > 0 {
		late = "  late " + dollars(n.Late)
	}
	if n.Unread != "" {
		late += "  (" + n.Unread + ")"
	}
	fmt.Fprintf(w, "%s%s%s%s %s  max %s  reserved %s  outstanding %s  actual %s%s  %q\n", indent, branch, mark, n.Frame, n.Status,
		limit, reserved, dollars(n.Outstanding), dollars(n.Actual), late, clip(n.Goal, 60))
	items := len(n.Reservations) + len(n.Children)
	k := 0
	for _, rv := range n.Reservations {
		k++
		rb, rnext := branches(k == items)
		state := rv.State
		if rv.Why != "" {
			state += " (" + rv.Why + ")"
		}
		extra := ""
		if rv.Policy != "" {
			extra += "  policy " + rv.Policy
		}
		if rv.Late > 0 {
			extra += "  late " + dollars(rv.Late)
		}
		if o := rv.Outbox; o != nil && o.Pending() {
			extra += fmt.Sprintf("  outbox: %s to deliver", dollars(o.Reported-o.Delivered))
		}
		fmt.Fprintf(w, "%s%s%sreservation %s for %s  amount %s  settled %s  %s  lease ends %s%s\n", indent+next, rb, "$ ", rv.ID, rv.For,
			dollars(rv.Amount), dollars(rv.Settled), state, rv.LeaseEnds.Format(time.RFC3339), extra)
		switch {
		case rv.Work != nil:
			printLedgerNode(w, scope, rv.Work, indent+next+rnext, true)
		case rv.Note != "":
			fmt.Fprintf(w, "%s└─ (%s)\n", indent+next+rnext, rv.Note)
		}
	}
	for _, ch := range n.Children {
		k++
		printLedgerNode(w, scope, ch, indent+next, k == items)
	}
}

func branches(last bool) (string, string) {
	if last {
		return "└─ ", "   "
	}
	return "├─ ", "│  "
}
