//go:build !linux

package eventstore

import "os"

// fdatasync falls back to a full fsync where fdatasync is not available.
func fdatasync(f *os.File) error { return f.Sync() }
