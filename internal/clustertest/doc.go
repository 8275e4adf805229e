// Package clustertest holds the multi-process test of the StateIndex on a
// Proto.Actor cluster: three members on 127.0.0.1 — two `stateindex serve`
// processes and the driver (./driver), a member whose Client drives 100
// scopes homed on the other two — one of which is SIGKILLed mid-run and
// restarted. It needs a Go toolchain (it builds both programs) and takes
// about half a minute, so it runs only when STATEINDEX_CLUSTER_TEST=1
// (make cluster-test).
package clustertest
