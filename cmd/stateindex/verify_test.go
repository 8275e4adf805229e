package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/internal/crashtest"
	"github.com/stateindex/stateindex/internal/verify"
)

// recordPrevOffset is where a stored record keeps its predecessor's hash
// (the canonical envelope layout in eventstore/codec.go).
const recordPrevOffset = 30

var (
	valueFlips = flag.Int("verify.value-flips", 0, "bytes flipped inside stored values in the value sweep (0: 80, 400 without -race)")
	rawFlips   = flag.Int("verify.raw-flips", 0, "bytes flipped at sampled offsets of the raw file (0: 120, 600 without -race)")
)

func sweepSize(flagged, race, plain int) int {
	switch {
	case flagged > 0:
		return flagged
	case raceEnabled:
		return race
	}
	return plain
}

var clean struct {
	sync.Once
	b   []byte
	err error
}

// cleanFile writes a realistic data file into a new directory: a storm of
// every operation over 24 scopes, with snapshots and signed checkpoints,
// built once per test binary.
func cleanFile(t *testing.T) (dir string, b []byte) {
	t.Helper()
	clean.Do(func() {
		d, err := os.MkdirTemp("", "stateindex-verify-")
		if err != nil {
			clean.err = err
			return
		}
		defer os.RemoveAll(d)
		if clean.err = crashtest.Populate(d, 80, 42); clean.err != nil {
			return
		}
		// Without its tables (the registry's index): bookkeeping derived
		// from the log, outside what verify proves, so the sweeps flip
		// bytes of the log and the store's own structures only.
		if clean.err = dropTables(filepath.Join(d, dbFile)); clean.err == nil {
			clean.b, clean.err = os.ReadFile(filepath.Join(d, dbFile))
		}
	})
	require.NoError(t, clean.err)
	return withFile(t, clean.b), clean.b
}

// dropTables deletes the file's tables bucket, if it has one.
func dropTables(path string) error {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if tx.Bucket([]byte("tables")) == nil {
			return nil
		}
		return tx.DeleteBucket([]byte("tables"))
	})
	return errors.Join(err, db.Close())
}

// runVerify runs "stateindex verify" on dir and returns its exit code and
// output. A panic would fail the test binary: verify must never panic.
func runVerify(t *testing.T, dir string, extra ...string) (int, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"verify", "--data", dir}, extra...), &out, &errb)
	return code, out.String() + errb.String()
}

// withFile writes b as dir/stateindex.db in a fresh directory.
func withFile(t *testing.T, b []byte) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, dbFile), b, 0o600))
	return dir
}

func TestVerifyCleanFile(t *testing.T) {
	dir, _ := cleanFile(t)
	code, out := runVerify(t, dir)
	require.Equal(t, 0, code, out)
	assert.Regexp(t, `^journal: none at \S+\nok: .*24 streams, \d+ records, [1-9]\d* snapshots equal to their replay, [1-9]\d* checkpoints, signatures not checked`, out)

	keyFile := filepath.Join(t.TempDir(), "pub")
	require.NoError(t, os.WriteFile(keyFile, []byte(hex.EncodeToString(crashtest.PublicKey())+"\n"), 0o600))
	code, out = runVerify(t, dir, "--public-key", keyFile)
	require.Equal(t, 0, code, out)
	assert.Regexp(t, `[1-9]\d* signatures verified`, out)

	// The key of another server: every signature is refused.
	other, _, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(keyFile, other, 0o600))
	code, out = runVerify(t, dir, "--public-key", keyFile)
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "not by the given key")
}

func TestVerifyHeldFileFailsFast(t *testing.T) {
	dir, _ := cleanFile(t)
	held, err := eventstore.Open(filepath.Join(dir, dbFile), nil)
	require.NoError(t, err)
	defer held.Close()
	start := time.Now()
	code, out := runVerify(t, dir, "--timeout", "300ms")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "held by another process")
	assert.Less(t, time.Since(start), 5*time.Second)
}

// entry is one stored key/value of the clean file.
type entry struct {
	bucket []string
	key    []byte
	size   int
}

func entries(t *testing.T, path string) []entry {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	require.NoError(t, err)
	defer db.Close()
	var out []entry
	var walk func(b *bolt.Bucket, path []string) error
	walk = func(b *bolt.Bucket, path []string) error {
		return b.ForEach(func(k, v []byte) error {
			if v == nil {
				return walk(b.Bucket(k), append(append([]string(nil), path...), string(k)))
			}
			out = append(out, entry{bucket: path, key: bytes.Clone(k), size: len(v)})
			return nil
		})
	}
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error { return walk(b, []string{string(name)}) })
	}))
	return out
}

func bucketOf(tx *bolt.Tx, path []string) *bolt.Bucket {
	b := tx.Bucket([]byte(path[0]))
	for _, p := range path[1:] {
		b = b.Bucket([]byte(p))
	}
	return b
}

// The value sweep: single bytes flipped inside stored values, through
// bbolt (records most, then every other kind of value), and tails dropped.
// verify reports every one, naming the stream and, for a record, its
// version.
func TestVerifyCatchesEveryValueFlipAndDroppedTail(t *testing.T) {
	dir, clean := cleanFile(t)
	all := entries(t, filepath.Join(dir, dbFile))
	var records, others []entry
	for _, e := range all {
		switch {
		case e.bucket[0] == "tables" || e.size == 0:
			// Tables (the registry's index) are bookkeeping derived from
			// the log, outside what verify proves (eventstore.Tables).
		case e.bucket[0] == "streams":
			records = append(records, e)
		default:
			others = append(others, e)
		}
	}
	require.NotEmpty(t, records)
	rng := rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano())))
	flips, caught := 0, 0
	for i := range sweepSize(*valueFlips, 80, 400) {
		pool := records
		if i%4 == 3 {
			pool = others
		}
		e := pool[rng.IntN(len(pool))]
		off := rng.IntN(e.size)
		mask := byte(1 + rng.IntN(255))
		d := withFile(t, clean)
		rawBolt(t, filepath.Join(d, dbFile), func(tx *bolt.Tx) error {
			b := bucketOf(tx, e.bucket)
			v := bytes.Clone(b.Get(e.key))
			v[off] ^= mask
			return b.Put(e.key, v)
		})
		flips++
		code, out := runVerify(t, d)
		what := fmt.Sprintf("byte %d of %v/%x (xor %#x)", off, e.bucket, e.key, mask)
		if !assert.Equal(t, 1, code, "%s: not reported:\n%s", what, out) {
			continue
		}
		switch e.bucket[0] {
		case "streams":
			stream, version := e.bucket[1], int64(binary.BigEndian.Uint64(e.key))
			assert.Contains(t, out, fmt.Sprintf("stream %q", stream), what)
			assert.Regexp(t, regexp.MustCompile(fmt.Sprintf(`version %d\b`, version)), out, what)
		case "heads", "snapshots":
			assert.Contains(t, out, fmt.Sprintf("stream %q", e.key), what)
		case "checkpoints":
			assert.Contains(t, out, fmt.Sprintf("stream %q", e.key[:len(e.key)-9]), what)
		}
		caught++
	}

	// Dropped tails: the last 1..3 records of each stream.
	streams := map[string]int64{}
	for _, e := range records {
		if v := int64(binary.BigEndian.Uint64(e.key)); v > streams[e.bucket[1]] {
			streams[e.bucket[1]] = v
		}
	}
	names := make([]string, 0, len(streams))
	for s := range streams {
		names = append(names, s)
	}
	sort.Strings(names)
	drops := 0
	for i, s := range names {
		head := streams[s]
		drop := min(int64(1+i%3), head)
		d := withFile(t, clean)
		rawBolt(t, filepath.Join(d, dbFile), func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("streams")).Bucket([]byte(s))
			for v := head; v > head-drop; v-- {
				if err := b.Delete(binary.BigEndian.AppendUint64(nil, uint64(v))); err != nil {
					return err
				}
			}
			return nil
		})
		code, out := runVerify(t, d)
		drops++
		if assert.Equal(t, 1, code, "tail of %d dropped from %q not reported:\n%s", drop, s, out) {
			assert.Contains(t, out, fmt.Sprintf("stream %q version %d: record is missing", s, head-drop+1))
			caught++
		}
	}
	msg := fmt.Sprintf("verify value sweep: %d single-byte flips in stored values + %d dropped tails: %d reported, %d missed",
		flips, drops, caught, flips+drops-caught)
	t.Log(msg)
	fmt.Println(msg)
	assert.Equal(t, flips+drops, caught)
}

// The raw sweep: bytes flipped at sampled offsets of the file's content
// (meta pages, the freelist, every reachable page — headers, elements,
// keys, values, slack). Every one is reported as corruption: never "ok",
// never a panic (a panic would kill this test binary).
func TestVerifyCatchesEveryRawByteFlip(t *testing.T) {
	dir, clean := cleanFile(t)
	problems, live, err := verify.CheckPages(filepath.Join(dir, dbFile))
	require.NoError(t, err)
	require.Empty(t, problems, "the clean file passes the page check")
	var total int64
	for _, r := range live {
		total += r.Len
	}
	rng := rand.New(rand.NewPCG(11, uint64(time.Now().UnixNano())))
	caught := 0
	skippedBbolt := 0
	n := sweepSize(*rawFlips, 120, 600)
	for range n {
		at := rng.Int64N(total)
		var off int64
		for _, r := range live {
			if at < r.Len {
				off = r.Off + at
				break
			}
			at -= r.Len
		}
		b := bytes.Clone(clean)
		mask := byte(1 + rng.IntN(255))
		b[off] ^= mask
		code, out := runVerify(t, withFile(t, b))
		if !assert.Equal(t, 1, code, "flip at offset %d (page %d, xor %#x) not reported:\n%s", off, off/int64(os.Getpagesize()), mask, out) {
			continue
		}
		assert.NotContains(t, out, "ok:")
		if strings.Contains(out, "stream checks were not run") {
			skippedBbolt++
		}
		caught++
	}
	msg := fmt.Sprintf("verify raw sweep: %d single-byte flips at sampled offsets of %d content bytes (file %d bytes): %d reported as corruption (%d by the page check), %d missed, 0 panics",
		n, total, len(clean), caught, skippedBbolt, n-caught)
	t.Log(msg)
	fmt.Println(msg)
	assert.Equal(t, n, caught)
}

func rawBolt(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	require.NoError(t, err)
	require.NoError(t, db.Update(fn))
	require.NoError(t, db.Close())
}

// Someone who can rewrite the file recomputes every hash after altering a
// record, drops the snapshot and fixes the checkpoints' checksums: the
// unsigned chain now verifies, but the Ed25519 signatures do not.
func TestVerifySignaturesCatchARehashedHistory(t *testing.T) {
	dir, _ := cleanFile(t)
	path := filepath.Join(dir, dbFile)
	keyFile := filepath.Join(t.TempDir(), "pub")
	require.NoError(t, os.WriteFile(keyFile, crashtest.PublicKey(), 0o600))

	// A stream with a signed checkpoint after a record that holds context.
	var victim string
	var version, signedAt int64
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	require.NoError(t, err)
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		cps := tx.Bucket([]byte("checkpoints"))
		return cps.ForEach(func(k, _ []byte) error {
			if victim != "" {
				return nil
			}
			s, v := string(k[:len(k)-9]), int64(binary.BigEndian.Uint64(k[len(k)-8:]))
			recs := tx.Bucket([]byte("streams")).Bucket([]byte(s))
			for x := v; x >= 1; x-- {
				if bytes.Contains(recs.Get(binary.BigEndian.AppendUint64(nil, uint64(x))), []byte("context words")) {
					victim, version, signedAt = s, x, v
					return nil
				}
			}
			return nil
		})
	}))
	require.NoError(t, db.Close())
	require.NotEmpty(t, victim)
	t.Logf("rewriting %q version %d (signed at %d)", victim, version, signedAt)

	rawBolt(t, path, func(tx *bolt.Tx) error {
		recs := tx.Bucket([]byte("streams")).Bucket([]byte(victim))
		key := func(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }
		rec := bytes.Clone(recs.Get(key(version)))
		i := bytes.Index(rec, []byte("context words"))
		copy(rec[i:], "CONTEXT")
		require.NoError(t, recs.Put(key(version), rec))
		// Recompute the chain from there on.
		prev := sha256.Sum256(rec)
		heads := map[int64][32]byte{version: prev}
		for v := version + 1; ; v++ {
			r := recs.Get(key(v))
			if r == nil {
				break
			}
			r = bytes.Clone(r)
			copy(r[recordPrevOffset:], prev[:])
			require.NoError(t, recs.Put(key(v), r))
			prev = sha256.Sum256(r)
			heads[v] = prev
		}
		hv := bytes.Clone(tx.Bucket([]byte("heads")).Get([]byte(victim)))
		copy(hv[9:], prev[:])
		require.NoError(t, tx.Bucket([]byte("heads")).Put([]byte(victim), hv))
		require.NoError(t, tx.Bucket([]byte("snapshots")).Delete([]byte(victim)))
		// Checkpoints: new heads, checksums recomputed; signatures kept.
		cps := tx.Bucket([]byte("checkpoints"))
		c := cps.Cursor()
		prefix := append([]byte(victim), 0)
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			cv := int64(binary.BigEndian.Uint64(k[len(k)-8:]))
			h, ok := heads[cv]
			if !ok {
				continue
			}
			nv := bytes.Clone(v)
			copy(nv[10:42], h[:])
			sum := sha256.Sum256(append(bytes.Clone(k), nv[:len(nv)-32]...))
			copy(nv[len(nv)-32:], sum[:])
			require.NoError(t, cps.Put(bytes.Clone(k), nv))
		}
		return nil
	})

	code, out := runVerify(t, dir)
	assert.Equal(t, 0, code, "without the public key the rewritten history passes every hash check:\n%s", out)
	code, out = runVerify(t, dir, "--public-key", keyFile)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, fmt.Sprintf("stream %q version %d: signed checkpoint", victim, signedAt))
	assert.Contains(t, out, "signature does not match")
}

// Files that are not (whole) databases: reported, never a panic, never ok.
func TestVerifyBrokenFiles(t *testing.T) {
	_, clean := cleanFile(t)
	for name, b := range map[string][]byte{
		"empty":             {},
		"garbage":           bytes.Repeat([]byte("not a database "), 1000),
		"zeros":             make([]byte, 64<<10),
		"truncated to half": clean[:len(clean)/2],
		"first page only":   clean[:os.Getpagesize()],
		"meta pages zeroed": append(make([]byte, 2*os.Getpagesize()), clean[2*os.Getpagesize():]...),
	} {
		t.Run(name, func(t *testing.T) {
			code, out := runVerify(t, withFile(t, b))
			assert.Equal(t, 1, code, out)
			assert.NotContains(t, out, "ok:")
		})
	}
}

// The checkpoint signing key a server keeps beside its data, and the
// public half verify finds there by default.
func TestSigningKeyFiles(t *testing.T) {
	dir := t.TempDir()
	k1, err := loadSigningKey(dir)
	require.NoError(t, err)
	k2, err := loadSigningKey(dir)
	require.NoError(t, err)
	assert.Equal(t, k1, k2, "stable across restarts")
	fi, err := os.Stat(filepath.Join(dir, checkpointKeyFile))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	pub, err := loadPublicKey(filepath.Join(dir, checkpointPubFile))
	require.NoError(t, err)
	assert.Equal(t, k1.Public(), pub)

	// verify picks DIR/checkpoint.pub up by itself.
	data, _ := cleanFile(t)
	require.NoError(t, os.WriteFile(filepath.Join(data, checkpointPubFile), []byte(hex.EncodeToString(crashtest.PublicKey())), 0o644))
	code, out := runVerify(t, data)
	require.Equal(t, 0, code, out)
	assert.Regexp(t, `[1-9]\d* signatures verified`, out)
}
