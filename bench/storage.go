package bench

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/stateindex/stateindex/eventstore"
)

// StorageResult is the data file of the durable workload (fsync'd, no
// compaction of the file) against the encoded payload of its events.
type StorageResult struct {
	// PageSize is the file's page size (0 in the options: the OS page).
	PageSize     int   `json:"page_size"`
	Scopes       int   `json:"scopes"`
	Events       int   `json:"events"`
	PayloadBytes int64 `json:"payload_bytes"`
	// FileBytes is the data file's size; DiskBytes the blocks it occupies
	// (bbolt extends the file ahead of use, sparsely); UsedBytes the pages
	// bbolt has handed out (its high-water mark).
	FileBytes int64 `json:"file_bytes"`
	DiskBytes int64 `json:"disk_bytes"`
	UsedBytes int64 `json:"used_bytes"`
	// Ratio is FileBytes ÷ PayloadBytes (the goal's figure); DiskRatio and
	// UsedRatio divide DiskBytes and UsedBytes the same way; LogRatio
	// divides the pages of the log alone — every bucket but the snapshots,
	// no free pages — by the payload.
	Ratio     float64 `json:"file_over_payload"`
	DiskRatio float64 `json:"disk_over_payload"`
	UsedRatio float64 `json:"used_over_payload"`
	LogRatio  float64 `json:"log_over_payload"`
	// Buckets is the space of each top-level bucket (branch + leaf pages
	// allocated); FreeBytes the pages freed by later commits and not yet
	// reused.
	Buckets   map[string]int64 `json:"bucket_bytes"`
	FreeBytes int64            `json:"free_bytes"`
}

// storage writes events events of the durable workload over scopes scopes
// through the actor (fsync'd, like any durable write) and measures the file.
func storage(ctx context.Context, o *Options, pageSize, scopes, events int) (StorageResult, error) {
	res := StorageResult{PageSize: pageSize, Scopes: scopes}
	dir, err := scratch(o.Dir, fmt.Sprintf("storage-%d", pageSize))
	if err != nil {
		return res, err
	}
	defer o.cleanup(dir)
	path := dbPath(dir, "storage")
	o.progress("storage: %d events over %d scopes, page size %s", events, scopes, pageName(pageSize))
	// The events are read back from the open store: at the time of writing
	// a store whose journal recycled a segment (this scenario writes ~60 MB
	// through it) was refused as corrupt when reopened (reported; see
	// docs/BENCHMARKS.md). Close applies every journaled record to bbolt,
	// so the closed file below is complete.
	var evs map[string][]eventstore.Event
	var payload int64
	_, err = runAgentsThen(ctx, path, &eventstore.Options{PageSize: pageSize}, o.Shards, scopes, events, 1024, (*agent).durableOp,
		func(store eventstore.Store) (err error) {
			evs, payload, err = readStore(ctx, store)
			return err
		})
	if err != nil {
		return res, err
	}
	for _, e := range evs {
		res.Events += len(e)
	}
	res.PayloadBytes = payload
	fi, err := os.Stat(path)
	if err != nil {
		return res, err
	}
	res.FileBytes = fi.Size()
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		res.DiskBytes = st.Blocks * 512
	}
	if err := boltStats(path, &res); err != nil {
		return res, err
	}
	res.Ratio = Ratio(float64(res.FileBytes), float64(payload))
	res.DiskRatio = Ratio(float64(res.DiskBytes), float64(payload))
	res.UsedRatio = Ratio(float64(res.UsedBytes), float64(payload))
	var log int64
	for name, n := range res.Buckets {
		if name != "snapshots" {
			log += n
		}
	}
	res.LogRatio = Ratio(float64(log), float64(payload))
	return res, nil
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
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			s := b.Stats()
			res.Buckets[string(name)] = int64(s.BranchAlloc + s.LeafAlloc)
			return nil
		})
	})
	if err != nil {
		return err
	}
	st := db.Stats()
	res.FreeBytes = int64(st.FreePageN+st.PendingPageN) * int64(db.Info().PageSize)
	return nil
}

func pageName(n int) string {
	if n == 0 {
		return fmt.Sprintf("%d B (OS default)", os.Getpagesize())
	}
	return fmt.Sprintf("%d B", n)
}
