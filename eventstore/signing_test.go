package eventstore_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/stateindex/stateindex/eventstore"
)

func signingKey(seed byte) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
}

func TestCheckpointSignAndVerify(t *testing.T) {
	path := tempPath(t)
	s := openAt(t, path, fast)
	appendN(t, s, "a", 0, 5)
	appendN(t, s, "b", 0, 2)
	key := signingKey(1)
	pub := key.Public().(ed25519.PublicKey)

	cp, err := s.SignCheckpoint(t.Context(), "a", 3, eventstore.CheckpointSnapshot, key)
	require.NoError(t, err)
	recs := records(t, s, "a")
	assert.Equal(t, recs[2].Hash, cp.Head, "signs the stored record's chain hash")
	require.NoError(t, cp.VerifySignature(pub))
	_, err = s.SignCheckpoint(t.Context(), "a", 5, eventstore.CheckpointRunFinished, key)
	require.NoError(t, err)
	_, err = s.SignCheckpoint(t.Context(), "b", 2, eventstore.CheckpointRunFinished, key)
	require.NoError(t, err)

	for _, bad := range []struct {
		name    string
		stream  string
		version int64
		want    error
	}{
		{"beyond head", "a", 6, eventstore.ErrInvalidSnapshotVersion},
		{"zero", "a", 0, eventstore.ErrInvalidSnapshotVersion},
		{"no stream", "zzz", 1, eventstore.ErrInvalidSnapshotVersion},
		{"bad name", "", 1, eventstore.ErrEmptyStream},
	} {
		_, err := s.SignCheckpoint(t.Context(), bad.stream, bad.version, eventstore.CheckpointSnapshot, key)
		assert.ErrorIs(t, err, bad.want, bad.name)
	}
	_, err = s.SignCheckpoint(t.Context(), "a", 1, eventstore.CheckpointSnapshot, key[:10])
	assert.ErrorIs(t, err, eventstore.ErrInvalidOptions)

	// Reopen: they are durable, listed per stream and in all.
	require.NoError(t, s.Close())
	s = openAt(t, path, fast)
	var got []eventstore.Checkpoint
	require.NoError(t, s.Checkpoints(t.Context(), "", func(c eventstore.Checkpoint) error { got = append(got, c); return nil }))
	require.Len(t, got, 3)
	assert.Equal(t, []string{"a", "a", "b"}, []string{got[0].Stream, got[1].Stream, got[2].Stream})
	assert.Equal(t, []int64{3, 5, 2}, []int64{got[0].Version, got[1].Version, got[2].Version})
	for _, c := range got {
		require.NoError(t, c.VerifySignature(pub))
	}
	got = nil
	require.NoError(t, s.Checkpoints(t.Context(), "b", func(c eventstore.Checkpoint) error { got = append(got, c); return nil }))
	require.Len(t, got, 1)

	// Another key, another stream, another version: refused.
	other := signingKey(2).Public().(ed25519.PublicKey)
	assert.ErrorIs(t, got[0].VerifySignature(other), eventstore.ErrBadSignature)
	moved := got[0]
	moved.Version = 1
	assert.ErrorIs(t, moved.VerifySignature(pub), eventstore.ErrBadSignature)
	moved = got[0]
	moved.Stream = "a"
	assert.ErrorIs(t, moved.VerifySignature(pub), eventstore.ErrBadSignature)
	moved = got[0]
	moved.Head[0] ^= 1
	assert.ErrorIs(t, moved.VerifySignature(pub), eventstore.ErrBadSignature)
	require.NoError(t, s.Verify(t.Context(), nil), "the checkpoints bucket leaves the file valid")
}

// A damaged checkpoint is reported, even by a reader without the public
// key, and the others are still listed.
func TestCheckpointDamageIsDetected(t *testing.T) {
	path := tempPath(t)
	s := openAt(t, path, fast)
	appendN(t, s, "a", 0, 3)
	key := signingKey(1)
	for v := int64(1); v <= 3; v++ {
		_, err := s.SignCheckpoint(t.Context(), "a", v, eventstore.CheckpointSnapshot, key)
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())
	for i := 0; i < 138; i += 11 {
		rawUpdate(t, path, func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("checkpoints"))
			k := []byte("a\x00\x00\x00\x00\x00\x00\x00\x00\x02")
			v := bytes.Clone(b.Get(k))
			v[i] ^= 0x40
			return b.Put(k, v)
		})
		s = openAt(t, path, fast)
		n := 0
		err := s.Checkpoints(t.Context(), "", func(eventstore.Checkpoint) error { n++; return nil })
		var ce *eventstore.CorruptionError
		if i == 0 {
			assert.ErrorIs(t, err, eventstore.ErrUnsupportedFormat, "format byte")
		} else if assert.True(t, errors.As(err, &ce), "byte %d: %v", i, err) {
			assert.Equal(t, "a", ce.Stream)
			assert.Equal(t, int64(2), ce.Version)
		}
		assert.Equal(t, 2, n, "the intact checkpoints are still listed")
		require.NoError(t, s.Close())
		rawUpdate(t, path, func(tx *bolt.Tx) error { // undo
			b := tx.Bucket([]byte("checkpoints"))
			k := []byte("a\x00\x00\x00\x00\x00\x00\x00\x00\x02")
			v := bytes.Clone(b.Get(k))
			v[i] ^= 0x40
			return b.Put(k, v)
		})
	}
}

func TestCheckpointRefusedAfterFailedCommit(t *testing.T) {
	s := openAt(t, tempPath(t), fast)
	appendN(t, s, "a", 0, 2)
	eventstore.SetCommitHook(s, func() error { return errors.New("disk on fire") })
	_, err := s.Append(t.Context(), "a", 2, []eventstore.Event{{Type: "t"}})
	require.ErrorIs(t, err, eventstore.ErrCommitFailed)
	_, err = s.SignCheckpoint(context.Background(), "a", 2, eventstore.CheckpointSnapshot, signingKey(1))
	require.ErrorIs(t, err, eventstore.ErrWritesDisabled, "no write after a failed commit, checkpoints included")
	require.NoError(t, s.Close())
	_, err = s.SignCheckpoint(context.Background(), "a", 2, eventstore.CheckpointSnapshot, signingKey(1))
	require.ErrorIs(t, err, eventstore.ErrClosed)
}
