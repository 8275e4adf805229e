package crashtest

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
)

// A scope's whole history after retention removed some of it: the records
// its archives hold (versions 1..base) followed by what the store still
// holds (base+1..head), checked to be one hash chain from version 1 to the
// head — nothing lost, nothing twice, no half-removed run visible.

// archive is one archive file of a scope, verified.
type archive struct {
	path    string
	info    eventstore.ArchiveInfo
	records []eventstore.Record
	named   bool // a scope.retention_applied names it
}

// archives caches the archives read by earlier checks, by file identity
// (path, inode, size, modification time): an archive is written once,
// through a rename, so an unchanged identity is an unchanged file, and
// each check need not verify the whole archived history again.
var archives sync.Map

type fileID struct {
	path      string
	ino       uint64
	size, mod int64
}

// readArchive verifies the archive at path (every record's bytes, the
// chain, every checkpoint signature) and decodes its records.
func readArchive(path string) (*archive, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	id := fileID{path: path, size: fi.Size(), mod: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.ino = st.Ino
	}
	if a, ok := archives.Load(id); ok {
		c := *a.(*archive) // named is per check
		return &c, nil
	}
	a, err := decodeArchive(path)
	if err == nil {
		archives.Store(id, a)
		c := *a
		return &c, nil
	}
	return nil, err
}

func decodeArchive(path string) (*archive, error) {
	info, err := eventstore.VerifyArchive(path, PublicKey())
	if err != nil {
		return nil, err
	}
	a := &archive{path: path, info: info}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for line := 1; sc.Scan(); line++ {
		if line == 1 {
			continue // the header, checked by VerifyArchive
		}
		var l struct {
			Raw        string          `json:"raw"`
			Checkpoint json.RawMessage `json:"checkpoint"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, line, err)
		}
		if l.Checkpoint != nil {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(l.Raw)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, line, err)
		}
		r, err := eventstore.DecodeStoredRecord(raw)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, line, err)
		}
		a.records = append(a.records, r)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if int64(len(a.records)) != info.Records {
		return nil, fmt.Errorf("%s: %d records read, VerifyArchive counted %d", path, len(a.records), info.Records)
	}
	return a, nil
}

// history is a scope's whole history and what its removals left.
type history struct {
	records  []eventstore.Record // versions 1..head
	base     eventstore.Base
	archives []*archive
	// removals are the scope's scope.retention_applied records, in order.
	removals []*frames.RetentionApplied
	// unfinished is the Through of a removal recorded and not carried out
	// yet (0: none).
	unfinished int64
	orphans    int // archive files no record names
	temps      int // archive files a kill left half written (.tmp)
}

// scopeHistory assembles and checks scope's whole history: the archives
// in DIR/archive/SCOPE, each verified; they must agree with each other and
// with the store where they overlap, and cover 1..base with one chain that
// the stored records continue (the first stored record is base+1 and names
// the base's hash). The removals the scope records must name archives that
// tile 1..through exactly, with the digests recorded, and the base must be
// the last one's Through (or the one before, if the last is unfinished).
func scopeHistory(ctx context.Context, dir string, store *eventstore.BoltStore, scope string) (*history, error) {
	h := &history{}
	var err error
	if h.base, err = store.StreamBase(ctx, scope); err != nil {
		return nil, err
	}
	paths, err := filepath.Glob(filepath.Join(dir, ArchiveDir, scope, "*"))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	byVersion := map[int64]eventstore.Record{}
	where := map[int64]string{}
	for _, p := range paths {
		if strings.HasSuffix(p, ".tmp") {
			h.temps++
			continue
		}
		a, err := readArchive(p)
		if err != nil {
			return nil, fmt.Errorf("archive: %w", err)
		}
		if a.info.Stream != scope {
			return nil, fmt.Errorf("archive %s holds stream %q", p, a.info.Stream)
		}
		h.archives = append(h.archives, a)
		for _, r := range a.records {
			if o, ok := byVersion[r.Version]; ok && o.Hash != r.Hash {
				return nil, fmt.Errorf("archives %s and %s disagree at version %d", where[r.Version], p, r.Version)
			}
			byVersion[r.Version], where[r.Version] = r, p
		}
	}
	// 1..base from the archives, one chain ending at the base's hash.
	var prev eventstore.Hash
	for v := int64(1); v <= h.base.Version; v++ {
		r, ok := byVersion[v]
		switch {
		case !ok:
			return nil, fmt.Errorf("LOST: version %d was removed (the base is %d) and no archive holds it", v, h.base.Version)
		case r.PrevHash != prev:
			return nil, fmt.Errorf("archived version %d does not continue version %d's hash", v, v-1)
		}
		prev = r.Hash
		h.records = append(h.records, r)
	}
	if prev != h.base.Hash {
		return nil, fmt.Errorf("the archived version %d's hash is not the stream's base hash", h.base.Version)
	}
	// The stored records continue it: nothing at or below the base is
	// visible, nothing is missing after it.
	next := h.base.Version + 1
	err = store.ReadStream(ctx, scope, 1, func(r eventstore.Record) error {
		switch {
		case r.Version != next:
			return fmt.Errorf("HALF-REMOVED: the store shows version %d where %d was expected (base %d)", r.Version, next, h.base.Version)
		case r.PrevHash != prev:
			return fmt.Errorf("stored version %d does not continue the chain", r.Version)
		}
		if a, ok := byVersion[r.Version]; ok && a.Hash != r.Hash {
			return fmt.Errorf("archive %s holds another version %d than the store", where[r.Version], r.Version)
		}
		prev = r.Hash
		next++
		h.records = append(h.records, r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for v := range byVersion {
		if v >= next {
			return nil, fmt.Errorf("archive %s holds version %d beyond the stream's head %d", where[v], v, next-1)
		}
	}

	// The removals the scope records tile 1..through with their archives.
	// By file name: the directory may have moved since (a copy of it).
	byPath := map[string]*archive{}
	for _, a := range h.archives {
		byPath[filepath.Base(a.path)] = a
	}
	for _, r := range h.records {
		if r.Type != frames.TypeRetention {
			continue
		}
		ev, err := eventstore.DecodeFrameEvent(r)
		if err != nil {
			return nil, err
		}
		h.removals = append(h.removals, ev.(*frames.RetentionApplied))
	}
	from := int64(1)
	for i, ra := range h.removals {
		a := byPath[filepath.Base(ra.Archive)]
		switch {
		case a == nil:
			return nil, fmt.Errorf("the removal through %d names archive %q, which is not there", ra.Through, ra.Archive)
		case a.info.From != from || a.info.Through != ra.Through:
			return nil, fmt.Errorf("the removal through %d names archive %s of versions %d..%d, want %d..%d", ra.Through, ra.Archive, a.info.From, a.info.Through, from, ra.Through)
		case a.info.SHA256 != ra.ArchiveSHA256:
			return nil, fmt.Errorf("archive %s's digest is %s, the removal recorded %s", ra.Archive, a.info.SHA256, ra.ArchiveSHA256)
		case ra.Hash != hashAt(byVersion, ra.Through):
			return nil, fmt.Errorf("the removal through %d records hash %s, not version %d's", ra.Through, ra.Hash, ra.Through)
		}
		a.named = true
		from = ra.Through + 1
		if ra.Through > h.base.Version {
			if i != len(h.removals)-1 {
				return nil, fmt.Errorf("removals through %d and later are recorded, the store's base is %d", ra.Through, h.base.Version)
			}
			h.unfinished = ra.Through
		}
	}
	// The base is where the last finished removal ends.
	done := from - 1
	if h.unfinished > 0 {
		done = 0
		if n := len(h.removals); n > 1 {
			done = h.removals[n-2].Through
		}
	}
	if done != h.base.Version {
		return nil, fmt.Errorf("the recorded removals end at version %d (unfinished: %d), the store's base is %d", done, h.unfinished, h.base.Version)
	}
	for _, a := range h.archives {
		if !a.named {
			h.orphans++
		}
	}
	return h, nil
}

func hashAt(rs map[int64]eventstore.Record, v int64) string {
	h := rs[v].Hash
	return fmt.Sprintf("%x", h[:])
}
