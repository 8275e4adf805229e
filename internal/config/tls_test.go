package config

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/internal/devcerts"
)

// certFiles writes a CA and a node certificate into a new directory, with
// a secret, a short secret and a file that is no certificate.
func certFiles(t *testing.T) map[string]string {
	t.Helper()
	ca, err := devcerts.NewCA("config test CA", time.Hour)
	require.NoError(t, err)
	node, err := ca.Issue("node", []string{"127.0.0.1"}, time.Hour)
	require.NoError(t, err)
	other, err := ca.Issue("other", []string{"127.0.0.1"}, time.Hour)
	require.NoError(t, err)
	return map[string]string{"ca.pem": string(ca.CertPEM), "node.pem": string(node.CertPEM), "node.key": string(node.KeyPEM),
		"other.key": string(other.KeyPEM), "secret": strings.Repeat("x", 40) + "\n", "short": "short\n", "junk.pem": "junk\n"}
}

// The tls and auth sections: defaults (off), good values with paths
// relative to the file, the flags, and every bad value refused naming the
// key, where it was set and the file at fault.
func TestTLSAndAuthSections(t *testing.T) {
	d, err := Load("")
	require.NoError(t, err)
	assert.Equal(t, TLS{ClientAuth: "none"}, d.TLS)
	assert.Equal(t, Auth{}, d.Auth)
	sec, err := d.Security(nil)
	require.NoError(t, err)
	assert.Nil(t, sec, "nothing configured: plaintext, anyone admitted")

	files := certFiles(t)
	files["si.yaml"] = `tls:
  cert_file: node.pem
  key_file: node.key
  ca_file: ca.pem
  client_auth: require
  server_name: stateindex.internal
  allowed_names: [node, "spiffe://x/y"]
auth:
  secret_file: secret
`
	dir := write(t, files)
	f, err := Load(filepath.Join(dir, "si.yaml"))
	require.NoError(t, err)
	assert.Equal(t, TLS{CertFile: filepath.Join(dir, "node.pem"), KeyFile: filepath.Join(dir, "node.key"), CAFile: filepath.Join(dir, "ca.pem"),
		ClientAuth: "require", ServerName: "stateindex.internal", AllowedNames: []string{"node", "spiffe://x/y"}}, f.TLS, "paths relative to the file")
	assert.Equal(t, filepath.Join(dir, "secret"), f.Auth.SecretFile)
	sec, err = f.Security(nil)
	require.NoError(t, err)
	assert.Equal(t, "tls=mutual secret=on", sec.String())

	// Explain prints the sections, and what it prints loads back the same.
	var b bytes.Buffer
	require.NoError(t, f.Explain(&b))
	assert.Contains(t, b.String(), "tls:\n  cert_file: "+filepath.Join(dir, "node.pem"))
	assert.Contains(t, b.String(), "auth:\n  secret_file: "+filepath.Join(dir, "secret"))
	again := filepath.Join(dir, "explained.yaml")
	require.NoError(t, os.WriteFile(again, b.Bytes(), 0o600))
	g, err := Load(again)
	require.NoError(t, err)
	assert.Equal(t, f.TLS, g.TLS)
	assert.Equal(t, f.Auth, g.Auth)

	// The flags set the same keys (relative paths: to the working directory).
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fl := RegisterFlags(fs)
	require.NoError(t, fs.Parse([]string{"--tls-cert", filepath.Join(dir, "node.pem"), "--tls-key", filepath.Join(dir, "node.key"),
		"--tls-ca", filepath.Join(dir, "ca.pem"), "--tls-client-auth", "request", "--secret-file", filepath.Join(dir, "secret")}))
	byFlags, err := fl.Resolve()
	require.NoError(t, err)
	assert.Equal(t, "request", byFlags.TLS.ClientAuth)
	assert.Equal(t, "flag --tls-cert", byFlags.Origin("tls.cert_file").String())
	sec, err = byFlags.Security(nil)
	require.NoError(t, err)
	assert.Equal(t, "tls=server+optional-client secret=on", sec.String())

	secretOnly := write(t, map[string]string{"si.yaml": "auth:\n  secret_file: s\n", "s": strings.Repeat("y", 32)})
	f, err = Load(filepath.Join(secretOnly, "si.yaml"))
	require.NoError(t, err)
	sec, err = f.Security(nil)
	require.NoError(t, err)
	assert.Equal(t, "tls=off secret=on", sec.String())

	bad := []struct{ name, yaml, want string }{
		{"a key without a certificate", "tls:\n  key_file: node.key\n", "si.yaml:2: tls.cert_file is needed with a key file"},
		{"a CA alone", "tls:\n  ca_file: ca.pem\n", "si.yaml:2: tls.cert_file is needed: every node serves a certificate"},
		{"a missing certificate", "tls:\n  cert_file: none.pem\n  key_file: node.key\n", "si.yaml:2: tls.cert_file (DIR/none.pem) cannot be read"},
		{"a certificate file without one", "tls:\n  cert_file: junk.pem\n  key_file: node.key\n", "si.yaml:2: tls.cert_file (DIR/junk.pem) holds no PEM certificate"},
		{"a key that does not match", "tls:\n  cert_file: node.pem\n  key_file: other.key\n",
			"si.yaml:3: tls.key_file (DIR/other.key) is not the key of DIR/node.pem: tls: private key does not match public key"},
		{"an unreadable CA", "tls:\n  cert_file: node.pem\n  key_file: node.key\n  ca_file: none.pem\n", "si.yaml:4: tls.ca_file (DIR/none.pem) cannot be read"},
		{"a CA file without a certificate", "tls:\n  cert_file: node.pem\n  key_file: node.key\n  ca_file: junk.pem\n", "si.yaml:4: tls.ca_file (DIR/junk.pem) holds no PEM certificate"},
		{"a bad client auth", "tls:\n  client_auth: always\n", `si.yaml:2: tls.client_auth must be one of none, request, require, got "always"`},
		{"client auth without a CA", "tls:\n  cert_file: node.pem\n  key_file: node.key\n  client_auth: require\n",
			"tls.client_ca_file is needed with client authentication require (or a CA file)"},
		{"allowed names without require", "tls:\n  cert_file: node.pem\n  key_file: node.key\n  ca_file: ca.pem\n  allowed_names: [a]\n",
			"si.yaml:5: tls.allowed_names need client authentication require"},
		{"a missing secret file", "auth:\n  secret_file: none\n", "si.yaml:2: auth.secret_file (DIR/none) cannot be read"},
		{"a short secret", "auth:\n  secret_file: short\n", "si.yaml:2: auth.secret_file (DIR/short) must hold at least 32 bytes (trailing white space aside), got 5"},
		{"an unknown key", "tls:\n  cert: node.pem\n", "tls.cert is not a known key (known here: cert_file, key_file, ca_file, client_ca_file, client_auth, server_name, allowed_names)"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			files := certFiles(t)
			files["si.yaml"] = tc.yaml
			dir := write(t, files)
			_, err := Load(filepath.Join(dir, "si.yaml"))
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrInvalid), "%v", err)
			assert.Contains(t, err.Error(), filepath.Join(dir, "si.yaml")+":", "names the file")
			assert.Contains(t, err.Error(), strings.ReplaceAll(tc.want, "DIR", dir))
		})
	}

	// LoadSecurity reads a member's file whose listen and peers come from
	// the command line: only what connecting needs is checked.
	member := write(t, files)
	require.NoError(t, os.WriteFile(filepath.Join(member, "si.yaml"), []byte("cluster:\n  name: c\ntls:\n  cert_file: node.pem\n  key_file: node.key\n  ca_file: ca.pem\n"), 0o600))
	_, err = Load(filepath.Join(member, "si.yaml"))
	assert.ErrorContains(t, err, "cluster.name needs remoting.listen", "serving needs them")
	sec, err = LoadSecurity(filepath.Join(member, "si.yaml"), nil)
	require.NoError(t, err)
	assert.Equal(t, "tls=server secret=off", sec.String())
	require.NoError(t, os.WriteFile(filepath.Join(member, "bad.yaml"), []byte("tls:\n  cert_file: node.pem\n  key_file: none.key\n"), 0o600))
	_, err = LoadSecurity(filepath.Join(member, "bad.yaml"), nil)
	assert.ErrorContains(t, err, "bad.yaml:3: tls.key_file ("+filepath.Join(member, "none.key")+") cannot be read")
	require.NoError(t, os.WriteFile(filepath.Join(member, "typo.yaml"), []byte("tls:\n  client_auth: yes\n"), 0o600))
	_, err = LoadSecurity(filepath.Join(member, "typo.yaml"), nil)
	assert.ErrorContains(t, err, `typo.yaml:2: tls.client_auth must be one of none, request, require, got "yes"`)

	// A bad flag is named as a flag.
	fs = flag.NewFlagSet("serve", flag.ContinueOnError)
	fl = RegisterFlags(fs)
	require.NoError(t, fs.Parse([]string{"--secret-file", filepath.Join(dir, "none")}))
	_, err = fl.Resolve()
	assert.ErrorContains(t, err, "--secret-file ("+filepath.Join(dir, "none")+") cannot be read")
}
