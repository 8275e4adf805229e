package upgrade

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stateindex/stateindex/eventstore"
)

// The data directory's files, named as stateindex serve names them
// (cmd/stateindex: datadir.go, signkey.go, verify.go).
const (
	dbFile            = "stateindex.db"
	serverKeyFile     = "server.key"
	checkpointKeyFile = "checkpoint.key"
	checkpointPubFile = "checkpoint.pub"
)

// clock is a fake clock that moves a fixed step at every reading, so that
// a run's timestamps depend only on the order of its requests.
type clock struct {
	ns   atomic.Int64
	step int64
}

func newClock(start int64, step time.Duration) *clock {
	c := &clock{step: int64(step)}
	c.ns.Store(start - c.step)
	return c
}

func (c *clock) Now() time.Time { return time.Unix(0, c.ns.Add(c.step)).UTC() }

// advance moves the clock on by d (a jump, besides its steps).
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// last is the latest reading.
func (c *clock) last() int64 { return c.ns.Load() }

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func quietSystem() *actor.ActorSystem {
	return actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLogger() }))
}

// keys are a data directory's suspension-token key and checkpoint signing
// key.
type keys struct {
	token   []byte
	signing ed25519.PrivateKey
	public  ed25519.PublicKey
}

// readKeys reads the keys of a data directory as stateindex serve and
// verify do, and checks that checkpoint.pub is the signing key's half.
func readKeys(dir string) (keys, error) {
	var k keys
	var err error
	if k.token, err = os.ReadFile(filepath.Join(dir, serverKeyFile)); err != nil {
		return k, err
	}
	seed, err := os.ReadFile(filepath.Join(dir, checkpointKeyFile))
	if err != nil {
		return k, err
	}
	if len(seed) != ed25519.SeedSize {
		return k, fmt.Errorf("%s: %d bytes, want %d", checkpointKeyFile, len(seed), ed25519.SeedSize)
	}
	k.signing = ed25519.NewKeyFromSeed(seed)
	pub, err := os.ReadFile(filepath.Join(dir, checkpointPubFile))
	if err != nil {
		return k, err
	}
	if k.public, err = hex.DecodeString(string(bytes.TrimSpace(pub))); err != nil {
		return k, fmt.Errorf("%s: %w", checkpointPubFile, err)
	}
	if !k.public.Equal(k.signing.Public()) {
		return k, fmt.Errorf("%s is not the public half of %s", checkpointPubFile, checkpointKeyFile)
	}
	return k, nil
}

// copyDir copies the regular files of src into dst (created), and its
// directories (a data file's journal) likewise.
func copyDir(dst, src string) error {
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		switch {
		case e.IsDir():
			if err := copyDir(filepath.Join(dst, e.Name()), filepath.Join(src, e.Name())); err != nil {
				return err
			}
		case e.Type().IsRegular():
			if err := copyFile(filepath.Join(dst, e.Name()), filepath.Join(src, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// copyFile copies the file src to dst.
func copyFile(dst, src string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o600)
}

// outboxTable is the store's table of the scopes that may have a pending
// settlement (actors/outbox.go).
const outboxTable = "outbox"

// outboxScopes lists the scopes the store's outbox table names.
func outboxScopes(ctx context.Context, store eventstore.Tables) ([]string, error) {
	var out []string
	err := store.TableScan(ctx, outboxTable, nil, nil, false, func(k, _ []byte) (bool, error) {
		out = append(out, string(k))
		return true, nil
	})
	return out, err
}
