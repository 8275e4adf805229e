package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/actors/wire"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/internal/inspector"
	"github.com/stateindex/stateindex/tokenizer"
)

// File is a resolved configuration: the built-in defaults, overlaid by the
// file (and the files it extends), overlaid by the flags given.
type File struct {
	DataDir        string // data directory; a relative path in a file is relative to that file
	Store          string // "" (DataDir's bbolt file), a postgres:// URL, or env:NAME (the URL in that environment variable)
	Keys           Keys
	LogLevel       string // debug, info, warn or error
	Shards         int
	SnapshotEvery  int64
	Cache          Cache
	MaxPending     int
	Journal        Journal
	Idempotency    Idempotency
	Tokens         Tokens
	Limits         frames.Config
	Continuation   Continuation
	RequestTimeout time.Duration
	Remoting       Remoting
	Cluster        Cluster
	TLS            TLS
	Auth           Auth
	Retention      Retention
	Expiry         Expiry
	Hooks          []Hook
	Registry       Registry
	Ledger         Ledger
	HTTP           HTTP
	Metrics        Metrics
	Tracing        Tracing

	// Sources lists the files read, the named one first, then each base.
	Sources []string

	origins map[string]Origin // by key path; absent means the default
}

// Continuation configures automatic continuation (DESIGN §10): off
// unless Auto; Threshold is the fraction of a frame's context window at
// which a write continues it (frames.Config.ContinueAt, in permille). The
// resume ceiling is Limits.ResumeCeiling (continuation.resume_ceiling).
type Continuation struct {
	Auto      bool
	Threshold float64
}

// Registry configures the index ListFrames reads (actors.Config
// RegistryOff, RegistryInterval).
type Registry struct {
	Enabled  bool
	Interval time.Duration
}

// Ledger configures the spend ledger (frames/ledger.go): what a
// reservation without an estimate gets (Unestimated: deny, cap or allow;
// Cap, in currency units, the amount a cap reservation holds), the default
// lease, and KeyFile, a file holding the secret (at least 32 bytes) that
// signs reservation tokens (actors.Config.LedgerKey; "" signs with the
// server key, which a reservation for a scope on another cluster member
// cannot be verified with).
type Ledger struct {
	Unestimated string
	Cap         float64
	Lease       time.Duration
	KeyFile     string
}

// HTTP configures the read-only web inspector (internal/inspector):
// Listen its HOST:PORT ("" none; `serve --http`), SecretFile a file holding
// the secret every request must carry (required off loopback; `serve
// --http-secret-file`).
type HTTP struct {
	Listen     string
	SecretFile string
}

// HTTPSecret reads http.secret_file (nil when none is set).
func (f *File) HTTPSecret() ([]byte, error) {
	if f.HTTP.SecretFile == "" {
		if f.Auth.SecretFile != "" { // remoting's: the same authentication as remoting
			return f.remotingSecret()
		}
		return nil, nil
	}
	s, err := inspector.ReadSecret(f.HTTP.SecretFile)
	if err != nil {
		return nil, errAt(f.Origin("http.secret_file"), "http.secret_file", "(%s): %v", f.HTTP.SecretFile, err)
	}
	return s, nil
}

// Keys names files holding the server's keys, instead of their defaults:
// DIR/server.key and DIR/checkpoint.key with a data directory's store, the
// store's shared keys (eventstore.KeyKeeper) with a shared store. Give
// every member of a cluster the same files.
type Keys struct {
	// ServerKeyFile holds the secret (at least 32 bytes) that signs
	// suspension tokens (and reservation tokens when ledger.key_file is
	// not set).
	ServerKeyFile string
	// CheckpointKeyFile holds the Ed25519 seed (32 bytes, or 64 hex
	// digits) that signs checkpoints.
	CheckpointKeyFile string
}

// MinLedgerKeyBytes is the least a ledger key file may hold.
const MinLedgerKeyBytes = 32

// Cache bounds the hot scopes kept in memory.
type Cache struct {
	Scopes int
	MiB    int64
}

// Journal configures the write-ahead journal (eventstore.Options).
type Journal struct {
	Enabled       bool
	SegmentMiB    int
	Segments      int
	ApplyInterval time.Duration
	ApplyMiB      int
}

// Idempotency is how long request ids are remembered (actors.Config
// RequestHorizon and ClockSkew).
type Idempotency struct {
	Horizon   time.Duration
	ClockSkew time.Duration
}

// Tokens sets suspension tokens' default and largest lifetime, and the
// token counters: Counter for the server (a name of tokenizer.Names, in its
// canonical spelling), Scopes per scope prefix (the longest matching prefix
// wins).
type Tokens struct {
	TTL     time.Duration
	MaxTTL  time.Duration
	Counter string
	Scopes  []TokenScope
}

// TokenScope selects the token counter of the scopes under Prefix.
type TokenScope struct {
	Prefix  string
	Counter string
}

// Remoting configures Proto.Actor remoting.
type Remoting struct {
	Listen          string // HOST:PORT; "" serves in-process only
	MaxMessageBytes int
}

// TLS configures TLS for remoting and the cluster (actors.TLSFiles):
// this node's certificate and key, the CAs peers' certificates must chain
// to, whether callers must present a certificate (ClientAuth: none,
// request or require) and which certificate names are admitted. Relative
// paths in a file are relative to that file.
type TLS struct {
	CertFile     string
	KeyFile      string
	CAFile       string
	ClientCAFile string
	ClientAuth   string
	ServerName   string
	AllowedNames []string
}

// Configured reports whether any TLS key is set.
func (t TLS) Configured() bool {
	return t.CertFile != "" || t.KeyFile != "" || t.CAFile != "" || t.ClientCAFile != "" || t.ServerName != "" ||
		len(t.AllowedNames) > 0 || (t.ClientAuth != "" && t.ClientAuth != string(actors.ClientAuthNone))
}

// Auth configures the shared secret every caller presents: SecretFile
// holds it (at least actors.MinSecretBytes, the same file on every node);
// "" admits callers without one.
type Auth struct {
	SecretFile string
}

// Metrics configures the metrics endpoint: Listen is the HOST:PORT that
// serves Prometheus metrics at /metrics and a health check at /healthz
// ("" serves none); ActorSystem adds Proto.Actor's own metrics (off by default: per actor
// message: they cost more than the StateIndex's).
type Metrics struct {
	Listen      string
	ActorSystem bool
}

// Tracing configures traces: OTLP is the OTLP/HTTP endpoint spans are
// exported to (http://HOST:4318; "" exports none unless the environment
// sets OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT),
// SampleRatio the fraction of traces started here that are kept (a
// caller's sampled trace is always followed).
type Tracing struct {
	OTLP        string
	SampleRatio float64
}

// Cluster configures membership of a Proto.Actor cluster.
type Cluster struct {
	Name           string // "" runs standalone
	Peers          []string
	HealthInterval time.Duration
}

// Origin says where a value came from: a file and line, a flag, or (the
// zero Origin) the built-in default.
type Origin struct {
	File string
	Line int
	Flag string
}

func (o Origin) String() string {
	switch {
	case o.Flag != "":
		return "flag --" + o.Flag
	case o.File != "":
		return fmt.Sprintf("%s:%d", o.File, o.Line)
	default:
		return "default"
	}
}

// Default returns the built-in configuration: the defaults of
// actors.DefaultConfig, eventstore.Options and the serve command's flags.
func Default() *File {
	d := actors.DefaultConfig()
	return &File{
		DataDir:        "./data",
		LogLevel:       "info",
		Shards:         d.Shards,
		SnapshotEvery:  d.SnapshotEvery,
		Cache:          Cache{Scopes: d.CacheScopes, MiB: d.CacheBytes >> 20},
		MaxPending:     d.MaxPending,
		Journal:        Journal{Enabled: true, SegmentMiB: eventstore.DefaultJournalSegmentBytes >> 20, Segments: eventstore.DefaultJournalSegments, ApplyInterval: eventstore.DefaultApplyInterval, ApplyMiB: eventstore.DefaultApplyBytes >> 20},
		Idempotency:    Idempotency{Horizon: d.RequestHorizon, ClockSkew: d.ClockSkew},
		Tokens:         Tokens{TTL: d.TokenTTL, MaxTTL: d.MaxTokenTTL, Counter: tokenizer.Estimate},
		Limits:         d.Frames,
		Continuation:   Continuation{Threshold: float64(frames.DefaultContinueAt) / 1000},
		RequestTimeout: d.RequestTimeout,
		Remoting:       Remoting{MaxMessageBytes: wire.DefaultMaxBytes},
		Cluster:        Cluster{HealthInterval: time.Second},
		TLS:            TLS{ClientAuth: string(actors.ClientAuthNone)},
		Tracing:        Tracing{SampleRatio: 1},
		Registry:       Registry{Enabled: true, Interval: 25 * time.Millisecond},
		Ledger:         Ledger{Unestimated: string(frames.EstimateDeny), Lease: time.Duration(frames.DefaultLease)},
		Retention:      Retention{Default: RetentionPolicy{KeepLastN: 10, DeleteOlderThan: 7 * 24 * time.Hour, OnCompletion: Keep, ArchiveDir: "archive"}, Interval: time.Minute},
		origins:        map[string]Origin{},
	}
}

// Origin returns where the value at a key path ("cache.scopes",
// "retention.overrides[0].keep_last_n") came from.
func (f *File) Origin(key string) Origin { return f.origins[key] }

// ActorsConfig returns base with every setting of the file that
// actors.Config holds. Keys, clock, logger and strategies stay base's.
func (f *File) ActorsConfig(base actors.Config) actors.Config {
	c := base
	c.Frames = f.Limits
	c.Frames.ContinueAt = 0
	if f.Continuation.Auto {
		c.Frames.ContinueAt = int64(f.Continuation.Threshold*1000 + 0.5)
		if c.Frames.ContinueAt <= 0 {
			c.Frames.ContinueAt = frames.DefaultContinueAt
		}
	}
	c.Shards = f.Shards
	c.SnapshotEvery = f.SnapshotEvery
	c.CacheScopes, c.CacheBytes = f.Cache.Scopes, f.Cache.MiB<<20
	c.MaxPending = f.MaxPending
	c.RequestHorizon, c.ClockSkew = f.Idempotency.Horizon, f.Idempotency.ClockSkew
	c.TokenTTL, c.MaxTokenTTL = f.Tokens.TTL, f.Tokens.MaxTTL
	c.RequestTimeout = f.RequestTimeout
	c.SubscriptionHold = f.Retention.HoldForSubscribers
	c.RegistryOff, c.RegistryInterval = !f.Registry.Enabled, f.Registry.Interval
	c.Frames.Unestimated, c.Frames.UnestimatedCap = frames.EstimatePolicy(f.Ledger.Unestimated), 0
	if c.Frames.Unestimated == frames.EstimateCap {
		c.Frames.UnestimatedCap, _ = budget.SpendFromFloat(f.Ledger.Cap) // checked by ledger.cap's spec
	}
	c.Lease = f.Ledger.Lease
	return c
}

// LedgerKey reads ledger.key_file: the secret that signs reservation
// tokens (nil when no file is named: the server key signs them). A file
// that cannot be read or holds fewer than MinLedgerKeyBytes is refused.
func (f *File) LedgerKey() ([]byte, error) {
	if f.Ledger.KeyFile == "" {
		return nil, nil
	}
	key, err := os.ReadFile(f.Ledger.KeyFile)
	if err != nil {
		return nil, errAt(f.Origin("ledger.key_file"), "ledger.key_file", "(%s) cannot be read: %v", f.Ledger.KeyFile, err)
	}
	if len(key) < MinLedgerKeyBytes {
		return nil, errAt(f.Origin("ledger.key_file"), "ledger.key_file", "(%s) must hold a secret of at least %d bytes, got %d",
			f.Ledger.KeyFile, MinLedgerKeyBytes, len(key))
	}
	return key, nil
}

// tlsKeys maps actors.TLSFiles' fields to their keys.
var tlsKeys = map[string]string{"CertFile": "tls.cert_file", "KeyFile": "tls.key_file", "CAFile": "tls.ca_file",
	"ClientCAFile": "tls.client_ca_file", "ClientAuth": "tls.client_auth", "ServerName": "tls.server_name", "AllowedNames": "tls.allowed_names"}

// Security reads tls.* and auth.secret_file and returns what remoting and
// the cluster run with (nil when neither is configured: plaintext, anyone
// admitted); log receives the refused callers. Every file is read now: a
// missing or unreadable file, a key that does not match its certificate,
// a CA file without a certificate or a short secret is an error naming the
// key and where it was set.
func (f *File) Security(log *slog.Logger) (*actors.Security, error) {
	sc := actors.SecurityConfig{Logger: log}
	if t := f.TLS; t.Configured() {
		server, client, err := actors.LoadTLS(actors.TLSFiles{CertFile: t.CertFile, KeyFile: t.KeyFile, CAFile: t.CAFile, ClientCAFile: t.ClientCAFile,
			ClientAuth: actors.ClientAuth(t.ClientAuth), ServerName: t.ServerName, AllowedNames: t.AllowedNames})
		var fe *actors.TLSFileError
		switch {
		case errors.As(err, &fe):
			key := tlsKeys[fe.Field]
			o := f.Origin(key)
			if o == (Origin{}) {
				o, _ = f.blame("tls.cert_file", "tls.key_file", "tls.ca_file", "tls.client_ca_file", "tls.client_auth", "tls.server_name", "tls.allowed_names")
			}
			if fe.Path != "" {
				return nil, errAt(o, key, "(%s) %v", fe.Path, fe.Err)
			}
			return nil, errAt(o, key, "%v", fe.Err)
		case err != nil:
			return nil, err
		}
		sc.ServerTLS, sc.ClientTLS = server, client
	}
	if f.Auth.SecretFile != "" {
		var err error
		if sc.Secret, err = f.remotingSecret(); err != nil {
			return nil, err
		}
	}
	if sc.ServerTLS == nil && sc.Secret == nil {
		return nil, nil
	}
	return actors.NewSecurity(sc)
}

// remotingSecret reads auth.secret_file.
func (f *File) remotingSecret() ([]byte, error) {
	path, o := f.Auth.SecretFile, f.Origin("auth.secret_file")
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, errAt(o, "auth.secret_file", "(%s) cannot be read: %v", path, err)
	}
	s, err := actors.ParseSecret(b)
	if err != nil {
		return nil, errAt(o, "auth.secret_file", "(%s) %v", path, err)
	}
	return s, nil
}

// Counters returns the token counters the file configures, as
// actors.Config holds them: the server's (Counter, CounterName), the rules
// per scope prefix, and CounterByName (tokenizer.New), which knows every
// counter of tokenizer.Names, so that a scope counted under a counter the
// file no longer names is still read right while it is recounted.
func (f *File) Counters(c *actors.Config) error {
	def, err := tokenizer.New(f.Tokens.Counter)
	if err != nil {
		return fmt.Errorf("tokens.counter: %w", err)
	}
	c.Counter, c.CounterName = def, def.Name()
	c.Counters = nil
	for i, s := range f.Tokens.Scopes {
		ct, err := tokenizer.New(s.Counter)
		if err != nil {
			return fmt.Errorf("tokens.scopes[%d].counter: %w", i, err)
		}
		c.Counters = append(c.Counters, actors.CounterRule{Prefix: s.Prefix, Name: ct.Name(), Counter: ct})
	}
	c.CounterByName = func(name string) (compaction.Counter, bool) {
		ct, err := tokenizer.New(name)
		return ct, err == nil
	}
	return nil
}

// StoreOptions returns the eventstore options the file sets (the journal).
func (f *File) StoreOptions() eventstore.Options {
	return eventstore.Options{
		JournalOff:          !f.Journal.Enabled,
		JournalSegmentBytes: f.Journal.SegmentMiB << 20,
		JournalSegments:     f.Journal.Segments,
		ApplyInterval:       f.Journal.ApplyInterval,
		ApplyBytes:          f.Journal.ApplyMiB << 20,
	}
}

// HistoryPolicies returns the resolved retention and expiry policies, for
// the code that applies them (Retention.For and Expiry.For give a scope's).
func (f *File) HistoryPolicies() (Retention, Expiry) { return f.Retention, f.Expiry }

// HistoryPoliciesEnabled reports whether the configuration asks for
// anything to be removed: retention that archives or deletes, for the
// server or any prefix, or an inactivity expiry.
func (f *File) HistoryPoliciesEnabled() bool { return f.Retention.Enabled() || f.Expiry.Enabled() }

// RedactStore returns a store setting fit to print: a URL's password
// replaced by "xxxxx" (env:NAME and "" as they are).
func RedactStore(store string) string {
	u, err := url.Parse(store)
	if err != nil || u.User == nil {
		if err != nil && store != "" && !strings.HasPrefix(store, "env:") {
			return "(a URL that does not parse)"
		}
		return store
	}
	return u.Redacted()
}

// StoreURL resolves the store setting: "" for the data directory's
// file, else the PostgreSQL URL — read from the environment variable an
// env:NAME setting names (an unset or empty variable is an error naming
// it).
func (f *File) StoreURL() (string, error) {
	name, ok := strings.CutPrefix(f.Store, "env:")
	if !ok {
		return f.Store, nil
	}
	v := os.Getenv(name)
	if v == "" {
		return "", errAt(f.Origin("store"), "store", "names environment variable %s, which is not set (or empty)", name)
	}
	if !strings.HasPrefix(v, "postgres://") && !strings.HasPrefix(v, "postgresql://") {
		return "", errAt(f.Origin("store"), "store", "environment variable %s must hold a postgres:// or postgresql:// URL", name)
	}
	return v, nil
}
