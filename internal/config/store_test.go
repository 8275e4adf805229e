package config

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStoreSetting(t *testing.T) {
	for _, ok := range []string{"", "postgres://si@db:5432/si?sslmode=disable", "postgresql://db/si", "env:STATEINDEX_PG_URL", "env:_x9"} {
		f, err := resolveArgs(t, "--store", ok)
		require.NoError(t, err, ok)
		assert.Equal(t, ok, f.Store)
	}
	for _, bad := range []string{"mysql://db/si", "db:5432", "env:", "env:9X", "env:A-B", "/var/lib/si"} {
		_, err := resolveArgs(t, "--store", bad)
		var ce *Error
		require.True(t, errors.As(err, &ce), "%q: %v", bad, err)
		assert.Contains(t, ce.Msg, "a postgres:// or postgresql:// URL, or env:NAME", bad)
	}
	_, err := resolveArgs(t, "--store", "postgress://si:hunter2@db/si")
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "hunter2", "a refused URL is shown without its password")
	dir := write(t, map[string]string{"main.yaml": "store: sqlite://x\n"})
	_, err = Load(filepath.Join(dir, "main.yaml"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "main.yaml:1: store must be")
}

func TestStoreURLFromTheEnvironment(t *testing.T) {
	t.Setenv("SI_TEST_PG", "postgres://si:secret@db/si")
	f, err := resolveArgs(t, "--store", "env:SI_TEST_PG")
	require.NoError(t, err)
	u, err := f.StoreURL()
	require.NoError(t, err)
	assert.Equal(t, "postgres://si:secret@db/si", u)

	f.Store = "env:SI_TEST_UNSET"
	_, err = f.StoreURL()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "names environment variable SI_TEST_UNSET, which is not set")

	t.Setenv("SI_TEST_BAD", "db:5432")
	f.Store = "env:SI_TEST_BAD"
	_, err = f.StoreURL()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "must hold a postgres:// or postgresql:// URL")
	assert.NotContains(t, err.Error(), "db:5432", "the variable's value is not printed")

	f.Store = ""
	u, err = f.StoreURL()
	require.NoError(t, err)
	assert.Equal(t, "", u, "the data directory")
}

func TestExplainHidesTheStorePassword(t *testing.T) {
	f, err := resolveArgs(t, "--store", "postgres://si:hunter2@db:5432/si")
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, f.Explain(&b))
	assert.NotContains(t, b.String(), "hunter2")
	assert.Contains(t, b.String(), `store: "postgres://si:xxxxx@db:5432/si"`)
	assert.Equal(t, "env:X", RedactStore("env:X"))
	assert.Equal(t, "postgres://db/si", RedactStore("postgres://db/si"))
}

func TestKeyFilesAreRelativeToTheirFile(t *testing.T) {
	dir := write(t, map[string]string{"main.yaml": "keys:\n  server_key_file: secrets/server.key\n  checkpoint_key_file: /abs/cp.key\n"})
	f, err := Load(filepath.Join(dir, "main.yaml"))
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "secrets/server.key"), f.Keys.ServerKeyFile)
	assert.Equal(t, "/abs/cp.key", f.Keys.CheckpointKeyFile)
}
