package eventstore

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"
)

// Signed checkpoints (persistence-continuation-chains.md: "checkpoint
// events are interleaved at turn boundaries with SHA256 hash and Ed25519
// signature covering all preceding bytes"). The hash chain already makes
// every record vouch for all records before it; a checkpoint signs a
// stream's chain hash at one version with an Ed25519 key, so that someone
// who can rewrite the file and recompute every hash still cannot make the
// history up to a signed version look intact without the private key.
//
// Checkpoints live in a bucket of their own, created by the first one
// written; a file without it is an ordinary FormatVersion 1 file, and a
// build that does not know the bucket ignores it:
//
//	checkpoints <stream> 0x00 <uint64 BE version> -> checkpoint value
//
// The value is fixed-width, little more than the signature:
//
//	[1]  checkpoint format (1)
//	[1]  reason (CheckpointReason)
//	[8]  key id: the first 8 bytes of SHA-256 of the public key
//	[32] the stream's chain hash at the version (the record's Hash)
//	[64] Ed25519 signature over CheckpointMessage
//	[32] SHA-256 over key and the bytes above: damage is detected even by
//	     a reader that has no public key

var bucketCheckpoints = []byte("checkpoints")

const (
	checkpointFormat = 1
	checkpointLen    = 1 + 1 + 8 + sha256.Size + ed25519.SignatureSize + sha256.Size
	// checkpointDomain separates checkpoint signatures from any other use
	// of the key.
	checkpointDomain = "stateindex/checkpoint/v1\x00"
)

// ErrNoCheckpoints is returned by a store that keeps no signed checkpoints.
var ErrNoCheckpoints = errors.New("eventstore: this store keeps no signed checkpoints")

// CheckpointReason says which boundary a checkpoint marks.
type CheckpointReason uint8

// Checkpoint reasons.
const (
	// CheckpointSnapshot: a snapshot of the stream's projection was saved.
	CheckpointSnapshot CheckpointReason = 1
	// CheckpointRunFinished: a run finished (a root frame was popped).
	CheckpointRunFinished CheckpointReason = 2
)

func (r CheckpointReason) String() string {
	switch r {
	case CheckpointSnapshot:
		return "snapshot"
	case CheckpointRunFinished:
		return "run_finished"
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// KeyID names a public key: the first 8 bytes of its SHA-256.
type KeyID [8]byte

// PublicKeyID returns the id of pub.
func PublicKeyID(pub ed25519.PublicKey) KeyID {
	sum := sha256.Sum256(pub)
	var id KeyID
	copy(id[:], sum[:])
	return id
}

// Checkpoint is a signature over a stream's chain hash at a version.
type Checkpoint struct {
	Stream    string
	Version   int64
	Head      Hash // Hash of the record at Version
	Reason    CheckpointReason
	KeyID     KeyID
	Signature []byte
}

// CheckpointMessage is the byte string a checkpoint signs: a domain
// separator, the stream name (length-prefixed), the version, the chain hash
// and the reason.
func CheckpointMessage(stream string, version int64, head Hash, reason CheckpointReason) []byte {
	b := make([]byte, 0, len(checkpointDomain)+binary.MaxVarintLen64+len(stream)+8+sha256.Size+1)
	b = append(b, checkpointDomain...)
	b = binary.AppendUvarint(b, uint64(len(stream)))
	b = append(b, stream...)
	b = binary.BigEndian.AppendUint64(b, uint64(version))
	b = append(b, head[:]...)
	return append(b, byte(reason))
}

// Sign fills the checkpoint's key id and signature with key.
func (c *Checkpoint) Sign(key ed25519.PrivateKey) {
	c.KeyID = PublicKeyID(key.Public().(ed25519.PublicKey))
	c.Signature = ed25519.Sign(key, CheckpointMessage(c.Stream, c.Version, c.Head, c.Reason))
}

// ErrBadSignature is what VerifySignature's errors match.
var ErrBadSignature = errors.New("eventstore: checkpoint signature invalid")

// VerifySignature checks the checkpoint's signature against pub.
func (c *Checkpoint) VerifySignature(pub ed25519.PublicKey) error {
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("%w: public key is %d bytes, want %d", ErrBadSignature, len(pub), ed25519.PublicKeySize)
	}
	if id := PublicKeyID(pub); id != c.KeyID {
		return fmt.Errorf("%w: signed by key %x, not by the given key %x", ErrBadSignature, c.KeyID, id)
	}
	if !ed25519.Verify(pub, CheckpointMessage(c.Stream, c.Version, c.Head, c.Reason), c.Signature) {
		return fmt.Errorf("%w: the signature does not match the stream, version and chain hash it names", ErrBadSignature)
	}
	return nil
}

// Checkpointer is implemented by stores that keep signed checkpoints
// (BoltStore). The StateIndex writes one at snapshots and when a run
// finishes, if it has a signing key.
type Checkpointer interface {
	// SignCheckpoint signs the chain hash of stream at version — read from
	// the stored record, so the caller cannot sign a hash that is not there
	// — and stores the checkpoint durably. Writing one twice replaces it.
	SignCheckpoint(ctx context.Context, stream string, version int64, reason CheckpointReason, key ed25519.PrivateKey) (Checkpoint, error)
	// Checkpoints calls fn for each checkpoint of stream in version order,
	// or of every stream (in name order) if stream is "". Damaged entries
	// are skipped and returned at the end, joined (errors.Join of
	// *CorruptionError); signatures are not checked here (see
	// Checkpoint.VerifySignature).
	Checkpoints(ctx context.Context, stream string, fn func(Checkpoint) error) error
}

var _ Checkpointer = (*BoltStore)(nil)

func checkpointKey(stream string, version int64) []byte {
	k := make([]byte, 0, len(stream)+9)
	k = append(k, stream...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, uint64(version))
}

func encodeCheckpoint(c *Checkpoint) []byte {
	b := make([]byte, 0, checkpointLen)
	b = append(b, checkpointFormat, byte(c.Reason))
	b = append(b, c.KeyID[:]...)
	b = append(b, c.Head[:]...)
	b = append(b, c.Signature...)
	sum := checkpointSum(checkpointKey(c.Stream, c.Version), b)
	return append(b, sum[:]...)
}

func checkpointSum(key, body []byte) Hash {
	h := sha256.New()
	h.Write(key)
	h.Write(body)
	var sum Hash
	h.Sum(sum[:0])
	return sum
}

// decodeCheckpoint parses a stored checkpoint and its key. The stream name
// comes from the key; the checksum covers the key, so a damaged key is
// caught too.
func decodeCheckpoint(key, v []byte) (Checkpoint, error) {
	var c Checkpoint
	i := len(key) - 9
	if i < 1 || key[i] != 0 {
		return c, corrupt("", 0, "malformed checkpoint key "+quoteBytes(key))
	}
	c.Stream = string(key[:i])
	c.Version = int64(binary.BigEndian.Uint64(key[i+1:]))
	if len(v) > 0 && v[0] != checkpointFormat {
		return c, fmt.Errorf("%w: checkpoint of stream %q version %d has format %d (this build reads %d)",
			ErrUnsupportedFormat, c.Stream, c.Version, v[0], checkpointFormat)
	}
	if len(v) != checkpointLen {
		return c, corrupt(c.Stream, c.Version, fmt.Sprintf("checkpoint is %d bytes, want %d", len(v), checkpointLen))
	}
	body := v[:checkpointLen-sha256.Size]
	if sum := checkpointSum(key, body); !bytes.Equal(sum[:], v[len(body):]) {
		return c, corrupt(c.Stream, c.Version, "checkpoint checksum mismatch (the checkpoint or its key was altered)")
	}
	if err := checkStream(c.Stream); err != nil || c.Version < 1 {
		return c, corrupt(c.Stream, c.Version, "checkpoint names an invalid stream or version")
	}
	c.Reason = CheckpointReason(v[1])
	copy(c.KeyID[:], v[2:10])
	copy(c.Head[:], v[10:10+sha256.Size])
	c.Signature = bytes.Clone(v[10+sha256.Size : 10+sha256.Size+ed25519.SignatureSize])
	return c, nil
}

// SignCheckpoint implements Checkpointer. It runs its own fsynced write
// transaction (bbolt serialises it with the committer's). Like any commit,
// a failure disables writes until the store is reopened.
func (s *BoltStore) SignCheckpoint(ctx context.Context, stream string, version int64, reason CheckpointReason, key ed25519.PrivateKey) (Checkpoint, error) {
	if err := checkStream(stream); err != nil {
		return Checkpoint{}, err
	}
	if len(key) != ed25519.PrivateKeySize {
		return Checkpoint{}, fmt.Errorf("%w: signing key is %d bytes, want %d", ErrInvalidOptions, len(key), ed25519.PrivateKeySize)
	}
	if reason != CheckpointSnapshot && reason != CheckpointRunFinished {
		return Checkpoint{}, fmt.Errorf("eventstore: unknown checkpoint reason %d", reason)
	}
	if err := ctx.Err(); err != nil {
		return Checkpoint{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return Checkpoint{}, ErrClosed
	}
	if cause := s.failed.Load(); cause != nil {
		return Checkpoint{}, &commitError{cause: *cause}
	}
	cp := Checkpoint{Stream: stream, Version: version, Reason: reason}
	var refused error
	over := s.over.stream(stream) // journaled records bbolt may not have yet
	err := s.signUpdate(func(tx *bolt.Tx) error {
		bk, err := openBuckets(tx)
		if err != nil {
			refused = err
			return err
		}
		src, err := newLayeredSource(newBoltSource(bk, stream), over)
		if err != nil {
			refused = err
			return err
		}
		head, headHash, _, err := src.head()
		if err != nil {
			refused = err
			return err
		}
		if version < 1 || version > head {
			refused = fmt.Errorf("%w: checkpoint at version %d, stream %q is at version %d", ErrInvalidSnapshotVersion, version, stream, head)
			return refused
		}
		raw, ok, _ := src.get(version)
		if !ok {
			refused = corrupt(stream, version, "record is missing")
			return refused
		}
		cp.Head = sha256.Sum256(raw)
		// The hash must be the one the chain vouches for: the next record's
		// prev hash, or the head metadata.
		vouched := headHash
		if version < head {
			next, ok, _ := src.get(version + 1)
			var f recordFields
			if !ok || parseRecord(next, &f) != nil {
				refused = corrupt(stream, version+1, "record is missing or undecodable")
				return refused
			}
			vouched = f.prev
		}
		if vouched != cp.Head {
			refused = corrupt(stream, version, "its hash does not match what the chain records; refusing to sign it")
			return refused
		}
		cp.Sign(key)
		b, err := tx.CreateBucketIfNotExists(bucketCheckpoints)
		if err != nil {
			return err
		}
		return b.Put(checkpointKey(stream, version), encodeCheckpoint(&cp))
	})
	if refused != nil {
		return Checkpoint{}, refused
	}
	if err != nil {
		cause := fmt.Errorf("eventstore: commit of a checkpoint to %s failed: %w", s.path, err)
		s.failed.CompareAndSwap(nil, &cause)
		return Checkpoint{}, &commitError{cause: cause, inBatch: true}
	}
	return cp, nil
}

// signUpdate runs a write transaction, turning a panic of the storage
// engine into an error.
func (s *BoltStore) signUpdate(fn func(*bolt.Tx) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("storage engine panicked: %v", p)
		}
	}()
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	return s.db.Update(fn)
}

// Checkpoints implements Checkpointer.
func (s *BoltStore) Checkpoints(ctx context.Context, stream string, fn func(Checkpoint) error) error {
	var prefix []byte
	if stream != "" {
		if err := checkStream(stream); err != nil {
			return err
		}
		prefix = append([]byte(stream), 0)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	var out []Checkpoint
	var damaged []error
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketCheckpoints)
		if b == nil {
			return nil
		}
		c := b.Cursor()
		k, v := c.First()
		if prefix != nil {
			k, v = c.Seek(prefix)
		}
		for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			var err error
			if v == nil {
				err = corrupt("", 0, "the checkpoints bucket holds a bucket under "+quoteBytes(k))
			} else {
				var cp Checkpoint
				if cp, err = decodeCheckpoint(k, v); err == nil {
					out = append(out, cp)
				}
			}
			if err != nil && len(damaged) < maxCheckpointProblems {
				damaged = append(damaged, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, cp := range out {
		if err := fn(cp); err != nil {
			return err
		}
	}
	return errors.Join(damaged...)
}

// maxCheckpointProblems bounds the damage Checkpoints collects.
const maxCheckpointProblems = 100
