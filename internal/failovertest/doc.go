// Package failovertest holds the multi-process failover test of a
// shared-store StateIndex cluster (DESIGN §13): `stateindex serve --store
// postgres://… --cluster` members on one PostgreSQL schema of the test's
// own, a driver (./driver) storming many scopes, a member SIGKILLed and
// one SIGSTOPped mid-run, a rolling restart that replaces a member by one
// on a new address. Audit triggers installed in the schema record, in the
// same transaction as every write, which member wrote it under which owner
// epoch, so the test proves that no scope was ever written by two owners
// at once. It needs a Go toolchain (it builds both programs) and a
// PostgreSQL server, and runs only when STATEINDEX_CLUSTER_TEST=1 and
// STATEINDEX_PG_URL are set (make cluster-test; CI sets both).
package failovertest
