package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/messages"
)

// The scope-state scenario (issue 15): durable key-value writes beside the
// frame operations, through one server, on a durable store. Each round
// starts a StateIndex on a new fsync'd file and pushes a root frame in
// each of the scopes, runs a twentieth of each phase untimed (the file's
// first commits), then the four phases, one writer per scope each waiting
// for its reply (as the durable scenario's agents), in an order that
// rotates from round to round (4 rounds: each phase goes first once):
//
//   - set: ChangeState of one set (16 keys in turn, statePayload bytes);
//   - set+ttl: the same with a sliding TTL of an hour (the state expirer's
//     row is written by a scope's first such write only);
//   - push: ChangeState of one push to a list that keeps its last 50 items;
//   - frames: the durable scenario's PushFrame/AddContextHandle (1 push : 3
//     handles), with statePayload-byte inputs and handles.
//
// After them, set+row: up to 50 sets a scope whose TTLs are a second
// shorter each time, so that every one moves the scope's earliest expiry
// earlier and writes the state expirer's row first (the write-ahead's
// cost, which set+ttl never pays once a scope has its row).
//
// Every one appends one event. Then Get (GetState of one key): hot, one
// reader per scope on the same server (every scope cached); cold, one
// reader going round the scopes on a second server over the same file
// with one shard and a cache of one scope, so that every read loads its
// scope (the latest snapshot plus the events after it) — with one scope,
// the reads alternate with a filler scope's (one key, one event), timed
// apart. Every figure is the median of the rounds.

const (
	// statePayload is a value's, a pushed item's and a handle's size.
	statePayload = 256
	// stateKeys is how many keys the set phases write in turn.
	stateKeys = 16
	// stateKeep is the push phase's window.
	stateKeep = 50
	// stateFiller is the scope the one-scope cold reads alternate with.
	stateFiller = "state-filler"
	// stateRowOps bounds each scope's sets of the set+row phase.
	stateRowOps = 50
)

// StateResult is the scenario at one number of scopes.
type StateResult struct {
	Scopes     int `json:"scopes"`
	Rounds     int `json:"rounds"`
	ValueBytes int `json:"value_bytes"`
	// Set, SetTTL, Push and Frames are the write phases (see the
	// scenario); GetHot and GetCold the reads.
	Set     Figure `json:"set"`
	SetTTL  Figure `json:"set_ttl"`
	Push    Figure `json:"push"`
	Frames  Figure `json:"frames"`
	GetHot  Figure `json:"get_hot"`
	GetCold Figure `json:"get_cold"`
	// SetTTLRow is sets whose TTL moves the scope's earliest expiry
	// earlier: each writes the state expirer's row (a table write, its own
	// bbolt commit) before its append. At most 50 per scope, after the
	// phases.
	SetTTLRow Figure `json:"set_ttl_row"`
	// GetColdSmall (one scope only) is a cold read of the filler scope,
	// which holds one key and nothing else (one event): the load's floor.
	GetColdSmall Figure `json:"get_cold_small,omitempty"`
	// SetOverFrames and PushOverFrames compare the medians' ops/s.
	SetOverFrames  float64 `json:"set_over_frames"`
	PushOverFrames float64 `json:"push_over_frames"`
	// EventsPerScope is a scope's events at the end of a round (what a
	// cold read's load starts from: its latest snapshot and the tail).
	EventsPerScope int          `json:"events_per_scope"`
	RoundFigures   []StateRound `json:"round_figures"`
}

// StateRound is one round of the scenario.
type StateRound struct {
	Set       Figure `json:"set"`
	SetTTL    Figure `json:"set_ttl"`
	Push      Figure `json:"push"`
	Frames    Figure `json:"frames"`
	GetHot    Figure `json:"get_hot"`
	GetCold   Figure `json:"get_cold"`
	SetTTLRow Figure `json:"set_ttl_row"`
	// GetColdSmall is the one-scope case's filler reads, cold too.
	GetColdSmall Figure `json:"get_cold_small,omitempty"`
	// Order is the order the write phases ran in.
	Order []string `json:"order"`
}

// state runs the scenario with scopes writers, ops operations per write
// phase (and hot reads) and reads cold reads, in o's rounds.
func state(ctx context.Context, o *Options, scopes, ops, reads int) (StateResult, error) {
	res := StateResult{Scopes: scopes, ValueBytes: statePayload, Rounds: o.rounds()}
	dir, err := scratch(o.Dir, fmt.Sprintf("state-%d", scopes))
	if err != nil {
		return res, err
	}
	defer o.cleanup(dir)
	ops = max(ops, scopes)
	phases := []string{"set", "set+ttl", "push", "frames"}
	for round := range res.Rounds {
		var rr StateRound
		path := dbPath(dir, fmt.Sprintf("state-%d", round))
		n, err := start(path, false, config(o.Shards))
		if err != nil {
			return res, err
		}
		agents := make([]*agent, scopes)
		for i := range agents {
			agents[i] = &agent{c: n.client, scope: fmt.Sprintf("state-%03d", i), size: statePayload}
			if err := agents[i].begin(ctx); err != nil {
				return res, errs(err, n.stop())
			}
		}
		if scopes == 1 {
			if _, err := n.client.ChangeState(ctx, &messages.ChangeState{Header: messages.Header{Scope: stateFiller},
				Ops: []messages.StateOp{{Kind: "set", Key: stateKey(0), Value: payload(0)}}}); err != nil {
				return res, errs(err, n.stop())
			}
		}
		counts := make([]int, scopes)
		for i := range counts {
			counts[i] = ops / scopes
			if i < ops%scopes {
				counts[i]++
			}
		}
		// Untimed, a twentieth of each phase first: the new file's first
		// commits (its journal's segments, bbolt growing) fall on no phase.
		warm := make([]int, scopes)
		for i := range warm {
			warm[i] = max(counts[i]/20, 1)
		}
		for _, name := range phases {
			if _, err := timedWriters(warm, func(i, j int) error { return stateOp(ctx, agents[i], name, j) }); err != nil {
				return res, errs(fmt.Errorf("warm-up %s: %w", name, err), n.stop())
			}
		}
		for k := range phases {
			name := phases[(round+k)%len(phases)]
			rr.Order = append(rr.Order, name)
			o.progress("state: %d scopes, round %d/%d: %d %s", scopes, round+1, res.Rounds, ops, name)
			ph, err := timedWriters(counts, func(i, j int) error { return stateOp(ctx, agents[i], name, j) })
			if err != nil {
				return res, errs(fmt.Errorf("%s: %w", name, err), n.stop())
			}
			switch name {
			case "set":
				rr.Set = ph.figure()
			case "set+ttl":
				rr.SetTTL = ph.figure()
			case "push":
				rr.Push = ph.figure()
			default:
				rr.Frames = ph.figure()
			}
		}
		rows := make([]int, scopes)
		for i := range rows {
			rows[i] = min(counts[i], stateRowOps)
		}
		o.progress("state: %d scopes, round %d/%d: %d sets that move the scope's earliest expiry earlier", scopes, round+1, res.Rounds, rows[0]*scopes)
		ph, err := timedWriters(rows, func(i, j int) error { return stateOp(ctx, agents[i], "set+row", j) })
		if err != nil {
			return res, errs(fmt.Errorf("set+row: %w", err), n.stop())
		}
		rr.SetTTLRow = ph.figure()
		res.EventsPerScope = 1 + 4*(ops/scopes+max(ops/scopes/20, 1)) + rows[0]
		o.progress("state: %d scopes, round %d/%d: %d hot GetState, one reader per scope", scopes, round+1, res.Rounds, ops)
		ph, err = timedWriters(counts, func(i, j int) error { return get(ctx, n.client, agents[i].scope) })
		if err != nil {
			return res, errs(fmt.Errorf("hot get: %w", err), n.stop())
		}
		rr.GetHot = ph.figure()
		if err := n.stop(); err != nil {
			return res, err
		}

		o.progress("state: %d scopes, round %d/%d: %d cold GetState (one shard, a cache of one scope)", scopes, round+1, res.Rounds, reads)
		cold := config(1)
		cold.CacheScopes = 1
		cold.RegistryOff = true
		n, err = start(path, false, cold)
		if err != nil {
			return res, err
		}
		var lat, small Latencies
		begin := time.Now()
		for j := range reads {
			if scopes == 1 {
				if err := small.Time(func() error { return get(ctx, n.client, stateFiller) }); err != nil { // evicts the measured scope
					return res, errs(err, n.stop())
				}
			}
			if err := lat.Time(func() error { return get(ctx, n.client, agents[j%scopes].scope) }); err != nil {
				return res, errs(fmt.Errorf("cold get: %w", err), n.stop())
			}
		}
		rr.GetCold = Summarize(lat, 0)
		if scopes > 1 { // the reads alone: a rate
			rr.GetCold = Summarize(lat, time.Since(begin))
		} else {
			rr.GetColdSmall = Summarize(small, 0)
		}
		if err := n.stop(); err != nil {
			return res, err
		}
		res.RoundFigures = append(res.RoundFigures, rr)
		o.cleanup(path)
		o.cleanup(eventstore.JournalDir(path))
	}
	pick := func(get func(StateRound) Figure) Figure {
		figs := make([]Figure, len(res.RoundFigures))
		for i, r := range res.RoundFigures {
			figs[i] = get(r)
		}
		return MedianFigure(figs)
	}
	res.Set = pick(func(r StateRound) Figure { return r.Set })
	res.SetTTL = pick(func(r StateRound) Figure { return r.SetTTL })
	res.Push = pick(func(r StateRound) Figure { return r.Push })
	res.Frames = pick(func(r StateRound) Figure { return r.Frames })
	res.GetHot = pick(func(r StateRound) Figure { return r.GetHot })
	res.GetCold = pick(func(r StateRound) Figure { return r.GetCold })
	res.SetTTLRow = pick(func(r StateRound) Figure { return r.SetTTLRow })
	if scopes == 1 {
		res.GetColdSmall = pick(func(r StateRound) Figure { return r.GetColdSmall })
	}
	res.SetOverFrames = Ratio(res.Set.OpsPerSec, res.Frames.OpsPerSec)
	res.PushOverFrames = Ratio(res.Push.OpsPerSec, res.Frames.OpsPerSec)
	return res, nil
}

// stateOp is the j-th operation of a write phase for agent a.
func stateOp(ctx context.Context, a *agent, phase string, j int) error {
	var op messages.StateOp
	switch phase {
	case "set":
		op = messages.StateOp{Kind: "set", Key: stateKey(j), Value: payload(j)}
	case "set+ttl":
		op = messages.StateOp{Kind: "set", Key: stateKey(j), Value: payload(j), TTLMillis: 3_600_000, Sliding: true}
	case "set+row": // each TTL a second shorter: the scope's earliest expiry moves earlier every time
		op = messages.StateOp{Kind: "set", Key: "row-" + stateKey(j), Value: payload(j), TTLMillis: int64(1_800_000 - 1000*j)}
	case "push":
		op = messages.StateOp{Kind: "push", Key: "log", Value: payload(j), Keep: stateKeep}
	default:
		return a.durableOp(ctx)
	}
	if _, err := a.c.ChangeState(ctx, &messages.ChangeState{Header: a.mut(), Ops: []messages.StateOp{op}}); err != nil {
		return fmt.Errorf("%s in %s: %w", phase, a.scope, err)
	}
	return nil
}

// get reads one key of scope (the first a set phase writes).
func get(ctx context.Context, c *actors.Client, scope string) error {
	key := stateKey(0)
	r, err := c.GetState(ctx, &messages.GetState{Header: messages.Header{Scope: scope}, Keys: []string{key}})
	if err != nil {
		return fmt.Errorf("get in %s: %w", scope, err)
	}
	if len(r.Entries) != 1 {
		return fmt.Errorf("get in %s: key %s missing", scope, key)
	}
	return nil
}

func stateKey(j int) string { return "key-" + strconv.Itoa(j%stateKeys) }

func payload(j int) []byte { return []byte(text("value "+strconv.Itoa(j), statePayload)) }
