package eventstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Fencing (DESIGN §13): when several servers share one store (PostgreSQL),
// a stream — a scope — has one owner at a time, named with an epoch that
// only grows. A server that activates a scope takes the next epoch
// (AcquireOwner); each of its appends carries the fence it holds
// (WithFence) and the store checks it in the same transaction as the
// append. A deposed owner — paused, partitioned, or simply slower than the
// member that took the scope over — can never write again, even when it
// still holds the stream's latest version: its append fails with a
// *FencedError and changes nothing. Stores used by a single server
// (BoltStore) need no fences and ignore them.
//
// Only appends are fenced: they are the only writes that decide anything.
// A snapshot is a projection of records already in the log (whoever saves
// it, it replays to the same state); RemovePrefix removes only what an
// appended record (retention's, a destroy's) already decided; tables hold
// indexes rebuilt from the log.

// Fence names a stream's owner and the epoch it took. The zero Fence is
// "never owned".
type Fence struct {
	Owner string
	Epoch uint64
}

func (f Fence) String() string {
	if f.Epoch == 0 {
		return "no owner"
	}
	return fmt.Sprintf("%s (epoch %d)", f.Owner, f.Epoch)
}

// MaxOwnerBytes bounds an owner's name (CheckOwner).
const MaxOwnerBytes = 256

// ErrInvalidOwner is returned for an owner name CheckOwner refuses.
var ErrInvalidOwner = errors.New("eventstore: invalid owner name")

// ErrInvalidKeyName is returned by SharedKey for a name that is not 1..64
// bytes of [a-z0-9._-], or for a generated key that is empty or longer
// than MaxSharedKeyBytes.
var ErrInvalidKeyName = errors.New("eventstore: invalid shared key")

// MaxSharedKeyBytes bounds a key SharedKey stores.
const MaxSharedKeyBytes = 4096

// CheckOwner says whether owner is a name AcquireOwner accepts: 1 to
// MaxOwnerBytes bytes of valid UTF-8 without control characters. Every
// Fencer checks it (it is here so that a server can refuse a bad name at
// start, before it activates any scope).
func CheckOwner(owner string) error {
	switch {
	case owner == "":
		return fmt.Errorf("%w: empty", ErrInvalidOwner)
	case len(owner) > MaxOwnerBytes:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidOwner, len(owner), MaxOwnerBytes)
	case !utf8.ValidString(owner):
		return fmt.Errorf("%w: %q is not valid UTF-8", ErrInvalidOwner, owner)
	case strings.IndexFunc(owner, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: %q contains a control character", ErrInvalidOwner, owner)
	}
	return nil
}

// checkKeyName checks a SharedKey name: 1..64 bytes of [a-z0-9._-].
func checkKeyName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("%w: name %q is not 1..64 bytes", ErrInvalidKeyName, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: name %q has a byte outside [a-z0-9._-]", ErrInvalidKeyName, name)
		}
	}
	return nil
}

// checkSharedKey checks the bytes generate returned.
func checkSharedKey(name string, key []byte) error {
	if len(key) == 0 || len(key) > MaxSharedKeyBytes {
		return fmt.Errorf("%w: key %q generated with %d bytes, not 1..%d", ErrInvalidKeyName, name, len(key), MaxSharedKeyBytes)
	}
	return nil
}

// ErrFenced is what a *FencedError matches with errors.Is: the stream has
// a newer owner than the fence the write carried, and nothing was written.
var ErrFenced = errors.New("eventstore: fenced: the stream has a newer owner")

// FencedError says which fence a refused write held and which owner the
// stream has now.
type FencedError struct {
	Stream  string
	Held    Fence
	Current Fence
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("eventstore: fenced: stream %q is owned by %s; the write held %s and changed nothing", e.Stream, e.Current, e.Held)
}

// Is makes errors.Is(err, ErrFenced) true.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// Fencer is implemented by stores that several servers share
// (PostgresStore; MemoryStore, for tests of several servers in one
// process).
type Fencer interface {
	// AcquireOwner makes owner the stream's owner with the next epoch
	// (the current one plus one; 1 for a stream never owned), durably, and
	// returns the new fence. Any earlier fence of the stream is deposed at
	// once: every later write carrying it fails with a *FencedError. The
	// stream itself need not exist. owner must pass CheckOwner
	// (ErrInvalidOwner) and stream be a valid stream name; the same owner
	// acquiring again gets a new epoch too (a server that dropped a scope
	// and loads it again is a new activation).
	AcquireOwner(ctx context.Context, stream, owner string) (Fence, error)
	// Owner returns the stream's current fence (the zero Fence if it was
	// never owned).
	Owner(ctx context.Context, stream string) (Fence, error)
}

// KeyKeeper is implemented by shared stores that keep the secrets every
// server sharing them must agree on (the suspension-token key, the
// checkpoint signing key): the first server to ask creates a key, every
// later one — on any machine — gets the same bytes.
type KeyKeeper interface {
	// SharedKey returns the key stored under name, storing generate()'s
	// bytes first if none is (atomically: of two servers racing to create
	// it, both return the one that was stored). name is 1..64 bytes of
	// [a-z0-9._-].
	SharedKey(ctx context.Context, name string, generate func() ([]byte, error)) ([]byte, error)
}

type fenceKey struct{}

// WithFence returns a context whose appends (Append, AppendAsync) are
// checked against fence by a Fencer store, in the same transaction as the
// write: if the stream's current fence is not exactly fence, the append
// fails with a *FencedError and writes nothing. The fence is checked
// before the expected version: a deposed owner learns it was deposed even
// when its expected version is stale too. The zero Fence matches only a
// stream never owned. Appends without a fence are not checked (tools, a
// single server). Stores that are not Fencers ignore it.
func WithFence(ctx context.Context, fence Fence) context.Context {
	return context.WithValue(ctx, fenceKey{}, fence)
}

// FenceFrom returns the fence ctx carries (ok false when none).
func FenceFrom(ctx context.Context) (Fence, bool) {
	f, ok := ctx.Value(fenceKey{}).(Fence)
	return f, ok
}
