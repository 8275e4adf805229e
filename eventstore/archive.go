package eventstore

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// Archives: the records retention removes, kept in a file a person can move
// elsewhere and check offline (stateindex verify --archive).
//
// An archive is JSON Lines. The first line describes it:
//
//	{"stateindex_archive":1,"stream":S,"from":F,"through":T,"prev":H0,"head":HT,"records":N}
//
// where H0 is the hash of the record before F (zero for F = 1) and HT the
// hash of the record at T. Each record follows as
//
//	{"version":V,"seq":Q,"type":Y,"raw":BASE64,"hash":H}
//
// with raw the record exactly as the store kept it (its SHA-256 is H, and
// it names its predecessor's hash, so the lines form the chain from H0 to
// HT), and then the signed checkpoints of the range, if any:
//
//	{"checkpoint":{"version":V,"head":H,"reason":R,"key_id":K,"signature":SIG}}
//
// Its name is DIR/STREAM/F-T.jsonl: a pass that crashed after writing it
// rewrites the same file, never a second one.

// ArchiveFormat is the version of the archive format.
const ArchiveFormat = 1

type archiveHeader struct {
	Format  int    `json:"stateindex_archive"`
	Stream  string `json:"stream"`
	From    int64  `json:"from"`
	Through int64  `json:"through"`
	Prev    string `json:"prev"`
	Head    string `json:"head"`
	Records int64  `json:"records"`
}

type archiveRecord struct {
	Version int64  `json:"version"`
	Seq     uint64 `json:"seq"`
	Type    string `json:"type"`
	Raw     string `json:"raw"`
	Hash    string `json:"hash"`
}

type archiveCheckpoint struct {
	Version   int64  `json:"version"`
	Head      string `json:"head"`
	Reason    uint8  `json:"reason"`
	KeyID     string `json:"key_id"`
	Signature string `json:"signature"`
}

type archiveLine struct {
	archiveRecord
	Checkpoint *archiveCheckpoint `json:"checkpoint,omitempty"`
}

// ArchivePath is where WriteArchive puts stream's records from..through.
func ArchivePath(dir, stream string, from, through int64) string {
	return filepath.Join(dir, stream, strconv.FormatInt(from, 10)+"-"+strconv.FormatInt(through, 10)+".jsonl")
}

// WriteArchive writes the stream's records from..through (and the signed
// checkpoints among them, if the store keeps any) to ArchivePath, durably:
// the file and its directory are fsynced before it returns. It returns the
// path and the file's hex SHA-256.
func WriteArchive(ctx context.Context, store Store, stream string, from, through int64, dir string) (path, digest string, err error) {
	if from < 1 || through < from {
		return "", "", fmt.Errorf("eventstore: archive versions %d..%d", from, through)
	}
	path = ArchivePath(dir, stream, from, through)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", "", err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return "", "", err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	sum := sha256.New()
	w := bufio.NewWriterSize(io.MultiWriter(f, sum), 64<<10)
	enc := json.NewEncoder(w)

	var recs []archiveRecord
	var prev, head Hash
	first := true
	err = store.ReadStream(ctx, stream, from, func(r Record) error {
		if r.Version > through {
			return errStopRead
		}
		if first && r.Version != from {
			return fmt.Errorf("eventstore: archive of %q from %d: the stream starts at %d", stream, from, r.Version)
		}
		first = false
		raw := appendRecord(nil, r.Stream, r.Type, r.Data)
		patchRecord(raw, r.Seq, r.Version, &r.PrevHash)
		if Hash(sha256.Sum256(raw)) != r.Hash {
			return corrupt(stream, r.Version, "the record does not re-encode to its hash")
		}
		if r.Version == from {
			prev = r.PrevHash
		}
		head = r.Hash
		recs = append(recs, archiveRecord{Version: r.Version, Seq: r.Seq, Type: r.Type, Raw: base64.StdEncoding.EncodeToString(raw), Hash: hex.EncodeToString(r.Hash[:])})
		return nil
	})
	if err != nil && !errors.Is(err, errStopRead) {
		return "", "", err
	}
	if int64(len(recs)) != through-from+1 {
		return "", "", fmt.Errorf("eventstore: archive of %q %d..%d found %d records", stream, from, through, len(recs))
	}
	if err = enc.Encode(archiveHeader{Format: ArchiveFormat, Stream: stream, From: from, Through: through,
		Prev: hex.EncodeToString(prev[:]), Head: hex.EncodeToString(head[:]), Records: int64(len(recs))}); err != nil {
		return "", "", err
	}
	for i := range recs {
		if err = enc.Encode(&recs[i]); err != nil {
			return "", "", err
		}
	}
	if cp, ok := store.(Checkpointer); ok {
		err = cp.Checkpoints(ctx, stream, func(c Checkpoint) error {
			if c.Version < from || c.Version > through {
				return nil
			}
			return enc.Encode(struct {
				Checkpoint archiveCheckpoint `json:"checkpoint"`
			}{archiveCheckpoint{Version: c.Version, Head: hex.EncodeToString(c.Head[:]),
				Reason: uint8(c.Reason), KeyID: hex.EncodeToString(c.KeyID[:]), Signature: hex.EncodeToString(c.Signature)}})
		})
		if err != nil {
			return "", "", err
		}
	}
	if err = w.Flush(); err != nil {
		return "", "", err
	}
	if err = f.Sync(); err != nil {
		return "", "", err
	}
	if err = f.Close(); err != nil {
		return "", "", err
	}
	if err = os.Rename(tmp, path); err != nil {
		return "", "", err
	}
	if err = syncDir(filepath.Dir(path)); err != nil {
		return "", "", err
	}
	return path, hex.EncodeToString(sum.Sum(nil)), nil
}

// ArchiveInfo is what VerifyArchive found.
type ArchiveInfo struct {
	Stream             string
	From, Through      int64
	Prev, Head         Hash
	Records            int64
	Checkpoints        int64
	SignaturesVerified int64
	SHA256             string
}

// VerifyArchive checks an archive file offline: every record's stored
// bytes hash to its hash, name its stream and version, and chain from the
// header's prev hash to its head hash without a gap; with pub, every signed
// checkpoint's signature verifies and names a record's hash. A problem is
// an error matching ErrCorrupt naming the line.
func VerifyArchive(path string, pub ed25519.PublicKey) (ArchiveInfo, error) {
	var info ArchiveInfo
	f, err := os.Open(path)
	if err != nil {
		return info, err
	}
	defer f.Close()
	sum := sha256.New()
	sc := bufio.NewScanner(io.TeeReader(f, sum))
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	bad := func(line int, format string, args ...any) error {
		return fmt.Errorf("%w: %s line %d: %s", ErrCorrupt, path, line, fmt.Sprintf(format, args...))
	}
	if !sc.Scan() {
		return info, bad(1, "no header")
	}
	var h archiveHeader
	if err := json.Unmarshal(sc.Bytes(), &h); err != nil || h.Format != ArchiveFormat {
		return info, bad(1, "not a StateIndex archive header (format %d): %v", h.Format, err)
	}
	info.Stream, info.From, info.Through = h.Stream, h.From, h.Through
	if info.Prev, err = parseHash(h.Prev); err != nil {
		return info, bad(1, "prev hash: %v", err)
	}
	if info.Head, err = parseHash(h.Head); err != nil {
		return info, bad(1, "head hash: %v", err)
	}
	tally, err := checkChainedLines(sc, h.Stream, h.From, info.Prev, pub, "archive", bad, nil)
	info.Records, info.Checkpoints, info.SignaturesVerified = tally.records, tally.checkpoints, tally.signatures
	if err != nil {
		return info, err
	}
	prev, next, line := tally.prev, tally.next, tally.line
	switch {
	case next-1 != h.Through || info.Records != h.Records:
		return info, bad(line, "the archive ends at version %d with %d records; its header says %d and %d", next-1, info.Records, h.Through, h.Records)
	case prev != info.Head:
		return info, bad(line, "the last record's hash is not the header's head hash")
	}
	info.SHA256 = hex.EncodeToString(sum.Sum(nil))
	return info, nil
}

// chainedLines is what checkChainedLines read.
type chainedLines struct {
	records, checkpoints, signatures int64
	prev                             Hash  // the last record's hash
	next                             int64 // the version after the last record
	line                             int   // the last line read
}

// checkChainedLines checks the lines after the header of an archive or a
// transcript (what names either in its messages): each record line's
// stored bytes hash to its hash and name stream and the next version from
// next, chaining from prev; each checkpoint line names the hash of a record
// read before it and, with pub, its signature verifies. bad makes the error
// of a line; each, when set, is called with every record once it checked,
// and an error it returns ends the reading as is.
func checkChainedLines(sc *bufio.Scanner, stream string, next int64, prev Hash, pub ed25519.PublicKey, what string,
	bad func(line int, format string, args ...any) error, each func(Record) error) (chainedLines, error) {
	t := chainedLines{prev: prev, next: next, line: 1}
	hashes := map[int64]Hash{}
	for sc.Scan() {
		t.line++
		line := t.line
		var l archiveLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return t, bad(line, "undecodable: %v", err)
		}
		if c := l.Checkpoint; c != nil {
			t.checkpoints++
			head, err := parseHash(c.Head)
			if err != nil {
				return t, bad(line, "checkpoint head: %v", err)
			}
			if got, ok := hashes[c.Version]; !ok || got != head {
				return t, bad(line, "checkpoint at version %d names a hash no record of the %s has", c.Version, what)
			}
			if pub != nil {
				sig, err := hex.DecodeString(c.Signature)
				if err != nil {
					return t, bad(line, "checkpoint signature: %v", err)
				}
				cp := Checkpoint{Stream: stream, Version: c.Version, Head: head, Reason: CheckpointReason(c.Reason), Signature: sig}
				if _, err := hex.Decode(cp.KeyID[:], []byte(c.KeyID)); err != nil {
					return t, bad(line, "checkpoint key id: %v", err)
				}
				if err := cp.VerifySignature(pub); err != nil {
					return t, bad(line, "checkpoint at version %d: %v", c.Version, err)
				}
				t.signatures++
			}
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(l.Raw)
		if err != nil {
			return t, bad(line, "record bytes: %v", err)
		}
		var f recordFields
		if err := parseRecord(raw, &f); err != nil {
			return t, bad(line, "record: %v", err)
		}
		got := Hash(sha256.Sum256(raw))
		want, err := parseHash(l.Hash)
		switch {
		case err != nil:
			return t, bad(line, "hash: %v", err)
		case got != want:
			return t, bad(line, "version %d: its bytes do not hash to its hash (altered)", l.Version)
		case f.version != t.next || l.Version != t.next || string(f.stream) != stream:
			return t, bad(line, "expected version %d of %q, found version %d of %q", t.next, stream, f.version, f.stream)
		case f.prev != t.prev:
			return t, bad(line, "version %d does not name the previous record's hash (a record is missing or altered)", t.next)
		}
		if each != nil {
			r := Record{Stream: stream, Version: f.version, Seq: f.seq, Type: string(f.typ), Data: f.data, PrevHash: f.prev, Hash: got}
			if err := each(r); err != nil {
				return t, err
			}
		}
		hashes[t.next] = got
		t.prev = got
		t.next++
		t.records++
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) {
		return t, err
	}
	return t, nil
}

func parseHash(s string) (Hash, error) {
	var h Hash
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(h) {
		return h, fmt.Errorf("%q is not a hex SHA-256", s)
	}
	copy(h[:], b)
	return h, nil
}
