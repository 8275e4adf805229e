package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/internal/config"
)

func TestServeRefusesIncompleteClusterFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cluster", "c"}, "--cluster needs --listen and --peers"},
		{[]string{"--cluster", "c", "--listen", "127.0.0.1:7500"}, "--cluster needs --listen and --peers"},
		{[]string{"--peers", "127.0.0.1:7500"}, "--peers needs --cluster"},
		{[]string{"--listen", "127.0.0.1:7500", "--max-message-bytes", "0"}, "--max-message-bytes must be positive"},
	} {
		var out, errb bytes.Buffer
		code := run(append([]string{"serve", "--data", t.TempDir()}, tc.args...), &out, &errb)
		assert.Equal(t, 1, code, "%v", tc.args)
		assert.Contains(t, errb.String(), tc.want, "%v", tc.args)
	}
}

func TestServeRefusesAClusterMembersFileStandalone(t *testing.T) {
	dir := t.TempDir()
	st, err := openStore(dir, true, time.Second, false)
	require.NoError(t, err)
	require.NoError(t, st.ClaimIdentity(context.Background(), eventstore.Identity{Cluster: "c", Member: "127.0.0.1:7500",
		Members: []string{"127.0.0.1:7500", "127.0.0.1:7510"}, Shards: 16}))
	require.NoError(t, st.Close())

	var out, errb bytes.Buffer
	code := run([]string{"serve", "--data", dir}, &out, &errb)
	assert.Equal(t, 1, code)
	assert.Contains(t, errb.String(), filepath.Join(dir, dbFile)+` belongs to member "127.0.0.1:7500" of cluster "c"`)
	assert.Contains(t, errb.String(), "--cluster c --listen 127.0.0.1:7500 --peers 127.0.0.1:7500,127.0.0.1:7510")
}

func TestParsePeersAddsSelf(t *testing.T) {
	assert.Equal(t, []string{"a:1", "b:2", "c:3"}, parsePeers("c:3, a:1,,c:3", "b:2"))
	assert.Equal(t, []string{"a:1", "b:2"}, parsePeers("a:1,b:2", "b:2"))
}

func TestServeConfigAppliesTheFileAndFlags(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "si.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`shards: 3
snapshot_every: 7
cache: {scopes: 11, mib: 5}
max_pending: 13
journal: {enabled: off, segment_mib: 2, segments: 3, apply_interval: 50ms, apply_mib: 1}
idempotency: {horizon: 2d, clock_skew: 1m}
tokens: {ttl: 1h, max_ttl: 2h, counter: o200k_base, scopes: [{prefix: "agents/", counter: cl100k_base}, {prefix: "agents/cheap/", counter: estimate}]}
limits: {max_depth: 9, max_content_bytes: 1000}
request_timeout: 5s
ledger: {unestimated: cap, cap: 0.05, lease: 30m, key_file: ledger.key}
state: {max_bytes: 65536, max_value_bytes: 4096, max_key_bytes: 64}
`), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ledger.key"), bytes.Repeat([]byte{9}, 40), 0o600))
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	flags := config.RegisterFlags(fs)
	require.NoError(t, fs.Parse([]string{"--config", path, "--shards", "5", "--cache-mib", "6"}))
	file, err := flags.Resolve()
	require.NoError(t, err)

	cfg, opts, err := serveConfig(file)
	require.NoError(t, err)
	d := actors.DefaultConfig()
	assert.Equal(t, 5, cfg.Shards, "the flag overrides the file")
	assert.Equal(t, "o200k_base", cfg.CounterName)
	require.Len(t, cfg.Counters, 2)
	assert.Equal(t, []string{"agents/", "cl100k_base", "agents/cheap/", "estimate_bytes_div_4"},
		[]string{cfg.Counters[0].Prefix, cfg.Counters[0].Name, cfg.Counters[1].Prefix, cfg.Counters[1].Name})
	assert.Equal(t, int64(3), cfg.Counter.Count("hello hello hello"), "o200k_base counts the server's scopes")
	ct, ok := cfg.CounterByName("cl100k_base")
	require.True(t, ok, "the shell finds any tokenizer counter by name")
	assert.Equal(t, int64(3), ct.Count("hello hello hello"))
	_, ok = cfg.CounterByName("p50k_base")
	assert.False(t, ok)
	assert.Equal(t, int64(7), cfg.SnapshotEvery)
	assert.Equal(t, 11, cfg.CacheScopes)
	assert.Equal(t, int64(6)<<20, cfg.CacheBytes)
	assert.Equal(t, 13, cfg.MaxPending)
	assert.Equal(t, 48*time.Hour, cfg.RequestHorizon)
	assert.Equal(t, time.Minute, cfg.ClockSkew)
	assert.Equal(t, time.Hour, cfg.TokenTTL)
	assert.Equal(t, 2*time.Hour, cfg.MaxTokenTTL)
	assert.Equal(t, 5*time.Second, cfg.RequestTimeout)
	assert.Equal(t, int64(9), cfg.Frames.MaxDepth)
	assert.Equal(t, 1000, cfg.Frames.MaxContentBytes)
	assert.Equal(t, d.Frames.MaxGoalBytes, cfg.Frames.MaxGoalBytes, "a limit the file leaves alone keeps its default")
	assert.Equal(t, frames.EstimateCap, cfg.Frames.Unestimated)
	assert.Equal(t, int64(50_000), cfg.Frames.UnestimatedCap, "$0.05 in micro-units")
	assert.Equal(t, 30*time.Minute, cfg.Lease)
	assert.Equal(t, []int{65536, 4096, 64}, []int{cfg.Frames.MaxStateBytes, cfg.Frames.MaxStateValueBytes, cfg.Frames.MaxStateKeyBytes})
	assert.Equal(t, bytes.Repeat([]byte{9}, 40), cfg.LedgerKey, "read from the file named, relative to the configuration")
	assert.Equal(t, eventstore.Options{OpenTimeout: 2 * time.Second, JournalOff: true, JournalSegmentBytes: 2 << 20, JournalSegments: 3,
		ApplyInterval: 50 * time.Millisecond, ApplyBytes: 1 << 20}, opts)
}

func TestServeWithoutConfigKeepsTheDefaults(t *testing.T) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	flags := config.RegisterFlags(fs)
	require.NoError(t, fs.Parse(nil))
	file, err := flags.Resolve()
	require.NoError(t, err)
	cfg, opts, err := serveConfig(file)
	require.NoError(t, err)
	d := actors.DefaultConfig()
	d.Frames.Unestimated = frames.EstimateDeny // "" reads as deny; the configuration says it
	assert.Nil(t, cfg.LedgerKey, "no key file: the server key signs reservation tokens")
	assert.Equal(t, time.Duration(frames.DefaultLease), cfg.Lease)
	assert.Equal(t, "./data", file.DataDir)
	assert.Equal(t, d.CounterName, cfg.CounterName, "the estimate by default")
	assert.Equal(t, d.Counter.Count("hello hello hello"), cfg.Counter.Count("hello hello hello"))
	assert.Equal(t, "info", file.LogLevel)
	assert.Equal(t, []any{d.Shards, d.SnapshotEvery, d.CacheScopes, d.CacheBytes, d.MaxPending, d.RequestHorizon, d.ClockSkew, d.TokenTTL, d.MaxTokenTTL, d.RequestTimeout, d.Frames},
		[]any{cfg.Shards, cfg.SnapshotEvery, cfg.CacheScopes, cfg.CacheBytes, cfg.MaxPending, cfg.RequestHorizon, cfg.ClockSkew, cfg.TokenTTL, cfg.MaxTokenTTL, cfg.RequestTimeout, cfg.Frames})
	assert.False(t, opts.JournalOff)
	assert.Equal(t, eventstore.DefaultJournalSegmentBytes, opts.JournalSegmentBytes)
	assert.Equal(t, eventstore.DefaultJournalSegments, opts.JournalSegments)
	assert.Equal(t, eventstore.DefaultApplyInterval, opts.ApplyInterval)
	assert.Equal(t, eventstore.DefaultApplyBytes, opts.ApplyBytes)
}

func TestServeRefusesABadConfig(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		args       []string
		want       string
	}{
		{"a bad value", "cache:\n  mib: -1\n", nil, "si.yaml:2: cache.mib must be positive, got -1"},
		{"a bad flag over a good file", "shards: 2\n", []string{"--shards", "0"}, "--shards must be positive, got 0"},
		{"a bad retention interval", "retention:\n  interval: 0s\n", nil, "retention.interval must be positive"},
		{"a state value over the state", "state:\n  max_bytes: 1000\n  max_value_bytes: 2000\n", nil,
			"si.yaml:3: state.max_value_bytes (2000) must not exceed state.max_bytes (1000)"},
		{"a hook to a kind outside a cluster", "hooks:\n  - name: x\n    on: [failed]\n    kind: overseer\n", nil, "si.yaml:4: hooks[0].kind sends to a cluster kind: it needs cluster.name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "si.yaml")
			require.NoError(t, os.WriteFile(path, []byte(tc.yaml), 0o600))
			var out, errb bytes.Buffer
			code := run(append([]string{"serve", "--config", path, "--data", filepath.Join(dir, "data")}, tc.args...), &out, &errb)
			assert.Equal(t, 1, code)
			assert.Contains(t, errb.String(), tc.want)
			assert.NoDirExists(t, filepath.Join(dir, "data"), "nothing is created before the configuration is accepted")
		})
	}
}

// The file's retention becomes the server's pass: the policy of each scope
// by prefix, its archive directory under the data directory.
func TestServeRetentionFromTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "si.yaml")
	require.NoError(t, os.WriteFile(path, []byte("data_dir: d\nretention:\n  interval: 30s\n  keep_last_n: 4\n  delete_older_than: 1d\n  on_completion: archive\n"+
		"  overrides:\n    - {scope_prefix: tmp-, on_completion: delete, keep_last_n: 0}\n    - {scope_prefix: audit-, on_completion: keep}\n"), 0o600))
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	flags := config.RegisterFlags(fs)
	require.NoError(t, fs.Parse([]string{"--config", path}))
	file, err := flags.Resolve()
	require.NoError(t, err)
	rc, ok := retentionConfig(file)
	require.True(t, ok)
	assert.Equal(t, 30*time.Second, rc.Interval)
	p, archive, on := rc.Policy("agent-1")
	assert.True(t, on)
	assert.Equal(t, frames.RetentionPolicy{KeepLastN: 4, OlderThan: int64(24 * time.Hour), OnCompletion: frames.CompletionArchive}, p)
	assert.Equal(t, filepath.Join(dir, "d", "archive"), archive)
	p, _, on = rc.Policy("tmp-7")
	assert.True(t, on)
	assert.Equal(t, frames.RetentionPolicy{OlderThan: int64(24 * time.Hour), OnCompletion: frames.CompletionDelete}, p)
	_, _, on = rc.Policy("audit-2")
	assert.False(t, on, "keep: the scope stays whole")
}

// The file's expiry joins the pass: each scope's inactive_after by prefix,
// with or without retention; neither configured starts no pass.
func TestServeExpiryFromTheFile(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		on         bool
		retention  bool
		expiry     map[string]time.Duration
	}{
		{"none", "data_dir: d\n", false, false, nil},
		{"expiry alone", "expiry:\n  inactive_after: 720h\n  overrides:\n    - {scope_prefix: tmp-, inactive_after: 1h}\n    - {scope_prefix: keep-, inactive_after: 0s}\n",
			true, false, map[string]time.Duration{"agent": 720 * time.Hour, "tmp-1": time.Hour, "keep-1": 0}},
		{"with retention", "retention:\n  keep_last_n: 2\n  on_completion: delete\nexpiry:\n  overrides:\n    - {scope_prefix: tmp-, inactive_after: 1h}\n",
			true, true, map[string]time.Duration{"agent": 0, "tmp-1": time.Hour}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "si.yaml")
			require.NoError(t, os.WriteFile(path, []byte(tc.yaml), 0o600))
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			flags := config.RegisterFlags(fs)
			require.NoError(t, fs.Parse([]string{"--config", path}))
			file, err := flags.Resolve()
			require.NoError(t, err)
			rc, ok := retentionConfig(file)
			require.Equal(t, tc.on, ok)
			assert.Equal(t, tc.retention, rc.Policy != nil)
			for scope, want := range tc.expiry {
				assert.Equal(t, want, rc.Expiry(scope), scope)
			}
			var out, errb bytes.Buffer
			assert.Equal(t, 0, run([]string{"config", "--check", "--config", path}, &out, &errb), errb.String())
		})
	}
}
