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

// SignSettlement sets r.Proof: the signature, with the ledger key, that
// makes a SettleSpend the server's own. The outbox signs what it sends;
// a tool that delivers a settlement by hand signs it with the key of the
// servers (Config.LedgerKey).
func SignSettlement(key []byte, r *messages.SettleSpend) {
	r.Proof = signProof(key, settlementDomain, settlementPayload(r))
}

// SignAck sets r.Proof: the signature, with the ledger key, that makes an
// AckSettlement the server's own.
func SignAck(key []byte, r *messages.AckSettlement) {
	r.Proof = signProof(key, ackDomain, ackPayload(r))
}

// settlementProof checks a SettleSpend's proof.
func (h *handler) settlementProof(r *messages.SettleSpend) error {
	if !validProof(h.cfg.LedgerKey, settlementDomain, settlementPayload(r), r.Proof) {
		return messages.Errorf(messages.CodeReservationInvalid,
			"a settlement is sent by the StateIndex's outbox and signed with the ledger key: this one's proof is missing, forged, or signed with another key")
	}
	return nil
}

// ackProof checks an AckSettlement's proof.
func (h *handler) ackProof(r *messages.AckSettlement) error {
	if !validProof(h.cfg.LedgerKey, ackDomain, ackPayload(r), r.Proof) {
		return messages.Errorf(messages.CodeReservationInvalid,
			"an acknowledgement of a settlement is sent by the StateIndex's outbox and signed with the ledger key: this one's proof is missing, forged, or signed with another key")
	}
	return nil
}
