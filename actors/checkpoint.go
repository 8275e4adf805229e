package actors

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
)

// Signed checkpoints (persistence-continuation-chains.md): with
// Config.SigningKey set, a scope's chain hash is signed with Ed25519 at its
// checkpoint boundaries — when a snapshot of it has been saved, and when a
// write that finished a run (checkpoint reason RunFinished) has been
// committed. The signature goes to the store's checkpoints
// (eventstore.Checkpointer) in the background: like a snapshot, no reply
// waits for it, so a crash between a commit and its signature leaves that
// boundary unsigned (stateindex verify says so); it never leaves a
// signature over anything but the stored chain.

// warnedNoCheckpoints keeps the "store keeps no checkpoints" warning to one.
var warnedNoCheckpoints atomic.Bool

// checkpoint signs scope's chain hash at version. It blocks on a commit:
// run it off the shard's goroutine.
func (h *handler) checkpoint(scope string, version int64, reason eventstore.CheckpointReason) {
	if len(h.cfg.SigningKey) == 0 {
		return
	}
	cp, ok := h.store.(eventstore.Checkpointer)
	var err error
	if ok {
		_, err = cp.SignCheckpoint(context.Background(), scope, version, reason, h.cfg.SigningKey)
	}
	switch {
	case !ok || errors.Is(err, eventstore.ErrNoCheckpoints):
		if !warnedNoCheckpoints.Swap(true) {
			h.log.Warn("stateindex: a signing key is configured but the store keeps no checkpoints; nothing is signed")
		}
	case err != nil:
		h.log.Warn("stateindex: checkpoint signature failed; the chain up to it is protected by its hashes only",
			"scope", scope, "version", version, "reason", reason.String(), "error", err)
	}
}

// checkpointRunFinished signs, in the background, the chain hash a write
// (of a batch) ended at if one of its events finished a run.
func (h *handler) checkpointRunFinished(scope string, evs []frames.Event, res eventstore.AppendResult) {
	if len(h.cfg.SigningKey) == 0 {
		return
	}
	for _, ev := range evs {
		if ev.EventMeta().Reason == frames.ReasonRunFinished {
			version := res.LastVersion
			h.snapshots.Add(1) // Stop waits for it like for a snapshot
			go func() {
				defer h.snapshots.Done()
				h.checkpoint(scope, version, eventstore.CheckpointRunFinished)
			}()
			return
		}
	}
}
