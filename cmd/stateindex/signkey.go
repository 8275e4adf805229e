package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// checkpointKeyFile holds the Ed25519 seed that signs checkpoints.
const checkpointKeyFile = "checkpoint.key"

// loadSigningKey reads the checkpoint signing key from DIR/checkpoint.key,
// creating it (a random Ed25519 seed, mode 0600, written atomically) on
// first use, and (re)writes its public half to DIR/checkpoint.pub, where
// stateindex verify looks for it. Copy checkpoint.pub somewhere the file's
// writers cannot reach: a signature proves nothing to someone who can also
// replace the public key beside it.
func loadSigningKey(dir string) (ed25519.PrivateKey, error) {
	path := filepath.Join(dir, checkpointKeyFile)
	seed, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		seed = make([]byte, ed25519.SeedSize)
		if _, err := rand.Read(seed); err != nil {
			return nil, err
		}
		if err := writeAtomic(dir, checkpointKeyFile, seed); err != nil {
			if !errors.Is(err, os.ErrExist) {
				return nil, err
			}
			return loadSigningKey(dir) // another process won the race
		}
	} else if err != nil {
		return nil, err
	}
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("%s holds %d bytes, want an Ed25519 seed of %d", path, len(seed), ed25519.SeedSize)
	}
	key := ed25519.NewKeyFromSeed(seed)
	pub := hex.EncodeToString(key.Public().(ed25519.PublicKey)) + "\n"
	if err := os.WriteFile(filepath.Join(dir, checkpointPubFile), []byte(pub), 0o644); err != nil {
		return nil, err
	}
	return key, nil
}

// writeAtomic creates dir/name with b (mode 0600), failing with
// os.ErrExist if it is already there: written to a temporary file, synced,
// then linked into place and the directory synced.
func writeAtomic(dir, name string, b []byte) error {
	tmp, err := os.CreateTemp(dir, name+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Link(tmp.Name(), filepath.Join(dir, name)); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
