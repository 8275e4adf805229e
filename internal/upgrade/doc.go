// Package upgrade keeps the promise that a release opens what the previous
// release wrote: every format change keeps the previous release's fixture
// working.
//
// testdata/v1 holds a data directory written by one release (the bbolt
// file with snapshots and signed checkpoints, its server.key and
// checkpoint.key) and a manifest of every request that wrote it: the
// request's fields, its request id and the reply it got, plus what each
// scope looked like at the end. The test opens a copy with the current
// code and checks that every scope serves, that every recorded request id
// still answers with its original reply and appends nothing, that fresh
// requests work, that a suspension token never used still resumes its
// frame once, that the spend ledger works on an old scope's frame (a
// reservation for a child here and one for another scope, settled through
// the outbox), and that stateindex verify passes on the file.
//
// testdata/v2 is a data directory as a crash leaves it with the journal:
// bbolt plus a journal segment holding acknowledged records bbolt lacks;
// the first open must replay them (TestJournalFixtureReplays).
//
// testdata/v3 is the release of issue 11 (the store's per-stream index and
// stream bases, snapshot format 4, finished frames' records on
// frame.popped, content stored once), written the same way: the fixture
// the next release must open.
//
// testdata/v4 is the release of issue 12 (handle roles, context windows,
// calibration samples, continuation chains with their links' fields and
// tombstones, a scope's token counter): besides v3's scenario, chains
// continued explicitly and automatically (the fixture's server runs with
// ContinueAt, recorded in the manifest), resumed as a sibling and as a new
// root, a retention pass that leaves tombstones (after a clock jump past
// the request horizon: the ids stamped before it are refused as expired),
// and a scope recounted across a restart. Its manifest also records reads
// (GetChain, SearchChain, GetFrame of links) with their answers; the test
// checks them, the tombstones, and continues the live chains with the
// current release.
//
// testdata/v5 is the release of issue 13 (subscriptions, hooks, the
// registry, AwaitFrame: the store's tables and removal record, Result.Position
// on write replies), written with v4's scenario: the fixture the release of
// the spend ledger (issue 14) must open.
//
// testdata/v6 is the release of issue 14, the spend ledger (reservations,
// reservation tokens, bindings, the store's outbox table, signed
// settlements), written before scope key-value state changes formats
// again: besides v5's scenario, a frame with a spend limit whose
// reservations are settled by a child's pop, delivered by the outbox from
// a root in another scope (which reserved in turn for a root in a third),
// released, expired and returned, left open (its renewed token in the
// manifest, Ledger.Open), and one left pending: its root finished on a
// server whose outbox was off, so its scope is in the outbox table. The
// test checks that the current release's outbox finds and delivers it by
// itself, charging it once (the frame's row as Ledger says, GetLedger as
// the writing release answered once it delivered it), and that the open
// token still binds a root and settles. The outbox's SettleSpend and
// AckSettlement are recorded as steps with their request ids.
//
// A fixture is never regenerated once its release is out: a release that
// changes a format adds a directory (testdata/v2, ...) and the test runs
// every one. The manifest's records (Step, Reply) are this package's own,
// frozen with the fixture; requests.go is the one place that turns them
// into today's messages and today's replies back into them — the file to
// update when the request or reply structs change shape.
package upgrade
