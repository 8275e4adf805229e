package eventstore

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
)

// Transcripts: a chain's records, verifiable offline.
//
// A transcript is JSON Lines. The first line names what it holds:
//
//	{"stateindex_transcript":1,"scope":S,"chain":ROOT,"links":[...],"head_link":HEAD,
//	 "from":F,"through":T,"prev":H0,"head":HT,"records":N}
//
// where F..T is the version range that covers the chain (its first link's
// first record to its last link's last), H0 the hash of the record before
// F (zero for F = 1) and HT that of the record at T. The records follow
// exactly as in an archive ({"version","seq","type","raw","hash"}: raw is
// the record as the store kept it, whose SHA-256 is hash and which names
// its predecessor's hash), then the signed checkpoints among them
// ({"checkpoint":{...}}). VerifyTranscript recomputes the chain from H0
// and checks every signature with a public key.

// TranscriptFormat is the version of the transcript format.
const TranscriptFormat = 1

// TranscriptHeader is a transcript's first line.
type TranscriptHeader struct {
	Format   int      `json:"stateindex_transcript"`
	Scope    string   `json:"scope"`
	Chain    string   `json:"chain"`
	Links    []string `json:"links"`
	HeadLink string   `json:"head_link"`
	From     int64    `json:"from"`
	Through  int64    `json:"through"`
	Prev     string   `json:"prev"`
	Head     string   `json:"head"`
	Records  int64    `json:"records"`
	// Note says what the transcript leaves out, if anything (history
	// removed without an archive before From).
	Note string `json:"note,omitempty"`
}

// ChainRange returns the version range that covers the chain's links in
// the scope's log, and the versions of it that no readable record holds
// (removed without an archive that is still there).
func ChainRange(ctx context.Context, store Store, scope string, links []ChainLink, archiveDir string) (from, through int64, unreadable []VersionRange, err error) {
	s := &searcher{store: store, scope: scope, links: map[string]bool{}, archiveDir: archiveDir}
	if err := s.plan(ctx, links); err != nil {
		return 0, 0, nil, err
	}
	for _, sg := range s.segs {
		if lo, hi := max(s.from, sg.from), min(s.through, sg.through); sg.path == "" && lo <= hi {
			unreadable = append(unreadable, VersionRange{From: lo, Through: hi, Why: sg.why})
		}
	}
	return s.from, s.through, unreadable, nil
}

// ReadChainRange calls fn for each record of scope from..through, the
// removed ones read from their archives (each checked against its hash
// and the chain); a version no readable record holds is an error.
func ReadChainRange(ctx context.Context, store Store, scope string, links []ChainLink, archiveDir string, from, through int64, fn func(Record) error) error {
	s := &searcher{store: store, scope: scope, links: map[string]bool{}, archiveDir: archiveDir}
	if err := s.plan(ctx, links); err != nil {
		return err
	}
	s.removedFrom = 1
	next := from
	err := s.walk(ctx, from, through, func(r Record) error {
		if r.Version != next {
			if len(s.unsearched) > 0 {
				u := s.unsearched[0]
				return fmt.Errorf("eventstore: versions %d..%d of %q cannot be read: %s", u.From, u.Through, scope, u.Why)
			}
			return corrupt(scope, r.Version, fmt.Sprintf("expected version %d", next))
		}
		next++
		return fn(r)
	})
	if err != nil {
		return err
	}
	if len(s.unsearched) > 0 {
		u := s.unsearched[0]
		return fmt.Errorf("eventstore: versions %d..%d of %q cannot be read: %s", u.From, u.Through, scope, u.Why)
	}
	if next != through+1 {
		return fmt.Errorf("eventstore: %q ends at version %d, not %d", scope, next-1, through)
	}
	return nil
}

// WriteTranscript writes the records of scope h.From..h.Through (read
// with ReadChainRange) and the store's signed checkpoints among them as a
// transcript; it fills h's hashes and count.
func WriteTranscript(ctx context.Context, store Store, h TranscriptHeader, links []ChainLink, archiveDir string, w io.Writer) error {
	var lines []archiveRecord
	var prev, head Hash
	err := ReadChainRange(ctx, store, h.Scope, links, archiveDir, h.From, h.Through, func(r Record) error {
		raw := appendRecord(nil, r.Stream, r.Type, r.Data)
		patchRecord(raw, r.Seq, r.Version, &r.PrevHash)
		if Hash(sha256.Sum256(raw)) != r.Hash {
			return corrupt(r.Stream, r.Version, "the record does not re-encode to its hash")
		}
		if r.Version == h.From {
			prev = r.PrevHash
		}
		head = r.Hash
		lines = append(lines, archiveRecord{Version: r.Version, Seq: r.Seq, Type: r.Type,
			Raw: base64.StdEncoding.EncodeToString(raw), Hash: hex.EncodeToString(r.Hash[:])})
		return nil
	})
	if err != nil {
		return err
	}
	h.Format, h.Records = TranscriptFormat, int64(len(lines))
	h.Prev, h.Head = hex.EncodeToString(prev[:]), hex.EncodeToString(head[:])
	enc := json.NewEncoder(w)
	if err := enc.Encode(h); err != nil {
		return err
	}
	for i := range lines {
		if err := enc.Encode(&lines[i]); err != nil {
			return err
		}
	}
	if cp, ok := store.(Checkpointer); ok {
		err := cp.Checkpoints(ctx, h.Scope, func(c Checkpoint) error {
			if c.Version < h.From || c.Version > h.Through {
				return nil
			}
			return enc.Encode(struct {
				Checkpoint archiveCheckpoint `json:"checkpoint"`
			}{archiveCheckpoint{Version: c.Version, Head: hex.EncodeToString(c.Head[:]),
				Reason: uint8(c.Reason), KeyID: hex.EncodeToString(c.KeyID[:]), Signature: hex.EncodeToString(c.Signature)}})
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// TranscriptInfo is what VerifyTranscript found.
type TranscriptInfo struct {
	Header             TranscriptHeader
	Records            int64
	Checkpoints        int64
	SignaturesVerified int64
}

// TranscriptError is a transcript's first bad line.
type TranscriptError struct {
	Line   int
	Reason string
}

func (e *TranscriptError) Error() string {
	return fmt.Sprintf("transcript line %d: %s", e.Line, e.Reason)
}

// Is makes a TranscriptError match ErrCorrupt.
func (e *TranscriptError) Is(target error) bool { return target == ErrCorrupt }

// VerifyTranscript checks a transcript offline: every record's bytes hash
// to its hash, name the scope and the next version, and chain from the
// header's prev hash to its head hash; every checkpoint names a record's
// hash and, with pub, its signature verifies (a transcript with
// checkpoints verified without pub says so: SignaturesVerified is 0). The
// first bad line is a *TranscriptError.
func VerifyTranscript(r io.Reader, pub ed25519.PublicKey) (TranscriptInfo, error) {
	var info TranscriptInfo
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	bad := func(line int, format string, args ...any) error {
		return &TranscriptError{Line: line, Reason: fmt.Sprintf(format, args...)}
	}
	if !sc.Scan() {
		return info, bad(1, "no header")
	}
	h := &info.Header
	if err := json.Unmarshal(sc.Bytes(), h); err != nil || h.Format != TranscriptFormat {
		return info, bad(1, "not a StateIndex transcript header (format %d): %v", h.Format, err)
	}
	prev, err := parseHash(h.Prev)
	if err != nil {
		return info, bad(1, "prev hash: %v", err)
	}
	headHash, err := parseHash(h.Head)
	if err != nil {
		return info, bad(1, "head hash: %v", err)
	}
	tally, err := checkChainedLines(sc, h.Scope, h.From, prev, pub, "transcript", bad, nil)
	info.Records, info.Checkpoints, info.SignaturesVerified = tally.records, tally.checkpoints, tally.signatures
	if err != nil {
		return info, err
	}
	prev, next, line := tally.prev, tally.next, tally.line
	switch {
	case next-1 != h.Through || info.Records != h.Records:
		return info, bad(line, "the transcript ends at version %d with %d records; its header says %d and %d", next-1, info.Records, h.Through, h.Records)
	case prev != headHash:
		return info, bad(line, "the last record's hash is not the header's head hash")
	}
	return info, nil
}
