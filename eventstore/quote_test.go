package eventstore_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/stateindex/stateindex/eventstore"
)

// A damaged key can be as large as the storage engine allows (or, read
// through a corrupted length, megabytes): errors quote at most a short
// prefix of it and say how long it was.
func TestCorruptionErrorsQuoteBoundedBytes(t *testing.T) {
	huge := bytes.Repeat([]byte{0xab}, 30_000)
	for _, tc := range []struct {
		name   string
		damage func(tx *bolt.Tx) error
		read   func(s *eventstore.BoltStore) error
	}{
		{"record key", func(tx *bolt.Tx) error {
			return tx.Bucket(eventstore.BucketStreams).Bucket([]byte("victim")).Put(huge, []byte{1})
		}, func(s *eventstore.BoltStore) error { _, err := readErr(s, "victim", 1); return err }},
		{"global index key", func(tx *bolt.Tx) error {
			return tx.Bucket(eventstore.BucketSeq).Put(append([]byte{0xff}, huge...), bytes.Repeat([]byte{1}, 16))
		}, func(s *eventstore.BoltStore) error {
			return s.ReadAll(t.Context(), 1, func(eventstore.Record) error { return nil })
		}},
		{"stream bucket holding a plain value", func(tx *bolt.Tx) error {
			return tx.Bucket(eventstore.BucketStreams).Put(bytes.Repeat([]byte("n"), 30_000), []byte{1})
		}, func(s *eventstore.BoltStore) error {
			var reported error
			err := s.Verify(t.Context(), func(_ string, err error) { reported = errors.Join(reported, err) })
			require.ErrorIs(t, err, eventstore.ErrCorrupt)
			return reported
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tempPath(t)
			s, err := eventstore.Open(path, fast)
			require.NoError(t, err)
			appendN(t, s, "victim", 0, 3)
			require.NoError(t, s.Close())
			rawUpdate(t, path, tc.damage)
			s = openAt(t, path, fast)

			err = tc.read(s)
			require.ErrorIs(t, err, eventstore.ErrCorrupt)
			msg := err.Error()
			assert.Less(t, len(msg), 1024, "the error quotes a bounded prefix: %.300s", msg)
			assert.Contains(t, msg, "bytes)", "and says how long the value was: %.300s", msg)
			assert.False(t, strings.Contains(msg, strings.Repeat("ab", 100)) || strings.Contains(msg, strings.Repeat("n", 100)), "%.300s", msg)
		})
	}
}
