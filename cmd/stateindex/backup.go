package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/stateindex/stateindex/eventstore"
)

func init() {
	register(command{name: "backup", summary: "--data DIR --to FILE   consistent copy of the data file, from a running server or offline", run: backupCmd})
}

func backupCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("backup")
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: stateindex backup --data DIR --to FILE

Writes a consistent, standalone copy of DIR/stateindex.db to FILE (which
must not exist): every record acknowledged before the backup began,
including those still only in the write-ahead journal. Restore by starting
a server on a directory holding FILE as stateindex.db.

If a server runs on DIR, it makes the copy (asked over DIR/`+adminSocket+`)
while it goes on serving. Otherwise the store is opened here (offline);
opening it applies to bbolt any journal tail a stopped server left (the
recovery step every open performs).

`)
		fs.PrintDefaults()
	}
	dir := fs.String("data", "./data", "data directory")
	to := fs.String("to", "", "the backup file to write (must not exist)")
	timeout := fs.Duration("timeout", 10*time.Minute, "how long to wait for the backup")
	if err := parseArgs(fs, args, stdout, stderr); err != nil {
		return err
	}
	if *to == "" {
		fs.Usage()
		return errUsage
	}
	abs, err := filepath.Abs(*to)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	rep, err := adminCall(ctx, *dir, adminRequest{Op: "backup", To: abs})
	switch {
	case err == nil && rep.Error != "":
		return errors.New(rep.Error)
	case err == nil:
		fmt.Fprintf(stdout, "online backup by the running server: %s\n", abs)
		printBackup(stdout, eventstore.BackupInfo{Records: rep.Records, LastSeq: rep.LastSeq, Bytes: rep.Bytes, JournalRecords: rep.JournalRecords})
		return nil
	case !errors.Is(err, errNoServer):
		return err
	}
	store, err := openStore(*dir, false, time.Second, true)
	if err != nil {
		return fmt.Errorf("offline backup (no server answers on %s): %w", filepath.Join(*dir, adminSocket), err)
	}
	info, err := store.Backup(ctx, abs)
	if cerr := store.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "offline backup (no server running on %s): %s\n", *dir, abs)
	if r := store.Replay(); r.Records > 0 {
		fmt.Fprintf(stdout, "  opening the store applied %d journaled records to bbolt first (sequences %d..%d)\n", r.Records, r.FromSeq, r.ToSeq)
	}
	printBackup(stdout, info)
	return nil
}

func printBackup(w io.Writer, info eventstore.BackupInfo) {
	if info.LastSeq == 0 {
		fmt.Fprintf(w, "  0 records, %d bytes\n", info.Bytes)
		return
	}
	fmt.Fprintf(w, "  %d records (sequences 1..%d, %d of them from the journal), %d bytes\n",
		info.Records, info.LastSeq, info.JournalRecords, info.Bytes)
}
