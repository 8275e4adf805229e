package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The http section: the inspector on loopback needs nothing; off loopback
// it needs a readable secret file of at least 16 bytes (relative to the
// file that names it); errors name the file, the line and the key.
func TestHTTPSection(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "web.secret"), []byte("0123456789abcdef-web\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "short.secret"), []byte("abc\n"), 0o600))
	load := func(yaml string) (*File, error) {
		p := filepath.Join(dir, "si.yaml")
		require.NoError(t, os.WriteFile(p, []byte(yaml), 0o600))
		return Load(p)
	}
	f, err := load("http:\n  listen: 127.0.0.1:7421\n")
	require.NoError(t, err)
	assert.Equal(t, HTTP{Listen: "127.0.0.1:7421"}, f.HTTP)
	f, err = load("http:\n  listen: 0.0.0.0:7421\n  secret_file: web.secret\n")
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "web.secret"), f.HTTP.SecretFile, "relative to the file")
	s, err := f.HTTPSecret()
	require.NoError(t, err)
	assert.Equal(t, "0123456789abcdef-web", string(s), "the trailing newline is not part of it")

	// Without a secret of its own it takes remoting's: the same
	// authentication as remoting (auth.secret_file), on loopback too.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "remoting.secret"), []byte("0123456789abcdef0123456789abcdef-remoting\n"), 0o600))
	f, err = load("auth:\n  secret_file: remoting.secret\nhttp:\n  listen: 0.0.0.0:7421\n")
	require.NoError(t, err, "remoting's secret admits a non-loopback inspector")
	s, err = f.HTTPSecret()
	require.NoError(t, err)
	assert.Equal(t, "0123456789abcdef0123456789abcdef-remoting", string(s))
	f, err = load("auth:\n  secret_file: remoting.secret\nhttp:\n  listen: 0.0.0.0:7421\n  secret_file: web.secret\n")
	require.NoError(t, err)
	s, err = f.HTTPSecret()
	require.NoError(t, err)
	assert.Equal(t, "0123456789abcdef-web", string(s), "its own secret wins")

	for _, tc := range []struct{ yaml, want string }{
		{"http:\n  listen: 0.0.0.0:7421\n", "si.yaml:2: http.listen 0.0.0.0:7421 is not a loopback address"},
		{"http:\n  listen: 10.1.2.3:80\n", "not a loopback address"},
		{"http:\n  listen: nonsense\n", "want HOST:PORT"},
		{"http:\n  listen: 0.0.0.0:7421\n  secret_file: short.secret\n", "holds 3 bytes of secret, want at least 16"},
		{"http:\n  listen: 0.0.0.0:7421\n  secret_file: missing.secret\n", "http.secret_file"},
		{"http:\n  secret_file: web.secret\n", "needs http.listen"},
	} {
		_, err := load(tc.yaml)
		require.Error(t, err, tc.yaml)
		assert.Contains(t, err.Error(), tc.want)
	}
}
