package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/internal/verify"
)

// checkpointPubFile is where verify looks for the checkpoint signing key's
// public half when --public-key is not given.
const checkpointPubFile = "checkpoint.pub"

func init() {
	register(command{name: "verify", summary: "--data DIR [--public-key FILE] | --store URL|env:NAME [--public-key FILE] | --archive FILE | --transcript FILE [--public-key FILE]   check every stream (chains, replay, snapshots, signatures), or an archive or a chain transcript offline", run: verifyCmd})
}

// verifyCmd checks a data file and exits 0 only if nothing is wrong; each
// problem is one line naming the stream and version.
func verifyCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("verify")
	fs.SetOutput(stderr)
	dir := fs.String("data", "./data", "data directory")
	pubPath := fs.String("public-key", "", "Ed25519 public key of the checkpoint signing key (hex or 32 raw bytes); default DIR/"+checkpointPubFile+" if present")
	timeout := fs.Duration("timeout", time.Second, "how long to wait for a file another process holds")
	archive := fs.String("archive", "", "check this archive file (written by retention) offline instead of a data directory")
	transcript := fs.String("transcript", "", "check this chain transcript (export --chain --format jsonl) offline instead of a data directory")
	storeFlag := fs.String("store", "", storeFlagUsage)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: stateindex verify --data DIR [--public-key FILE]\n"+
			"       stateindex verify --store URL|env:NAME [--public-key FILE]\n"+
			"       stateindex verify --archive FILE [--public-key FILE]\n"+
			"       stateindex verify --transcript FILE [--public-key FILE]\n\n"+
			"Checks DIR/stateindex.db end to end and exits 0 only if nothing is wrong.\n"+
			"With --archive, checks an archive of removed history: every record's\n"+
			"bytes against its hash, the chain from the archive's first record to its\n"+
			"last, and (with a public key) every signed checkpoint in it.\n"+
			"With --transcript, checks a chain's transcript the same way, from the\n"+
			"hash its header names before its first record, and reports the first\n"+
			"bad line.\n"+
			"With --store, checks a PostgreSQL store the same way (every stream's\n"+
			"chain, the global order, replay, snapshots, checkpoints); without\n"+
			"--public-key, signatures are checked with the key the store keeps.\n\n"+recoveryNote+"\n")
		fs.PrintDefaults()
	}
	if err := parseArgs(fs, args, stdout, stderr); err != nil {
		return err
	}
	if *transcript != "" {
		return verifyTranscript(*transcript, *pubPath, stdout)
	}
	if *storeFlag != "" {
		return verifyShared(*storeFlag, *pubPath, stdout)
	}
	if *archive != "" {
		var pub ed25519.PublicKey
		if *pubPath != "" {
			k, err := loadPublicKey(*pubPath)
			if err != nil {
				return fmt.Errorf("--public-key: %w", err)
			}
			pub = k
		}
		info, err := eventstore.VerifyArchive(*archive, pub)
		if err != nil {
			return &exitError{code: 1, err: err}
		}
		sig := "signatures not checked (no public key)"
		if pub != nil {
			sig = fmt.Sprintf("%d signatures verified", info.SignaturesVerified)
		}
		fmt.Fprintf(stdout, "ok: archive %s: stream %q versions %d..%d, %d records chained from %x… to %x…, %d checkpoints, %s; sha256 %s\n",
			*archive, info.Stream, info.From, info.Through, info.Records, info.Prev[:4], info.Head[:4], info.Checkpoints, sig, info.SHA256)
		return nil
	}
	opts := verify.Options{LockTimeout: *timeout}
	keyFile := *pubPath
	if keyFile == "" {
		if _, err := os.Stat(filepath.Join(*dir, checkpointPubFile)); err == nil {
			keyFile = filepath.Join(*dir, checkpointPubFile)
		}
	}
	if keyFile != "" {
		pub, err := loadPublicKey(keyFile)
		if err != nil {
			return fmt.Errorf("--public-key: %w", err)
		}
		opts.PublicKey = pub
	}
	path := filepath.Join(*dir, dbFile)
	sum, err := verify.File(context.Background(), path, opts, func(p verify.Problem) {
		fmt.Fprintln(stdout, p)
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, journalLine(sum.Journal))
	for _, w := range sum.Journal.Warnings {
		fmt.Fprintln(stdout, "warning:", w)
	}
	for _, w := range sum.Warnings {
		fmt.Fprintln(stdout, "warning:", w)
	}
	sig := "signatures not checked (no public key)"
	if opts.PublicKey != nil {
		sig = fmt.Sprintf("%d signatures verified", sum.SignaturesVerified)
	}
	if sum.Problems > 0 {
		if sum.PageCheckSkippedBbolt {
			fmt.Fprintln(stdout, "the file's page structure is damaged: the stream checks were not run (the storage engine cannot read such a file safely)")
		}
		return &exitError{code: 1, err: fmt.Errorf("%s: %d problem(s) found", path, sum.Problems)}
	}
	removed := ""
	if sum.Removed > 0 {
		removed = fmt.Sprintf(", %d with removed history matching its record", sum.Removed)
	}
	fmt.Fprintf(stdout, "ok: %s: %d streams%s, %d records, %d snapshots equal to their replay, %d checkpoints, %s\n",
		path, sum.Streams, removed, sum.Records, sum.Snapshots, sum.Checkpoints, sig)
	return nil
}

// loadPublicKey reads an Ed25519 public key: 64 hex digits or 32 raw bytes.
func loadPublicKey(path string) (ed25519.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if t := bytes.TrimSpace(b); len(t) == 2*ed25519.PublicKeySize {
		if k, err := hex.DecodeString(string(t)); err == nil {
			return ed25519.PublicKey(k), nil
		}
	}
	if len(b) == ed25519.PublicKeySize {
		return ed25519.PublicKey(b), nil
	}
	return nil, errors.New(path + ": not an Ed25519 public key (64 hex digits or 32 bytes)")
}

// verifyShared checks a shared (PostgreSQL) store as verifyCmd checks a
// data file. Without --public-key the signatures are checked against the
// public half of the key the store keeps: that proves the chains against
// accidents and against anyone who cannot write the database, not against
// someone who can (they could replace the key as well): keep the public
// key serve logs at start (checkpoint_public_key) and give it with
// --public-key.
func verifyShared(flag, pubPath string, stdout io.Writer) error {
	url, err := resolveStoreFlag(flag)
	if err != nil {
		return err
	}
	ctx := context.Background()
	st, where, err := openSharedStore(ctx, url, nil)
	if err != nil {
		return err
	}
	defer st.Close()
	var opts verify.Options
	keyNote := "signatures not checked (no public key)"
	switch {
	case pubPath != "":
		pub, err := loadPublicKey(pubPath)
		if err != nil {
			return fmt.Errorf("--public-key: %w", err)
		}
		opts.PublicKey = pub
	default:
		pub, ok, err := sharedPublicKey(ctx, st)
		if err != nil {
			return err
		}
		if ok {
			opts.PublicKey = pub
			keyNote = ""
			fmt.Fprintf(stdout, "public key %s: from the store's own checkpoint key (give --public-key to check against a key kept elsewhere)\n", hex.EncodeToString(pub))
		}
	}
	sum, err := verify.Store(ctx, st, opts, func(p verify.Problem) { fmt.Fprintln(stdout, p) })
	if err != nil {
		return err
	}
	for _, w := range sum.Warnings {
		fmt.Fprintln(stdout, "warning:", w)
	}
	if opts.PublicKey != nil {
		keyNote = fmt.Sprintf("%d signatures verified", sum.SignaturesVerified)
	}
	if sum.Problems > 0 {
		return &exitError{code: 1, err: fmt.Errorf("postgres %s: %d problem(s) found", where, sum.Problems)}
	}
	removed := ""
	if sum.Removed > 0 {
		removed = fmt.Sprintf(", %d with removed history matching its record", sum.Removed)
	}
	fmt.Fprintf(stdout, "ok: postgres %s: %d streams%s, %d records, %d snapshots equal to their replay, %d checkpoints, %s\n",
		where, sum.Streams, removed, sum.Records, sum.Snapshots, sum.Checkpoints, keyNote)
	return nil
}
