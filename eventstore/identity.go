package eventstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// A cluster member records in its data file who it is, so that a restart
// with another name, another member list or another shard count — which
// would serve the file's scopes under the wrong placement and fork their
// histories — refuses to start instead.
//
// Layout: an optional top-level bucket "identity" with one key "member"
// holding the msgpack Identity. Files without the bucket (standalone
// servers, and every file written before it existed) stay valid
// FormatVersion 1 files: readers that do not know the bucket ignore it.

var (
	bucketIdentity = []byte("identity")
	keyMember      = []byte("member")
)

// ErrIdentityMismatch is returned by ClaimIdentity when the data file
// already belongs to another member or placement.
var ErrIdentityMismatch = errors.New("eventstore: data file belongs to another cluster member or placement")

// Identity is a cluster member's recorded place.
type Identity struct {
	// Cluster is the cluster's name.
	Cluster string `msgpack:"c"`
	// Member is this member's name.
	Member string `msgpack:"m"`
	// Members is the configured list of storage members the file's scopes
	// were placed among, sorted.
	Members []string `msgpack:"ms"`
	// Shards is the member's shard count.
	Shards int `msgpack:"sh"`
}

func (id Identity) String() string {
	return fmt.Sprintf("member %q of cluster %q, members %v, %d shards", id.Member, id.Cluster, id.Members, id.Shards)
}

func (id Identity) equal(o Identity) bool {
	return id.Cluster == o.Cluster && id.Member == o.Member && id.Shards == o.Shards && slices.Equal(id.Members, o.Members)
}

// Identity returns the identity recorded in the file; ok is false when
// none is.
func (s *BoltStore) Identity(ctx context.Context) (id Identity, ok bool, err error) {
	if err := ctx.Err(); err != nil {
		return id, false, err
	}
	err = s.view(func(tx *bolt.Tx) error {
		id, ok, err = readIdentity(tx)
		return err
	})
	return id, ok, err
}

// ClaimIdentity records id (its Members sorted) if the file has no
// identity yet, and returns nil if the file's identity is id. A file that
// belongs to another member or placement is ErrIdentityMismatch, naming
// both; nothing is written then.
func (s *BoltStore) ClaimIdentity(ctx context.Context, id Identity) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if id.Member == "" || len(id.Members) == 0 || id.Shards <= 0 {
		return fmt.Errorf("%w: identity needs a member, members and shards: %v", ErrInvalidOptions, id)
	}
	id.Members = slices.Clone(id.Members)
	slices.Sort(id.Members)
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	if err := s.writeErr(); err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		old, ok, err := readIdentity(tx)
		if err != nil {
			return err
		}
		if ok {
			if !old.equal(id) {
				return fmt.Errorf("%w: %s is %s, not %s", ErrIdentityMismatch, s.path, old, id)
			}
			return nil
		}
		b, err := tx.CreateBucketIfNotExists(bucketIdentity)
		if err != nil {
			return err
		}
		v, err := Marshal(id)
		if err != nil {
			return err
		}
		return b.Put(keyMember, v)
	})
}

// writeErr is the error that disabled writes, if any.
func (s *BoltStore) writeErr() error {
	if p := s.failed.Load(); p != nil {
		return &commitError{cause: *p}
	}
	return nil
}

func readIdentity(tx *bolt.Tx) (Identity, bool, error) {
	var id Identity
	b := tx.Bucket(bucketIdentity)
	if b == nil {
		return id, false, nil
	}
	v := b.Get(keyMember)
	if v == nil {
		return id, false, nil
	}
	if err := Unmarshal(v, &id); err != nil {
		return id, false, corrupt("", 0, fmt.Sprintf("cluster identity undecodable: %v", err))
	}
	return id, true, nil
}
