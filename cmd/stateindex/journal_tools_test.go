package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/eventstore"
)

// journalOnlyCopy returns a data directory as a crashed server would leave
// it: populateWith's five records (five journal frames) acknowledged and in
// the journal, none of them in bbolt (the applier waits an hour, and the
// files are copied while the store is open).
func journalOnlyCopy(t *testing.T) string {
	t.Helper()
	src := t.TempDir()
	st, err := eventstore.Open(filepath.Join(src, dbFile), &eventstore.Options{NoSync: true, ApplyInterval: time.Hour, ApplyBytes: 1 << 30})
	require.NoError(t, err)
	defer st.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	defer sys.Shutdown()
	cfg := actors.DefaultConfig()
	cfg.TokenKey, cfg.Logger = bytes.Repeat([]byte{7}, 32), quiet
	srv, err := actors.Start(sys, st, cfg)
	require.NoError(t, err)
	populateWith(t, srv.Client(), context.Background())
	srv.Stop()
	js := st.JournalStats()
	require.Equal(t, 5, js.Pending)
	require.Equal(t, uint64(5), js.Frames)

	dst := t.TempDir()
	copyTo(t, filepath.Join(src, dbFile), filepath.Join(dst, dbFile))
	jdir := eventstore.JournalDir(filepath.Join(dst, dbFile))
	require.NoError(t, os.Mkdir(jdir, 0o700))
	segs, err := os.ReadDir(js.Dir)
	require.NoError(t, err)
	for _, e := range segs {
		copyTo(t, filepath.Join(js.Dir, e.Name()), filepath.Join(jdir, e.Name()))
	}
	return dst
}

func copyTo(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(dst, b, 0o600))
}

// firstFrameSegment is the segment holding frames (generation set in the
// first frame's header) and that frame's offset.
func firstFrameSegment(t *testing.T, dir string) (string, int) {
	t.Helper()
	const first = 4096 // eventstore's segment header size: the first frame follows it
	m, err := filepath.Glob(filepath.Join(eventstore.JournalDir(filepath.Join(dir, dbFile)), "*.seg"))
	require.NoError(t, err)
	for _, p := range m {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		if len(b) > first+32 && binary.LittleEndian.Uint64(b[first+8:]) != 0 && binary.LittleEndian.Uint32(b[first:]) != 0 {
			return p, first
		}
	}
	t.Fatal("no segment holds a frame")
	return "", 0
}

// verify applies the journal's records bbolt lacks and says so; the
// records are all checked.
func TestVerifyAppliesTheJournalTail(t *testing.T) {
	dir := journalOnlyCopy(t)
	code, out := runVerify(t, dir)
	require.Equal(t, 0, code, out)
	jdir := eventstore.JournalDir(filepath.Join(dir, dbFile))
	assert.Regexp(t, `journal: `+jdir+`: 1 segment\(s\), \d+ bytes on disk; 5 frame\(s\) checked, 5 record\(s\) applied to bbolt at open \(sequences 1\.\.5\); 0 torn byte\(s\) cut; 0 warning\(s\)`, out)
	assert.Contains(t, out, "1 streams, 5 records")

	// Once applied, a second run finds bbolt holding everything.
	code, out = runVerify(t, dir)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "5 frame(s) checked, bbolt already held all their records")
}

// A store that never had a journal gets none from verify, inspect or export.
func TestToolsCreateNoJournal(t *testing.T) {
	dir := t.TempDir()
	st, err := eventstore.Open(filepath.Join(dir, dbFile), &eventstore.Options{NoSync: true, JournalOff: true})
	require.NoError(t, err)
	_, err = st.Append(context.Background(), "s", 0, []eventstore.Event{{Type: "t", Data: []byte("d")}})
	require.NoError(t, err)
	require.NoError(t, st.Close())
	jdir := eventstore.JournalDir(filepath.Join(dir, dbFile))
	require.NoDirExists(t, jdir)
	for _, args := range [][]string{{"inspect"}, {"export"}, {"verify"}} {
		var out, errb bytes.Buffer
		run(append(args, "--data", dir), &out, &errb)
		assert.Contains(t, out.String()+errb.String(), "journal: none at "+jdir, args[0])
		assert.NoDirExists(t, jdir, args[0])
	}
}

// A damaged frame followed by valid ones is corruption: verify reports it
// as a problem naming the segment and the offset, and exits 1.
func TestVerifyReportsADamagedJournal(t *testing.T) {
	dir := journalOnlyCopy(t)
	seg, off := firstFrameSegment(t, dir)
	for _, at := range []int{off + 4, off + 40} { // the checksum, a record's bytes
		t.Run(fmt.Sprint(at-off), func(t *testing.T) {
			d := t.TempDir()
			copyTo(t, filepath.Join(dir, dbFile), filepath.Join(d, dbFile))
			jdir := eventstore.JournalDir(filepath.Join(d, dbFile))
			require.NoError(t, os.Mkdir(jdir, 0o700))
			b, err := os.ReadFile(seg)
			require.NoError(t, err)
			b[at] ^= 0x40
			bad := filepath.Join(jdir, filepath.Base(seg))
			require.NoError(t, os.WriteFile(bad, b, 0o600))
			code, out := runVerify(t, d)
			assert.Equal(t, 1, code, out)
			assert.Contains(t, out, fmt.Sprintf("file: eventstore: journal %s at offset %d: a damaged frame is followed by a valid frame", bad, off))
			assert.Contains(t, out, "1 problem(s) found")
		})
	}
}

// inspect prints the journal line and the records the journal held.
func TestInspectShowsTheJournal(t *testing.T) {
	dir := journalOnlyCopy(t)
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"inspect", "--data", dir}, &out, &errb), errb.String())
	assert.Contains(t, out.String(), "5 record(s) applied to bbolt at open (sequences 1..5)")
	assert.Contains(t, out.String(), "scope agent-7  version 5  frames 2 (2 live)")
	out.Reset()
	assert.Equal(t, 0, run([]string{"inspect", "-h"}, &out, &errb), "-h is a request, not an error")
	assert.Contains(t, out.String(), "the recovery step every open performs")
}

// export writes every record — those only in the journal included — as
// JSON Lines, filtered by scope and sequence.
func TestExport(t *testing.T) {
	dir := journalOnlyCopy(t)
	exp := func(t *testing.T, args ...string) []exportRecord {
		t.Helper()
		var out, errb bytes.Buffer
		require.Equal(t, 0, run(append([]string{"export", "--data", dir}, args...), &out, &errb), errb.String())
		var recs []exportRecord
		sc := bufio.NewScanner(&out)
		for sc.Scan() {
			var r exportRecord
			require.NoError(t, json.Unmarshal(sc.Bytes(), &r), sc.Text())
			recs = append(recs, r)
		}
		assert.Contains(t, errb.String(), fmt.Sprintf("exported %d record(s)", len(recs)))
		return recs
	}
	all := exp(t)
	require.Len(t, all, 5, "the journal's records are exported")

	st, err := eventstore.Open(filepath.Join(dir, dbFile), &eventstore.Options{NoSync: true, JournalOff: true})
	require.NoError(t, err)
	var want []exportRecord
	require.NoError(t, st.ReadAll(context.Background(), 0, func(r eventstore.Record) error {
		want = append(want, exportRecord{r.Stream, r.Version, r.Seq, r.Type, r.Data, hex.EncodeToString(r.Hash[:])})
		return nil
	}))
	require.NoError(t, st.Close())
	assert.Equal(t, want, all)
	for i, r := range all {
		assert.Equal(t, uint64(i+1), r.Seq)
		assert.Equal(t, "agent-7", r.Stream)
		assert.NotEmpty(t, r.Data)
		assert.Len(t, r.Hash, 64)
	}
	// The raw line format.
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"export", "--data", dir, "--from", "5"}, &out, &errb))
	line := strings.TrimSpace(out.String())
	assert.Regexp(t, `^\{"stream":"agent-7","version":5,"seq":5,"type":"[^"]+","data":"[A-Za-z0-9+/=]+","hash":"[0-9a-f]{64}"\}$`, line)

	for _, tc := range []struct {
		args []string
		want []exportRecord
	}{
		{[]string{"--from", "3"}, all[2:]},
		{[]string{"--scope", "agent-7"}, all},
		{[]string{"--scope", "agent-7", "--from", "4"}, all[3:]},
		{[]string{"--from", "6"}, nil},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			assert.Equal(t, tc.want, exp(t, tc.args...))
		})
	}
	out.Reset()
	errb.Reset()
	assert.Equal(t, 1, run([]string{"export", "--data", dir, "--scope", "nope"}, &out, &errb))
	assert.Contains(t, errb.String(), `no scope "nope"`)
	assert.Empty(t, out.String())

	// A damaged record of the scope fails the export (the chain is checked).
	db, err := bolt.Open(filepath.Join(dir, dbFile), 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		recs := tx.Bucket([]byte("streams")).Bucket([]byte("agent-7"))
		key := binary.BigEndian.AppendUint64(nil, 3)
		v := bytes.Clone(recs.Get(key))
		v[len(v)-1] ^= 0x01
		return recs.Put(key, v)
	}))
	require.NoError(t, db.Close())
	out.Reset()
	errb.Reset()
	assert.Equal(t, 1, run([]string{"export", "--data", dir, "--scope", "agent-7"}, &out, &errb), errb.String())
	assert.Contains(t, errb.String(), "corrupt")
}
