package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/internal/config"
)

// sharedStore is a store that several servers share (PostgreSQL): it
// fences a scope's owners and keeps the keys every server must agree on.
type sharedStore interface {
	eventstore.Store
	eventstore.Checkpointer
	eventstore.Fencer
	eventstore.KeyKeeper
}

// Names of the keys a shared store keeps (eventstore.KeyKeeper).
const (
	sharedServerKey     = "server.key"     // signs suspension tokens (and reservation tokens without ledger.key_file)
	sharedCheckpointKey = "checkpoint.key" // the Ed25519 seed that signs checkpoints
)

// storeFlagUsage is the --store help of the tools that read a store.
const storeFlagUsage = "read the PostgreSQL store at this URL (postgres://...) or at the URL in an environment variable (env:NAME) instead of --data"

// resolveStoreFlag resolves a tool's --store value as serve's store
// setting is resolved: a postgres:// URL, or env:NAME.
func resolveStoreFlag(v string) (string, error) {
	f := config.Default()
	f.Store = v
	if name, ok := strings.CutPrefix(v, "env:"); ok && name == "" {
		return "", errors.New("--store env:NAME needs the variable's name")
	}
	if !strings.HasPrefix(v, "env:") && !strings.HasPrefix(v, "postgres://") && !strings.HasPrefix(v, "postgresql://") {
		return "", fmt.Errorf("--store %q: want a postgres:// or postgresql:// URL, or env:NAME", config.RedactStore(v))
	}
	u, err := f.StoreURL()
	if err != nil {
		return "", fmt.Errorf("--store: %w", err)
	}
	return u, nil
}

// serverKeys returns the key that signs suspension tokens and the key that
// signs checkpoints, and says where they came from: the files the
// configuration names (keys.*), else — with a shared store — the keys the
// store keeps for every server that shares it (created by the first one to
// ask), else the data directory's DIR/server.key and DIR/checkpoint.key
// (created on first use; checkpoint.pub written beside them).
func serverKeys(ctx context.Context, file *config.File, dir string, shared eventstore.KeyKeeper) (token []byte, signing ed25519.PrivateKey, from string, err error) {
	switch {
	case file.Keys.ServerKeyFile != "":
		if token, err = readSecret(file.Keys.ServerKeyFile, keySize); err != nil {
			return nil, nil, "", fmt.Errorf("keys.server_key_file: %w", err)
		}
	case shared != nil:
		if token, err = shared.SharedKey(ctx, sharedServerKey, randomBytes(keySize)); err != nil {
			return nil, nil, "", fmt.Errorf("server key (kept in the store): %w", err)
		}
		if len(token) < keySize {
			return nil, nil, "", fmt.Errorf("the store's %s holds %d bytes, want at least %d", sharedServerKey, len(token), keySize)
		}
	default:
		if token, err = loadKey(dir); err != nil {
			return nil, nil, "", fmt.Errorf("server key: %w", err)
		}
	}
	switch {
	case file.Keys.CheckpointKeyFile != "":
		seed, err := readSeed(file.Keys.CheckpointKeyFile)
		if err != nil {
			return nil, nil, "", fmt.Errorf("keys.checkpoint_key_file: %w", err)
		}
		signing = ed25519.NewKeyFromSeed(seed)
	case shared != nil:
		seed, err := shared.SharedKey(ctx, sharedCheckpointKey, randomBytes(ed25519.SeedSize))
		if err != nil {
			return nil, nil, "", fmt.Errorf("checkpoint signing key (kept in the store): %w", err)
		}
		if len(seed) != ed25519.SeedSize {
			return nil, nil, "", fmt.Errorf("the store's %s holds %d bytes, want an Ed25519 seed of %d", sharedCheckpointKey, len(seed), ed25519.SeedSize)
		}
		signing = ed25519.NewKeyFromSeed(seed)
	default:
		if signing, err = loadSigningKey(dir); err != nil {
			return nil, nil, "", fmt.Errorf("checkpoint signing key: %w", err)
		}
	}
	from = "data directory"
	switch {
	case file.Keys.ServerKeyFile != "" || file.Keys.CheckpointKeyFile != "":
		from = "configuration (keys.*)"
	case shared != nil:
		from = "store (shared by its servers)"
	}
	return token, signing, from, nil
}

func randomBytes(n int) func() ([]byte, error) {
	return func() ([]byte, error) {
		b := make([]byte, n)
		_, err := rand.Read(b)
		return b, err
	}
}

// readSecret reads a file holding a secret of at least min bytes.
func readSecret(path string, min int) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) < min {
		return nil, fmt.Errorf("%s holds %d bytes, want a secret of at least %d", path, len(b), min)
	}
	return b, nil
}

// readSeed reads an Ed25519 seed: 32 raw bytes or 64 hex digits.
func readSeed(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if t := bytes.TrimSpace(b); len(t) == 2*ed25519.SeedSize {
		if seed, err := hex.DecodeString(string(t)); err == nil {
			return seed, nil
		}
	}
	if len(b) == ed25519.SeedSize {
		return b, nil
	}
	return nil, fmt.Errorf("%s: not an Ed25519 seed (32 bytes, or 64 hex digits)", path)
}

// errNoSharedKey: a read-only tool asked a store for a key it does not
// keep (the tool never creates one).
var errNoSharedKey = errors.New("the store keeps no such key")

// sharedPublicKey returns the public half of the checkpoint signing key a
// shared store keeps (ok false when it keeps none yet). It creates nothing.
func sharedPublicKey(ctx context.Context, kk eventstore.KeyKeeper) (ed25519.PublicKey, bool, error) {
	seed, err := kk.SharedKey(ctx, sharedCheckpointKey, func() ([]byte, error) { return nil, errNoSharedKey })
	if errors.Is(err, errNoSharedKey) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if len(seed) != ed25519.SeedSize {
		return nil, false, fmt.Errorf("the store's %s holds %d bytes, want an Ed25519 seed of %d", sharedCheckpointKey, len(seed), ed25519.SeedSize)
	}
	return ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey), true, nil
}
