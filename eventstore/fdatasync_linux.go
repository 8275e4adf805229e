package eventstore

import (
	"os"
	"syscall"
)

// Fdatasync flushes f's data (and only the metadata needed to read it
// back): on a preallocated, already written file that is the data alone.
// It is the sync the journal makes before an append is acknowledged
// (exported so that benchmarks probe the disk with the very same call).
func Fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}
