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
//	    github.com/stateindex/stateindex/bench).
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

type stateIndex struct{ shards int }

func (stateIndex) name() string { return "StateIndex" }

func (s stateIndex) run(ctx context.Context, dir string, total, threads, size int) (bench.Figure, string, error) {
	fig, err := bench.Checkpoints(ctx, bench.CheckpointOptions{Total: total, Threads: threads, Size: size, Dir: dir, Shards: s.shards})
	return fig, "", err
}

// Run is one peer at one thread count.
type Run struct {
	Peer    string `json:"peer"`
	Threads int    `json:"threads"`
	// Checkpoints is how many the peer ran: fewer than Requested when
	// capped (state.json with one large thread).
	Checkpoints int          `json:"checkpoints"`
	Requested   int          `json:"requested"`
	Figure      bench.Figure `json:"figure"`
	Note        string       `json:"note,omitempty"`
}

// Output is what --json-out writes.
type Output struct {
	Machine    bench.Machine `json:"machine"`
	Started    time.Time     `json:"started"`
	Seconds    float64       `json:"seconds"`
	Size       int           `json:"checkpoint_bytes"`
	Runs       []Run         `json:"runs"`
	Goals      []bench.Goal  `json:"goals,omitempty"`
	StateIndex *bench.Report `json:"stateindex,omitempty"`
}

type config struct {
	checkpoints, size, stateJSONMax, shards int
	threads                                 []int
	dir                                     string
	keep                                    bool
	only                                    []string
	progress                                io.Writer
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
	fs.IntVar(&c.shards, "shards", 0, "StateIndex shards (0: the default)")
	fs.StringVar(&c.dir, "dir", "", "where the peers' files go (default: the system's temporary directory)")
	fs.BoolVar(&c.keep, "keep", false, "keep the peers' files")
	only := fs.String("only", "", "comma-separated peers to run: statejson, sqlite, stateindex (default: all)")
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
	if c.checkpoints < 1 || c.size < 1 || c.stateJSONMax < 0 {
		return errors.New("--checkpoints and --size must be >= 1, --statejson-max-per-thread >= 0")
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
	out.Goals = peerGoals(out.Runs)
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
		fmt.Fprintf(stdout, "\nGoals (issue 4):\n")
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
	all := []peer{stateJSON{}, sqliteRegistry{}, stateIndex{shards: c.shards}}
	keys := []string{"statejson", "sqlite", "stateindex"}
	var out []peer
	for i, p := range all {
		if len(c.only) == 0 || slices.Contains(c.only, keys[i]) {
			out = append(out, p)
		}
	}
	return out
}

// runPeers runs every peer at every thread count: for each thread count
// the peers one after another, so that the figures compared in one row
// were measured minutes apart at most.
func runPeers(ctx context.Context, c config) (*Output, error) {
	out := &Output{Machine: bench.CurrentMachine(c.dir), Started: time.Now().UTC().Truncate(time.Second), Size: c.size}
	begin := time.Now()
	for _, threads := range c.threads {
		for _, p := range c.peers() {
			total := c.checkpoints
			if _, ok := p.(stateJSON); ok && c.stateJSONMax > 0 {
				total = min(total, c.stateJSONMax*threads)
			}
			if c.progress != nil {
				fmt.Fprintf(c.progress, "peers: %s, %d checkpoints of %d B over %d threads\n", p.name(), total, c.size, threads)
			}
			dir, err := scratch(c.dir, p.name())
			if err != nil {
				return nil, err
			}
			fig, note, err := p.run(ctx, dir, total, threads, c.size)
			if !c.keep {
				_ = os.RemoveAll(dir)
			}
			if err != nil {
				return nil, fmt.Errorf("%s, %d threads: %w", p.name(), threads, err)
			}
			out.Runs = append(out.Runs, Run{Peer: p.name(), Threads: threads, Checkpoints: total, Requested: c.checkpoints, Figure: fig, Note: note})
		}
	}
	out.Seconds = time.Since(begin).Seconds()
	return out, nil
}

func scratch(base, name string) (string, error) {
	if base != "" {
		if err := os.MkdirAll(base, 0o700); err != nil {
			return "", err
		}
	}
	return os.MkdirTemp(base, "stateindex-peers-"+strings.ReplaceAll(name, ".", "")+"-")
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

// peerGoals: StateIndex at least 4× SQLite FULL at 64 threads.
func peerGoals(runs []Run) []bench.Goal {
	si, sq := find(runs, "StateIndex", 64), find(runs, "SQLite", 64)
	if si == nil || sq == nil {
		return nil
	}
	return []bench.Goal{bench.AtLeast("64 threads: StateIndex ÷ SQLite WAL FULL (checkpoints/s, same workload and run)",
		bench.Ratio(si.Figure.OpsPerSec, sq.Figure.OpsPerSec), 4, "%.2f×")}
}

func writeSideBySide(w io.Writer, out *Output, c config) error {
	fmt.Fprintf(w, "Peers: durable %d B checkpoints, %d per run spread over the threads, fsync before each is acknowledged (%s, %d CPUs, load average %s at the start; peers took %.0f s)\n",
		out.Size, c.checkpoints, out.Machine.GoVersion, out.Machine.CPUs, out.Machine.LoadAvg, out.Seconds)
	fmt.Fprintf(w, "  state.json: whole state rewritten atomically per checkpoint (tmp, fsync, rename, fsync dir)  SQLite: WAL, synchronous=FULL, one txn per checkpoint (modernc.org/sqlite)\n")
	fmt.Fprintf(w, "  StateIndex: AddContextHandle through the Client, one scope per thread, group commit\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format, args...) }
	peers := c.peers()
	line1, line2 := "\t", "threads"
	for _, pr := range peers {
		line1 += "│\t" + pr.name() + "\t\t\t\t"
		line2 += "\t│\tcheckpoints\tops/s\tp50 µs\tp99 µs"
	}
	line1 += "│\tStateIndex ÷\t\t\n"
	line2 += "\t│\tSQLite\tstate.json\t\n"
	p("%s%s", line1, line2)
	for _, t := range c.threads {
		row := strconv.Itoa(t)
		for _, pr := range peers {
			r := find(out.Runs, pr.name(), t)
			if r == nil {
				row += "\t│\t-\t-\t-\t-"
				continue
			}
			row += fmt.Sprintf("\t│\t%s\t%s\t%s\t%s", count(r.Checkpoints), num(r.Figure.OpsPerSec), num(r.Figure.P50us), num(r.Figure.P99us))
		}
		ratio := func(peer string) string {
			si, o := find(out.Runs, "StateIndex", t), find(out.Runs, peer, t)
			if si == nil || o == nil {
				return "-"
			}
			return fmt.Sprintf("%.2f×", bench.Ratio(si.Figure.OpsPerSec, o.Figure.OpsPerSec))
		}
		p("%s\t│\t%s\t%s\t\n", row, ratio("SQLite"), ratio("state.json"))
	}
	if err := tw.Flush(); err != nil {
		return err
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

func num(v float64) string { return bench.Num(v) }
