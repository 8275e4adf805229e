package crashtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
)

// Retention in the crash storm: the child runs retention passes back to
// back while its workers write (keep the last 2 runs of each scope, remove
// the rest as soon as the idempotency horizon lets go of them, archiving
// what goes), so that kills land in archive writes, in the recording of a
// removal and in the removal's transactions; and, when the parent asks
// (EnvRetentionKill), it SIGKILLs itself at a chosen step of a pass.

// ArchiveDir is where the child's retention writes its archives, inside
// the crash test directory.
const ArchiveDir = "archive"

// Retention settings of the child.
const (
	// RetentionHorizon and RetentionSkew are the child's idempotency
	// horizon and clock-skew allowance: short, so that runs become
	// removable a second or so after they finish (a request within the
	// horizon keeps everything after it).
	RetentionHorizon = time.Second
	RetentionSkew    = 100 * time.Millisecond
	// RetentionPause is the pause between two passes.
	RetentionPause = 10 * time.Millisecond
	// RemoveBatch bounds the records one removal transaction deletes, so
	// that removals take several transactions and kills land between them.
	RemoveBatch = 8
)

// RetentionPolicy is every scope's policy in the child: keep the last 2
// runs, remove the others once finished (D = 0), archiving them.
var RetentionPolicy = frames.RetentionPolicy{KeepLastN: 2, OlderThan: 0, OnCompletion: frames.CompletionArchive}

// The steps of a retention pass at which the child can kill itself.
const (
	// StageArchived: the archive is written and synced, the removal not
	// recorded yet (the scope's scope.retention_applied is about to be
	// appended).
	StageArchived = "archived"
	// StageApplied: the removal is recorded in the scope, the store still
	// holds every record (RemovePrefix is about to run).
	StageApplied = "applied"
	// StageRemoving: RemovePrefix committed its first transaction (the
	// stream's base) and possibly more, and records below the base are
	// still stored.
	StageRemoving = "removing"
)

// RetentionStages are the kill points inside a pass.
var RetentionStages = []string{StageArchived, StageApplied, StageRemoving}

// killLine starts the line the child prints before it kills itself at a
// retention step: "retention-kill STAGE SCOPE".
const killLine = "retention-kill"

// RetentionServerConfig is the child's server configuration when it runs
// retention: Config with the short idempotency horizon.
func RetentionServerConfig(log *slog.Logger) actors.Config {
	cfg := Config(log)
	cfg.RequestHorizon, cfg.ClockSkew = RetentionHorizon, RetentionSkew
	return cfg
}

// StartRetention configures srv's retention as the child runs it (passes
// on demand: RunRetention).
func StartRetention(srv *actors.Server, dir string) error {
	archives, err := filepath.Abs(filepath.Join(dir, ArchiveDir))
	if err != nil {
		return err
	}
	return srv.StartRetention(actors.RetentionConfig{Policy: func(string) (frames.RetentionPolicy, string, bool) {
		return RetentionPolicy, archives, true
	}})
}

// retentionPass runs one pass; an error of the pass fails the child,
// unless ctx ended (the storm is over).
func retentionPass(ctx context.Context, srv *actors.Server) error {
	rep, err := srv.RunRetention(ctx)
	if err == nil && len(rep.Errors) > 0 {
		err = errors.Join(rep.Errors...)
	}
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("retention pass: %w", err)
	}
	return nil
}

// killStore is the child's store: the BoltStore (every method of it,
// checkpoints and asynchronous appends included), watched at the steps of
// a retention pass and at the stages of the spend ledger's settlements;
// once armed, the step named stage, or the ledger stage named ledger,
// kills the process.
type killStore struct {
	*eventstore.BoltStore
	stage    string
	ledger   string
	out      io.Writer
	armed    atomic.Bool
	removing atomic.Value // the scope RemovePrefix works on
}

// kill SIGKILLs the process if armed and stage is the one to kill at,
// after telling the parent on out.
func (k *killStore) kill(stage string, scope any) {
	if k == nil || !k.armed.Load() || stage != k.stage {
		return
	}
	k.die(killLine, stage, scope)
}

// die tells the parent "line stage scope" on out and SIGKILLs the process.
func (k *killStore) die(line, stage string, scope any) {
	if k.out != nil {
		fmt.Fprintf(k.out, "%s %s %v\n", line, stage, scope)
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}

// committed kills the process if armed and a committed append of events
// to stream reached the ledger stage to kill at.
func (k *killStore) committed(stream string, events []eventstore.Event, err error) {
	if err == nil && k.ledger != "" && k.armed.Load() && ledgerStage(stream, events) == k.ledger {
		k.die(ledgerKillLine, k.ledger, stream)
	}
}

func recordsRemoval(events []eventstore.Event) bool {
	for _, e := range events {
		if e.Type == frames.TypeRetention {
			return true
		}
	}
	return false
}

func (k *killStore) Append(ctx context.Context, stream string, expected int64, events []eventstore.Event) (eventstore.AppendResult, error) {
	if recordsRemoval(events) {
		k.kill(StageArchived, stream)
	}
	res, err := k.BoltStore.Append(ctx, stream, expected, events)
	k.committed(stream, events, err)
	return res, err
}

func (k *killStore) AppendAsync(ctx context.Context, stream string, expected int64, events []eventstore.Event, done func(eventstore.AppendResult, error)) {
	if recordsRemoval(events) {
		k.kill(StageArchived, stream)
	}
	if k.ledger != "" {
		reply := done
		done = func(res eventstore.AppendResult, err error) {
			k.committed(stream, events, err) // durable: the callback runs after the commit
			reply(res, err)
		}
	}
	k.BoltStore.AppendAsync(ctx, stream, expected, events, done)
}

func (k *killStore) RemovePrefix(ctx context.Context, stream string, through int64, opts ...eventstore.RemoveOption) (eventstore.RemoveResult, error) {
	k.kill(StageApplied, stream)
	k.removing.Store(stream)
	return k.BoltStore.RemovePrefix(ctx, stream, through, opts...)
}

// RemovePrefixes is the retention pass's batched removal: the same kill
// points as RemovePrefix, for the first scope of the batch.
func (k *killStore) RemovePrefixes(ctx context.Context, cuts map[string]int64) (map[string]eventstore.RemoveResult, map[string]error, error) {
	for stream := range cuts {
		k.kill(StageApplied, stream)
		k.removing.Store(stream)
		break
	}
	return k.BoltStore.RemovePrefixes(ctx, cuts)
}
