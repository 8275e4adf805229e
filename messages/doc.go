// Package messages is the StateIndex actor protocol: one typed request and
// one typed reply per operation, as plain structs with explicit msgpack field
// names so that they cross process boundaries unchanged (package actors/wire
// wraps them for Proto.Actor remoting).
//
// Every reply embeds Result: either its result or an *Error with a stable
// Code, never nil. errors.Is matches an *Error against the sentinels here by
// code, also after the error crossed the wire. Every request embeds Header
// first (its scope; for a mutating request also its request id, version
// guard and checkpoint reason): a repeat of a mutating request within the
// server's horizon returns the original reply and appends nothing.
//
// The protocol table (operations.go) lists every operation once: its Op,
// its wire names, its request and reply types and whether it mutates.
// ReplyFor, the wire registry (actors/wire) and the server's dispatcher
// (actors/dispatch.go) all derive from it.
//
// Messages carry no behaviour and are treated as immutable once sent: local
// delivery shares the pointer.
package messages
