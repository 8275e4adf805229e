//go:build !unix

package eventstore

import "io/fs"

// keepOwner does nothing where files have no Unix owner.
func keepOwner(string, fs.FileInfo) error { return nil }
