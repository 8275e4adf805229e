//go:build unix

package eventstore

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// keepOwner gives the file at path the owner and group of the file fi
// describes, if they differ from what it has.
func keepOwner(path string, fi fs.FileInfo) error {
	want, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	cur, err := os.Stat(path)
	if err != nil {
		return err
	}
	if have, ok := cur.Sys().(*syscall.Stat_t); ok && have.Uid == want.Uid && have.Gid == want.Gid {
		return nil
	}
	if err := os.Chown(path, int(want.Uid), int(want.Gid)); err != nil {
		return fmt.Errorf("giving the copy the data file's owner (uid %d, gid %d): %w (run compact as the data file's owner)", want.Uid, want.Gid, err)
	}
	return nil
}
