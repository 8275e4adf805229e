package actors

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"strings"
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
