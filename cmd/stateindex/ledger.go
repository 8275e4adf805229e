package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

func init() {
	register(command{name: "ledger", summary: "(--data DIR | --server HOST:PORT [--config FILE]) --scope S [--frame F] [--depth N] [--json]   print the spend ledger: max, reserved, outstanding, actual per frame, across scopes", run: ledgerCmd})
}

// defaultLedgerDepth bounds how many scopes deep the tree follows
// reservations.
const defaultLedgerDepth = 8

// ledgerCmd prints a scope's spend ledger as a tree: each frame with its
// spend limit, the ceiling its reservation gave it, what its reservations
// hold and what it spent, and under it its reservations; a reservation for
// another scope leads to the frames that work runs as there.
func ledgerCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ledger", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("data", "", "data directory (read the file; no server may hold it)")
	conn := addConnectFlags(fs)
	scope := fs.String("scope", "", "the scope whose ledger to print")
	frame := fs.String("frame", "", "start at this frame (default: every live frame of the scope)")
	depth := fs.Int("depth", defaultLedgerDepth, "follow reservations at most this many scopes deep")
	asJSON := fs.Bool("json", false, "print the tree as JSON (amounts in micro-units, budget.MicrosPerUnit per unit)")
	timeout := fs.Duration("timeout", 10*time.Second, "the command's deadline")
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: stateindex ledger (--data DIR | --server HOST:PORT [--config FILE]) --scope S [--frame F] [--depth N] [--json]\n\n"+
			"Prints a scope's spend ledger: per frame its max (spend limit), reserved (the\n"+
			"ceiling the reservation it was pushed with gave it), outstanding (what its\n"+
			"reservations hold now) and actual (what it spent, settled children included),\n"+
			"in dollars; under each frame its reservations. A reservation for another\n"+
			"scope leads to the root frame it paid for there, printed with its subtree.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if (*dir == "") == (*conn.server == "") || *scope == "" || fs.NArg() > 0 || *depth < 0 {
		fmt.Fprintln(stderr, "stateindex ledger: give one of --data and --server, and --scope")
		return errUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	c, stop, err := readerClient(*dir, conn, *timeout, stderr)
	if err != nil {
		return err
	}
	defer stop()
	tree, err := readLedger(ctx, c, *scope, *frame, *depth)
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

// LedgerTree is what `stateindex ledger` prints: the scope's frames (or
// --frame's subtree), roots first. Amounts are micro-units.
type LedgerTree struct {
	Scope   string        `json:"scope"`
	Frame   string        `json:"frame,omitempty"`
	Version int64         `json:"version"`
	Now     time.Time     `json:"now"`
	Roots   []*LedgerNode `json:"roots"`
}

// LedgerNode is one frame of the tree.
type LedgerNode struct {
	Scope  string `json:"scope"`
	Frame  string `json:"frame"`
	Parent string `json:"parent,omitempty"`
	Goal   string `json:"goal,omitempty"`
	Status string `json:"status"`
	// Finished: the frame is no longer live (its record read from the log).
	Finished bool `json:"finished,omitempty"`
	// Max is its spend limit (0: none), Reserved the ceiling of the
	// reservation it was pushed with (Reservation; 0: none), Outstanding
	// what its unexpired reservations hold, Actual what it spent with its
	// settled children, Late what was charged after it finished.
	Max          int64                `json:"max_micros"`
	Reserved     int64                `json:"reserved_micros"`
	Reservation  string               `json:"reservation,omitempty"`
	Outstanding  int64                `json:"outstanding_micros"`
	Actual       int64                `json:"actual_micros"`
	Late         int64                `json:"late_micros,omitempty"`
	Reservations []*LedgerReservation `json:"reservations,omitempty"`
	Children     []*LedgerNode        `json:"children,omitempty"`
	// Unread says why a finished frame's record could not be read: its
	// max is then unknown and Actual is what its reservation settled (or
	// its binding reported).
	Unread string `json:"unread,omitempty"`
}

// LedgerReservation is one reservation of a frame, with the work it paid
// for: a child here, or the root frame (and its subtree) in scope For.
type LedgerReservation struct {
	ID string `json:"id"`
	// For is the scope of the work.
	For     string `json:"for"`
	Amount  int64  `json:"amount_micros"`
	Ceiling int64  `json:"ceiling_micros"`
	Settled int64  `json:"settled_micros"`
	Late    int64  `json:"late_micros,omitempty"`
	// State is open, bound, expired, returned or settled; Why says why a
	// returned one was (released, unused, destroyed).
	State string `json:"state"`
	// Child is the frame bound to it here (a child in its own scope), or
	// the root it was settled for in scope For.
	Child     string    `json:"child,omitempty"`
	Why       string    `json:"why,omitempty"`
	Policy    string    `json:"policy,omitempty"`
	LeaseEnds time.Time `json:"lease_ends"`
	// Outbox is the work scope's binding: what it reported and what the
	// reserving scope acknowledged (another scope's work only).
	Outbox *frames.Binding `json:"outbox,omitempty"`
	Work   *LedgerNode     `json:"work,omitempty"`
	// Note says why Work is missing (not pushed yet, past --depth, ...).
	Note string `json:"note,omitempty"`
}

// ledgerReader reads ledgers through a client, each scope once.
type ledgerReader struct {
	ctx    context.Context
	c      *actors.Client
	scopes map[string]*scopeLedger
	shown  map[string]bool // scope + "\x00" + frame of the nodes placed in the tree
	depth  int
}

// scopeLedger is one scope's ledger as read, its frames by id.
type scopeLedger struct {
	reply *messages.GetLedgerReply
	nodes map[string]*LedgerNode
	roots []*LedgerNode
	bind  map[string]frames.Binding // by reservation id
}

func readLedger(ctx context.Context, c *actors.Client, scope, frame string, depth int) (*LedgerTree, error) {
	r := &ledgerReader{ctx: ctx, c: c, scopes: map[string]*scopeLedger{}, shown: map[string]bool{}, depth: depth}
	top, err := r.read(scope, frame)
	if err != nil {
		return nil, err
	}
	if frame == "" {
		r.scopes[scope] = top
	}
	t := &LedgerTree{Scope: scope, Frame: frame, Version: top.reply.Version, Now: time.Unix(0, top.reply.Now).UTC(), Roots: top.roots}
	for _, n := range t.Roots {
		if err := r.resolve(n, 0); err != nil {
			return nil, err
		}
	}
	if t.Roots == nil {
		t.Roots = []*LedgerNode{}
	}
	return t, nil
}

// read reads scope's ledger (frame's part when set) and builds its forest:
// a child pushed with a reservation of its parent goes under that
// reservation, any other child under its parent.
func (r *ledgerReader) read(scope, frame string) (*scopeLedger, error) {
	reply, err := r.c.GetLedger(r.ctx, &messages.GetLedger{Header: messages.Header{Scope: scope}, FrameID: frame})
	if err != nil {
		return nil, fmt.Errorf("scope %q: %w", scope, err)
	}
	sl := &scopeLedger{reply: reply, nodes: map[string]*LedgerNode{}, bind: map[string]frames.Binding{}}
	for _, b := range reply.Bindings {
		sl.bind[b.Reservation] = b
	}
	var order []*LedgerNode
	for _, row := range reply.Frames {
		n := &LedgerNode{Scope: scope, Frame: row.Frame, Parent: row.Parent, Goal: row.Goal, Status: row.Status.String(),
			Finished: row.Finished, Max: row.Max, Reserved: row.Reserved, Reservation: row.Reservation, Outstanding: row.Outstanding,
			Actual: row.Actual, Late: row.Late}
		for i := range row.Reservations {
			n.Reservations = append(n.Reservations, reservationOf(&row.Reservations[i], scope, reply.Now))
		}
		if row.Finished {
			var reported int64 // its spend, if it is the root of a binding here
			for _, b := range reply.Bindings {
				if b.Root == row.Frame {
					reported = b.Reported
				}
			}
			if err := r.fillOr(n, reported); err != nil {
				return nil, err
			}
			if b, ok := sl.bind[n.Reservation]; ok && n.Reserved == 0 {
				n.Reserved = b.Ceiling // a root bound to another scope's reservation
			}
			for i := range row.Reservations {
				if rv := &row.Reservations[i]; !rv.Expired(scope, reply.Now) {
					n.Outstanding += rv.Held()
				}
			}
		}
		sl.nodes[n.Frame] = n
		order = append(order, n)
	}
	if frame != "" && sl.nodes[frame] == nil && len(order) == 0 {
		// A finished frame that holds no reservation: its record alone.
		n := &LedgerNode{Scope: scope, Frame: frame}
		if err := r.fill(n); err != nil {
			return nil, err
		}
		sl.nodes[frame] = n
		order = append(order, n)
	}
	// The children reservations here were bound to, finished and holding
	// none of their own, are read from the log.
	placed := map[string]bool{}
	for _, n := range order {
		for _, rv := range n.Reservations {
			if rv.For != scope || rv.Child == "" {
				continue
			}
			ch := sl.nodes[rv.Child]
			if ch == nil {
				ch = &LedgerNode{Scope: scope, Frame: rv.Child}
				if err := r.fillOr(ch, rv.Settled); err != nil {
					return nil, err
				}
				sl.nodes[ch.Frame] = ch
			}
			if ch.Reserved == 0 {
				ch.Reserved, ch.Reservation = rv.Ceiling, rv.ID
			}
			rv.Work, placed[ch.Frame] = ch, true
		}
	}
	for _, n := range order {
		if placed[n.Frame] {
			continue
		}
		if p := sl.nodes[n.Parent]; p != nil && n.Parent != "" {
			p.Children = append(p.Children, n)
			continue
		}
		sl.roots = append(sl.roots, n)
	}
	return sl, nil
}

// fill reads a finished frame's record: its max, actual and status.
func (r *ledgerReader) fill(n *LedgerNode) error {
	g, err := r.c.GetFrame(r.ctx, &messages.GetFrame{Header: messages.Header{Scope: n.Scope}, FrameID: n.Frame})
	if err != nil {
		return fmt.Errorf("scope %q, frame %q: %w", n.Scope, n.Frame, err)
	}
	f := g.Frame
	n.Parent, n.Goal, n.Status, n.Max, n.Actual = f.ParentID, f.Goal, f.Status.String(), f.Limits.SpendMicros, f.Cost.SpendMicros
	n.Finished = !f.Status.Live()
	if n.Reservation == "" {
		n.Reservation = f.Reservation
	}
	return nil
}

// fillOr reads a finished frame's record; when the server cannot give it
// (frame_not_found), the node keeps what the ledger knows: actual, the
// spend its reservation settled or its binding reported.
func (r *ledgerReader) fillOr(n *LedgerNode, actual int64) error {
	err := r.fill(n)
	if err == nil || !errors.Is(err, actors.ErrFrameNotFound) {
		return err
	}
	n.Status, n.Finished, n.Actual, n.Unread = "finished", true, actual, "its record could not be read (frame_not_found)"
	return nil
}

// resolve follows n's reservations for other scopes to the work they paid
// for, depth scopes deep at most; a frame already in the tree is not
// placed again (cycle-safe).
func (r *ledgerReader) resolve(n *LedgerNode, depth int) error {
	key := n.Scope + "\x00" + n.Frame
	if r.shown[key] {
		return nil
	}
	r.shown[key] = true
	for _, rv := range n.Reservations {
		if rv.For == n.Scope {
			if rv.Work != nil {
				if err := r.resolve(rv.Work, depth); err != nil {
					return err
				}
			} else if rv.State == "open" {
				rv.Note = "no child pushed with it yet"
			}
			continue
		}
		if depth >= r.depth {
			rv.Note = fmt.Sprintf("scope %s not followed (--depth %d)", rv.For, r.depth)
			continue
		}
		sl, err := r.scope(rv.For)
		if err != nil {
			return err
		}
		b, ok := sl.bind[rv.ID]
		if !ok {
			if rv.State == "open" {
				rv.Note = fmt.Sprintf("scope %s has no frame pushed with it yet", rv.For)
			} else {
				rv.Note = fmt.Sprintf("scope %s no longer holds its binding", rv.For)
			}
			continue
		}
		b.Token = "" // a credential: never printed
		rv.Outbox = &b
		if rv.State == "open" {
			rv.State = "bound"
		}
		work := sl.nodes[b.Root]
		if work == nil {
			work = &LedgerNode{Scope: rv.For, Frame: b.Root}
			if err := r.fillOr(work, b.Reported); err != nil {
				return err
			}
			sl.nodes[b.Root] = work
		}
		if work.Reserved == 0 {
			work.Reserved, work.Reservation = b.Ceiling, b.Reservation
		}
		if r.shown[rv.For+"\x00"+work.Frame] {
			rv.Note = fmt.Sprintf("%s in scope %s: shown above", work.Frame, rv.For)
			continue
		}
		rv.Work = work
		if err := r.resolve(work, depth+1); err != nil {
			return err
		}
	}
	for _, ch := range n.Children {
		if err := r.resolve(ch, depth); err != nil {
			return err
		}
	}
	return nil
}

func (r *ledgerReader) scope(name string) (*scopeLedger, error) {
	if sl := r.scopes[name]; sl != nil {
		return sl, nil
	}
	sl, err := r.read(name, "")
	if err != nil {
		return nil, err
	}
	r.scopes[name] = sl
	return sl, nil
}

// reservationOf is a line for a reservation of scope at now.
func reservationOf(rv *frames.Reservation, scope string, now int64) *LedgerReservation {
	out := &LedgerReservation{ID: rv.ID, For: rv.For, Amount: rv.Amount, Ceiling: rv.Ceiling, Settled: rv.Settled, Late: rv.Late,
		Policy: string(rv.Policy), LeaseEnds: time.Unix(0, rv.ExpiresAt).UTC(), Child: rv.Child}
	switch {
	case rv.Returned && rv.Why == "settled":
		out.State = "settled"
	case rv.Returned && rv.Why == "expired", rv.Expired(scope, now):
		out.State = "expired"
	case rv.Returned:
		out.State, out.Why = "returned", rv.Why
	case rv.Child != "":
		out.State = "bound"
	default:
		out.State = "open"
	}
	return out
}

// dollars writes micro-units as dollars with 6 decimals ($0.250000).
func dollars(m int64) string {
	sign := ""
	if m < 0 {
		sign, m = "-", -m
	}
	return fmt.Sprintf("%s$%d.%06d", sign, m/budget.MicrosPerUnit, m%budget.MicrosPerUnit)
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
