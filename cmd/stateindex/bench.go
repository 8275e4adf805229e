package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/stateindex/stateindex/bench"
)

func init() {
	register(command{name: "bench", summary: "[--json] [--scale X] [--rounds N] [--only LIST] [--storage-events N] [--storage-pages LIST]   run the fixed benchmarks: durable, assemble, resume, storage, remote, longlived, ledger, state, partial", run: benchCmd})
}

func benchCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench")
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the figures as JSON instead of tables")
	dir := fs.String("dir", "", "where scenario files go (default: the system's temporary directory; use a real disk, not tmpfs)")
	keep := fs.Bool("keep", false, "keep the scenario files")
	scale := fs.Float64("scale", 1, "multiply every count (requests, handles, events, repetitions) by this")
	shards := fs.Int("shards", 0, "StateIndex shards (0: the default)")
	rounds := fs.Int("rounds", bench.DefaultRounds, "rounds of the durable scenario, journal and journal=off runs alternating; figures are medians")
	only := fs.String("only", "", "comma-separated scenarios to run: "+strings.Join(bench.Scenarios, ", ")+" (default: all)")
	storageEvents := fs.Int("storage-events", 0, fmt.Sprintf("events the storage scenario writes (0: %d × scale; the journal is a bound of 64 MiB: ~400000 make it under 5%% of the directory)", bench.DefaultStorageEvents))
	storagePages := fs.String("storage-pages", "", "comma-separated page sizes in bytes the storage scenario runs with, 0 for the OS page (default: 0,16384)")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: stateindex bench [flags]\n\n"+
			"Runs fixed scenarios on this machine's disk (every durable figure fsyncs) and prints\n"+
			"tables, or JSON with --json. Figures of one run compare; figures of two runs may not.\n\n")
		fs.PrintDefaults()
	}
	if err := parseArgs(fs, args, stdout, stderr); err != nil {
		return err
	}
	pages, err := pageSizes(*storagePages)
	if fs.NArg() > 0 || *scale <= 0 || *rounds < 1 || *storageEvents < 0 || err != nil {
		if err != nil {
			fmt.Fprintf(stderr, "bench: --storage-pages: %v\n", err)
		}
		fs.Usage()
		return errUsage
	}
	o := bench.Options{Dir: *dir, Keep: *keep, Scale: *scale, Shards: *shards, Rounds: *rounds,
		StorageEvents: *storageEvents, StoragePages: pages}
	if *only != "" {
		o.Only = strings.Split(*only, ",")
	}
	if !*quiet {
		o.Progress = stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := bench.Run(ctx, o)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return bench.WriteText(stdout, rep)
}

// pageSizes parses --storage-pages: byte counts, 0 for the OS page.
func pageSizes(list string) ([]int, error) {
	if list == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q is not a page size in bytes", f)
		}
		out = append(out, n)
	}
	return out, nil
}
