// Package frames is the pure domain of StateIndex: frames, context handles,
// tool calls, suspensions, a scope's State, the events that change it, and
// the two functions everything else rests on:
//
//   - Decide(cfg, state, command) validates a command against the state and
//     returns the events that carry it out. It never changes the state.
//   - Apply(state, event) folds one event into the state.
//
// Replaying the same events always yields the same state: recovery,
// snapshots and verification rely on it. The package therefore never reads a
// clock, draws a random number or does I/O — time, ids and suspension-token
// ids arrive inside commands, minted by the shell — and it imports no
// storage, actor or encoding library (struct tags name the msgpack fields,
// but encoding happens in package eventstore).
//
// Caveats:
//   - A State is owned by one goroutine (the actor holding the scope).
//   - Apply checks each event against the state and refuses one that could
//     not have been decided from it (ErrInconsistentEvent), leaving the state
//     unchanged; on replay that means the log is corrupt or foreign.
//   - Inputs and other free-form values are opaque bytes, so that replay is
//     byte-identical whatever encoding the caller used.
package frames
