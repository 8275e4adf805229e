package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/stateindex/stateindex/eventstore"
)

// FsyncProbe is the disk's own floor for one durable 1 KiB write, measured
// in the same run as the figures it is compared with: what a write-ahead
// journal pays per group commit at best.
type FsyncProbe struct {
	// Overwrite: a 1 KiB pwrite into a preallocated file that was written
	// with zeros and fsynced once first (so no metadata changes), then
	// fdatasync; the writes walk the file in order, as a journal does.
	Overwrite Figure `json:"overwrite_fdatasync"`
	// Append: a 1 KiB write that grows the file, then fdatasync (the
	// file's size is metadata, so every sync commits it too).
	Append Figure `json:"append_fdatasync"`
}

// probeFileBytes is the preallocated file of the overwrite probe.
const probeFileBytes = 4 << 20

// ProbeFsync times ops overwrites and ops appends of 1 KiB, each followed
// by fdatasync, in files under dir; the timed operation is the write and
// its fdatasync.
func ProbeFsync(dir string, ops int) (FsyncProbe, error) {
	var p FsyncProbe
	block := make([]byte, 1024)
	for i := range block {
		block[i] = byte('a' + i%26)
	}
	over, err := preallocated(filepath.Join(dir, "probe-overwrite"), probeFileBytes)
	if err != nil {
		return p, err
	}
	defer os.Remove(over.Name())
	defer over.Close()
	lat := make(Latencies, 0, ops)
	begin := time.Now()
	for i := range ops {
		off := int64(i*len(block)) % probeFileBytes
		if err := lat.Time(func() error {
			if _, err := over.WriteAt(block, off); err != nil {
				return err
			}
			return eventstore.Fdatasync(over)
		}); err != nil {
			return p, fmt.Errorf("bench: overwrite probe: %w", err)
		}
	}
	p.Overwrite = Summarize(lat, time.Since(begin))

	app, err := os.OpenFile(filepath.Join(dir, "probe-append"), os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
	if err != nil {
		return p, err
	}
	defer os.Remove(app.Name())
	defer app.Close()
	lat = make(Latencies, 0, ops)
	begin = time.Now()
	for range ops {
		if err := lat.Time(func() error {
			if _, err := app.Write(block); err != nil {
				return err
			}
			return eventstore.Fdatasync(app)
		}); err != nil {
			return p, fmt.Errorf("bench: append probe: %w", err)
		}
	}
	p.Append = Summarize(lat, time.Since(begin))
	return p, nil
}

// preallocated creates a file of size bytes of zeros, written and fsynced
// (data and size), as the journal prepares a segment.
func preallocated(path string, size int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(make([]byte, size)); err != nil {
		return nil, errs(err, f.Close())
	}
	if err := f.Sync(); err != nil {
		return nil, errs(err, f.Close())
	}
	return f, nil
}

// MedianProbe is the median of each figure of several rounds.
func MedianProbe(ps []FsyncProbe) FsyncProbe {
	var over, app []Figure
	for _, p := range ps {
		over, app = append(over, p.Overwrite), append(app, p.Append)
	}
	return FsyncProbe{Overwrite: MedianFigure(over), Append: MedianFigure(app)}
}
