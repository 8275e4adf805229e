package actors

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// Retention in the shell: a background pass that, scope by scope, reads
// what the store holds (eventstore.ScanHistory), lets the core decide
// (frames.PlanRetention), archives what goes if the policy says so,
// records the removal in the scope through its actor (ApplyRetention, so
// that it is ordered with the scope's other writes and verifiable), and
// then removes the records from the store (RemovePrefix). A crash between
// the last two steps leaves a recorded removal the next pass finishes.
// Passes never block requests: they read the store like any reader, write
// through the scope's actor one request per scope, and remove records in
// transactions of bounded size.

// RetentionConfig configures the retention pass.
type RetentionConfig struct {
	// Interval is the time between passes (0: one pass each RunRetention call only).
	Interval time.Duration
	// Policy returns a scope's policy and where its archives go; ok false
	// keeps the scope whole. nil: no retention (expiry only).
	Policy func(scope string) (p frames.RetentionPolicy, archiveDir string, ok bool)
	// Expiry returns how long a scope may stay inactive (no event) before
	// the pass destroys it, with Force (0: never; nil: no expiry).
	Expiry func(scope string) time.Duration
}

// ScopeRetention is what one pass did to one scope.
type ScopeRetention struct {
	Scope   string
	Through int64  // history removed through this version by this pass (0: none)
	Runs    int    // runs removed
	Kept    int    // runs kept
	Removed int64  // records deleted from the store by this pass
	Archive string // the archive written, if any
	Why     string
	// Expired says the pass destroyed the scope for inactivity; Cancelled
	// are the live frames the destroy cancelled.
	Expired   bool
	Cancelled []string

	batched bool // recorded; its records are removed with the pass's others
}

// batchRemover is a store that removes several streams' prefixes in shared
// transactions (*eventstore.BoltStore).
type batchRemover interface {
	RemovePrefixes(ctx context.Context, cuts map[string]int64) (map[string]eventstore.RemoveResult, map[string]error, error)
}

// RetentionReport is what a pass did.
type RetentionReport struct {
	Scopes  []ScopeRetention
	Errors  []error
	Elapsed time.Duration
}

// retainer runs passes; one at a time.
type retainer struct {
	owns  func(scope string) bool // this server's scopes (placement.go)
	mu    sync.Mutex
	store eventstore.Store
	cfg   Config
	rc    RetentionConfig
	c     *Client
	stop  chan struct{}
	done  chan struct{}
}

// StartRetention starts the background retention pass with rc; Stop ends
// it. Calling it twice replaces nothing: the second call is refused.
func (s *Server) StartRetention(rc RetentionConfig) error {
	if rc.Policy == nil && rc.Expiry == nil {
		return errors.New("actors: retention needs a policy or an expiry")
	}
	if s.ret != nil {
		return errors.New("actors: retention is already running")
	}
	s.ret = &retainer{owns: s.owns, store: s.store, cfg: s.cfg, rc: rc, c: s.Client(), stop: make(chan struct{}), done: make(chan struct{})}
	if rc.Interval <= 0 {
		close(s.ret.done)
		return nil
	}
	go s.ret.loop()
	return nil
}

// RunRetention runs one retention pass now (StartRetention first).
func (s *Server) RunRetention(ctx context.Context) (RetentionReport, error) {
	if s.ret == nil {
		return RetentionReport{}, errors.New("actors: retention is not configured")
	}
	return s.ret.pass(ctx), nil
}

func (r *retainer) loop() {
	defer close(r.done)
	t := time.NewTicker(r.rc.Interval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				select {
				case <-r.stop:
					cancel()
				case <-ctx.Done():
				}
			}()
			rep := r.pass(ctx)
			cancel()
			for _, err := range rep.Errors {
				r.cfg.Logger.Warn("stateindex: retention", "error", err)
			}
			for _, sr := range rep.Scopes {
				if sr.Expired {
					r.cfg.Logger.Info("stateindex: expiry destroyed an inactive scope", "scope", sr.Scope, "through", sr.Through,
						"cancelled", len(sr.Cancelled), "records_removed", sr.Removed, "why", sr.Why)
				} else if sr.Through > 0 || sr.Removed > 0 {
					r.cfg.Logger.Info("stateindex: retention", "scope", sr.Scope, "through", sr.Through, "runs", sr.Runs,
						"records_removed", sr.Removed, "archive", sr.Archive)
				}
			}
		}
	}
}

func (r *retainer) close() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	<-r.done
}

// pass runs retention over every scope.
func (r *retainer) pass(ctx context.Context) RetentionReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	start := time.Now()
	var rep RetentionReport
	var scopes []string
	if err := r.store.Streams(ctx, func(i eventstore.StreamInfo) error {
		if r.owns(i.Stream) { // a shared store holds every member's scopes
			scopes = append(scopes, i.Stream)
		}
		return nil
	}); err != nil {
		rep.Errors = append(rep.Errors, err)
		return rep
	}
	for _, scope := range scopes {
		if ctx.Err() != nil {
			break
		}
		if r.rc.Expiry != nil {
			if d := r.rc.Expiry(scope); d > 0 {
				sr, done, err := r.expire(ctx, scope, d)
				if err != nil {
					rep.Errors = append(rep.Errors, fmt.Errorf("scope %q: expiry: %w", scope, err))
				}
				if sr.Expired || sr.Removed > 0 {
					rep.Scopes = append(rep.Scopes, sr)
				}
				if done || err != nil {
					continue
				}
			}
		}
		if r.rc.Policy == nil {
			continue
		}
		p, dir, ok := r.rc.Policy(scope)
		if !ok {
			continue
		}
		sr, err := r.scope(ctx, scope, p, dir)
		if err != nil {
			rep.Errors = append(rep.Errors, fmt.Errorf("scope %q: %w", scope, err))
		}
		if err == nil || sr.Removed > 0 {
			rep.Scopes = append(rep.Scopes, sr)
		}
	}
	r.removeBatched(ctx, &rep)
	rep.Elapsed = time.Since(start)
	r.cfg.obs.retention(rep)
	return rep
}

// scope runs retention on one scope.
func (r *retainer) scope(ctx context.Context, scope string, p frames.RetentionPolicy, dir string) (ScopeRetention, error) {
	sr := ScopeRetention{Scope: scope}
	now := r.cfg.Clock().UnixNano()
	keep := int64(r.cfg.RequestHorizon) + 2*int64(r.cfg.ClockSkew)
	sc, err := eventstore.ScanHistory(ctx, r.store, scope, now-keep, eventstore.StateSince(p.StateHorizon(now)))
	if err != nil {
		return sr, err
	}
	// A removal recorded and not finished (a crash, or a failure) first.
	base := sc.Base.Version
	if sc.RecordedThrough > base {
		n, err := r.finishRecorded(ctx, scope, sc, now-keep)
		sr.Removed += n
		if err != nil {
			return sr, err
		}
		base = sc.RecordedThrough
	}
	// The cut goes at most as far as the scope's latest snapshot (what it
	// is rebuilt from afterwards): the actor writes one every
	// SnapshotEvery events, so the pass writes one only for a scope that
	// has none it can use.
	limit, err := r.snapshotVersion(ctx, scope, base)
	if err != nil {
		return sr, err
	}
	plan, err := frames.PlanRetention(frames.RetentionInput{Policy: p, Now: now, Base: base, Head: sc.Head,
		Runs: frames.RunsOf(sc.Finished), KeepFrom: sc.FirstSince, LiveChains: sc.LiveChains, Limit: limit, Within: sc.Within,
		StateFrom: sc.FirstStateSince})
	if err != nil || plan.Through == 0 {
		sr.Kept = plan.Kept
		return sr, err
	}
	if held, err := r.heldBySubscribers(ctx, scope, plan.Through); err != nil || held != "" {
		sr.Kept, sr.Why = plan.Kept, held
		return sr, err
	}
	hash, err := recordHash(r.store, scope, plan.Through)
	if err != nil {
		return sr, err
	}
	req := &messages.ApplyRetention{Header: messages.Header{Scope: scope, RequestID: retentionRequestID(scope, plan.Through)},
		Through: plan.Through, Hash: hash, Runs: int64(len(plan.Removed)), Why: plan.Why}
	if p.OnCompletion == frames.CompletionArchive {
		// Written and synced before the removal is recorded: a crash after
		// this leaves an archive the next pass writes again, in place, or
		// replaces by one of another range (removed below).
		path, digest, err := eventstore.WriteArchive(ctx, r.store, scope, base+1, plan.Through, dir)
		if err != nil {
			return sr, fmt.Errorf("archive: %w", err)
		}
		req.Archive, req.ArchiveSHA256, sr.Archive = path, digest, path
		// An archive that starts at base+1 and is not this one was written
		// by a pass a crash stopped before it recorded the removal: no
		// removal names it, and it would duplicate this one's records.
		if orphans, err := filepath.Glob(filepath.Join(filepath.Dir(path), strconv.FormatInt(base+1, 10)+"-*.jsonl")); err == nil {
			for _, o := range orphans {
				if o != path {
					_ = os.Remove(o)
				}
			}
		}
	}
	if _, err := r.c.ApplyRetention(ctx, req); err != nil {
		if errors.Is(err, ErrChainRunning) {
			// A continuation or a resume made a chain live since the
			// scan: nothing is removed; the next pass plans again.
			r.cfg.Logger.Info("stateindex: retention planned before a chain came alive; the scope waits for the next pass", "scope", scope, "error", err)
			return sr, nil
		}
		return sr, fmt.Errorf("recording the removal: %w", err)
	}
	sr.Through, sr.Runs, sr.Kept, sr.Why = plan.Through, len(plan.Removed), plan.Kept, plan.Why
	if _, ok := r.store.(batchRemover); ok {
		sr.batched = true // removed with the pass's other scopes, in shared transactions
		return sr, nil
	}
	res, err := r.store.RemovePrefix(ctx, scope, plan.Through)
	sr.Removed += res.Removed
	return sr, err
}

// removeBatched removes the records of the removals the pass recorded for
// several scopes at once (one synced commit for all of them, not one per
// scope); a removal it cannot carry out stays recorded for the next pass.
func (r *retainer) removeBatched(ctx context.Context, rep *RetentionReport) {
	br, ok := r.store.(batchRemover)
	if !ok {
		return
	}
	cuts := map[string]int64{}
	for _, sr := range rep.Scopes {
		if sr.batched {
			cuts[sr.Scope] = sr.Through
		}
	}
	if len(cuts) == 0 {
		return
	}
	res, errs, err := br.RemovePrefixes(ctx, cuts)
	if err != nil {
		rep.Errors = append(rep.Errors, fmt.Errorf("removing the recorded history of %d scope(s): %w (the next pass finishes it)", len(cuts), err))
	}
	for i := range rep.Scopes {
		sr := &rep.Scopes[i]
		if !sr.batched {
			continue
		}
		sr.batched = false
		sr.Removed += res[sr.Scope].Removed
		if e := errs[sr.Scope]; e != nil {
			rep.Errors = append(rep.Errors, fmt.Errorf("scope %q: %w", sr.Scope, e))
		}
	}
}

// finishRecorded carries out the removal a scope records and the store
// has not finished (sc.RecordedThrough past sc.Base): a retention's, or a
// destroy's, which keeps the request ids since keepSince as tombstones. A
// destroy saves its snapshot after its record, so one is ensured here.
func (r *retainer) finishRecorded(ctx context.Context, scope string, sc eventstore.HistoryScan, keepSince int64) (int64, error) {
	if err := r.ensureSnapshot(ctx, scope, sc.RecordedThrough); err != nil {
		return 0, err
	}
	var opts []eventstore.RemoveOption
	if sc.Destroyed {
		opts = append(opts, eventstore.KeepRequestsSince(keepSince))
	}
	res, err := r.store.RemovePrefix(ctx, scope, sc.RecordedThrough, opts...)
	return res.Removed, err
}

// expire applies inactivity expiry to one scope: a scope whose last record
// is older than after is destroyed with Force, through its actor, by a
// request with a deterministic id guarded by the version seen (a scope
// written to meanwhile is left alone). A scope whose last record is its
// destroy is already empty: its removal is finished if a crash
// interrupted it, nothing more. done says the scope needs no retention
// this pass.
func (r *retainer) expire(ctx context.Context, scope string, after time.Duration) (sr ScopeRetention, done bool, err error) {
	sr = ScopeRetention{Scope: scope}
	head, at, typ, ok, err := eventstore.LastRecord(ctx, r.store, scope)
	if err != nil || !ok {
		return sr, false, err
	}
	now := r.cfg.Clock().UnixNano()
	if typ == frames.TypeScopeDestroyed {
		keep := int64(r.cfg.RequestHorizon) + 2*int64(r.cfg.ClockSkew)
		sc, err := eventstore.ScanHistory(ctx, r.store, scope, now-keep)
		if err != nil || sc.RecordedThrough <= sc.Base.Version {
			return sr, true, err
		}
		sr.Removed, err = r.finishRecorded(ctx, scope, sc, now-keep)
		return sr, true, err
	}
	idle := time.Duration(now - at)
	if idle <= after {
		return sr, false, nil
	}
	req := &messages.DestroyScope{Header: messages.Header{Scope: scope, RequestID: expiryRequestID(scope, head), IfVersion: &head},
		Force: true, Why: fmt.Sprintf("inactive for %s (expiry after %s)", idle.Round(time.Second), after)}
	reply, err := r.c.DestroyScope(ctx, req)
	if errors.Is(err, ErrVersionConflict) {
		return sr, false, nil // written to since: active
	}
	if err != nil {
		return sr, true, err
	}
	sr.Expired, sr.Through, sr.Removed, sr.Cancelled, sr.Why = true, reply.Through, reply.Removed, reply.Cancelled, req.Why
	return sr, true, nil
}

// expiryRequestID is the request id of an expiry's destroy of a scope at
// version head: the same destroy sent again is answered, not applied twice.
func expiryRequestID(scope string, head int64) string {
	sum := sha256.Sum256([]byte(scope))
	return "expiry:" + hex.EncodeToString(sum[:12]) + ":" + strconv.FormatInt(head, 10)
}

// ensureSnapshot makes sure a snapshot at or after through exists, so that
// the scope can be rebuilt once the records before it are gone.
func (r *retainer) ensureSnapshot(ctx context.Context, scope string, through int64) error {
	_, err := r.snapshotVersion(ctx, scope, through-1)
	return err
}

// snapshotVersion returns the version of the scope's latest usable
// snapshot, writing one first if it has none past base.
func (r *retainer) snapshotVersion(ctx context.Context, scope string, base int64) (int64, error) {
	snap, ok, err := r.store.LoadSnapshot(ctx, scope)
	if err == nil && ok && snap.Version > base {
		if _, fresh, _ := eventstore.DecodeState(scope, snap); fresh {
			return snap.Version, nil
		}
	}
	st, _, err := eventstore.LoadState(ctx, r.store, scope, int64(r.cfg.RequestHorizon), int64(r.cfg.ClockSkew), r.cfg.Logger)
	if err != nil {
		return 0, err
	}
	enc, err := eventstore.EncodeState(st)
	if err != nil {
		return 0, err
	}
	return enc.Version, r.store.SaveSnapshot(ctx, scope, enc)
}

// retentionRequestID is the request id of a removal: the same removal sent
// again (after a crash) is answered, not applied twice.
func retentionRequestID(scope string, through int64) string {
	sum := sha256.Sum256([]byte(scope))
	return "retention:" + hex.EncodeToString(sum[:12]) + ":" + strconv.FormatInt(through, 10)
}

// heldBySubscribers says why a cut through version through of scope is put
// off for a durable subscription (Config.SubscriptionHold), or "" when it
// is not: the cut would remove the record at or past the lowest position a
// subscription of the scope that acknowledged within the hold has not
// processed.
func (r *retainer) heldBySubscribers(ctx context.Context, scope string, through int64) (string, error) {
	if r.cfg.SubscriptionHold <= 0 {
		return "", nil
	}
	low, who, err := heldPosition(ctx, r.store, scope, r.cfg.Clock(), r.cfg.SubscriptionHold)
	if err != nil || low == 0 {
		return "", err
	}
	rec, ok, err := eventstore.ReadRecord(ctx, r.store, scope, through)
	if err != nil || !ok {
		return "", err
	}
	if rec.Seq < low {
		return "", nil
	}
	return fmt.Sprintf("held for subscription %q: it has processed the log below position %d, the cut reaches %d", who, low, rec.Seq), nil
}
