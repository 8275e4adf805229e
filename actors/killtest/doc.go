// Package killtest holds only a test: a child process writes through the
// StateIndex, is SIGKILLed after its writes were acknowledged, and a new
// process on the same file must answer every acknowledged request as
// before (same reply on a resend, nothing lost, tokens still usable once).
// It has no code of its own and must never grow any: helpers belong in the
// packages they test.
package killtest
