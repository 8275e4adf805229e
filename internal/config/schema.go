package config

import (
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/tokenizer"
)

// spec bounds one value. The value's type is the type its field points to:
// *int and *int64 are integers, *time.Duration a duration, *string a
// string, *bool on/off, *[]string a list of strings.
type spec struct {
	min, max int64               // integers and durations: the least (and, if max > 0, largest) value
	enum     []string            // strings: the values allowed (nil: any)
	nonEmpty bool                // strings: "" is refused
	check    func(string) bool   // strings: an extra test; false refuses the value
	want     string              // what check wants, for the message
	redact   func(string) string // strings: how a refused value is shown (a URL's password hidden)
}

// setting is one key of the file, in the order Explain prints them.
type setting struct {
	key   string // key path
	flag  string // serve's flag for it, if any
	usage string // the flag's help text
	spec
	field     func(*File) any // a pointer to the value in a File; nil for an overrides list
	overrides bool            // a list of per-prefix overrides (retention.overrides, expiry.overrides)
}

func positive() spec    { return spec{min: 1} }
func nonNegative() spec { return spec{min: 0} }

var onCompletion = spec{enum: []string{Keep, Archive, Delete}}

// retentionKeys are the keys of a retention policy: the server's defaults
// under retention:, and each override's.
var retentionKeys = []struct {
	key string
	spec
	def func(*RetentionPolicy) any
	ovr func(*RetentionOverride) any // allocates the override's field
}{
	{"keep_last_n", nonNegative(), func(p *RetentionPolicy) any { return &p.KeepLastN },
		func(o *RetentionOverride) any { o.KeepLastN = new(int); return o.KeepLastN }},
	{"delete_older_than", nonNegative(), func(p *RetentionPolicy) any { return &p.DeleteOlderThan },
		func(o *RetentionOverride) any { o.DeleteOlderThan = new(time.Duration); return o.DeleteOlderThan }},
	{"on_completion", onCompletion, func(p *RetentionPolicy) any { return &p.OnCompletion },
		func(o *RetentionOverride) any { o.OnCompletion = new(string); return o.OnCompletion }},
	{"archive_dir", spec{nonEmpty: true}, func(p *RetentionPolicy) any { return &p.ArchiveDir },
		func(o *RetentionOverride) any { o.ArchiveDir = new(string); return o.ArchiveDir }},
}

// threshold is a fraction of the context window, above 0 and at most 1.
var threshold = spec{check: func(s string) bool { f, err := strconv.ParseFloat(s, 64); return err == nil && f > 0 && f <= 1 },
	want: "a fraction of the window above 0 and at most 1 (0.9: 90%)"}

// counterName is a token counter's name (tokenizer.Names; "estimate" is
// the estimate's alias).
var counterName = spec{nonEmpty: true, check: func(s string) bool { _, ok := tokenizer.Canonical(s); return ok },
	want: "a known token counter (" + strings.Join(tokenizer.Names(), ", ") + ")"}

// dollars is an amount of spend in currency units: not negative, and
// within what micro-units can hold.
var dollars = spec{check: func(s string) bool {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 {
		return false
	}
	_, err = budget.SpendFromFloat(f)
	return err == nil
}, want: "an amount in currency units, not negative (0.25: 25 cents)"}

// storeURL is "", a PostgreSQL URL, or env:NAME.
var storeURL = spec{check: func(s string) bool {
	if name, ok := strings.CutPrefix(s, "env:"); ok {
		return validEnvName(name)
	}
	return s == "" || strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}, want: `"" (the data directory), a postgres:// or postgresql:// URL, or env:NAME`, redact: RedactStore}

func validEnvName(name string) bool {
	if name == "" {
		return false
	}
	for i, r := range name {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// hostPort is an address to listen on, or "" for none.
var hostPort = spec{check: func(s string) bool {
	if s == "" {
		return true
	}
	_, p, err := net.SplitHostPort(s)
	n, perr := strconv.Atoi(p)
	return err == nil && perr == nil && n >= 0 && n <= 65535
}, want: "HOST:PORT (127.0.0.1:9464), or empty for none"}

// otlpURL is an OTLP/HTTP endpoint, or "" for none.
var otlpURL = spec{check: func(s string) bool {
	if s == "" {
		return true
	}
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}, want: "an http:// or https:// URL (http://127.0.0.1:4318), or empty for none"}

// sampleRatio is a fraction of traces, 0 to 1.
var sampleRatio = spec{check: func(s string) bool { f, err := strconv.ParseFloat(s, 64); return err == nil && f >= 0 && f <= 1 },
	want: "a fraction from 0 (none) to 1 (every trace)"}

var logLevel = spec{check: func(s string) bool { var l slog.Level; return l.UnmarshalText([]byte(s)) == nil }, want: "debug, info, warn or error"}

// settings is the schema: every key a file may set.
var settings = func() []setting {
	s := []setting{
		{key: "data_dir", flag: "data", usage: "data directory (holds stateindex.db and server.key)", spec: spec{nonEmpty: true}, field: func(f *File) any { return &f.DataDir }},
		{key: "store", flag: "store", usage: "where the log is kept: \"\" for the data directory's file, postgres://USER@HOST:PORT/DB?... for a PostgreSQL database (shared by the members of a --cluster), or env:NAME to read that URL from environment variable NAME (keeps a password off the command line)",
			spec: storeURL, field: func(f *File) any { return &f.Store }},
		{key: "keys.server_key_file", field: func(f *File) any { return &f.Keys.ServerKeyFile }},
		{key: "keys.checkpoint_key_file", field: func(f *File) any { return &f.Keys.CheckpointKeyFile }},
		{key: "log_level", flag: "log-level", usage: "debug, info, warn or error", spec: logLevel, field: func(f *File) any { return &f.LogLevel }},
		{key: "shards", flag: "shards", usage: "shard actors (a scope always lands on the same one); in a cluster the same on every member", spec: positive(), field: func(f *File) any { return &f.Shards }},
		{key: "snapshot_every", flag: "snapshot-every", usage: "events between a scope's snapshots", spec: positive(), field: func(f *File) any { return &f.SnapshotEvery }},
		{key: "cache.scopes", flag: "cache-scopes", usage: "hot scopes kept in memory", spec: positive(), field: func(f *File) any { return &f.Cache.Scopes }},
		{key: "cache.mib", flag: "cache-mib", usage: "approximate memory bound of hot scopes, MiB", spec: positive(), field: func(f *File) any { return &f.Cache.MiB }},
		{key: "max_pending", spec: positive(), field: func(f *File) any { return &f.MaxPending }},
		{key: "journal.enabled", flag: "journal", usage: "on: an append is durable once in the write-ahead journal (one fdatasync per group commit), applied to bbolt in the background; off: every group commit is a bbolt transaction", field: func(f *File) any { return &f.Journal.Enabled }},
		{key: "journal.segment_mib", spec: spec{min: 1, max: 1024}, field: func(f *File) any { return &f.Journal.SegmentMiB }},
		{key: "journal.segments", spec: spec{min: 2}, field: func(f *File) any { return &f.Journal.Segments }},
		{key: "journal.apply_interval", spec: positive(), field: func(f *File) any { return &f.Journal.ApplyInterval }},
		{key: "journal.apply_mib", spec: positive(), field: func(f *File) any { return &f.Journal.ApplyMiB }},
		{key: "idempotency.horizon", spec: positive(), field: func(f *File) any { return &f.Idempotency.Horizon }},
		{key: "idempotency.clock_skew", spec: positive(), field: func(f *File) any { return &f.Idempotency.ClockSkew }},
		{key: "tokens.ttl", spec: positive(), field: func(f *File) any { return &f.Tokens.TTL }},
		{key: "tokens.max_ttl", spec: positive(), field: func(f *File) any { return &f.Tokens.MaxTTL }},
		{key: "tokens.counter", flag: "token-counter", usage: "the token counter of scopes no tokens.scopes prefix matches: " + strings.Join(tokenizer.Names(), ", "),
			spec: counterName, field: func(f *File) any { return &f.Tokens.Counter }},
		{key: "tokens.scopes", overrides: true},
		{key: "limits.max_scope_bytes", spec: positive(), field: func(f *File) any { return &f.Limits.MaxScopeBytes }},
		{key: "limits.max_id_bytes", spec: positive(), field: func(f *File) any { return &f.Limits.MaxIDBytes }},
		{key: "limits.max_goal_bytes", spec: positive(), field: func(f *File) any { return &f.Limits.MaxGoalBytes }},
		{key: "limits.max_inputs_bytes", spec: positive(), field: func(f *File) any { return &f.Limits.MaxInputsBytes }},
		{key: "limits.max_content_bytes", spec: positive(), field: func(f *File) any { return &f.Limits.MaxContentBytes }},
		{key: "limits.max_name_bytes", spec: positive(), field: func(f *File) any { return &f.Limits.MaxNameBytes }},
		{key: "limits.max_depth", spec: positive(), field: func(f *File) any { return &f.Limits.MaxDepth }},
		{key: "limits.max_handles_per_frame", spec: positive(), field: func(f *File) any { return &f.Limits.MaxHandlesPerFrame }},
		{key: "limits.context_window", spec: positive(), field: func(f *File) any { return &f.Limits.DefaultContextWindow }},
		{key: "continuation.auto", field: func(f *File) any { return &f.Continuation.Auto }},
		{key: "continuation.threshold", spec: threshold, field: func(f *File) any { return &f.Continuation.Threshold }},
		{key: "continuation.resume_ceiling", spec: positive(), field: func(f *File) any { return &f.Limits.ResumeCeiling }},
		{key: "request_timeout", spec: positive(), field: func(f *File) any { return &f.RequestTimeout }},
		{key: "remoting.listen", flag: "listen", usage: "serve remote actors over Proto.Actor remoting at HOST:PORT (the address they reach it at)", field: func(f *File) any { return &f.Remoting.Listen }},
		{key: "remoting.max_message_bytes", flag: "max-message-bytes", usage: "largest encoded remote request or reply", spec: positive(), field: func(f *File) any { return &f.Remoting.MaxMessageBytes }},
		{key: "cluster.name", flag: "cluster", usage: "join the Proto.Actor cluster NAME as a storage member (needs --listen and --peers)", field: func(f *File) any { return &f.Cluster.Name }},
		{key: "cluster.peers", flag: "peers", usage: "the cluster's storage members, HOST:PORT,... (their --listen addresses; this member is added); the same list on every member and client", field: func(f *File) any { return &f.Cluster.Peers }},
		{key: "cluster.health_interval", flag: "health-interval", usage: "cluster: how often members poll each other's health endpoint (each member's --listen port + 1)", spec: positive(), field: func(f *File) any { return &f.Cluster.HealthInterval }},
		{key: "http.listen", flag: "http", usage: "serve the read-only web inspector at HOST:PORT (on a loopback address it needs nothing; on any other, http.secret_file)", field: func(f *File) any { return &f.HTTP.Listen }},
		{key: "http.secret_file", flag: "http-secret-file", usage: "a file holding the secret (at least 16 bytes) every inspector request must carry: Authorization: Bearer SECRET, or SECRET as the basic password", field: func(f *File) any { return &f.HTTP.SecretFile }},
		{key: "tls.cert_file", flag: "tls-cert", usage: "TLS for remoting and the cluster: this node's certificate (PEM), served and presented to peers that ask", field: func(f *File) any { return &f.TLS.CertFile }},
		{key: "tls.key_file", flag: "tls-key", usage: "TLS: the key of --tls-cert (PEM)", field: func(f *File) any { return &f.TLS.KeyFile }},
		{key: "tls.ca_file", flag: "tls-ca", usage: "TLS: the CAs peers' certificates must chain to (PEM; default the system's)", field: func(f *File) any { return &f.TLS.CAFile }},
		{key: "tls.client_ca_file", flag: "tls-client-ca", usage: "TLS: the CAs callers' certificates must chain to (PEM; default --tls-ca)", field: func(f *File) any { return &f.TLS.ClientCAFile }},
		{key: "tls.client_auth", flag: "tls-client-auth", usage: "TLS: none, request (verify a caller's certificate if given) or require (mutual TLS)",
			spec: spec{enum: []string{string(actors.ClientAuthNone), string(actors.ClientAuthRequest), string(actors.ClientAuthRequire)}}, field: func(f *File) any { return &f.TLS.ClientAuth }},
		{key: "tls.server_name", flag: "tls-server-name", usage: "TLS: the name peers' certificates must carry (default the host dialed)", field: func(f *File) any { return &f.TLS.ServerName }},
		{key: "tls.allowed_names", flag: "tls-allowed-names", usage: "TLS: admit only callers whose certificate carries one of these names (CN, DNS or URI SAN); needs --tls-client-auth require", field: func(f *File) any { return &f.TLS.AllowedNames }},
		{key: "auth.secret_file", flag: "secret-file", usage: "a file holding the shared secret every caller must present (at least 32 bytes; the same on every node)", field: func(f *File) any { return &f.Auth.SecretFile }},
	}
	for _, k := range retentionKeys {
		s = append(s, setting{key: "retention." + k.key, spec: k.spec, field: func(f *File) any { return k.def(&f.Retention.Default) }})
	}
	s = append(s,
		setting{key: "retention.interval", spec: positive(), field: func(f *File) any { return &f.Retention.Interval }},
		setting{key: "retention.hold_for_subscribers", spec: nonNegative(), field: func(f *File) any { return &f.Retention.HoldForSubscribers }},
		setting{key: "retention.overrides", overrides: true},
		setting{key: "expiry.inactive_after", spec: nonNegative(), field: func(f *File) any { return &f.Expiry.Default.InactiveAfter }},
		setting{key: "expiry.overrides", overrides: true},
		setting{key: "hooks", overrides: true},
		setting{key: "registry.enabled", field: func(f *File) any { return &f.Registry.Enabled }},
		setting{key: "registry.interval", spec: positive(), field: func(f *File) any { return &f.Registry.Interval }},
		setting{key: "ledger.unestimated", spec: spec{enum: []string{string(frames.EstimateDeny), string(frames.EstimateCap), string(frames.EstimateAllow)}},
			field: func(f *File) any { return &f.Ledger.Unestimated }},
		setting{key: "ledger.cap", spec: dollars, field: func(f *File) any { return &f.Ledger.Cap }},
		setting{key: "ledger.lease", spec: spec{min: 1, max: frames.MaxReservationAge}, field: func(f *File) any { return &f.Ledger.Lease }},
		setting{key: "ledger.key_file", field: func(f *File) any { return &f.Ledger.KeyFile }},
		setting{key: "state.max_bytes", spec: positive(), field: func(f *File) any { return &f.Limits.MaxStateBytes }},
		setting{key: "state.max_value_bytes", spec: positive(), field: func(f *File) any { return &f.Limits.MaxStateValueBytes }},
		setting{key: "state.max_key_bytes", spec: positive(), field: func(f *File) any { return &f.Limits.MaxStateKeyBytes }},
		setting{key: "metrics.listen", flag: "metrics", usage: "serve Prometheus metrics at http://HOST:PORT/metrics and a health check at /healthz (on that host only)",
			spec: hostPort, field: func(f *File) any { return &f.Metrics.Listen }},
		setting{key: "metrics.actor_system", field: func(f *File) any { return &f.Metrics.ActorSystem }},
		setting{key: "tracing.otlp", flag: "trace-otlp", usage: "export a span per request over OTLP/HTTP to this URL (http://HOST:4318); OTEL_EXPORTER_OTLP_ENDPOINT works too",
			spec: otlpURL, field: func(f *File) any { return &f.Tracing.OTLP }},
		setting{key: "tracing.sample_ratio", spec: sampleRatio, field: func(f *File) any { return &f.Tracing.SampleRatio }},
	)
	return s
}()

func settingFor(key string) *setting {
	for i := range settings {
		if settings[i].key == key {
			return &settings[i]
		}
	}
	return nil
}

// knownUnder returns the keys directly under a section ("" is the top), in
// schema order.
func knownUnder(section string) []string {
	var out []string
	for _, s := range settings {
		rest, ok := strings.CutPrefix(s.key, section)
		if section != "" && !ok {
			continue
		}
		name, _, _ := strings.Cut(rest, ".")
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// isSection reports whether key is a mapping of the schema (cache, journal…).
func isSection(key string) bool {
	for _, s := range settings {
		if strings.HasPrefix(s.key, key+".") {
			return true
		}
	}
	return false
}

// assign checks a value and stores it through ptr. The value is a YAML
// node from a file, or (node nil) a flag's text. Files and flags go through
// this one function, so both obey the same rules.
func assign(sp spec, ptr any, node *yaml.Node, text string, o Origin, key string) error {
	fail := func(format string, args ...any) error { return errAt(o, key, format, args...) }
	if node != nil {
		if node.Kind == yaml.ScalarNode {
			text = node.Value
		} else if _, list := ptr.(*[]string); !list {
			return fail("must be %s, got %s", wantOf(ptr), describe(node))
		}
	}
	tagIs := func(tags ...string) bool { return node == nil || slices.Contains(tags, node.ShortTag()) }
	switch p := ptr.(type) {
	case *int, *int64:
		var n int64
		var err error
		if node != nil {
			err = node.Decode(&n) // YAML's own integer syntax
		} else {
			n, err = strconv.ParseInt(text, 0, 64) // as the flag package reads an int
		}
		if !tagIs("!!int") || err != nil {
			return fail("must be an integer, got %s", describeText(node, text))
		}
		if n < sp.min {
			return fail("%s, got %d", atLeast(sp.min), n)
		}
		if sp.max > 0 && n > sp.max {
			return fail("must be at most %d, got %d", sp.max, n)
		}
		if q, ok := p.(*int); ok {
			*q = int(n)
		} else {
			*p.(*int64) = n
		}
	case *time.Duration:
		d, err := ParseDuration(text)
		if !tagIs("!!str", "!!int") || err != nil {
			return fail(`must be a duration ("90s", "10m", "168h", "7d"), got %s`, describeText(node, text))
		}
		if int64(d) < sp.min {
			return fail("%s, got %s", atLeast(sp.min), text)
		}
		if sp.max > 0 && int64(d) > sp.max {
			return fail("must be at most %s, got %s", formatDuration(time.Duration(sp.max)), text)
		}
		*p = d
	case *string:
		if !tagIs("!!str") {
			return fail("must be a string, got %s", describe(node))
		}
		switch {
		case sp.nonEmpty && text == "":
			return fail("must not be empty")
		case sp.enum != nil && !slices.Contains(sp.enum, text):
			return fail("must be one of %s, got %q", strings.Join(sp.enum, ", "), text)
		case sp.check != nil && !sp.check(text):
			shown := text
			if sp.redact != nil {
				shown = sp.redact(text)
			}
			return fail("must be %s, got %q", sp.want, shown)
		}
		*p = text
	case *float64:
		f, err := strconv.ParseFloat(text, 64)
		if !tagIs("!!float", "!!int") || err != nil {
			return fail("must be a number, got %s", describeText(node, text))
		}
		if sp.check != nil && !sp.check(text) {
			return fail("must be %s, got %s", sp.want, text)
		}
		*p = f
	case *bool:
		text = strings.ToLower(text)
		switch {
		case tagIs("!!bool", "!!str") && (text == "on" || text == "true"):
			*p = true
		case tagIs("!!bool", "!!str") && (text == "off" || text == "false"):
			*p = false
		default:
			return fail("must be on or off, got %s", describeText(node, text))
		}
	case *[]string:
		var items []string
		if node == nil {
			for _, it := range strings.Split(text, ",") {
				if it = strings.TrimSpace(it); it != "" {
					items = append(items, it)
				}
			}
		} else {
			if node.Kind != yaml.SequenceNode {
				return fail("must be a list of strings, got %s", describe(node))
			}
			for i, it := range node.Content {
				if it.Kind != yaml.ScalarNode || it.ShortTag() != "!!str" || it.Value == "" {
					return errAt(Origin{File: o.File, Line: it.Line}, fmt.Sprintf("%s[%d]", key, i), "must be a non-empty string, got %s", describe(it))
				}
				items = append(items, it.Value)
			}
		}
		*p = items
	default:
		return fail("has no rule for values of type %T (a bug in the schema)", ptr)
	}
	return nil
}

func atLeast(min int64) string {
	switch min {
	case 0:
		return "must not be negative"
	case 1:
		return "must be positive"
	}
	return fmt.Sprintf("must be at least %d", min)
}

func wantOf(ptr any) string {
	switch ptr.(type) {
	case *int, *int64:
		return "an integer"
	case *time.Duration:
		return "a duration"
	case *bool:
		return "on or off"
	case *[]string:
		return "a list of strings"
	case *float64:
		return "a number"
	}
	return "a string"
}

// describe names a node's kind and value for a message.
func describe(n *yaml.Node) string {
	switch {
	case n == nil:
		return "nothing"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	}
	return fmt.Sprintf("%s %q", strings.TrimPrefix(n.ShortTag(), "!!"), n.Value)
}

func describeText(n *yaml.Node, text string) string {
	if n != nil {
		return describe(n)
	}
	return strconv.Quote(text)
}

// ParseDuration parses a Go duration ("90s", "1h30m", "168h") or a number
// of days with an optional Go duration after it ("7d", "1d12h").
func ParseDuration(s string) (time.Duration, error) {
	if neg, ok := strings.CutPrefix(s, "-"); ok && strings.Contains(neg, "d") {
		d, err := ParseDuration(neg)
		return -d, err
	}
	if days, rest, ok := strings.Cut(s, "d"); ok && days != "" && strings.Trim(days, "0123456789") == "" {
		n, err := strconv.ParseInt(days, 10, 32)
		if err != nil {
			return 0, err
		}
		d := time.Duration(n) * 24 * time.Hour
		if rest != "" {
			r, err := time.ParseDuration(rest)
			if err != nil || r < 0 {
				return 0, fmt.Errorf("config: bad duration %q", s)
			}
			d += r
		}
		return d, nil
	}
	return time.ParseDuration(s)
}

// formatDuration writes d the way a person would: whole days as "7d",
// otherwise Go's form without zero units ("10m", "1h30m").
func formatDuration(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	if d > 0 && d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
