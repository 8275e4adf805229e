package crashtest_test

import (
	"encoding/binary"
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
	"github.com/stateindex/stateindex/internal/crashtest"
)

// The checker catches a broken promise: a lost acknowledged write, a reply
// that named the wrong version, a write nobody sent, a dropped tail.
func TestCheckCatchesBrokenPromises(t *testing.T) {
	base := t.TempDir()
	require.NoError(t, crashtest.Populate(base, 40, 3))
	side, err := os.ReadFile(filepath.Join(base, crashtest.SideFile))
	require.NoError(t, err)
	db, err := os.ReadFile(filepath.Join(base, crashtest.DataFile))
	require.NoError(t, err)
	copyOf := func(t *testing.T, side []byte) string {
		d := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(d, crashtest.SideFile), side, 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(d, crashtest.DataFile), db, 0o600))
		return d
	}
	// An acknowledged write to take apart: the last push of scope crash-03.
	var ack, id string
	for _, l := range strings.Split(string(side), "\n") {
		if strings.HasPrefix(l, "A crash-03 ") && strings.Contains(l, " PushFrame ") {
			ack = l
		}
	}
	require.NotEmpty(t, ack)
	id = strings.Fields(ack)[2]

	t.Run("intact", func(t *testing.T) {
		st, err := crashtest.Check(t.Context(), copyOf(t, side), 1)
		require.NoError(t, err)
		assert.Zero(t, st.Lost)
		assert.Positive(t, st.Acked)
	})
	t.Run("lost acknowledged write", func(t *testing.T) {
		fake := append([]byte(nil), side...)
		fake = append(fake, "A crash-03 never-written PushFrame 7 1\n"...)
		_, err := crashtest.Check(t.Context(), copyOf(t, fake), 1)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "LOST: acknowledged PushFrame never-written")
	})
	t.Run("reply named another version", func(t *testing.T) {
		f := strings.Fields(ack)
		f[4] = "999"
		fake := append(append([]byte(nil), side...), strings.Join(f, " ")+"\n"...)
		_, err := crashtest.Check(t.Context(), copyOf(t, fake), 1)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "replied version 999")
	})
	t.Run("write nobody sent", func(t *testing.T) {
		var kept []string
		for _, l := range strings.Split(string(side), "\n") {
			if !strings.Contains(l, " "+id+" ") {
				kept = append(kept, l)
			}
		}
		_, err := crashtest.Check(t.Context(), copyOf(t, []byte(strings.Join(kept, "\n"))), 1)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "PHANTOM")
	})
	t.Run("dropped tail", func(t *testing.T) {
		d := copyOf(t, side)
		b, err := bolt.Open(filepath.Join(d, crashtest.DataFile), 0o600, &bolt.Options{Timeout: time.Second})
		require.NoError(t, err)
		require.NoError(t, b.Update(func(tx *bolt.Tx) error {
			s := tx.Bucket([]byte("streams")).Bucket([]byte("crash-03"))
			k, _ := s.Cursor().Last()
			require.Len(t, k, 8)
			return s.Delete(binary.BigEndian.AppendUint64(nil, binary.BigEndian.Uint64(k)))
		}))
		require.NoError(t, b.Close())
		_, err = crashtest.Check(t.Context(), d, 1)
		require.Error(t, err)
		assert.Contains(t, err.Error(), `stream "crash-03"`)
	})
}

// retained populates a directory and runs one retention pass on it with a
// server clock an hour ahead (every run past the idempotency horizon):
// the storm's history, most of it removed to archives.
func retained(t *testing.T) string {
	d := t.TempDir()
	require.NoError(t, crashtest.Populate(d, 60, 5))
	store, err := eventstore.Open(filepath.Join(d, crashtest.DataFile), crashtest.StoreOptions())
	require.NoError(t, err)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	cfg := crashtest.RetentionServerConfig(quiet)
	cfg.Clock = func() time.Time { return time.Now().Add(time.Hour) }
	srv, err := actors.Start(sys, store, cfg)
	require.NoError(t, err)
	require.NoError(t, crashtest.StartRetention(srv, d))
	rep, err := srv.RunRetention(t.Context())
	require.NoError(t, err)
	require.Empty(t, rep.Errors)
	removed := 0
	for _, s := range rep.Scopes {
		if s.Through > 0 {
			removed++
		}
	}
	require.Positive(t, removed, "the pass removed nothing")
	srv.Stop()
	sys.Shutdown()
	require.NoError(t, store.Close())
	return d
}

// Under retention the checker finds every acknowledged write in the
// archives and the store together, answers GetFrame as removed for exactly
// the frames removed, and catches an archive lost or altered.
func TestCheckUnderRetention(t *testing.T) {
	d := retained(t)
	st, err := crashtest.Check(t.Context(), d, 1)
	require.NoError(t, err)
	assert.Zero(t, st.Lost)
	assert.Positive(t, st.Removals)
	assert.Positive(t, st.AckedArchived)
	assert.Positive(t, st.FramesRemoved)
	assert.Equal(t, st.Removals, st.Archives, "one archive per removal, none orphaned")
	assert.Empty(t, st.Unfinished)

	archives, err := filepath.Glob(filepath.Join(d, crashtest.ArchiveDir, "*", "*.jsonl"))
	require.NoError(t, err)
	require.NotEmpty(t, archives)
	copyDir := func(t *testing.T) string {
		c := filepath.Join(t.TempDir(), "crash")
		require.NoError(t, os.CopyFS(c, os.DirFS(d)))
		return c
	}
	rel, err := filepath.Rel(d, archives[0])
	require.NoError(t, err)
	t.Run("moved directory", func(t *testing.T) {
		_, err := crashtest.Check(t.Context(), copyDir(t), 1)
		require.NoError(t, err)
	})
	t.Run("archive lost", func(t *testing.T) {
		c := copyDir(t)
		require.NoError(t, os.Remove(filepath.Join(c, rel)))
		_, err := crashtest.Check(t.Context(), c, 1)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "LOST: version")
	})
	t.Run("archive altered", func(t *testing.T) {
		c := copyDir(t)
		p := filepath.Join(c, rel)
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		i := strings.Index(string(b), `"raw":"`) + len(`"raw":"`) + 20
		if b[i] == 'A' { // another base64 digit: the record's bytes change, not the line's form
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		require.NoError(t, os.WriteFile(p, b, 0o600))
		_, err = crashtest.Check(t.Context(), c, 1)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "archive")
	})
	t.Run("half-written archive", func(t *testing.T) {
		// What a kill inside WriteArchive leaves: counted, not an error.
		c := copyDir(t)
		b, err := os.ReadFile(filepath.Join(c, rel))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(c, rel)+".tmp", b, 0o600))
		st, err := crashtest.Check(t.Context(), c, 1)
		require.NoError(t, err)
		assert.Equal(t, 1, st.PartialArchives)
	})
}
