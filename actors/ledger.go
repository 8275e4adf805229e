package actors

import (
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// reservationClaims verifies a reservation token with the ledger key.
func (h *handler) reservationClaims(token string) (frames.ReservationClaims, error) {
	cl, err := parseReservation(h.cfg.LedgerKey, token)
	if err != nil {
		return cl, messages.Errorf(messages.CodeReservationInvalid, "reservation token is malformed or forged (or signed with another ledger key)")
	}
	return cl, nil
}

// reservationNamed is the id of the reservation of scope a request names
// by token (verified, and of this scope) or by id.
func (h *handler) reservationNamed(scope, token, id string) (string, error) {
	if token == "" {
		return id, nil
	}
	cl, err := h.reservationClaims(token)
	if err != nil {
		return "", err
	}
	if cl.Scope != scope || (id != "" && id != cl.ID) {
		return "", messages.Errorf(messages.CodeReservationInvalid, "reservation token of scope %q names %q, not a reservation of this scope", cl.Scope, cl.ID)
	}
	return cl.ID, nil
}
