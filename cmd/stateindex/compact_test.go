package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/eventstore"
)

// bloat grows dir's data file by 4 MiB of pages that are free again at
// once (as a big history removed would leave them), behind the store's back.
func bloat(t *testing.T, dir string) {
	t.Helper()
	db, err := bolt.Open(filepath.Join(dir, dbFile), 0o600, &bolt.Options{Timeout: time.Second})
	require.NoError(t, err)
	big := bytes.Repeat([]byte("y"), 1<<20)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("bloat"))
		if err != nil {
			return err
		}
		for i := 0; i < 4; i++ {
			if err := b.Put([]byte{byte(i)}, big); err != nil {
				return err
			}
		}
		return nil
	}))
	require.NoError(t, db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte("bloat")) }))
	require.NoError(t, db.Close())
}

func fileBytes(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	return fi.Size()
}

// compact shrinks the file, says by how much, and leaves a data file that
// verifies, inspects the same and serves.
func TestCompactCommand(t *testing.T) {
	dir := t.TempDir()
	populate(t, dir)
	bloat(t, dir)
	path := filepath.Join(dir, dbFile)
	before := fileBytes(t, path)
	var inspectBefore, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"inspect", "--data", dir}, &inspectBefore, &errb), errb.String())

	var out bytes.Buffer
	errb.Reset()
	require.Equal(t, 0, run([]string{"compact", "--data", dir}, &out, &errb), errb.String())
	after := fileBytes(t, path)
	assert.Less(t, after*4, before, "the free pages were given back")
	m := regexp.MustCompile(`compacted (\S+): (\d+) → (\d+) bytes \((\d+\.\d)% of before, (\d+) bytes given back\)`).FindStringSubmatch(out.String())
	require.NotNil(t, m, out.String())
	assert.Equal(t, path, m[1])
	assert.Equal(t, strconv.FormatInt(after, 10), m[3])
	assert.Equal(t, fmt.Sprintf("%.1f", 100*float64(after)/float64(m2i(t, m[2]))), m[4])
	assert.Equal(t, strconv.FormatInt(m2i(t, m[2])-after, 10), m[5])
	assert.Contains(t, out.String(), "free pages of")
	assert.Contains(t, out.String(), "journal: "+eventstore.JournalDir(path)+": ", "the journal the server left is reported")
	assert.Regexp(t, `\d+ stream\(s\), last sequence \d+: verified and equal to the old file`, out.String())
	assert.NoFileExists(t, eventstore.CompactTempPath(path))

	var vout bytes.Buffer
	errb.Reset()
	require.Equal(t, 0, run([]string{"verify", "--data", dir}, &vout, &errb), vout.String()+errb.String())
	var inspectAfter bytes.Buffer
	require.Equal(t, 0, run([]string{"inspect", "--data", dir}, &inspectAfter, &errb), errb.String())
	assert.Equal(t, inspectBefore.String(), inspectAfter.String(), "the frame trees read the same")

	// Once more: nothing (or next to nothing) left to give back.
	out.Reset()
	require.Equal(t, 0, run([]string{"compact", "--data", dir}, &out, &errb), errb.String())
	assert.LessOrEqual(t, fileBytes(t, path), after, "a compacted file stays compact")
	assert.Contains(t, out.String(), "verified and equal to the old file")

	// The compacted file serves.
	withServer(t, dir, func(c *actors.Client, ctx context.Context) { populateWith(t, c, ctx) })
}

func m2i(t *testing.T, s string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err)
	return v
}

// While a server runs on the directory, compact refuses and says why;
// the server goes on.
func TestCompactRefusedWhileServing(t *testing.T) {
	dir := t.TempDir()
	populate(t, dir)
	_, stop := startServe(t, "--data", dir)
	var out, errb bytes.Buffer
	code := run([]string{"compact", "--data", dir, "--timeout", "100ms"}, &out, &errb)
	assert.Equal(t, 1, code)
	assert.Contains(t, errb.String(), "a server is running on "+dir)
	assert.Contains(t, errb.String(), "stop the server first")
	assert.NoFileExists(t, eventstore.CompactTempPath(filepath.Join(dir, dbFile)))
	stop()
	out.Reset()
	errb.Reset()
	require.Equal(t, 0, run([]string{"compact", "--data", dir}, &out, &errb), errb.String())
}

// A missing data file or stray arguments are errors that create nothing.
func TestCompactCommandBadInput(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	assert.Equal(t, 1, run([]string{"compact", "--data", dir}, &out, &errb))
	assert.Contains(t, errb.String(), "no data file at")
	assert.Equal(t, 2, run([]string{"compact", "--data", dir, "extra"}, &out, &errb))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries)
}
