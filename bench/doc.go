// Package bench holds the fixed benchmark scenarios of StateIndex: durable
// PushFrame and AddContextHandle throughput with the event store's
// write-ahead journal on and off in alternating rounds, beside the raw
// store's ceilings and the disk's own overwrite-fdatasync floor,
// AssembleContextPack latency, cold ResumeActor (snapshot + tail against
// full replay), bytes on disk per event byte, and the durable-checkpoint
// workload that the peers module (bench/peers) runs against state.json and
// SQLite.
//
// `stateindex bench` is a thin shell over Run; the peers module imports
// Checkpoints so that both measure StateIndex with the same code. Nothing
// here imports SQLite: the main module must not depend on it.
//
// Every durable figure fsyncs (the store is opened without NoSync). Setup
// that only builds data for a read scenario (the handles of a pack, the
// history of a scope to resume) may use NoSync: the read does not depend on
// how the data was made durable.
//
// Caveats: the figures depend on the disk, which on this project's machine
// is noisy. Compare figures of one run (one Report), not across runs.
// Benchmarks report; no test fails on timing.
package bench
