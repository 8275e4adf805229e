package views

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// DefaultLedgerDepth bounds how many scopes deep a ledger tree follows
// reservations.
const DefaultLedgerDepth = 8

// ReadLedger reads scope's spend ledger (frame's part when set) through c
// as a tree: each frame with its spend limit, the ceiling its reservation
// gave it, what its reservations hold and what it spent, and under it its
// reservations; a reservation for another scope leads to the frames that
// work runs as there, depth scopes deep at most.
// LedgerTree is a scope's spend ledger as `stateindex ledger` prints it and the inspector shows it: the scope's frames (or
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

func ReadLedger(ctx context.Context, c *actors.Client, scope, frame string, depth int) (*LedgerTree, error) {
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

// Dollars writes micro-units as dollars with 6 decimals ($0.250000).
func Dollars(m int64) string {
	sign := ""
	if m < 0 {
		sign, m = "-", -m
	}
	return fmt.Sprintf("%s$%d.%06d", sign, m/budget.MicrosPerUnit, m%budget.MicrosPerUnit)
}
