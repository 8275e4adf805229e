package eventstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The PostgreSQL store (DESIGN §13): the same Store as BoltStore, kept in
// a database that several StateIndex servers share.
//
// # Layout (schema version 2; every table's name starts with si_)
//
//	si_schema_version (version)                  one row: the schema's version
//	si_meta      (id=1, store_id, last_seq)      the global sequence counter; store_id names the NOTIFY channel
//	si_streams   (stream, version, head, base_version, base_hash, removed_seq)
//	si_events    (seq PK, stream, version, record; UNIQUE (stream, version))
//	si_snapshots (stream, snapshot)
//	si_index     (stream, key, first_version, last_version)   Lookup (schema version 2)
//	si_checkpoints (stream, version, checkpoint)  signed checkpoints
//	si_tables    (tbl, key, value)                Tables
//	si_owners    (stream, owner, epoch)           Fencer
//	si_keys      (name, key)                      KeyKeeper
//
// A record's column holds exactly the bytes BoltStore stores (the same
// envelope, sequence and predecessor patched in), so hashes, chains,
// checkpoints and exports are identical across the backends. Stream names
// sort in byte order (COLLATE "C").
//
// # The global order
//
// Every committing transaction locks the one row of si_meta (after the
// rows of its streams) and takes its sequences from it; the lock is held
// until its commit. Sequences are therefore handed out in commit order
// and without gaps across all servers sharing the database: a snapshot
// that sees a transaction sees every transaction with lower sequences, so
// ReadAll never skips an event that commits late. The cost: commits from
// all servers serialise on that row (each holds it for one round trip and
// its WAL flush); group commit puts many appends in each.
//
// # Group commit
//
// Appends are validated and encoded in the caller's goroutine and queued
// to one committer goroutine per store. It drains what is pending (up to
// PostgresOptions.MaxBatch appends or MaxCommitBytes) into one
// transaction of two pipelined round trips: the first locks the batch's
// stream rows in name order (creating missing ones), reads their heads,
// locks and reads the owners of fenced streams and locks the counter; the
// second inserts the records, moves the heads, the index and the counter,
// sends NOTIFY and commits. Version conflicts and fence mismatches are
// decided from the locked rows before any write, so one append's conflict
// never fails the others, and every append is answered only after the
// commit returned. Sessions run with synchronous_commit=on: the commit
// returns after its WAL is flushed.
//
// # Errors of a commit
//
// A failure before COMMIT was sent, or an error the server reported (the
// transaction rolled back), wrote nothing: those appends fail with an
// error matching ErrTransient (a retry is safe). When the connection is
// lost while COMMIT may have been in flight, the committer resolves the
// outcome on a new connection: it waits for the counter row (so the old
// transaction, if the server still runs it, has ended) and looks for the
// batch's first record at its sequence. Found: the appends succeeded.
// Absent: nothing was written (ErrTransient). If the database cannot be
// reached to find out, the appends fail with an error matching
// ErrCommitFailed whose outcome is unknown. Unlike BoltStore, writes stay
// enabled: a lost connection does not make the database lose writes it
// acknowledged (it does not match ErrWritesDisabled), and the next batch
// takes a new connection.
//
// # Caveats
//
//   - Open refuses a server that runs with fsync=off, is in recovery (a
//     standby) or whose sessions are read-only, and a schema newer than
//     this build knows (ErrUnsupportedFormat).
//   - The URL may carry search_path (postgres://…/db?search_path=myschema):
//     the store's tables are created in, and read from, the first existing
//     schema of the search path, so one database can hold several stores.
//     The schema must exist.
//   - Sessions set idle_in_transaction_session_timeout (default 3s): a
//     server that loses a member's connection in mid-transaction ends
//     that transaction, and its lock on the counter, within that time.
//   - WatchCommits reports this store's commits at once and other
//     servers' through LISTEN/NOTIFY, typically within a millisecond or
//     two (0.3ms measured between two stores on one machine). The
//     listener also reads the last sequence after each notification and
//     every PollInterval (default 1s) without one, so a lost notification
//     is late by at most PollInterval; while its connection is down it
//     reconnects (backing off up to 5s) and reports what it missed once
//     back.
//   - Read callbacks run outside any transaction, as with BoltStore.
//   - Connect directly or through a pooler in session mode: LISTEN, the
//     session settings and the transactions spanning two round trips do
//     not survive transaction-mode pooling.
//   - A migration at open holds its locks until it commits: writers of
//     every server wait for it (building the index of a large version 1
//     database takes as long as reading its records once).

// PostgresOptions configure OpenPostgres. A nil *PostgresOptions means all
// defaults; a zero field takes its default.
type PostgresOptions struct {
	Limits

	// PoolSize is the most connections the store keeps for reads and
	// writes (default: the URL's pool_max_conns, else pgx's default of
	// max(4, CPUs)). The listening connection comes on top.
	PoolSize int

	// MaxBatch is the most appends one group commit takes (default 512).
	MaxBatch int

	// MaxCommitBytes is the size at which the committer stops adding
	// appends to one transaction (default DefaultMaxCommitBytes).
	MaxCommitBytes int

	// ConnectTimeout bounds each attempt to connect (default: the URL's
	// connect_timeout, else 5s). Open fails with ErrUnreachable after it.
	ConnectTimeout time.Duration

	// CommitTimeout bounds one group commit's round trips (default 30s).
	CommitTimeout time.Duration

	// IdleInTransactionTimeout is set as the sessions'
	// idle_in_transaction_session_timeout (default 3s: a member paused or
	// cut off in the middle of a commit holds the global sequence row —
	// every member's commits wait — until the server ends its session; a
	// healthy member's transaction is idle only while it hashes a batch).
	IdleInTransactionTimeout time.Duration

	// ResolveTimeout bounds finding out, on a new connection, whether a
	// commit whose connection was lost happened (default 30s).
	ResolveTimeout time.Duration

	// PollInterval is how often the listener reads the last sequence when
	// no notification came (default 1s).
	PollInterval time.Duration

	// Logger receives warnings (a lost listening connection). nil logs to
	// slog.Default().
	Logger *slog.Logger
}

// Defaults of PostgresOptions.
const (
	DefaultPostgresMaxBatch       = 512
	DefaultPostgresConnectTimeout = 5 * time.Second
	DefaultPostgresCommitTimeout  = 30 * time.Second
	DefaultPostgresIdleInTx       = 3 * time.Second
	DefaultPostgresResolveTimeout = 30 * time.Second
	DefaultPostgresPollInterval   = time.Second
)

func (o *PostgresOptions) resolve() (PostgresOptions, error) {
	var r PostgresOptions
	if o != nil {
		r = *o
	}
	lim, err := r.Limits.resolve()
	if err != nil {
		return r, err
	}
	r.Limits = lim
	if r.PoolSize < 0 || r.MaxBatch < 0 || r.MaxCommitBytes < 0 || r.ConnectTimeout < 0 || r.CommitTimeout < 0 ||
		r.IdleInTransactionTimeout < 0 || r.ResolveTimeout < 0 || r.PollInterval < 0 {
		return r, fmt.Errorf("%w: negative value in the PostgreSQL options", ErrInvalidOptions)
	}
	if r.MaxBatch == 0 {
		r.MaxBatch = DefaultPostgresMaxBatch
	}
	if r.MaxCommitBytes == 0 {
		r.MaxCommitBytes = DefaultMaxCommitBytes
	}
	if r.CommitTimeout == 0 {
		r.CommitTimeout = DefaultPostgresCommitTimeout
	}
	if r.IdleInTransactionTimeout == 0 {
		r.IdleInTransactionTimeout = DefaultPostgresIdleInTx
	}
	if r.ResolveTimeout == 0 {
		r.ResolveTimeout = DefaultPostgresResolveTimeout
	}
	if r.PollInterval == 0 {
		r.PollInterval = DefaultPostgresPollInterval
	}
	if r.Logger == nil {
		r.Logger = slog.Default()
	}
	return r, nil
}

// PostgresStore is a Store kept in PostgreSQL, safe for concurrent use and
// for use by several servers (each with its own PostgresStore) sharing one
// database. See the top of postgres.go for its layout and guarantees.
type PostgresStore struct {
	pool   *pgxpool.Pool
	cfg    *pgx.ConnConfig // for the listening connection
	opts   PostgresOptions
	where  string // host:port/database, for messages
	chname string // the NOTIFY channel

	mu         sync.RWMutex // orders Close against enqueues
	closed     bool
	closedFlag atomic.Bool
	queue      chan *pgRequest
	done       chan struct{} // closed when the committer has exited
	closeOnce  sync.Once

	listenStop context.CancelFunc
	listenDone chan struct{}

	watch watchers

	// hook, if set (tests), is called at named points of a commit; an
	// error it returns acts as a lost connection there.
	hook atomic.Pointer[func(stage string) error]
}

var (
	_ Store           = (*PostgresStore)(nil)
	_ AsyncAppender   = (*PostgresStore)(nil)
	_ Tables          = (*PostgresStore)(nil)
	_ CommitWatcher   = (*PostgresStore)(nil)
	_ RemovalReporter = (*PostgresStore)(nil)
	_ Checkpointer    = (*PostgresStore)(nil)
	_ Fencer          = (*PostgresStore)(nil)
	_ KeyKeeper       = (*PostgresStore)(nil)
)

// OpenPostgres connects to the database at url (a postgres:// URL or a
// key=value connection string, as pgx reads it), checks that it can keep
// its promises there, creates or migrates its schema, and starts the
// committer and the listener. ctx bounds the opening only.
//
// It fails with ErrUnreachable when no connection can be made within the
// connect timeout (naming the host), ErrReadOnly for a standby or a
// read-only session, ErrUnsupportedFormat for a schema newer than this
// build, ErrInvalidOptions for a URL or options it cannot use.
func OpenPostgres(ctx context.Context, url string, opts *PostgresOptions) (*PostgresStore, error) {
	o, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("%w: PostgreSQL URL: %w", ErrInvalidOptions, err)
	}
	cc := pc.ConnConfig
	if o.ConnectTimeout > 0 {
		cc.ConnectTimeout = o.ConnectTimeout
	} else if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = DefaultPostgresConnectTimeout
	}
	o.ConnectTimeout = cc.ConnectTimeout
	// Durable before the reply, whatever the server's or the role's
	// default: every session commits with its WAL flushed.
	cc.RuntimeParams["synchronous_commit"] = "on"
	// The store's locking is written for READ COMMITTED (a lock waited for
	// is then taken on the row's latest version, not refused as a
	// serialization failure), whatever default the server or role sets.
	cc.RuntimeParams["default_transaction_isolation"] = "read committed"
	cc.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(o.IdleInTransactionTimeout.Milliseconds(), 10)
	if cc.RuntimeParams["application_name"] == "" {
		cc.RuntimeParams["application_name"] = "stateindex"
	}
	if o.PoolSize > 0 {
		pc.MaxConns = int32(o.PoolSize)
	}
	where := fmt.Sprintf("%s/%s", net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))), cc.Database)

	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("%w: PostgreSQL pool: %w", ErrInvalidOptions, err)
	}
	s := &PostgresStore{
		pool:  pool,
		cfg:   cc.Copy(),
		opts:  o,
		where: where,
		queue: make(chan *pgRequest, queueLength),
		done:  make(chan struct{}),
	}
	storeID, err := s.prepare(ctx)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.chname = "si_commit_" + storeID
	lctx, stop := context.WithCancel(context.Background())
	s.listenStop = stop
	s.listenDone = make(chan struct{})
	go s.listen(lctx)
	go s.run()
	return s, nil
}

// prepare checks the server on a first connection and brings the schema
// to this build's version; it returns the store's id.
func (s *PostgresStore) prepare(ctx context.Context) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, s.opts.ConnectTimeout)
	defer cancel()
	conn, err := s.pool.Acquire(cctx)
	if err != nil {
		return "", s.connectError(ctx, err)
	}
	defer conn.Release()
	var (
		schema                           *string
		recovery                         bool
		readOnly, syncCommit, fsync, enc string
		version                          int
	)
	err = conn.QueryRow(ctx, `SELECT current_schema(), pg_is_in_recovery(), current_setting('transaction_read_only'),
		current_setting('synchronous_commit'), current_setting('fsync'), current_setting('server_encoding'),
		current_setting('server_version_num')::int`).Scan(&schema, &recovery, &readOnly, &syncCommit, &fsync, &enc, &version)
	if err != nil {
		return "", fmt.Errorf("eventstore: postgres %s: reading the server's settings: %w", s.where, err)
	}
	switch {
	case recovery:
		return "", fmt.Errorf("%w: postgres %s is a standby in recovery; connect to the primary", ErrReadOnly, s.where)
	case readOnly == "on":
		return "", fmt.Errorf("%w: postgres %s: sessions are read-only (default_transaction_read_only is on)", ErrReadOnly, s.where)
	case fsync != "on":
		return "", fmt.Errorf("%w: postgres %s runs with fsync=%s: a commit would not survive a crash, so the store refuses it", ErrInvalidOptions, s.where, fsync)
	case syncCommit != "on":
		return "", fmt.Errorf("%w: postgres %s: synchronous_commit is %q although the store asked for on", ErrInvalidOptions, s.where, syncCommit)
	case enc != "UTF8" && enc != "SQL_ASCII":
		return "", fmt.Errorf("%w: postgres %s: server encoding %s; the store needs UTF8", ErrInvalidOptions, s.where, enc)
	case version < 120000:
		return "", fmt.Errorf("%w: postgres %s: server version %d; the store needs PostgreSQL 12 or later", ErrInvalidOptions, s.where, version)
	case schema == nil:
		return "", fmt.Errorf("%w: postgres %s: the search_path names no existing schema; create it first (CREATE SCHEMA …)", ErrInvalidOptions, s.where)
	}
	return migrate(ctx, conn.Conn(), *schema, s.where)
}

// connectError explains a failed first connection.
func (s *PostgresStore) connectError(ctx context.Context, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) { // the server answered: authentication, a missing database…
		return fmt.Errorf("eventstore: postgres %s refused the connection: %w", s.where, err)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w: postgres %s: gave up connecting: %w", ErrUnreachable, s.where, ctx.Err())
	}
	return fmt.Errorf("%w: cannot connect to postgres %s within %s: %w", ErrUnreachable, s.where, s.opts.ConnectTimeout, err)
}

// Close implements Store. Appends queued before Close are still committed
// and answered; then the committer and the listener stop and the
// connections close. It is idempotent.
func (s *PostgresStore) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.closedFlag.Store(true)
		close(s.queue)
		s.mu.Unlock()
		<-s.done
		s.listenStop()
		<-s.listenDone
		s.pool.Close()
	})
	return nil
}

// check fails a call on a closed store or with a finished context.
func (s *PostgresStore) check(ctx context.Context) error {
	if s.closedFlag.Load() {
		return ErrClosed
	}
	return ctx.Err()
}

// dbErr names the database in an error of a read or a write outside the
// committer; on a closed store every such error is ErrClosed.
func (s *PostgresStore) dbErr(ctx context.Context, what string, err error) error {
	if err == nil {
		return nil
	}
	if s.closedFlag.Load() {
		return ErrClosed
	}
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return ctx.Err()
	}
	var ce *CorruptionError
	if errors.As(err, &ce) || errors.Is(err, ErrUnsupportedFormat) {
		return err
	}
	return fmt.Errorf("eventstore: postgres %s: %s: %w", s.where, what, err)
}

// writeCtx is the context of a write once the caller's context was
// checked: a write's statements are not cut off by the caller's
// cancellation (that would leave its outcome unknown and report
// "canceled" for a write that may have committed), only bounded by
// CommitTimeout.
func (s *PostgresStore) writeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.opts.CommitTimeout)
}

// Where returns the database the store uses (host:port/database).
func (s *PostgresStore) Where() string { return s.where }

// setHook installs a test hook called at named stages of each commit.
func (s *PostgresStore) setHook(fn func(stage string) error) {
	if fn == nil {
		s.hook.Store(nil)
		return
	}
	s.hook.Store(&fn)
}

func (s *PostgresStore) callHook(stage string) error {
	if h := s.hook.Load(); h != nil {
		return (*h)(stage)
	}
	return nil
}
