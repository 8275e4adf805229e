package main

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/frames"
)

// verify --archive on an archive retention wrote: ok (with its signed
// checkpoints verified given the right public key), and exit 1 naming the
// line for an altered or dropped record line, or for the wrong key.
func TestVerifyArchive(t *testing.T) {
	e := newRetentionEnv(t)
	const scope = "archived"
	e.runs(scope, 8)
	e.sign(scope, 5)
	e.sign(scope, 12)
	sr := e.pass(scope, frames.RetentionPolicy{KeepLastN: 2, OnCompletion: frames.CompletionArchive})
	e.stop()
	require.Greater(t, sr.Through, int64(12), "both checkpoints are in the archive")
	good, err := os.ReadFile(sr.Archive)
	require.NoError(t, err)
	keys := t.TempDir()
	goodKey := filepath.Join(keys, "good.pub")
	require.NoError(t, os.WriteFile(goodKey, []byte(hex.EncodeToString(e.signer.Public().(ed25519.PublicKey))+"\n"), 0o600))
	other := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{3}, ed25519.SeedSize))
	wrongKey := filepath.Join(keys, "wrong.pub")
	require.NoError(t, os.WriteFile(wrongKey, other.Public().(ed25519.PublicKey), 0o600))

	lines := strings.SplitAfter(string(good), "\n")
	recordLine := 3 // the second record (line 1 is the header)
	flipped := func() []byte {
		l := []byte(lines[recordLine-1])
		i := bytes.Index(l, []byte(`"raw":"`)) + len(`"raw":"`) + 20
		if l[i] == 'A' {
			l[i] = 'B'
		} else {
			l[i] = 'A'
		}
		return []byte(strings.Join(lines[:recordLine-1], "") + string(l) + strings.Join(lines[recordLine:], ""))
	}()
	dropped := []byte(strings.Join(lines[:recordLine-1], "") + strings.Join(lines[recordLine:], ""))

	for _, tc := range []struct {
		name string
		file []byte
		key  string
		code int
		want []string
	}{
		{"ok", good, "", 0, []string{
			fmt.Sprintf(`ok: archive %%s: stream %q versions 1..%d, %d records chained from 00000000… to`, scope, sr.Through, sr.Through),
			"2 checkpoints, signatures not checked (no public key)"}},
		{"good key", good, goodKey, 0, []string{"2 checkpoints, 2 signatures verified"}},
		{"wrong key", good, wrongKey, 1, []string{"checkpoint at version 5"}},
		{"flipped byte", flipped, "", 1, []string{fmt.Sprintf("line %d:", recordLine)}},
		{"dropped record", dropped, "", 1, []string{fmt.Sprintf("line %d: expected version 2", recordLine)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "a.jsonl")
			require.NoError(t, os.WriteFile(path, tc.file, 0o600))
			args := []string{"verify", "--archive", path}
			if tc.key != "" {
				args = append(args, "--public-key", tc.key)
			}
			var out, errb bytes.Buffer
			code := run(args, &out, &errb)
			assert.Equal(t, tc.code, code, "stdout: %s\nstderr: %s", out.String(), errb.String())
			got := out.String() + errb.String()
			for _, w := range tc.want {
				assert.Contains(t, got, strings.ReplaceAll(w, "%s", path))
			}
			if tc.code != 0 {
				assert.NotContains(t, got, "ok:")
				assert.Contains(t, got, path)
			}
		})
	}
}
