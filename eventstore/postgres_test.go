package eventstore_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/eventstore/storetest"
	"github.com/stateindex/stateindex/frames"
)

// The PostgreSQL store's tests need a server: STATEINDEX_PG_URL names a
// database where they may create schemas (CI starts one with
// .ci/postgres.sh). Each test works in a fresh schema of its own, dropped
// at the end.

func pgBaseURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("STATEINDEX_PG_URL")
	if u == "" {
		t.Skip("STATEINDEX_PG_URL is not set: no PostgreSQL server to test against (CI starts one with .ci/postgres.sh start)")
	}
	return u
}

// withParam adds a connection parameter to a URL or a key=value string.
func withParam(t testing.TB, base, key, value string) string {
	t.Helper()
	if strings.HasPrefix(base, "postgres://") || strings.HasPrefix(base, "postgresql://") {
		u, err := url.Parse(base)
		require.NoError(t, err)
		q := u.Query()
		q.Set(key, value)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return base + " " + key + "=" + value
}

// pgAdmin runs SQL on the test server outside any store.
func pgAdmin(t testing.TB, base, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	require.NoError(t, err)
	defer func() { _ = conn.Close(ctx) }()
	_, err = conn.Exec(ctx, sql, args...)
	require.NoError(t, err, sql)
}

// pgSchema creates a fresh schema and returns its name and a URL whose
// search_path selects it.
func pgSchema(t testing.TB) (string, string) {
	t.Helper()
	base := pgBaseURL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "t_" + hex.EncodeToString(b[:])
	pgAdmin(t, base, "CREATE SCHEMA "+name)
	t.Cleanup(func() { pgAdmin(t, base, "DROP SCHEMA "+name+" CASCADE") })
	return name, withParam(t, base, "search_path", name)
}

func openPG(t testing.TB, u string, opts *eventstore.PostgresOptions) *eventstore.PostgresStore {
	t.Helper()
	if opts == nil {
		opts = &eventstore.PostgresOptions{PoolSize: 4}
	}
	s, err := eventstore.OpenPostgres(context.Background(), u, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestPostgresConformance(t *testing.T) {
	pgBaseURL(t)
	storetest.Run(t, func(t *testing.T) eventstore.Store {
		_, u := pgSchema(t)
		s, err := eventstore.OpenPostgres(context.Background(), u, &eventstore.PostgresOptions{PoolSize: 4})
		require.NoError(t, err)
		return s
	})
}

// The Fencer and KeyKeeper conformance (storetest.RunFencer, RunKeyKeeper)
// that MemoryStore runs too: epochs, fenced appends (sync and async), the
// fence checked before the version, racing owners, bad input, a closed
// store; keys created once, racing creators, a failing generator.
func TestPostgresFencerConformance(t *testing.T) {
	pgBaseURL(t)
	open := func(t *testing.T) eventstore.Store {
		_, u := pgSchema(t)
		s, err := eventstore.OpenPostgres(context.Background(), u, &eventstore.PostgresOptions{PoolSize: 4})
		require.NoError(t, err)
		return s
	}
	t.Run("Fencer", func(t *testing.T) { storetest.RunFencer(t, open) })
	t.Run("KeyKeeper", func(t *testing.T) { storetest.RunKeyKeeper(t, open) })
}

// Servers sharing one database: writers on three stores commit
// concurrently, a reader on one of them tails ReadAll as its watcher
// reports commits (its own and the others'), and must see every sequence
// 1..N exactly once, in order: a transaction that commits late is never
// skipped.
func TestPostgresMembersGapFree(t *testing.T) {
	_, u := pgSchema(t)
	members := []*eventstore.PostgresStore{openPG(t, u, nil), openPG(t, u, nil), openPG(t, u, nil)}
	const writersPer, appends = 6, 30
	total := uint64(len(members) * writersPer * appends * 2) // two events per append
	ctx := context.Background()

	reader := members[2]
	kick := make(chan uint64, 1)
	stop := reader.WatchCommits(func(last uint64) {
		select {
		case kick <- last:
		default:
		}
	})
	defer stop()
	type seen struct {
		seqs []uint64
		err  error
	}
	got := make(chan seen, 1)
	go func() {
		var out seen
		next := uint64(1)
		deadline := time.After(60 * time.Second)
		for next <= total {
			err := reader.ReadAll(ctx, next, func(r eventstore.Record) error {
				out.seqs = append(out.seqs, r.Seq)
				if r.Seq != next {
					return fmt.Errorf("read sequence %d where %d was next", r.Seq, next)
				}
				next++
				return nil
			})
			if err != nil {
				out.err = err
				break
			}
			if next > total {
				break
			}
			select {
			case <-kick:
			case <-time.After(200 * time.Millisecond): // also poll: the kick channel keeps only one signal
			case <-deadline:
				out.err = fmt.Errorf("reader stuck at %d of %d", next, total)
				got <- out
				return
			}
		}
		got <- out
	}()

	var wg sync.WaitGroup
	errs := make(chan error, len(members)*writersPer)
	for m, s := range members {
		for w := range writersPer {
			wg.Add(1)
			go func() {
				defer wg.Done()
				stream := fmt.Sprintf("m%d-w%d", m, w)
				for i := range appends {
					if _, err := s.Append(ctx, stream, int64(2*i), []eventstore.Event{
						{Type: "x", Data: []byte(fmt.Sprint(i))}, {Type: "y"},
					}); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	res := <-got
	require.NoError(t, res.err)
	require.Len(t, res.seqs, int(total))
	for i, seq := range res.seqs {
		require.Equal(t, uint64(i+1), seq, "sequence %d", i)
	}
	last, err := members[0].LastSeq(ctx)
	require.NoError(t, err)
	assert.Equal(t, total, last)
	require.NoError(t, members[1].Streams(ctx, func(info eventstore.StreamInfo) error {
		assert.Equal(t, int64(2*appends), info.Version, info.Stream)
		return members[1].VerifyStream(ctx, info.Stream)
	}))
}

// A commit made through one store is reported to another store's
// watchers (LISTEN/NOTIFY).
func TestPostgresWatchOtherMember(t *testing.T) {
	_, u := pgSchema(t)
	a, b := openPG(t, u, nil), openPG(t, u, nil)
	ch := make(chan uint64, 16)
	stop := b.WatchCommits(func(last uint64) { ch <- last })
	defer stop()
	res, err := a.Append(t.Context(), "s", eventstore.NoStream, []eventstore.Event{{Type: "x"}})
	require.NoError(t, err)
	start := time.Now()
	select {
	case got := <-ch:
		assert.Equal(t, res.LastSeq, got)
		t.Logf("another member's commit reported after %s", time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatal("the other member's commit was never reported")
	}
}

func TestPostgresFence(t *testing.T) {
	_, u := pgSchema(t)
	a, b := openPG(t, u, nil), openPG(t, u, nil)
	ctx := t.Context()

	f, err := a.Owner(ctx, "scope")
	require.NoError(t, err)
	assert.Equal(t, eventstore.Fence{}, f, "never owned")
	fa, err := a.AcquireOwner(ctx, "scope", "member-a")
	require.NoError(t, err)
	assert.Equal(t, eventstore.Fence{Owner: "member-a", Epoch: 1}, fa)
	_, err = a.Append(eventstore.WithFence(ctx, fa), "scope", eventstore.NoStream, []eventstore.Event{{Type: "a1"}})
	require.NoError(t, err)

	fb, err := b.AcquireOwner(ctx, "scope", "member-b")
	require.NoError(t, err)
	assert.Equal(t, eventstore.Fence{Owner: "member-b", Epoch: 2}, fb)
	cur, err := a.Owner(ctx, "scope")
	require.NoError(t, err)
	assert.Equal(t, fb, cur)

	// The deposed owner holds the latest version, yet cannot write.
	before, err := a.Stream(ctx, "scope")
	require.NoError(t, err)
	_, err = a.Append(eventstore.WithFence(ctx, fa), "scope", 1, []eventstore.Event{{Type: "a2"}})
	require.ErrorIs(t, err, eventstore.ErrFenced)
	var fe *eventstore.FencedError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, eventstore.FencedError{Stream: "scope", Held: fa, Current: fb}, *fe)
	assert.Contains(t, err.Error(), "member-b (epoch 2)")
	after, err := a.Stream(ctx, "scope")
	require.NoError(t, err)
	assert.Equal(t, before, after, "a fenced append writes nothing")

	_, err = b.Append(eventstore.WithFence(ctx, fb), "scope", 1, []eventstore.Event{{Type: "b2"}})
	require.NoError(t, err, "the new owner writes")
	_, err = a.Append(ctx, "scope", 2, []eventstore.Event{{Type: "unfenced"}})
	require.NoError(t, err, "an append without a fence is not checked")

	// A fence on a stream never owned is refused too, as is a fence on
	// a new stream.
	_, err = a.Append(eventstore.WithFence(ctx, fa), "other", eventstore.NoStream, []eventstore.Event{{Type: "x"}})
	require.ErrorIs(t, err, eventstore.ErrFenced)
	info, err := a.Stream(ctx, "other")
	require.NoError(t, err)
	assert.Zero(t, info.Version)

	for _, owner := range []string{"", strings.Repeat("o", 257), "a\x00b", "\xff"} {
		_, err := a.AcquireOwner(ctx, "scope", owner)
		require.ErrorIs(t, err, eventstore.ErrInvalidOwner, "%q", owner)
	}
	_, err = a.AcquireOwner(ctx, "", "x")
	require.ErrorIs(t, err, eventstore.ErrEmptyStream)
	cur, err = b.Owner(ctx, "scope")
	require.NoError(t, err)
	assert.Equal(t, fb, cur, "refused acquisitions change nothing")
}

// Racing acquisitions each get a distinct epoch; exactly the last one
// owns the stream.
func TestPostgresFenceRace(t *testing.T) {
	_, u := pgSchema(t)
	stores := []*eventstore.PostgresStore{openPG(t, u, nil), openPG(t, u, nil)}
	const n = 16
	fences := make([]eventstore.Fence, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			f, err := stores[i%2].AcquireOwner(context.Background(), "s", fmt.Sprintf("m%d", i))
			assert.NoError(t, err)
			fences[i] = f
		})
	}
	wg.Wait()
	seen := map[uint64]bool{}
	var top eventstore.Fence
	for _, f := range fences {
		require.False(t, seen[f.Epoch], "epoch %d taken twice", f.Epoch)
		seen[f.Epoch] = true
		if f.Epoch > top.Epoch {
			top = f
		}
	}
	assert.Equal(t, uint64(n), top.Epoch)
	cur, err := stores[0].Owner(t.Context(), "s")
	require.NoError(t, err)
	assert.Equal(t, top, cur)
}

// One group commit with a fenced append, a conflicting one and good ones:
// only the refused appends fail, and they write nothing.
func TestPostgresBatchMixedOutcomes(t *testing.T) {
	_, u := pgSchema(t)
	s := openPG(t, u, nil)
	ctx := t.Context()
	old, err := s.AcquireOwner(ctx, "fenced", "old")
	require.NoError(t, err)
	_, err = s.AcquireOwner(ctx, "fenced", "new")
	require.NoError(t, err)
	_, err = s.Append(ctx, "conflict", eventstore.NoStream, []eventstore.Event{{Type: "x"}})
	require.NoError(t, err)

	// Hold the committer in a commit so that the appends below queue up
	// and share the next transaction.
	var commits atomic.Int32
	release := make(chan struct{})
	held := make(chan struct{})
	eventstore.SetPostgresHook(s, func(stage string) error {
		if stage == "before-commit" && commits.Add(1) == 1 {
			close(held)
			<-release
		}
		return nil
	})
	plug := make(chan error, 1)
	go func() {
		_, err := s.Append(ctx, "plug", eventstore.NoStream, []eventstore.Event{{Type: "x"}})
		plug <- err
	}()
	<-held
	type outcome struct {
		res eventstore.AppendResult
		err error
	}
	calls := []struct {
		ctx      context.Context
		stream   string
		expected int64
	}{
		{ctx, "good1", eventstore.NoStream},
		{eventstore.WithFence(ctx, old), "fenced", eventstore.Any},
		{ctx, "conflict", eventstore.NoStream},
		{ctx, "good2", eventstore.NoStream},
		{ctx, "good1", 1}, // after good1's first append, in the same batch
	}
	outs := make([]chan outcome, len(calls))
	for i, c := range calls {
		outs[i] = make(chan outcome, 1)
		s.AppendAsync(c.ctx, c.stream, c.expected, []eventstore.Event{{Type: "e", Data: []byte(fmt.Sprint(i))}},
			func(res eventstore.AppendResult, err error) { outs[i] <- outcome{res, err} })
		// queue in order
		require.Eventually(t, func() bool { return eventstore.PostgresQueueLen(s) == i+1 }, 10*time.Second, time.Millisecond)
	}
	close(release)
	require.NoError(t, <-plug)
	got := make([]outcome, len(calls))
	for i := range calls {
		got[i] = <-outs[i]
	}
	assert.Equal(t, int32(2), commits.Load(), "the five appends shared one commit")
	require.NoError(t, got[0].err)
	require.ErrorIs(t, got[1].err, eventstore.ErrFenced)
	require.ErrorIs(t, got[2].err, eventstore.ErrConflict)
	require.NoError(t, got[3].err)
	require.NoError(t, got[4].err)
	assert.Equal(t, int64(2), got[4].res.LastVersion)
	assert.Equal(t, []uint64{3, 4, 5}, []uint64{got[0].res.FirstSeq, got[3].res.FirstSeq, got[4].res.FirstSeq},
		"sequences follow the queue, without gaps for the refused appends")
	for stream, want := range map[string]int64{"fenced": 0, "conflict": 1, "good1": 2, "good2": 1} {
		info, err := s.Stream(ctx, stream)
		require.NoError(t, err)
		assert.Equal(t, want, info.Version, stream)
		require.NoError(t, s.VerifyStream(ctx, stream))
	}
	last, err := s.LastSeq(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(5), last)
}

func TestPostgresSharedKeyRace(t *testing.T) {
	_, u := pgSchema(t)
	stores := []*eventstore.PostgresStore{openPG(t, u, nil), openPG(t, u, nil)}
	const n = 12
	keys := make([][]byte, n)
	var generated atomic.Int32
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			k, err := stores[i%2].SharedKey(context.Background(), "token.key", func() ([]byte, error) {
				generated.Add(1)
				b := make([]byte, 32)
				_, err := rand.Read(b)
				return b, err
			})
			assert.NoError(t, err)
			keys[i] = k
		})
	}
	close(start)
	wg.Wait()
	require.Len(t, keys[0], 32)
	for i := range keys {
		assert.Equal(t, keys[0], keys[i], "racer %d", i)
	}
	assert.Positive(t, generated.Load())
	again, err := stores[1].SharedKey(t.Context(), "token.key", func() ([]byte, error) {
		t.Fatal("a stored key is not generated again")
		return nil, nil
	})
	require.NoError(t, err)
	assert.Equal(t, keys[0], again)

	for _, name := range []string{"", "Upper", "a/b", strings.Repeat("k", 65)} {
		_, err := stores[0].SharedKey(t.Context(), name, func() ([]byte, error) { return []byte("k"), nil })
		require.ErrorIs(t, err, eventstore.ErrInvalidKeyName, "%q", name)
	}
	boom := errors.New("no entropy")
	_, err = stores[0].SharedKey(t.Context(), "other", func() ([]byte, error) { return nil, boom })
	require.ErrorIs(t, err, boom)
	_, err = stores[0].SharedKey(t.Context(), "other", func() ([]byte, error) { return nil, nil })
	require.Error(t, err, "an empty key is refused")
}

func TestPostgresOpenErrors(t *testing.T) {
	base := pgBaseURL(t)
	ctx := context.Background()

	t.Run("RefusedPort", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := l.Addr().String()
		require.NoError(t, l.Close())
		start := time.Now()
		_, err = eventstore.OpenPostgres(ctx, "postgres://x@"+addr+"/db?sslmode=disable", nil)
		require.ErrorIs(t, err, eventstore.ErrUnreachable)
		assert.Contains(t, err.Error(), addr)
		assert.Less(t, time.Since(start), 10*time.Second)
	})
	t.Run("SilentServer", func(t *testing.T) {
		// A listener that accepts and never answers: the connect timeout
		// must end the wait, not a 30-second default.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer l.Close()
		var conns []net.Conn
		var mu sync.Mutex
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		}()
		defer func() {
			mu.Lock()
			for _, c := range conns {
				_ = c.Close()
			}
			mu.Unlock()
		}()
		start := time.Now()
		_, err = eventstore.OpenPostgres(ctx, "postgres://x@"+l.Addr().String()+"/db?sslmode=disable",
			&eventstore.PostgresOptions{ConnectTimeout: 300 * time.Millisecond})
		require.ErrorIs(t, err, eventstore.ErrUnreachable)
		assert.Contains(t, err.Error(), l.Addr().String())
		assert.Less(t, time.Since(start), 5*time.Second)
	})
	t.Run("CallerDeadline", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer l.Close()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				defer c.Close()
			}
		}()
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err = eventstore.OpenPostgres(cctx, "postgres://x@"+l.Addr().String()+"/db?sslmode=disable", nil)
		require.ErrorIs(t, err, eventstore.ErrUnreachable)
		assert.Less(t, time.Since(start), 4*time.Second, "the caller's deadline ends the wait before the 5s connect timeout")
	})
	t.Run("ReadOnly", func(t *testing.T) {
		_, u := pgSchema(t)
		_, err := eventstore.OpenPostgres(ctx, withParam(t, u, "default_transaction_read_only", "on"), nil)
		require.ErrorIs(t, err, eventstore.ErrReadOnly)
		assert.Contains(t, err.Error(), "read-only")
	})
	t.Run("NoSuchSchema", func(t *testing.T) {
		_, err := eventstore.OpenPostgres(ctx, withParam(t, base, "search_path", "no_such_schema_here"), nil)
		require.ErrorIs(t, err, eventstore.ErrInvalidOptions)
		assert.Contains(t, err.Error(), "search_path")
	})
	t.Run("NewerSchema", func(t *testing.T) {
		name, u := pgSchema(t)
		s := openPG(t, u, nil)
		require.NoError(t, s.Close())
		pgAdmin(t, base, "UPDATE "+name+".si_schema_version SET version = 99")
		_, err := eventstore.OpenPostgres(ctx, u, nil)
		require.ErrorIs(t, err, eventstore.ErrUnsupportedFormat)
		assert.Contains(t, err.Error(), "schema version 99")
	})
	t.Run("BadURL", func(t *testing.T) {
		_, err := eventstore.OpenPostgres(ctx, "postgres://%zz", nil)
		require.ErrorIs(t, err, eventstore.ErrInvalidOptions)
	})
	t.Run("BadOptions", func(t *testing.T) {
		_, err := eventstore.OpenPostgres(ctx, base, &eventstore.PostgresOptions{MaxBatch: -1})
		require.ErrorIs(t, err, eventstore.ErrInvalidOptions)
	})
}

// A database that a build of schema version 1 wrote (records, no index)
// is migrated at open: the index is built from its records.
func TestPostgresMigrateFromV1(t *testing.T) {
	base := pgBaseURL(t)
	ctx := t.Context()
	fixture, err := os.ReadFile("testdata/postgres_schema_v1.sql")
	require.NoError(t, err)
	require.Contains(t, string(fixture), eventstore.PostgresSchemaV1, "migration 1 is frozen: it must create what the v1 fixture has")

	// The records a v1 build wrote: written by the current build in
	// another schema (the record format did not change), then copied.
	srcName, srcURL := pgSchema(t)
	src := openPG(t, srcURL, nil)
	for i := range 6 {
		_, err := src.Append(ctx, "scope", int64(i), []eventstore.Event{pgFrameEvent(t, fmt.Sprintf("f%d", i/2), fmt.Sprintf("r%d", i/3))})
		require.NoError(t, err)
	}
	_, err = src.Append(ctx, "other", eventstore.NoStream, []eventstore.Event{pgFrameEvent(t, "g", "q")})
	require.NoError(t, err)
	require.NoError(t, src.SaveSnapshot(ctx, "scope", eventstore.Snapshot{Version: 4, Format: 1, Data: []byte("s")}))
	want := pgReadAll(t, src)
	require.NoError(t, src.Close())

	name, u := pgSchema(t)
	pgAdmin(t, base, "SET search_path TO "+name+"; "+string(fixture))
	pgAdmin(t, base, fmt.Sprintf(`INSERT INTO %[1]s.si_events SELECT * FROM %[2]s.si_events;
INSERT INTO %[1]s.si_streams SELECT * FROM %[2]s.si_streams;
INSERT INTO %[1]s.si_snapshots SELECT * FROM %[2]s.si_snapshots;
UPDATE %[1]s.si_meta SET last_seq = (SELECT last_seq FROM %[2]s.si_meta)`, name, srcName))

	s := openPG(t, u, nil)
	assert.Equal(t, want, pgReadAll(t, s))
	for key, sp := range map[string]eventstore.Span{
		eventstore.FrameKey("f0"): {First: 1, Last: 2}, eventstore.FrameKey("f2"): {First: 5, Last: 6},
		eventstore.RequestKey("r0"): {First: 1, Last: 3}, eventstore.RequestKey("r1"): {First: 4, Last: 6},
	} {
		got, ok, err := s.Lookup(ctx, "scope", key)
		require.NoError(t, err)
		assert.True(t, ok, key)
		assert.Equal(t, sp, got, key)
	}
	got, ok, err := s.Lookup(ctx, "other", eventstore.FrameKey("g"))
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, eventstore.Span{First: 1, Last: 1}, got)
	require.NoError(t, s.VerifyStream(ctx, "scope"))
	_, err = s.Append(ctx, "scope", 6, []eventstore.Event{{Type: "after"}})
	require.NoError(t, err)
	var v int
	conn, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	defer func() { _ = conn.Close(ctx) }()
	require.NoError(t, conn.QueryRow(ctx, "SELECT version FROM si_schema_version").Scan(&v))
	assert.Equal(t, eventstore.PostgresSchemaVersion, v)
	require.NoError(t, s.Verify(ctx, nil))
}

func pgFrameEvent(t testing.TB, frame, request string) eventstore.Event {
	t.Helper()
	e, err := eventstore.EncodeFrameEvent(&frames.ResultAdded{Meta: frames.Meta{Scope: "scope", Frame: frame, At: 1, RequestID: request,
		RequestHash: []byte{1, 2}}, Result: frames.ResultRef{ID: "x"}})
	require.NoError(t, err)
	return e
}

func pgReadAll(t testing.TB, s eventstore.Store) []eventstore.Record {
	t.Helper()
	var out []eventstore.Record
	require.NoError(t, s.ReadAll(context.Background(), 1, func(r eventstore.Record) error { out = append(out, r); return nil }))
	return out
}

// Damage made with SQL is found: VerifyStream, ReadStream and Verify
// report it, and an append to a stream whose head disagrees with its
// records is refused.
func TestPostgresCorruption(t *testing.T) {
	name, u := pgSchema(t)
	base := pgBaseURL(t)
	s := openPG(t, u, nil)
	ctx := t.Context()
	for i := range 4 {
		_, err := s.Append(ctx, "s", int64(i), []eventstore.Event{{Type: "t", Data: []byte(fmt.Sprint(i))}})
		require.NoError(t, err)
	}
	_, err := s.Append(ctx, "t", eventstore.NoStream, []eventstore.Event{{Type: "t"}})
	require.NoError(t, err)
	require.NoError(t, s.Verify(ctx, nil))

	// Flip the last byte of version 2's data.
	pgAdmin(t, base, `UPDATE `+name+`.si_events SET record = set_byte(record, length(record) - 1, get_byte(record, length(record) - 1) # 1)
WHERE stream = 's' AND version = 2`)
	err = s.VerifyStream(ctx, "s")
	var ce *eventstore.CorruptionError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "s", ce.Stream)
	assert.Equal(t, int64(2), ce.Version)
	err = s.ReadStream(ctx, "s", 1, func(eventstore.Record) error { return nil })
	require.ErrorIs(t, err, eventstore.ErrCorrupt)
	var problems []string
	err = s.Verify(ctx, func(stream string, err error) { problems = append(problems, stream+": "+err.Error()) })
	require.ErrorIs(t, err, eventstore.ErrCorrupt)
	require.NotEmpty(t, problems)
	assert.Contains(t, problems[0], `"s"`)
	require.NoError(t, s.VerifyStream(ctx, "t"), "other streams are sound")

	// A dropped tail: the head says 4, the records end at 3.
	pgAdmin(t, base, `DELETE FROM `+name+`.si_events WHERE stream = 's' AND version = 4`)
	_, err = s.Append(ctx, "s", 4, []eventstore.Event{{Type: "t"}})
	require.ErrorIs(t, err, eventstore.ErrCorrupt, "appending would bury the damage")
	_, err = s.Append(ctx, "t", 1, []eventstore.Event{{Type: "t"}})
	require.NoError(t, err, "other streams still take appends")
}

// The outcome of a commit whose connection is lost is read back.
func TestPostgresLostCommit(t *testing.T) {
	_, u := pgSchema(t)
	s := openPG(t, u, nil)
	ctx := t.Context()
	lost := errors.New("connection lost (injected)")

	// Lost after the COMMIT went through: the append succeeded.
	eventstore.SetPostgresHook(s, func(stage string) error {
		if stage == "after-commit" {
			return lost
		}
		return nil
	})
	res, err := s.Append(ctx, "s", eventstore.NoStream, []eventstore.Event{{Type: "a"}})
	require.NoError(t, err, "read back: committed")
	assert.Equal(t, uint64(1), res.LastSeq)

	// Lost before round trip 2: nothing was written, and a retry is safe.
	eventstore.SetPostgresHook(s, func(stage string) error {
		if stage == "before-commit" {
			return lost
		}
		return nil
	})
	_, err = s.Append(ctx, "s", 1, []eventstore.Event{{Type: "b"}})
	require.ErrorIs(t, err, eventstore.ErrTransient)
	assert.True(t, eventstore.Retryable(err))
	info, err := s.Stream(ctx, "s")
	require.NoError(t, err)
	assert.Equal(t, int64(1), info.Version)

	// Lost, and the outcome cannot be read back: unknown.
	eventstore.SetPostgresHook(s, func(stage string) error {
		if stage == "before-commit" || stage == "resolve" {
			return lost
		}
		return nil
	})
	_, err = s.Append(ctx, "s", 1, []eventstore.Event{{Type: "c"}})
	require.ErrorIs(t, err, eventstore.ErrCommitFailed)
	assert.NotErrorIs(t, err, eventstore.ErrWritesDisabled, "a lost connection does not disable writes")
	assert.False(t, eventstore.Retryable(err))
	assert.Contains(t, err.Error(), "unknown")

	// Writes go on, on a new connection.
	eventstore.SetPostgresHook(s, nil)
	res, err = s.Append(ctx, "s", 1, []eventstore.Event{{Type: "d"}})
	require.NoError(t, err)
	assert.Equal(t, uint64(2), res.LastSeq, "the lost commits took no sequence")
	require.NoError(t, s.VerifyStream(ctx, "s"))
}

func TestPostgresCheckpoints(t *testing.T) {
	name, u := pgSchema(t)
	s := openPG(t, u, nil)
	ctx := t.Context()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	var heads []eventstore.Hash
	for i := range 3 {
		res, err := s.Append(ctx, "s", int64(i), []eventstore.Event{{Type: "t"}})
		require.NoError(t, err)
		heads = append(heads, res.Head)
	}
	cp, err := s.SignCheckpoint(ctx, "s", 2, eventstore.CheckpointSnapshot, priv)
	require.NoError(t, err)
	assert.Equal(t, heads[1], cp.Head)
	require.NoError(t, cp.VerifySignature(pub))
	_, err = s.SignCheckpoint(ctx, "s", 3, eventstore.CheckpointRunFinished, priv)
	require.NoError(t, err)
	_, err = s.SignCheckpoint(ctx, "s", 4, eventstore.CheckpointRunFinished, priv)
	require.ErrorIs(t, err, eventstore.ErrInvalidSnapshotVersion)
	_, err = s.SignCheckpoint(ctx, "s", 1, eventstore.CheckpointReason(9), priv)
	require.Error(t, err)

	var got []eventstore.Checkpoint
	require.NoError(t, s.Checkpoints(ctx, "", func(c eventstore.Checkpoint) error { got = append(got, c); return nil }))
	require.Len(t, got, 2)
	assert.Equal(t, cp, got[0])
	assert.Equal(t, int64(3), got[1].Version)

	// A checkpoint moved to another version is damage.
	pgAdmin(t, pgBaseURL(t), `UPDATE `+name+`.si_checkpoints SET version = 1 WHERE version = 2`)
	got = nil
	err = s.Checkpoints(ctx, "s", func(c eventstore.Checkpoint) error { got = append(got, c); return nil })
	require.ErrorIs(t, err, eventstore.ErrCorrupt)
	assert.Len(t, got, 1, "the sound one is still listed")
}

// Records hash identically in every backend: the same appends to a
// memory store and to PostgreSQL give the same records.
func TestPostgresSameRecordsAsMemory(t *testing.T) {
	_, u := pgSchema(t)
	s := openPG(t, u, nil)
	m := eventstore.NewMemory()
	ctx := t.Context()
	for i := range 5 {
		for _, st := range []eventstore.Store{s, m} {
			_, err := st.Append(ctx, fmt.Sprintf("s%d", i%2), int64(2*(i/2)), []eventstore.Event{pgFrameEvent(t, "f", fmt.Sprint(i)), {Type: "x", Data: []byte{0, 1}}})
			require.NoError(t, err)
		}
	}
	assert.Equal(t, pgReadAll(t, m), pgReadAll(t, s))
}

// RemovePrefixes on PostgreSQL: refused cuts are named and change
// nothing, the others remove what RemovePrefix would.
func TestPostgresRemovePrefixes(t *testing.T) {
	_, u := pgSchema(t)
	s := openPG(t, u, nil)
	ctx := t.Context()
	for _, st := range []string{"a", "b", "c"} {
		for i := range 30 {
			_, err := s.Append(ctx, st, int64(i), []eventstore.Event{pgFrameEvent(t, fmt.Sprintf("f%d", i/5), fmt.Sprintf("r%d", i/3))})
			require.NoError(t, err)
		}
		if st != "c" {
			require.NoError(t, s.SaveSnapshot(ctx, st, eventstore.Snapshot{Version: 30, Format: 1, Data: []byte("x")}))
		}
	}
	res, errs, err := s.RemovePrefixes(ctx, map[string]int64{"a": 12, "b": 20, "c": 5})
	require.NoError(t, err)
	require.Len(t, errs, 1)
	require.ErrorIs(t, errs["c"], eventstore.ErrSnapshotBehind)
	assert.Equal(t, int64(12), res["a"].Removed)
	assert.Equal(t, int64(20), res["b"].Removed)
	assert.Equal(t, int64(20), res["b"].Base.Version)
	for st, want := range map[string]int64{"a": 13, "b": 21, "c": 1} {
		var first int64
		require.NoError(t, s.ReadStream(ctx, st, 1, func(r eventstore.Record) error {
			if first == 0 {
				first = r.Version
			}
			return nil
		}))
		assert.Equal(t, want, first, st)
	}
	require.NoError(t, s.Verify(ctx, func(stream string, err error) { t.Errorf("verify: %s: %v", stream, err) }))
	_, _, err = s.RemovePrefixes(ctx, map[string]int64{"": 1})
	require.ErrorIs(t, err, eventstore.ErrEmptyStream)
}

// pgProxy forwards TCP connections to the server and can cut them all.
type pgProxy struct {
	l     net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newPGProxy(t *testing.T, target string) *pgProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &pgProxy{l: l}
	t.Cleanup(func() { _ = l.Close(); p.cut() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
			go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
		}
	}()
	return p
}

// cut closes every connection through the proxy.
func (p *pgProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// Connections cut at random moments while writers append: every append
// reported done is stored exactly once, every one reported not written
// (ErrTransient) is absent, and one whose outcome is unknown
// (ErrCommitFailed) is either; the store goes on writing on new
// connections, and its listener reconnects.
func TestPostgresConnectionCuts(t *testing.T) {
	_, u := pgSchema(t)
	pu, err := url.Parse(u)
	require.NoError(t, err)
	proxy := newPGProxy(t, pu.Host)
	pu.Host = proxy.l.Addr().String()
	s := openPG(t, pu.String(), &eventstore.PostgresOptions{PoolSize: 4, ResolveTimeout: 20 * time.Second, ConnectTimeout: 2 * time.Second})
	direct := openPG(t, u, nil)

	const writers = 4
	type outcome struct{ ok, notWritten, unknown []string }
	outs := make([]outcome, writers)
	stop := make(chan struct{})
	var progress atomic.Int64 // appends answered
	var readBack atomic.Int64 // not written, found out by reading back
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			stream := fmt.Sprintf("w%d", w)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("%s-%d", stream, i)
				_, err := s.Append(context.Background(), stream, eventstore.Any, []eventstore.Event{{Type: "x", Data: []byte(id)}})
				progress.Add(1)
				switch {
				case err == nil:
					outs[w].ok = append(outs[w].ok, id)
				case errors.Is(err, eventstore.ErrTransient):
					outs[w].notWritten = append(outs[w].notWritten, id)
					if strings.Contains(err.Error(), "read back") {
						readBack.Add(1)
					}
				case errors.Is(err, eventstore.ErrCommitFailed):
					outs[w].unknown = append(outs[w].unknown, id)
				default:
					t.Errorf("append %s failed with neither ErrTransient nor ErrCommitFailed: %v", id, err)
					return
				}
			}
		})
	}
	for range 25 { // cut once a few appends were answered since the last cut
		from := progress.Load()
		require.Eventually(t, func() bool { return progress.Load() >= from+6 }, 30*time.Second, time.Millisecond,
			"the store makes no progress after a cut")
		proxy.cut()
	}
	close(stop)
	wg.Wait()

	var ok, notWritten, unknown int
	for w := range writers {
		stored := map[string]int{}
		require.NoError(t, direct.ReadStream(t.Context(), fmt.Sprintf("w%d", w), 1, func(r eventstore.Record) error {
			stored[string(r.Data)]++
			return nil
		}))
		for _, id := range outs[w].ok {
			assert.Equal(t, 1, stored[id], "acknowledged %s is stored once", id)
		}
		for _, id := range outs[w].notWritten {
			assert.Zero(t, stored[id], "%s reported not written is absent", id)
		}
		for id, n := range stored {
			assert.Equal(t, 1, n, "%s stored once", id)
		}
		ok += len(outs[w].ok)
		notWritten += len(outs[w].notWritten)
		unknown += len(outs[w].unknown)
	}
	t.Logf("appends: %d acknowledged, %d not written (%d of them found out by reading back), %d unknown", ok, notWritten, readBack.Load(), unknown)
	require.Positive(t, ok)
	_, err = s.Append(t.Context(), "after", eventstore.NoStream, []eventstore.Event{{Type: "x"}})
	require.NoError(t, err, "the store writes on after the cuts")
	require.NoError(t, direct.Verify(t.Context(), nil))

	// The listener came back: another store's commit is reported.
	seen := make(chan uint64, 64)
	stopWatch := s.WatchCommits(func(last uint64) {
		select {
		case seen <- last:
		default:
		}
	})
	defer stopWatch()
	res, err := direct.Append(t.Context(), "other-member", eventstore.NoStream, []eventstore.Event{{Type: "x"}})
	require.NoError(t, err)
	deadline := time.After(15 * time.Second)
	for got := uint64(0); got < res.LastSeq; {
		select {
		case got = <-seen:
		case <-deadline:
			t.Fatalf("the commit of another store (sequence %d) was never reported after the cuts", res.LastSeq)
		}
	}
}

// AcquireOwner waits for a commit in flight that checked the fence it
// deposes: that append committed before the new owner took the stream,
// never after. Shown for a fence of epoch 1 and for the zero fence of a
// stream never owned (no owner row to lock until the commit makes one).
func TestPostgresAcquireWaitsForFencedCommit(t *testing.T) {
	for _, never := range []bool{false, true} {
		t.Run(fmt.Sprintf("never_owned=%v", never), func(t *testing.T) {
			_, u := pgSchema(t)
			s := openPG(t, u, nil)
			ctx := t.Context()
			var held eventstore.Fence
			if !never {
				var err error
				held, err = s.AcquireOwner(ctx, "scope", "a")
				require.NoError(t, err)
			}
			release := make(chan struct{})
			var released sync.Once
			t.Cleanup(func() { released.Do(func() { close(release) }) }) // before Close, even on failure
			holding := make(chan struct{})
			var once sync.Once
			eventstore.SetPostgresHook(s, func(stage string) error {
				if stage == "before-commit" {
					once.Do(func() { close(holding); <-release })
				}
				return nil
			})
			appended := make(chan error, 1)
			go func() {
				_, err := s.Append(eventstore.WithFence(ctx, held), "scope", eventstore.Any, []eventstore.Event{{Type: "x"}})
				appended <- err
			}()
			<-holding
			acquired := make(chan eventstore.Fence, 1)
			go func() {
				f, err := s.AcquireOwner(context.Background(), "scope", "b")
				assert.NoError(t, err)
				acquired <- f
			}()
			// The acquisition waits on the owner row the commit holds.
			conn, err := pgx.Connect(ctx, pgBaseURL(t))
			require.NoError(t, err)
			defer func() { _ = conn.Close(ctx) }()
			require.Eventually(t, func() bool {
				var n int
				err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO si_owners%' AND query LIKE '%RETURNING epoch%'`).Scan(&n)
				return err == nil && n > 0
			}, 10*time.Second, 5*time.Millisecond, "AcquireOwner does not wait for the fenced commit")
			select {
			case <-acquired:
				t.Fatal("AcquireOwner returned while the commit it deposes was in flight")
			default:
			}
			released.Do(func() { close(release) })
			require.NoError(t, <-appended, "the append checked its fence before the new owner came")
			f := <-acquired
			assert.Equal(t, held.Epoch+1, f.Epoch)
			_, err = s.Append(eventstore.WithFence(ctx, held), "scope", eventstore.Any, []eventstore.Event{{Type: "x"}})
			require.ErrorIs(t, err, eventstore.ErrFenced, "after it, the old fence is refused")
		})
	}
}

// A server or role whose default isolation is SERIALIZABLE changes
// nothing: the store's sessions run READ COMMITTED, so appends and
// snapshots racing on one stream wait for each other instead of failing
// with serialization errors.
func TestPostgresSerializableDefault(t *testing.T) {
	_, u := pgSchema(t)
	s := openPG(t, withParam(t, u, "default_transaction_isolation", "serializable"), nil)
	ctx := t.Context()
	_, err := s.Append(ctx, "s", eventstore.NoStream, []eventstore.Event{{Type: "x"}})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for range 10 {
				if g%2 == 0 {
					_, err := s.Append(context.Background(), "s", eventstore.Any, []eventstore.Event{{Type: "x"}})
					assert.NoError(t, err)
				} else {
					assert.NoError(t, s.SaveSnapshot(context.Background(), "s", eventstore.Snapshot{Version: 1, Format: 1}))
					assert.NoError(t, s.TableWrite(context.Background(), "t", []eventstore.TableOp{{Key: []byte("k"), Value: []byte{byte(g)}}}))
				}
			}
		})
	}
	wg.Wait()
	info, err := s.Stream(ctx, "s")
	require.NoError(t, err)
	assert.Equal(t, int64(41), info.Version)
}
