package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/internal/verify"
)

func init() {
	register(command{name: "compact", summary: "--data DIR   rewrite the data file without its free pages (offline)", run: compactCmd})
}

func compactCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("compact")
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: stateindex compact --data DIR

Rewrites DIR/stateindex.db without its free pages and gives the space back
to the file system. bbolt never shrinks its file: what retention, destroy
or replaced snapshots free is reused, but the file keeps the largest size
it ever reached. Run compact, with the server stopped, after much history
was removed. It needs free disk space about the size of the live data.

The new file is written next to the old one (`+filepath.Base(eventstore.CompactTempPath(dbFile))+`),
synced, verified and compared key by key with the old one, then renamed
over it: a crash leaves the old file or the new one, never a mix (the
next run removes a temporary file a crash left). Records, heads,
snapshots and identity are unchanged.

`+recoveryNote+"\n")
		fs.PrintDefaults()
	}
	dir := fs.String("data", "./data", "data directory")
	timeout := fs.Duration("timeout", time.Second, "how long to wait for a file another process holds")
	if err := parseArgs(fs, args, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	path := filepath.Join(*dir, dbFile)
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("no data file at %s: %w", path, err)
	}
	res, err := eventstore.Compact(context.Background(), path, eventstore.CompactOptions{OpenTimeout: *timeout})
	if err != nil {
		if errors.Is(err, eventstore.ErrLocked) {
			return fmt.Errorf("%w (a server is running on %s: compact works offline, stop the server first)", err, *dir)
		}
		return err
	}
	if res.RemovedTemp {
		fmt.Fprintf(stdout, "removed %s, left by a compaction a crash interrupted\n", eventstore.CompactTempPath(path))
	}
	j := verify.JournalOnDisk(path)
	j.Replay, j.Warnings = res.Replay, res.Warnings
	fmt.Fprintln(stdout, journalLine(j))
	for _, w := range res.Warnings {
		fmt.Fprintln(stdout, "warning:", w)
	}
	ratio := 0.0
	if res.BeforeBytes > 0 {
		ratio = float64(res.AfterBytes) / float64(res.BeforeBytes)
	}
	given := fmt.Sprintf("%d bytes given back", res.BeforeBytes-res.AfterBytes)
	if res.AfterBytes >= res.BeforeBytes {
		given = "nothing to give back"
	}
	fmt.Fprintf(stdout, "compacted %s: %d → %d bytes (%.1f%% of before, %s)\n",
		path, res.BeforeBytes, res.AfterBytes, 100*ratio, given)
	fmt.Fprintf(stdout, "  the old file had %d free pages of %d bytes (%d bytes) and %d preallocated bytes at its end\n",
		res.FreePages, res.PageSize, res.FreeBytes, res.TailBytes)
	fmt.Fprintf(stdout, "  %d stream(s), last sequence %d: verified and equal to the old file\n", res.Streams, res.LastSeq)
	return nil
}
