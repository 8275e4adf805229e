package actors

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
)

// Config configures a StateIndex. Start from DefaultConfig; a zero field of
// a Config passed to Start takes its default.
type Config struct {
	// Frames bounds what requests may carry (DESIGN §6 limits).
	Frames frames.Config
	// Shards is how many actors share the scopes (a scope always lands on
	// the same shard). Appends from all shards share the store's commits.
	Shards int
	// CacheScopes and CacheBytes bound the hot scope states kept in memory
	// (split evenly across shards); a cold scope is rebuilt from its latest
	// snapshot plus the events after it.
	CacheScopes int
	CacheBytes  int64
	// MaxPending bounds each shard's pending work: requests in its mailbox
	// plus requests held behind a scope's write or load plus scopes with
	// one in flight. Past it a request is answered ErrOverloaded at once
	// (not applied; safe to retry) instead of queueing without limit.
	MaxPending int
	// MaxWaiters bounds each shard's parked AwaitFrame requests (default
	// 100,000; each costs a few hundred bytes and no goroutine). They are
	// not counted in MaxPending: a parked wait holds no scope. Past it an
	// await is answered ErrOverloaded. It bounds the ListFrames requests
	// the registry holds for a MinPosition the same way.
	MaxWaiters int
	// SnapshotEvery is how many events of a scope pass between snapshots.
	SnapshotEvery int64
	// RequestHorizon is how long a scope remembers a committed request id:
	// a resend within it is answered with the original reply, however many
	// requests came in between, also after a restart. ClockSkew is how far
	// a client's clock may run ahead of the server's: ids are remembered for
	// RequestHorizon + 2·ClockSkew after their commit, and an id whose
	// first-send time (UUIDv7, as the Client mints them) is older than
	// RequestHorizon + ClockSkew is refused with request_expired, never
	// applied again.
	RequestHorizon time.Duration
	ClockSkew      time.Duration
	// Counter counts tokens; packs never exceed their budget under it.
	// It is the counter of the scopes no rule of Counters matches.
	Counter compaction.Counter
	// CounterName names the counter in packs' metadata and in the scopes'
	// state (frames.State.Counter).
	CounterName string
	// Counters select a counter per scope prefix: the longest matching
	// Prefix wins, else Counter. A rule needs a name and a counter. A
	// scope whose handles were counted under another counter is recounted
	// in the background (see counters.go).
	Counters []CounterRule
	// CounterByName finds a counter by its name: the counter a scope's
	// handles were counted under, when it is none of the configured ones
	// (cmd/stateindex wires tokenizer.New). nil knows only the configured
	// counters and the estimate.
	CounterByName func(name string) (compaction.Counter, bool)
	// Summarizer writes the summaries of compaction.
	Summarizer compaction.Summarizer
	// Custom holds the compaction strategies that requests can name with
	// Strategy{Kind: "custom", Custom: name}.
	Custom map[string]compaction.Custom
	// TokenKey signs suspension tokens (HMAC-SHA256, at least 32 bytes).
	// Keep it stable across restarts: tokens signed with another key are
	// refused.
	TokenKey []byte
	// LedgerKey signs spend reservation tokens (HMAC-SHA256, at least 32
	// bytes; the TokenKey when empty). The work a reservation pays for may
	// live on another cluster member: every member must share this key.
	LedgerKey []byte
	// Lease is a spend reservation's lease when the request names none
	// (0: frames.DefaultLease, 10 minutes; at most 7 days). The policy for
	// reservations without an estimate is Frames.Unestimated.
	Lease time.Duration
	// TokenTTL is a suspension token's default lifetime; MaxTokenTTL caps
	// what a request may ask for.
	TokenTTL    time.Duration
	MaxTokenTTL time.Duration
	// SigningKey, if set, signs checkpoints (Ed25519): each scope's chain
	// hash is signed when a snapshot is saved and when a run finishes, in a
	// store that keeps checkpoints (eventstore.Checkpointer). stateindex
	// verify checks them with the public key. nil signs nothing.
	SigningKey ed25519.PrivateKey
	// Clock and NewID are the shell's sources of time and ids; tests
	// replace them. NewID must return unique printable ids of ≤ 64 bytes.
	Clock func() time.Time
	NewID func() string
	// SubscriptionHold, when positive, makes retention wait for durable
	// subscriptions: a scope's cut that would remove records at or past
	// the acknowledged position of a subscription matching the scope is
	// put off, as long as that subscription acknowledged within the last
	// SubscriptionHold (one that has not is not waited for). 0: retention
	// does not wait for subscribers.
	SubscriptionHold time.Duration
	// RequestTimeout is the Client's deadline when its context has none.
	RequestTimeout time.Duration
	Logger         *slog.Logger
	// RegistryOff turns the registry (ListFrames and the index the server
	// keeps from the log) off. RegistryInterval is the least time between
	// two catch-ups of its index under load (each gathers the commits
	// since the last into one index write; an idle index catches up at
	// once): it bounds what the index costs a busy store, and delays a
	// read-your-writes ListFrames by up to as much. 0 is the default,
	// 25 ms; a negative value none.
	RegistryOff      bool
	RegistryInterval time.Duration
	// OutboxOff leaves the spend ledger's outbox worker stopped: nothing
	// delivers settlements across scopes (they wait in their scopes'
	// state for a server that runs it). For tools that open a file to read
	// it; a server must run it.
	OutboxOff bool
	// StateExpiryCheck is the longest the state expirer sleeps between two
	// looks at its schedule (state_expiry.go): it sleeps until the earliest
	// expiry of a scope's keys, but never longer, which bounds how late an
	// expired key leaves disk when the clock jumps ahead. 0 is the
	// default, 1 s; a negative value runs no background expiry (tools that
	// open a file to read it; Server.RunStateExpiry still runs a pass, and
	// expired keys stay invisible to reads either way).
	StateExpiryCheck time.Duration
	// Owner turns fencing on (DESIGN §13) for a store that several servers
	// share (an eventstore.Fencer: PostgreSQL): it names this server as
	// the owner of the scopes it activates — its member address plus a
	// per-process nonce (OwnerName), so that a restarted member is a new
	// owner. Each time the server loads a scope into its cache, for any
	// request, it takes the scope's next epoch, and every append of the
	// scope carries that fence: once another server has taken the scope,
	// this one's writes are refused by the store, it drops the scope and
	// answers scope_moved (ErrScopeMoved), which the Client retries. Start
	// refuses an Owner with a store that is not a Fencer. Empty: no
	// fencing (a store of one server: bbolt).
	Owner string

	// MeterProvider, if set, receives the StateIndex's metrics (metrics.go
	// lists them; otel.GetMeterProvider() for the global one). nil records
	// none, at no cost.
	MeterProvider metric.MeterProvider
	// TracerProvider, if set, traces every request: a span per request,
	// child of the caller's span (from the Client's context, also across
	// the wire), with its store append as a child span (tracing.go). nil
	// traces nothing.
	TracerProvider trace.TracerProvider

	// obs is the server's telemetry (metrics.go), set by Start; nil when
	// neither provider is set and the logger does not log requests.
	obs *observer
}

// DefaultConfig returns the defaults. TokenKey is left empty: Start refuses
// to run without one (cmd/stateindex keeps one in the data directory).
func DefaultConfig() Config {
	return Config{
		Frames:         frames.DefaultConfig(),
		Shards:         16,
		CacheScopes:    4096,
		CacheBytes:     256 << 20,
		MaxPending:     10_000,
		MaxWaiters:     100_000,
		SnapshotEvery:  1000,
		RequestHorizon: time.Duration(frames.DefaultRequestHorizon),
		ClockSkew:      time.Duration(frames.DefaultClockSkew),
		Counter:        compaction.EstimateCounter{},
		CounterName:    "estimate_bytes_div_4",
		Summarizer:     compaction.Extractive{},
		TokenTTL:       7 * 24 * time.Hour,
		MaxTokenTTL:    90 * 24 * time.Hour,
		Clock:          time.Now,
		NewID:          NewID,
		RequestTimeout: 30 * time.Second,
		Logger:         slog.Default(),
	}
}

// withDefaults fills zero fields from DefaultConfig and validates.
func (c Config) withDefaults() (Config, error) {
	d := DefaultConfig()
	if c.Frames == (frames.Config{}) {
		c.Frames = d.Frames
	}
	if err := c.Frames.Validate(); err != nil {
		return c, err
	}
	if c.Shards <= 0 {
		c.Shards = d.Shards
	}
	if c.CacheScopes <= 0 {
		c.CacheScopes = d.CacheScopes
	}
	if c.CacheBytes <= 0 {
		c.CacheBytes = d.CacheBytes
	}
	if c.MaxPending <= 0 {
		c.MaxPending = d.MaxPending
	}
	if c.MaxWaiters <= 0 {
		c.MaxWaiters = d.MaxWaiters
	}
	if c.SnapshotEvery <= 0 {
		c.SnapshotEvery = d.SnapshotEvery
	}
	if c.RequestHorizon <= 0 {
		c.RequestHorizon = d.RequestHorizon
	}
	if c.ClockSkew <= 0 {
		c.ClockSkew = d.ClockSkew
	}
	if c.Counter == nil {
		c.Counter, c.CounterName = d.Counter, d.CounterName
	}
	if c.CounterName == "" {
		c.CounterName = fmt.Sprintf("%T", c.Counter)
	}
	if err := c.checkCounters(); err != nil {
		return c, err
	}
	if c.Summarizer == nil {
		c.Summarizer = d.Summarizer
	}
	if len(c.TokenKey) < 32 {
		return c, fmt.Errorf("actors: TokenKey must be at least 32 bytes (got %d)", len(c.TokenKey))
	}
	if len(c.LedgerKey) == 0 {
		c.LedgerKey = c.TokenKey
	}
	if len(c.LedgerKey) < 32 {
		return c, fmt.Errorf("actors: LedgerKey must be at least 32 bytes (got %d)", len(c.LedgerKey))
	}
	if c.Lease < 0 || c.Lease > time.Duration(frames.MaxReservationAge) {
		return c, fmt.Errorf("actors: Lease %s must be between 0 (the default, 10m) and 7 days", c.Lease)
	}
	if len(c.SigningKey) != 0 && len(c.SigningKey) != ed25519.PrivateKeySize {
		return c, fmt.Errorf("actors: SigningKey must be an Ed25519 private key of %d bytes (got %d)", ed25519.PrivateKeySize, len(c.SigningKey))
	}
	if c.TokenTTL <= 0 {
		c.TokenTTL = d.TokenTTL
	}
	if c.MaxTokenTTL <= 0 {
		c.MaxTokenTTL = d.MaxTokenTTL
	}
	if c.Clock == nil {
		c.Clock = d.Clock
	}
	if c.NewID == nil {
		c.NewID = d.NewID
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = d.RequestTimeout
	}
	switch {
	case c.RegistryInterval == 0:
		c.RegistryInterval = 25 * time.Millisecond
	case c.RegistryInterval < 0:
		c.RegistryInterval = 0
	}
	if c.StateExpiryCheck == 0 {
		c.StateExpiryCheck = defaultStateExpiryCheck
	}
	if c.Logger == nil {
		c.Logger = d.Logger
	}
	if c.Owner != "" {
		if err := eventstore.CheckOwner(c.Owner); err != nil {
			return c, fmt.Errorf("actors: Owner: %w", err)
		}
	}
	return c, nil
}

// OwnerName returns an owner name for Config.Owner: member (the server's
// address as the cluster knows it) and a random nonce minted now, so
// that each process is an owner of its own — a member that restarts
// deposes its previous self rather than writing on under its fences.
func OwnerName(member string) string { return member + "#" + NewID()[:16] }

// NewID returns a random 128-bit id as 32 hex characters. The bits come
// from ChaCha8 generators seeded from crypto/rand (a syscall per id showed
// in profiles); ids are unique and unpredictable, and carry no authority of
// their own (tokens are HMAC-signed).
func NewID() string {
	g := idGen.Get().(*mrand.ChaCha8)
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], g.Uint64())
	binary.LittleEndian.PutUint64(b[8:], g.Uint64())
	idGen.Put(g)
	return hex.EncodeToString(b[:])
}

// NewRequestID returns a fresh request id: a UUIDv7 (RFC 9562), whose first
// 48 bits are the current Unix time in milliseconds and the rest random.
// The Client mints one for every mutating request that has none; the time
// in it is the request's first-send time, by which the server refuses a
// resend older than its idempotency horizon (Config.RequestHorizon) instead
// of applying it twice. Keep the id for every resend of the same request.
func NewRequestID() string { return requestIDAt(time.Now()) }

func requestIDAt(t time.Time) string {
	g := idGen.Get().(*mrand.ChaCha8)
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], g.Uint64())
	binary.LittleEndian.PutUint64(b[8:], g.Uint64())
	idGen.Put(g)
	ms := uint64(t.UnixMilli())
	b[0], b[1], b[2], b[3], b[4], b[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
	b[6] = 0x70 | b[6]&0x0F
	b[8] = 0x80 | b[8]&0x3F
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:], b[10:])
	return string(out[:])
}

var idGen = sync.Pool{New: func() any {
	var seed [32]byte
	if _, err := rand.Read(seed[:]); err != nil {
		panic(fmt.Sprintf("actors: crypto/rand failed: %v", err)) // the platform is broken
	}
	return mrand.NewChaCha8(seed)
}}
