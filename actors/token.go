package actors

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"strings"

	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// Suspension tokens are opaque to callers: base64url(payload) "." base64url(mac)
// where mac = HMAC-SHA256(key, "stateindex/suspension/v1" || payload). The
// payload names the scope, frame and token id and the expiry; the signature
// makes it unforgeable, the scope's state makes it single-use, and the key is
// stable across restarts so tokens survive them.

const tokenVersion = 1

var tokenDomain = []byte("stateindex/suspension/v1")

// maxTokenLen bounds what is parsed at all.
const maxTokenLen = 1024

var errTokenMalformed = errors.New("malformed or forged suspension token")

type tokenClaims struct {
	Scope     string
	FrameID   string
	TokenID   string
	ExpiresAt int64
}

func signToken(key []byte, c tokenClaims) string {
	p := make([]byte, 0, 16+len(c.Scope)+len(c.FrameID)+len(c.TokenID))
	p = append(p, tokenVersion)
	for _, s := range []string{c.Scope, c.FrameID, c.TokenID} {
		p = binary.AppendUvarint(p, uint64(len(s)))
		p = append(p, s...)
	}
	p = binary.BigEndian.AppendUint64(p, uint64(c.ExpiresAt))
	enc := base64.RawURLEncoding
	return enc.EncodeToString(p) + "." + enc.EncodeToString(tokenMAC(key, p))
}

func tokenMAC(key, payload []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(tokenDomain)
	m.Write(payload)
	return m.Sum(nil)
}

// parseToken checks the signature before looking inside the payload.
func parseToken(key []byte, tok string) (tokenClaims, error) {
	var c tokenClaims
	if len(tok) > maxTokenLen {
		return c, errTokenMalformed
	}
	// One spelling per token: a strict decoder refuses set bits past the
	// data in the last character, and line breaks, which every decoder
	// skips, are refused here.
	if strings.ContainsAny(tok, "\r\n") {
		return c, errTokenMalformed
	}
	ps, ms, ok := strings.Cut(tok, ".")
	if !ok {
		return c, errTokenMalformed
	}
	enc := base64.RawURLEncoding.Strict()
	p, err1 := enc.DecodeString(ps)
	mac, err2 := enc.DecodeString(ms)
	if err1 != nil || err2 != nil || !hmac.Equal(mac, tokenMAC(key, p)) {
		return c, errTokenMalformed
	}
	if len(p) < 1 || p[0] != tokenVersion {
		return c, errTokenMalformed
	}
	p = p[1:]
	var fields [3]string
	for i := range fields {
		n, k := binary.Uvarint(p)
		if k <= 0 || n > uint64(len(p)-k) {
			return c, errTokenMalformed
		}
		fields[i] = string(p[k : k+int(n)])
		p = p[k+int(n):]
	}
	if len(p) != 8 {
		return c, errTokenMalformed
	}
	c.Scope, c.FrameID, c.TokenID = fields[0], fields[1], fields[2]
	c.ExpiresAt = int64(binary.BigEndian.Uint64(p))
	return c, nil
}

// Reservation tokens (the spend ledger): the same form as suspension
// tokens under their own domain, "stateindex/reservation/v1", so that one
// can never pass for the other. The payload names the reserving scope and
// frame, the reservation id, the scope the work is for, the reserving
// frame's ancestors (where spend settled after it finished goes on to, even
// once the scope has forgotten the reservation), the amount held, the
// ceiling and the lease's end. They are signed with Config.LedgerKey
// (the TokenKey when unset): a key every cluster member shares, since the
// work's scope may live on another member than the reserving one.

var reservationDomain = []byte("stateindex/reservation/v1")

// maxReservationTokenLen bounds what is parsed of a reservation token: it
// carries the owner's ancestors (at most MaxDepth of them).
const maxReservationTokenLen = 8 << 10

// maxTokenPath bounds the ancestors a reservation token names.
const maxTokenPath = 256

func signReservation(key []byte, c frames.ReservationClaims) string {
	p := []byte{tokenVersion}
	for _, s := range []string{c.Scope, c.Frame, c.ID, c.For} {
		p = binary.AppendUvarint(p, uint64(len(s)))
		p = append(p, s...)
	}
	p = binary.AppendUvarint(p, uint64(len(c.Path)))
	for _, s := range c.Path {
		p = binary.AppendUvarint(p, uint64(len(s)))
		p = append(p, s...)
	}
	for _, n := range []int64{c.Amount, c.Ceiling, c.ExpiresAt} {
		p = binary.BigEndian.AppendUint64(p, uint64(n))
	}
	enc := base64.RawURLEncoding
	return enc.EncodeToString(p) + "." + enc.EncodeToString(macOf(key, reservationDomain, p))
}

func macOf(key, domain, payload []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(domain)
	m.Write(payload)
	return m.Sum(nil)
}

var errReservationMalformed = errors.New("malformed or forged reservation token")

// parseReservation checks the signature before looking inside the payload.
func parseReservation(key []byte, tok string) (frames.ReservationClaims, error) {
	var c frames.ReservationClaims
	if len(tok) > maxReservationTokenLen || strings.ContainsAny(tok, "\r\n") {
		return c, errReservationMalformed
	}
	ps, ms, ok := strings.Cut(tok, ".")
	if !ok {
		return c, errReservationMalformed
	}
	enc := base64.RawURLEncoding.Strict()
	p, err1 := enc.DecodeString(ps)
	mac, err2 := enc.DecodeString(ms)
	if err1 != nil || err2 != nil || !hmac.Equal(mac, macOf(key, reservationDomain, p)) {
		return c, errReservationMalformed
	}
	if len(p) < 1 || p[0] != tokenVersion {
		return c, errReservationMalformed
	}
	p = p[1:]
	str := func() (string, bool) {
		n, k := binary.Uvarint(p)
		if k <= 0 || n > uint64(len(p)-k) {
			return "", false
		}
		s := string(p[k : k+int(n)])
		p = p[k+int(n):]
		return s, true
	}
	var fields [4]string
	for i := range fields {
		var ok bool
		if fields[i], ok = str(); !ok {
			return c, errReservationMalformed
		}
	}
	n, k := binary.Uvarint(p)
	if k <= 0 || n > maxTokenPath {
		return c, errReservationMalformed
	}
	p = p[k:]
	for range n {
		s, ok := str()
		if !ok {
			return c, errReservationMalformed
		}
		c.Path = append(c.Path, s)
	}
	if len(p) != 24 {
		return c, errReservationMalformed
	}
	c.Scope, c.Frame, c.ID, c.For = fields[0], fields[1], fields[2], fields[3]
	c.Amount = int64(binary.BigEndian.Uint64(p))
	c.Ceiling = int64(binary.BigEndian.Uint64(p[8:]))
	c.ExpiresAt = int64(binary.BigEndian.Uint64(p[16:]))
	if c.Amount < 0 || c.Ceiling < 0 {
		return c, errReservationMalformed
	}
	return c, nil
}

// Settlement proofs: SettleSpend and AckSettlement are the servers' own
// requests (the outbox sends them), signed with the ledger key under their
// own domains over every field that counts — the scope written to, the
// reservation, the work's scope and root, the amounts, finality — so that
// a holder of a reservation token can neither settle it first, for another
// frame or amount, nor mark its own settlement delivered.

var (
	settlementDomain = []byte("stateindex/settlement/v1")
	ackDomain        = []byte("stateindex/settlement-ack/v1")
)

func settlementPayload(r *messages.SettleSpend) []byte {
	return proofPayload([]string{r.Scope, r.Token, r.From, r.FrameID}, []int64{r.Spent, r.Previous}, r.Final)
}

func ackPayload(r *messages.AckSettlement) []byte {
	return proofPayload([]string{r.Scope, r.ReservationID}, []int64{r.Through}, r.Final)
}

func proofPayload(strs []string, nums []int64, final bool) []byte {
	var p []byte
	for _, s := range strs {
		p = binary.AppendUvarint(p, uint64(len(s)))
		p = append(p, s...)
	}
	for _, n := range nums {
		p = binary.BigEndian.AppendUint64(p, uint64(n))
	}
	if final {
		return append(p, 1)
	}
	return append(p, 0)
}

func signProof(key, domain, payload []byte) string {
	return base64.RawURLEncoding.EncodeToString(macOf(key, domain, payload))
}

func validProof(key, domain, payload []byte, proof string) bool {
	if len(proof) > maxTokenLen {
		return false
	}
	mac, err := base64.RawURLEncoding.Strict().DecodeString(proof)
	return err == nil && hmac.Equal(mac, macOf(key, domain, payload))
}
