package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
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
	"github.com/stateindex/stateindex/actors/wire"
)

func init() {
	register(command{name: "serve", summary: "--data DIR [--journal on|off] [--listen HOST:PORT [--cluster NAME --peers HOST:PORT,...]]   run the StateIndex", run: serve})
}

func serve(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	d := actors.DefaultConfig()
	dir := fs.String("data", "./data", "data directory (holds stateindex.db and server.key)")
	shards := fs.Int("shards", d.Shards, "shard actors (a scope always lands on the same one); in a cluster the same on every member")
	snapEvery := fs.Int64("snapshot-every", d.SnapshotEvery, "events between a scope's snapshots")
	cacheScopes := fs.Int("cache-scopes", d.CacheScopes, "hot scopes kept in memory")
	cacheMiB := fs.Int64("cache-mib", d.CacheBytes>>20, "approximate memory bound of hot scopes, MiB")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	listen := fs.String("listen", "", "serve remote actors over Proto.Actor remoting at HOST:PORT (the address they reach it at)")
	clusterName := fs.String("cluster", "", "join the Proto.Actor cluster NAME as a storage member (needs --listen and --peers)")
	peers := fs.String("peers", "", "the cluster's storage members, HOST:PORT,... (their --listen addresses; this member is added); the same list on every member and client")
	health := fs.Duration("health-interval", time.Second, "cluster: how often members poll each other's health endpoint (each member's --listen port + 1)")
	maxMsg := fs.Int("max-message-bytes", wire.DefaultMaxBytes, "largest encoded remote request or reply")
	journal := fs.String("journal", "on", "on: an append is durable once in the write-ahead journal (one fdatasync per group commit), applied to bbolt in the background; off: every group commit is a bbolt transaction")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	var members []string
	switch {
	case *clusterName != "" && (*listen == "" || *peers == ""):
		return errors.New("--cluster needs --listen and --peers")
	case *clusterName == "" && *peers != "":
		return errors.New("--peers needs --cluster")
	case *clusterName != "":
		members = parsePeers(*peers, *listen)
	}
	if *maxMsg <= 0 {
		return errors.New("--max-message-bytes must be positive")
	}
	if *journal != "on" && *journal != "off" {
		return fmt.Errorf("--journal must be on or off, got %q", *journal)
	}

	// Listen for signals before announcing readiness, so a signal right
	// after the log line is never missed.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	store, err := openStore(*dir, true, 2*time.Second, *journal == "off")
	if err != nil {
		return err
	}
	defer store.Close()
	jattrs := []any{"journal", "off"}
	if js := store.JournalStats(); js.Enabled {
		jdir, _ := filepath.Abs(js.Dir)
		jattrs = []any{"journal", jdir, "journal_max_bytes", js.MaxBytes}
	}
	if r := store.Replay(); r.Records > 0 {
		log.Info("journal replayed into bbolt", "records", r.Records, "from_seq", r.FromSeq, "to_seq", r.ToSeq)
	}
	key, err := loadKey(*dir)
	if err != nil {
		return fmt.Errorf("server key: %w", err)
	}
	if *clusterName == "" {
		// A cluster member's file serves only the scopes homed there; a
		// standalone server would accept others and fork them.
		id, ok, err := store.Identity(ctx)
		if err != nil {
			return err
		}
		if ok {
			return fmt.Errorf("%s belongs to %s: start it with --cluster %s --listen %s --peers %s",
				filepath.Join(*dir, dbFile), id, id.Cluster, id.Member, strings.Join(id.Members, ","))
		}
	}

	signing, err := loadSigningKey(*dir)
	if err != nil {
		return fmt.Errorf("checkpoint signing key: %w", err)
	}

	cfg := d
	cfg.TokenKey, cfg.Shards, cfg.SnapshotEvery, cfg.CacheScopes, cfg.CacheBytes = key, *shards, *snapEvery, *cacheScopes, *cacheMiB<<20
	cfg.SigningKey = signing
	cfg.Logger = log
	libLevel := level
	if libLevel > slog.LevelDebug {
		libLevel = max(level, slog.LevelWarn) // Proto.Actor narrates every connection and topology change at info
	}
	libLog := slog.New(demote{slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: libLevel})}).With("lib", "protoactor")
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return libLog }))
	abs, _ := filepath.Abs(filepath.Join(*dir, dbFile))
	admin, err := startAdmin(*dir, store, log)
	if err != nil {
		return err
	}
	defer admin.stop()
	sock, _ := filepath.Abs(admin.path)
	jattrs = append(jattrs, "admin", sock)

	var shutdown func()
	switch {
	case *clusterName != "":
		cc := actors.ClusterConfig{Name: *clusterName, Members: members, Shards: *shards, HealthInterval: *health,
			MaxMessageBytes: *maxMsg, Logger: log}
		node, err := actors.StartMember(sys, store, cfg, cc, *listen)
		if err != nil {
			return err
		}
		healthAddr, _ := actors.HealthAddress(*listen)
		log.Info("stateindex serving", append([]any{"data", abs, "cluster", *clusterName, "member", *listen, "kind", actors.KindOf(*listen),
			"members", strings.Join(members, ","), "health", healthAddr, "shards", *shards}, jattrs...)...)
		shutdown = node.Stop
	case *listen != "":
		host, port, err := splitHostPort(*listen)
		if err != nil {
			return err
		}
		r, err := actors.StartRemote(sys, actors.RemoteConfigWithLimit(host, port, *maxMsg))
		if err != nil {
			return err
		}
		srv, err := actors.Start(sys, store, cfg)
		if err != nil {
			r.Shutdown(false)
			return err
		}
		gw, err := srv.Expose(&actors.ExposeOptions{MaxMessageBytes: *maxMsg})
		if err != nil {
			srv.Stop()
			r.Shutdown(false)
			return err
		}
		log.Info("stateindex serving", append([]any{"data", abs, "listen", sys.Address(), "pid", gw.Address + "/" + gw.Id, "shards", cfg.Shards}, jattrs...)...)
		shutdown = func() { stopRemote(sys, r, gw, srv) }
	default:
		srv, err := actors.Start(sys, store, cfg)
		if err != nil {
			return err
		}
		log.Info("stateindex serving", append([]any{"data", abs, "pid", srv.PID().Address + "/" + srv.PID().Id, "shards", cfg.Shards,
			"note", "in-process only: --listen serves remote actors; stop with Ctrl-C"}, jattrs...)...)
		shutdown = func() { srv.Stop(); sys.Shutdown() }
	}

	<-ctx.Done()
	log.Info("stateindex stopping: finishing queued requests")
	admin.stop()
	shutdown()
	if err := store.Close(); err != nil {
		return fmt.Errorf("closing store: %w", err)
	}
	log.Info("stateindex stopped cleanly")
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
