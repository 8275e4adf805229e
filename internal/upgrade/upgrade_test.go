package upgrade

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/internal/verify"
	"github.com/stateindex/stateindex/messages"
)

// TestPreviousReleasesStillWork opens a copy of every committed fixture
// (testdata/v*) with the current code and checks what its manifest
// promises: every scope serves as it was left, every recorded request id
// answers with its original reply and appends nothing, fresh requests
// work, a suspension token never used resumes its frame once, the spend
// ledger works on old scopes, a fixture's pending settlements are
// delivered by the outbox on its own and its open reservation still
// binds (v6 on), scope key-value state works on old scopes and survives
// a restart, and verify passes on the file before and after.
func TestPreviousReleasesStillWork(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("testdata", "v*"))
	require.NoError(t, err)
	require.NotEmpty(t, dirs, "no fixture under testdata")
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) { checkFixture(t, dir) })
	}
}

// upgraded is a fixture's copy served by the current code. Fresh requests
// leave RequestID empty: the Client fills one as the current release does.
type upgraded struct {
	t     *testing.T
	m     *Manifest
	data  string
	keys  keys
	store *eventstore.BoltStore
	sys   *actor.ActorSystem
	srv   *actors.Server
	c     *actors.Client
	clock *clock
}

func checkFixture(t *testing.T, dir string) {
	m, err := Load(filepath.Join(dir, ManifestFile))
	require.NoError(t, err)
	data := filepath.Join(t.TempDir(), DataDir)
	require.NoError(t, copyDir(data, filepath.Join(dir, DataDir)))
	u := &upgraded{t: t, m: m, data: data}
	u.keys, err = readKeys(data)
	require.NoError(t, err)

	jdir := eventstore.JournalDir(filepath.Join(data, dbFile))
	if m.JournalSegmentBytes == 0 {
		require.NoDirExists(t, jdir, "a fixture from before the journal has none")
	}
	u.verify("as written")
	u.open()
	ctx := context.Background()
	seq, err := u.store.LastSeq(ctx)
	require.NoError(t, err)
	require.Equal(t, m.LastSeq, seq, "the copy holds what the manifest says was written")
	u.outboxAsWritten(t)
	u.serve()
	// What the fixture left pending the server's outbox delivers on its
	// own; it is waited for here, so that none of it is in flight while
	// the checks below count appends.
	u.awaitPending(t)
	// The journal is on (the default Options): opening a file of any
	// release gives it one, and writes go through it.
	require.DirExists(t, jdir)
	js := u.store.JournalStats()
	require.True(t, js.Enabled)
	require.Positive(t, js.Segments)
	frames0 := js.Frames

	t.Run("pending settlements were delivered, each charged once", u.pendingSettled)
	t.Run("scopes serve", u.scopesServe)
	t.Run("the registry builds from the old log and lists its frames", u.registryLists)
	t.Run("old request ids answer with their original reply", u.resendAll)
	t.Run("recovery lists the fixture's frames and pending work", u.recoveryMatches)
	t.Run("recorded reads answer the same", u.readsMatch)
	t.Run("removed chain links answer with their tombstone", u.tombstonesServe)
	t.Run("awaits answer with the recorded status", u.awaitsAnswer)
	t.Run("subscriptions read the old log", u.subscriptionsRead)
	var grown map[string]Chain
	t.Run("live chains go on continuing", func(t *testing.T) { grown = u.chainsContinue(t) })

	t.Run("fresh requests apply", func(t *testing.T) {
		for _, sc := range m.Scopes {
			before := u.version(sc.Scope)
			reply, err := u.send(Step{Op: "PushFrame", Scope: sc.Scope, Goal: str("after the upgrade")})
			require.NoError(t, err, sc.Scope)
			got, err := ReplyOf(reply)
			require.NoError(t, err)
			assert.Equal(t, before+1, got.Version, sc.Scope)
			assert.NotEmpty(t, got.FrameID, sc.Scope)
			reply, err = u.send(Step{Op: "AddContextHandle", Scope: sc.Scope, FrameID: got.FrameID,
				Kind: "note", Priority: prio(compaction.Medium), Content: "written by the new release"})
			require.NoError(t, err, sc.Scope)
			got2, err := ReplyOf(reply)
			require.NoError(t, err)
			assert.Equal(t, before+2, got2.Version, sc.Scope)
		}
	})

	t.Run("an unused suspension token resumes its frame once", func(t *testing.T) {
		n := 0
		for _, sc := range m.Scopes {
			tok := sc.UnusedToken
			if tok == nil {
				continue
			}
			n++
			reply, err := u.send(Step{Op: "ResumeFrame", Scope: sc.Scope, Token: tok.Token})
			require.NoError(t, err, sc.Scope)
			got, err := ReplyOf(reply)
			require.NoError(t, err)
			assert.Equal(t, tok.FrameID, got.FrameID, sc.Scope)
			_, err = u.send(Step{Op: "ResumeFrame", Scope: sc.Scope, Token: tok.Token})
			require.ErrorIs(t, err, messages.ErrTokenUsed, sc.Scope)
		}
		require.NotZero(t, n, "the fixture has no unused token")
	})
	t.Run("the spend ledger works on old scopes", u.ledgerWorks)
	t.Run("an open reservation's token binds a root in its scope once", u.openReservationBinds)
	t.Run("scope state works on old scopes", u.stateWorks)
	require.Greater(t, u.store.JournalStats().Frames, frames0, "the new release's writes go through the journal")
	after := map[string]int64{}
	for _, sc := range m.Scopes {
		after[sc.Scope] = u.version(sc.Scope)
	}

	// Restart: the scopes now load from snapshots this release wrote over
	// the old log (SnapshotEvery is 1), and the old ids still answer.
	u.stop()
	u.start()
	t.Run("old request ids answer after a restart", u.resendAll)
	t.Run("continued chains read the same after a restart", func(t *testing.T) {
		if len(grown) == 0 {
			t.Skip("no chain continued (before v4)")
		}
		for id, want := range grown {
			got := u.chain(t, want.Root, id)
			assert.Equal(t, want, got, "the chain of %s", id)
		}
	})
	t.Run("scope state reads the same after a restart", u.stateAfterRestart)
	t.Run("everything serves after a restart", func(t *testing.T) {
		for _, sc := range m.Scopes {
			// ResumeActor appends one event: the version read before plus one.
			assert.Equal(t, after[sc.Scope]+1, u.version(sc.Scope), "%s: the writes before the restart are there", sc.Scope)
		}
	})

	u.stop()
	u.verify("after serving")
}

// scopesServe checks that every scope's stack is as the manifest left it.
func (u *upgraded) scopesServe(t *testing.T) {
	for _, sc := range u.m.Scopes {
		if len(sc.Stack) == 0 {
			continue
		}
		top := sc.Stack[len(sc.Stack)-1].ID
		reply, err := u.send(Step{Op: OpGetStack, Scope: sc.Scope, FrameID: top})
		require.NoError(t, err, sc.Scope)
		stack, err := StackOf(reply)
		require.NoError(t, err)
		assert.Equal(t, sc.Stack, stack, sc.Scope)
	}
}

// recoveryMatches checks ResumeActor of every scope against the manifest:
// its live frames and pending work.
func (u *upgraded) recoveryMatches(t *testing.T) {
	for _, sc := range u.m.Scopes {
		reply, err := u.send(Step{Op: "ResumeActor", Scope: sc.Scope})
		require.NoError(t, err, sc.Scope)
		live, err := LiveOf(reply)
		require.NoError(t, err)
		assert.Equal(t, sc.Live, live, sc.Scope)
		got, err := ReplyOf(reply)
		require.NoError(t, err)
		assert.Equal(t, u.pendingWork(sc), got.Pending, sc.Scope)
		assert.GreaterOrEqual(t, got.Version, sc.Version, sc.Scope)
	}
}

// resendAll resends every recorded request with its request id: each gets
// its original reply (ResumeActor: a success) and nothing is appended.
func (u *upgraded) resendAll(t *testing.T) {
	ctx := context.Background()
	seq, err := u.store.LastSeq(ctx)
	require.NoError(t, err)
	for _, s := range u.m.Steps {
		reply, err := u.send(s)
		if s.Expired { // stamped before the horizon: refused, never applied again
			require.ErrorIs(t, err, messages.ErrRequestExpired, "step %d %s on %s, request %q", s.N, s.Op, s.Scope, s.RequestID)
			now, err := u.store.LastSeq(ctx)
			require.NoError(t, err)
			require.Equal(t, seq, now, "step %d %s on %s: an expired resend appended", s.N, s.Op, s.Scope)
			continue
		}
		require.NoError(t, err, "step %d %s on %s, request %q", s.N, s.Op, s.Scope, s.RequestID)
		got, err := ReplyOf(reply)
		require.NoError(t, err)
		if s.Op != "ResumeActor" { // the writing release answered a repeat with the current state
			assert.Equal(t, s.Reply, got, "step %d %s on %s, request %q", s.N, s.Op, s.Scope, s.RequestID)
		}
		now, err := u.store.LastSeq(ctx)
		require.NoError(t, err)
		require.Equal(t, seq, now, "step %d %s on %s: a resend appended", s.N, s.Op, s.Scope)
	}
}

// start opens the copy and serves it with the fixture's keys, its clock
// running from just after the fixture's last reading (and on from where
// it stopped at a restart).
func (u *upgraded) start() {
	u.open()
	u.serve()
}

// open opens the copy with the default Options (the journal on).
func (u *upgraded) open() {
	var err error
	u.store, err = eventstore.Open(filepath.Join(u.data, dbFile), nil)
	require.NoError(u.t, err)
}

// serve starts a StateIndex on the open store.
func (u *upgraded) serve() {
	var err error
	cfg := actors.DefaultConfig()
	cfg.TokenKey, cfg.SigningKey = u.keys.token, u.keys.signing
	cfg.Shards = u.m.Shards
	cfg.SnapshotEvery = 1 // the new release snapshots the old scopes at their next write
	cfg.Frames.ContinueAt = u.m.ContinueAt
	if u.m.ResumeCeiling > 0 {
		cfg.Frames.ResumeCeiling = u.m.ResumeCeiling
	}
	if u.clock == nil {
		u.clock = newClock(u.m.ClockEnd+int64(time.Minute), time.Millisecond)
	}
	cfg.Clock = u.clock.Now
	cfg.Logger = quietLogger()
	u.sys = quietSystem()
	u.srv, err = actors.Start(u.sys, u.store, cfg)
	require.NoError(u.t, err)
	u.c = u.srv.Client()
	u.t.Cleanup(func() {
		if u.srv != nil {
			u.stop()
		}
	})
}

func (u *upgraded) stop() {
	u.srv.Stop()
	u.sys.Shutdown()
	u.srv, u.sys, u.c = nil, nil, nil
	require.NoError(u.t, u.store.Close())
}

// verify runs stateindex verify's checks on the copy with the fixture's
// public key.
func (u *upgraded) verify(when string) {
	u.t.Helper()
	var problems []string
	sum, err := verify.File(context.Background(), filepath.Join(u.data, dbFile),
		verify.Options{PublicKey: u.keys.public, LockTimeout: time.Second},
		func(p verify.Problem) { problems = append(problems, p.String()) })
	require.NoError(u.t, err, when)
	require.Empty(u.t, problems, when)
	require.Zero(u.t, sum.Problems, when)
	u.t.Logf("verify %s: %d streams, %d records, %d snapshots equal to their replay, %d signatures verified",
		when, sum.Streams, sum.Records, sum.Snapshots, sum.SignaturesVerified)
	require.GreaterOrEqual(u.t, sum.Streams, int64(len(u.m.Scopes)), when)
	require.NotZero(u.t, sum.SignaturesVerified, "%s: the fixture's checkpoints are signed", when)
}

func (u *upgraded) send(s Step) (messages.Reply, error) {
	u.t.Helper()
	req, err := Build(s)
	require.NoError(u.t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return Send(ctx, u.c, req)
}

// version reads a scope's version.
func (u *upgraded) version(scope string) int64 {
	u.t.Helper()
	reply, err := u.send(Step{Op: "ResumeActor", Scope: scope})
	require.NoError(u.t, err, scope)
	got, err := ReplyOf(reply)
	require.NoError(u.t, err)
	return got.Version
}

// TestJournalFixtureReplays opens a copy of every fixture written with
// records in its journal that bbolt lacks (what a crash leaves, v2 on):
// the first open replays exactly those records before anything is served,
// every scope the manifest names serves as it was left, a second open has
// nothing to replay, and verify passes.
func TestJournalFixtureReplays(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("testdata", "v*"))
	require.NoError(t, err)
	n := 0
	for _, dir := range dirs {
		m, err := Load(filepath.Join(dir, ManifestFile))
		require.NoError(t, err)
		if m.JournalPending == 0 {
			continue
		}
		n++
		t.Run(filepath.Base(dir), func(t *testing.T) {
			data := filepath.Join(t.TempDir(), DataDir)
			require.NoError(t, copyDir(data, filepath.Join(dir, DataDir)))
			u := &upgraded{t: t, m: m, data: data}
			u.keys, err = readKeys(data)
			require.NoError(t, err)

			u.open()
			ri := u.store.Replay()
			t.Logf("replayed %d records (sequences %d..%d) from %d frames in %d segments", ri.Records, ri.FromSeq, ri.ToSeq, ri.Frames, ri.Segments)
			require.Equal(t, m.JournalPending, ri.Records, "the first open replays the journal's records bbolt lacks")
			require.Equal(t, m.LastSeq, ri.ToSeq)
			require.Zero(t, ri.TornBytes)
			seq, err := u.store.LastSeq(context.Background())
			require.NoError(t, err)
			require.Equal(t, m.LastSeq, seq)

			u.serve()
			u.awaitPending(t)
			t.Run("scopes serve", u.scopesServe)
			t.Run("recovery lists the fixture's frames and pending work", u.recoveryMatches)
			u.stop()

			u.open()
			require.Zero(t, u.store.Replay().Records, "bbolt covers the journal once replayed")
			require.NoError(t, u.store.Close())
			u.verify("after the replay")
		})
	}
	if n == 0 {
		t.Skip("no fixture holds journal records")
	}
}
