package storetest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/eventstore"
)

// RunFencer runs the conformance suite of eventstore.Fencer (DESIGN §13):
// epochs that only grow, appends checked against the fence they carry in
// the same transaction, nothing written by a deposed owner. open must
// return a store that implements eventstore.Fencer.
func RunFencer(t *testing.T, open Opener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s fencerStore)
	}{
		{"Epochs", testFencerEpochs},
		{"FencedAppend", testFencedAppend},
		{"FenceBeforeVersion", testFenceBeforeVersion},
		{"ZeroFence", testZeroFence},
		{"UnfencedUnchecked", testUnfencedUnchecked},
		{"FencedAppendAsync", testFencedAppendAsync},
		{"RacingOwners", testRacingOwners},
		{"FencerBadInput", testFencerBadInput},
		{"FencerClosed", testFencerClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, newFencer(t, open)) })
	}
}

// RunKeyKeeper runs the conformance suite of eventstore.KeyKeeper: the
// first key stored under a name is the one every caller gets. open must
// return a store that implements eventstore.KeyKeeper.
func RunKeyKeeper(t *testing.T, open Opener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s eventstore.Store, k eventstore.KeyKeeper)
	}{
		{"CreatedOnce", testKeyCreatedOnce},
		{"Racing", testKeyRacing},
		{"GenerateFails", testKeyGenerateFails},
		{"BadInput", testKeyBadInput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, open)
			k, ok := s.(eventstore.KeyKeeper)
			require.True(t, ok, "%T does not implement eventstore.KeyKeeper", s)
			tt.fn(t, s, k)
		})
	}
}

type fencerStore interface {
	eventstore.Store
	eventstore.Fencer
}

func newFencer(t *testing.T, open Opener) fencerStore {
	t.Helper()
	s := newStore(t, open)
	f, ok := s.(fencerStore)
	require.True(t, ok, "%T does not implement eventstore.Fencer", s)
	return f
}

func acquire(t *testing.T, s eventstore.Fencer, stream, owner string) eventstore.Fence {
	t.Helper()
	f, err := s.AcquireOwner(t.Context(), stream, owner)
	require.NoError(t, err)
	return f
}

func fenced(t *testing.T, f eventstore.Fence) context.Context {
	return eventstore.WithFence(t.Context(), f)
}

// requireFenced checks err is the *FencedError of a write to stream that
// held held while the stream's owner was current.
func requireFenced(t *testing.T, err error, stream string, held, current eventstore.Fence) {
	t.Helper()
	require.ErrorIs(t, err, eventstore.ErrFenced)
	var fe *eventstore.FencedError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, stream, fe.Stream)
	assert.Equal(t, held, fe.Held)
	assert.Equal(t, current, fe.Current)
	assert.False(t, errors.Is(err, eventstore.ErrConflict), "a fenced write is not a version conflict")
}

func testFencerEpochs(t *testing.T, s fencerStore) {
	cur, err := s.Owner(t.Context(), "s")
	require.NoError(t, err)
	assert.Equal(t, eventstore.Fence{}, cur, "a stream never owned")
	assert.Equal(t, "no owner", cur.String())

	// The stream need not exist; epochs grow by one per acquisition,
	// whoever acquires (the same owner again too).
	assert.Equal(t, eventstore.Fence{Owner: "a", Epoch: 1}, acquire(t, s, "s", "a"))
	assert.Equal(t, eventstore.Fence{Owner: "b", Epoch: 2}, acquire(t, s, "s", "b"))
	assert.Equal(t, eventstore.Fence{Owner: "a", Epoch: 3}, acquire(t, s, "s", "a"))
	cur, err = s.Owner(t.Context(), "s")
	require.NoError(t, err)
	assert.Equal(t, eventstore.Fence{Owner: "a", Epoch: 3}, cur)
	assert.Contains(t, cur.String(), "epoch 3")

	// Streams are independent, and acquiring writes no record.
	assert.Equal(t, eventstore.Fence{Owner: "b", Epoch: 1}, acquire(t, s, "t", "b"))
	cur, err = s.Owner(t.Context(), "s")
	require.NoError(t, err)
	assert.Equal(t, uint64(3), cur.Epoch)
	seq, err := s.LastSeq(t.Context())
	require.NoError(t, err)
	assert.Zero(t, seq, "owners are not records")
	info, err := s.Stream(t.Context(), "s")
	require.NoError(t, err)
	assert.Zero(t, info.Version)

	// Owner names are kept as given (any valid UTF-8 without controls).
	name := "10.0.0.5:7400#" + strings.Repeat("é", 50)
	assert.Equal(t, eventstore.Fence{Owner: name, Epoch: 1}, acquire(t, s, "u", name))
}

func testFencedAppend(t *testing.T, s fencerStore) {
	fa := acquire(t, s, "s", "a")
	res, err := s.Append(fenced(t, fa), "s", eventstore.NoStream, []eventstore.Event{ev("t", "a1")})
	require.NoError(t, err)
	assert.Equal(t, int64(1), res.LastVersion)
	mustAppend(t, s, "other", eventstore.NoStream, ev("t", "x"))

	fb := acquire(t, s, "s", "b")
	before := snapshotState(t, s)
	// A deposed owner holding the latest version: refused, nothing
	// written, one event or several.
	_, err = s.Append(fenced(t, fa), "s", 1, []eventstore.Event{ev("t", "a2")})
	requireFenced(t, err, "s", fa, fb)
	_, err = s.Append(fenced(t, fa), "s", 1, []eventstore.Event{ev("t", "a2"), ev("t", "a3"), ev("t", "a4")})
	requireFenced(t, err, "s", fa, fb)
	assert.Equal(t, before, snapshotState(t, s), "a fenced append changes nothing")
	assert.Contains(t, err.Error(), `"s"`)
	assert.Contains(t, err.Error(), "epoch 2")

	// The new owner writes on, at the next version.
	res, err = s.Append(fenced(t, fb), "s", 1, []eventstore.Event{ev("t", "b1"), ev("t", "b2")})
	require.NoError(t, err)
	assert.Equal(t, int64(3), res.LastVersion)
	// Another stream's fence does not matter here.
	mustAppend(t, s, "other", 1, ev("t", "y"))
	recs := readStream(t, s, "s", 1)
	require.Len(t, recs, 3)
	for i, want := range []string{"a1", "b1", "b2"} {
		assert.Equal(t, want, string(recs[i].Data))
		assert.Equal(t, int64(i+1), recs[i].Version)
	}
	verifyAll(t, s)
}

func testFenceBeforeVersion(t *testing.T, s fencerStore) {
	fa := acquire(t, s, "s", "a")
	_, err := s.Append(fenced(t, fa), "s", eventstore.NoStream, []eventstore.Event{ev("t", "a1")})
	require.NoError(t, err)
	fb := acquire(t, s, "s", "b")
	_, err = s.Append(fenced(t, fb), "s", 1, []eventstore.Event{ev("t", "b1")})
	require.NoError(t, err)
	// Stale on both counts: the fence is what the deposed owner learns.
	_, err = s.Append(fenced(t, fa), "s", 1, []eventstore.Event{ev("t", "a2")})
	requireFenced(t, err, "s", fa, fb)
	// The current owner with a stale version: a plain conflict.
	_, err = s.Append(fenced(t, fb), "s", 1, []eventstore.Event{ev("t", "b2")})
	require.ErrorIs(t, err, eventstore.ErrConflict)
	assert.NotErrorIs(t, err, eventstore.ErrFenced)
	assert.Len(t, readStream(t, s, "s", 1), 2)
}

func testZeroFence(t *testing.T, s fencerStore) {
	// The zero Fence is "never owned": it matches a stream no one owns...
	_, err := s.Append(fenced(t, eventstore.Fence{}), "s", eventstore.NoStream, []eventstore.Event{ev("t", "1")})
	require.NoError(t, err)
	// ...and no stream that has an owner.
	fa := acquire(t, s, "s", "a")
	_, err = s.Append(fenced(t, eventstore.Fence{}), "s", 1, []eventstore.Event{ev("t", "2")})
	requireFenced(t, err, "s", eventstore.Fence{}, fa)
	// A fence that names the right epoch but another owner is not the
	// stream's fence either.
	_, err = s.Append(fenced(t, eventstore.Fence{Owner: "b", Epoch: 1}), "s", 1, []eventstore.Event{ev("t", "2")})
	requireFenced(t, err, "s", eventstore.Fence{Owner: "b", Epoch: 1}, fa)
	// Nor one from the future.
	_, err = s.Append(fenced(t, eventstore.Fence{Owner: "a", Epoch: 2}), "s", 1, []eventstore.Event{ev("t", "2")})
	requireFenced(t, err, "s", eventstore.Fence{Owner: "a", Epoch: 2}, fa)
	assert.Len(t, readStream(t, s, "s", 1), 1)
}

func testUnfencedUnchecked(t *testing.T, s fencerStore) {
	acquire(t, s, "s", "a")
	acquire(t, s, "s", "b")
	// Appends without a fence (tools, a single server) are not checked.
	mustAppend(t, s, "s", eventstore.NoStream, ev("t", "1"))
	mustAppend(t, s, "s", 1, ev("t", "2"))
	cur, err := s.Owner(t.Context(), "s")
	require.NoError(t, err)
	assert.Equal(t, eventstore.Fence{Owner: "b", Epoch: 2}, cur, "an unfenced append takes no ownership")
}

func testFencedAppendAsync(t *testing.T, s fencerStore) {
	a, ok := s.(eventstore.AsyncAppender)
	if !ok {
		t.Skipf("%T is not an AsyncAppender", s)
	}
	appendAsync := func(ctx context.Context, expected int64, data string) (eventstore.AppendResult, error) {
		type out struct {
			res eventstore.AppendResult
			err error
		}
		ch := make(chan out, 1)
		a.AppendAsync(ctx, "s", expected, []eventstore.Event{ev("t", data)}, func(res eventstore.AppendResult, err error) {
			ch <- out{res, err}
		})
		o := <-ch
		return o.res, o.err
	}
	fa := acquire(t, s, "s", "a")
	_, err := appendAsync(fenced(t, fa), eventstore.NoStream, "a1")
	require.NoError(t, err)
	fb := acquire(t, s, "s", "b")
	_, err = appendAsync(fenced(t, fa), 1, "a2")
	requireFenced(t, err, "s", fa, fb)
	res, err := appendAsync(fenced(t, fb), 1, "b1")
	require.NoError(t, err)
	assert.Equal(t, int64(2), res.LastVersion)
	assert.Len(t, readStream(t, s, "s", 1), 2)
}

// testRacingOwners has owners take a stream over one another while each
// keeps appending with the fence it took: every record's epoch is at
// least the one before it (no deposed owner ever wrote after a newer
// one), every refusal is a *FencedError, and the versions stay dense.
func testRacingOwners(t *testing.T, s fencerStore) {
	const owners, rounds, perRound = 6, 15, 3
	var mu sync.Mutex
	written := map[uint64]int{} // epoch → appends acknowledged
	var wg sync.WaitGroup
	start := make(chan struct{})
	for o := 0; o < owners; o++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			name := fmt.Sprintf("owner-%d", o)
			for r := 0; r < rounds; r++ {
				f, err := s.AcquireOwner(context.Background(), "s", name)
				if !assert.NoError(t, err) {
					return
				}
				for i := 0; i < perRound; i++ {
					_, err := s.Append(eventstore.WithFence(context.Background(), f), "s", eventstore.Any,
						[]eventstore.Event{ev("t", strconv.FormatUint(f.Epoch, 10)), ev("t", strconv.FormatUint(f.Epoch, 10))})
					if err != nil {
						var fe *eventstore.FencedError
						if assert.ErrorAs(t, err, &fe) {
							assert.Greater(t, fe.Current.Epoch, f.Epoch, "refused only for a newer owner")
						}
						break // deposed: this owner's rounds go on with a new epoch
					}
					mu.Lock()
					written[f.Epoch]++
					mu.Unlock()
					runtime.Gosched() // let the others take the stream over
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	recs := readStream(t, s, "s", 1)
	var last uint64
	got := map[uint64]int{}
	for i, r := range recs {
		require.Equal(t, int64(i+1), r.Version, "dense versions")
		e, err := strconv.ParseUint(string(r.Data), 10, 64)
		require.NoError(t, err)
		require.GreaterOrEqual(t, e, last, "record %d by epoch %d after a record by epoch %d", r.Version, e, last)
		last = e
		got[e]++
	}
	for e, n := range written {
		assert.Equal(t, 2*n, got[e], "epoch %d: every acknowledged append, exactly once", e)
	}
	assert.Equal(t, len(written), len(got), "nothing unacknowledged")
	cur, err := s.Owner(t.Context(), "s")
	require.NoError(t, err)
	assert.Equal(t, uint64(owners*rounds), cur.Epoch, "one epoch per acquisition")
	require.NoError(t, s.VerifyStream(t.Context(), "s"))
}

func testFencerBadInput(t *testing.T, s fencerStore) {
	for _, owner := range []string{"", strings.Repeat("o", eventstore.MaxOwnerBytes+1), "a\nb", "a\x00b", "\xff"} {
		_, err := s.AcquireOwner(t.Context(), "s", owner)
		assert.ErrorIs(t, err, eventstore.ErrInvalidOwner, "owner %q", owner)
		assert.ErrorIs(t, eventstore.CheckOwner(owner), eventstore.ErrInvalidOwner, "owner %q", owner)
	}
	require.NoError(t, eventstore.CheckOwner(strings.Repeat("o", eventstore.MaxOwnerBytes)))
	_, err := s.AcquireOwner(t.Context(), "", "a")
	assert.ErrorIs(t, err, eventstore.ErrEmptyStream)
	_, err = s.AcquireOwner(t.Context(), "bad\x00stream", "a")
	assert.ErrorIs(t, err, eventstore.ErrInvalidStream)
	_, err = s.Owner(t.Context(), "")
	assert.ErrorIs(t, err, eventstore.ErrEmptyStream)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = s.AcquireOwner(ctx, "s", "a")
	assert.ErrorIs(t, err, context.Canceled)
	cur, err := s.Owner(t.Context(), "s")
	require.NoError(t, err)
	assert.Equal(t, eventstore.Fence{}, cur, "refused acquisitions took nothing")
}

func testFencerClosed(t *testing.T, s fencerStore) {
	f := acquire(t, s, "s", "a")
	require.NoError(t, s.Close())
	_, err := s.AcquireOwner(t.Context(), "s", "a")
	assert.ErrorIs(t, err, eventstore.ErrClosed)
	_, err = s.Owner(t.Context(), "s")
	assert.ErrorIs(t, err, eventstore.ErrClosed)
	_, err = s.Append(fenced(t, f), "s", eventstore.NoStream, []eventstore.Event{ev("t", "1")})
	assert.ErrorIs(t, err, eventstore.ErrClosed)
}

func testKeyCreatedOnce(t *testing.T, _ eventstore.Store, k eventstore.KeyKeeper) {
	calls := 0
	gen := func(b byte) func() ([]byte, error) {
		return func() ([]byte, error) {
			calls++
			return []byte{b, b, b, b}, nil
		}
	}
	got, err := k.SharedKey(t.Context(), "token-key", gen(1))
	require.NoError(t, err)
	assert.Equal(t, []byte{1, 1, 1, 1}, got)
	got[0] = 9 // the caller's copy
	again, err := k.SharedKey(t.Context(), "token-key", gen(2))
	require.NoError(t, err)
	assert.Equal(t, []byte{1, 1, 1, 1}, again, "the stored key, not a new one")
	assert.Equal(t, 1, calls, "generate runs only while none is stored")
	other, err := k.SharedKey(t.Context(), "checkpoint.key_2", gen(3))
	require.NoError(t, err)
	assert.Equal(t, []byte{3, 3, 3, 3}, other, "names are independent")
}

func testKeyRacing(t *testing.T, _ eventstore.Store, k eventstore.KeyKeeper) {
	const racers = 8
	keys := make([][]byte, racers)
	var wg sync.WaitGroup
	for i := 0; i < racers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			keys[i], err = k.SharedKey(context.Background(), "raced", func() ([]byte, error) {
				return []byte(fmt.Sprintf("key-of-racer-%d", i)), nil
			})
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	for i := 1; i < racers; i++ {
		assert.Equal(t, keys[0], keys[i], "every racer gets the one key stored")
	}
	assert.True(t, strings.HasPrefix(string(keys[0]), "key-of-racer-"))
}

func testKeyGenerateFails(t *testing.T, _ eventstore.Store, k eventstore.KeyKeeper) {
	boom := errors.New("no entropy")
	_, err := k.SharedKey(t.Context(), "k", func() ([]byte, error) { return nil, boom })
	assert.ErrorIs(t, err, boom)
	_, err = k.SharedKey(t.Context(), "k", func() ([]byte, error) { return nil, nil })
	assert.ErrorIs(t, err, eventstore.ErrInvalidKeyName, "an empty key is refused")
	_, err = k.SharedKey(t.Context(), "k", func() ([]byte, error) { return make([]byte, eventstore.MaxSharedKeyBytes+1), nil })
	assert.ErrorIs(t, err, eventstore.ErrInvalidKeyName, "an oversized key is refused")
	got, err := k.SharedKey(t.Context(), "k", func() ([]byte, error) { return []byte("good"), nil })
	require.NoError(t, err)
	assert.Equal(t, "good", string(got), "the failures stored nothing")
}

func testKeyBadInput(t *testing.T, _ eventstore.Store, k eventstore.KeyKeeper) {
	gen := func() ([]byte, error) { return []byte("x"), nil }
	for _, name := range []string{"", "Upper", "a/b", "a b", strings.Repeat("a", 65), "é"} {
		_, err := k.SharedKey(t.Context(), name, gen)
		assert.ErrorIs(t, err, eventstore.ErrInvalidKeyName, "name %q", name)
	}
	got, err := k.SharedKey(t.Context(), strings.Repeat("a", 64), gen)
	require.NoError(t, err)
	assert.Equal(t, "x", string(got))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = k.SharedKey(ctx, "c", gen)
	assert.ErrorIs(t, err, context.Canceled)
}

// The conformance tests of eventstore.Fencer and eventstore.KeyKeeper; a
// store that does not implement one skips its test.

// testFence: epochs grow by one per acquisition; an append carrying a
// deposed fence (or any fence but the current one) fails with a
// *FencedError naming both and writes nothing, even at the stream's
// latest version; the current owner's append and an unfenced one pass.
func testFence(t *testing.T, open Opener) {
	s := newStore(t, open)
	f, ok := s.(eventstore.Fencer)
	if !ok {
		t.Skipf("%T does not implement eventstore.Fencer", s)
	}
	ctx := t.Context()
	cur, err := f.Owner(ctx, "scope")
	require.NoError(t, err)
	assert.Equal(t, eventstore.Fence{}, cur, "never owned")

	a, err := f.AcquireOwner(ctx, "scope", "a")
	require.NoError(t, err)
	assert.Equal(t, eventstore.Fence{Owner: "a", Epoch: 1}, a, "a stream never owned takes epoch 1, existing or not")
	mustAppend(t, s, "scope", eventstore.NoStream, ev("x", "by a"))
	_, err = s.Append(eventstore.WithFence(ctx, a), "scope", 1, []eventstore.Event{ev("x", "by a, fenced")})
	require.NoError(t, err)

	b, err := f.AcquireOwner(ctx, "scope", "b")
	require.NoError(t, err)
	assert.Equal(t, eventstore.Fence{Owner: "b", Epoch: 2}, b)
	cur, err = f.Owner(ctx, "scope")
	require.NoError(t, err)
	assert.Equal(t, b, cur)

	before := snapshotState(t, s)
	for _, held := range []eventstore.Fence{a, {Owner: "b", Epoch: 1}, {Owner: "a", Epoch: 2}, {}} {
		_, err = s.Append(eventstore.WithFence(ctx, held), "scope", 2, []eventstore.Event{ev("x", "deposed")})
		require.ErrorIs(t, err, eventstore.ErrFenced, "held %v", held)
		var fe *eventstore.FencedError
		require.True(t, errors.As(err, &fe))
		assert.Equal(t, eventstore.FencedError{Stream: "scope", Held: held, Current: b}, *fe)
	}
	assert.Equal(t, before, snapshotState(t, s), "a fenced append writes nothing")

	_, err = s.Append(eventstore.WithFence(ctx, b), "scope", 2, []eventstore.Event{ev("x", "by b")})
	require.NoError(t, err)
	mustAppend(t, s, "scope", 3, ev("x", "unfenced: not checked"))

	// Another stream's owner is its own.
	_, err = s.Append(eventstore.WithFence(ctx, b), "other", eventstore.NoStream, []eventstore.Event{ev("x", "")})
	require.ErrorIs(t, err, eventstore.ErrFenced)
	o, err := f.AcquireOwner(ctx, "other", "b")
	require.NoError(t, err)
	assert.Equal(t, uint64(1), o.Epoch)
}

// testSharedKey: the first caller's generated key is stored and every
// later caller gets it without generating; a generator's error is
// returned and stores nothing.
func testSharedKey(t *testing.T, open Opener) {
	s := newStore(t, open)
	k, ok := s.(eventstore.KeyKeeper)
	if !ok {
		t.Skipf("%T does not implement eventstore.KeyKeeper", s)
	}
	ctx := t.Context()
	boom := errors.New("no entropy")
	_, err := k.SharedKey(ctx, "signing.key", func() ([]byte, error) { return nil, boom })
	require.ErrorIs(t, err, boom)
	first, err := k.SharedKey(ctx, "signing.key", func() ([]byte, error) { return []byte("key-1"), nil })
	require.NoError(t, err)
	assert.Equal(t, []byte("key-1"), first)
	again, err := k.SharedKey(ctx, "signing.key", func() ([]byte, error) {
		t.Error("a stored key is generated again")
		return []byte("key-2"), nil
	})
	require.NoError(t, err)
	assert.Equal(t, first, again)
	other, err := k.SharedKey(ctx, "token.key", func() ([]byte, error) { return []byte("key-3"), nil })
	require.NoError(t, err)
	assert.Equal(t, []byte("key-3"), other, "keys are per name")
	_, err = k.SharedKey(ctx, "Bad/Name", func() ([]byte, error) { return []byte("k"), nil })
	require.Error(t, err, "a name outside [a-z0-9._-] is refused")
}
