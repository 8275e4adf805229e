package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/messages"
)

// The partial-output scenario (issue 15): 64 model calls streaming at once,
// each recording its output with one RecordPartialOutput per 20 ms chunk
// (a chunk's reply awaited before the next is sent; a chunk that falls
// behind its schedule is sent at once), a turn recorded every
// partialTurnChunks chunks (a final chunk, then RecordUsage with a turn,
// which ends the output; the next chunk starts a new one). Measured, in
// alternating rounds on a new durable store each: the streams alone (chunk
// reply latency, chunks/s achieved against the 3,200/s offered, and the
// fdatasyncs they cost), the durable frame workload alone (bench/durable.go's
// agents: PushFrame and AddContextHandle, one goroutine per scope, each
// waiting for its reply) and the same workload with the 64 streams
// running. Figures are the medians of the rounds.

const (
	// partialStreams is how many streams run at once.
	partialStreams = 64
	// partialInterval is the chunk interval of one stream.
	partialInterval = 20 * time.Millisecond
	// partialChunkBytes is a chunk's delta: a few tokens of text.
	partialChunkBytes = 40
	// partialTurnChunks is how many chunks a streamed answer has.
	partialTurnChunks = 100
	// partialAgents is the durable workload's scopes, and partialOps its
	// requests in each phase at scale 1.
	partialAgents = 16
	partialOps    = 16000
	// partialAlone is how long the streams run alone at scale 1.
	partialAlone = 3 * time.Second
)

// PartialResult is the scenario with its streams spread over Scopes scopes.
type PartialResult struct {
	Streams int `json:"streams"`
	// Scopes holds the streams: one frame each in Streams scopes (every
	// agent its own scope), or several frames per scope.
	Scopes      int     `json:"scopes"`
	IntervalMs  float64 `json:"interval_ms"`
	ChunkBytes  int     `json:"chunk_bytes"`
	OfferedRate float64 `json:"offered_chunks_per_sec"`
	Rounds      int     `json:"rounds"`
	// Alone: the streams with nothing else running — chunk reply latency
	// and chunks/s achieved. FsyncsPerSec are the journal's fdatasyncs in
	// that phase per second, ChunksPerFsync the chunks each made durable.
	Alone          Figure  `json:"streams_alone"`
	FsyncsPerSec   float64 `json:"fsyncs_per_sec"`
	ChunksPerFsync float64 `json:"chunks_per_fsync"`
	// WithDurable: the streams while the durable workload ran.
	WithDurable Figure `json:"streams_with_durable"`
	// Durable is the durable workload alone, DurableWith the same with the
	// streams running; DurableRatio is DurableWith ÷ Durable in ops/s.
	Durable      Figure  `json:"durable_alone"`
	DurableWith  Figure  `json:"durable_with_streams"`
	DurableRatio float64 `json:"durable_with_over_alone"`
	// RoundFigures are each round's figures, in order.
	RoundFigures []PartialRound `json:"round_figures"`
}

// PartialRound is one round of the scenario.
type PartialRound struct {
	Alone, WithDurable, Durable, DurableWith Figure
	FsyncsPerSec, ChunksPerFsync             float64
	// StreamsFirst: the streams-alone phase ran before the durable-alone
	// one (rounds alternate).
	StreamsFirst bool `json:"streams_first"`
}

// partial runs the scenario: streams over scopes, in o's rounds.
func partial(ctx context.Context, o *Options, streams, scopes int) (PartialResult, error) {
	res := PartialResult{Streams: streams, Scopes: scopes, IntervalMs: float64(partialInterval) / float64(time.Millisecond),
		ChunkBytes: partialChunkBytes, OfferedRate: float64(streams) / partialInterval.Seconds(), Rounds: o.rounds()}
	dir, err := scratch(o.Dir, fmt.Sprintf("partial-%d", scopes))
	if err != nil {
		return res, err
	}
	defer o.cleanup(dir)
	alone := time.Duration(float64(partialAlone) * o.scaleFactor())
	alone = max(alone, 10*partialInterval)
	ops := o.scale(partialOps, partialAgents)
	for round := range res.Rounds {
		rr := PartialRound{StreamsFirst: round%2 == 0}
		p := dbPath(dir, fmt.Sprintf("partial-%d", round))
		n, err := start(p, false, config(o.Shards))
		if err != nil {
			return res, err
		}
		err = func() error {
			ss, err := newStreams(ctx, n, streams, scopes)
			if err != nil {
				return err
			}
			for _, streamsPhase := range []bool{rr.StreamsFirst, !rr.StreamsFirst} {
				if streamsPhase {
					o.progress("partial: %d streams over %d scopes, round %d/%d: alone for %s", streams, scopes, round+1, res.Rounds, alone)
					before := journalFrames(n.store)
					rr.Alone, err = ss.run(ctx, func() error { return sleepCtx(ctx, alone) })
					if err != nil {
						return err
					}
					if rr.Alone.Seconds > 0 {
						fsyncs := float64(journalFrames(n.store) - before)
						rr.FsyncsPerSec = fsyncs / rr.Alone.Seconds
						rr.ChunksPerFsync = Ratio(float64(rr.Alone.Ops), fsyncs)
					}
					continue
				}
				o.progress("partial: round %d/%d: %d durable PushFrame/AddContextHandle requests over %d scopes, alone", round+1, res.Rounds, ops, partialAgents)
				if rr.Durable, err = durablePhase(ctx, n, fmt.Sprintf("alone-%d", round), ops); err != nil {
					return err
				}
			}
			o.progress("partial: round %d/%d: the same with the %d streams running", round+1, res.Rounds, streams)
			rr.WithDurable, err = ss.run(ctx, func() (err error) {
				rr.DurableWith, err = durablePhase(ctx, n, fmt.Sprintf("with-%d", round), ops)
				return err
			})
			return err
		}()
		if err = errs(err, n.stop()); err != nil {
			return res, err
		}
		o.cleanup(p)
		o.cleanup(eventstore.JournalDir(p))
		res.RoundFigures = append(res.RoundFigures, rr)
	}
	pick := func(get func(PartialRound) Figure) Figure {
		figs := make([]Figure, len(res.RoundFigures))
		for i, r := range res.RoundFigures {
			figs[i] = get(r)
		}
		return MedianFigure(figs)
	}
	res.Alone = pick(func(r PartialRound) Figure { return r.Alone })
	res.WithDurable = pick(func(r PartialRound) Figure { return r.WithDurable })
	res.Durable = pick(func(r PartialRound) Figure { return r.Durable })
	res.DurableWith = pick(func(r PartialRound) Figure { return r.DurableWith })
	var fs, cf []float64
	for _, r := range res.RoundFigures {
		fs, cf = append(fs, r.FsyncsPerSec), append(cf, r.ChunksPerFsync)
	}
	res.FsyncsPerSec, res.ChunksPerFsync = Median(fs), Median(cf)
	res.DurableRatio = Ratio(res.DurableWith.OpsPerSec, res.Durable.OpsPerSec)
	return res, nil
}

// durablePhase pushes a root in each of partialAgents new scopes (named
// with tag), then times ops durable operations spread over them.
func durablePhase(ctx context.Context, n *node, tag string, ops int) (Figure, error) {
	agents := make([]*agent, partialAgents)
	for i := range agents {
		agents[i] = &agent{c: n.client, scope: fmt.Sprintf("durable-%s-%02d", tag, i), size: 1024}
		if err := agents[i].begin(ctx); err != nil {
			return Figure{}, err
		}
	}
	counts := make([]int, partialAgents)
	for i := range counts {
		counts[i] = ops / partialAgents
		if i < ops%partialAgents {
			counts[i]++
		}
	}
	ph, err := timedWriters(counts, func(i, _ int) error { return agents[i].durableOp(ctx) })
	return ph.figure(), err
}

// streams are the scenario's model calls: one frame each, spread over
// their scopes.
type streams struct {
	c      *node
	scopes []string
	frames []string
	chunk  []int // the next chunk of each stream's current answer
}

func newStreams(ctx context.Context, n *node, count, scopes int) (*streams, error) {
	s := &streams{c: n, scopes: make([]string, count), frames: make([]string, count), chunk: make([]int, count)}
	for i := range count {
		s.scopes[i] = fmt.Sprintf("stream-%02d", i%scopes)
		p, err := n.client.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: s.scopes[i]}, Goal: "answer " + strconv.Itoa(i),
			Budget: budget.TokenBudget{Total: rootBudget}})
		if err != nil {
			return nil, fmt.Errorf("push stream %d: %w", i, err)
		}
		s.frames[i] = p.FrameID
	}
	return s, nil
}

// run runs every stream at its pace until during returns, and summarizes
// its chunks' reply latencies over the time they ran. during starts once
// every stream has sent its first chunk (within one interval): the
// streams are all running while it runs.
func (s *streams) run(ctx context.Context, during func() error) (Figure, error) {
	stop := make(chan struct{})
	lats := make([]Latencies, len(s.frames))
	errc := make(chan error, len(s.frames))
	var wg, started sync.WaitGroup
	started.Add(len(s.frames))
	begin := time.Now()
	for i := range s.frames {
		wg.Go(func() {
			first := true
			defer func() {
				if first {
					started.Done()
				}
			}()
			// Streams start spread over one interval, as independent calls do.
			next := begin.Add(partialInterval * time.Duration(i) / time.Duration(len(s.frames)))
			for {
				if d := time.Until(next); d > 0 {
					select {
					case <-stop:
						return
					case <-time.After(d):
					}
				}
				select {
				case <-stop:
					return
				default:
				}
				if err := s.step(ctx, i, &lats[i]); err != nil {
					errc <- err
					return
				}
				if first {
					first = false
					started.Done()
				}
				next = next.Add(partialInterval)
				if now := time.Now(); next.Before(now) {
					next = now // behind: send at once, never in a burst
				}
			}
		})
	}
	started.Wait()
	err := during()
	close(stop)
	wg.Wait()
	wall := time.Since(begin)
	close(errc)
	for e := range errc {
		err = errors.Join(err, e)
	}
	return Summarize(Merge(lats), wall), err
}

// step sends stream i's next chunk (timed); the last chunk of an answer
// is final, and the answer's turn is recorded after it (not timed: it is
// not a chunk).
func (s *streams) step(ctx context.Context, i int, lat *Latencies) error {
	h := messages.Header{Scope: s.scopes[i]}
	k := s.chunk[i]
	final := k == partialTurnChunks-1
	err := lat.Time(func() error {
		_, err := s.c.client.RecordPartialOutput(ctx, &messages.RecordPartialOutput{Header: h, FrameID: s.frames[i],
			Delta: text("chunk "+strconv.Itoa(k), partialChunkBytes), Percent: int64(k * 100 / partialTurnChunks), Final: final})
		return err
	})
	if err != nil {
		return fmt.Errorf("stream %d chunk %d: %w", i, k, err)
	}
	s.chunk[i]++
	if final {
		s.chunk[i] = 0
		if _, err := s.c.client.RecordUsage(ctx, &messages.RecordUsage{Header: h, FrameID: s.frames[i],
			Cost: budget.Cost{InputTokens: 1000, OutputTokens: partialTurnChunks * 10, Turns: 1}}); err != nil {
			return fmt.Errorf("stream %d's turn: %w", i, err)
		}
	}
	return nil
}

// journalFrames is the store's journal frames written so far (one
// fdatasync each; 0 without a journal).
func journalFrames(st eventstore.Store) uint64 {
	if js, ok := st.(journaled); ok {
		return js.JournalStats().Frames
	}
	return 0
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
