// Package verify checks a StateIndex data file end to end: the page
// structure of the bbolt file (without trusting bbolt), every stream's hash
// chain and envelope versions, the global index, that every stream's log
// replays into a state that keeps the domain's invariants, that each
// snapshot equals a replay of the events it covers, and that every signed
// checkpoint signs the chain as stored. stateindex verify and the crash
// test run it; it never writes.
package verify

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
)

// maxProblems bounds what one run collects from a badly damaged file.
const maxProblems = 1000

// Problem is one thing found wrong. Stream is "" for problems of the file
// as a whole; Version is 0 when no single record is to blame.
type Problem struct {
	Stream  string
	Version int64
	What    string
}

func (p Problem) String() string {
	switch {
	case p.Stream != "" && p.Version > 0:
		return fmt.Sprintf("stream %q version %d: %s", p.Stream, p.Version, p.What)
	case p.Stream != "":
		return fmt.Sprintf("stream %q: %s", p.Stream, p.What)
	}
	return "file: " + p.What
}

// Options configure a run.
type Options struct {
	// PublicKey checks checkpoint signatures; nil leaves them unchecked
	// (they are still counted and their hashes compared with the chain).
	PublicKey ed25519.PublicKey
	// LockTimeout is how long to wait for another holder of the file.
	LockTimeout time.Duration
}

// Summary is what a run looked at.
type Summary struct {
	Streams, Records      int64
	Snapshots             int64 // snapshots compared with a replay
	SnapshotsOtherFmt     int64 // snapshots of a projection format this build ignores
	Checkpoints           int64
	SignaturesVerified    int64
	UnsignedBoundaries    int64 // checkpoint boundaries without a signature (warnings)
	Removed               int64 // streams whose removed history matches the removal they record
	Warnings              []string
	Problems              int64
	PageCheckSkippedBbolt bool // page damage found: the storage engine was not let near the file
	Journal               Journal
}

// Journal is what File found of the data file's write-ahead journal.
type Journal struct {
	Dir      string // DATAFILE.journal
	Exists   bool
	Segments int   // segment files
	Bytes    int64 // their size on disk
	// Replay is what opening the store did with the journal: the records
	// it applied to bbolt (those a stopped server left unapplied), frames
	// checked, torn bytes cut.
	Replay eventstore.ReplayInfo
	// Warnings are the store's loud warnings at open (a torn tail cut, a
	// damaged bbolt meta page recovered from the journal, ...).
	Warnings []string
}

// File verifies the data file at path: the page check first, then — only
// on a structurally sound file — the logical checks through the store. It
// calls report for each problem (in order found) and returns a summary; the
// error is for a run that could not happen at all (no file, a file another
// process holds). A panic anywhere inside is recovered and reported as a
// problem: verify itself never crashes on a damaged file.
//
// Opening the store replays its journal: the records a stopped server left
// only in the journal are checked (framing, checksums, generations, that
// they continue bbolt's chains) and applied to bbolt — the recovery step
// every open performs — so the checks see every acknowledged record. A
// damaged journal is a problem naming the segment and offset. No journal
// is created where there is none.
func File(ctx context.Context, path string, opts Options, report func(Problem)) (sum Summary, err error) {
	add := func(p Problem) {
		sum.Problems++
		if report != nil && sum.Problems <= maxProblems {
			report(p)
		}
	}
	defer func() {
		if r := recover(); r != nil {
			add(Problem{What: fmt.Sprintf("verify failed while reading the file (%v): the file is damaged", r)})
			err = nil
		}
	}()
	if _, err := os.Stat(path); err != nil {
		return sum, fmt.Errorf("no data file at %s: %w", path, err)
	}
	timeout := opts.LockTimeout
	if timeout <= 0 {
		timeout = eventstore.DefaultOpenTimeout
	}
	unlock, err := lockShared(path, timeout)
	if err != nil {
		return sum, err
	}
	problems, _, err := CheckPages(path)
	unlock()
	if err != nil {
		return sum, err
	}
	for _, p := range problems {
		add(p)
	}
	if len(problems) > 0 {
		sum.PageCheckSkippedBbolt = true
		return sum, nil
	}
	sum.Journal = JournalOnDisk(path)
	st, err := eventstore.Open(path, &eventstore.Options{OpenTimeout: timeout, JournalOff: true})
	if err != nil {
		if errors.Is(err, eventstore.ErrLocked) {
			return sum, err
		}
		add(Problem{What: err.Error()})
		return sum, nil
	}
	defer st.Close()
	j := sum.Journal
	j.Replay, j.Warnings = st.Replay(), st.Warnings()
	s2, err := Store(ctx, st, opts, add)
	s2.Problems, s2.Journal = sum.Problems, j
	return s2, err
}

// JournalOnDisk counts the segment files of the journal of the data file at
// path (Replay and Warnings are left empty).
func JournalOnDisk(path string) Journal {
	j := Journal{Dir: eventstore.JournalDir(path)}
	entries, err := os.ReadDir(j.Dir)
	if err != nil {
		return j
	}
	j.Exists = true
	for _, e := range entries {
		if filepath.Ext(e.Name()) != ".seg" || e.IsDir() {
			continue
		}
		if fi, err := e.Info(); err == nil {
			j.Segments++
			j.Bytes += fi.Size()
		}
	}
	return j
}

// lockShared waits until no other process holds the file exclusively (a
// running server), and holds a shared lock until unlock is called, so the
// page check reads a file nobody writes. bbolt locks with flock too.
func lockShared(path string, timeout time.Duration) (func(), error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, fmt.Errorf("%w: %s is held by another process (a running server?); gave up after %s",
					eventstore.ErrLocked, path, timeout)
			}
			return nil, err
		}
		time.Sleep(20 * time.Millisecond) // bounded poll: flock has no timeout of its own
	}
}

// Source is what the logical checks read: a store that keeps signed
// checkpoints (BoltStore, PostgresStore).
type Source interface {
	eventstore.Store
	eventstore.Checkpointer
}

// wholeVerifier is a store with a check of its own over everything it
// holds (BoltStore.Verify: the hash chains, envelope versions, the global
// index, snapshot checksums, bbolt's page check).
type wholeVerifier interface {
	Verify(ctx context.Context, report func(stream string, err error)) error
}

// Store runs the logical checks on an open store: the store's own check
// (BoltStore.Verify: hash chains, envelope versions, the global index,
// snapshot checksums, bbolt's own page check) — or, for a store without
// one, every stream's hash chain (VerifyStream) and the global order
// (checkGlobalOrder) — then, for every stream whose chain is sound, a replay
// from its first event with the domain's invariants checked, each
// snapshot compared with the replay at its version, and every checkpoint
// compared with the chain and its signature checked.
func Store(ctx context.Context, st Source, opts Options, report func(Problem)) (Summary, error) {
	var sum Summary
	add := func(p Problem) {
		sum.Problems++
		if report != nil {
			report(p)
		}
	}
	damaged := map[string]bool{}
	var err error
	if w, ok := st.(wholeVerifier); ok {
		err = w.Verify(ctx, func(stream string, err error) {
			damaged[stream] = true
			add(problemOf(stream, err))
		})
	} else {
		err = verifyEach(ctx, st, func(stream string, err error) {
			damaged[stream] = true
			add(problemOf(stream, err))
		})
	}
	if err != nil && !errors.Is(err, eventstore.ErrCorrupt) {
		return sum, err // canceled, closed
	}
	if damaged[""] {
		// The file's own structures are damaged: a replay would only repeat it.
		return sum, nil
	}

	// Checkpoints of every stream, read once.
	cps := map[string][]eventstore.Checkpoint{}
	cerr := st.Checkpoints(ctx, "", func(c eventstore.Checkpoint) error {
		cps[c.Stream] = append(cps[c.Stream], c)
		return nil
	})
	for _, e := range unjoin(cerr) {
		add(problemOf("", e))
	}

	var streams []eventstore.StreamInfo
	if err := st.Streams(ctx, func(i eventstore.StreamInfo) error { streams = append(streams, i); return nil }); err != nil {
		add(problemOf("", err))
		return sum, nil
	}
	known := map[string]bool{}
	for _, info := range streams {
		known[info.Stream] = true
		sum.Streams++
		if damaged[info.Stream] {
			continue
		}
		if err := checkStream(ctx, st, info, cps[info.Stream], opts, &sum, add); err != nil {
			return sum, err
		}
	}
	var orphans []string
	for s := range cps {
		if !known[s] {
			orphans = append(orphans, s)
		}
	}
	sort.Strings(orphans)
	for _, s := range orphans {
		add(Problem{Stream: s, What: fmt.Sprintf("%d signed checkpoint(s) of a stream the file does not have", len(cps[s]))})
	}
	return sum, nil
}

func problemOf(stream string, err error) Problem {
	var ce *eventstore.CorruptionError
	if errors.As(err, &ce) {
		s := ce.Stream
		if s == "" {
			s = stream
		}
		what := ce.Reason
		if ce.Err != nil {
			what += ": " + ce.Err.Error()
		}
		return Problem{Stream: s, Version: ce.Version, What: what}
	}
	return Problem{Stream: stream, What: err.Error()}
}

func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// checkStream replays one stream and checks its snapshot and checkpoints.
func checkStream(ctx context.Context, st Source, info eventstore.StreamInfo, cps []eventstore.Checkpoint,
	opts Options, sum *Summary, add func(Problem)) error {
	name := info.Stream
	// The snapshot, if any: its window size is the one to replay with, so
	// that the request windows compare.
	var snap *frames.State
	var snapVersion int64
	raw, ok, err := st.LoadSnapshot(ctx, name)
	switch {
	case err != nil:
		add(problemOf(name, err))
	case ok:
		s, known, err := eventstore.DecodeState(name, raw)
		switch {
		case err != nil:
			add(problemOf(name, err))
		case !known:
			sum.SnapshotsOtherFmt++
			sum.Warnings = append(sum.Warnings, fmt.Sprintf("stream %q: snapshot at version %d has projection format %d, which this build ignores (recovery replays instead)",
				name, raw.Version, raw.Format))
		default:
			snap, snapVersion = s, raw.Version
		}
	}
	var horizon, skew int64 // the server's, as its snapshot records them
	if snap != nil {
		horizon, skew = snap.Horizon, snap.Skew
	}

	// History removed from the stream's front (retention, destroy): the
	// replay starts from the snapshot, the only base left, and the removal
	// must be the one the stream records.
	base, err := st.StreamBase(ctx, name)
	if err != nil {
		add(problemOf(name, err))
		return nil
	}
	if base.Version > 0 && snap == nil {
		add(Problem{Stream: name, What: fmt.Sprintf("history was removed through version %d and no snapshot of this build's format is left to rebuild the scope from", base.Version)})
		return nil
	}
	if base.Version > 0 && snapVersion < base.Version {
		add(Problem{Stream: name, Version: snapVersion, What: fmt.Sprintf("the snapshot is older than the removed history (through %d): the scope cannot be rebuilt", base.Version)})
		return nil
	}

	want := map[int64]bool{}
	for _, c := range cps {
		want[c.Version] = true
	}
	hashes := map[int64]eventstore.Hash{}
	var runFinished []int64 // last version of each write that finished a run
	var atSnap *frames.State
	state := frames.NewState(name, horizon)
	state.SetHorizon(horizon, skew)
	if base.Version > 0 {
		state = snap.Clone()
	}
	// lastRet is the latest removal the stream records: a retention's or
	// a destroy's (of a scope that had events), both naming the version
	// and hash the removed history ends with.
	type removal struct {
		Through int64
		Hash    string
	}
	var lastRet *removal
	var lastReq string
	var runFinishedReq bool
	failed := false
	flushRequest := func(last int64) {
		if runFinishedReq {
			runFinished = append(runFinished, last)
		}
	}
	err = st.ReadStream(ctx, name, 1, func(r eventstore.Record) error {
		sum.Records++
		if want[r.Version] {
			hashes[r.Version] = r.Hash
		}
		ev, err := eventstore.DecodeFrameEvent(r)
		if err != nil {
			add(problemOf(name, err))
			failed = true
			return errStop
		}
		m := ev.EventMeta()
		if m.RequestID != lastReq || m.RequestID == "" {
			flushRequest(r.Version - 1)
			lastReq, runFinishedReq = m.RequestID, false
		}
		if m.Reason == frames.ReasonRunFinished {
			runFinishedReq = true
		}
		switch e := ev.(type) {
		case *frames.RetentionApplied:
			lastRet = &removal{e.Through, e.Hash}
		case *frames.ScopeDestroyed:
			if e.Through > 0 {
				lastRet = &removal{e.Through, e.Hash}
			}
		}
		if r.Version <= state.Version { // in the snapshot the replay starts from
			return nil
		}
		if err := applySafely(state, ev); err != nil {
			add(Problem{Stream: name, Version: r.Version, What: fmt.Sprintf("the log does not replay: %v", err)})
			failed = true
			return errStop
		}
		if r.Version == snapVersion {
			atSnap = state.WithoutStoredContent() // as its snapshot holds it
		}
		return nil
	})
	flushRequest(state.Version)
	if err != nil && !errors.Is(err, errStop) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		add(problemOf(name, err))
		return nil
	}
	if failed {
		return nil
	}
	if state.Version != info.Version {
		add(Problem{Stream: name, What: fmt.Sprintf("replay ended at version %d but the stream's head is %d", state.Version, info.Version)})
		return nil
	}
	if err := frames.CheckInvariants(state); err != nil {
		if base.Version > 0 {
			add(Problem{Stream: name, What: fmt.Sprintf("the replayed state breaks an invariant: %v", err)})
		} else {
			add(firstBrokenInvariant(ctx, st, name, horizon, skew, err))
		}
	}
	switch {
	case base.Version == 0 && lastRet != nil:
		sum.Warnings = append(sum.Warnings, fmt.Sprintf("stream %q: a removal through version %d is recorded and not carried out yet (the next retention pass does)", name, lastRet.Through))
	case base.Version == 0:
	case lastRet == nil:
		add(Problem{Stream: name, Version: base.Version, What: "history was removed through this version without a record of it in the stream"})
	case lastRet.Through > base.Version:
		sum.Warnings = append(sum.Warnings, fmt.Sprintf("stream %q: a removal through version %d is recorded, the store holds the stream from %d (the next retention pass finishes it)", name, lastRet.Through, base.Version+1))
	case lastRet.Through < base.Version || lastRet.Hash != fmt.Sprintf("%x", base.Hash[:]):
		add(Problem{Stream: name, Version: base.Version, What: fmt.Sprintf("the stream's removed history ends at version %d with hash %x, but the stream records a removal through %d with hash %s",
			base.Version, base.Hash[:8], lastRet.Through, lastRet.Hash)})
	default:
		sum.Removed++
	}

	if snap != nil && base.Version == 0 {
		sum.Snapshots++
		switch {
		case atSnap == nil:
			add(Problem{Stream: name, Version: snapVersion, What: "snapshot covers a version the log does not reach"})
		default:
			if d := DiffStates(atSnap, snap); d != "" {
				add(Problem{Stream: name, Version: snapVersion, What: "snapshot differs from a replay of the events it covers: " + d})
			}
			if err := frames.CheckInvariants(snap); err != nil {
				add(Problem{Stream: name, Version: snapVersion, What: fmt.Sprintf("snapshot breaks an invariant: %v", err)})
			}
		}
	}

	signed := map[int64]eventstore.CheckpointReason{}
	for _, c := range cps {
		sum.Checkpoints++
		h, ok := hashes[c.Version]
		if c.Version == base.Version {
			h, ok = base.Hash, true
		}
		switch {
		case c.Version < base.Version:
			// Removed history: its records, and this checkpoint with them,
			// are in the removal's archive (verify --archive checks it
			// there); the store has no record to compare it with.
			if opts.PublicKey != nil {
				if err := c.VerifySignature(opts.PublicKey); err != nil {
					add(Problem{Stream: name, Version: c.Version, What: fmt.Sprintf("signed checkpoint (%s) of removed history: %v", c.Reason, err)})
					continue
				}
				sum.SignaturesVerified++
			}
			signed[c.Version] = c.Reason
			continue
		case c.Version > info.Version:
			add(Problem{Stream: name, Version: c.Version, What: fmt.Sprintf("signed checkpoint beyond the stream's head %d", info.Version)})
			continue
		case !ok || h != c.Head:
			add(Problem{Stream: name, Version: c.Version, What: fmt.Sprintf(
				"signed checkpoint (%s) signs chain hash %x, but the record's hash is %x: the history up to it was rewritten", c.Reason, c.Head[:8], h[:8])})
			continue
		}
		if opts.PublicKey != nil {
			if err := c.VerifySignature(opts.PublicKey); err != nil {
				add(Problem{Stream: name, Version: c.Version, What: fmt.Sprintf("signed checkpoint (%s): %v", c.Reason, err)})
				continue
			}
			sum.SignaturesVerified++
		}
		signed[c.Version] = c.Reason
	}
	if len(cps) > 0 || opts.PublicKey != nil {
		// Boundaries that should carry a signature and do not: a crash
		// between a commit and its signature leaves this; what follows the
		// last signed checkpoint is protected by the hash chain only.
		var unsigned []int64
		for _, v := range runFinished {
			if _, ok := signed[v]; !ok {
				unsigned = append(unsigned, v)
			}
		}
		if snap != nil {
			if _, ok := signed[snapVersion]; !ok {
				unsigned = append(unsigned, snapVersion)
			}
		}
		if len(unsigned) > 0 {
			sum.UnsignedBoundaries += int64(len(unsigned))
			sum.Warnings = append(sum.Warnings, fmt.Sprintf("stream %q: %d checkpoint boundar%s without a signature (versions %v)",
				name, len(unsigned), plural(len(unsigned), "y", "ies"), clip(unsigned, 8)))
		}
	}
	return nil
}

var errStop = errors.New("stop")

// applySafely applies an event, turning a panic of the domain code into an
// error (a log crafted to break it must not break verify).
func applySafely(st *frames.State, ev frames.Event) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("apply panicked: %v", r)
		}
	}()
	return frames.Apply(st, ev)
}

// firstBrokenInvariant replays the stream again, checking the invariants
// after every event, to name the first version that breaks one.
func firstBrokenInvariant(ctx context.Context, st Source, name string, horizon, skew int64, end error) Problem {
	state := frames.NewState(name, horizon)
	state.SetHorizon(horizon, skew)
	p := Problem{Stream: name, What: fmt.Sprintf("the replayed state breaks an invariant: %v", end)}
	_ = st.ReadStream(ctx, name, 1, func(r eventstore.Record) error {
		ev, err := eventstore.DecodeFrameEvent(r)
		if err != nil {
			return err
		}
		if err := applySafely(state, ev); err != nil {
			return err
		}
		if err := frames.CheckInvariants(state); err != nil {
			p = Problem{Stream: name, Version: r.Version, What: fmt.Sprintf("the replayed state breaks an invariant from this event on: %v", err)}
			return errStop
		}
		return nil
	})
	return p
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func clip(v []int64, n int) []int64 {
	if len(v) > n {
		return v[:n]
	}
	return v
}

// DataFile is the data file's name inside a data directory.
const DataFile = "stateindex.db"

// DataPath is the data file of data directory dir.
func DataPath(dir string) string { return filepath.Join(dir, DataFile) }

// verifyEach is the store-wide check for a store without one of its own:
// every stream's hash chain against its metadata (VerifyStream), then the
// global order (checkGlobalOrder). Problems go to report; the error is
// ErrCorrupt if there were any, or what stopped the walk.
func verifyEach(ctx context.Context, st eventstore.Store, report func(stream string, err error)) error {
	var names []string
	if err := st.Streams(ctx, func(i eventstore.StreamInfo) error { names = append(names, i.Stream); return nil }); err != nil {
		return err
	}
	bad := 0
	for _, name := range names {
		if err := st.VerifyStream(ctx, name); err != nil {
			if ctx.Err() != nil || errors.Is(err, eventstore.ErrClosed) {
				return err
			}
			bad++
			report(name, err)
		}
	}
	n, err := checkGlobalOrder(ctx, st, report)
	if err != nil {
		return err
	}
	if bad+n > 0 {
		return fmt.Errorf("%w: %d problem(s)", eventstore.ErrCorrupt, bad+n)
	}
	return nil
}

// checkGlobalOrder reads the whole log in global order (ReadAll) and checks
// that the sequences strictly increase up to LastSeq and that each
// stream's versions come in order in it, each once: the order every
// reader of the log (subscriptions, the registry) relies on. It returns
// how many problems it reported.
func checkGlobalOrder(ctx context.Context, st eventstore.Store, report func(stream string, err error)) (int, error) {
	last, err := st.LastSeq(ctx)
	if err != nil {
		return 0, err
	}
	problems := 0
	bad := func(stream string, format string, args ...any) {
		problems++
		if problems <= maxProblems {
			report(stream, fmt.Errorf(format, args...))
		}
	}
	var prev uint64
	versions := map[string]int64{}
	err = st.ReadAll(ctx, 1, func(r eventstore.Record) error {
		if r.Seq <= prev {
			bad("", "global order: sequence %d after %d", r.Seq, prev)
		}
		if r.Seq > last {
			bad("", "global order: sequence %d beyond the last sequence %d", r.Seq, last)
		}
		prev = r.Seq
		if v, seen := versions[r.Stream]; seen && r.Version != v+1 {
			bad(r.Stream, "global order: version %d follows version %d of the stream (sequence %d)", r.Version, v, r.Seq)
		}
		versions[r.Stream] = r.Version
		return nil
	})
	if err != nil {
		return problems, err
	}
	return problems, nil
}
