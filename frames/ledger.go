package frames

import (
	"fmt"
	"sort"

	"github.com/stateindex/stateindex/budget"
)

// The spend ledger (DESIGN §11; persistence-continuation-chains.md's budget
// ledger: per frame a ceiling, what it holds for work it delegates, and what
// it actually spent, children's costs included).
//
// A frame reserves spend for work it delegates (ReserveSpend): a child frame
// in its scope, or a root frame in another scope. The grant is decided in
// the frame's scope's serial order, against the frame's max − actual −
// outstanding, so concurrent reservations cannot together exceed it (no
// check-then-act window). The reservation is an event (spend.reserved) with
// a lease: a reservation whose lease ran out returns what it held to its
// frame (spend.returned, written by the next ledger decision of the frame:
// grants already count it as returned), and a lease can be renewed
// (spend.renewed) up to MaxReservationAge after the grant.
//
// What a frame's reservations hold is set aside: its own usage that takes
// its actual spend and outstanding past its max suspends it
// (spend_exceeded), as usage past the max itself does.
//
// The frame pushed with a reservation (PushFrame with its claims) has the
// reservation's ceiling as its spend limit.
//
//   - A child in the same scope settles when it is popped, in the pop's
//     append: what it spent is charged to its parent (as every child's cost
//     is) and the reservation closes, its unused part returned.
//   - A root in another scope is bound to the reservation (Binding, kept in
//     that scope's state). When the root finishes (or its scope is
//     destroyed) the binding records the root's final spend: an outbox
//     entry. The shell delivers it to the parent's scope (SettleSpend, with
//     a deterministic request id) and records the delivery
//     (spend.delivered). Settlements carry the cumulative spend, so a
//     settlement delivered twice charges once (a crash between the parent's
//     write and the delivery's record neither loses nor doubles).
//
// Usage that arrives after a reservation expired or settled is still
// charged (money spent is never lost from the books): a settlement to a
// frame that already finished goes on to its nearest live ancestor, or, when
// the whole tree finished, to the outbox of the root's own binding.

// EstimatePolicy is what a reservation that states no estimate gets
// (Config.Unestimated): never silently skipped.
type EstimatePolicy string

// Estimate policies.
const (
	// EstimateDeny refuses a reservation without an estimate
	// (ErrEstimateRequired). The default.
	EstimateDeny EstimatePolicy = "deny"
	// EstimateCap reserves Config.UnestimatedCap.
	EstimateCap EstimatePolicy = "cap"
	// EstimateAllow holds nothing: the work's ceiling is the frame's
	// available spend when it is granted (none when the frame has no spend
	// limit), and what it spends is charged when it settles.
	EstimateAllow EstimatePolicy = "allow"
)

// Valid reports whether p is a known policy ("" reads as EstimateDeny).
func (p EstimatePolicy) Valid() bool {
	switch p {
	case "", EstimateDeny, EstimateCap, EstimateAllow:
		return true
	}
	return false
}

// Lease bounds (unix ns).
const (
	// DefaultLease is a reservation's lease when the request names none.
	DefaultLease int64 = 10 * 60 * 1e9
	// MaxReservationAge bounds a reservation's lease, renewals included:
	// no lease ends later than this after the grant. It is the request
	// horizon: a scope remembers reservations (and a child scope its
	// bindings) that long after they could last be used, and then forgets
	// them (see LedgerKeep).
	MaxReservationAge = DefaultRequestHorizon
	// LedgerKeep is how long after its grant a returned reservation, or a
	// delivered binding, is remembered at most: past it no token for it
	// can be valid. A settlement for a reservation forgotten by then is
	// still charged, less what its sender knows was acknowledged
	// (SettleSpend.Previous), and recorded anew.
	LedgerKeep = MaxReservationAge + 2*DefaultClockSkew
)

// KeepReturned is how many returned reservations a scope keeps for its
// ledger at least (the most recent by grant; the log has every one): past
// KeepReturned + KeepReturned/4 the oldest are forgotten down to
// KeepReturned (in one sort, not one per event). A scope's state grows
// with its open reservations, not with its history.
const KeepReturned = 1000

// MaxOpenReservations bounds the reservations a scope holds open at once
// (ErrTooManyReservations past it).
const MaxOpenReservations = 10_000

// Reservation is spend a frame set aside for work it delegates, as the
// scope's state keeps it.
type Reservation struct {
	ID    string `msgpack:"id"`
	Frame string `msgpack:"f"` // the frame that reserved (its owner)
	// Path is the owner's ancestors when it reserved, root first: where a
	// settlement that arrives after the owner finished goes on to.
	Path []string `msgpack:"pt,omitempty"`
	// For is the scope of the work: the owner's own scope for a child here.
	For string `msgpack:"for"`
	// Amount is what the reservation holds from its owner; Ceiling the
	// spend limit of the frame pushed with it (0: none).
	Amount  int64 `msgpack:"a"`
	Ceiling int64 `msgpack:"cl"`
	// Estimate is what the caller estimated (-1: none given) and Policy how
	// a reservation without one was granted.
	Estimate  int64          `msgpack:"e"`
	Policy    EstimatePolicy `msgpack:"po,omitempty"`
	At        int64          `msgpack:"at"`
	ExpiresAt int64          `msgpack:"x"`
	// Child is the frame bound to it: a child here (from its push), or the
	// root in For (from its settlement).
	Child string `msgpack:"ch,omitempty"`
	// Settled is the spend settled so far (cumulative); Late the part of it
	// charged after the owner had finished.
	Settled int64 `msgpack:"s,omitempty"`
	Late    int64 `msgpack:"lt,omitempty"`
	// Returned says what it held went back to its owner (expired, released,
	// or settled for good); Why says which; Final that the bound work
	// finished and reported its final spend.
	Returned bool   `msgpack:"r,omitempty"`
	Why      string `msgpack:"w,omitempty"`
	Final    bool   `msgpack:"fi,omitempty"`
	Renewals int64  `msgpack:"rn,omitempty"`
}

// Held is what the reservation holds from its owner now: nothing once
// returned; else its amount less what was settled.
func (r *Reservation) Held() int64 {
	if r.Returned || r.Settled >= r.Amount {
		return 0
	}
	return r.Amount - r.Settled
}

// Expired reports whether the lease ran out by now and the reservation,
// of scope, has not been returned yet. A reservation bound to a child in
// its own scope never expires: that child's pop settles it (a destroy
// returns it), so its hold cannot leak, and while the child runs what it
// holds is what the child may still spend — returning it would let the
// owner grant that spend twice. Leases bound what work the scope cannot
// see may hold: work not started yet, and work in another scope.
func (r *Reservation) Expired(scope string, now int64) bool {
	return !r.Returned && now > r.ExpiresAt && (r.Child == "" || r.For != scope)
}

// Binding is a root frame of this scope bound to a reservation of another
// scope: the outbox entry that settles it.
type Binding struct {
	Reservation string `msgpack:"id"`
	Scope       string `msgpack:"sc"` // the reserving scope
	Frame       string `msgpack:"f"`  // the reserving frame
	// Token is the reservation token the push presented: a settlement
	// presents it to the reserving scope.
	Token     string `msgpack:"tk"`
	Root      string `msgpack:"ro"` // the bound frame here (follows continuations)
	Amount    int64  `msgpack:"a"`
	Ceiling   int64  `msgpack:"cl"`
	ExpiresAt int64  `msgpack:"x"` // the token's
	At        int64  `msgpack:"at"`
	// Reported is the spend to settle (cumulative) and Final says the root
	// finished; Delivered and DeliveredFinal what the reserving scope
	// acknowledged.
	Reported       int64 `msgpack:"rp,omitempty"`
	Final          bool  `msgpack:"fi,omitempty"`
	Delivered      int64 `msgpack:"dl,omitempty"`
	DeliveredFinal bool  `msgpack:"df,omitempty"`
}

// Pending reports whether the binding has a settlement to deliver.
func (b *Binding) Pending() bool {
	return b.Final && (b.Delivered < b.Reported || !b.DeliveredFinal)
}

// ReservationClaims is what a verified reservation token says (the shell
// checks its signature; the core checks the rest).
type ReservationClaims struct {
	Scope     string // the reserving scope
	Frame     string // the reserving frame
	ID        string
	For       string   // the scope the work is for
	Path      []string // the reserving frame's ancestors, root first
	Amount    int64
	Ceiling   int64
	ExpiresAt int64
}

// ClaimsOf returns the claims a token for r says.
func ClaimsOf(scope string, r *Reservation) ReservationClaims {
	return ReservationClaims{Scope: scope, Frame: r.Frame, ID: r.ID, For: r.For, Path: append([]string(nil), r.Path...),
		Amount: r.Amount, Ceiling: r.Ceiling, ExpiresAt: r.ExpiresAt}
}

// Ledger event type names.
const (
	TypeSpendReserved  = "spend.reserved"
	TypeSpendReturned  = "spend.returned"
	TypeSpendRenewed   = "spend.renewed"
	TypeSpendSettled   = "spend.settled"
	TypeSpendDelivered = "spend.delivered"
)

// SpendReserved: a frame reserved spend (Reservation as granted).
type SpendReserved struct {
	Meta        `msgpack:",inline"`
	Reservation Reservation `msgpack:"rv"`
}

// SpendReturned: reservations returned what they held to their frames: Why
// is "expired" (their lease ran out) or "released" (by request).
type SpendReturned struct {
	Meta `msgpack:",inline"`
	IDs  []string `msgpack:"ids"`
	Why  string   `msgpack:"w"`
	// Returned is what they held, together.
	Returned int64 `msgpack:"rt,omitempty"`
}

// SpendRenewed: a reservation's lease was renewed until ExpiresAt.
type SpendRenewed struct {
	Meta      `msgpack:",inline"`
	ID        string `msgpack:"id"`
	Owner     string `msgpack:"ow"` // the reserving frame
	ExpiresAt int64  `msgpack:"x"`
	// For, Path, Amount and Ceiling repeat the reservation's, so that the
	// renewed token is signed from the event alone.
	For     string   `msgpack:"for"`
	Path    []string `msgpack:"pt,omitempty"`
	Amount  int64    `msgpack:"a"`
	Ceiling int64    `msgpack:"cl"`
}

// SpendSettled: the work a reservation of this scope paid for, in scope
// From (its root Bound), reported spending Spent so far (cumulative;
// Final: it finished). Charged is what was new (Spent less what was settled
// before: a repeated settlement charges 0); it went to frame ChargedTo (the
// owner, or its nearest live ancestor once the owner finished), or, with
// Routed, to the outbox of this scope's binding Routed (the whole tree had
// finished), or nowhere when neither was left (the books stop at the root).
// Claims, when set, recorded a reservation the scope no longer held
// (forgotten past LedgerKeep, or destroyed).
type SpendSettled struct {
	Meta      `msgpack:",inline"`
	ID        string             `msgpack:"id"`
	Owner     string             `msgpack:"ow"` // the reserving frame
	From      string             `msgpack:"fm"`
	Bound     string             `msgpack:"bd"`
	Spent     int64              `msgpack:"sp"`
	Final     bool               `msgpack:"fi,omitempty"`
	Charged   int64              `msgpack:"cg"`
	ChargedTo string             `msgpack:"to,omitempty"`
	Routed    string             `msgpack:"ro,omitempty"`
	Claims    *ReservationClaims `msgpack:"cl,omitempty"`
	// Previous, with Claims, is what the sender knew was acknowledged
	// before: the recreated record's settled spend.
	Previous int64 `msgpack:"pv,omitempty"`
}

// SpendDelivered: the reserving scope acknowledged this scope's settlement
// of binding ID through Through (cumulative; Final: the final one).
type SpendDelivered struct {
	Meta    `msgpack:",inline"`
	ID      string `msgpack:"id"`
	Through int64  `msgpack:"th"`
	Final   bool   `msgpack:"fi,omitempty"`
}

func (e *SpendReserved) EventType() string  { return TypeSpendReserved }
func (e *SpendReturned) EventType() string  { return TypeSpendReturned }
func (e *SpendRenewed) EventType() string   { return TypeSpendRenewed }
func (e *SpendSettled) EventType() string   { return TypeSpendSettled }
func (e *SpendDelivered) EventType() string { return TypeSpendDelivered }

// ReserveSpend reserves spend on frame FrameID for work in scope For (""
// or the frame's own scope: a child here). Estimate (micro-units, with
// HasEstimate) is what the work is expected to spend; without one the
// configuration's EstimatePolicy decides. Partial grants what is available
// when the estimate is more (instead of refusing). The shell mints the
// reservation's id and its lease's end.
type ReserveSpend struct {
	Header
	FrameID       string
	For           string
	Estimate      int64
	HasEstimate   bool
	Partial       bool
	ReservationID string
	ExpiresAt     int64
}

// RenewReservation extends an unexpired reservation's lease to ExpiresAt.
type RenewReservation struct {
	Header
	ReservationID string
	ExpiresAt     int64
}

// ReleaseReservation returns what a reservation holds to its frame now (a
// reservation bound to a live child here is settled by its pop instead).
type ReleaseReservation struct {
	Header
	ReservationID string
}

// SettleSpend settles a reservation of this scope for work in scope From:
// its root FrameID has spent Spent so far (cumulative), Final when it
// finished; Previous is what From knows this scope acknowledged before
// (what is charged when the scope no longer keeps the reservation).
// Claims come from the verified token; Mint names the token of a
// suspension if the charge takes the frame past its spend limit.
type SettleSpend struct {
	Header
	Claims   ReservationClaims
	From     string
	FrameID  string
	Spent    int64
	Previous int64
	Final    bool
	Mint     Mint
}

// AckSettlement records that the reserving scope acknowledged this scope's
// settlement of binding ReservationID through Through.
type AckSettlement struct {
	Header
	ReservationID string
	Through       int64
	Final         bool
}

// LeaseTTL turns a request's lease (milliseconds; 0: the default) into
// nanoseconds, at most MaxReservationAge.
func LeaseTTL(millis, def int64) (int64, error) {
	if millis < 0 {
		return 0, invalid("negative lease")
	}
	if def <= 0 {
		def = DefaultLease
	}
	if millis == 0 {
		return min(def, MaxReservationAge), nil
	}
	const ms = 1_000_000
	return min(millis, MaxReservationAge/ms) * ms, nil
}

// Available is what frame f can still grant at now: its spend limit less
// its actual spend and what its unexpired reservations hold; unlimited
// (ok false) when it has no spend limit.
func (s *State) Available(f *Frame, now int64) (avail int64, limited bool) {
	if f.Limits.SpendMicros == 0 {
		return 0, false
	}
	held := f.Outstanding - s.expiredHeld(f, now)
	a := f.Limits.SpendMicros - f.Cost.SpendMicros
	if a < 0 || held >= a {
		return 0, true
	}
	return a - held, true
}

// overCommitted is the violation of f's spend limit by its own usage: what
// its unexpired reservations hold is set aside for the work it delegates,
// so spend (its actual spend with the usage being decided) past its max
// less that suspends it (spend_exceeded, Current counting what its
// reservations hold), as the grant rule refuses a reservation past it. nil
// when it holds, or f has no spend limit.
func (s *State) overCommitted(f *Frame, spend, now int64) *budget.Violation {
	if f.Limits.SpendMicros == 0 {
		return nil
	}
	c, _ := budget.AddSaturating(spend, f.Outstanding-s.expiredHeld(f, now))
	if c <= f.Limits.SpendMicros {
		return nil
	}
	return &budget.Violation{Code: budget.SpendExceeded, Current: c, Max: f.Limits.SpendMicros}
}

// expiredHeld is what f's expired, unreturned reservations hold.
func (s *State) expiredHeld(f *Frame, now int64) int64 {
	_, held := s.expiredOf(f, now)
	return held
}

// expiredOf lists f's reservations whose lease ran out by now, sorted, and
// what they hold. A frame that holds nothing has none (what an expired
// reservation holds is part of Outstanding until it is returned): most
// frames are answered without a look at the scope's reservations.
func (s *State) expiredOf(f *Frame, now int64) (ids []string, held int64) {
	if f == nil || f.Outstanding == 0 {
		return nil, 0
	}
	for _, r := range s.Reservations {
		if r.Frame == f.ID && r.Expired(s.Scope, now) {
			ids = append(ids, r.ID)
			held += r.Held()
		}
	}
	sort.Strings(ids)
	return ids, held
}

func (s *State) openReservations() int {
	n := 0
	for _, r := range s.Reservations {
		if !r.Returned {
			n++
		}
	}
	return n
}

// returnExpired is the spend.returned event of frame's expired reservations,
// or nil.
func (d decider) returnExpired(frame string) Event {
	ids, held := d.s.expiredOf(d.s.Frames[frame], d.h.Now)
	if len(ids) == 0 {
		return nil
	}
	return &SpendReturned{Meta: d.meta(frame, ReasonUserMessage), IDs: ids, Why: "expired", Returned: held}
}

func (d decider) reserveSpend(c *ReserveSpend) ([]Event, error) {
	f, err := d.liveFrame(c.FrameID)
	if err != nil {
		return nil, err
	}
	if f.Status == StatusSuspended {
		return nil, fmt.Errorf("%w: %q cannot reserve spend until it is resumed", ErrFrameSuspended, f.ID)
	}
	forScope := c.For
	if forScope == "" {
		forScope = d.s.Scope
	}
	if err := ValidateScope(forScope, d.cfg.MaxScopeBytes); err != nil {
		return nil, fmt.Errorf("reservation for: %w", err)
	}
	if err := ValidateID("reservation id", c.ReservationID, d.cfg.MaxIDBytes); err != nil {
		return nil, err
	}
	if d.s.Reservations[c.ReservationID] != nil {
		return nil, fmt.Errorf("%w: reservation %q", ErrDuplicateID, c.ReservationID)
	}
	if c.ExpiresAt <= d.h.Now || c.ExpiresAt-d.h.Now > MaxReservationAge {
		return nil, invalid("lease end %d is not within (now, now + %s]", c.ExpiresAt, span(MaxReservationAge))
	}
	if d.s.openReservations() >= MaxOpenReservations {
		return nil, fmt.Errorf("%w: scope %q holds %d open reservations", ErrTooManyReservations, d.s.Scope, MaxOpenReservations)
	}
	avail, limited := d.s.Available(f, d.h.Now)
	r := Reservation{ID: c.ReservationID, Frame: f.ID, For: forScope, Estimate: -1, At: d.h.Now, ExpiresAt: c.ExpiresAt}
	for _, a := range d.s.Ancestry(f.ID) {
		if a.ID != f.ID {
			r.Path = append(r.Path, a.ID)
		}
	}
	want := c.Estimate
	switch {
	case c.HasEstimate:
		if err := budget.NonNegative("spend estimate", c.Estimate); err != nil {
			return nil, err
		}
		if c.Estimate == 0 {
			return nil, invalid("a spend estimate of 0 reserves nothing")
		}
		r.Estimate = c.Estimate
	case d.cfg.Unestimated == EstimateCap:
		r.Policy, want = EstimateCap, d.cfg.UnestimatedCap
	case d.cfg.Unestimated == EstimateAllow:
		r.Policy = EstimateAllow
		if limited {
			if avail == 0 {
				return nil, d.unavailable(f, 0, avail)
			}
			r.Ceiling = avail
		}
	default:
		return nil, fmt.Errorf("%w: the server's policy for reservations without an estimate is deny: state what the work may spend",
			ErrEstimateRequired)
	}
	if r.Policy != EstimateAllow {
		if limited && want > avail {
			if !c.Partial || avail == 0 {
				return nil, d.unavailable(f, want, avail)
			}
			want = avail
		}
		if _, err := budget.Add(f.Outstanding, want); err != nil {
			return nil, fmt.Errorf("outstanding spend of %q: %w", f.ID, err)
		}
		r.Amount, r.Ceiling = want, want
	}
	var evs []Event
	if e := d.returnExpired(f.ID); e != nil {
		evs = append(evs, e)
	}
	return append(evs, &SpendReserved{Meta: d.meta(f.ID, ReasonUserMessage), Reservation: r}), nil
}

func (d decider) unavailable(f *Frame, want, avail int64) error {
	return &SpendUnavailableError{Frame: f.ID, Requested: want, Available: avail, Max: f.Limits.SpendMicros,
		Actual: f.Cost.SpendMicros, Outstanding: f.Outstanding - d.s.expiredHeld(f, d.h.Now)}
}

// SpendUnavailableError: a reservation asked more than its frame has
// available (max − actual − outstanding). It matches ErrSpendUnavailable.
type SpendUnavailableError struct {
	Frame                                          string
	Requested, Available, Max, Actual, Outstanding int64
}

func (e *SpendUnavailableError) Error() string {
	return fmt.Sprintf("%v: %q asks %d, %d available (max %d, actual %d, outstanding %d)", ErrSpendUnavailable,
		e.Frame, e.Requested, e.Available, e.Max, e.Actual, e.Outstanding)
}

// Is makes errors.Is(e, ErrSpendUnavailable) true.
func (e *SpendUnavailableError) Is(target error) bool { return target == ErrSpendUnavailable }

// ledgerMeta is the meta of a ledger event about frame: it names the frame
// only while it is live (a finished frame's last event is its pop: the
// store finds its record by that), else the scope.
func (d decider) ledgerMeta(frame string) Meta {
	if f := d.s.Frames[frame]; f == nil || !f.Status.Live() {
		frame = ""
	}
	return d.meta(frame, ReasonUserMessage)
}

// reservation finds a reservation of this scope by id.
func (d decider) reservation(id string) (*Reservation, error) {
	if err := ValidateID("reservation id", id, d.cfg.MaxIDBytes); err != nil {
		return nil, err
	}
	r := d.s.Reservations[id]
	if r == nil {
		return nil, fmt.Errorf("%w: %q", ErrReservationUnknown, id)
	}
	return r, nil
}

func (d decider) renewReservation(c *RenewReservation) ([]Event, error) {
	r, err := d.reservation(c.ReservationID)
	if err != nil {
		return nil, err
	}
	switch {
	case r.Returned:
		return nil, fmt.Errorf("%w: %q was %s", ErrReservationClosed, r.ID, r.Why)
	case r.Expired(d.s.Scope, d.h.Now):
		return nil, fmt.Errorf("%w: %q expired at %d", ErrReservationClosed, r.ID, r.ExpiresAt)
	case c.ExpiresAt <= d.h.Now:
		return nil, invalid("lease end %d is not after now %d", c.ExpiresAt, d.h.Now)
	}
	end := min(c.ExpiresAt, r.At+MaxReservationAge)
	if end <= r.ExpiresAt {
		return nil, invalid("a reservation's lease ends at most %s after its grant: %q cannot be renewed past %d", span(MaxReservationAge), r.ID, r.ExpiresAt)
	}
	return []Event{&SpendRenewed{Meta: d.ledgerMeta(r.Frame), ID: r.ID, Owner: r.Frame, ExpiresAt: end, For: r.For,
		Path: append([]string(nil), r.Path...), Amount: r.Amount, Ceiling: r.Ceiling}}, nil
}

func (d decider) releaseReservation(c *ReleaseReservation) ([]Event, error) {
	r, err := d.reservation(c.ReservationID)
	if err != nil {
		return nil, err
	}
	if r.Returned {
		return nil, fmt.Errorf("%w: %q was %s", ErrReservationClosed, r.ID, r.Why)
	}
	if r.For == d.s.Scope && r.Child != "" {
		return nil, fmt.Errorf("%w: %q is bound to live frame %q: popping it settles the reservation", ErrReservationBound, r.ID, r.Child)
	}
	return []Event{&SpendReturned{Meta: d.ledgerMeta(r.Frame), IDs: []string{r.ID}, Why: "released", Returned: r.Held()}}, nil
}

// chargeTarget is where spend settled on r goes now: its owner while live,
// else its nearest live ancestor, else the binding of the tree's root to
// another scope's reservation ("", "" when there is none: the books stop).
func (s *State) chargeTarget(r *Reservation) (frame, routed string) {
	if f := s.liveLink(r.Frame); f != nil {
		return f.ID, ""
	}
	for i := len(r.Path) - 1; i >= 0; i-- {
		if f := s.liveLink(r.Path[i]); f != nil {
			return f.ID, ""
		}
	}
	root := r.Frame
	if len(r.Path) > 0 {
		root = r.Path[0]
	}
	b := s.bindingOf(root)
	if head, err := s.ChainHead(root); b == nil && err == nil {
		b = s.bindingOf(head)
	}
	if b != nil {
		return "", b.Reservation
	}
	return "", ""
}

// liveLink returns frame id if live, else the live head of the chain that
// continued it, else nil.
func (s *State) liveLink(id string) *Frame {
	if f := s.Frames[id]; f != nil && f.Status.Live() {
		return f
	}
	if head, err := s.ChainHead(id); err == nil && head != id {
		if f := s.Frames[head]; f != nil && f.Status.Live() {
			return f
		}
	}
	return nil
}

// bindingOf returns the binding whose root is frame, or nil.
func (s *State) bindingOf(frame string) *Binding {
	for _, b := range s.Bindings {
		if b.Root == frame {
			return b
		}
	}
	return nil
}

func (d decider) settleSpend(c *SettleSpend) ([]Event, error) {
	cl := c.Claims
	if cl.Scope != d.s.Scope {
		return nil, fmt.Errorf("%w: a reservation of scope %q settled in %q", ErrReservationForeign, cl.Scope, d.s.Scope)
	}
	if cl.For != c.From || cl.For == d.s.Scope {
		return nil, fmt.Errorf("%w: reservation %q is for scope %q, settled from %q", ErrReservationForeign, cl.ID, cl.For, c.From)
	}
	if err := ValidateScope(c.From, d.cfg.MaxScopeBytes); err != nil {
		return nil, err
	}
	if err := ValidateID("frame id", c.FrameID, d.cfg.MaxIDBytes); err != nil {
		return nil, err
	}
	if err := budget.NonNegative("settled spend", c.Spent); err != nil {
		return nil, err
	}
	if err := budget.NonNegative("previously settled spend", c.Previous); err != nil {
		return nil, err
	}
	if c.Previous > c.Spent {
		return nil, invalid("settlement of %d after %d acknowledged: settlements are cumulative", c.Spent, c.Previous)
	}
	r, err := d.reservation(cl.ID)
	var claims *ReservationClaims
	if err != nil {
		if ValidateID("reservation id", cl.ID, d.cfg.MaxIDBytes) != nil {
			return nil, err
		}
		// Forgotten (KeepReturned, LedgerKeep) or destroyed with its
		// scope: what the sender knows was acknowledged is not charged
		// again, and the reservation is recorded anew.
		cc := cl
		claims = &cc
		r = &Reservation{ID: cl.ID, Frame: cl.Frame, Path: cl.Path, For: cl.For, Returned: true, Settled: c.Previous}
	} else if r.For != c.From || r.Frame != cl.Frame {
		return nil, fmt.Errorf("%w: reservation %q is for scope %q", ErrReservationForeign, r.ID, r.For)
	}
	if r.Child != "" && r.Child != c.FrameID {
		return nil, fmt.Errorf("%w: reservation %q is bound to %q, settled for %q", ErrReservationBound, r.ID, r.Child, c.FrameID)
	}
	var charged int64
	if c.Spent > r.Settled {
		charged = c.Spent - r.Settled
	}
	to, routed := d.s.chargeTarget(r)
	// A charge its target cannot hold is refused, as usage past int64 is
	// (RecordUsage): the books never saturate on a caller's word.
	if f := d.s.Frames[to]; f != nil && charged > 0 {
		if _, err := budget.Add(f.Cost.SpendMicros, charged); err != nil {
			return nil, fmt.Errorf("settlement of %q charges %q %d: %w", r.ID, f.ID, charged, err)
		}
	}
	if b := d.s.Bindings[routed]; b != nil && charged > 0 {
		if _, err := budget.Add(b.Reported, charged); err != nil {
			return nil, fmt.Errorf("settlement of %q routes %d to binding %q: %w", r.ID, charged, b.Reservation, err)
		}
	}
	e := &SpendSettled{Meta: d.ledgerMeta(r.Frame), ID: r.ID, Owner: r.Frame, From: c.From, Bound: c.FrameID, Spent: c.Spent,
		Final: c.Final, Charged: charged, ChargedTo: to, Routed: routed, Claims: claims}
	if claims != nil {
		e.Previous = c.Previous
	}
	evs := []Event{e}
	// A charge that takes its frame past its spend limit suspends it.
	if f := d.s.Frames[to]; f != nil && charged > 0 && f.Status != StatusSuspended {
		cost, _ := f.Cost.PlusSaturating(budget.Cost{SpendMicros: charged})
		if v := f.Limits.Check(cost); v != nil {
			s, err := d.limitSuspension(f, v, c.Mint, ReasonUserMessage)
			if err != nil {
				return nil, err
			}
			evs = append(evs, s)
		}
	}
	return evs, nil
}

func (d decider) ackSettlement(c *AckSettlement) ([]Event, error) {
	if err := ValidateID("reservation id", c.ReservationID, d.cfg.MaxIDBytes); err != nil {
		return nil, err
	}
	b := d.s.Bindings[c.ReservationID]
	switch {
	case b == nil:
		return nil, fmt.Errorf("%w: scope %q has no binding to %q", ErrReservationUnknown, d.s.Scope, c.ReservationID)
	case c.Through < 0 || c.Through > b.Reported:
		return nil, invalid("acknowledged %d of binding %q, which reported %d", c.Through, b.Reservation, b.Reported)
	case c.Final && !b.Final:
		return nil, invalid("a final acknowledgement of binding %q, whose root %q is live", b.Reservation, b.Root)
	}
	return []Event{&SpendDelivered{Meta: d.ledgerMeta(b.Root), ID: b.Reservation, Through: c.Through, Final: c.Final}}, nil
}

// bind checks the reservation a push presents and returns the limits of
// the frame it pushes (the reservation's ceiling as its spend limit), the
// reservation id it binds and, for another scope's reservation, its
// binding.
func (d decider) bind(c *PushFrame, cl *ReservationClaims, token string) (budget.Limits, string, *Binding, error) {
	l := c.Limits
	ceil := func(ceiling int64) {
		if ceiling > 0 && (l.SpendMicros == 0 || l.SpendMicros > ceiling) {
			l.SpendMicros = ceiling
		}
	}
	if cl.For != d.s.Scope {
		return l, "", nil, fmt.Errorf("%w: reservation %q is for scope %q, not %q", ErrReservationForeign, cl.ID, cl.For, d.s.Scope)
	}
	if err := ValidateID("reservation id", cl.ID, d.cfg.MaxIDBytes); err != nil {
		return l, "", nil, err
	}
	if cl.Scope == d.s.Scope {
		r, err := d.reservation(cl.ID)
		if err != nil {
			return l, "", nil, err
		}
		switch {
		case c.ParentID != r.Frame:
			return l, "", nil, fmt.Errorf("%w: reservation %q is %q's: push its child with it", ErrReservationForeign, r.ID, r.Frame)
		case r.Child != "":
			return l, "", nil, fmt.Errorf("%w: reservation %q is bound to %q", ErrReservationBound, r.ID, r.Child)
		case r.Returned:
			return l, "", nil, fmt.Errorf("%w: %q was %s", ErrReservationClosed, r.ID, r.Why)
		case r.Expired(d.s.Scope, d.h.Now):
			return l, "", nil, fmt.Errorf("%w: %q expired at %d", ErrReservationClosed, r.ID, r.ExpiresAt)
		}
		ceil(r.Ceiling)
		return l, r.ID, nil, nil
	}
	if c.ParentID != "" {
		return l, "", nil, invalid("a reservation of scope %q binds a root frame here, not a child of %q", cl.Scope, c.ParentID)
	}
	if b := d.s.Bindings[cl.ID]; b != nil {
		return l, "", nil, fmt.Errorf("%w: reservation %q is bound to %q", ErrReservationBound, cl.ID, b.Root)
	}
	if d.h.Now > cl.ExpiresAt {
		return l, "", nil, fmt.Errorf("%w: %q expired at %d (renew it for a new token)", ErrReservationClosed, cl.ID, cl.ExpiresAt)
	}
	ceil(cl.Ceiling)
	return l, cl.ID, &Binding{Reservation: cl.ID, Scope: cl.Scope, Frame: cl.Frame, Token: token, Root: c.FrameID,
		Amount: cl.Amount, Ceiling: cl.Ceiling, ExpiresAt: cl.ExpiresAt, At: d.h.Now}, nil
}

// touch changes r through fn and keeps its owner's Outstanding in step.
func (s *State) touch(r *Reservation, fn func()) {
	before := r.Held()
	fn()
	if f := s.Frames[r.Frame]; f != nil {
		f.Outstanding += r.Held() - before
		if f.Outstanding < 0 {
			f.Outstanding = 0
		}
	}
}

func (s *State) ensureLedger() {
	if s.Reservations == nil {
		s.Reservations = map[string]*Reservation{}
	}
	if s.Bindings == nil {
		s.Bindings = map[string]*Binding{}
	}
}

func applySpendReserved(s *State, e *SpendReserved) error {
	r := e.Reservation
	f, err := s.liveFrameFor(&e.Meta)
	if err != nil {
		return err
	}
	if r.ID == "" || r.Frame != f.ID || s.Reservations[r.ID] != nil || r.Amount < 0 || r.Ceiling < 0 || r.Returned || r.Settled != 0 {
		return inconsistent("reservation %q of %q", r.ID, r.Frame)
	}
	o, err := budget.Add(f.Outstanding, r.Amount)
	if err != nil {
		return inconsistent("outstanding of %q: %v", f.ID, err)
	}
	s.ensureLedger()
	r.Path = append([]string(nil), r.Path...)
	s.Reservations[r.ID] = &r
	f.Outstanding = o
	s.pruneLedger(e.At)
	return nil
}

func applySpendReturned(s *State, e *SpendReturned) error {
	for _, id := range e.IDs {
		r := s.Reservations[id]
		if r == nil || r.Returned {
			return inconsistent("reservation %q returned, not held", id)
		}
		s.touch(r, func() { r.Returned, r.Why = true, e.Why })
	}
	s.pruneLedger(e.At)
	return nil
}

func applySpendRenewed(s *State, e *SpendRenewed) error {
	r := s.Reservations[e.ID]
	if r == nil || r.Returned || e.ExpiresAt <= r.ExpiresAt || r.For != e.For || r.Amount != e.Amount || r.Ceiling != e.Ceiling || r.Frame != e.Owner {
		return inconsistent("reservation %q renewed", e.ID)
	}
	r.ExpiresAt = e.ExpiresAt
	r.Renewals++
	return nil
}

func applySpendSettled(s *State, e *SpendSettled) error {
	if e.Charged < 0 || e.Spent < 0 {
		return inconsistent("settlement of %q charges %d", e.ID, e.Charged)
	}
	s.ensureLedger()
	r := s.Reservations[e.ID]
	if r == nil {
		r = &Reservation{ID: e.ID, Frame: e.Owner, For: e.From, Returned: true, Why: "settled", At: e.At, Settled: e.Previous}
		if e.Claims != nil {
			r.Amount, r.Ceiling, r.ExpiresAt = e.Claims.Amount, e.Claims.Ceiling, e.Claims.ExpiresAt
			r.Path = append([]string(nil), e.Claims.Path...)
		}
		s.Reservations[e.ID] = r
	}
	s.touch(r, func() {
		r.Child = e.Bound
		if e.Spent > r.Settled {
			r.Settled = e.Spent
		}
		if e.Final && !r.Returned {
			r.Returned, r.Why = true, "settled"
		}
		r.Final = r.Final || e.Final
	})
	if f := s.Frames[r.Frame]; (f == nil || !f.Status.Live()) && e.Charged > 0 {
		r.Late, _ = budget.AddSaturating(r.Late, e.Charged)
	}
	switch {
	case e.ChargedTo != "":
		f := s.Frames[e.ChargedTo]
		if f == nil || !f.Status.Live() {
			return inconsistent("settlement charged to %q, which is not live", e.ChargedTo)
		}
		f.Cost.SpendMicros, _ = budget.AddSaturating(f.Cost.SpendMicros, e.Charged)
	case e.Routed != "":
		if b := s.Bindings[e.Routed]; b != nil {
			b.Reported, _ = budget.AddSaturating(b.Reported, e.Charged)
		}
	}
	s.pruneLedger(e.At)
	return nil
}

func applySpendDelivered(s *State, e *SpendDelivered) error {
	b := s.Bindings[e.ID]
	if b == nil || e.Through > b.Reported || (e.Final && !b.Final) {
		return inconsistent("delivery of binding %q through %d", e.ID, e.Through)
	}
	if e.Through > b.Delivered {
		b.Delivered = e.Through
	}
	if e.Final && e.Through == b.Reported {
		b.DeliveredFinal = true
	}
	s.pruneLedger(e.At)
	return nil
}

// applyBound records what a push with a reservation binds (from applyNewPushed).
func applyBound(s *State, e *FramePushed, f *Frame) error {
	if e.Reservation == "" {
		if e.Binding != nil {
			return inconsistent("a binding without a reservation")
		}
		return nil
	}
	f.Reservation = e.Reservation
	if e.Binding != nil {
		b := *e.Binding
		if b.Reservation != e.Reservation || b.Root != f.ID || e.ParentID != "" || s.Bindings[b.Reservation] != nil {
			return inconsistent("binding of %q to %q", f.ID, b.Reservation)
		}
		s.ensureLedger()
		s.Bindings[b.Reservation] = &b
		return nil
	}
	r := s.Reservations[e.Reservation]
	if r == nil || r.Frame != e.ParentID || r.Child != "" || r.Returned {
		return inconsistent("push of %q binds reservation %q", f.ID, e.Reservation)
	}
	r.Child = f.ID
	return nil
}

// ledgerPopped settles what a frame's pop settles on the ledger (from
// applyPopped, before the frame leaves the state): a child bound to a
// reservation here closes it (its spend is charged to the parent by the
// pop itself) or hands it to its continuation; a root bound to another
// scope's reservation reports its final spend (the outbox entry); the
// frame's own reservations for children here that never bound return.
func ledgerPopped(s *State, f *Frame, e *FramePopped) {
	cont := e.Status == StatusContinued
	if r := s.Reservations[f.Reservation]; r != nil && r.Child == f.ID {
		if cont {
			r.Child = e.ContinuedTo
		} else {
			s.touch(r, func() {
				if f.Cost.SpendMicros > r.Settled {
					r.Settled = f.Cost.SpendMicros
				}
				r.Final = true
				if !r.Returned {
					r.Returned, r.Why = true, "settled"
				}
			})
		}
	}
	if b := s.bindingOf(f.ID); b != nil {
		if cont {
			b.Root = e.ContinuedTo
		} else {
			b.Final = true
			if f.Cost.SpendMicros > b.Reported {
				b.Reported = f.Cost.SpendMicros
			}
		}
	}
	if cont {
		for _, r := range s.Reservations {
			if r.Frame == f.ID { // the continuation holds them on
				r.Frame = e.ContinuedTo
			}
		}
		return
	}
	for _, r := range s.Reservations {
		if r.Frame == f.ID && r.For == s.Scope && r.Child == "" && !r.Returned {
			s.touch(r, func() { r.Returned, r.Why = true, "unused" })
		}
	}
}

// ledgerDestroyed finishes the bindings of roots a destroy cancels: their
// spend so far is final, to be delivered (the outbox outlives the scope's
// frames).
func ledgerDestroyed(s *State) {
	for _, b := range s.Bindings {
		if f := s.Frames[b.Root]; f != nil && f.Status.Live() {
			b.Final = true
			if f.Cost.SpendMicros > b.Reported {
				b.Reported = f.Cost.SpendMicros
			}
		}
	}
	for _, r := range s.Reservations {
		if !r.Returned && r.For == s.Scope {
			r.Returned, r.Why = true, "destroyed"
		}
	}
}

// pruneLedger forgets reservations that returned LedgerKeep after their
// grant (no token for them can be valid any more) and, past KeepReturned
// + KeepReturned/4, all but the newest KeepReturned, and bindings delivered LedgerKeep after their grant. It
// depends on the events alone, so every fold prunes alike. Forgetting is
// safe: a settlement for a forgotten reservation charges what its sender
// knows was not acknowledged (Previous), and a repeat of the same delivery
// is answered by its request id.
func (s *State) pruneLedger(now int64) {
	var returned []*Reservation
	for id, r := range s.Reservations {
		switch {
		case !r.Returned:
		case now-r.At > LedgerKeep:
			delete(s.Reservations, id)
		default:
			returned = append(returned, r)
		}
	}
	if len(returned) > KeepReturned+KeepReturned/4 {
		sort.Slice(returned, func(i, j int) bool {
			a, b := returned[i], returned[j]
			return a.At < b.At || (a.At == b.At && a.ID < b.ID)
		})
		for _, r := range returned[:len(returned)-KeepReturned] {
			delete(s.Reservations, r.ID)
		}
	}
	for id, b := range s.Bindings {
		if b.Final && !b.Pending() && now-b.At > LedgerKeep && s.Frames[b.Root] == nil {
			delete(s.Bindings, id)
		}
	}
	if len(s.Reservations) == 0 {
		s.Reservations = nil // as a snapshot decodes it
	}
	if len(s.Bindings) == 0 {
		s.Bindings = nil
	}
}

// PendingSettlements lists the scope's bindings with a settlement to
// deliver, by reservation id.
func (s *State) PendingSettlements() []Binding {
	var out []Binding
	for _, b := range s.Bindings {
		if b.Pending() {
			out = append(out, *b)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Reservation < out[j].Reservation })
	return out
}

// HasBindings reports whether the scope holds a binding (an outbox entry,
// delivered or not).
func (s *State) HasBindings() bool { return len(s.Bindings) > 0 }

func cloneLedger(s *State, c *State) {
	c.Reservations, c.Bindings = nil, nil
	if s.Reservations != nil {
		c.Reservations = make(map[string]*Reservation, len(s.Reservations))
		for id, r := range s.Reservations {
			rc := *r
			rc.Path = append([]string(nil), r.Path...)
			c.Reservations[id] = &rc
		}
	}
	if s.Bindings != nil {
		c.Bindings = make(map[string]*Binding, len(s.Bindings))
		for id, b := range s.Bindings {
			bc := *b
			c.Bindings[id] = &bc
		}
	}
}

// LedgerRow is one frame's line of the ledger: its spend limit (Max, 0:
// none), the ceiling the reservation it was pushed with gives it
// (Reserved, with Reservation its id), what its unexpired reservations hold
// (Outstanding), what it spent with its children's settled costs (Actual),
// and its reservations. A frame that finished appears only as the owner of
// reservations the scope still keeps (Finished; the shell reads its record).
type LedgerRow struct {
	Frame        string        `msgpack:"f"`
	Parent       string        `msgpack:"pa,omitempty"`
	Goal         string        `msgpack:"g,omitempty"`
	Status       Status        `msgpack:"st,omitempty"`
	Finished     bool          `msgpack:"fn,omitempty"`
	Max          int64         `msgpack:"mx,omitempty"`
	Reserved     int64         `msgpack:"rs,omitempty"`
	Reservation  string        `msgpack:"rv,omitempty"`
	Outstanding  int64         `msgpack:"o,omitempty"`
	Actual       int64         `msgpack:"a,omitempty"`
	Late         int64         `msgpack:"lt,omitempty"`
	Reservations []Reservation `msgpack:"r,omitempty"`
}

// Ledger lists the ledger of s at now: frame (all live frames when "") and
// its live descendants in push order, then the finished owners of the
// reservations they (or, for "", the scope) keep.
func Ledger(s *State, frame string, now int64) []LedgerRow {
	in := func(f *Frame) bool {
		if frame == "" {
			return true
		}
		for _, a := range s.Ancestry(f.ID) {
			if a.ID == frame {
				return true
			}
		}
		return false
	}
	owned := map[string][]Reservation{}
	for _, r := range s.Reservations {
		rc := *r
		rc.Path = append([]string(nil), r.Path...)
		owned[r.Frame] = append(owned[r.Frame], rc)
	}
	for _, rs := range owned {
		sort.Slice(rs, func(i, j int) bool { return rs[i].At < rs[j].At || (rs[i].At == rs[j].At && rs[i].ID < rs[j].ID) })
	}
	var rows []LedgerRow
	seen := map[string]bool{}
	for _, id := range s.Order {
		f := s.Frames[id]
		if f == nil || !f.Status.Live() || !in(f) {
			continue
		}
		seen[id] = true
		row := LedgerRow{Frame: f.ID, Parent: f.ParentID, Goal: f.Goal, Status: f.Status, Max: f.Limits.SpendMicros,
			Reservation: f.Reservation, Outstanding: f.Outstanding - s.expiredHeld(f, now), Actual: f.Cost.SpendMicros,
			Reservations: owned[f.ID]}
		if r := s.Reservations[f.Reservation]; r != nil && r.Child == f.ID {
			row.Reserved = r.Ceiling
		} else if b := s.Bindings[f.Reservation]; b != nil {
			row.Reserved = b.Ceiling
		}
		rows = append(rows, row)
	}
	var fin []string
	for id, rs := range owned {
		if seen[id] {
			continue
		}
		if frame != "" && id != frame && !pathHas(rs, frame) {
			continue
		}
		fin = append(fin, id)
	}
	sort.Strings(fin)
	for _, id := range fin {
		row := LedgerRow{Frame: id, Finished: true, Reservations: owned[id]}
		for _, r := range owned[id] {
			row.Late += r.Late
		}
		rows = append(rows, row)
	}
	return rows
}

func pathHas(rs []Reservation, frame string) bool {
	for _, r := range rs {
		for _, p := range r.Path {
			if p == frame {
				return true
			}
		}
	}
	return false
}
