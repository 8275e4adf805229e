package crashtest

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// Files of a crash test directory.
const (
	DataFile = "stateindex.db"
	SideFile = "requests.log"
)

// Environment of a child process.
const (
	EnvDir         = "STATEINDEX_CRASH_CHILD"
	EnvIncarnation = "STATEINDEX_CRASH_INCARNATION"
	EnvSeed        = "STATEINDEX_CRASH_SEED"
	// EnvRetentionKill names the step of a retention pass at which the
	// child kills itself (RetentionStages), once its storm is under way.
	EnvRetentionKill = "STATEINDEX_CRASH_RETENTION_KILL"
)

// Readiness line the child prints once it has recovered and starts its
// storm.
const readyLine = "ready"

var tokenKey = []byte("crashtest suspension token key, 32+ bytes")

// SigningKey is the checkpoint signing key of the crash test's StateIndex.
func SigningKey() ed25519.PrivateKey {
	seed := make([]byte, ed25519.SeedSize)
	copy(seed, "crashtest checkpoint signing key")
	return ed25519.NewKeyFromSeed(seed)
}

// PublicKey is SigningKey's public half.
func PublicKey() ed25519.PublicKey { return SigningKey().Public().(ed25519.PublicKey) }

// Layout of the storm.
const (
	NumScopes  = 24
	NumWorkers = 8
)

// ScopeName is the name of scope i.
func ScopeName(i int) string { return fmt.Sprintf("crash-%02d", i) }

// Config is the StateIndex configuration of the crash test: snapshots
// every 16 events and a cache of 8 scopes over 4 shards, so that kills land
// in snapshot and checkpoint writes and scopes are rebuilt from snapshot
// plus tail all the time; automatic continuation on (ContextWindowMin,
// ResumeCeiling).
func Config(log *slog.Logger) actors.Config {
	cfg := actors.DefaultConfig()
	cfg.TokenKey = tokenKey
	cfg.SigningKey = SigningKey()
	cfg.Shards = 4
	cfg.CacheScopes = 8
	cfg.SnapshotEvery = 16
	cfg.Frames.ContinueAt = frames.DefaultContinueAt
	cfg.Frames.ResumeCeiling = ResumeCeiling
	cfg.Logger = log
	return cfg
}

// Continuation in the storm: roots get windows of ContextWindowMin to
// twice that (their subframes inherit them), small enough for frames to
// fill and be continued automatically at 90%; continuations carry at most
// ResumeCeiling tokens of the trailing context.
const (
	ContextWindowMin = 700
	ResumeCeiling    = 200
)

func quietSystem(log *slog.Logger) *actor.ActorSystem {
	return actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return log }))
}

// ChildMain is the child process: it runs until killed (or until its storm
// fails, which it reports on stderr with exit status 3).
func ChildMain(dir string) int {
	inc, _ := strconv.Atoi(os.Getenv(EnvIncarnation))
	seed, _ := strconv.ParseUint(os.Getenv(EnvSeed), 10, 64)
	err := runChild(context.Background(), dir, inc, seed, os.Stdout, -1,
		childOptions{probe: true, retention: true, subscribe: true, ledger: true, killAt: os.Getenv(EnvRetentionKill),
			ledgerKillAt: os.Getenv(EnvLedgerKill)})
	fmt.Fprintf(os.Stderr, "crash child: %v\n", err)
	return 3
}

// RunChild opens the data file in dir (fsynced, as in production, with
// the crash test's small, busy journal: StoreOptions), starts a StateIndex
// on it, resends the request each scope had in flight when the
// previous process died, resumes every scope, writes the ready line to
// ready, and then runs the storm: NumWorkers workers over NumScopes scopes,
// until ctx ends or, if steps >= 0, each worker has made steps requests.
func RunChild(ctx context.Context, dir string, incarnation int, seed uint64, ready io.Writer, steps int) error {
	return runChild(ctx, dir, incarnation, seed, ready, steps, childOptions{})
}

// childOptions: probe keeps the probe file (ProbeFile) up to date while
// the store is open; retention runs retention passes (RetentionPolicy,
// archives under ArchiveDir, RetentionServerConfig's short idempotency
// horizon: one pass before the ready line, then passes back to back while
// the storm runs, through a killStore); killAt is the retention step at which the child
// SIGKILLs itself once ready (RetentionStages; "" for none); subscribe
// runs the durable subscriber (subscriber.go) beside the storm, from the
// moment the server starts, and makes retention hold for it
// (SubscriptionHold); ledger runs the spend-ledger workload (ledger.go)
// beside the storm, and ledgerKillAt (with retention) is the stage of a
// settlement at which the child SIGKILLs itself once ready (LedgerStages;
// "" for none).
type childOptions struct {
	probe, retention, subscribe, ledger bool
	killAt, ledgerKillAt                string
}

// runChild is RunChild with opts.
func runChild(ctx context.Context, dir string, incarnation int, seed uint64, ready io.Writer, steps int, opts childOptions) (rerr error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var ks *killStore
	if opts.retention {
		ks = &killStore{stage: opts.killAt, ledger: opts.ledgerKillAt, out: ready}
		eventstore.SetRemovalBatches(RemoveBatch, func() { ks.kill(StageRemoving, ks.removing.Load()) })
		defer eventstore.SetRemovalBatches(0, nil)
	}
	store, err := eventstore.OpenWithRetry(filepath.Join(dir, DataFile), StoreOptions(), eventstore.DefaultRetryPolicy)
	if err != nil {
		return err
	}
	defer store.Close()
	var served eventstore.Store = store
	cfg := Config(log)
	if ks != nil {
		ks.BoltStore = store
		served = ks
		cfg = RetentionServerConfig(log)
	}
	if opts.subscribe {
		cfg.SubscriptionHold = SubscriptionHold
	}
	if opts.probe {
		pctx, stop := context.WithCancel(ctx)
		probed := make(chan error, 1)
		go func() { probed <- probe(pctx, dir, store) }()
		defer func() { stop(); <-probed }()
	}
	side, err := ParseSide(filepath.Join(dir, SideFile))
	if err != nil {
		return err
	}
	sl, err := OpenSideLog(filepath.Join(dir, SideFile))
	if err != nil {
		return err
	}
	defer sl.Close()
	sys := quietSystem(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	defer sys.Shutdown()
	srv, err := actors.Start(sys, served, cfg)
	if err != nil {
		return err
	}
	defer srv.Stop()
	c := srv.Client()
	var subErr error // set before subDone closes
	subDone := make(chan struct{})
	stopSub := func() {}
	if opts.subscribe {
		sctx, stop := context.WithCancel(ctx)
		go func() {
			defer close(subDone)
			if err := subscriber(sctx, c, dir, incarnation); err != nil {
				subErr = err
				cancel() // the storm stops: the child reports the error
			}
		}()
		stopSub = func() { stop(); <-subDone }
		defer func() {
			stopSub()
			if subErr != nil { // what stopped the storm, whatever it then failed with
				rerr = subErr
			}
		}()
	} else {
		close(subDone)
	}

	// The requests in flight at the last kill, resent with their ids: each
	// is answered with its original reply if it was committed, or applied
	// now if it was not — exactly once either way.
	w0 := &Storm{C: c, Log: sl, Tokens: side.Tokens()}
	for _, r := range side.InFlight() {
		req, err := r.Request()
		if err != nil {
			return fmt.Errorf("side file: %w", err)
		}
		if _, err := w0.send(ctx, req); err != nil && !errors.Is(err, errRefused) {
			return fmt.Errorf("resending %s %s: %w", r.Op, r.ID, err)
		}
	}
	// Tokens of the resent suspensions are in the side file now.
	again, err := ParseSide(filepath.Join(dir, SideFile))
	if err != nil {
		return err
	}
	tokens := again.Tokens()
	links := again.Links()
	var lr *ledgerRun
	if opts.ledger {
		lr = &ledgerRun{w: &Storm{C: c, Log: sl}, srv: srv}
	}

	// Workers: each resumes its scopes, as its actors' Started would.
	var wg sync.WaitGroup
	errs := make(chan error, NumWorkers+LedgerWorkers+1)
	storms := make([]*Storm, NumWorkers)
	views := make([][]*scope, NumWorkers)
	for wi := range NumWorkers {
		storms[wi] = &Storm{C: c, Log: sl, Tokens: tokens}
		for si := wi; si < NumScopes; si += NumWorkers {
			s, err := storms[wi].Resume(ctx, ScopeName(si))
			if err != nil {
				return err
			}
			s.Seed(links)
			views[wi] = append(views[wi], s)
		}
	}
	stopPasses := func() {}
	if ks != nil {
		// A first pass finishes any removal the last kill interrupted.
		if err := StartRetention(srv, dir); err != nil {
			return err
		}
		if err := retentionPass(ctx, srv); err != nil {
			return err
		}
		ks.armed.Store(opts.killAt != "" || opts.ledgerKillAt != "")
		rctx, stop := context.WithCancel(ctx)
		passes := make(chan struct{})
		stopPasses = func() { stop(); <-passes }
		defer stopPasses()
		go func() {
			defer close(passes)
			for rctx.Err() == nil {
				if err := retentionPass(rctx, srv); err != nil {
					errs <- err
					cancel() // the storm stops: the child reports the error
					return
				}
				select {
				case <-rctx.Done():
				case <-time.After(RetentionPause):
				}
			}
		}()
	}
	if ready != nil {
		fmt.Fprintln(ready, readyLine)
	}
	for wi := range NumWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(incarnation)<<8|uint64(wi)))
			for n := 0; steps < 0 || n < steps; n++ {
				if ctx.Err() != nil {
					return
				}
				s := views[wi][rng.IntN(len(views[wi]))]
				if err := storms[wi].Step(ctx, rng, s); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	if lr != nil {
		// The ledger picks up where the last process left it, beside the
		// storm (a kill may land in it), then its workers go on.
		if err := lr.recover(ctx, rand.New(rand.NewPCG(seed, uint64(incarnation)<<8|0xff))); err != nil {
			errs <- err
			cancel() // the storm stops: the child reports the error
			lr = nil
		}
	}
	if lr != nil {
		for wi := range LedgerWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, uint64(incarnation)<<8|uint64(0x80+wi)))
				n := -1
				if steps >= 0 {
					n = max(1, steps/4)
				}
				if err := lr.worker(ctx, rng, wi, n); err != nil {
					errs <- err
					cancel() // the storm stops: the child reports the error
				}
			}()
		}
	}
	wg.Wait()
	stopPasses()
	if lr != nil && steps >= 0 && ctx.Err() == nil {
		// A storm of so many steps leaves every settlement delivered.
		dctx, stop := context.WithTimeout(ctx, LedgerDrainTimeout)
		defer stop()
		if err := srv.DrainOutbox(dctx); err != nil {
			return fmt.Errorf("ledger: draining the outbox: %w", err)
		}
	}
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// Populate runs a storm of steps requests per worker on the data file in
// dir and closes it: a realistic file (every operation, snapshots, signed
// checkpoints) for verify's tests.
func Populate(dir string, steps int, seed uint64) error {
	return RunChild(context.Background(), dir, 0, seed, nil, steps)
}

// decodeRequest rebuilds a request from its side-file record.
func decodeRequest(op, b64 string) (messages.Request, error) {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, err
	}
	var req messages.Request
	if op == "ResumeActor" {
		req = &messages.ResumeActor{}
	} else {
		mk, ok := newRequest[op]
		if !ok {
			return nil, fmt.Errorf("unknown op %q", op)
		}
		req = mk()
	}
	if err := eventstore.Unmarshal(raw, req); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return req, nil
}
