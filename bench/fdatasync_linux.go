package bench

import (
	"os"
	"syscall"
)

// fdatasync is what the journal calls after writing a frame.
func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}
