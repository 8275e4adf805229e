package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/internal/config"
)

// openTimeout bounds opening a shared store (connecting, checking and
// migrating its schema).
const openTimeout = 30 * time.Second

// openSharedStore opens the PostgreSQL store at url and returns it with
// the database's name for messages (host:port/database, no credentials). A
// database that cannot be reached, is read-only or has a schema this
// build does not know is an error that says so, naming the database and
// never the password.
func openSharedStore(ctx context.Context, url string, log *slog.Logger) (*eventstore.PostgresStore, string, error) {
	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	st, err := eventstore.OpenPostgres(ctx, url, &eventstore.PostgresOptions{Logger: log})
	if err != nil {
		return nil, "", fmt.Errorf("store %s: %w", config.RedactStore(url), err)
	}
	return st, st.Where(), nil
}
