//go:build race

package main

// raceEnabled: the race detector slows verify several times; the sweeps
// sample fewer flips under it (make test) than without (go test).
const raceEnabled = true
