//go:build race

package actors_test

// raceEnabled: Proto.Actor's cluster races with itself (its gossip writes
// the remote block list that the automanaged provider reads unlocked) when
// two members share one process; in-process cluster tests skip under the
// race detector (the multi-process test, internal/clustertest, covers it).
const raceEnabled = true
