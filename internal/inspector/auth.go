package inspector

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
)

// MinSecretBytes is the least a secret file may hold (trailing
// whitespace, such as a final newline, is not part of the secret).
const MinSecretBytes = 16

// Loopback reports whether the inspector bound to addr (HOST:PORT) is
// reachable from this machine only: host is localhost or a loopback IP.
// An empty host, a wildcard (0.0.0.0, ::) or any other name is not.
func Loopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("want HOST:PORT: %w", err)
	}
	if strings.EqualFold(host, "localhost") {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

// CheckListen applies the rule of the inspector's address: on loopback it
// needs nothing; on any other address it needs what remoting's callers
// need (hasSecret): a secret every request must carry, or a client
// certificate (mutual TLS).
func CheckListen(addr string, hasSecret bool) error {
	lo, err := Loopback(addr)
	if err != nil {
		return err
	}
	if !lo && !hasSecret {
		return fmt.Errorf("%s is not a loopback address: the inspector serves it only to authenticated callers: remoting's shared secret (auth.secret_file) or one of its own (http.secret_file, --http-secret-file: a file of at least %d bytes), which every request must carry, or mutual TLS (tls.client_auth: require)", addr, MinSecretBytes)
	}
	return nil
}

// ReadSecret reads a secret file: its content less trailing whitespace, at
// least MinSecretBytes of it.
func ReadSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s := strings.TrimRight(string(b), " \t\r\n")
	if len(s) < MinSecretBytes {
		return nil, fmt.Errorf("it holds %d bytes of secret, want at least %d", len(s), MinSecretBytes)
	}
	if strings.ContainsAny(s, "\r\n") {
		return nil, errors.New("a secret is one line")
	}
	return []byte(s), nil
}

// authorized reports whether r carries the secret: as a bearer token
// (Authorization: Bearer SECRET) or as the password of HTTP basic
// authentication (any user name). The comparison takes the same time
// whatever the guess (digests of equal length, compared in constant time).
func authorized(r *http.Request, secret []byte) bool {
	var got string
	if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		got = strings.TrimSpace(h[7:])
	} else if _, p, ok := r.BasicAuth(); ok {
		got = p
	} else {
		return false
	}
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256(secret)
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}
