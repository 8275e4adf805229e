package config

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/frames"
)

// The ledger section: defaults, good values (and what actors.Config gets
// from them), and every bad value refused naming the key and the value.
func TestLedgerSection(t *testing.T) {
	secret := strings.Repeat("k", MinLedgerKeyBytes)
	d, err := Load("")
	require.NoError(t, err)
	assert.Equal(t, Ledger{Unestimated: "deny", Lease: 10 * time.Minute}, d.Ledger, "defaults")
	c := d.ActorsConfig(actors.DefaultConfig())
	assert.Equal(t, frames.EstimateDeny, c.Frames.Unestimated)
	assert.Equal(t, 10*time.Minute, c.Lease)
	key, err := d.LedgerKey()
	require.NoError(t, err)
	assert.Nil(t, key, "no key file: the server key signs")

	good := []struct {
		name, yaml string
		want       Ledger
		policy     frames.EstimatePolicy
		capMicros  int64
	}{
		{"cap", "ledger:\n  unestimated: cap\n  cap: 0.25\n", Ledger{Unestimated: "cap", Cap: 0.25, Lease: 10 * time.Minute}, frames.EstimateCap, 250_000},
		{"cap integer", "ledger:\n  unestimated: cap\n  cap: 2\n", Ledger{Unestimated: "cap", Cap: 2, Lease: 10 * time.Minute}, frames.EstimateCap, 2_000_000},
		{"allow", "ledger:\n  unestimated: allow\n", Ledger{Unestimated: "allow", Lease: 10 * time.Minute}, frames.EstimateAllow, 0},
		{"lease", "ledger:\n  lease: 90s\n", Ledger{Unestimated: "deny", Lease: 90 * time.Second}, frames.EstimateDeny, 0},
		{"lease at the bound", "ledger:\n  lease: 168h\n", Ledger{Unestimated: "deny", Lease: 168 * time.Hour}, frames.EstimateDeny, 0},
		{"lease in days", "ledger:\n  lease: 7d\n", Ledger{Unestimated: "deny", Lease: 168 * time.Hour}, frames.EstimateDeny, 0},
		{"key file, relative to the file", "ledger:\n  key_file: ledger.key\n", Ledger{Unestimated: "deny", Lease: 10 * time.Minute, KeyFile: "ledger.key"}, frames.EstimateDeny, 0},
	}
	for _, tc := range good {
		t.Run(tc.name, func(t *testing.T) {
			dir := write(t, map[string]string{"si.yaml": tc.yaml, "ledger.key": secret})
			f, err := Load(filepath.Join(dir, "si.yaml"))
			require.NoError(t, err)
			want := tc.want
			if want.KeyFile != "" {
				want.KeyFile = filepath.Join(dir, want.KeyFile)
			}
			assert.Equal(t, want, f.Ledger)
			c := f.ActorsConfig(actors.DefaultConfig())
			assert.Equal(t, tc.policy, c.Frames.Unestimated)
			assert.Equal(t, tc.capMicros, c.Frames.UnestimatedCap)
			assert.Equal(t, want.Lease, c.Lease)
			key, err := f.LedgerKey()
			require.NoError(t, err)
			if want.KeyFile != "" {
				assert.Equal(t, []byte(secret), key)
			} else {
				assert.Nil(t, key)
			}
			// Explain prints the section, and what it prints loads back the same.
			var b bytes.Buffer
			require.NoError(t, f.Explain(&b))
			assert.Contains(t, b.String(), "ledger:\n  unestimated: "+want.Unestimated)
			again := filepath.Join(dir, "explained.yaml")
			require.NoError(t, os.WriteFile(again, b.Bytes(), 0o600))
			g, err := Load(again)
			require.NoError(t, err)
			assert.Equal(t, f.Ledger, g.Ledger)
		})
	}

	bad := []struct{ name, yaml, want string }{
		{"unknown policy", "ledger:\n  unestimated: maybe\n", `ledger.unestimated must be one of deny, cap, allow, got "maybe"`},
		{"cap without an amount", "ledger:\n  unestimated: cap\n", "ledger.unestimated is cap: it needs ledger.cap, a positive amount (got 0)"},
		{"cap of zero", "ledger:\n  unestimated: cap\n  cap: 0\n", "ledger.unestimated is cap: it needs ledger.cap, a positive amount (got 0)"},
		{"negative cap", "ledger:\n  unestimated: cap\n  cap: -1\n", "ledger.cap must be an amount in currency units, not negative (0.25: 25 cents), got -1"},
		{"cap not a number", "ledger:\n  unestimated: cap\n  cap: lots\n", `ledger.cap must be a number, got str "lots"`},
		{"cap overflowing", "ledger:\n  unestimated: cap\n  cap: 1e15\n", "ledger.cap must be an amount in currency units, not negative (0.25: 25 cents), got 1e15"},
		{"cap with deny", "ledger:\n  cap: 0.5\n", "ledger.cap (0.5) applies only with ledger.unestimated: cap, not deny"},
		{"cap with allow", "ledger:\n  unestimated: allow\n  cap: 0.5\n", "ledger.cap (0.5) applies only with ledger.unestimated: cap, not allow"},
		{"lease of zero", "ledger:\n  lease: 0s\n", "ledger.lease must be positive, got 0s"},
		{"lease past 7 days", "ledger:\n  lease: 169h\n", "ledger.lease must be at most 7d, got 169h"},
		{"lease not a duration", "ledger:\n  lease: soon\n", `ledger.lease must be a duration ("90s", "10m", "168h", "7d"), got str "soon"`},
		{"short key", "ledger:\n  key_file: short.key\n", "ledger.key_file (DIR/short.key) must hold a secret of at least 32 bytes, got 31"},
		{"missing key", "ledger:\n  key_file: none.key\n", "ledger.key_file (DIR/none.key) cannot be read"},
		{"unknown key", "ledger:\n  budget: 3\n", "ledger.budget is not a known key (known here: unestimated, cap, lease, key_file)"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			dir := write(t, map[string]string{"si.yaml": tc.yaml, "short.key": secret[1:]})
			_, err := Load(filepath.Join(dir, "si.yaml"))
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrInvalid), "%v", err)
			assert.Contains(t, err.Error(), filepath.Join(dir, "si.yaml")+":", "names the file")
			assert.Contains(t, err.Error(), strings.ReplaceAll(tc.want, "DIR", dir))
		})
	}
}
