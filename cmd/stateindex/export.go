package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
)

func init() {
	register(command{name: "export", summary: "--data DIR [--scope S [--chain ID] [--format jsonl|md] [--archives DIR]] [--from SEQ]   write records (a scope's whole history, or a chain's transcript) to stdout; --scope S [--frame F] --format state.json: one run in the seed's state schema", run: exportCmd})
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

// scopeRecord is one record of a scope's export: an exportRecord with its
// predecessor's hash (the chain) and where it was read ("archive" or
// "store").
type scopeRecord struct {
	Stream  string `json:"stream"`
	Version int64  `json:"version"`
	Seq     uint64 `json:"seq"`
	Type    string `json:"type"`
	Data    []byte `json:"data"`
	Prev    string `json:"prev"`
	Hash    string `json:"hash"`
	From    string `json:"from"`
}

// missingLine stands, in a scope's export, for versions that are in no
// archive: deleted by retention (on_completion: delete) or removed by
// something this export cannot read. Hash is the hex hash of the last
// missing record when known: the next record names it as its prev.
type missingLine struct {
	Stream  string       `json:"stream"`
	Missing missingRange `json:"missing"`
}

type missingRange struct {
	From       int64  `json:"from"`
	Through    int64  `json:"through"`
	Hash       string `json:"hash,omitempty"`
	RecordedAt int64  `json:"recorded_at,omitempty"` // the version of the scope.retention_applied that removed them
	Why        string `json:"why"`
}

func exportCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("export")
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: stateindex export --data DIR [--from SEQ]
       stateindex export --data DIR --scope S [--format jsonl] [--archives DIR] [--from SEQ]
       stateindex export --data DIR --scope S --chain ID [--format jsonl|md] [--archives DIR]
       stateindex export --data DIR --scope S [--frame F] --format state.json

Without --scope, writes the records of DIR/stateindex.db to stdout as JSON
Lines, in global sequence order: {"stream","version","seq","type","data"
(base64),"hash" (hex)}.

With --scope, writes the scope's whole history in version order: first the
records retention archived (read from the archive files its
scope.retention_applied events name, each checked as "verify --archive"
does and against the digest the event recorded), then the stored records.
Each line also carries "prev" (the hash the record names as its
predecessor: the lines form one chain from version 1) and "from"
("archive" or "store"). History deleted without an archive
(on_completion: delete) is never skipped silently: a line
{"stream","missing":{"from","through","hash","recorded_at","why"}} stands
for it, where the next record's prev is "hash", and stderr says so. An
archive that is not where its event says (moved elsewhere) is looked for
as ARCHIVES/SCOPE/FILE with --archives. --format: jsonl (state.json
writes one run instead: see below).

--from skips records with a global sequence below SEQ. A summary goes to
stderr.

With --chain, writes the transcript of the continuation chain frame ID is
a link of (any link): with --format jsonl, a header line
{"stateindex_transcript":1,"scope","chain","links","head_link","from",
"through","prev","head","records"} and the records of the version range
that covers the chain, exactly as stored (as archives hold them: "raw",
"hash"), then the signed checkpoints in the range — check it offline with
"stateindex verify --transcript FILE --public-key KEY"; with --format md,
a readable rendering: each link's goal, budget and cost, its handles in
order, tool calls with their results, results, and the handoffs.

With --format state.json, writes one run as a JSON document of the seed's
state schema (state-persistence-checkpoints.md): frame F (default: the
root of the scope's current top of stack, else of its most recently pushed
live frame), live or finished (a finished frame is read from the log),
with its identity, inputs, cost (spend in dollars), limits (null where
unlimited), status mapped onto running, suspended, completed, error and
cancelled, suspension and limit metadata, messages from its context by
role, and its partial output (partial_cognition). See the README's
"state.json" section for the mapping.

`+recoveryNote+"\n")
		fs.PrintDefaults()
	}
	dir := fs.String("data", "./data", "data directory")
	scope := fs.String("scope", "", "write this scope's whole history (archived and stored)")
	format := fs.String("format", "jsonl", "output format (with --scope): jsonl or state.json; with --chain jsonl or md")
	chain := fs.String("chain", "", "with --scope: the transcript of the chain this frame is a link of")
	frame := fs.String("frame", "", "with --scope and --format state.json: the frame to write (default: the current root)")
	archives := fs.String("archives", "", "with --scope: look for archive files under this directory (ARCHIVES/SCOPE/FILE) before where their events say")
	from := fs.Uint64("from", 1, "first global sequence to write")
	if err := parseArgs(fs, args, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "stateindex export: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	if *format != "jsonl" && !(*format == "md" && *chain != "") && *format != formatStateJSON {
		fmt.Fprintf(stderr, "stateindex export: unknown --format %q (known: jsonl, state.json); md needs --chain\n", *format)
		fs.Usage()
		return errUsage
	}
	if *format == formatStateJSON && (*scope == "" || *chain != "" || *archives != "") {
		fmt.Fprintln(stderr, "stateindex export: --format state.json needs --scope (and takes neither --chain nor --archives)")
		fs.Usage()
		return errUsage
	}
	if *frame != "" && (*scope == "" || *format != formatStateJSON) {
		fmt.Fprintln(stderr, "stateindex export: --frame needs --scope and --format state.json")
		fs.Usage()
		return errUsage
	}
	if *scope == "" && (*archives != "" || *chain != "") {
		fmt.Fprintln(stderr, "stateindex export: --archives and --chain need --scope")
		fs.Usage()
		return errUsage
	}
	if *scope == "" && *archives != "" {
		fmt.Fprintln(stderr, "stateindex export: --archives needs --scope")
		fs.Usage()
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
	if *format == formatStateJSON {
		err = exportStateJSON(ctx, store, *dir, *scope, *frame, w, stderr)
	} else if *chain != "" {
		err = exportChain(ctx, store, *scope, *chain, *format, *archives, w, stderr)
	} else if *scope != "" {
		err = exportScope(ctx, store, *dir, *scope, *archives, *from, w, stderr)
	} else {
		err = exportAll(ctx, store, *from, w, stderr)
	}
	if err != nil {
		_ = w.Flush()
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(stderr, journalLine(storeJournal(store)))
	return nil
}

// exportAll writes every stored record from global sequence from on.
func exportAll(ctx context.Context, store *eventstore.BoltStore, from uint64, w io.Writer, stderr io.Writer) error {
	enc := json.NewEncoder(w)
	n := 0
	err := store.ReadAll(ctx, from, func(r eventstore.Record) error {
		if r.Seq < from {
			return nil
		}
		n++
		return enc.Encode(exportRecord{Stream: r.Stream, Version: r.Version, Seq: r.Seq, Type: r.Type, Data: r.Data, Hash: hex.EncodeToString(r.Hash[:])})
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "exported %d record(s)\n", n)
	return nil
}

// segment is a removed part of a scope's history: an archive, or a gap.
type segment struct {
	from, through int64
	prev, head    eventstore.Hash // prev: zero for a gap (unknown)
	archive       string          // the archive file; "" for a gap
	digest        string          // its SHA-256, as the event recorded it
	recordedAt    int64           // the version of the event that removed it
	why           string          // for a gap
}

// exportScope writes scope's whole history: the archives (and gaps) that
// its removals left, oldest first, then what the store holds. Everything
// is checked before the first line is written.
func exportScope(ctx context.Context, store *eventstore.BoltStore, dataDir, scope, archiveDir string, from uint64, w io.Writer, stderr io.Writer) error {
	info, err := store.Stream(ctx, scope)
	if err != nil {
		return err
	}
	if info.Version == 0 {
		return fmt.Errorf("no scope %q in %s", scope, dataDir)
	}
	base, err := store.StreamBase(ctx, scope)
	if err != nil {
		return err
	}
	// The removals the stored records name.
	removals := map[int64]removal{}
	if base.Version > 0 {
		if err := store.ReadStream(ctx, scope, base.Version+1, func(r eventstore.Record) error {
			return noteRemoval(removals, r)
		}); err != nil {
			return err
		}
	}
	segs, err := planSegments(scope, base, removals, archiveDir)
	if err != nil {
		return err
	}

	enc := json.NewEncoder(w)
	var archived, stored int64
	var missing []segment
	emit := func(r eventstore.Record, where string) error {
		if r.Seq < from {
			return nil
		}
		if where == "archive" {
			archived++
		} else {
			stored++
		}
		return enc.Encode(scopeRecord{Stream: r.Stream, Version: r.Version, Seq: r.Seq, Type: r.Type, Data: r.Data,
			Prev: hex.EncodeToString(r.PrevHash[:]), Hash: hex.EncodeToString(r.Hash[:]), From: where})
	}
	for _, s := range segs {
		if s.archive == "" {
			missing = append(missing, s)
			m := missingRange{From: s.from, Through: s.through, RecordedAt: s.recordedAt, Why: s.why}
			if s.head != (eventstore.Hash{}) {
				m.Hash = hex.EncodeToString(s.head[:])
			}
			if err := enc.Encode(missingLine{Stream: scope, Missing: m}); err != nil {
				return err
			}
			continue
		}
		if err := readArchive(s, scope, func(r eventstore.Record) error { return emit(r, "archive") }); err != nil {
			return err
		}
	}
	if err := store.ReadStream(ctx, scope, base.Version+1, func(r eventstore.Record) error { return emit(r, "store") }); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "exported %d record(s) of scope %q (versions 1..%d): %d from %d archive(s), %d stored\n",
		archived+stored, scope, info.Version, archived, len(segs)-len(missing), stored)
	for _, s := range missing {
		fmt.Fprintf(stderr, "warning: versions %d..%d of scope %q are not in this export: %s\n", s.from, s.through, scope, s.why)
	}
	return nil
}

// removal is what a scope.retention_applied record says.
type removal struct {
	at  int64 // its version
	ev  *frames.RetentionApplied
	hsh eventstore.Hash
}

func noteRemoval(removals map[int64]removal, r eventstore.Record) error {
	if r.Type != frames.TypeRetention {
		return nil
	}
	ev, err := eventstore.DecodeFrameEvent(r)
	if err != nil {
		return err
	}
	ra := ev.(*frames.RetentionApplied)
	h, err := hex.DecodeString(ra.Hash)
	if err != nil || len(h) != len(eventstore.Hash{}) {
		return fmt.Errorf("%w: scope %q version %d: scope.retention_applied names hash %q", eventstore.ErrCorrupt, r.Stream, r.Version, ra.Hash)
	}
	if _, ok := removals[ra.Through]; !ok {
		rm := removal{at: r.Version, ev: ra}
		copy(rm.hsh[:], h)
		removals[ra.Through] = rm
	}
	return nil
}

// planSegments walks back from the stream's base: each removal through
// cur names the archive holding its records (whose own records name the
// removals before it) or deleted them. It checks every archive (as
// verify --archive does, against the digest its event recorded and the
// hash the chain goes on from) and that the segments chain into the
// stored records.
func planSegments(scope string, base eventstore.Base, removals map[int64]removal, archiveDir string) ([]segment, error) {
	var segs []segment // newest first
	for cur := base.Version; cur > 0; {
		rm, ok := removals[cur]
		if !ok {
			segs = append(segs, segment{from: 1, through: cur, head: headOf(segs, base),
				why: fmt.Sprintf("removed, and no scope.retention_applied this export can read says through %d", cur)})
			break
		}
		if rm.ev.Archive == "" {
			lo := int64(0)
			for t := range removals {
				if t < cur && t > lo {
					lo = t
				}
			}
			segs = append(segs, segment{from: lo + 1, through: cur, head: rm.hsh, recordedAt: rm.at,
				why: fmt.Sprintf("deleted without an archive (retention on_completion: delete), recorded at version %d", rm.at)})
			cur = lo
			continue
		}
		path, err := findArchive(rm.ev.Archive, scope, archiveDir)
		if err != nil {
			return nil, fmt.Errorf("the archive of versions through %d (recorded at version %d): %w", cur, rm.at, err)
		}
		ai, err := eventstore.VerifyArchive(path, nil)
		if err != nil {
			return nil, err
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: archive %s (recorded at version %d of %q): %s", eventstore.ErrCorrupt, path, rm.at, scope, fmt.Sprintf(format, args...))
		}
		switch {
		case rm.ev.ArchiveSHA256 != "" && ai.SHA256 != rm.ev.ArchiveSHA256:
			return nil, bad("its SHA-256 is %s, the scope recorded %s (replaced or altered)", ai.SHA256, rm.ev.ArchiveSHA256)
		case ai.Stream != scope || ai.Through != cur:
			return nil, bad("holds %q versions %d..%d, the removal was through %d", ai.Stream, ai.From, ai.Through, cur)
		case ai.Head != rm.hsh:
			return nil, bad("its last record's hash is not the hash the removal recorded")
		case ai.From == 1 && ai.Prev != (eventstore.Hash{}):
			return nil, bad("starts at version 1 but names a predecessor")
		}
		segs = append(segs, segment{from: ai.From, through: ai.Through, prev: ai.Prev, head: ai.Head, archive: path, digest: ai.SHA256, recordedAt: rm.at})
		// The removals recorded in the archived records.
		if err := readArchive(segs[len(segs)-1], scope, func(r eventstore.Record) error { return noteRemoval(removals, r) }); err != nil {
			return nil, err
		}
		cur = ai.From - 1
	}
	// Oldest first; each archive goes on from the segment before it, and
	// the stored records from the last.
	for i, j := 0, len(segs)-1; i < j; i, j = i+1, j-1 {
		segs[i], segs[j] = segs[j], segs[i]
	}
	for i, s := range segs {
		next := base.Hash
		if i+1 < len(segs) {
			if segs[i+1].archive == "" {
				continue // a gap: its predecessor is unknown
			}
			next = segs[i+1].prev
		}
		if s.head != (eventstore.Hash{}) && s.head != next {
			return nil, fmt.Errorf("%w: scope %q: the chain breaks after version %d (the removed history does not end where what follows begins)", eventstore.ErrCorrupt, scope, s.through)
		}
	}
	return segs, nil
}

// headOf is the hash the chain goes on from after a gap below segs[len-1]
// (or below the stored records).
func headOf(segs []segment, base eventstore.Base) eventstore.Hash {
	if len(segs) == 0 {
		return base.Hash
	}
	return segs[len(segs)-1].prev
}

// findArchive returns where an archive is: under archiveDir (as
// ARCHIVES/SCOPE/FILE) if given and there, else where its event says.
func findArchive(recorded, scope, archiveDir string) (string, error) {
	var tried []string
	if archiveDir != "" {
		p := filepath.Join(archiveDir, scope, filepath.Base(recorded))
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		tried = append(tried, p)
	}
	if _, err := os.Stat(recorded); err == nil {
		return recorded, nil
	}
	tried = append(tried, recorded)
	hint := ""
	if archiveDir == "" {
		hint = " (if it was moved, name its directory with --archives)"
	}
	return "", fmt.Errorf("no archive file at %q%s", tried, hint)
}

// archivedRecord is a stored record's envelope (eventstore's
// recordEnvelope), read from an archive's raw bytes.
type archivedRecord struct {
	V       uint8  `msgpack:"v"`
	Seq     uint64 `msgpack:"q"`
	Version int64  `msgpack:"n"`
	Prev    []byte `msgpack:"p"`
	Stream  string `msgpack:"s"`
	Type    string `msgpack:"t"`
	Data    []byte `msgpack:"d"`
}

// readArchive reads the records of an archive segment planSegments
// checked, calling fn for each in order. It checks again what it relies on
// (each record's bytes against its hash, the versions and the chain from
// the segment's prev, and the file's digest at the end), so a file
// replaced since is never written out as the checked one.
func readArchive(s segment, scope string, fn func(eventstore.Record) error) error {
	f, err := os.Open(s.archive)
	if err != nil {
		return err
	}
	defer f.Close()
	sum := sha256.New()
	sc := bufio.NewScanner(io.TeeReader(f, sum))
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	bad := func(line int, format string, args ...any) error {
		return fmt.Errorf("%w: %s line %d: %s (changed since it was checked?)", eventstore.ErrCorrupt, s.archive, line, fmt.Sprintf(format, args...))
	}
	prev, next := s.prev, s.from
	line := 0
	for sc.Scan() {
		line++
		if line == 1 {
			continue // the header, checked by VerifyArchive
		}
		var l struct {
			Raw        string          `json:"raw"`
			Hash       string          `json:"hash"`
			Checkpoint json.RawMessage `json:"checkpoint"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return bad(line, "undecodable: %v", err)
		}
		if l.Checkpoint != nil {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(l.Raw)
		if err != nil {
			return bad(line, "record bytes: %v", err)
		}
		var a archivedRecord
		if err := eventstore.Unmarshal(raw, &a); err != nil {
			return bad(line, "record: %v", err)
		}
		r := eventstore.Record{Stream: a.Stream, Version: a.Version, Seq: a.Seq, Type: a.Type, Data: a.Data, Hash: sha256.Sum256(raw)}
		copy(r.PrevHash[:], a.Prev)
		switch {
		case hex.EncodeToString(r.Hash[:]) != l.Hash:
			return bad(line, "its bytes do not hash to its hash")
		case a.Stream != scope || a.Version != next || len(a.Prev) != len(prev) || r.PrevHash != prev:
			return bad(line, "not version %d of %q chained from the record before", next, scope)
		}
		if err := fn(r); err != nil {
			return err
		}
		prev, next = r.Hash, next+1
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if next-1 != s.through || prev != s.head {
		return bad(line, "ends at version %d, not %d", next-1, s.through)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != s.digest {
		return fmt.Errorf("%w: %s: its SHA-256 is now %s, not %s (changed since it was checked)", eventstore.ErrCorrupt, s.archive, got, s.digest)
	}
	return nil
}
