package crashtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stateindex/stateindex/eventstore"
)

// The child's journal is small and applied often, so that a kill lands
// while a frame is being written, while the applier writes bbolt and while
// a segment is being recycled: three segments of 256 KiB (the storm fills
// one in a few hundred milliseconds) and an application every 3 ms.
const (
	JournalSegmentBytes = 64 << 10
	JournalSegments     = 3
	ApplyInterval       = 3 * time.Millisecond
)

// StoreOptions are the child's store options.
func StoreOptions() *eventstore.Options {
	return &eventstore.Options{
		JournalSegmentBytes: JournalSegmentBytes,
		JournalSegments:     JournalSegments,
		ApplyInterval:       ApplyInterval,
	}
}

// ProbeFile is where the child keeps its journal counters, rewritten in
// place every ProbeEvery; a SIGKILL leaves the last one in the page cache
// for the parent.
const (
	ProbeFile  = "journal.probe"
	ProbeEvery = time.Millisecond
)

// Probe is the child's journal as last seen before the kill: the store's
// counters since it opened, the highest segment generation on disk, and
// how much each changed in the last probe interval (a kill right after a
// change landed during, or within a millisecond of, that operation).
type Probe struct {
	Polls         uint64
	Frames        uint64 // journal frames written (one fdatasync each)
	Applications  uint64 // bbolt commits of the background applier
	Pending       uint64 // acknowledged records not yet in bbolt
	Generation    uint64 // highest segment generation on disk
	DFrames       uint64 // changes in the last probe interval
	DApplications uint64
	DGeneration   uint64
}

const probeWords = 8

func (p Probe) encode() []byte {
	b := make([]byte, 8*probeWords)
	for i, v := range []uint64{p.Polls, p.Frames, p.Applications, p.Pending, p.Generation, p.DFrames, p.DApplications, p.DGeneration} {
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
	return b
}

// ReadProbe reads the probe file in dir; ok is false when the child wrote
// none (a kill before its store opened).
func ReadProbe(dir string) (p Probe, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, ProbeFile))
	if errors.Is(err, os.ErrNotExist) {
		return p, false, nil
	}
	if err != nil {
		return p, false, err
	}
	if len(b) < 8*probeWords {
		return p, false, nil
	}
	w := make([]uint64, probeWords)
	for i := range w {
		w[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	p = Probe{w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]}
	return p, p.Polls > 0, nil
}

// Segment is what a journal segment's header says.
type Segment struct {
	Name       string
	Generation uint64
	Covered    uint64 // bbolt's durable last sequence when it was prepared
	Written    bool   // a frame of this generation begins the segment
}

var segMagic = []byte("SIJRNL\x00\x01")

// readSegmentHeader reads the header fields of one segment file; ok is
// false for a file without a valid magic (never prepared, or torn).
func readSegmentHeader(f *os.File) (Segment, bool) {
	var b, fh [32]byte
	if _, err := f.ReadAt(b[:], 0); err != nil || !bytes.Equal(b[:8], segMagic) {
		return Segment{}, false
	}
	s := Segment{Generation: binary.LittleEndian.Uint64(b[16:]), Covered: binary.LittleEndian.Uint64(b[24:])}
	// The first frame's header follows the 4096-byte segment header; its
	// generation field is at 8.
	if _, err := f.ReadAt(fh[:], 4096); err == nil {
		s.Written = binary.LittleEndian.Uint64(fh[8:]) == s.Generation
	}
	return s, true
}

// SpareReady says whether the newest segment in segs was prepared (a new
// generation in its header) and not written yet: the spare the committer
// moves to when the active segment is full.
func SpareReady(segs []Segment) bool {
	var newest *Segment
	for i := range segs {
		if newest == nil || segs[i].Generation > newest.Generation {
			newest = &segs[i]
		}
	}
	return newest != nil && !newest.Written
}

// Segments reads the headers of the journal segments of the data file in
// dir.
func Segments(dir string) ([]Segment, error) {
	jdir := eventstore.JournalDir(filepath.Join(dir, DataFile))
	ents, err := os.ReadDir(jdir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Segment
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".seg") {
			continue
		}
		f, err := os.Open(filepath.Join(jdir, e.Name()))
		if err != nil {
			return nil, err
		}
		s, ok := readSegmentHeader(f)
		f.Close()
		if ok {
			s.Name = e.Name()
			out = append(out, s)
		}
	}
	return out, nil
}

// MaxGeneration is the highest generation among segs (0: none).
func MaxGeneration(segs []Segment) uint64 {
	var g uint64
	for _, s := range segs {
		g = max(g, s.Generation)
	}
	return g
}

// probe rewrites the probe file every ProbeEvery until ctx ends.
func probe(ctx context.Context, dir string, store *eventstore.BoltStore) error {
	out, err := os.OpenFile(filepath.Join(dir, ProbeFile), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	jdir := eventstore.JournalDir(filepath.Join(dir, DataFile))
	files := map[string]*os.File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
		out.Close()
	}()
	generation := func(segments int) uint64 {
		if len(files) != segments {
			ents, _ := os.ReadDir(jdir)
			for _, e := range ents {
				if files[e.Name()] == nil && strings.HasSuffix(e.Name(), ".seg") {
					if f, err := os.Open(filepath.Join(jdir, e.Name())); err == nil {
						files[e.Name()] = f
					}
				}
			}
		}
		var g uint64
		for _, f := range files {
			if s, ok := readSegmentHeader(f); ok {
				g = max(g, s.Generation)
			}
		}
		return g
	}
	var prev Probe
	tick := time.NewTicker(ProbeEvery)
	defer tick.Stop()
	for {
		js := store.JournalStats()
		p := Probe{
			Polls: prev.Polls + 1, Frames: js.Frames, Applications: js.Applications,
			Pending: uint64(js.Pending), Generation: generation(js.Segments),
		}
		p.DFrames, p.DApplications, p.DGeneration = p.Frames-prev.Frames, p.Applications-prev.Applications, p.Generation-prev.Generation
		if prev.Polls == 0 {
			p.DFrames, p.DApplications, p.DGeneration = 0, 0, 0
		}
		if _, err := out.WriteAt(p.encode(), 0); err != nil {
			return fmt.Errorf("probe file: %w", err)
		}
		prev = p
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
