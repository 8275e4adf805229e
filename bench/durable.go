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

// DurableResult is the durable workload at one concurrency: through the
// actor, and the same events written straight to the store twice — group
// committed by the event store with no actor, and one bbolt transaction per
// event (the ceiling of a store without group commit).
type DurableResult struct {
	Scopes int `json:"scopes"`
	// Actor: PushFrame and AddContextHandle requests through the Client,
	// one goroutine per scope, each waiting for its reply (fsynced).
	Actor Figure `json:"actor"`
	// GroupCommit: the events the actor wrote, read back and appended one
	// per eventstore Append by one writer per scope, fsynced, no actor.
	GroupCommit Figure `json:"raw_group_commit"`
	// OneTxn: the first of those events (at most 3,000 at scale 1) put into a
	// bare bbolt file, one transaction (two fsyncs) per event, one writer
	// per scope.
	OneTxn Figure `json:"raw_one_txn"`
	// MeanEventBytes is the mean encoded payload of the events.
	MeanEventBytes float64 `json:"mean_event_bytes"`
	// ActorOverGroupCommit is Actor ÷ GroupCommit in ops/s.
	ActorOverGroupCommit float64 `json:"actor_over_group_commit"`
	// ActorP50OverOneTxnP50 is the Actor p50 ÷ the OneTxn p50.
	ActorP50OverOneTxnP50 float64 `json:"actor_p50_over_one_txn_p50"`
}

// phase is the latencies of a measured phase and its wall time; phases of
// several rounds add up.
type phase struct {
	lat  Latencies
	wall time.Duration
}

func (p *phase) add(q phase) {
	p.lat = append(p.lat, q.lat...)
	p.wall += q.wall
}

func (p phase) figure() Figure { return Summarize(p.lat, p.wall) }

// durableRounds: each figure of the durable scenario is measured in this
// many rounds, alternating actor and raw runs, so that a burst of other
// load on the machine is less likely to fall on one side of a ratio only.
const durableRounds = 2

// durable runs the durable workload with ops operations spread evenly
// over scopes concurrent scopes.
func durable(ctx context.Context, o *Options, scopes, ops int) (DurableResult, error) {
	res := DurableResult{Scopes: scopes}
	dir, err := scratch(o.Dir, fmt.Sprintf("durable-%d", scopes))
	if err != nil {
		return res, err
	}
	defer o.cleanup(dir)
	ops = max(ops, scopes)
	rounds := min(durableRounds, ops/scopes)
	var actor, group, txn phase
	var payload, events int64
	for round := range rounds {
		n := ops / rounds
		if round < ops%rounds {
			n++
		}
		path := dbPath(dir, fmt.Sprintf("actor-%d", round))
		o.progress("durable: %d scopes, round %d/%d: %d PushFrame/AddContextHandle requests through the actor", scopes, round+1, rounds, n)
		ph, err := runAgents(ctx, path, nil, o.Shards, scopes, n, 1024, (*agent).durableOp)
		if err != nil {
			return res, err
		}
		actor.add(ph)

		byStream, bytes, err := readEvents(ctx, path)
		if err != nil {
			return res, err
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

		o.progress("durable: %d scopes, round %d/%d: the same %d events group-committed with no actor", scopes, round+1, rounds, count)
		if ph, err = groupCommit(ctx, dbPath(dir, fmt.Sprintf("group-%d", round)), names, streams); err != nil {
			return res, err
		}
		group.add(ph)

		limit := min(count, (o.rawTxnEvents()+rounds-1)/rounds)
		o.progress("durable: %d scopes, round %d/%d: %d of the events one bbolt transaction each", scopes, round+1, rounds, limit)
		if ph, err = oneTxn(dbPath(dir, fmt.Sprintf("onetxn-%d", round)), names, streams, limit); err != nil {
			return res, err
		}
		txn.add(ph)
		o.cleanup(path) // the next round starts from an empty file too
	}
	res.Actor, res.GroupCommit, res.OneTxn = actor.figure(), group.figure(), txn.figure()
	res.MeanEventBytes = Ratio(float64(payload), float64(events))
	res.ActorOverGroupCommit = Ratio(res.Actor.OpsPerSec, res.GroupCommit.OpsPerSec)
	res.ActorP50OverOneTxnP50 = Ratio(res.Actor.P50us, res.OneTxn.P50us)
	return res, nil
}

// runAgents starts a StateIndex on a new fsync'd file at path, pushes a
// root frame in each of scopes scopes, then times ops calls of op spread
// evenly over the scopes, one goroutine per scope; size is the approximate
// payload of one call.
func runAgents(ctx context.Context, path string, opts *eventstore.Options, shards, scopes, ops, size int, op func(*agent, context.Context) error) (phase, error) {
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
	return ph, errs(err, n.stop())
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
	return phase{Merge(lats), wall}, nil
}

// groupCommit appends each stream's events, one event per Append, with one
// writer per stream to a new fsync'd event store.
func groupCommit(ctx context.Context, path string, names []string, streams [][]eventstore.Event) (phase, error) {
	store, err := eventstore.Open(path, nil)
	if err != nil {
		return phase{}, err
	}
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
