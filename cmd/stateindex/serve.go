package main

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/internal/config"
)

func init() {
	register(command{name: "serve", summary: "[--config FILE] --data DIR [--journal on|off] [--listen HOST:PORT [--cluster NAME --peers HOST:PORT,...]] [--tls-cert F --tls-key F [--tls-ca F] [--tls-client-auth require]] [--secret-file F] [--metrics HOST:PORT] [--trace-otlp URL]   run the StateIndex", run: serve})
}

// retentionConfig turns the file's retention and expiry into the server's
// background pass (ok false when no scope's policy removes anything and no
// scope expires).
func retentionConfig(file *config.File) (actors.RetentionConfig, bool) {
	r, x := file.Retention, file.Expiry
	if !r.Enabled() && !x.Enabled() {
		return actors.RetentionConfig{}, false
	}
	rc := actors.RetentionConfig{Interval: r.Interval}
	if r.Enabled() {
		dataDir := file.DataDir
		rc.Policy = func(scope string) (frames.RetentionPolicy, string, bool) {
			p := r.For(scope)
			return frames.RetentionPolicy{KeepLastN: p.KeepLastN, OlderThan: int64(p.DeleteOlderThan), OnCompletion: frames.Completion(p.OnCompletion)},
				p.ArchivePath(dataDir), p.OnCompletion != config.Keep
		}
	}
	if x.Enabled() {
		rc.Expiry = func(scope string) time.Duration { return x.For(scope).InactiveAfter }
	}
	return rc, true
}

// serveConfig turns a resolved configuration into the StateIndex's
// actors.Config (keys and logger are added by serve) and store options;
// the token counters come from package tokenizer (config.File.Counters).
func serveConfig(file *config.File) (actors.Config, eventstore.Options, error) {
	opts := file.StoreOptions()
	opts.OpenTimeout = 2 * time.Second
	cfg := file.ActorsConfig(actors.DefaultConfig()) // ledger.unestimated, ledger.cap, ledger.lease and state.* included
	if err := file.Counters(&cfg); err != nil {
		return cfg, opts, err
	}
	key, err := file.LedgerKey() // nil: actors.Config signs reservation tokens with the server key
	if err != nil {
		return cfg, opts, err
	}
	cfg.LedgerKey = key
	return cfg, opts, nil
}

func serve(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve")
	fs.SetOutput(stderr)
	flags := config.RegisterFlags(fs)
	if err := parseArgs(fs, args, stdout, stderr); err != nil {
		return err
	}
	file, err := flags.Resolve()
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(file.LogLevel)); err != nil { // config checked it; kept for safety
		return fmt.Errorf("log_level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	dir, listen, clusterName := file.DataDir, file.Remoting.Listen, file.Cluster.Name
	var members []string
	if clusterName != "" {
		members = parsePeers(strings.Join(file.Cluster.Peers, ","), listen)
	}
	cfg, storeOpts, err := serveConfig(file)
	if err != nil {
		return err
	}
	sec, err := file.Security(log)
	if err != nil {
		return err
	}
	tel, err := startTelemetry(file, log) // metrics.go
	if err != nil {
		return err
	}
	defer tel.close(context.Background())
	tel.configure(&cfg, &storeOpts)

	// Listen for signals before announcing readiness, so a signal right
	// after the log line is never missed.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	storeURL, err := file.StoreURL()
	if err != nil {
		return err
	}
	if storeURL != "" && clusterName != "" && len(file.Hooks) > 0 {
		return errors.New("hooks: not served by the members of a shared-store cluster yet (each member would deliver every notification of the shared log); remove the hooks section, or run them on a standalone server")
	}
	// where says what the store is, for the log: the data file, or the
	// database (host:port/name, no credentials).
	var (
		store  eventstore.Store
		bolt   *eventstore.BoltStore
		shared sharedStore
		where  []any
		jattrs []any
	)
	if storeURL == "" {
		if bolt, err = openStoreWith(dir, true, storeOpts); err != nil {
			return err
		}
		store = bolt
		abs, _ := filepath.Abs(filepath.Join(dir, dbFile))
		where = []any{"data", abs}
		jattrs = []any{"journal", "off"}
		if js := bolt.JournalStats(); js.Enabled {
			jdir, _ := filepath.Abs(js.Dir)
			jattrs = []any{"journal", jdir, "journal_max_bytes", js.MaxBytes}
		}
		if r := bolt.Replay(); r.Records > 0 {
			log.Info("journal replayed into bbolt", "records", r.Records, "from_seq", r.FromSeq, "to_seq", r.ToSeq)
		}
	} else {
		var db string
		if shared, db, err = openSharedStore(ctx, storeURL, log); err != nil {
			return err
		}
		store = shared
		where = []any{"store", "postgres " + db}
	}
	defer store.Close()
	if clusterName == "" && bolt != nil {
		// A cluster member's file serves only the scopes homed there; a
		// standalone server would accept others and fork them.
		id, ok, err := bolt.Identity(ctx)
		if err != nil {
			return err
		}
		if ok {
			return fmt.Errorf("%s belongs to %s: start it with --cluster %s --listen %s --peers %s",
				filepath.Join(dir, dbFile), id, id.Cluster, id.Member, strings.Join(id.Members, ","))
		}
	}
	var kk eventstore.KeyKeeper
	if shared != nil {
		kk = shared
	}
	key, signing, keysFrom, err := serverKeys(ctx, file, dir, kk)
	if err != nil {
		return err
	}
	if shared != nil {
		where = append(where, "keys", keysFrom, "checkpoint_public_key", hex.EncodeToString(signing.Public().(ed25519.PublicKey)))
	}

	cfg.TokenKey = key
	cfg.SigningKey = signing
	cfg.Logger = log
	libLevel := level
	if libLevel > slog.LevelDebug {
		libLevel = max(level, slog.LevelWarn) // Proto.Actor narrates every connection and topology change at info
	}
	libLog := slog.New(demote{slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: libLevel})}).With("lib", "protoactor")
	sys := actor.NewActorSystem(append([]actor.ConfigOption{actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return libLog })}, tel.actorOptions()...)...)
	stopAdmin := func() {}
	var admin *adminServer
	if bolt != nil { // backup copies the data file: PostgreSQL has its own tools (pg_dump, base backups)
		admin, err = startAdmin(dir, bolt, log)
		if err != nil {
			return err
		}
		defer admin.stop()
		stopAdmin = admin.stop
		sock, _ := filepath.Abs(admin.path)
		jattrs = append(jattrs, "admin", sock)
	}
	jattrs = append(where, jattrs...)

	if shared != nil {
		if clusterName == "" {
			// Fencing on for a standalone server too: should a second server
			// ever be started on the same database, the two take scopes from
			// each other instead of failing on each other's versions.
			name := listen
			if name == "" {
				name, _ = os.Hostname()
			}
			cfg.Owner = actors.OwnerName("standalone " + name)
		}
	}
	var shutdown func()
	var client *actors.Client // what the inspector reads through
	switch {
	case clusterName != "":
		if len(cfg.LedgerKey) == 0 && shared == nil && file.Keys.ServerKeyFile == "" {
			log.Warn("stateindex ledger: no ledger.key_file: this member signs reservation tokens with its own server key, so a reservation for a scope homed on another member is refused (reservation_invalid); give every member the same ledger.key_file")
		}
		warnSecurity(log, sec, listen)
		cc := actors.ClusterConfig{Name: clusterName, Members: members, Shards: cfg.Shards, HealthInterval: file.Cluster.HealthInterval,
			MaxMessageBytes: file.Remoting.MaxMessageBytes, Logger: log, SharedStore: shared != nil, Security: sec}
		node, err := actors.StartMember(sys, store, cfg, cc, listen)
		if err != nil {
			return err
		}
		if err := startRetention(node.Server(), file, log); err != nil {
			node.Stop()
			return err
		}
		if err := startHooks(node.Server(), file, log, actors.HookOptions{Cluster: node.Cluster(), Member: listen}); err != nil {
			node.Stop()
			return err
		}
		placement := []any{"kind", actors.KindOf(listen)}
		if shared != nil {
			placement = []any{"kind", actors.SharedKind, "placement", "live members (shared store)"}
		}
		log.Info("stateindex serving", append(append([]any{"cluster", clusterName, "member", listen}, placement...),
			append([]any{"members", strings.Join(members, ","), "health", node.HealthAddr(), "shards", cfg.Shards, "security", sec.String()}, jattrs...)...)...)
		shutdown, client = node.Stop, node.Client()
	case listen != "":
		host, port, err := splitHostPort(listen)
		if err != nil {
			return err
		}
		warnSecurity(log, sec, listen)
		r, err := actors.StartRemote(sys, actors.RemoteConfigWithLimit(host, port, file.Remoting.MaxMessageBytes, actors.WithSecurity(sec)))
		if err != nil {
			return err
		}
		srv, err := actors.Start(sys, store, cfg)
		if err != nil {
			r.Shutdown(false)
			return err
		}
		if err := startRetention(srv, file, log); err != nil {
			srv.Stop()
			r.Shutdown(false)
			return err
		}
		if err := startHooks(srv, file, log, actors.HookOptions{}); err != nil {
			srv.Stop()
			r.Shutdown(false)
			return err
		}
		gw, err := srv.Expose(&actors.ExposeOptions{MaxMessageBytes: file.Remoting.MaxMessageBytes})
		if err != nil {
			srv.Stop()
			r.Shutdown(false)
			return err
		}
		log.Info("stateindex serving", append([]any{"listen", sys.Address(), "pid", gw.Address + "/" + gw.Id, "shards", cfg.Shards,
			"security", sec.String()}, jattrs...)...)
		shutdown, client = func() { stopRemote(sys, r, gw, srv) }, srv.Client()
	default:
		srv, err := actors.Start(sys, store, cfg)
		if err != nil {
			return err
		}
		if err := startRetention(srv, file, log); err != nil {
			srv.Stop()
			return err
		}
		if err := startHooks(srv, file, log, actors.HookOptions{}); err != nil {
			srv.Stop()
			return err
		}
		log.Info("stateindex serving", append([]any{"pid", srv.PID().Address + "/" + srv.PID().Id, "shards", cfg.Shards,
			"note", "in-process only: --listen serves remote actors; stop with Ctrl-C"}, jattrs...)...)
		shutdown, client = func() { srv.Stop(); sys.Shutdown() }, srv.Client()
	}
	inspectorURL, stopInspector, err := startInspector(file, client, sec, log)
	if err != nil {
		shutdown()
		return err
	}
	if admin != nil {
		admin.setInfo(listen, inspectorURL)
	}
	printConnect(stdout, file, inspectorURL)

	tel.serving()
	<-ctx.Done()
	tel.stopping()
	log.Info("stateindex stopping: finishing queued requests")
	stopInspector()
	stopAdmin()
	shutdown()
	if err := store.Close(); err != nil {
		return fmt.Errorf("closing store: %w", err)
	}
	log.Info("stateindex stopped cleanly")
	return nil
}

// warnSecurity warns of a remoting address that admits more than it
// should: plaintext and unauthenticated on an address other than
// loopback, or a secret that travels in clear.
func warnSecurity(log *slog.Logger, sec *actors.Security, listen string) {
	host, _, _ := net.SplitHostPort(listen)
	ip := net.ParseIP(host)
	loopback := host == "localhost" || (ip != nil && ip.IsLoopback())
	switch {
	case !sec.TLS() && !sec.HasSecret() && !loopback:
		log.Warn("stateindex: remoting is plaintext and admits anyone: whoever reaches "+listen+" can read and write every scope; configure tls and auth.secret_file", "listen", listen)
	case !sec.TLS() && sec.HasSecret() && !loopback:
		log.Warn("stateindex: the shared secret travels in clear without tls: anyone who can watch the network can read it", "listen", listen)
	}
}

// startRetention starts the retention pass the file configures, if any.
func startRetention(srv *actors.Server, file *config.File, log *slog.Logger) error {
	rc, ok := retentionConfig(file)
	if !ok {
		return nil
	}
	if err := srv.StartRetention(rc); err != nil {
		return err
	}
	log.Info("stateindex retention", "every", rc.Interval, "default", fmt.Sprintf("keep_last_n=%d delete_older_than=%s on_completion=%s",
		file.Retention.Default.KeepLastN, file.Retention.Default.DeleteOlderThan, file.Retention.Default.OnCompletion), "overrides", len(file.Retention.Overrides),
		"expiry", fmt.Sprintf("inactive_after=%s", file.Expiry.Default.InactiveAfter), "expiry_overrides", len(file.Expiry.Overrides))
	return nil
}

// startHooks starts the hooks the file configures, if any (Server.Stop
// stops them).
func startHooks(srv *actors.Server, file *config.File, log *slog.Logger, o actors.HookOptions) error {
	if len(file.Hooks) == 0 {
		return nil
	}
	o.Logger = log
	if _, err := srv.StartHooks(file.ActorHooks(), o); err != nil {
		return fmt.Errorf("hooks: %w", err)
	}
	for _, h := range file.Hooks {
		target := h.Actor
		if h.Kind != "" {
			target = "kind " + h.Kind
		}
		log.Info("stateindex hook", "name", h.Name, "on", strings.Join(h.On, ","), "scope_prefix", h.ScopePrefix, "goal_prefix", h.GoalPrefix, "to", target)
	}
	return nil
}

// stopRemote stops taking remote requests (those arriving later are refused
// as not delivered), answers the queued ones, then closes the connections.
func stopRemote(sys *actor.ActorSystem, r *remote.Remote, gw *actor.PID, srv *actors.Server) {
	_ = sys.Root.PoisonFuture(gw).Wait()
	srv.Stop()
	sys.Shutdown()
	r.Shutdown(false)
}

// parsePeers splits a comma-separated member list and adds self.
func parsePeers(peers, self string) []string {
	out := []string{self}
	for _, p := range strings.Split(peers, ",") {
		if p = strings.TrimSpace(p); p != "" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("--listen %q: %w", addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("--listen %q: bad port", addr)
	}
	return host, port, nil
}

// demote lowers to info what Proto.Actor logs as an error but is routine in
// a cluster: a peer that left, a member whose health endpoint is down (the
// StateIndex logs its own warning when a storage member goes down).
type demote struct{ slog.Handler }

var routine = map[string]bool{
	"EndpointWriter lost connection":                 true,
	"EndpointWriter failed to connect":               true,
	"EndpointWriter failed to create receive stream": true,
	"Bad connection to the node health status":       true,
	"Failure reaching nodes":                         true,
	"Automanaged server stopping..!":                 true,
	"EndpointReader failed to read":                  true,
	"sendGossipForMember failed":                     true,
}

func (d demote) Enabled(ctx context.Context, l slog.Level) bool {
	return d.Handler.Enabled(ctx, l) || (l > slog.LevelInfo && d.Handler.Enabled(ctx, slog.LevelInfo))
}

func (d demote) Handle(ctx context.Context, r slog.Record) error {
	if routine[r.Message] && r.Level > slog.LevelInfo {
		r.Level = slog.LevelInfo
	}
	if !d.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return d.Handler.Handle(ctx, r)
}

func (d demote) WithAttrs(as []slog.Attr) slog.Handler { return demote{d.Handler.WithAttrs(as)} }

func (d demote) WithGroup(g string) slog.Handler { return demote{d.Handler.WithGroup(g)} }
