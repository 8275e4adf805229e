package main

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/internal/proctest"
	"github.com/stateindex/stateindex/messages"
)

func TestCertsIssuesACAOnceAndNodeCertificates(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"certs", "--dir", dir, "--name", "n1", "--hosts", "127.0.0.1, n1.internal,spiffe://si/n1", "--secret"}, &out, &errb), errb.String())
	assert.Contains(t, out.String(), "(a new CA)")
	assert.Contains(t, out.String(), "secret_file: "+filepath.Join(dir, "secret"))
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	require.NoError(t, err)
	out.Reset()
	require.Equal(t, 0, run([]string{"certs", "--dir", dir, "--name", "n2", "--hosts", "10.0.0.2"}, &out, &errb), errb.String())
	assert.NotContains(t, out.String(), "a new CA", "the CA is reused")
	again, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	require.NoError(t, err)
	assert.Equal(t, caPEM, again)

	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(caPEM))
	for name, host := range map[string]string{"n1": "n1.internal", "n2": "10.0.0.2"} {
		b, err := os.ReadFile(filepath.Join(dir, name+".pem"))
		require.NoError(t, err)
		blk, _ := pem.Decode(b)
		require.NotNil(t, blk)
		cert, err := x509.ParseCertificate(blk.Bytes)
		require.NoError(t, err)
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			_, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{usage}})
			assert.NoError(t, err, "%s as %v for %s", name, usage, host)
		}
		st, err := os.Stat(filepath.Join(dir, name+".key"))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "keys are private")
	}
	secret, err := os.ReadFile(filepath.Join(dir, "secret"))
	require.NoError(t, err)
	assert.Regexp(t, `^[0-9a-f]{64}\n$`, string(secret))

	errb.Reset()
	assert.Equal(t, 1, run([]string{"certs", "--dir", dir, "--name", "n1", "--hosts", "127.0.0.1"}, &out, &errb))
	assert.Contains(t, errb.String(), "n1.pem exists: not overwritten")
	for _, args := range [][]string{{"--dir", dir, "--name", "n3"}, {"--dir", dir, "--hosts", "h"}, {"--name", "x", "--hosts", "h"}, {"--dir", dir, "--name", "../x", "--hosts", "h"}} {
		errb.Reset()
		assert.Equal(t, 2, run(append([]string{"certs"}, args...), &out, &errb), "%v", args)
		assert.Contains(t, errb.String(), "give --dir, --name (a plain name) and --hosts")
	}
}

func TestServeRefusesABadTLSOrSecret(t *testing.T) {
	pki := filepath.Join(t.TempDir(), "pki")
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"certs", "--dir", pki, "--name", "a", "--hosts", "127.0.0.1"}, &out, &errb), errb.String())
	require.Equal(t, 0, run([]string{"certs", "--dir", pki, "--name", "b", "--hosts", "127.0.0.1"}, &out, &errb), errb.String())
	require.NoError(t, os.WriteFile(filepath.Join(pki, "short"), []byte("0123456789\n"), 0o600))
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a key that is not the certificate's", []string{"--tls-cert", filepath.Join(pki, "a.pem"), "--tls-key", filepath.Join(pki, "b.key")},
			"--tls-key (" + filepath.Join(pki, "b.key") + ") is not the key of " + filepath.Join(pki, "a.pem")},
		{"a missing CA", []string{"--tls-cert", filepath.Join(pki, "a.pem"), "--tls-key", filepath.Join(pki, "a.key"), "--tls-ca", filepath.Join(pki, "none.pem")},
			"--tls-ca (" + filepath.Join(pki, "none.pem") + ") cannot be read"},
		{"a short secret", []string{"--secret-file", filepath.Join(pki, "short")}, "must hold at least 32 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			var out, errb bytes.Buffer
			code := run(append([]string{"serve", "--data", data, "--listen", "127.0.0.1:0"}, tc.args...), &out, &errb)
			assert.Equal(t, 1, code)
			assert.Contains(t, errb.String(), tc.want)
			assert.NoDirExists(t, data, "nothing is created before the configuration is accepted")
		})
	}
}

// `stateindex serve` over mutual TLS with a secret, and the reading
// commands with --config: the same file lets them in; without it, or with
// a configuration that lacks the secret, they are refused at once, and
// the server logs who and why. (Child processes: a process has one
// remoting system.)
func TestServeAndReadersOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	pki := filepath.Join(dir, "pki")
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"certs", "--dir", pki, "--name", "node", "--hosts", "127.0.0.1", "--secret"}, &out, &errb), errb.String())
	tlsYAML := "tls:\n  cert_file: pki/node.pem\n  key_file: pki/node.key\n  ca_file: pki/ca.pem\n  client_auth: require\n"
	full := filepath.Join(dir, "si.yaml")
	require.NoError(t, os.WriteFile(full, []byte(tlsYAML+"auth:\n  secret_file: pki/secret\n"), 0o600))
	noSecret := filepath.Join(dir, "nosecret.yaml")
	require.NoError(t, os.WriteFile(noSecret, []byte(tlsYAML), 0o600))

	_, file, _, _ := runtime.Caller(0)
	bin := proctest.Build(t, filepath.Join(filepath.Dir(file), "..", ".."), "./cmd/stateindex")
	addr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePorts(t, 1, false)[0])
	srv := proctest.Start(t, "stateindex serve", bin, []string{"serve", "--config", full, "--data", filepath.Join(dir, "data"), "--listen", addr})
	line, _ := srv.WaitLine(0, regexp.MustCompile(`stateindex serving`), 60*time.Second)
	assert.Contains(t, line, `security="tls=mutual secret=on"`)
	defer func() {
		srv.Interrupt()
		assert.NoError(t, srv.Wait(30*time.Second))
	}()

	threads := func(args ...string) (string, string, error) {
		cmd := exec.Command(bin, append([]string{"threads", "--server", addr, "--json", "--timeout", "20s"}, args...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	stdout, stderr, err := threads("--config", full)
	require.NoError(t, err, stderr)
	var r messages.ListFramesReply
	require.NoError(t, json.Unmarshal([]byte(stdout), &r))
	assert.Empty(t, r.Frames)

	t0 := time.Now()
	_, stderr, err = threads()
	assert.Error(t, err)
	assert.Contains(t, stderr, "did not receive the request (the peer closed the connection while it was set up")
	assert.Contains(t, stderr, "does it require TLS")
	assert.Less(t, time.Since(t0), 15*time.Second, "refused, not left to its 20 s deadline")
	srv.WaitLine(0, regexp.MustCompile(`refused a caller.*peer=127\.0\.0\.1:\d+ reason="TLS handshake failed: tls: first record does not look like a TLS handshake"`), 10*time.Second)

	_, stderr, err = threads("--config", noSecret)
	assert.Error(t, err)
	assert.Contains(t, stderr, "unauthenticated: stateindex: the caller presented no secret")
	srv.WaitLine(0, regexp.MustCompile(`refused a caller.*peer=127\.0\.0\.1:\d+ reason="unauthenticated: the caller presented no secret" certificate=node`), 10*time.Second)
}

// Two `stateindex serve --cluster` members over mutual TLS with a secret
// see each other (their health endpoints and remoting both under TLS),
// each health endpoint on its member's own host; a reader with the same
// configuration reaches a member.
func TestServeClusterOverMutualTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("two cluster members (about six seconds)")
	}
	dir := t.TempDir()
	pki := filepath.Join(dir, "pki")
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"certs", "--dir", pki, "--name", "node", "--hosts", "127.0.0.1", "--secret"}, &out, &errb), errb.String())
	cfg := filepath.Join(dir, "si.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("tls:\n  cert_file: pki/node.pem\n  key_file: pki/node.key\n  ca_file: pki/ca.pem\n  client_auth: require\n"+
		"auth:\n  secret_file: pki/secret\ncluster:\n  name: tlsc\n  health_interval: 200ms\n"), 0o600))

	_, file, _, _ := runtime.Caller(0)
	bin := proctest.Build(t, filepath.Join(filepath.Dir(file), "..", ".."), "./cmd/stateindex")
	ports := proctest.FreePorts(t, 2, true)
	a, b := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	var procs []*proctest.Proc
	for _, m := range []string{a, b} {
		p := proctest.Start(t, "member "+m, bin, []string{"serve", "--config", cfg, "--data", filepath.Join(dir, m), "--listen", m, "--peers", a + "," + b})
		procs = append(procs, p)
	}
	for i, p := range procs {
		line, _ := p.WaitLine(0, regexp.MustCompile(`stateindex serving`), 60*time.Second)
		assert.Contains(t, line, `security="tls=mutual secret=on"`)
		assert.Contains(t, line, fmt.Sprintf("health=127.0.0.1:%d", ports[i]+1), "the member's own host")
		p.WaitLine(0, regexp.MustCompile(`storage member up.* live=2`), 30*time.Second)
		_, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.2:%d", ports[i]+1), time.Second)
		assert.Error(t, err, "the health endpoint is not on every interface")
	}
	cmd := exec.Command(bin, "threads", "--server", a, "--config", cfg, "--json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), stderr.String())
	var r messages.ListFramesReply
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &r))
	for _, p := range procs {
		p.Interrupt()
	}
	for _, p := range procs {
		assert.NoError(t, p.Wait(30*time.Second))
		assert.NotContains(t, p.Output(), "refused a caller", "the members admit each other")
	}
}
