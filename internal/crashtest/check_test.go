package crashtest_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

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
