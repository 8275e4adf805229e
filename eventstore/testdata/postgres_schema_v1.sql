-- A database as a build of PostgreSQL schema version 1 left it (the
-- migration test opens one and expects migration 1→2 to index its
-- records). Frozen: never edit.
CREATE TABLE si_schema_version (version int NOT NULL);
INSERT INTO si_schema_version (version) VALUES (1);

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
