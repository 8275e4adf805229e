package eventstore

import (
	"os"
	"syscall"
)

// fdatasync flushes f's data (and only the metadata needed to read it
// back): on a preallocated, already written file that is the data alone.
func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}
