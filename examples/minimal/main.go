// Command minimal is the README's in-process example as a complete
// program: it opens a StateIndex on a bbolt file in --data (creating the
// directory), pushes a frame, assembles its context pack, ends the frame,
// and closes everything it opened. Proto.Actor's own logs are kept to
// warnings and errors.
//
//	go run ./examples/minimal --data ./data/minimal
//
// The README shows run's lines from MkdirAll to the context pack
// (readme_test.go checks that they are this program's, verbatim).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

func main() {
	dir := flag.String("data", "./data/minimal", "data directory (created if missing)")
	flag.Parse()
	if err := run(context.Background(), *dir, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "minimal:", err)
		os.Exit(1)
	}
}

// key signs suspension tokens (at least 32 bytes). A real deployment keeps
// its key secret and stable across restarts, as `stateindex serve` does
// with DIR/server.key.
var key = []byte("example key: not a secret, 32+ bytes long")

func run(ctx context.Context, dir string, out io.Writer) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	store, err := eventstore.Open(filepath.Join(dir, "stateindex.db"), nil) // fsync'd, group-committed
	if err != nil {
		return err
	}
	defer store.Close()

	// Proto.Actor logs every start and stop in colour unless given a logger.
	logs := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return logs }))
	defer sys.Shutdown()

	cfg := actors.DefaultConfig()
	cfg.TokenKey = key // at least 32 bytes, secret and stable: it signs suspension tokens
	cfg.Logger = logs
	srv, err := actors.Start(sys, store, cfg)
	if err != nil {
		return err
	}
	defer srv.Stop() // runs before sys.Shutdown and store.Close

	si := srv.Client()
	f, err := si.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: "agent-1"}, Goal: "write the report", Budget: budget.TokenBudget{Total: 8000}})
	if err != nil {
		return err
	}
	pack, err := si.AssembleContextPack(ctx, &messages.AssembleContextPack{Header: messages.Header{Scope: "agent-1"}, FrameID: f.FrameID, BudgetTokens: 4000})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "frame %s: pack of %d tokens (budget %d)\n%s\n", f.FrameID, pack.TokenSummary.Used, pack.TokenSummary.Budget, pack.BriefContext)
	_, err = si.PopFrame(ctx, &messages.PopFrame{Header: messages.Header{Scope: "agent-1"}, FrameID: f.FrameID, Status: frames.StatusCompleted})
	return err
}
