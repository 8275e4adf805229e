package bench

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/stateindex/stateindex/eventstore"
)

// DefaultStorageEvents is how many events the storage scenario writes at
// scale 1 unless Options.StorageEvents says otherwise: a run of seconds,
// whose directory (~200 MB) the bounded journal (up to 4 × 16 MiB) is too
// large a share of for issue 11's goal; ~400,000 events put it under 5%
// (see docs/BENCHMARKS.md).
const DefaultStorageEvents = 50000

// StorageResult is the data directory of the durable workload (fsync'd,
// the journal on as by default, no compaction of the file) against the
// encoded payload of its events.
type StorageResult struct {
	// PageSize is the file's page size (0 in the options: the OS page).
	PageSize     int   `json:"page_size"`
	Scopes       int   `json:"scopes"`
	Events       int   `json:"events"`
	PayloadBytes int64 `json:"payload_bytes"`
	// Seconds is how long writing the events took (every one durable).
	Seconds float64 `json:"seconds"`
	// DirBytes is the data directory after the store closed: the bbolt
	// file (FileBytes) plus its journal directory (JournalBytes: every
	// file in DATA.journal/, JournalSegments of them). DirDiskBytes is the
	// blocks they occupy.
	DirBytes        int64 `json:"dir_bytes"`
	DirDiskBytes    int64 `json:"dir_disk_bytes"`
	JournalBytes    int64 `json:"journal_bytes"`
	JournalSegments int   `json:"journal_segments"`
	// JournalShare is JournalBytes ÷ DirBytes.
	JournalShare float64 `json:"journal_share"`
	// FileBytes is the data file's size; DiskBytes the blocks it occupies
	// (bbolt extends the file ahead of use, sparsely); UsedBytes the pages
	// bbolt has handed out (its high-water mark).
	FileBytes int64 `json:"file_bytes"`
	DiskBytes int64 `json:"disk_bytes"`
	UsedBytes int64 `json:"used_bytes"`
	// Ratio is DirBytes ÷ PayloadBytes (the goal's figure, issue 11);
	// FileRatio FileBytes ÷ PayloadBytes (issue 4's); DiskRatio and
	// UsedRatio divide DiskBytes and UsedBytes the same way; LogRatio
	// divides the pages of the log alone — every bucket but the snapshots,
	// no free pages — by the payload.
	Ratio     float64 `json:"dir_over_payload"`
	FileRatio float64 `json:"file_over_payload"`
	DiskRatio float64 `json:"disk_over_payload"`
	UsedRatio float64 `json:"used_over_payload"`
	LogRatio  float64 `json:"log_over_payload"`
	// Buckets is the space of each top-level bucket (branch + leaf pages
	// allocated, nested buckets included); FreeBytes the pages freed by
	// later commits and not yet reused.
	Buckets   map[string]int64 `json:"bucket_bytes"`
	FreeBytes int64            `json:"free_bytes"`
	// Index splits the "index" bucket's entries: frame ids and request
	// ids, counted and measured as key + value bytes (the pages holding
	// them are Buckets["index"]).
	Index IndexEntries `json:"index_entries"`
}

// IndexEntries counts the store's per-stream index entries by kind.
type IndexEntries struct {
	Frames       int   `json:"frames"`
	FrameBytes   int64 `json:"frame_bytes"`
	Requests     int   `json:"requests"`
	RequestBytes int64 `json:"request_bytes"`
}

// storage writes events events of the durable workload over scopes scopes
// through the actor (fsync'd, like any durable write; the journal on, the
// default) and measures the data directory once the store is closed.
func storage(ctx context.Context, o *Options, pageSize, scopes, events int) (StorageResult, error) {
	res := StorageResult{PageSize: pageSize, Scopes: scopes}
	dir, err := scratch(o.Dir, fmt.Sprintf("storage-%d", pageSize))
	if err != nil {
		return res, err
	}
	defer o.cleanup(dir)
	path := dbPath(dir, "storage")
	o.progress("storage: %d events over %d scopes, page size %s", events, scopes, pageName(pageSize))
	// The events are counted in the open store, after the last reply;
	// Close applies every journaled record to bbolt, so the closed file
	// below is complete.
	ph, err := runAgentsThen(ctx, path, &eventstore.Options{PageSize: pageSize}, o.Shards, scopes, events, 1024, (*agent).durableOp,
		func(store eventstore.Store) (err error) {
			res.Events, res.PayloadBytes, err = payloadOf(ctx, store)
			return err
		})
	if err != nil {
		return res, err
	}
	res.Seconds = ph.wall.Seconds()
	fi, err := os.Stat(path)
	if err != nil {
		return res, err
	}
	res.FileBytes, res.DiskBytes = fi.Size(), blocks(fi)
	if err := journalFiles(eventstore.JournalDir(path), &res); err != nil {
		return res, err
	}
	res.DirBytes, res.DirDiskBytes = res.FileBytes+res.JournalBytes, res.DiskBytes+res.DirDiskBytes
	res.JournalShare = Ratio(float64(res.JournalBytes), float64(res.DirBytes))
	if err := boltStats(path, &res); err != nil {
		return res, err
	}
	payload := float64(res.PayloadBytes)
	res.Ratio = Ratio(float64(res.DirBytes), payload)
	res.FileRatio = Ratio(float64(res.FileBytes), payload)
	res.DiskRatio = Ratio(float64(res.DiskBytes), payload)
	res.UsedRatio = Ratio(float64(res.UsedBytes), payload)
	var log int64
	for name, n := range res.Buckets {
		if name != "snapshots" {
			log += n
		}
	}
	res.LogRatio = Ratio(float64(log), payload)
	return res, nil
}

// payloadOf counts the events of every stream of an open store and the
// sum of their payload bytes.
func payloadOf(ctx context.Context, store eventstore.Store) (events int, payload int64, err error) {
	var names []string
	err = store.Streams(ctx, func(si eventstore.StreamInfo) error {
		names = append(names, si.Stream)
		return nil
	})
	for _, name := range names {
		if err != nil {
			break
		}
		err = store.ReadStream(ctx, name, 1, func(r eventstore.Record) error {
			events++
			payload += int64(len(r.Data))
			return nil
		})
	}
	return events, payload, err
}

// journalFiles adds up every file under the journal directory (the
// directory DirBytes counts besides the data file).
func journalFiles(dir string, res *StorageResult) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		res.JournalBytes += fi.Size()
		res.DirDiskBytes += blocks(fi)
		if filepath.Ext(p) == ".seg" {
			res.JournalSegments++
		}
		return nil
	})
}

// blocks is the bytes of disk blocks a file occupies (its size where the
// system does not say).
func blocks(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}

// boltStats fills the space breakdown from the closed file.
func boltStats(path string, res *StorageResult) error {
	// Read-write, because a read-only bbolt does not load its freelist.
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return err
	}
	defer db.Close()
	res.Buckets = map[string]int64{}
	err = db.View(func(tx *bolt.Tx) error {
		res.UsedBytes = tx.Size()
		err := tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			s := b.Stats()
			res.Buckets[string(name)] = int64(s.BranchAlloc + s.LeafAlloc)
			return nil
		})
		if err != nil {
			return err
		}
		return indexEntries(tx.Bucket([]byte("index")), &res.Index)
	})
	if err != nil {
		return err
	}
	st := db.Stats()
	res.FreeBytes = int64(st.FreePageN+st.PendingPageN) * int64(db.Info().PageSize)
	return nil
}

// indexEntries counts the entries of the index bucket (one nested bucket
// per stream, keys eventstore.FrameKey or RequestKey) by kind.
func indexEntries(ib *bolt.Bucket, out *IndexEntries) error {
	if ib == nil {
		return nil
	}
	return ib.ForEachBucket(func(stream []byte) error {
		return ib.Bucket(stream).ForEach(func(k, v []byte) error {
			n := int64(len(k) + len(v))
			switch {
			case len(k) > 0 && k[0] == eventstore.RequestKey("")[0]:
				out.Requests++
				out.RequestBytes += n
			case len(k) > 0 && k[0] == eventstore.FrameKey("")[0]:
				out.Frames++
				out.FrameBytes += n
			}
			return nil
		})
	})
}

func pageName(n int) string {
	if n == 0 {
		return fmt.Sprintf("%d B (OS default)", os.Getpagesize())
	}
	return fmt.Sprintf("%d B", n)
}
