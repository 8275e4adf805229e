package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stateindex/stateindex/actors"
)

func init() {
	register(command{name: "serve", summary: "--data DIR   run the StateIndex on DIR/stateindex.db", run: serve})
}

func serve(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	d := actors.DefaultConfig()
	dir := fs.String("data", "./data", "data directory (holds stateindex.db and server.key)")
	shards := fs.Int("shards", d.Shards, "shard actors (a scope always lands on the same one)")
	snapEvery := fs.Int64("snapshot-every", d.SnapshotEvery, "events between a scope's snapshots")
	cacheScopes := fs.Int("cache-scopes", d.CacheScopes, "hot scopes kept in memory")
	cacheMiB := fs.Int64("cache-mib", d.CacheBytes>>20, "approximate memory bound of hot scopes, MiB")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	// Listen for signals before announcing readiness, so a signal right
	// after the log line is never missed.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	store, err := openStore(*dir, true, 2*time.Second)
	if err != nil {
		return err
	}
	defer store.Close()
	key, err := loadKey(*dir)
	if err != nil {
		return fmt.Errorf("server key: %w", err)
	}

	cfg := d
	cfg.TokenKey, cfg.Shards, cfg.SnapshotEvery, cfg.CacheScopes, cfg.CacheBytes = key, *shards, *snapEvery, *cacheScopes, *cacheMiB<<20
	cfg.Logger = log
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return log.With("lib", "protoactor") }))
	srv, err := actors.Start(sys, store, cfg)
	if err != nil {
		return err
	}
	abs, _ := filepath.Abs(filepath.Join(*dir, dbFile))
	log.Info("stateindex serving", "data", abs, "pid", srv.PID().Address+"/"+srv.PID().Id, "shards", cfg.Shards,
		"note", "in-process only until remoting is configured; stop with Ctrl-C")

	<-ctx.Done()
	log.Info("stateindex stopping: finishing queued requests")
	srv.Stop()
	sys.Shutdown()
	if err := store.Close(); err != nil {
		return fmt.Errorf("closing store: %w", err)
	}
	log.Info("stateindex stopped cleanly")
	return nil
}
