package actors

import (
	"context"

	"github.com/stateindex/stateindex/messages"
)

// ReserveSpend reserves spend on a frame for work it delegates: a child
// frame in its scope, or a root frame in another scope (req.For). The
// reply's Token is what PushFrame.Reservation presents.
func (c *Client) ReserveSpend(ctx context.Context, req *messages.ReserveSpend) (*messages.ReserveSpendReply, error) {
	return call[*messages.ReserveSpendReply](ctx, c, req)
}

// RenewReservation extends a reservation's lease.
func (c *Client) RenewReservation(ctx context.Context, req *messages.RenewReservation) (*messages.RenewReservationReply, error) {
	return call[*messages.RenewReservationReply](ctx, c, req)
}

// ReleaseReservation returns what a reservation holds to its frame now.
func (c *Client) ReleaseReservation(ctx context.Context, req *messages.ReleaseReservation) (*messages.ReleaseReservationReply, error) {
	return call[*messages.ReleaseReservationReply](ctx, c, req)
}

// SettleSpend settles a reservation with the work's spend (the server's
// outbox sends it; a caller rarely needs to).
func (c *Client) SettleSpend(ctx context.Context, req *messages.SettleSpend) (*messages.SettleSpendReply, error) {
	return call[*messages.SettleSpendReply](ctx, c, req)
}

// AckSettlement records a delivered settlement in the work's scope (the
// server's outbox sends it).
func (c *Client) AckSettlement(ctx context.Context, req *messages.AckSettlement) (*messages.AckSettlementReply, error) {
	return call[*messages.AckSettlementReply](ctx, c, req)
}

// GetLedger reads a scope's ledger.
func (c *Client) GetLedger(ctx context.Context, req *messages.GetLedger) (*messages.GetLedgerReply, error) {
	return call[*messages.GetLedgerReply](ctx, c, req)
}
