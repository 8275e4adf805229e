package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/stateindex/stateindex/eventstore"
)

// DurableResult is the durable workload at one concurrency, measured with
// the store's write-ahead journal on (the default) and off, in alternating
// rounds: through the actor, and the same events written straight to the
// store — group committed by the event store with no actor (journal on and
// off), and one bbolt transaction per event (the ceiling of a store without
// group commit). Every figure is the median of its rounds (see
// MedianFigure); RoundFigures keeps each round's.
type DurableResult struct {
	Scopes int `json:"scopes"`
	Rounds int `json:"rounds"`
	// Actor: PushFrame and AddContextHandle requests through the Client,
	// one goroutine per scope, each waiting for its reply (durable in the
	// journal: one fdatasync per group commit).
	Actor Figure `json:"actor"`
	// ActorOff: the same with the journal off (Options.JournalOff): every
	// group commit a bbolt transaction with its two fsyncs.
	ActorOff Figure `json:"actor_journal_off"`
	// GroupCommit: the events the actor wrote, read back and appended one
	// per eventstore Append by one writer per scope, journal on, no actor:
	// the raw journal group commit.
	GroupCommit Figure `json:"raw_group_commit"`
	// GroupCommitOff: the same with the journal off (raw bbolt group
	// commit).
	GroupCommitOff Figure `json:"raw_group_commit_journal_off"`
	// OneTxn: the first of those events (at most 3,000 at scale 1) put into a
	// bare bbolt file, one transaction (two fsyncs) per event, one writer
	// per scope.
	OneTxn Figure `json:"raw_one_txn"`
	// MeanEventBytes is the mean encoded payload of the events.
	MeanEventBytes float64 `json:"mean_event_bytes"`
	// ActorOverGroupCommit is Actor ÷ GroupCommit in ops/s (journal on).
	ActorOverGroupCommit float64 `json:"actor_over_group_commit"`
	// ActorOffOverGroupCommitOff is ActorOff ÷ GroupCommitOff in ops/s.
	ActorOffOverGroupCommitOff float64 `json:"actor_off_over_group_commit_off"`
	// JournalOverOff is Actor ÷ ActorOff in ops/s.
	JournalOverOff float64 `json:"journal_over_off"`
	// ActorP50OverOneTxnP50 is the Actor p50 ÷ the OneTxn p50.
	ActorP50OverOneTxnP50 float64 `json:"actor_p50_over_one_txn_p50"`
	// Journal is the journal of the last actor round with the journal on,
	// read after its last reply, before the store closed.
	Journal JournalSize `json:"journal"`
	// Fsync is the disk's floor measured in the same rounds (one scope
	// only: the figure its p50 is judged against).
	Fsync *FsyncProbe `json:"fsync_probe,omitempty"`
	// RoundFigures are the figures of each round, in order.
	RoundFigures []DurableRound `json:"round_figures"`
}

// DurableRound is one round of the durable workload.
type DurableRound struct {
	Actor          Figure `json:"actor"`
	ActorOff       Figure `json:"actor_journal_off"`
	GroupCommit    Figure `json:"raw_group_commit"`
	GroupCommitOff Figure `json:"raw_group_commit_journal_off"`
	OneTxn         Figure `json:"raw_one_txn"`
	// JournalFirst: the journal runs of this round went before the
	// journal=off runs (rounds alternate).
	JournalFirst bool `json:"journal_first"`
}

// JournalSize is eventstore.JournalStats in a report.
type JournalSize struct {
	Segments     int    `json:"segments"`
	SegmentBytes int64  `json:"segment_bytes"`
	Bytes        int64  `json:"bytes"`
	MaxBytes     int64  `json:"max_bytes"`
	Pending      int    `json:"pending"`
	PendingBytes int64  `json:"pending_bytes"`
	Applications uint64 `json:"applications"`
	Frames       uint64 `json:"frames"`
}

func journalSize(js eventstore.JournalStats) JournalSize {
	return JournalSize{Segments: js.Segments, SegmentBytes: js.SegmentBytes, Bytes: js.Bytes, MaxBytes: js.MaxBytes,
		Pending: js.Pending, PendingBytes: js.PendingBytes, Applications: js.Applications, Frames: js.Frames}
}

// phase is the latencies of a measured phase and its wall time.
type phase struct {
	lat  Latencies
	wall time.Duration
	// journal is the store's journal after the phase (zero when off).
	journal eventstore.JournalStats
}

func (p phase) figure() Figure { return Summarize(p.lat, p.wall) }

// DefaultRounds is how many rounds the durable scenario measures each
// figure in, alternating journal and journal=off runs, so that a burst of
// other load on the machine is less likely to fall on one side of a ratio
// only.
const DefaultRounds = 3

// probeOps is how many overwrite (and append) fdatasyncs one round of the
// fsync probe times at scale 1.
const probeOps = 1000

var journalOff = &eventstore.Options{JournalOff: true}

// durable runs the durable workload with ops operations spread evenly
// over scopes concurrent scopes, in o's rounds; each round runs ops/rounds
// operations in each mode.
func durable(ctx context.Context, o *Options, scopes, ops int) (DurableResult, error) {
	res := DurableResult{Scopes: scopes}
	dir, err := scratch(o.Dir, fmt.Sprintf("durable-%d", scopes))
	if err != nil {
		return res, err
	}
	defer o.cleanup(dir)
	rounds := o.rounds()
	ops = max(ops, scopes*rounds) // every scope works in every round
	res.Rounds = rounds
	var probes []FsyncProbe
	var payload, events int64
	for round := range rounds {
		rr := DurableRound{JournalFirst: round%2 == 0}
		n := ops / rounds
		if round < ops%rounds {
			n++
		}
		if scopes == 1 {
			o.progress("durable: round %d/%d: %d overwrite and %d append fdatasyncs of 1 KiB", round+1, rounds, o.scale(probeOps, 20), o.scale(probeOps, 20))
			p, err := ProbeFsync(dir, o.scale(probeOps, 20))
			if err != nil {
				return res, err
			}
			probes = append(probes, p)
		}
		var path string                            // the journal run's file
		var byStream map[string][]eventstore.Event // its events, which the raw runs append again
		var bytes int64
		for _, off := range modes(rr.JournalFirst) {
			name, opts := "journal", (*eventstore.Options)(nil)
			if off {
				name, opts = "journal=off", journalOff
			}
			p := dbPath(dir, fmt.Sprintf("actor-%d-%s", round, name))
			o.progress("durable: %d scopes, round %d/%d, %s: %d PushFrame/AddContextHandle requests through the actor", scopes, round+1, rounds, name, n)
			var then func(eventstore.Store) error
			if !off {
				then = func(store eventstore.Store) (err error) {
					byStream, bytes, err = readStore(ctx, store)
					return err
				}
			}
			ph, err := runAgentsThen(ctx, p, opts, o.Shards, scopes, n, 1024, (*agent).durableOp, then)
			if err != nil {
				return res, err
			}
			if off {
				rr.ActorOff = ph.figure()
				o.cleanup(p)
				o.cleanup(eventstore.JournalDir(p))
				continue
			}
			rr.Actor, path = ph.figure(), p
			res.Journal = journalSize(ph.journal)
		}

		streams := make([][]eventstore.Event, 0, len(byStream))
		names := make([]string, 0, len(byStream))
		count := 0
		for _, name := range sortedKeys(byStream) {
			evs := byStream[name][1:] // the root push was setup, not measured
			streams, names = append(streams, evs), append(names, name)
			count += len(evs)
			events += int64(len(byStream[name]))
		}
		payload += bytes

		for _, off := range modes(rr.JournalFirst) {
			name, opts := "journal", (*eventstore.Options)(nil)
			if off {
				name, opts = "journal=off", journalOff
			}
			o.progress("durable: %d scopes, round %d/%d, %s: the same %d events group-committed with no actor", scopes, round+1, rounds, name, count)
			ph, err := groupCommit(ctx, dbPath(dir, fmt.Sprintf("group-%d-%s", round, name)), opts, names, streams)
			if err != nil {
				return res, err
			}
			if off {
				rr.GroupCommitOff = ph.figure()
			} else {
				rr.GroupCommit = ph.figure()
			}
		}

		limit := min(count, (o.rawTxnEvents()+rounds-1)/rounds)
		o.progress("durable: %d scopes, round %d/%d: %d of the events one bbolt transaction each", scopes, round+1, rounds, limit)
		ph, err := oneTxn(dbPath(dir, fmt.Sprintf("onetxn-%d", round)), names, streams, limit)
		if err != nil {
			return res, err
		}
		rr.OneTxn = ph.figure()
		res.RoundFigures = append(res.RoundFigures, rr)
		o.cleanup(path) // the next round starts from empty files too
		o.cleanup(eventstore.JournalDir(path))
	}
	pick := func(get func(DurableRound) Figure) Figure {
		figs := make([]Figure, len(res.RoundFigures))
		for i, r := range res.RoundFigures {
			figs[i] = get(r)
		}
		return MedianFigure(figs)
	}
	res.Actor = pick(func(r DurableRound) Figure { return r.Actor })
	res.ActorOff = pick(func(r DurableRound) Figure { return r.ActorOff })
	res.GroupCommit = pick(func(r DurableRound) Figure { return r.GroupCommit })
	res.GroupCommitOff = pick(func(r DurableRound) Figure { return r.GroupCommitOff })
	res.OneTxn = pick(func(r DurableRound) Figure { return r.OneTxn })
	if len(probes) > 0 {
		p := MedianProbe(probes)
		res.Fsync = &p
	}
	res.MeanEventBytes = Ratio(float64(payload), float64(events))
	res.ActorOverGroupCommit = Ratio(res.Actor.OpsPerSec, res.GroupCommit.OpsPerSec)
	res.ActorOffOverGroupCommitOff = Ratio(res.ActorOff.OpsPerSec, res.GroupCommitOff.OpsPerSec)
	res.JournalOverOff = Ratio(res.Actor.OpsPerSec, res.ActorOff.OpsPerSec)
	res.ActorP50OverOneTxnP50 = Ratio(res.Actor.P50us, res.OneTxn.P50us)
	return res, nil
}

// modes is the order of a round's runs: journalOff false (journal on)
// first when journalFirst.
func modes(journalFirst bool) []bool {
	if journalFirst {
		return []bool{false, true}
	}
	return []bool{true, false}
}

// runAgents starts a StateIndex on a new fsync'd file at path, pushes a
// root frame in each of scopes scopes, then times ops calls of op spread
// evenly over the scopes, one goroutine per scope; size is the approximate
// payload of one call.
func runAgents(ctx context.Context, path string, opts *eventstore.Options, shards, scopes, ops, size int, op func(*agent, context.Context) error) (phase, error) {
	return runAgentsThen(ctx, path, opts, shards, scopes, ops, size, op, nil)
}

// runAgentsThen is runAgents calling then, when not nil, with the store
// after the timed phase, before the StateIndex stops.
func runAgentsThen(ctx context.Context, path string, opts *eventstore.Options, shards, scopes, ops, size int, op func(*agent, context.Context) error,
	then func(eventstore.Store) error) (phase, error) {
	n, err := startWith(path, opts, config(shards))
	if err != nil {
		return phase{}, err
	}
	agents := make([]*agent, scopes)
	var wg sync.WaitGroup
	errc := make(chan error, scopes)
	for i := range agents {
		agents[i] = &agent{c: n.client, scope: fmt.Sprintf("scope-%03d", i), size: size}
		wg.Go(func() {
			if err := agents[i].begin(ctx); err != nil {
				errc <- err
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errc:
		return phase{}, errs(err, n.stop())
	default:
	}
	counts := make([]int, scopes)
	for i := range counts {
		counts[i] = ops / scopes
		if i < ops%scopes {
			counts[i]++
		}
	}
	ph, err := timedWriters(counts, func(i, _ int) error { return op(agents[i], ctx) })
	if js, ok := n.store.(journaled); ok {
		ph.journal = js.JournalStats()
	}
	if err == nil && then != nil {
		err = then(n.store)
	}
	return ph, errs(err, n.stop())
}

// journaled is a store that reports its journal (*eventstore.BoltStore).
type journaled interface {
	JournalStats() eventstore.JournalStats
}

// timedWriters runs one goroutine per writer i, timing counts[i] calls of
// op(i, j) for j = 0, 1, …; a writer stops at its first error, and the
// first error of any writer is returned.
func timedWriters(counts []int, op func(i, j int) error) (phase, error) {
	lats := make([]Latencies, len(counts))
	errc := make(chan error, len(counts))
	var wg sync.WaitGroup
	begin := time.Now()
	for i, n := range counts {
		lats[i] = make(Latencies, 0, n)
		wg.Go(func() {
			for j := range n {
				if err := lats[i].Time(func() error { return op(i, j) }); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	wall := time.Since(begin)
	select {
	case err := <-errc:
		return phase{}, err
	default:
	}
	return phase{lat: Merge(lats), wall: wall}, nil
}

// groupCommit appends each stream's events, one event per Append, with one
// writer per stream to a new fsync'd event store opened with opts.
func groupCommit(ctx context.Context, path string, opts *eventstore.Options, names []string, streams [][]eventstore.Event) (phase, error) {
	store, err := eventstore.Open(path, opts)
	if err != nil {
		return phase{}, err
	}
	defer os.RemoveAll(eventstore.JournalDir(path))
	defer os.Remove(path)
	counts := make([]int, len(streams))
	versions := make([]int64, len(streams))
	for i := range streams {
		counts[i] = len(streams[i])
	}
	ph, err := timedWriters(counts, func(i, j int) error {
		r, err := store.Append(ctx, names[i], versions[i], streams[i][j:j+1])
		versions[i] = r.LastVersion
		return err
	})
	ph.journal = store.JournalStats()
	return ph, errs(err, store.Close())
}

// oneTxn puts events into a bare bbolt file, one transaction per event,
// one writer per stream, limit events in all (taken round-robin from the
// streams' beginnings): the store without group commit.
func oneTxn(path string, names []string, streams [][]eventstore.Event, limit int) (phase, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return phase{}, err
	}
	defer os.Remove(path)
	quota := make([]int, len(streams))
	for left, i := limit, 0; left > 0; i = (i + 1) % len(streams) {
		if quota[i] < len(streams[i]) {
			quota[i]++
			left--
		}
	}
	ph, err := timedWriters(quota, func(i, j int) error {
		return db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte(names[i]))
			if err != nil {
				return err
			}
			b.FillPercent = 1.0
			return b.Put(binary.BigEndian.AppendUint64(nil, uint64(j+1)), streams[i][j].Data)
		})
	})
	return ph, errs(err, db.Close())
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
