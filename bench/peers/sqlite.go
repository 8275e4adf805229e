package main

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite" // pure Go SQLite: no cgo

	"github.com/stateindex/stateindex/bench"
)

// sqliteRegistry is peer (b): the thread registry of
// persistence-continuation-chains.md in SQLite, WAL mode, synchronous=FULL,
// one transaction per checkpoint — the checkpoint row inserted and the
// thread's registry row (cost, updated_at) updated together.
//
// All threads share one connection: SQLite admits one writer at a time,
// and several connections would only add busy-wait sleeps between them.
type sqliteRegistry struct{}

func (sqliteRegistry) name() string { return "SQLite" }

const registrySchema = `
CREATE TABLE threads (
	thread_id              TEXT PRIMARY KEY,
	directive              TEXT NOT NULL,
	parent_id              TEXT,
	status                 TEXT NOT NULL,
	continuation_thread_id TEXT,
	continuation_of        TEXT,
	chain_root_id          TEXT,
	result                 TEXT,
	cost                   TEXT,
	created_at             TEXT NOT NULL,
	updated_at             TEXT NOT NULL,
	checkpoints            INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE checkpoints (
	thread_id TEXT NOT NULL,
	seq       INTEGER NOT NULL,
	saved_at  TEXT NOT NULL,
	data      BLOB NOT NULL,
	PRIMARY KEY (thread_id, seq)
);`

// openRegistry opens registry.db in dir in WAL mode with synchronous=FULL
// and checks that SQLite took both settings.
func openRegistry(dir string) (*sql.DB, error) {
	dsn := "file:" + filepath.Join(dir, "registry.db") +
		"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(10000)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	var mode string
	var sync int
	if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
		db.Close()
		return nil, err
	}
	if err := db.QueryRow("PRAGMA synchronous").Scan(&sync); err != nil {
		db.Close()
		return nil, err
	}
	if mode != "wal" || sync != 2 {
		db.Close()
		return nil, fmt.Errorf("sqlite: journal_mode %q synchronous %d, want wal and 2 (FULL)", mode, sync)
	}
	return db, nil
}

func (sqliteRegistry) run(ctx context.Context, dir string, total, threads, size int) (bench.Figure, string, error) {
	fig, err := runRegistry(ctx, dir, total, threads, size)
	return fig, "", err
}

func runRegistry(ctx context.Context, dir string, total, threads, size int) (bench.Figure, error) {
	db, err := openRegistry(dir)
	if err != nil {
		return bench.Figure{}, err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, registrySchema); err != nil {
		return bench.Figure{}, err
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	for i := range threads {
		if _, err := db.ExecContext(ctx, `INSERT INTO threads (thread_id, directive, status, cost, created_at, updated_at) VALUES (?, ?, 'running', '{}', ?, ?)`,
			threadID(i), "bench/checkpoints", now, now); err != nil {
			return bench.Figure{}, err
		}
	}
	insert, err := db.PrepareContext(ctx, `INSERT INTO checkpoints (thread_id, seq, saved_at, data) VALUES (?, ?, ?, ?)`)
	if err != nil {
		return bench.Figure{}, err
	}
	defer insert.Close()
	update, err := db.PrepareContext(ctx, `UPDATE threads SET cost = ?, updated_at = ?, checkpoints = checkpoints + 1 WHERE thread_id = ?`)
	if err != nil {
		return bench.Figure{}, err
	}
	defer update.Close()
	seqs := make([]int, threads)
	return spread(ctx, total, threads, func(i, k int) error {
		seqs[i]++
		at := time.Now().UTC().Format(time.RFC3339Nano)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.StmtContext(ctx, insert).ExecContext(ctx, threadID(i), seqs[i], at, []byte(content(k, size))); err != nil {
			tx.Rollback()
			return err
		}
		cost := fmt.Sprintf(`{"turns":%d,"input_tokens":%d,"output_tokens":%d}`, seqs[i], 1200*seqs[i], 300*seqs[i])
		if _, err := tx.StmtContext(ctx, update).ExecContext(ctx, cost, at, threadID(i)); err != nil {
			tx.Rollback()
			return err
		}
		return tx.Commit()
	})
}

func threadID(i int) string { return fmt.Sprintf("thread-%03d", i) }
