package main

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// openTimeout bounds opening a shared store (connecting, checking and
// migrating its schema).
const openTimeout = 30 * time.Second

// openSharedStore opens the PostgreSQL store at url. (Stub until the
// PostgreSQL store is merged.)
func openSharedStore(ctx context.Context, url string, log *slog.Logger) (sharedStore, string, error) {
	return nil, "", errors.New("the PostgreSQL store is not built yet")
}
