//go:build race

package clustertest

// raceEnabled: this test binary has the race detector.
const raceEnabled = true
