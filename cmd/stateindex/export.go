package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/stateindex/stateindex/eventstore"
)

func init() {
	register(command{name: "export", summary: "--data DIR [--scope S] [--from SEQ]   write records as JSON Lines to stdout", run: exportCmd})
}

// exportRecord is one line of export's output.
type exportRecord struct {
	Stream  string `json:"stream"`
	Version int64  `json:"version"`
	Seq     uint64 `json:"seq"`
	Type    string `json:"type"`
	Data    []byte `json:"data"` // base64
	Hash    string `json:"hash"` // hex SHA-256 of the stored record
}

func exportCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: stateindex export --data DIR [--scope S] [--from SEQ]

Writes the records of DIR/stateindex.db to stdout as JSON Lines, in global
sequence order: {"stream","version","seq","type","data" (base64),"hash"
(hex)}. --scope keeps one scope's records; --from skips those with a global
sequence below SEQ. A summary goes to stderr.

`+recoveryNote+"\n")
		fs.PrintDefaults()
	}
	dir := fs.String("data", "./data", "data directory")
	scope := fs.String("scope", "", "only this scope's records")
	from := fs.Uint64("from", 1, "first global sequence to write")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	store, err := openStore(*dir, false, time.Second, true)
	if err != nil {
		if errors.Is(err, eventstore.ErrLocked) {
			return fmt.Errorf("%w (a server is running: stop it, or export a copy made by \"stateindex backup\")", err)
		}
		return err
	}
	defer store.Close()
	ctx := context.Background()
	w := bufio.NewWriterSize(stdout, 64<<10)
	enc := json.NewEncoder(w)
	n := 0
	emit := func(r eventstore.Record) error {
		if r.Seq < *from {
			return nil
		}
		n++
		return enc.Encode(exportRecord{Stream: r.Stream, Version: r.Version, Seq: r.Seq, Type: r.Type, Data: r.Data, Hash: hex.EncodeToString(r.Hash[:])})
	}
	if *scope != "" {
		var info eventstore.StreamInfo
		if info, err = store.Stream(ctx, *scope); err != nil {
			return err
		}
		if info.Version == 0 {
			return fmt.Errorf("no scope %q in %s", *scope, *dir)
		}
		err = store.ReadStream(ctx, *scope, 1, emit)
	} else {
		err = store.ReadAll(ctx, *from, emit)
	}
	if err != nil {
		_ = w.Flush()
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "exported %d record(s)\n%s\n", n, journalLine(storeJournal(store)))
	return nil
}
