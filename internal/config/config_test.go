package config

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// write puts files (name → content) in a new directory and returns it.
func write(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600))
	}
	return dir
}

func ptr[T any](v T) *T { return &v }

func TestExtendsMerges(t *testing.T) {
	base := `shards: 4
cache:
  scopes: 100
  mib: 50
cluster:
  name: c
  peers: [a:1, b:2, c:3]
  health_interval: 2s
remoting:
  listen: a:1
retention:
  overrides:
    - scope_prefix: x
      keep_last_n: 1
    - scope_prefix: y
      keep_last_n: 2
`
	for _, tc := range []struct {
		name, over string
		check      func(t *testing.T, f *File, dir string)
	}{
		{"maps merge key by key", "extends: base.yaml\ncache:\n  mib: 70\n", func(t *testing.T, f *File, dir string) {
			assert.Equal(t, Cache{Scopes: 100, MiB: 70}, f.Cache)
			assert.Equal(t, Origin{File: filepath.Join(dir, "base.yaml"), Line: 3}, f.Origin("cache.scopes"))
			assert.Equal(t, Origin{File: filepath.Join(dir, "main.yaml"), Line: 3}, f.Origin("cache.mib"))
			assert.Equal(t, 4, f.Shards)
		}},
		{"lists replace", "extends: base.yaml\ncluster:\n  peers: [d:4]\n", func(t *testing.T, f *File, dir string) {
			assert.Equal(t, []string{"d:4"}, f.Cluster.Peers)
			assert.Equal(t, "c", f.Cluster.Name)
			assert.Equal(t, 2*time.Second, f.Cluster.HealthInterval)
		}},
		{"a list of overrides replaces the base's whole", "extends: base.yaml\nretention:\n  overrides:\n    - {scope_prefix: z, keep_last_n: 3}\n", func(t *testing.T, f *File, dir string) {
			require.Len(t, f.Retention.Overrides, 1)
			assert.Equal(t, RetentionOverride{ScopePrefix: "z", KeepLastN: ptr(3)}, f.Retention.Overrides[0])
		}},
		{"scalars replace", "extends: base.yaml\nshards: 9\n", func(t *testing.T, f *File, dir string) {
			assert.Equal(t, 9, f.Shards)
			assert.Equal(t, Origin{File: filepath.Join(dir, "main.yaml"), Line: 2}, f.Origin("shards"))
		}},
		{"null removes a scalar: the default applies", "extends: base.yaml\nshards: null\ncache:\n  scopes: ~\n", func(t *testing.T, f *File, dir string) {
			assert.Equal(t, Default().Shards, f.Shards)
			assert.Equal(t, Origin{}, f.Origin("shards"))
			assert.Equal(t, Cache{Scopes: Default().Cache.Scopes, MiB: 50}, f.Cache)
		}},
		{"null removes a whole mapping", "extends: base.yaml\ncache: ~\n", func(t *testing.T, f *File, dir string) {
			assert.Equal(t, Default().Cache, f.Cache)
			assert.Equal(t, "default", f.Origin("cache.mib").String())
		}},
		{"null removes a list", "extends: base.yaml\nretention:\n  overrides: null\n", func(t *testing.T, f *File, dir string) {
			assert.Empty(t, f.Retention.Overrides)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := write(t, map[string]string{"base.yaml": base, "main.yaml": tc.over})
			f, err := Load(filepath.Join(dir, "main.yaml"))
			require.NoError(t, err)
			tc.check(t, f, dir)
		})
	}
}

func TestExtendsChainOfThree(t *testing.T) {
	dir := write(t, map[string]string{
		"c.yaml": "shards: 2\nsnapshot_every: 5\ncache:\n  mib: 9\n  scopes: 7\n",
		"b.yaml": "extends: c.yaml\nshards: 3\ncache:\n  scopes: 8\n",
		"a.yaml": "# the top\nextends: b.yaml\ncache:\n  mib: 11\n",
	})
	f, err := Load(filepath.Join(dir, "a.yaml"))
	require.NoError(t, err)
	assert.Equal(t, 3, f.Shards)
	assert.Equal(t, int64(5), f.SnapshotEvery)
	assert.Equal(t, Cache{Scopes: 8, MiB: 11}, f.Cache)
	at := func(name string, line int) Origin { return Origin{File: filepath.Join(dir, name), Line: line} }
	assert.Equal(t, at("b.yaml", 2), f.Origin("shards"))
	assert.Equal(t, at("c.yaml", 2), f.Origin("snapshot_every"))
	assert.Equal(t, at("b.yaml", 4), f.Origin("cache.scopes"))
	assert.Equal(t, at("a.yaml", 4), f.Origin("cache.mib"))
	assert.Equal(t, []string{filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml"), filepath.Join(dir, "c.yaml")}, f.Sources)
}

func TestExtendsIsRelativeToTheExtendingFile(t *testing.T) {
	dir := write(t, nil)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "sub", "deeper"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "top.yaml"), []byte("extends: sub/mid.yaml\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sub", "mid.yaml"), []byte("extends: deeper/base.yaml\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sub", "deeper", "base.yaml"), []byte("shards: 6\ndata_dir: d\n"), 0o600))
	f, err := Load(filepath.Join(dir, "top.yaml"))
	require.NoError(t, err)
	assert.Equal(t, 6, f.Shards)
	assert.Equal(t, filepath.Join(dir, "sub", "deeper", "d"), f.DataDir, "data_dir is relative to the file that says it")
}

func TestExtendsCycleIsAnErrorNamingTheFiles(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"two files", map[string]string{"a.yaml": "extends: b.yaml\n", "b.yaml": "shards: 2\nextends: a.yaml\n"},
			"b.yaml:2: extends makes a cycle: A/a.yaml → A/b.yaml → A/a.yaml"},
		{"itself", map[string]string{"a.yaml": "extends: a.yaml\n"}, "a.yaml:1: extends makes a cycle: A/a.yaml → A/a.yaml"},
		{"three files", map[string]string{"a.yaml": "extends: b.yaml\n", "b.yaml": "extends: c.yaml\n", "c.yaml": "extends: b.yaml\n"},
			"c.yaml:1: extends makes a cycle: A/b.yaml → A/c.yaml → A/b.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := write(t, tc.files)
			_, err := Load(filepath.Join(dir, "a.yaml"))
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), strings.ReplaceAll(tc.want, "A/", dir+"/"))
		})
	}
}

func TestErrorsNameFileKeyAndLine(t *testing.T) {
	for _, tc := range []struct {
		name, content string
		line          int
		key, msg      string
	}{
		{"zero shards", "log_level: info\nshards: 0\n", 2, "shards", "must be positive, got 0"},
		{"negative cache", "cache:\n  scopes: 10\n  mib: -1\n", 3, "cache.mib", "must be positive, got -1"},
		{"cache scopes of the wrong type", "cache:\n  scopes: many\n", 2, "cache.scopes", `must be an integer, got str "many"`},
		{"a quoted number is a string", "shards: \"4\"\n", 1, "shards", `must be an integer, got str "4"`},
		{"an unknown log level", "\n\nlog_level: loud\n", 3, "log_level", `must be debug, info, warn or error, got "loud"`},
		{"a negative duration", "idempotency:\n  horizon: -1h\n", 2, "idempotency.horizon", "must be positive, got -1h"},
		{"a negative day count", "retention:\n  delete_older_than: -2d\n", 2, "retention.delete_older_than", "must not be negative, got -2d"},
		{"not a duration", "tokens:\n  ttl: soon\n", 2, "tokens.ttl", `must be a duration ("90s", "10m", "168h", "7d"), got str "soon"`},
		{"a duration without a unit", "request_timeout: 30\n", 1, "request_timeout", `must be a duration ("90s", "10m", "168h", "7d"), got int "30"`},
		{"an unknown key", "cache:\n  scopes: 1\n  scops: 2\n", 3, "cache.scops", "is not a known key (known here: scopes, mib)"},
		{"an unknown top key", "shard: 1\n", 1, "shard", "is not a known key"},
		{"a section that is not a mapping", "journal: [1]\n", 1, "journal", "must be a mapping, got a list"},
		{"a scalar where a section is", "journal: on\n", 1, "journal", `must be a mapping, got str "on"`},
		{"journal on/off", "journal:\n  enabled: maybe\n", 2, "journal.enabled", `must be on or off, got str "maybe"`},
		{"too few journal segments", "journal:\n  segments: 1\n", 2, "journal.segments", "must be at least 2, got 1"},
		{"too large a segment", "journal:\n  segment_mib: 2048\n", 2, "journal.segment_mib", "must be at most 1024, got 2048"},
		{"zero limit", "limits:\n  max_depth: 0\n", 2, "limits.max_depth", "must be positive, got 0"},
		{"peers not a list", "cluster:\n  peers: a:1\n", 2, "cluster.peers", `must be a list of strings, got str "a:1"`},
		{"a peer not a string", "cluster:\n  peers:\n    - a:1\n    - 7\n", 4, "cluster.peers[1]", `must be a non-empty string, got int "7"`},
		{"a key given twice", "shards: 1\ncache:\n  mib: 1\n  mib: 2\n", 4, "cache.mib", "is given twice (first at line 3)"},
		{"an unknown on_completion", "retention:\n  on_completion: shred\n", 2, "retention.on_completion", `must be one of keep, archive, delete, got "shred"`},
		{"an override's bad value", "retention:\n  overrides:\n    - scope_prefix: a\n    - scope_prefix: b\n      on_completion: burn\n", 5,
			"retention.overrides[1].on_completion", `must be one of keep, archive, delete, got "burn"`},
		{"an override's unknown key", "expiry:\n  overrides:\n    - scope_prefix: a\n      keep_last_n: 3\n", 4,
			"expiry.overrides[0].keep_last_n", "is not a known key (known here: scope_prefix, inactive_after)"},
		{"an override without a prefix", "retention:\n  overrides:\n    - keep_last_n: 3\n", 3, "retention.overrides[0]", "needs a scope_prefix"},
		{"an override's prefix twice", "expiry:\n  overrides:\n    - scope_prefix: a\n    - scope_prefix: a\n", 4,
			"expiry.overrides[1].scope_prefix", `"a" is given twice (first at line 3)`},
		{"overrides not a list", "retention:\n  overrides: {scope_prefix: a}\n", 2, "retention.overrides", "must be a list"},
		{"extends not a name", "extends: [a.yaml]\n", 1, "extends", "must be a file name, got a list"},
		{"extends a missing file", "\nextends: nowhere.yaml\n", 2, "extends", "names a file that cannot be read"},
		{"the ttl above its cap", "tokens:\n  ttl: 100d\n", 2, "tokens.ttl", "(100d) must not exceed tokens.max_ttl (90d)"},
		{"a cluster without listen", "cluster:\n  name: c\n  peers: [a:1]\n", 2, "cluster.name", "needs remoting.listen (--listen) and cluster.peers (--peers)"},
		{"peers without a cluster", "cluster:\n  peers: [a:1]\n", 2, "cluster.peers", "needs cluster.name (--cluster)"},
		{"not YAML", "shards: 1\ncache: [\n", 2, "", "not valid YAML"},
		{"not a mapping", "- shards\n", 1, "", "must hold a mapping of settings, got a list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := write(t, map[string]string{"main.yaml": tc.content})
			path := filepath.Join(dir, "main.yaml")
			_, err := Load(path)
			require.Error(t, err)
			var ce *Error
			require.True(t, errors.As(err, &ce), "%T %v", err, err)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.Equal(t, path, ce.File)
			assert.Equal(t, tc.line, ce.Line)
			assert.Equal(t, tc.key, ce.Key)
			assert.Contains(t, ce.Msg, tc.msg)
			if tc.key != "" {
				assert.Contains(t, err.Error(), path+":"+strconv.Itoa(tc.line)+": "+tc.key+" ")
			}
		})
	}
}

func TestAnErrorInABaseNamesTheBase(t *testing.T) {
	dir := write(t, map[string]string{"base.yaml": "cache:\n  mib: 0\n", "main.yaml": "extends: base.yaml\nshards: 2\n"})
	_, err := Load(filepath.Join(dir, "main.yaml"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(dir, "base.yaml")+":2: cache.mib must be positive, got 0")
}

// resolveArgs parses args as serve does and resolves them.
func resolveArgs(t *testing.T, args ...string) (*File, error) {
	t.Helper()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fl := RegisterFlags(fs)
	require.NoError(t, fs.Parse(args))
	return fl.Resolve()
}

func TestFlagsOverrideTheFile(t *testing.T) {
	dir := write(t, map[string]string{"main.yaml": "shards: 4\ncache:\n  mib: 64\n  scopes: 10\njournal:\n  enabled: on\ncluster:\n  peers: [x:1]\n  name: c\nremoting:\n  listen: x:1\n"})
	f, err := resolveArgs(t, "--config", filepath.Join(dir, "main.yaml"), "--shards", "8", "--journal", "off", "--peers", "a:1, b:2", "--health-interval", "3s", "--data", "rel")
	require.NoError(t, err)
	assert.Equal(t, 8, f.Shards)
	assert.Equal(t, Origin{Flag: "shards"}, f.Origin("shards"))
	assert.Equal(t, "flag --shards", f.Origin("shards").String())
	assert.False(t, f.Journal.Enabled)
	assert.Equal(t, []string{"a:1", "b:2"}, f.Cluster.Peers)
	assert.Equal(t, 3*time.Second, f.Cluster.HealthInterval)
	assert.Equal(t, "rel", f.DataDir, "a flag's relative path is relative to the working directory")
	assert.Equal(t, int64(64), f.Cache.MiB, "what no flag sets stays the file's")
	assert.Equal(t, Origin{File: filepath.Join(dir, "main.yaml"), Line: 3}, f.Origin("cache.mib"))
}

func TestMetricsAndTracingKeys(t *testing.T) {
	dir := write(t, map[string]string{"main.yaml": "metrics:\n  listen: 127.0.0.1:9464\ntracing:\n  otlp: http://127.0.0.1:4318\n  sample_ratio: 0.25\n"})
	f, err := Load(filepath.Join(dir, "main.yaml"))
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:9464", f.Metrics.Listen)
	assert.Equal(t, "http://127.0.0.1:4318", f.Tracing.OTLP)
	assert.Equal(t, 0.25, f.Tracing.SampleRatio)
	assert.Equal(t, 1.0, Default().Tracing.SampleRatio, "every trace by default")
	assert.Empty(t, Default().Metrics.Listen, "off by default")
	dir = write(t, map[string]string{"main.yaml": "tracing:\n  sample_ratio: 1.5\n"})
	_, err = Load(filepath.Join(dir, "main.yaml"))
	require.ErrorContains(t, err, "tracing.sample_ratio must be a fraction from 0 (none) to 1 (every trace), got 1.5")
}

func TestFlagsAreCheckedByTheFilesRules(t *testing.T) {
	for _, tc := range []struct {
		flag, value, yaml, want string
	}{
		{"shards", "0", "shards: 0", "must be positive, got 0"},
		{"cache-mib", "-3", "cache:\n  mib: -3", "must be positive, got -3"},
		{"cache-scopes", "lots", "cache:\n  scopes: lots", "must be an integer, got "},
		{"log-level", "loud", "log_level: loud", `must be debug, info, warn or error, got "loud"`},
		{"journal", "maybe", "journal:\n  enabled: maybe", "must be on or off, got "},
		{"health-interval", "-1s", "cluster:\n  health_interval: -1s", "must be positive, got -1s"},
		{"max-message-bytes", "0", "remoting:\n  max_message_bytes: 0", "must be positive, got 0"},
		{"metrics", "9464", "metrics:\n  listen: \"9464\"", `must be HOST:PORT (127.0.0.1:9464), or empty for none, got "9464"`},
		{"trace-otlp", "collector:4318", "tracing:\n  otlp: collector:4318", `must be an http:// or https:// URL (http://127.0.0.1:4318), or empty for none, got "collector:4318"`},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			_, ferr := resolveArgs(t, "--"+tc.flag, tc.value)
			dir := write(t, map[string]string{"main.yaml": tc.yaml + "\n"})
			_, yerr := Load(filepath.Join(dir, "main.yaml"))
			var fe, ye *Error
			require.True(t, errors.As(ferr, &fe), "%v", ferr)
			require.True(t, errors.As(yerr, &ye), "%v", yerr)
			assert.Contains(t, fe.Msg, tc.want)
			assert.Contains(t, ye.Msg, tc.want)
			assert.Equal(t, ye.Key, fe.Key, "the flag sets the file's key")
			assert.True(t, strings.HasPrefix(ferr.Error(), "--"+tc.flag+" must") || strings.HasPrefix(ferr.Error(), "--"+tc.flag+" "), ferr.Error())
		})
	}
	t.Run("a flag fixes the file's value only if it is itself valid", func(t *testing.T) {
		dir := write(t, map[string]string{"main.yaml": "shards: 2\n"})
		_, err := resolveArgs(t, "--config", filepath.Join(dir, "main.yaml"), "--shards", "0")
		require.EqualError(t, err, "--shards must be positive, got 0")
	})
	t.Run("cross-key rules name the flags", func(t *testing.T) {
		_, err := resolveArgs(t, "--cluster", "c")
		require.EqualError(t, err, "--cluster needs --listen and --peers")
		_, err = resolveArgs(t, "--peers", "a:1")
		require.EqualError(t, err, "--peers needs --cluster")
	})
}

func TestRetentionFor(t *testing.T) {
	r := Retention{
		Default: RetentionPolicy{KeepLastN: 10, DeleteOlderThan: 7 * 24 * time.Hour, OnCompletion: Keep, ArchiveDir: "archive"},
		Overrides: []RetentionOverride{
			{ScopePrefix: "chat:support:", DeleteOlderThan: ptr(30 * 24 * time.Hour)},
			{ScopePrefix: "chat:", KeepLastN: ptr(50), OnCompletion: ptr(Archive)},
			{ScopePrefix: "chat:support:vip:", KeepLastN: ptr(500), OnCompletion: ptr(Keep)},
			{ScopePrefix: "batch", OnCompletion: ptr(Delete), ArchiveDir: ptr("/srv/old")},
		},
	}
	for _, tc := range []struct {
		scope string
		want  RetentionPolicy
	}{
		{"other", r.Default},
		{"cha", r.Default},
		{"chat:1", RetentionPolicy{KeepLastN: 50, DeleteOlderThan: 7 * 24 * time.Hour, OnCompletion: Archive, ArchiveDir: "archive"}},
		{"chat:support:7", RetentionPolicy{KeepLastN: 50, DeleteOlderThan: 30 * 24 * time.Hour, OnCompletion: Archive, ArchiveDir: "archive"}},
		{"chat:support:vip:1", RetentionPolicy{KeepLastN: 500, DeleteOlderThan: 30 * 24 * time.Hour, OnCompletion: Keep, ArchiveDir: "archive"}},
		{"batch-9", RetentionPolicy{KeepLastN: 10, DeleteOlderThan: 7 * 24 * time.Hour, OnCompletion: Delete, ArchiveDir: "/srv/old"}},
	} {
		t.Run(tc.scope, func(t *testing.T) {
			assert.Equal(t, tc.want, r.For(tc.scope))
		})
	}
	assert.Equal(t, "/data/archive", r.Default.ArchivePath("/data"))
	assert.Equal(t, "/srv/old", r.For("batch").ArchivePath("/data"))
}

func TestExpiryFor(t *testing.T) {
	e := Expiry{Default: ExpiryPolicy{}, Overrides: []ExpiryOverride{
		{ScopePrefix: "tmp:", InactiveAfter: ptr(24 * time.Hour)},
		{ScopePrefix: "tmp:keep:", InactiveAfter: ptr(time.Duration(0))},
		{ScopePrefix: "tmp:keep:x", InactiveAfter: nil},
	}}
	assert.Equal(t, ExpiryPolicy{}, e.For("a"))
	assert.Equal(t, ExpiryPolicy{InactiveAfter: 24 * time.Hour}, e.For("tmp:1"))
	assert.Equal(t, ExpiryPolicy{}, e.For("tmp:keep:1"), "the longer prefix turns it off again")
	assert.Equal(t, ExpiryPolicy{}, e.For("tmp:keep:x1"), "an override that sets nothing changes nothing")
}

func TestHistoryPoliciesEnabled(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want bool
	}{
		{"", false},
		{"retention:\n  keep_last_n: 3\n  on_completion: keep\n", false},
		{"retention:\n  on_completion: archive\n", true},
		{"retention:\n  overrides:\n    - {scope_prefix: a, on_completion: delete}\n", true},
		{"retention:\n  overrides:\n    - {scope_prefix: a, keep_last_n: 1}\n", false},
		{"expiry:\n  inactive_after: 0\n", false},
		{"expiry:\n  inactive_after: 30d\n", true},
		{"expiry:\n  overrides:\n    - {scope_prefix: tmp, inactive_after: 1h}\n", true},
	} {
		t.Run(tc.yaml, func(t *testing.T) {
			dir := write(t, map[string]string{"main.yaml": tc.yaml})
			f, err := Load(filepath.Join(dir, "main.yaml"))
			require.NoError(t, err)
			assert.Equal(t, tc.want, f.HistoryPoliciesEnabled())
			r, e := f.HistoryPolicies()
			assert.Equal(t, f.Retention, r)
			assert.Equal(t, f.Expiry, e)
		})
	}
}

func TestExplainNamesOrigins(t *testing.T) {
	dir := write(t, map[string]string{
		"base.yaml": "cache:\n  scopes: 77\nretention:\n  overrides:\n    - scope_prefix: \"chat:\"\n      keep_last_n: 5\n",
		"main.yaml": "extends: base.yaml\nshards: 4\ndata_dir: /srv/si\n",
	})
	f, err := resolveArgs(t, "--config", filepath.Join(dir, "main.yaml"), "--cache-mib", "64")
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, f.Explain(&b))
	out := b.String()
	base, main := filepath.Join(dir, "base.yaml"), filepath.Join(dir, "main.yaml")
	for _, want := range [][2]string{
		{"shards: 4", "# " + main + ":2"},
		{"  scopes: 77", "# " + base + ":2"},
		{"  mib: 64", "# flag --cache-mib"},
		{"snapshot_every: 1000", "# default"},
		{"  max_handles_per_frame: 100000", "# default"},
		{"  horizon: 7d", "# default"},
		{"  enabled: on", "# default"},
		{"  overrides:", "# " + base + ":4"},
		{`    - scope_prefix: "chat:"`, "# " + base + ":5"},
		{"      keep_last_n: 5", "# " + base + ":6"},
		{"  inactive_after: 0", "# default"},
		{"  overrides: []", "# default"},
	} {
		found := false
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, want[0]+" ") && strings.HasSuffix(l, want[1]) {
				found = true
			}
		}
		assert.True(t, found, "no line %q … %q in\n%s", want[0], want[1], out)
	}
	assert.Contains(t, out, "# files read: "+main+", "+base)

	// The output is a configuration file that gives back the same settings.
	again := filepath.Join(t.TempDir(), "explained.yaml")
	require.NoError(t, os.WriteFile(again, b.Bytes(), 0o600))
	g, err := Load(again)
	require.NoError(t, err)
	g.Sources, g.origins, f.Sources, f.origins = nil, nil, nil, nil
	assert.Equal(t, f, g)
}

func TestShippedExamplesLoad(t *testing.T) {
	paths, err := filepath.Glob("../../examples/config/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			f, err := Load(p)
			require.NoError(t, err)
			assert.False(t, f.HistoryPoliciesEnabled(), "the example must start a server of this build")
		})
	}
	f, err := Load("../../examples/config/stateindex.yaml")
	require.NoError(t, err)
	assert.Len(t, f.Sources, 2, "it shows extends")
	assert.Equal(t, Default().Idempotency.ClockSkew, f.Idempotency.ClockSkew)
	assert.Equal(t, "default", f.Origin("idempotency.clock_skew").String(), "its null shows a removed key")
	assert.Equal(t, 50, f.Retention.For("chat:support:1").KeepLastN)
	assert.Equal(t, 30*24*time.Hour, f.Retention.For("chat:support:1").DeleteOlderThan)
}

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{"90s", 90 * time.Second, false},
		{"168h", 168 * time.Hour, false},
		{"7d", 7 * 24 * time.Hour, false},
		{"1d12h", 36 * time.Hour, false},
		{"-2d", -48 * time.Hour, false},
		{"0", 0, false},
		{"d", 0, true},
		{"7x", 0, true},
		{"1d-1h", 0, true},
		{"10", 0, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			d, err := ParseDuration(tc.in)
			if tc.bad {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, d)
			if d >= 0 {
				back, err := ParseDuration(formatDuration(d))
				require.NoError(t, err)
				assert.Equal(t, d, back, "formatDuration round-trips")
			}
		})
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0", 100 * time.Millisecond: "100ms", 90 * time.Second: "1m30s", 10 * time.Minute: "10m",
		2 * time.Hour: "2h", 90 * time.Minute: "1h30m", 48 * time.Hour: "2d", 36 * time.Hour: "36h",
	} {
		assert.Equal(t, want, formatDuration(d))
	}
}
