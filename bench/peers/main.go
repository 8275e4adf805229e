// Command peers runs the durable-checkpoint workload of issue 4 on
// StateIndex's peers and on StateIndex itself, and prints them side by
// side: N durable checkpoints of about 1 KB to one thread, and spread over
// 16 and 64 threads, on
//
//	(a) state.json — the whole thread state rewritten atomically (tmp
//	    file, fsync, rename, fsync dir) at every checkpoint, as in
//	    state-persistence-checkpoints.md;
//	(b) SQLite in WAL mode with synchronous=FULL, one transaction per
//	    checkpoint, the registry of persistence-continuation-chains.md;
//	(c) StateIndex through its Client (the shared workload of package
//	    github.com/stateindex/stateindex/bench), with its write-ahead
//	    journal (the default) and with the journal off.
//
// SQLite and both StateIndex modes run in alternating rounds (the order
// rotates each round) and each figure is the median of its rounds; a probe
// of the disk's own floor (1 KiB overwrite + fdatasync in a preallocated
// file) runs in the 1-thread rounds. state.json runs once per thread count
// (its cost grows with its state, so rounds would measure a smaller one).
//
// This is a module of its own so that the StateIndex module never depends
// on SQLite. With --ours it also prints a `stateindex bench --json` report
// and evaluates the goals that need both runs.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/stateindex/stateindex/bench"
)

// peer runs the workload: total checkpoints of size bytes spread over
// threads threads, files in dir. note describes what it left behind.
type peer interface {
	name() string
	run(ctx context.Context, dir string, total, threads, size int) (fig bench.Figure, note string, err error)
}

type stateIndex struct {
	shards     int
	journalOff bool
}

// Peer names, as in Run.Peer.
const (
	peerStateJSON  = "state.json"
	peerSQLite     = "SQLite"
	peerStateIndex = "StateIndex"
	peerJournalOff = "StateIndex journal=off"
)

func (s stateIndex) name() string {
	if s.journalOff {
		return peerJournalOff
	}
	return peerStateIndex
}

func (s stateIndex) run(ctx context.Context, dir string, total, threads, size int) (bench.Figure, string, error) {
	fig, err := bench.Checkpoints(ctx, bench.CheckpointOptions{Total: total, Threads: threads, Size: size, Dir: dir, Shards: s.shards, JournalOff: s.journalOff})
	return fig, "", err
}

// Run is one peer at one thread count.
type Run struct {
	Peer    string `json:"peer"`
	Threads int    `json:"threads"`
	// Checkpoints is how many the peer ran: fewer than Requested when
	// capped (state.json with one large thread).
	Checkpoints int `json:"checkpoints"`
	Requested   int `json:"requested"`
	// Figure is the median of the rounds' figures (bench.MedianFigure).
	Figure bench.Figure `json:"figure"`
	// Rounds are the figures of each round, in order.
	Rounds []bench.Figure `json:"rounds,omitempty"`
	Note   string         `json:"note,omitempty"`
}

// Output is what --json-out writes.
type Output struct {
	Machine bench.Machine `json:"machine"`
	Started time.Time     `json:"started"`
	Seconds float64       `json:"seconds"`
	Size    int           `json:"checkpoint_bytes"`
	Rounds  int           `json:"rounds"`
	Runs    []Run         `json:"runs"`
	// Fsync is the disk's floor measured in the 1-thread rounds (median).
	Fsync      *bench.FsyncProbe `json:"fsync_probe,omitempty"`
	Goals      []bench.Goal      `json:"goals,omitempty"`
	StateIndex *bench.Report     `json:"stateindex,omitempty"`
}

type config struct {
	checkpoints, size, stateJSONMax, shards, rounds, probeOps int
	threads                                                   []int
	dir                                                       string
	keep                                                      bool
	only                                                      []string
	progress                                                  io.Writer
}

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(os.Stderr, "peers: %v\n", err)
		}
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	fs.IntVar(&c.checkpoints, "checkpoints", 10000, "durable checkpoints per run, spread over the threads")
	fs.IntVar(&c.size, "size", 1024, "bytes of one checkpoint")
	threads := fs.String("threads", "1,16,64", "comma-separated thread counts")
	fs.IntVar(&c.stateJSONMax, "statejson-max-per-thread", 2500,
		"cap on state.json checkpoints per thread (its state grows, so its time is quadratic in this); 0: no cap")
	fs.IntVar(&c.probeOps, "probe-ops", 1000, "1 KiB overwrite + fdatasync operations the disk-floor probe times in each 1-thread round (0: no probe)")
	fs.IntVar(&c.shards, "shards", 0, "StateIndex shards (0: the default)")
	fs.IntVar(&c.rounds, "rounds", 3, "rounds of SQLite and both StateIndex modes, alternating, each with checkpoints/rounds checkpoints; figures are medians")
	fs.StringVar(&c.dir, "dir", "", "where the peers' files go (default: the system's temporary directory)")
	fs.BoolVar(&c.keep, "keep", false, "keep the peers' files")
	only := fs.String("only", "", "comma-separated peers to run: statejson, sqlite, stateindex, stateindex-journal-off (default: all)")
	ours := fs.String("ours", "", "a `stateindex bench --json` report of the same run to print and judge goals with")
	jsonOut := fs.String("json-out", "", "also write the figures as JSON to this file")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, t := range strings.Split(*threads, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(t))
		if err != nil || n < 1 {
			return fmt.Errorf("--threads: %q is not a positive number", t)
		}
		c.threads = append(c.threads, n)
	}
	if c.checkpoints < 1 || c.size < 1 || c.stateJSONMax < 0 || c.rounds < 1 || c.probeOps < 0 {
		return errors.New("--checkpoints, --size and --rounds must be >= 1, --statejson-max-per-thread >= 0")
	}
	if *only != "" {
		c.only = strings.Split(*only, ",")
	}
	if !*quiet {
		c.progress = stderr
	}
	var report *bench.Report
	if *ours != "" {
		b, err := os.ReadFile(*ours)
		if err != nil {
			return err
		}
		report = &bench.Report{}
		if err := json.Unmarshal(b, report); err != nil {
			return fmt.Errorf("%s: %w", *ours, err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	out, err := runPeers(ctx, c)
	if err != nil {
		return err
	}
	out.StateIndex = report
	out.Goals = peerGoals(out.Runs, out.Fsync)
	if report != nil {
		ours := *report
		ours.Goals = nil // printed below with the peers' goal
		if err := bench.WriteText(stdout, &ours); err != nil {
			return err
		}
		fmt.Fprintln(stdout)
	}
	if err := writeSideBySide(stdout, out, c); err != nil {
		return err
	}
	goals := out.Goals
	if report != nil {
		goals = append(slices.Clone(report.Goals), goals...)
	}
	if len(goals) > 0 {
		fmt.Fprintf(stdout, "\nGoals (issues 4 and 10):\n")
		if err := bench.WriteGoals(stdout, goals); err != nil {
			return err
		}
	}
	if *jsonOut != "" {
		b, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (c *config) peers() []peer {
	all := []peer{stateJSON{}, sqliteRegistry{}, stateIndex{shards: c.shards}, stateIndex{shards: c.shards, journalOff: true}}
	keys := []string{"statejson", "sqlite", "stateindex", "stateindex-journal-off"}
	var out []peer
	for i, p := range all {
		if len(c.only) == 0 || slices.Contains(c.only, keys[i]) {
			out = append(out, p)
		}
	}
	return out
}

// runPeers runs every peer at every thread count: for each thread count
// state.json once, then SQLite and both StateIndex modes in c.rounds
// rounds of checkpoints/rounds each, the order rotating every round, so
// that the figures compared in one row were measured minutes apart at most
// and a burst of other load falls on every side alike.
func runPeers(ctx context.Context, c config) (*Output, error) {
	out := &Output{Machine: bench.CurrentMachine(c.dir), Started: time.Now().UTC().Truncate(time.Second), Size: c.size, Rounds: c.rounds}
	begin := time.Now()
	var probes []bench.FsyncProbe
	for _, threads := range c.threads {
		var once, rounded []peer
		for _, p := range c.peers() {
			if _, ok := p.(stateJSON); ok {
				once = append(once, p)
			} else {
				rounded = append(rounded, p)
			}
		}
		for _, p := range once {
			total := c.checkpoints
			if c.stateJSONMax > 0 {
				total = min(total, c.stateJSONMax*threads)
			}
			fig, note, err := c.runOne(ctx, p, total, threads, "")
			if err != nil {
				return nil, err
			}
			out.Runs = append(out.Runs, Run{Peer: p.name(), Threads: threads, Checkpoints: total, Requested: c.checkpoints, Figure: fig, Rounds: []bench.Figure{fig}, Note: note})
		}
		if len(rounded) == 0 {
			continue
		}
		rounds := max(min(c.rounds, c.checkpoints/threads), 1)
		figs := make([][]bench.Figure, len(rounded))
		notes := make([]string, len(rounded))
		for round := range rounds {
			total := c.checkpoints / rounds
			if round < c.checkpoints%rounds {
				total++
			}
			if threads == 1 && c.probeOps > 0 {
				if c.progress != nil {
					fmt.Fprintf(c.progress, "peers: round %d/%d: the disk's floor, 1 KiB overwrite + fdatasync\n", round+1, rounds)
				}
				p, err := probe(c.dir, c.probeOps)
				if err != nil {
					return nil, err
				}
				probes = append(probes, p)
			}
			for k := range rounded {
				i := (k + round) % len(rounded)
				fig, note, err := c.runOne(ctx, rounded[i], total, threads, fmt.Sprintf("round %d/%d: ", round+1, rounds))
				if err != nil {
					return nil, err
				}
				figs[i] = append(figs[i], fig)
				if note != "" {
					notes[i] = note
				}
			}
		}
		for i, p := range rounded {
			out.Runs = append(out.Runs, Run{Peer: p.name(), Threads: threads, Checkpoints: c.checkpoints, Requested: c.checkpoints,
				Figure: bench.MedianFigure(figs[i]), Rounds: figs[i], Note: notes[i]})
		}
	}
	if len(probes) > 0 {
		p := bench.MedianProbe(probes)
		out.Fsync = &p
	}
	out.Seconds = time.Since(begin).Seconds()
	return out, nil
}

// runOne runs one peer once in a new directory.
func (c *config) runOne(ctx context.Context, p peer, total, threads int, label string) (bench.Figure, string, error) {
	if c.progress != nil {
		fmt.Fprintf(c.progress, "peers: %s%s, %d checkpoints of %d B over %d threads\n", label, p.name(), total, c.size, threads)
	}
	dir, err := scratch(c.dir, p.name())
	if err != nil {
		return bench.Figure{}, "", err
	}
	fig, note, err := p.run(ctx, dir, total, threads, c.size)
	if !c.keep {
		_ = os.RemoveAll(dir)
	}
	if err != nil {
		return bench.Figure{}, "", fmt.Errorf("%s, %d threads: %w", p.name(), threads, err)
	}
	return fig, note, nil
}

// probe measures the disk's floor in a new directory under base: ops
// 1 KiB overwrites (and appends), each followed by fdatasync.
func probe(base string, ops int) (bench.FsyncProbe, error) {
	dir, err := scratch(base, "probe")
	if err != nil {
		return bench.FsyncProbe{}, err
	}
	defer os.RemoveAll(dir)
	return bench.ProbeFsync(dir, ops)
}

func scratch(base, name string) (string, error) {
	if base != "" {
		if err := os.MkdirAll(base, 0o700); err != nil {
			return "", err
		}
	}
	return os.MkdirTemp(base, "stateindex-peers-"+strings.NewReplacer(".", "", " ", "-", "=", "-").Replace(name)+"-")
}

// spread runs total checkpoints over threads goroutines, thread i doing its
// share in order through fn(i, k) for k = 0, 1, …, and times each.
func spread(ctx context.Context, total, threads int, fn func(i, k int) error) (bench.Figure, error) {
	lats := make([]bench.Latencies, threads)
	errc := make(chan error, threads)
	var wg sync.WaitGroup
	begin := time.Now()
	for i := range threads {
		mine := total / threads
		if i < total%threads {
			mine++
		}
		lats[i] = make(bench.Latencies, 0, mine)
		wg.Go(func() {
			for k := range mine {
				if err := ctx.Err(); err != nil {
					errc <- err
					return
				}
				if err := lats[i].Time(func() error { return fn(i, k) }); err != nil {
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
		return bench.Figure{}, err
	default:
	}
	return bench.Summarize(bench.Merge(lats), wall), nil
}

func find(runs []Run, peer string, threads int) *Run {
	for i := range runs {
		if runs[i].Peer == peer && runs[i].Threads == threads {
			return &runs[i]
		}
	}
	return nil
}

// peerGoals: issue 10's goals of the same workload and run — at 1
// thread StateIndex (journal) at least as fast as SQLite WAL FULL and its
// p50 within 60 µs of the disk's overwrite-fdatasync p50; at 64 threads at
// least 6× SQLite (issue 4 asked 4×) and journal ÷ journal=off ≥ 1.5.
func peerGoals(runs []Run, fsync *bench.FsyncProbe) []bench.Goal {
	var out []bench.Goal
	if si, sq := find(runs, peerStateIndex, 1), find(runs, peerSQLite, 1); si != nil && sq != nil {
		out = append(out, bench.AtLeast("1 thread: StateIndex ÷ SQLite WAL FULL (checkpoints/s, same workload and run)",
			bench.Ratio(si.Figure.OpsPerSec, sq.Figure.OpsPerSec), 1, "%.2f×"))
	}
	if si := find(runs, peerStateIndex, 1); si != nil && fsync != nil {
		out = append(out, bench.AtMost("1 thread: StateIndex p50 − overwrite-fdatasync p50 (same run)",
			si.Figure.P50us-fsync.Overwrite.P50us, 60, "%.0f µs"))
	}
	if si, sq := find(runs, peerStateIndex, 64), find(runs, peerSQLite, 64); si != nil && sq != nil {
		out = append(out, bench.AtLeast("64 threads: StateIndex ÷ SQLite WAL FULL (checkpoints/s, same workload and run)",
			bench.Ratio(si.Figure.OpsPerSec, sq.Figure.OpsPerSec), 6, "%.2f×"))
	}
	if si, off := find(runs, peerStateIndex, 64), find(runs, peerJournalOff, 64); si != nil && off != nil {
		out = append(out, bench.AtLeast("64 threads: StateIndex journal ÷ journal=off (checkpoints/s)",
			bench.Ratio(si.Figure.OpsPerSec, off.Figure.OpsPerSec), 1.5, "%.2f×"))
	}
	return out
}

func writeSideBySide(w io.Writer, out *Output, c config) error {
	fmt.Fprintf(w, "Peers: durable %d B checkpoints, %d per run spread over the threads, fsync before each is acknowledged (%s, %d CPUs, load average %s at the start; peers took %.0f s)\n",
		out.Size, c.checkpoints, out.Machine.GoVersion, out.Machine.CPUs, out.Machine.LoadAvg, out.Seconds)
	fmt.Fprintf(w, "  state.json: whole state rewritten atomically per checkpoint (tmp, fsync, rename, fsync dir), once per thread count\n")
	fmt.Fprintf(w, "  SQLite: WAL, synchronous=FULL, one txn per checkpoint (modernc.org/sqlite)\n")
	fmt.Fprintf(w, "  StateIndex: AddContextHandle through the Client, one scope per thread, group commit; journal: the write-ahead journal (default),\n")
	fmt.Fprintf(w, "  journal=off: every group commit a bbolt transaction. SQLite and StateIndex: medians of %d rounds (%d checkpoints each), order rotating.\n",
		out.Rounds, c.checkpoints/max(out.Rounds, 1))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format, args...) }
	peers := c.peers()
	line1, line2 := "\t", "threads"
	for _, pr := range peers {
		line1 += "│\t" + label(pr.name()) + "\t\t\t"
		line2 += "\t│\tops/s\tp50 µs\tp99 µs"
	}
	line1 += "│\tStateIndex (journal) ÷\t\t\t\n"
	line2 += "\t│\tSQLite\tjournal=off\tstate.json\t\n"
	p("%s%s", line1, line2)
	for _, t := range c.threads {
		row := strconv.Itoa(t)
		for _, pr := range peers {
			r := find(out.Runs, pr.name(), t)
			if r == nil {
				row += "\t│\t-\t-\t-"
				continue
			}
			row += fmt.Sprintf("\t│\t%s\t%s\t%s", num(r.Figure.OpsPerSec), num(r.Figure.P50us), num(r.Figure.P99us))
		}
		ratio := func(peer string) string {
			si, o := find(out.Runs, peerStateIndex, t), find(out.Runs, peer, t)
			if si == nil || o == nil {
				return "-"
			}
			return fmt.Sprintf("%.2f×", bench.Ratio(si.Figure.OpsPerSec, o.Figure.OpsPerSec))
		}
		p("%s\t│\t%s\t%s\t%s\t\n", row, ratio(peerSQLite), ratio(peerJournalOff), ratio(peerStateJSON))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if f := out.Fsync; f != nil {
		fmt.Fprintf(w, "  Disk floor in the 1-thread rounds (median): 1 KiB pwrite into a preallocated, written file + fdatasync p50 %s µs (mean %s);\n",
			num(f.Overwrite.P50us), num(f.Overwrite.MeanUs))
		fmt.Fprintf(w, "  1 KiB append + fdatasync p50 %s µs (mean %s).", num(f.Append.P50us), num(f.Append.MeanUs))
		if si := find(out.Runs, peerStateIndex, 1); si != nil {
			fmt.Fprintf(w, " StateIndex (journal), 1 thread: p50 %s µs = overwrite p50 %s µs.", num(si.Figure.P50us), signedNum(si.Figure.P50us-f.Overwrite.P50us))
		}
		fmt.Fprintln(w)
	}
	for _, r := range out.Runs {
		if r.Checkpoints < r.Requested {
			fmt.Fprintf(w, "  %s, %d thread(s): ran %s of %s checkpoints (--statejson-max-per-thread %d); its rate falls as its state grows, so the full run would be slower still.\n",
				r.Peer, r.Threads, count(r.Checkpoints), count(r.Requested), c.stateJSONMax)
		}
	}
	for _, r := range out.Runs {
		if r.Note != "" {
			fmt.Fprintf(w, "  %s, %d thread(s): %s\n", r.Peer, r.Threads, r.Note)
		}
	}
	return nil
}

func count(n int) string { return bench.Num(float64(n)) }

// label is a peer's column heading.
func label(name string) string {
	switch name {
	case peerSQLite:
		return "SQLite WAL FULL"
	case peerStateIndex:
		return "StateIndex journal"
	}
	return name
}

func signedNum(v float64) string {
	if v < 0 {
		return "− " + bench.Num(-v)
	}
	return "+ " + bench.Num(v)
}

func num(v float64) string { return bench.Num(v) }
