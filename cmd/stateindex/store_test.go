package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/internal/config"
	"github.com/stateindex/stateindex/messages"
)

// A store that cannot be opened is a clear error at start, naming the
// database and never the password, and nothing is created on disk.
func TestServeRefusesAStoreItCannotOpen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	for _, tc := range []struct {
		store, want string
	}{
		{"postgres://si:hunter2@127.0.0.1:1/si?sslmode=disable&connect_timeout=2", "database unreachable"},
		{"env:SI_TEST_NO_SUCH_VARIABLE", "names environment variable SI_TEST_NO_SUCH_VARIABLE, which is not set"},
		{"mysql://si:hunter2@db/si", "must be"},
	} {
		var out, errb bytes.Buffer
		code := run([]string{"serve", "--data", dir, "--store", tc.store}, &out, &errb)
		assert.Equal(t, 1, code, tc.store)
		assert.Contains(t, errb.String(), tc.want, tc.store)
		assert.NotContains(t, errb.String(), "hunter2", "the password is never printed")
		_, err := os.Stat(dir)
		assert.True(t, os.IsNotExist(err), "nothing created on disk")
	}
	cfgFile := filepath.Join(t.TempDir(), "si.yaml")
	require.NoError(t, os.WriteFile(cfgFile, []byte("hooks:\n  - name: h\n    on: [finished]\n    actor: 127.0.0.1:9/x\n"), 0o600))
	var out, errb bytes.Buffer
	code := run([]string{"serve", "--config", cfgFile, "--data", dir, "--store", "postgres://si@127.0.0.1:1/si", "--listen", "127.0.0.1:7590",
		"--cluster", "c", "--peers", "127.0.0.1:7592"}, &out, &errb)
	assert.Equal(t, 1, code)
	assert.Contains(t, errb.String(), "hooks: not served by the members of a shared-store cluster yet")
	_, err := os.Stat(dir)
	assert.True(t, os.IsNotExist(err), "nothing created on disk")
	out.Reset()
	errb.Reset()
	assert.Equal(t, 1, run([]string{"verify", "--store", "db:5432"}, &out, &errb))
	assert.Contains(t, errb.String(), "want a postgres:// or postgresql:// URL, or env:NAME")
	assert.Equal(t, 1, run([]string{"inspect", "--store", "env:"}, &out, &errb))
	assert.Contains(t, errb.String(), "needs the variable's name")
}

// pgTestURL returns a URL of a fresh schema of the test's own on the
// server STATEINDEX_PG_URL names (dropped at the end), or skips.
func pgTestURL(t *testing.T) string {
	t.Helper()
	base := os.Getenv("STATEINDEX_PG_URL")
	if base == "" {
		t.Skip("STATEINDEX_PG_URL is not set: no PostgreSQL server to test against (CI starts one with .ci/postgres.sh start)")
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "cmd_" + hex.EncodeToString(b[:])
	exec := func(sql string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		require.NoError(t, err)
		defer func() { _ = conn.Close(ctx) }()
		_, err = conn.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	exec("CREATE SCHEMA " + name)
	t.Cleanup(func() { exec("DROP SCHEMA " + name + " CASCADE") })
	u, err := url.Parse(base)
	require.NoError(t, err)
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// sharedServer runs a StateIndex on a PostgreSQL store with the keys
// serve would give it (serverKeys), as owner.
func sharedServer(t *testing.T, u, owner string, file *config.File) (*actors.Client, ed25519.PublicKey) {
	t.Helper()
	st, err := eventstore.OpenPostgres(context.Background(), u, nil)
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	token, signing, from, err := serverKeys(context.Background(), file, t.TempDir(), st)
	require.NoError(t, err)
	if file.Keys.ServerKeyFile == "" {
		assert.Equal(t, "store (shared by its servers)", from)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	t.Cleanup(sys.Shutdown)
	cfg := actors.DefaultConfig()
	cfg.TokenKey, cfg.SigningKey, cfg.Logger, cfg.Owner = token, signing, quiet, actors.OwnerName(owner)
	srv, err := actors.Start(sys, st, cfg)
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	return srv.Client(), signing.Public().(ed25519.PublicKey)
}

// With a shared store the keys come from the store: two servers on it get
// the same keys, so a suspension token one issues resumes on the other,
// and verify checks every signature with the one public key (the store's,
// or one given); a wrong key is caught. inspect and verify read the store.
func TestSharedStoreKeysVerifyAndInspect(t *testing.T) {
	u := pgTestURL(t)
	t.Setenv("SI_TEST_STORE", u)
	ctx := context.Background()
	c1, pub1 := sharedServer(t, u, "one", config.Default())
	c2, pub2 := sharedServer(t, u, "two", config.Default())
	assert.Equal(t, pub1, pub2, "one checkpoint key for every server of the store")

	populateWith(t, c1, ctx)
	tok, err := c1.SuspendFrame(ctx, &messages.SuspendFrame{Header: messages.Header{Scope: "other"}, FrameID: pushRoot(t, c1, "other"), Reason: frames.SuspendApproval})
	require.NoError(t, err)
	// The other server takes the scope over (its own epoch) and accepts
	// the token the first one signed.
	r, err := c2.ResumeFrame(ctx, &messages.ResumeFrame{Header: messages.Header{Scope: "other"}, Token: tok.Token})
	require.NoError(t, err, "a token issued by one server resumes on another")
	assert.Equal(t, tok.FrameID, r.FrameID)
	_, err = c2.PopFrame(ctx, &messages.PopFrame{Header: messages.Header{Scope: "other"}, FrameID: tok.FrameID, Status: frames.StatusCompleted})
	require.NoError(t, err, "a finished run: a signed checkpoint")

	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"verify", "--store", "env:SI_TEST_STORE"}, &out, &errb), "%s%s", out.String(), errb.String())
	assert.Contains(t, out.String(), "public key "+hex.EncodeToString(pub1)+": from the store's own checkpoint key")
	assert.Regexp(t, `ok: postgres .*: 2 streams, \d+ records, .*[1-9]\d* signatures verified`, out.String())
	assert.NotContains(t, out.String(), "search_path", "the URL is not printed")

	// The public key given, and a wrong one.
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.pub"), filepath.Join(dir, "bad.pub")
	require.NoError(t, os.WriteFile(good, []byte(hex.EncodeToString(pub1)), 0o600))
	other, _, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bad, []byte(hex.EncodeToString(other)), 0o600))
	out.Reset()
	require.Equal(t, 0, run([]string{"verify", "--store", "env:SI_TEST_STORE", "--public-key", good}, &out, &errb), out.String())
	assert.NotContains(t, out.String(), "from the store's own")
	out.Reset()
	require.Equal(t, 1, run([]string{"verify", "--store", "env:SI_TEST_STORE", "--public-key", bad}, &out, &errb))
	assert.Contains(t, out.String(), "signature")

	out.Reset()
	require.Equal(t, 0, run([]string{"inspect", "--store", "env:SI_TEST_STORE"}, &out, &errb), errb.String())
	assert.Contains(t, out.String(), "scope agent-7")
	assert.Regexp(t, `suspended depth 1  tokens 300/2000 .*"book flights"`, out.String())
	assert.NotContains(t, out.String(), "journal", "a database has no journal")
	errb.Reset()
	assert.Equal(t, 1, run([]string{"inspect", "--store", "env:SI_TEST_STORE", "--scope", "nope"}, &out, &errb))
	assert.Contains(t, errb.String(), `no scope "nope" in postgres `)
}

// keys.* files take precedence over the store's keys.
func TestKeyFilesOverrideTheStore(t *testing.T) {
	u := pgTestURL(t)
	dir := t.TempDir()
	seed := bytes.Repeat([]byte{3}, ed25519.SeedSize)
	file := config.Default()
	file.Keys.ServerKeyFile, file.Keys.CheckpointKeyFile = filepath.Join(dir, "server.key"), filepath.Join(dir, "cp.key")
	require.NoError(t, os.WriteFile(file.Keys.ServerKeyFile, bytes.Repeat([]byte{5}, 40), 0o600))
	require.NoError(t, os.WriteFile(file.Keys.CheckpointKeyFile, []byte(hex.EncodeToString(seed)+"\n"), 0o600))
	st, err := eventstore.OpenPostgres(context.Background(), u, nil)
	require.NoError(t, err)
	defer st.Close()
	token, signing, from, err := serverKeys(context.Background(), file, dir, st)
	require.NoError(t, err)
	assert.Equal(t, "configuration (keys.*)", from)
	assert.Equal(t, bytes.Repeat([]byte{5}, 40), token)
	assert.Equal(t, ed25519.NewKeyFromSeed(seed), signing)
	_, ok, err := sharedPublicKey(context.Background(), st)
	require.NoError(t, err)
	assert.False(t, ok, "the store was not asked for a key, and verify creates none")

	require.NoError(t, os.WriteFile(file.Keys.ServerKeyFile, []byte("short"), 0o600))
	_, _, _, err = serverKeys(context.Background(), file, dir, st)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "keys.server_key_file")
}

func pushRoot(t *testing.T, c *actors.Client, scope string) string {
	t.Helper()
	r, err := c.PushFrame(context.Background(), &messages.PushFrame{Header: messages.Header{Scope: scope}, Goal: "g", Budget: budget.TokenBudget{Total: 100}})
	require.NoError(t, err)
	return r.FrameID
}
