package messages

import "github.com/stateindex/stateindex/frames"

// The spend ledger's operations (frames/ledger.go has the rules). Amounts
// are micro-units of the currency (budget.MicrosPerUnit per unit).

// ReserveSpend reserves spend on frame FrameID (the top of the stack when
// empty) for work it delegates: a child frame in this scope (For "" or the
// scope itself) or a root frame in scope For. Estimate is what the work is
// expected to spend; nil means the caller cannot estimate it, and the
// server's policy decides (deny: estimate_required; cap: a fixed amount;
// allow: nothing held, the work's ceiling is what is available). The grant
// never exceeds the frame's spend limit less its actual spend and what its
// reservations hold: more is spend_unavailable, unless Partial, which grants
// what is available. LeaseMillis is the lease (0: the server's default, 10
// minutes; at most 7 days after the grant, renewals included): a
// reservation not settled by then returns what it holds.
type ReserveSpend struct {
	Header      `msgpack:",inline"`
	FrameID     string `msgpack:"f,omitempty"`
	For         string `msgpack:"for,omitempty"`
	Estimate    *int64 `msgpack:"e,omitempty"`
	Partial     bool   `msgpack:"pt,omitempty"`
	LeaseMillis int64  `msgpack:"ls,omitempty"`
}

// ReserveSpendReply is the grant. Token is the signed reservation token:
// PushFrame.Reservation presents it (a child of FrameID here, or a root
// frame in scope For), and so do RenewReservation and the settlement.
// Amount is what the reservation holds; Ceiling the spend limit of the
// frame pushed with it (0: none); Policy how a request without an estimate
// was granted ("" when it had one).
type ReserveSpendReply struct {
	Result        `msgpack:",inline"`
	FrameID       string                `msgpack:"f"`
	ReservationID string                `msgpack:"id"`
	For           string                `msgpack:"for"`
	Amount        int64                 `msgpack:"a"`
	Ceiling       int64                 `msgpack:"cl"`
	Policy        frames.EstimatePolicy `msgpack:"po,omitempty"`
	ExpiresAt     int64                 `msgpack:"x"`
	Token         string                `msgpack:"tk"`
	// Returned lists reservations of the frame whose lease had run out,
	// returned by this request.
	Returned []string `msgpack:"rt,omitempty"`
}

// RenewReservation extends the lease of a reservation of this scope, named
// by its token (as the work holds it) or its id, by LeaseMillis from now (0:
// the default), up to 7 days after the grant. An expired or returned
// reservation cannot be renewed (reservation_closed).
type RenewReservation struct {
	Header        `msgpack:",inline"`
	Token         string `msgpack:"tk,omitempty"`
	ReservationID string `msgpack:"id,omitempty"`
	LeaseMillis   int64  `msgpack:"ls,omitempty"`
}

// RenewReservationReply carries the new lease end and a token that says it
// (the old token stays valid until its own expiry).
type RenewReservationReply struct {
	Result        `msgpack:",inline"`
	ReservationID string `msgpack:"id"`
	ExpiresAt     int64  `msgpack:"x"`
	Token         string `msgpack:"tk"`
}

// ReleaseReservation returns what a reservation holds to its frame now: for
// work that will not run. Spend the work reports later is still charged.
type ReleaseReservation struct {
	Header        `msgpack:",inline"`
	ReservationID string `msgpack:"id"`
}

// ReleaseReservationReply says what was returned.
type ReleaseReservationReply struct {
	Result        `msgpack:",inline"`
	ReservationID string `msgpack:"id"`
	Returned      int64  `msgpack:"rt"`
}

// SettleSpend settles a reservation of this scope (Token) for the work of
// root FrameID in scope From: Spent is what it spent so far (cumulative;
// Final once it finished). The server sends it itself, from the work's
// scope's outbox, with a deterministic request id and its Proof; a repeat
// charges nothing more. A charge that takes the reserving frame past its spend
// limit suspends it (spend_exceeded).
type SettleSpend struct {
	Header  `msgpack:",inline"`
	Token   string `msgpack:"tk"`
	From    string `msgpack:"fm"`
	FrameID string `msgpack:"f"`
	Spent   int64  `msgpack:"sp"`
	// Previous is what From's binding records as acknowledged before
	// (Binding.Delivered): what a scope that no longer keeps the
	// reservation does not charge again.
	Previous int64 `msgpack:"pv,omitempty"`
	Final    bool  `msgpack:"fi,omitempty"`
	// Proof is the sending server's signature of the settlement, with the
	// ledger key (actors.SignSettlement): holding a reservation token is
	// not enough to settle it, so the work a token was given to cannot
	// settle its own reservation first, for another frame or amount.
	Proof string `msgpack:"pf,omitempty"`
}

// SettleSpendReply says what the settlement charged (0 for a repeat) and
// where: ChargedTo, a frame of this scope, or Routed, this scope's own
// binding to a reservation further up.
type SettleSpendReply struct {
	Result        `msgpack:",inline"`
	ReservationID string           `msgpack:"id"`
	Settled       int64            `msgpack:"s"`
	Charged       int64            `msgpack:"cg"`
	ChargedTo     string           `msgpack:"to,omitempty"`
	Routed        string           `msgpack:"ro,omitempty"`
	Suspension    *SuspensionToken `msgpack:"su,omitempty"`
}

// AckSettlement records, in the work's scope, that the reserving scope
// acknowledged its settlement of ReservationID through Through (the
// server's outbox sends it after SettleSpend's reply).
type AckSettlement struct {
	Header        `msgpack:",inline"`
	ReservationID string `msgpack:"id"`
	Through       int64  `msgpack:"th"`
	Final         bool   `msgpack:"fi,omitempty"`
	// Proof is the sending server's signature (actors.SignAck): the work
	// cannot mark its own settlement delivered, and so escape it.
	Proof string `msgpack:"pf,omitempty"`
}

// AckSettlementReply confirms it.
type AckSettlementReply struct {
	Result        `msgpack:",inline"`
	ReservationID string `msgpack:"id"`
	Through       int64  `msgpack:"th"`
}

// GetLedger reads a scope's ledger: its live frames (or FrameID and its
// live descendants) with what they may spend, hold and spent, their
// reservations, and the scope's bindings to other scopes' reservations (its
// outbox).
type GetLedger struct {
	Header  `msgpack:",inline"`
	FrameID string `msgpack:"f,omitempty"`
}

// GetLedgerReply is the ledger as of Version (server time Now).
type GetLedgerReply struct {
	Result   `msgpack:",inline"`
	Now      int64              `msgpack:"now"`
	Frames   []frames.LedgerRow `msgpack:"fr,omitempty"`
	Bindings []frames.Binding   `msgpack:"bn,omitempty"`
}

// Op returns OpReserveSpend.
func (*ReserveSpend) Op() Op { return OpReserveSpend }

// Op returns OpRenewReservation.
func (*RenewReservation) Op() Op { return OpRenewReservation }

// Op returns OpReleaseReservation.
func (*ReleaseReservation) Op() Op { return OpReleaseReservation }

// Op returns OpSettleSpend.
func (*SettleSpend) Op() Op { return OpSettleSpend }

// Op returns OpAckSettlement.
func (*AckSettlement) Op() Op { return OpAckSettlement }

// Op returns OpGetLedger.
func (*GetLedger) Op() Op { return OpGetLedger }

// Mut returns the header of a mutating request.
func (r *ReserveSpend) Mut() *Header { return &r.Header }

// Mut returns the header of a mutating request.
func (r *RenewReservation) Mut() *Header { return &r.Header }

// Mut returns the header of a mutating request.
func (r *ReleaseReservation) Mut() *Header { return &r.Header }

// Mut returns the header of a mutating request.
func (r *SettleSpend) Mut() *Header { return &r.Header }

// Mut returns the header of a mutating request.
func (r *AckSettlement) Mut() *Header { return &r.Header }
