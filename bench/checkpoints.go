package bench

import (
	"context"
	"fmt"

	"github.com/stateindex/stateindex/eventstore"
)

// CheckpointOptions describe the peers' workload: Total durable checkpoints
// of about Size bytes, spread evenly over Threads threads (scopes), each
// thread's checkpoints in order and each waiting until it is durable.
type CheckpointOptions struct {
	Total   int
	Threads int
	Size    int
	// Dir is where the data file goes (a new directory under it); empty
	// means the system's temporary directory. The directory is removed
	// unless Keep.
	Dir  string
	Keep bool
	// Shards overrides the StateIndex's shard count when > 0.
	Shards int
	// JournalOff opens the store with its write-ahead journal off (every
	// group commit a bbolt transaction, two fsyncs).
	JournalOff bool
}

// Checkpoints runs the peers' workload on StateIndex through its Client:
// each thread is a scope with one root frame, each checkpoint an
// AddContextHandle of Size bytes to it, fsynced before its reply.
func Checkpoints(ctx context.Context, co CheckpointOptions) (Figure, error) {
	if co.Total < 1 || co.Threads < 1 || co.Size < 1 {
		return Figure{}, fmt.Errorf("bench: checkpoints need Total, Threads and Size >= 1 (got %+v)", co)
	}
	o := &Options{Dir: co.Dir, Keep: co.Keep}
	dir, err := scratch(co.Dir, fmt.Sprintf("checkpoints-%d", co.Threads))
	if err != nil {
		return Figure{}, err
	}
	defer o.cleanup(dir)
	var opts *eventstore.Options
	if co.JournalOff {
		opts = journalOff
	}
	ph, err := runAgents(ctx, dbPath(dir, "stateindex"), opts, co.Shards, co.Threads, co.Total, co.Size, (*agent).checkpoint)
	return ph.figure(), err
}
