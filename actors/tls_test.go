package actors_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/remote"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/internal/devcerts"
	"github.com/stateindex/stateindex/internal/proctest"
	"github.com/stateindex/stateindex/messages"
)

// The TLS tests run servers and callers as child processes (this test
// binary, see TestMain): a process has one remoting system (remote.Start
// writes gRPC's global logger), and each case needs its own credentials on
// both sides.

const (
	// secEnv holds a child's security as JSON (secSpec).
	secEnv = "STATEINDEX_TEST_SECURITY"
	// clientChildEnv makes a child a caller of the server at its value.
	clientChildEnv = "STATEINDEX_TEST_REMOTE_CLIENT"
)

// secSpec is a child's security: TLS files and a secret file.
type secSpec struct {
	Cert, Key, CA, ClientCA string
	ClientAuth              string
	ServerName              string
	Allowed                 []string
	Secret                  string
}

func (s secSpec) env() string {
	b, _ := json.Marshal(s)
	return secEnv + "=" + string(b)
}

// childSecurity builds the Security of secEnv (nil when unset); refused
// callers are logged as JSON on stdout.
func childSecurity() (*actors.Security, error) {
	v := os.Getenv(secEnv)
	if v == "" {
		return nil, nil
	}
	var s secSpec
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return nil, err
	}
	sc := actors.SecurityConfig{Logger: slog.New(slog.NewJSONHandler(os.Stdout, nil))}
	if s.Cert != "" {
		var err error
		sc.ServerTLS, sc.ClientTLS, err = actors.LoadTLS(actors.TLSFiles{CertFile: s.Cert, KeyFile: s.Key, CAFile: s.CA, ClientCAFile: s.ClientCA,
			ClientAuth: actors.ClientAuth(s.ClientAuth), ServerName: s.ServerName, AllowedNames: s.Allowed})
		if err != nil {
			return nil, err
		}
	}
	if s.Secret != "" {
		var err error
		if sc.Secret, err = actors.LoadSecret(s.Secret); err != nil {
			return nil, err
		}
	}
	return actors.NewSecurity(sc)
}

// callResult is what a caller child reports.
type callResult struct {
	OK          bool   `json:"ok"`
	Err         string `json:"err"`
	Unavailable bool   `json:"unavailable"`
	Timeout     bool   `json:"timeout"`
	Millis      int64  `json:"ms"`
}

// runRemoteClientChild pushes a frame to the StateIndex at
// clientChildEnv's address and reads its stack back, with secEnv's
// security, and prints "result {callResult}".
func runRemoteClientChild() int {
	addr := os.Getenv(clientChildEnv)
	sec, err := childSecurity()
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	sys := quietSystem()
	if _, err := actors.StartRemote(sys, actors.RemoteConfig("127.0.0.1", 0, actors.WithSecurity(sec))); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	c := actors.NewClient(sys.Root, actors.RemotePID(addr), 10*time.Second)
	t0 := time.Now()
	f, err := c.PushFrame(context.Background(), &messages.PushFrame{Header: mut("tls"), Goal: "over tls", Budget: budget.TokenBudget{Total: 100}})
	if err == nil {
		var st *messages.GetStackReply
		if st, err = c.GetStack(context.Background(), &messages.GetStack{Header: messages.Header{Scope: "tls"}}); err == nil &&
			(len(st.Frames) == 0 || st.Frames[len(st.Frames)-1].ID != f.FrameID) {
			err = fmt.Errorf("the stack does not end with the frame pushed: %+v", st.Frames)
		}
	}
	r := callResult{OK: err == nil, Millis: time.Since(t0).Milliseconds()}
	if err != nil {
		r.Err, r.Unavailable, r.Timeout = err.Error(), errors.Is(err, actors.ErrUnavailable), errors.Is(err, actors.ErrTimeout)
	}
	b, _ := json.Marshal(r)
	fmt.Println("result", string(b))
	return 0
}

// pki is a test's certificates: CA one signs the server, the client and a
// stranger; CA two signs an outsider.
type pki struct {
	caOne                 *devcerts.CA
	dir                   string
	ca, ca2               string
	server, client        [2]string // cert, key
	stranger, outsider    [2]string
	secret, wrongSecret   string
	serverName, shortFile string
}

func newPKI(t testing.TB) *pki {
	t.Helper()
	dir := t.TempDir()
	ca, err := devcerts.NewCA("test CA one", time.Hour)
	require.NoError(t, err)
	p := &pki{caOne: ca, dir: dir, serverName: "stateindex.test"}
	ca2, err := devcerts.NewCA("test CA two", time.Hour)
	require.NoError(t, err)
	p.ca, p.ca2 = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca2.pem")
	require.NoError(t, os.WriteFile(p.ca, ca.CertPEM, 0o600))
	require.NoError(t, os.WriteFile(p.ca2, ca2.CertPEM, 0o600))
	issue := func(from *devcerts.CA, name string, hosts ...string) [2]string {
		pair, err := from.Issue(name, hosts, time.Hour)
		require.NoError(t, err)
		files := [2]string{filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")}
		require.NoError(t, pair.Write(files[0], files[1]))
		return files
	}
	p.server = issue(ca, "server", "127.0.0.1", p.serverName)
	// The client serves too (the server dials back to deliver replies):
	// under a shared server name its certificate carries that name.
	p.client = issue(ca, "client", "127.0.0.1", p.serverName, "spiffe://test/client")
	p.stranger = issue(ca, "stranger", "127.0.0.1")
	p.outsider = issue(ca2, "outsider", "127.0.0.1")
	p.secret, p.wrongSecret, p.shortFile = filepath.Join(dir, "secret"), filepath.Join(dir, "wrong"), filepath.Join(dir, "short")
	require.NoError(t, os.WriteFile(p.secret, []byte(strings.Repeat("s3cr3t", 8)+"\n"), 0o600))
	require.NoError(t, os.WriteFile(p.wrongSecret, []byte(strings.Repeat("wr0ng!", 8)), 0o600))
	require.NoError(t, os.WriteFile(p.shortFile, []byte("too short\n"), 0o600))
	return p
}

// spec is a node's security with the given certificate, trusting CA one.
func (p *pki) spec(pair [2]string) secSpec {
	return secSpec{Cert: pair[0], Key: pair[1], CA: p.ca}
}

func TestLoadTLSRefusesWhatCannotWork(t *testing.T) {
	p := newPKI(t)
	missing := filepath.Join(p.dir, "missing.pem")
	garbage := filepath.Join(p.dir, "garbage.pem")
	require.NoError(t, os.WriteFile(garbage, []byte("not a certificate\n"), 0o600))
	expired := p.issueWith(t, "expired", devcerts.Options{NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	serverOnly := p.issueWith(t, "serveronly", devcerts.Options{Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	for _, tc := range []struct {
		name  string
		f     actors.TLSFiles
		field string
		want  string
	}{
		{"nothing", actors.TLSFiles{CAFile: p.ca}, "CertFile", "is needed: every node serves a certificate"},
		{"a key without its certificate", actors.TLSFiles{KeyFile: p.server[1]}, "CertFile", "is needed with a key file"},
		{"a certificate without its key", actors.TLSFiles{CertFile: p.server[0]}, "KeyFile", "is needed with a certificate file"},
		{"a missing certificate", actors.TLSFiles{CertFile: missing, KeyFile: p.server[1]}, "CertFile", "cannot be read"},
		{"a missing key", actors.TLSFiles{CertFile: p.server[0], KeyFile: missing}, "KeyFile", "cannot be read"},
		{"no certificate in the file", actors.TLSFiles{CertFile: garbage, KeyFile: p.server[1]}, "CertFile", "holds no PEM certificate"},
		{"another certificate's key", actors.TLSFiles{CertFile: p.server[0], KeyFile: p.client[1]}, "KeyFile", "is not the key of " + p.server[0]},
		{"an expired certificate", actors.TLSFiles{CertFile: expired[0], KeyFile: expired[1]}, "CertFile", "expired on"},
		{"a missing CA file", actors.TLSFiles{CertFile: p.server[0], KeyFile: p.server[1], CAFile: missing}, "CAFile", "cannot be read"},
		{"a CA file without a certificate", actors.TLSFiles{CertFile: p.server[0], KeyFile: p.server[1], CAFile: garbage}, "CAFile", "holds no PEM certificate"},
		{"a bad client auth", actors.TLSFiles{CertFile: p.server[0], KeyFile: p.server[1], ClientAuth: "sometimes"}, "ClientAuth", "must be none, request or require"},
		{"a client CA without client auth", actors.TLSFiles{CertFile: p.server[0], KeyFile: p.server[1], ClientCAFile: p.ca}, "ClientCAFile", "needs client authentication request or require"},
		{"client auth without any CA", actors.TLSFiles{CertFile: p.server[0], KeyFile: p.server[1], ClientAuth: actors.ClientAuthRequire}, "ClientCAFile", "is needed with client authentication require"},
		{"an unreadable client CA", actors.TLSFiles{CertFile: p.server[0], KeyFile: p.server[1], ClientAuth: actors.ClientAuthRequire, ClientCAFile: missing}, "ClientCAFile", "cannot be read"},
		{"allowed names without require", actors.TLSFiles{CertFile: p.server[0], KeyFile: p.server[1], CAFile: p.ca, ClientAuth: actors.ClientAuthRequest, AllowedNames: []string{"x"}}, "AllowedNames", "need client authentication require"},
		{"a server-only certificate under mutual TLS", actors.TLSFiles{CertFile: serverOnly[0], KeyFile: serverOnly[1], CAFile: p.ca, ClientAuth: actors.ClientAuthRequire}, "CertFile", "lacks the clientAuth extended key usage"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, cl, err := actors.LoadTLS(tc.f)
			require.Error(t, err)
			assert.Nil(t, srv)
			assert.Nil(t, cl)
			var fe *actors.TLSFileError
			require.True(t, errors.As(err, &fe), "%T %v", err, err)
			assert.Equal(t, tc.field, fe.Field)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	// A server-only certificate is fine without mutual TLS.
	_, _, err := actors.LoadTLS(actors.TLSFiles{CertFile: serverOnly[0], KeyFile: serverOnly[1], CAFile: p.ca})
	assert.NoError(t, err)
}

// issueWith issues a certificate from CA one with the given options.
func (p *pki) issueWith(t *testing.T, name string, o devcerts.Options) [2]string {
	t.Helper()
	pair, err := p.caOne.IssueWith(name, []string{"127.0.0.1"}, o)
	require.NoError(t, err)
	files := [2]string{filepath.Join(p.dir, name+".pem"), filepath.Join(p.dir, name+".key")}
	require.NoError(t, pair.Write(files[0], files[1]))
	return files
}

func TestSecretsAndSecurityAreChecked(t *testing.T) {
	p := newPKI(t)
	s, err := actors.LoadSecret(p.secret)
	require.NoError(t, err)
	assert.Equal(t, strings.Repeat("s3cr3t", 8), string(s), "the trailing newline is not part of the secret")
	_, err = actors.LoadSecret(p.shortFile)
	assert.ErrorContains(t, err, "must hold at least 32 bytes (trailing white space aside), got 9")
	_, err = actors.LoadSecret(filepath.Join(p.dir, "missing"))
	assert.ErrorContains(t, err, "cannot be read")

	server, client, err := actors.LoadTLS(actors.TLSFiles{CertFile: p.server[0], KeyFile: p.server[1], CAFile: p.ca, ClientAuth: actors.ClientAuthRequire})
	require.NoError(t, err)
	_, err = actors.NewSecurity(actors.SecurityConfig{ServerTLS: server})
	assert.ErrorContains(t, err, "needs both ServerTLS and ClientTLS")
	_, err = actors.NewSecurity(actors.SecurityConfig{ServerTLS: &tls.Config{}, ClientTLS: client})
	assert.ErrorContains(t, err, "has no certificate")
	_, err = actors.NewSecurity(actors.SecurityConfig{Secret: []byte("short")})
	assert.ErrorContains(t, err, "at least 32 bytes, got 5")

	var none *actors.Security
	assert.Equal(t, "tls=off secret=off", none.String())
	sec, err := actors.NewSecurity(actors.SecurityConfig{ServerTLS: server, ClientTLS: client, Secret: s})
	require.NoError(t, err)
	assert.Equal(t, "tls=mutual secret=on", sec.String())
	assert.True(t, sec.TLS() && sec.Mutual() && sec.HasSecret())
	server.ClientAuth = tls.NoClientCert // NewSecurity kept its own copy
	assert.True(t, sec.Mutual())
}

// startSecureServer runs a StateIndex child with spec's security and
// returns it and its address.
func startSecureServer(t testing.TB, name string, spec *secSpec) (*proctest.Proc, string) {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	env := []string{childEnv + "=1"}
	if spec != nil {
		env = append(env, spec.env())
	}
	srv := proctest.Start(t, name, self, nil, env...)
	t.Cleanup(func() {
		srv.CloseStdin()
		_ = srv.Wait(5 * time.Second)
	})
	line, _ := srv.WaitLine(0, regexp.MustCompile(`^(listening |error:)`), 30*time.Second)
	require.True(t, strings.HasPrefix(line, "listening "), line)
	return srv, strings.TrimPrefix(line, "listening ")
}

// call runs a caller child with spec's security against addr.
func call(t *testing.T, addr string, spec *secSpec) callResult {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	env := []string{clientChildEnv + "=" + addr}
	if spec != nil {
		env = append(env, spec.env())
	}
	c := proctest.Start(t, "caller", self, nil, env...)
	line, _ := c.WaitLine(0, regexp.MustCompile(`^(result |error:)`), 60*time.Second)
	require.True(t, strings.HasPrefix(line, "result "), line)
	var r callResult
	require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "result ")), &r))
	require.NoError(t, c.Wait(30*time.Second))
	return r
}

func TestRemoteOverTLSAndMutualTLS(t *testing.T) {
	p := newPKI(t)
	for _, tc := range []struct {
		name           string
		server, caller secSpec
	}{
		{"tls: the server's certificate only", p.spec(p.server), p.spec(p.client)},
		{"mutual tls, a shared server name, allowed names and the secret", func() secSpec {
			s := p.spec(p.server)
			s.ClientAuth, s.ServerName, s.Allowed, s.Secret = "require", p.serverName, []string{"server", "spiffe://test/client"}, p.secret
			return s
		}(), func() secSpec {
			s := p.spec(p.client)
			s.ClientAuth, s.ServerName, s.Allowed, s.Secret = "require", p.serverName, []string{"server"}, p.secret
			return s
		}()},
		{"the secret without tls", secSpec{Secret: p.secret}, secSpec{Secret: p.secret}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, addr := startSecureServer(t, "server", &tc.server)
			r := call(t, addr, &tc.caller)
			assert.True(t, r.OK, "%+v", r)
		})
	}
}

// A caller the server refuses gets a clear error, at once or within the
// two seconds Proto.Actor's connection attempt takes, never its whole
// deadline; the server logs one line naming the caller and the reason.
func TestRemoteRefusesUnauthorisedCallers(t *testing.T) {
	p := newPKI(t)
	mtls := p.spec(p.server)
	mtls.ClientAuth = "require"
	withSecret := p.spec(p.server)
	withSecret.Secret = p.secret
	named := mtls
	named.Allowed = []string{"client"}
	for _, tc := range []struct {
		name      string
		server    secSpec
		caller    *secSpec
		callerErr string // in the caller's error
		serverLog string // in the server's line about the caller ("" when the caller refuses the server)
	}{
		{"a plaintext caller to a TLS server", p.spec(p.server), nil,
			"does it require TLS", "TLS handshake failed: tls: first record does not look like a TLS handshake"},
		{"a caller with the secret but without TLS", withSecret, &secSpec{Secret: p.secret},
			"does it require TLS", "first record does not look like a TLS handshake"},
		{"a caller that trusts another CA", p.spec(p.server), &secSpec{Cert: p.client[0], Key: p.client[1], CA: p.ca2},
			"TLS handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority", ""},
		{"a caller whose certificate another CA signed", mtls, &secSpec{Cert: p.outsider[0], Key: p.outsider[1], CA: p.ca},
			"", "TLS handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority"},
		{"a caller whose name is not allowed", named, func() *secSpec { s := p.spec(p.stranger); return &s }(),
			"", "names [stranger] are not among the allowed names"},
		{"a caller without the secret", withSecret, func() *secSpec { s := p.spec(p.client); return &s }(),
			"unauthenticated: stateindex: the caller presented no secret", "unauthenticated: the caller presented no secret"},
		{"a caller with a wrong secret", withSecret, &secSpec{Cert: p.client[0], Key: p.client[1], CA: p.ca, Secret: p.wrongSecret},
			"unauthenticated: stateindex: the caller presented a wrong secret", "unauthenticated: the caller presented a wrong secret"},
		{"a TLS caller to a plaintext server", secSpec{}, func() *secSpec { s := p.spec(p.client); return &s }(),
			"TLS handshake failed", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server := &tc.server
			if tc.server.Cert == "" && tc.server.Secret == "" {
				server = nil
			}
			srv, addr := startSecureServer(t, "server", server)
			r := call(t, addr, tc.caller)
			require.False(t, r.OK, "refused: %+v", r)
			t.Logf("%s after %d ms: %s", tc.name, r.Millis, r.Err)
			// Unavailable (not applied) when the transport knows the
			// request never left; after a refused stream, a request
			// queued at that moment is "outcome unknown": both say why.
			assert.True(t, r.Unavailable || r.Timeout, "%+v", r)
			assert.Contains(t, r.Err, tc.callerErr)
			assert.NotContains(t, r.Err, "deadline", "answered with the reason, not at the deadline")
			if tc.serverLog != "" {
				line, _ := srv.WaitLine(0, regexp.MustCompile(`refused a caller`), 10*time.Second)
				assert.Contains(t, line, tc.serverLog)
				assert.Regexp(t, `"peer":"127\.0\.0\.1:\d+"`, line, "it names the caller")
			}
		})
	}
}

// Proto.Actor's unary methods panic; any caller could crash the process
// with one call. They are refused instead, and the server keeps serving.
func TestRemoteRefusesUnaryCalls(t *testing.T) {
	p := newRemotePair(t)
	conn, err := grpc.Dial(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = remote.NewRemotingClient(conn).ListProcesses(cctx, &remote.ListProcessesRequest{})
	assert.Equal(t, codes.Unimplemented, status.Code(err), "%v", err)
	_, err = remote.NewRemotingClient(conn).GetProcessDiagnostics(cctx, &remote.GetProcessDiagnosticsRequest{})
	assert.Equal(t, codes.Unimplemented, status.Code(err), "%v", err)
	_, err = p.c.PushFrame(ctx, &messages.PushFrame{Header: mut("alive"), Goal: "g", Budget: budget.TokenBudget{Total: 10}})
	assert.NoError(t, err, "the server still serves")
}
