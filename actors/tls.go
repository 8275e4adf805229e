package actors

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// This file keeps callers out of remoting and the cluster: TLS (a server
// certificate, mutual TLS optional, callers' certificate names optionally
// restricted) and a shared secret every caller presents.
//
// Proto.Actor remoting is two one-way gRPC streams: a node sends over the
// connection it dials to a peer and receives over the one the peer dials
// back. So every node — a remote Client too, whose replies arrive on a
// connection the server dials to it — is both a TLS server and a TLS
// client, and one Security configures both sides: the certificate it
// serves is the one it presents when a peer asks for a client certificate.

// ClientAuth says whether a node asks the callers that connect to it for a
// certificate.
type ClientAuth string

const (
	// ClientAuthNone asks for none (TLS authenticates the server only).
	ClientAuthNone ClientAuth = "none"
	// ClientAuthRequest verifies a certificate if the caller presents one
	// and admits a caller without one (for a migration to mutual TLS).
	ClientAuthRequest ClientAuth = "request"
	// ClientAuthRequire refuses a caller without a certificate that chains
	// to the client CAs: mutual TLS.
	ClientAuthRequire ClientAuth = "require"
)

// MinSecretBytes is the least a shared secret may hold.
const MinSecretBytes = 32

// TLSFiles names a node's TLS files (PEM). CertFile and KeyFile are
// required; the rest is optional.
type TLSFiles struct {
	// CertFile and KeyFile are this node's certificate (with any
	// intermediates after it) and its key: served to the peers that
	// connect, and presented to the peers it connects to when they ask
	// for a client certificate. Under mutual TLS the certificate needs
	// both the serverAuth and clientAuth extended key usages (or none).
	CertFile, KeyFile string
	// CAFile holds the CAs the certificates of the peers this node
	// connects to must chain to ("": the system's roots).
	CAFile string
	// ClientCAFile holds the CAs callers' certificates must chain to
	// (default CAFile); only with ClientAuth request or require.
	ClientCAFile string
	// ClientAuth is none (the default), request or require.
	ClientAuth ClientAuth
	// ServerName is the name checked in the certificates of the peers
	// this node connects to ("": the host of the address it dials, an IP
	// address or a DNS name). Give every node's certificate this name
	// (a DNS SAN) to use one name for the whole cluster.
	ServerName string
	// AllowedNames, when not empty, admits only callers whose certificate
	// carries one of these names: its subject's common name, a DNS SAN or
	// a URI SAN. Needs ClientAuth require.
	AllowedNames []string
}

// TLSFileError is a TLS setting that cannot be used: Field is the
// TLSFiles field at fault ("CertFile", "KeyFile", …), Path its file.
type TLSFileError struct {
	Field string
	Path  string
	Err   error
}

func (e *TLSFileError) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("actors: TLS %s: %v", e.Field, e.Err)
	}
	return fmt.Sprintf("actors: TLS %s (%s): %v", e.Field, e.Path, e.Err)
}

func (e *TLSFileError) Unwrap() error { return e.Err }

// LoadTLS reads f and returns the TLS configurations this node serves
// with (server) and connects with (client), for NewSecurity. Every file
// is read and checked now: a missing or unreadable file, a key that does
// not match its certificate, an expired certificate or a CA file without
// a certificate is a *TLSFileError naming the field and the file.
func LoadTLS(f TLSFiles) (server, client *tls.Config, err error) {
	fail := func(field, path string, format string, args ...any) (*tls.Config, *tls.Config, error) {
		return nil, nil, &TLSFileError{Field: field, Path: path, Err: fmt.Errorf(format, args...)}
	}
	switch {
	case f.CertFile == "" && f.KeyFile == "":
		return fail("CertFile", "", "is needed: every node serves a certificate (replies come back on connections the server dials)")
	case f.CertFile == "":
		return fail("CertFile", "", "is needed with a key file")
	case f.KeyFile == "":
		return fail("KeyFile", "", "is needed with a certificate file")
	}
	auth := f.ClientAuth
	if auth == "" {
		auth = ClientAuthNone
	}
	var mode tls.ClientAuthType
	switch auth {
	case ClientAuthNone:
		mode = tls.NoClientCert
	case ClientAuthRequest:
		mode = tls.VerifyClientCertIfGiven
	case ClientAuthRequire:
		mode = tls.RequireAndVerifyClientCert
	default:
		return fail("ClientAuth", "", "must be none, request or require, got %q", auth)
	}
	if len(f.AllowedNames) > 0 && auth != ClientAuthRequire {
		return fail("AllowedNames", "", "need client authentication require (a caller without a certificate would bypass the names), got %s", auth)
	}
	if f.ClientCAFile != "" && auth == ClientAuthNone {
		return fail("ClientCAFile", f.ClientCAFile, "needs client authentication request or require: with none, callers' certificates are not asked for")
	}

	certPEM, err := os.ReadFile(f.CertFile)
	if err != nil {
		return fail("CertFile", f.CertFile, "cannot be read: %v", err)
	}
	keyPEM, err := os.ReadFile(f.KeyFile)
	if err != nil {
		return fail("KeyFile", f.KeyFile, "cannot be read: %v", err)
	}
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return fail("CertFile", f.CertFile, "holds no PEM certificate")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return fail("CertFile", f.CertFile, "holds a certificate that cannot be parsed: %v", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fail("KeyFile", f.KeyFile, "is not the key of %s: %v", f.CertFile, err)
	}
	pair.Leaf = leaf
	now := time.Now()
	switch {
	case now.After(leaf.NotAfter):
		return fail("CertFile", f.CertFile, "expired on %s", leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return fail("CertFile", f.CertFile, "is not valid before %s", leaf.NotBefore.UTC().Format(time.RFC3339))
	case len(leaf.ExtKeyUsage) > 0 && !hasUsage(leaf, x509.ExtKeyUsageServerAuth):
		return fail("CertFile", f.CertFile, "lacks the serverAuth extended key usage: a node serves it")
	case len(leaf.ExtKeyUsage) > 0 && auth == ClientAuthRequire && !hasUsage(leaf, x509.ExtKeyUsageClientAuth):
		return fail("CertFile", f.CertFile, "lacks the clientAuth extended key usage: under mutual TLS a node presents it when it connects too")
	}

	var roots *x509.CertPool // nil: the system's
	if f.CAFile != "" {
		if roots, err = readPool(f.CAFile); err != nil {
			return fail("CAFile", f.CAFile, "%v", err)
		}
	}
	server = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{pair}, ClientAuth: mode}
	if auth != ClientAuthNone {
		switch {
		case f.ClientCAFile != "":
			if server.ClientCAs, err = readPool(f.ClientCAFile); err != nil {
				return fail("ClientCAFile", f.ClientCAFile, "%v", err)
			}
		case roots != nil:
			server.ClientCAs = roots
		default:
			return fail("ClientCAFile", "", "is needed with client authentication %s (or a CA file): the CAs callers' certificates must chain to", auth)
		}
	}
	if len(f.AllowedNames) > 0 {
		allowed := slices.Clone(f.AllowedNames)
		server.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("no client certificate")
			}
			names := certNames(cs.PeerCertificates[0])
			for _, n := range names {
				if slices.Contains(allowed, n) {
					return nil
				}
			}
			return fmt.Errorf("the client certificate's names %v are not among the allowed names", names)
		}
	}
	// The certificate is presented whenever a server asks for one, even one
	// that names other CAs (Go's default would then send none), so that a
	// refusing server logs the real reason: another CA.
	client = &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots, ServerName: f.ServerName,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }}
	return server, client, nil
}

func hasUsage(c *x509.Certificate, u x509.ExtKeyUsage) bool {
	return slices.Contains(c.ExtKeyUsage, u) || slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageAny)
}

func readPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot be read: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, errors.New("holds no PEM certificate")
	}
	return pool, nil
}

// certNames lists the names a certificate is known by: its common name,
// DNS SANs and URI SANs.
func certNames(c *x509.Certificate) []string {
	var out []string
	if c.Subject.CommonName != "" {
		out = append(out, c.Subject.CommonName)
	}
	out = append(out, c.DNSNames...)
	for _, u := range c.URIs {
		out = append(out, u.String())
	}
	return out
}

// LoadSecret reads a shared secret from path: the file's bytes without
// trailing white space (an editor's or `openssl rand -hex 32 >`'s newline
// is not part of it). A secret shorter than MinSecretBytes is refused.
func LoadSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("actors: the secret file %s cannot be read: %w", path, err)
	}
	secret, err := ParseSecret(b)
	if err != nil {
		return nil, fmt.Errorf("actors: the secret file %s %w", path, err)
	}
	return secret, nil
}

// ParseSecret is LoadSecret for a file's contents. Its error is phrased
// to follow the file's name: "must hold at least 32 bytes, got 5 (…)".
func ParseSecret(b []byte) ([]byte, error) {
	b = bytes.TrimRight(b, " \t\r\n")
	if len(b) < MinSecretBytes {
		return nil, fmt.Errorf("must hold at least %d bytes (trailing white space aside), got %d (make one with: openssl rand -hex 32)", MinSecretBytes, len(b))
	}
	return b, nil
}

// SecurityConfig configures NewSecurity. The zero value is plaintext and
// admits anyone.
type SecurityConfig struct {
	// ServerTLS is what this node serves remoting (and a cluster member
	// its health endpoint) with; ClientTLS what it connects to peers with.
	// Both or neither: every node is both (see LoadTLS).
	ServerTLS, ClientTLS *tls.Config
	// Secret, when not empty, must be presented by every caller, and is
	// presented to every peer: at least MinSecretBytes, the same on every
	// node (see LoadSecret).
	Secret []byte
	// Logger receives one line per refused caller, naming it and the
	// reason (at most about one a second past a burst; default
	// slog.Default()).
	Logger *slog.Logger
}

// Security is a node's TLS and shared secret, for WithSecurity (remoting)
// and ClusterConfig.Security. A nil *Security is plaintext and admits
// anyone.
type Security struct {
	server, client *tls.Config
	secret         []byte
	sum            [sha256.Size]byte
	log            *slog.Logger
	limit          logLimiter
}

// NewSecurity checks c and returns the Security it describes.
func NewSecurity(c SecurityConfig) (*Security, error) {
	switch {
	case (c.ServerTLS == nil) != (c.ClientTLS == nil):
		return nil, errors.New("actors: Security needs both ServerTLS and ClientTLS, or neither: every node serves (replies come back on connections the server dials) and connects")
	case c.ServerTLS != nil && len(c.ServerTLS.Certificates) == 0 && c.ServerTLS.GetCertificate == nil && c.ServerTLS.GetConfigForClient == nil:
		return nil, errors.New("actors: Security's ServerTLS has no certificate")
	case len(c.Secret) > 0 && len(c.Secret) < MinSecretBytes:
		return nil, fmt.Errorf("actors: the shared secret must hold at least %d bytes, got %d", MinSecretBytes, len(c.Secret))
	}
	s := &Security{log: c.Logger, secret: slices.Clone(c.Secret)}
	if c.ServerTLS != nil {
		s.server, s.client = c.ServerTLS.Clone(), c.ClientTLS.Clone()
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.sum = sha256.Sum256(s.secret)
	return s, nil
}

// TLS reports whether connections are TLS.
func (s *Security) TLS() bool { return s != nil && s.server != nil }

// Mutual reports whether callers must present a certificate.
func (s *Security) Mutual() bool {
	return s.TLS() && s.server.ClientAuth == tls.RequireAndVerifyClientCert
}

// HasSecret reports whether callers must present the shared secret.
func (s *Security) HasSecret() bool { return s != nil && len(s.secret) > 0 }

// String describes s for a log line: "tls=mutual secret=on".
func (s *Security) String() string {
	mode := "off"
	switch {
	case s.Mutual():
		mode = "mutual"
	case s.TLS() && s.server.ClientAuth != tls.NoClientCert:
		mode = "server+optional-client"
	case s.TLS():
		mode = "server"
	}
	secret := "off"
	if s.HasSecret() {
		secret = "on"
	}
	return "tls=" + mode + " secret=" + secret
}

// WithSecurity is the remote.ConfigOption that puts s on a remoting
// configuration (see RemoteConfig): the server serves TLS and checks every
// caller's secret; the dialing side connects with TLS (verifying the
// peer's certificate, presenting its own when asked) and presents the
// secret. It replaces Proto.Actor's default plaintext dial credentials and
// adds to the server options rather than replacing them. A nil s changes
// nothing.
func WithSecurity(s *Security) remote.ConfigOption {
	return func(c *remote.Config) {
		if s == nil {
			return
		}
		var srv []grpc.ServerOption
		dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if s.TLS() {
			srv = append(srv, grpc.Creds(&refusingCreds{TransportCredentials: credentials.NewTLS(s.server), s: s}))
			dial = []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(s.client))}
		}
		if s.HasSecret() {
			srv = append(srv, grpc.ChainStreamInterceptor(s.checkSecret))
			dial = append(dial, grpc.WithPerRPCCredentials(secretCreds{secret: string(s.secret)}))
		}
		c.ServerOptions = append(slices.Clip(c.ServerOptions), srv...)
		c.DialOptions = append(slices.Clip(c.DialOptions), dial...) // the last credentials given win
	}
}

// secretKey is the gRPC metadata key of the shared secret (binary: gRPC
// base64-encodes it on the wire).
const secretKey = "stateindex-secret-bin"

// secretCreds presents the secret with every stream.
type secretCreds struct{ secret string }

func (c secretCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{secretKey: c.secret}, nil
}

// RequireTransportSecurity is false: a secret without TLS is allowed (the
// serve command warns that it then travels in clear).
func (secretCreds) RequireTransportSecurity() bool { return false }

// secretMatches compares digests in constant time (which also hides the
// secret's length).
func (s *Security) secretMatches(presented []byte) bool {
	sum := sha256.Sum256(presented)
	return subtle.ConstantTimeCompare(sum[:], s.sum[:]) == 1
}

// checkSecret is the server's stream interceptor: a stream without the
// secret is refused before Proto.Actor sees it.
func (s *Security) checkSecret(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	md, _ := metadata.FromIncomingContext(ss.Context())
	var reason string
	switch vals := md.Get(secretKey); {
	case len(vals) == 0:
		reason = "presented no secret"
	case !s.secretMatches([]byte(vals[0])):
		reason = "presented a wrong secret"
	default:
		return handler(srv, ss)
	}
	who, name := "unknown", ""
	if p, ok := peer.FromContext(ss.Context()); ok {
		who = p.Addr.String()
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
			name = strings.Join(certNames(ti.State.PeerCertificates[0]), ",")
		}
	}
	s.refused(who, name, "unauthenticated: the caller "+reason)
	return status.Errorf(codes.Unauthenticated, "stateindex: the caller %s: this node requires the shared secret (auth.secret_file)", reason)
}

// healthAuthorization is the health endpoint's Authorization header value.
func (s *Security) healthAuthorization() string {
	return "Bearer " + base64.RawURLEncoding.EncodeToString(s.secret)
}

// checkHealthAuthorization checks a health request's Authorization header
// and returns why it is refused ("" when it is not).
func (s *Security) checkHealthAuthorization(h string) string {
	if !s.HasSecret() {
		return ""
	}
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok {
		return "presented no secret"
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || !s.secretMatches(b) {
		return "presented a wrong secret"
	}
	return ""
}

// refused logs one refused caller (rate-limited).
func (s *Security) refused(who, name, reason string) {
	if n, ok := s.limit.allow(time.Now()); ok {
		attrs := []any{"peer", who, "reason", reason}
		if name != "" {
			attrs = append(attrs, "certificate", name)
		}
		if n > 0 {
			attrs = append(attrs, "suppressed", n)
		}
		s.log.Warn("stateindex: refused a caller", attrs...)
	}
}

// refusingCreds logs the callers whose TLS handshake fails: a plaintext
// caller, a certificate from another CA, no certificate under mutual TLS,
// a name not allowed. gRPC itself only tells its own logger, which
// Proto.Actor silences.
type refusingCreds struct {
	credentials.TransportCredentials
	s *Security
}

func (c *refusingCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		switch who := conn.RemoteAddr().String(); {
		case errors.Is(err, io.EOF):
			// Connected and left without a byte: a port probe, not a caller.
			c.s.log.Debug("stateindex: a connection closed before its TLS handshake", "peer", who)
		case strings.Contains(err.Error(), "remote error: "):
			// The caller's TLS refused this node (its certificate, most
			// likely): the caller's log says why.
			c.s.refused(who, "", "TLS handshake failed: the caller refused this node: "+err.Error())
		default:
			c.s.refused(who, "", "TLS handshake failed: "+err.Error())
		}
	}
	return out, info, err
}

func (c *refusingCreds) Clone() credentials.TransportCredentials {
	return &refusingCreds{TransportCredentials: c.TransportCredentials.Clone(), s: c.s}
}

// logLimiter lets a burst of logBurst lines through, then one a second;
// it counts what it holds back and reports the count with the next line.
type logLimiter struct {
	mu         sync.Mutex
	tokens     float64
	last       time.Time
	suppressed int
}

const logBurst = 10

func (l *logLimiter) allow(now time.Time) (suppressed int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last.IsZero() {
		l.tokens = logBurst
	} else {
		l.tokens = min(logBurst, l.tokens+now.Sub(l.last).Seconds())
	}
	l.last = now
	if l.tokens < 1 {
		l.suppressed++
		return 0, false
	}
	l.tokens--
	n := l.suppressed
	l.suppressed = 0
	return n, true
}
