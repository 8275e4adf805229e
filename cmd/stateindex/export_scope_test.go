package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// testClock is a clock the test moves.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// retentionEnv is a server on a data directory with retention configured
// by a policy the test changes between passes.
type retentionEnv struct {
	t      *testing.T
	dir    string
	store  *eventstore.BoltStore
	srv    *actors.Server
	c      *actors.Client
	clock  *testClock
	signer ed25519.PrivateKey
	policy frames.RetentionPolicy
	stop   func()
	// seen holds every record the store held before each pass, by scope
	// and version: what an export must reproduce.
	seen map[string]map[int64]eventstore.Record
}

func newRetentionEnv(t *testing.T) *retentionEnv {
	t.Helper()
	e := &retentionEnv{t: t, dir: t.TempDir(), clock: &testClock{t: time.Unix(1_700_000_000, 0)},
		signer: ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, ed25519.SeedSize)), seen: map[string]map[int64]eventstore.Record{}}
	store, err := openStore(e.dir, true, time.Second, false)
	require.NoError(t, err)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	cfg := actors.DefaultConfig()
	cfg.TokenKey, cfg.Logger, cfg.Clock = bytes.Repeat([]byte{7}, 32), quiet, e.clock.Now
	cfg.RequestHorizon, cfg.ClockSkew = time.Minute, time.Second
	srv, err := actors.Start(sys, store, cfg)
	require.NoError(t, err)
	archives := filepath.Join(e.dir, "archive")
	require.NoError(t, srv.StartRetention(actors.RetentionConfig{Policy: func(string) (frames.RetentionPolicy, string, bool) {
		return e.policy, archives, true
	}}))
	e.store, e.srv, e.c = store, srv, srv.Client()
	var once sync.Once
	e.stop = func() {
		once.Do(func() {
			srv.Stop()
			sys.Shutdown()
			_ = store.Close()
		})
	}
	t.Cleanup(e.stop)
	return e
}

// runs starts a live root (once) and runs n children in it to completion.
func (e *retentionEnv) runs(scope string, n int) {
	e.t.Helper()
	ctx := context.Background()
	h := messages.Header{Scope: scope}
	var root string
	if info, err := e.store.Stream(ctx, scope); err == nil && info.Version > 0 {
		rs, err := e.c.ResumeActor(ctx, &messages.ResumeActor{Header: h})
		require.NoError(e.t, err)
		root = rs.LiveFrames[0].ID
	} else {
		p, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "chat", Budget: budget.TokenBudget{Total: 1_000_000}})
		require.NoError(e.t, err)
		root = p.FrameID
	}
	for i := range n {
		p, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: h, ParentID: root, Goal: fmt.Sprintf("subtask %d", i), Budget: budget.TokenBudget{Total: 1000}})
		require.NoError(e.t, err)
		_, err = e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, FrameID: p.FrameID, Priority: compaction.Medium, Content: "fact " + strings.Repeat("x", 100)})
		require.NoError(e.t, err)
		_, err = e.c.RecordUsage(ctx, &messages.RecordUsage{Header: h, FrameID: p.FrameID, Cost: budget.Cost{InputTokens: 10, Turns: 1}})
		require.NoError(e.t, err)
		_, err = e.c.PopFrame(ctx, &messages.PopFrame{Header: h, FrameID: p.FrameID, Status: frames.StatusCompleted})
		require.NoError(e.t, err)
	}
}

// sign signs scope's chain at version (a checkpoint an archive carries).
func (e *retentionEnv) sign(scope string, version int64) {
	e.t.Helper()
	_, err := e.store.SignCheckpoint(context.Background(), scope, version, eventstore.CheckpointSnapshot, e.signer)
	require.NoError(e.t, err)
}

// pass notes every stored record, moves past the idempotency horizon and
// runs a retention pass with p; it returns what the pass did to scope.
func (e *retentionEnv) pass(scope string, p frames.RetentionPolicy) actors.ScopeRetention {
	e.t.Helper()
	ctx := context.Background()
	if e.seen[scope] == nil {
		e.seen[scope] = map[int64]eventstore.Record{}
	}
	require.NoError(e.t, e.store.ReadStream(ctx, scope, 1, func(r eventstore.Record) error {
		e.seen[scope][r.Version] = r
		return nil
	}))
	// A snapshot at the head, as the actor writes one every SnapshotEvery
	// events: the pass cuts at most as far as the latest snapshot.
	st, _, err := eventstore.LoadState(ctx, e.store, scope, 0, 0, nil)
	require.NoError(e.t, err)
	snap, err := eventstore.EncodeState(st)
	require.NoError(e.t, err)
	require.NoError(e.t, e.store.SaveSnapshot(ctx, scope, snap))
	e.clock.Advance(time.Hour)
	e.policy = p
	rep, err := e.srv.RunRetention(ctx)
	require.NoError(e.t, err)
	require.Empty(e.t, rep.Errors)
	for _, sr := range rep.Scopes {
		if sr.Scope == scope {
			require.Positive(e.t, sr.Through, "the pass removed history")
			return sr
		}
	}
	e.t.Fatalf("the pass did nothing to %q", scope)
	return actors.ScopeRetention{}
}

// exportLine is any line of a scope's export.
type exportLine struct {
	scopeRecord
	Missing *missingRange `json:"missing"`
}

func exportScopeLines(t *testing.T, args ...string) (code int, lines []exportLine, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(append([]string{"export"}, args...), &out, &errb)
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l exportLine
		require.NoError(t, json.Unmarshal(sc.Bytes(), &l), sc.Text())
		lines = append(lines, l)
	}
	return code, lines, errb.String()
}

var zeroHash = strings.Repeat("0", 64)

// A scope whose history two passes archived (the second archive holds the
// first pass's record) exports every record from version 1 in order, with
// one chain through both archives and the store, equal to what the store
// held before the passes.
func TestExportScopeWithArchivedHistory(t *testing.T) {
	e := newRetentionEnv(t)
	const scope = "chat"
	archive := frames.RetentionPolicy{KeepLastN: 3, OnCompletion: frames.CompletionArchive}
	e.runs(scope, 8)
	first := e.pass(scope, archive)
	e.runs(scope, 6)
	second := e.pass(scope, archive)
	e.runs(scope, 1)
	head, err := e.store.Stream(context.Background(), scope)
	require.NoError(t, err)
	e.stop()
	require.Greater(t, second.Through, first.Through)

	code, lines, stderr := exportScopeLines(t, "--data", e.dir, "--scope", scope, "--format", "jsonl")
	require.Equal(t, 0, code, stderr)
	require.Len(t, lines, int(head.Version), "every version, once")
	prev := zeroHash
	for i, l := range lines {
		v := int64(i + 1)
		require.Nil(t, l.Missing)
		require.Equal(t, v, l.Version, "version order")
		assert.Equal(t, scope, l.Stream)
		assert.Equal(t, prev, l.Prev, "version %d names the hash of the line before: one chain", v)
		prev = l.Hash
		where := "store"
		if v <= second.Through {
			where = "archive"
		}
		assert.Equal(t, where, l.From, "version %d", v)
		if want, ok := e.seen[scope][v]; ok {
			assert.Equal(t, hex.EncodeToString(want.Hash[:]), l.Hash, "version %d", v)
			assert.Equal(t, want.Data, l.Data, "version %d", v)
			assert.Equal(t, want.Type, l.Type, "version %d", v)
			assert.Equal(t, want.Seq, l.Seq, "version %d", v)
		} else {
			assert.Greater(t, v, second.Through, "only records after the last pass were not seen before it")
		}
	}
	assert.Equal(t, hex.EncodeToString(head.Head[:]), prev, "the chain ends at the stream's head")
	assert.Contains(t, stderr, fmt.Sprintf("exported %d record(s) of scope %q (versions 1..%d): %d from 2 archive(s), %d stored",
		head.Version, scope, head.Version, second.Through, head.Version-second.Through))
	assert.NotContains(t, stderr, "warning:")
	var recorded []int64
	for _, l := range lines {
		if l.Type == frames.TypeRetention && l.From == "archive" {
			recorded = append(recorded, l.Version)
		}
	}
	assert.Len(t, recorded, 1, "the first pass's record is in the second archive: the export found the first archive through it")

	// Archives moved elsewhere are found with --archives; otherwise the
	// export fails naming the file, and writes nothing.
	moved := t.TempDir()
	require.NoError(t, os.Rename(filepath.Join(e.dir, "archive"), filepath.Join(moved, "kept")))
	code, lines, stderr = exportScopeLines(t, "--data", e.dir, "--scope", scope)
	assert.Equal(t, 1, code)
	assert.Empty(t, lines)
	assert.Contains(t, stderr, "no archive file at")
	assert.Contains(t, stderr, "--archives")
	code, lines, stderr = exportScopeLines(t, "--data", e.dir, "--scope", scope, "--archives", filepath.Join(moved, "kept"))
	require.Equal(t, 0, code, stderr)
	assert.Len(t, lines, int(head.Version))

	// An archive that still verifies but is not the file the scope
	// recorded (its digest differs) is refused.
	path := filepath.Join(moved, "kept", scope, filepath.Base(second.Archive))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, append([]byte(" "), b...), 0o600))
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"verify", "--archive", path}, &out, &errb), "a leading space keeps it a valid archive: %s", errb.String())
	code, lines, stderr = exportScopeLines(t, "--data", e.dir, "--scope", scope, "--archives", filepath.Join(moved, "kept"))
	assert.Equal(t, 1, code)
	assert.Empty(t, lines)
	assert.Contains(t, stderr, "the scope recorded")
}

// History deleted without an archive is reported — on stderr and as a
// line naming the versions — and the chain goes on from the hash the
// removal recorded; an archive written by a later pass (which holds the
// deletion's record) follows it.
func TestExportScopeReportsDeletedHistory(t *testing.T) {
	e := newRetentionEnv(t)
	const scope = "mixed"
	e.runs(scope, 6)
	deleted := e.pass(scope, frames.RetentionPolicy{KeepLastN: 2, OnCompletion: frames.CompletionDelete})
	assert.Empty(t, deleted.Archive)
	e.runs(scope, 5)
	archived := e.pass(scope, frames.RetentionPolicy{KeepLastN: 2, OnCompletion: frames.CompletionArchive})
	require.NotEmpty(t, archived.Archive)
	head, err := e.store.Stream(context.Background(), scope)
	require.NoError(t, err)
	e.stop()

	code, lines, stderr := exportScopeLines(t, "--data", e.dir, "--scope", scope)
	require.Equal(t, 0, code, stderr)
	require.NotEmpty(t, lines)
	m := lines[0].Missing
	require.NotNil(t, m, "the first line says what is missing")
	assert.Equal(t, int64(1), m.From)
	assert.Equal(t, deleted.Through, m.Through)
	assert.Contains(t, m.Why, "deleted without an archive")
	last := e.seen[scope][deleted.Through]
	assert.Equal(t, hex.EncodeToString(last.Hash[:]), m.Hash, "the chain goes on from the last deleted record's hash")
	assert.Contains(t, stderr, fmt.Sprintf("warning: versions 1..%d of scope %q are not in this export: deleted without an archive", deleted.Through, scope))

	rest := lines[1:]
	require.Len(t, rest, int(head.Version-deleted.Through), "every version after the deleted ones")
	prev := m.Hash
	for i, l := range rest {
		v := deleted.Through + 1 + int64(i)
		require.Nil(t, l.Missing)
		require.Equal(t, v, l.Version)
		assert.Equal(t, prev, l.Prev, "version %d", v)
		prev = l.Hash
		if v <= archived.Through {
			assert.Equal(t, "archive", l.From)
		} else {
			assert.Equal(t, "store", l.From)
		}
	}
}

// export's usage errors and its refusal of a held file.
func TestExportScopeRefusals(t *testing.T) {
	dir := t.TempDir()
	populate(t, dir)
	for _, args := range [][]string{
		{"--scope", "agent-7", "--format", "csv"},
		{"--format", "parquet"},
		{"--archives", dir},
		{"--scope", "agent-7", "extra"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			assert.Equal(t, 2, run(append([]string{"export", "--data", dir}, args...), &out, &errb))
			assert.Empty(t, out.String())
			if args[len(args)-1] == "extra" {
				assert.Contains(t, errb.String(), `unexpected argument "extra"`)
				return
			}
			assert.Contains(t, errb.String(), "Usage: stateindex export")
		})
	}
	var out, errb bytes.Buffer
	assert.Equal(t, 2, run([]string{"export", "--data", dir, "--format", "csv"}, &out, &errb))
	assert.Contains(t, errb.String(), `unknown --format "csv" (known: jsonl, state.json)`)

	held, err := eventstore.Open(filepath.Join(dir, dbFile), nil)
	require.NoError(t, err)
	defer held.Close()
	out.Reset()
	errb.Reset()
	assert.Equal(t, 1, run([]string{"export", "--data", dir, "--scope", "agent-7"}, &out, &errb))
	assert.Contains(t, errb.String(), "a server is running: stop it")
	assert.Empty(t, out.String())
}
