package eventstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The PostgreSQL store's schema and its migrations.
//
// si_schema_version holds the schema's version. OpenPostgres takes an
// advisory lock for the schema (so that servers starting together migrate
// once), reads the version, refuses one newer than this build knows, and
// runs each missing migration N→N+1 in order, all in one transaction:
// PostgreSQL's DDL is transactional, so a failed migration leaves the
// schema as it was. Migrations only ever add: a database keeps working
// with the build that migrated it and every later one.

// PostgresSchemaVersion is the schema version this build creates and
// reads.
// It is the number of migrations (pgMigrations).
const PostgresSchemaVersion = 2

// pgMigration brings a schema from version N to N+1 (N is its index).
type pgMigration struct {
	what string
	sql  string
	// after, if set, runs after sql in the same transaction.
	after func(ctx context.Context, tx pgx.Tx) error
}

var pgMigrations = [PostgresSchemaVersion]pgMigration{
	{what: "the log, snapshots, checkpoints, tables, owners and keys", sql: pgSchemaV1},
	{what: "the per-stream index (Lookup), built from the stored records", sql: pgSchemaV2, after: pgBuildIndex},
}

// pgSchemaV1 is the first schema. It is frozen: testdata/postgres_schema_v1.sql
// is a copy, the database a build of version 1 created.
const pgSchemaV1 = `
CREATE TABLE si_meta (
	id       smallint PRIMARY KEY CHECK (id = 1),
	store_id text NOT NULL,
	last_seq bigint NOT NULL
);
INSERT INTO si_meta (id, store_id, last_seq) VALUES (1, substr(md5(random()::text || clock_timestamp()::text), 1, 16), 0);
CREATE TABLE si_streams (
	stream       text COLLATE "C" PRIMARY KEY,
	version      bigint NOT NULL,
	head         bytea NOT NULL,
	base_version bigint NOT NULL DEFAULT 0,
	base_hash    bytea,
	removed_seq  bigint NOT NULL DEFAULT 0
);
CREATE TABLE si_events (
	seq     bigint PRIMARY KEY,
	stream  text COLLATE "C" NOT NULL,
	version bigint NOT NULL,
	record  bytea NOT NULL,
	UNIQUE (stream, version)
);
CREATE TABLE si_snapshots (
	stream   text COLLATE "C" PRIMARY KEY,
	snapshot bytea NOT NULL
);
CREATE TABLE si_checkpoints (
	stream     text COLLATE "C" NOT NULL,
	version    bigint NOT NULL,
	checkpoint bytea NOT NULL,
	PRIMARY KEY (stream, version)
);
CREATE TABLE si_tables (
	tbl   text COLLATE "C" NOT NULL,
	key   bytea NOT NULL,
	value bytea NOT NULL,
	PRIMARY KEY (tbl, key)
);
CREATE TABLE si_owners (
	stream text COLLATE "C" PRIMARY KEY,
	owner  text NOT NULL,
	epoch  bigint NOT NULL
);
CREATE TABLE si_keys (
	name text COLLATE "C" PRIMARY KEY,
	key  bytea NOT NULL
);
`

const pgSchemaV2 = `
CREATE TABLE si_index (
	stream        text COLLATE "C" NOT NULL,
	key           bytea NOT NULL,
	first_version bigint NOT NULL,
	last_version  bigint NOT NULL,
	PRIMARY KEY (stream, key)
);
CREATE INDEX si_streams_removed ON si_streams (removed_seq) WHERE removed_seq > 0;
`

// migrate brings the schema to PostgresSchemaVersion and returns the
// store's id.
func migrate(ctx context.Context, conn *pgx.Conn, schema, where string) (string, error) {
	fail := func(err error) (string, error) {
		return "", fmt.Errorf("eventstore: postgres %s, schema %s: %w", where, schema, err)
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return fail(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(1935764850, hashtext(current_schema()))`); err != nil {
		return fail(fmt.Errorf("lock the schema for migration: %w", err))
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS si_schema_version (version int NOT NULL)`); err != nil {
		return fail(fmt.Errorf("create si_schema_version: %w", err))
	}
	var versions []int
	rows, _ := tx.Query(ctx, `SELECT version FROM si_schema_version`)
	versions, err = pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return fail(err)
	}
	have := 0
	switch len(versions) {
	case 0:
		if _, err := tx.Exec(ctx, `INSERT INTO si_schema_version (version) VALUES (0)`); err != nil {
			return fail(err)
		}
	case 1:
		have = versions[0]
	default:
		return fail(fmt.Errorf("%w: si_schema_version holds %d rows, want 1", ErrCorrupt, len(versions)))
	}
	if have > PostgresSchemaVersion || have < 0 {
		return "", fmt.Errorf("%w: postgres %s, schema %s has schema version %d; this build knows versions up to %d (upgrade stateindex)",
			ErrUnsupportedFormat, where, schema, have, PostgresSchemaVersion)
	}
	for v := have; v < PostgresSchemaVersion; v++ {
		m := pgMigrations[v]
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return fail(fmt.Errorf("migration %d→%d (%s): %w", v, v+1, m.what, err))
		}
		if m.after != nil {
			if err := m.after(ctx, tx); err != nil {
				return fail(fmt.Errorf("migration %d→%d (%s): %w", v, v+1, m.what, err))
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE si_schema_version SET version = $1`, v+1); err != nil {
			return fail(err)
		}
	}
	var id string
	if err := tx.QueryRow(ctx, `SELECT store_id FROM si_meta WHERE id = 1`).Scan(&id); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return fail(corrupt("", 0, "si_meta has no row"))
		}
		return fail(err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fail(err)
	}
	return id, nil
}

// pgBuildIndex indexes every stored record (migration 1→2): a database of
// schema version 1 has records but no index.
func pgBuildIndex(ctx context.Context, tx pgx.Tx) error {
	const batch = 5000
	var after int64
	for {
		idx := overlayIndex{}
		n := 0
		var scanErr error
		rows, _ := tx.Query(ctx, `SELECT seq, stream, version, record FROM si_events WHERE seq > $1 ORDER BY seq LIMIT $2`, after, batch)
		for rows.Next() {
			var (
				seq, version int64
				stream       string
				raw          []byte
			)
			if scanErr = rows.Scan(&seq, &stream, &version, &raw); scanErr != nil {
				break
			}
			idx.add(&jrec{stream: stream, version: version, raw: raw})
			after = seq
			n++
		}
		rows.Close()
		if scanErr != nil {
			return scanErr
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if err := pgWriteIndex(ctx, tx, idx); err != nil {
			return err
		}
		if n < batch {
			return nil
		}
	}
}

// pgWriteIndex merges spans into si_index.
func pgWriteIndex(ctx context.Context, tx pgx.Tx, idx overlayIndex) error {
	var (
		streams       []string
		keys          [][]byte
		firsts, lasts []int64
	)
	for stream, m := range idx {
		for k, sp := range m {
			streams = append(streams, stream)
			keys = append(keys, []byte(k))
			firsts = append(firsts, sp.First)
			lasts = append(lasts, sp.Last)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, sqlUpsertIndex, streams, keys, firsts, lasts)
	return err
}

const sqlUpsertIndex = `INSERT INTO si_index (stream, key, first_version, last_version)
SELECT * FROM unnest($1::text[], $2::bytea[], $3::bigint[], $4::bigint[])
ON CONFLICT (stream, key) DO UPDATE SET
	first_version = least(si_index.first_version, excluded.first_version),
	last_version = greatest(si_index.last_version, excluded.last_version)`
