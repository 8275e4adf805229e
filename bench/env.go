package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/eventstore"
)

// benchKey signs suspension tokens in benchmarks (none are verified).
var benchKey = bytes.Repeat([]byte{0x5e}, 32)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// node is one StateIndex in its own actor system over a store it owns.
type node struct {
	store  eventstore.Store
	sys    *actor.ActorSystem
	srv    *actors.Server
	client *actors.Client
}

// config returns the configuration every scenario starts from: the
// defaults users get, with shards overridden when asked.
func config(shards int) actors.Config {
	cfg := actors.DefaultConfig()
	cfg.TokenKey, cfg.Logger = benchKey, quiet
	if shards > 0 {
		cfg.Shards = shards
	}
	return cfg
}

// start opens path (fsync'd unless noSync) and starts a StateIndex on it.
func start(path string, noSync bool, cfg actors.Config) (*node, error) {
	return startWith(path, &eventstore.Options{NoSync: noSync}, cfg)
}

// startWith opens path with opts and starts a StateIndex on it.
func startWith(path string, opts *eventstore.Options, cfg actors.Config) (*node, error) {
	store, err := eventstore.Open(path, opts)
	if err != nil {
		return nil, err
	}
	n, err := startOn(store, cfg)
	if err != nil {
		_ = store.Close()
		return nil, err
	}
	return n, nil
}

// startOn starts a StateIndex on an open store; stop closes the store.
func startOn(store eventstore.Store, cfg actors.Config) (*node, error) {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	srv, err := actors.Start(sys, store, cfg)
	if err != nil {
		sys.Shutdown()
		return nil, err
	}
	return &node{store: store, sys: sys, srv: srv, client: srv.Client()}, nil
}

// stop drains the StateIndex, shuts its actor system down and closes the
// store.
func (n *node) stop() error {
	n.srv.Stop()
	n.sys.Shutdown()
	return n.store.Close()
}

// readStore reads every stream of an open store back as the events that
// were appended, keyed by stream, and the sum of their payload bytes.
func readStore(ctx context.Context, store eventstore.Store) (map[string][]eventstore.Event, int64, error) {
	out := map[string][]eventstore.Event{}
	var payload int64
	var names []string
	err := store.Streams(ctx, func(si eventstore.StreamInfo) error {
		names = append(names, si.Stream)
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	for _, name := range names {
		err := store.ReadStream(ctx, name, 1, func(r eventstore.Record) error {
			out[name] = append(out[name], eventstore.Event{Type: r.Type, Data: r.Data})
			payload += int64(len(r.Data))
			return nil
		})
		if err != nil {
			return nil, 0, err
		}
	}
	return out, payload, nil
}

func copyFile(dst, src string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	_, err = io.Copy(out, in)
	return err
}

// scratch returns a new directory under base (the system's temporary
// directory when base is empty) for one scenario's files.
func scratch(base, name string) (string, error) {
	if base != "" {
		if err := os.MkdirAll(base, 0o700); err != nil {
			return "", err
		}
	}
	dir, err := os.MkdirTemp(base, "stateindex-bench-"+name+"-")
	if err != nil {
		return "", fmt.Errorf("bench: scratch directory: %w", err)
	}
	return dir, nil
}

func dbPath(dir, name string) string { return filepath.Join(dir, name+".db") }

// errs joins the errors of a cleanup with the error of the work.
func errs(err error, more ...error) error { return errors.Join(append([]error{err}, more...)...) }
