package verify_test

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/internal/verify"
	"github.com/stateindex/stateindex/messages"
)

// generic hides BoltStore.Verify: a store with no check of its own, as a
// PostgreSQL store is, verified stream by stream and in global order.
type generic struct {
	eventstore.Store
	eventstore.Checkpointer
	// readAll, when set, replaces the store's ReadAll (a damaged order).
	readAll func(ctx context.Context, from uint64, fn func(eventstore.Record) error) error
	// broken, when set, is the stream whose chain VerifyStream calls damaged.
	broken string
}

func (g generic) ReadAll(ctx context.Context, from uint64, fn func(eventstore.Record) error) error {
	if g.readAll != nil {
		return g.readAll(ctx, from, fn)
	}
	return g.Store.ReadAll(ctx, from, fn)
}

func (g generic) VerifyStream(ctx context.Context, stream string) error {
	if stream == g.broken {
		return &eventstore.CorruptionError{Stream: stream, Version: 2, Reason: "hash chain broken (test)"}
	}
	return g.Store.VerifyStream(ctx, stream)
}

// written returns a bolt store with a few scopes written through the
// StateIndex (signed checkpoints and snapshots included) and the signing
// key's public half.
func written(t *testing.T) (*eventstore.BoltStore, ed25519.PublicKey) {
	t.Helper()
	ctx := context.Background()
	st, err := eventstore.Open(filepath.Join(t.TempDir(), "stateindex.db"), &eventstore.Options{NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	_, signing, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	cfg := actors.DefaultConfig()
	cfg.TokenKey = make([]byte, 32)
	cfg.SigningKey = signing
	cfg.SnapshotEvery = 4
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Logger = quiet
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	defer sys.Shutdown()
	srv, err := actors.Start(sys, st, cfg)
	require.NoError(t, err)
	c := srv.Client()
	for i := 0; i < 5; i++ {
		scope := fmt.Sprintf("v-%d", i)
		f, err := c.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: scope}, Goal: "g", Budget: budget.TokenBudget{Total: 1000}})
		require.NoError(t, err)
		for j := 0; j < 6; j++ {
			_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: messages.Header{Scope: scope}, FrameID: f.FrameID,
				Priority: compaction.Medium, Content: fmt.Sprintf("fact %d", j)})
			require.NoError(t, err)
		}
		_, err = c.PopFrame(ctx, &messages.PopFrame{Header: messages.Header{Scope: scope}, FrameID: f.FrameID, Status: frames.StatusCompleted})
		require.NoError(t, err)
	}
	srv.Stop()
	return st, signing.Public().(ed25519.PublicKey)
}

// A store without a whole-store check of its own is verified stream by
// stream: the same summary as the bolt path on the same data, and damage
// to a chain or to the global order is a problem naming it.
func TestStoreWithoutAWholeCheck(t *testing.T) {
	ctx := context.Background()
	st, pub := written(t)
	opts := verify.Options{PublicKey: pub}
	want, err := verify.Store(ctx, st, opts, func(p verify.Problem) { t.Errorf("bolt path: %s", p) })
	require.NoError(t, err)
	require.Positive(t, want.SignaturesVerified)
	require.Positive(t, want.Snapshots)

	got, err := verify.Store(ctx, generic{Store: st, Checkpointer: st}, opts, func(p verify.Problem) { t.Errorf("generic path: %s", p) })
	require.NoError(t, err)
	assert.Equal(t, want, got, "the same checks, the same figures")

	var problems []verify.Problem
	sum, err := verify.Store(ctx, generic{Store: st, Checkpointer: st, broken: "v-2"}, opts, func(p verify.Problem) { problems = append(problems, p) })
	require.NoError(t, err)
	assert.Equal(t, int64(1), sum.Problems)
	require.Len(t, problems, 1)
	assert.Equal(t, "v-2", problems[0].Stream)
	assert.Contains(t, problems[0].What, "hash chain broken")

	// The global order: a record read twice, and a stream's versions out
	// of order.
	swapped := func(ctx context.Context, from uint64, fn func(eventstore.Record) error) error {
		var recs []eventstore.Record
		if err := st.ReadAll(ctx, from, func(r eventstore.Record) error { recs = append(recs, r); return nil }); err != nil {
			return err
		}
		recs[3], recs[4] = recs[4], recs[3] // v-0 versions 4 and 5
		recs = append(recs, recs[len(recs)-1])
		for _, r := range recs {
			if err := fn(r); err != nil {
				return err
			}
		}
		return nil
	}
	problems = nil
	_, err = verify.Store(ctx, generic{Store: st, Checkpointer: st, readAll: swapped}, opts, func(p verify.Problem) { problems = append(problems, p) })
	require.NoError(t, err)
	var text []string
	for _, p := range problems {
		text = append(text, p.String())
	}
	assert.Contains(t, text, `file: global order: sequence 4 after 5`)
	assert.Contains(t, text, `stream "v-0": global order: version 5 follows version 3 of the stream (sequence 5)`)
	assert.Contains(t, text, `stream "v-0": global order: version 4 follows version 5 of the stream (sequence 4)`)
	assert.Contains(t, text, fmt.Sprintf("file: global order: sequence %d after %d", want.Records, want.Records))
}
