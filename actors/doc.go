// Package actors is the StateIndex server and its Go client: the thin shell
// around the pure core (package frames) that takes requests of package
// messages, decides them with frames.Decide, makes their events durable in
// an eventstore.Store, applies them and replies — on Proto.Actor, in one
// process, across remoting or on a cluster.
//
// # Using it
//
// Start the shards over an open store and talk to them through a Client
// (Example runs these lines; check each err):
//
//	store, err := eventstore.Open("data/stateindex.db", nil) // data/ must exist
//	cfg := actors.DefaultConfig()
//	cfg.TokenKey = key // signs suspension tokens: a secret of at least 32 bytes
//	srv, err := actors.Start(actor.NewActorSystem(), store, cfg)
//	f, err := srv.Client().PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: "agent-1"},
//		Goal: "write the report", Budget: budget.TokenBudget{Total: 8000}})
//
// Stop the Server before closing the store: the store stays the caller's.
// Every Client method takes a context whose deadline bounds the request
// and returns a typed reply or an error that matches this package's
// sentinels (ErrFrameNotFound, ErrOverloaded, ...) with errors.Is, in
// process and across the wire alike.
//
// # The files and their roles
//
//	server.go      Start, Stop, Server: spawns the shards and the router, hands out Clients
//	shard.go       the shard actor: one goroutine per shard, the gate that bounds its
//	               pending work, per-scope ordering, and the outcomes of a request
//	               (a reply now, a write to append, a job to run off the shard)
//	handler.go     what a shard does with a request, the same for every operation:
//	               scope check, cold load (off the shard), request ids, IfVersion,
//	               decide, begin the write, apply after the commit, snapshots, the LRU
//	dispatch.go    the dispatcher table: per operation one entry that turns a request
//	               into a frames.Command (or answers a read) and events into a reply
//	client.go      Client: the typed Go API, request ids filled in, deadlines
//	statehandle.go StateHandle: a scope's (or frame's) key-value state, loaded on first
//	               read, its changes sent by Flush as one ChangeState; statetyped.go
//	               its JSON and msgpack helpers
//	remote.go      remoting: the gateway remote callers address, the client transport
//	               (the wire codec is package actors/wire)
//	cluster.go     clustering: placement of scopes on their home member (node-local
//	               stores) or on the live members (a shared store), members and client
//	               nodes; health.go the membership provider (health polls); placement.go
//	               a server's share of the scopes on a shared store
//	fence.go       fencing on a store servers share (Config.Owner): the epoch a loaded
//	               scope takes, the fence its appends carry, what a deposed owner does
//	tls.go         keeping callers out: TLS, mutual TLS and a shared secret
//	               (Security, WithSecurity, ClusterConfig.Security)
//	metrics.go     telemetry: the observer that follows a request from its admission to
//	               its reply, its metrics (the list is there) and the debug line per
//	               request; tracing.go its spans and the trace context on the wire
//	config.go      Config and its defaults; errors.go the sentinels and the mapping of
//	               domain errors to wire codes; token.go signed suspension tokens;
//	               checkpoint.go signed checkpoints
//
// The shard, the Client, remoting and clustering are files of one package
// rather than packages of their own because they share what must stay
// unexported: the shard PIDs and their gates (an in-process Client admits
// each request into its shard's bounded mailbox itself, as a gated envelope
// the shard counts out; the remote gateway and the cluster's grains hand
// requests straight to the shard PIDs), the typed failure replies, and the
// Client's transport hooks (route, admit, send) that server.go, remote.go
// and cluster.go fill in. Split into packages, each of these would have to
// be exported and so become an API to keep. The wire codec, which shares
// nothing of the kind, is a package of its own (actors/wire).
//
// # Caveats
//
//   - Request ids. Every mutating request (ResumeActor included) carries a
//     request id, which the Client fills in when empty and writes into the
//     request: resend the same request value after ErrTimeout and it is
//     applied at most once. A scope remembers ids for Config.RequestHorizon
//     (7 days by default) plus the clock-skew allowance Config.ClockSkew;
//     a resend within the horizon gets the original reply, also after a
//     restart; an id older than that is refused with ErrRequestExpired and
//     never applied again. The same id with a different request is
//     ErrRequestIDReused.
//   - Overload. Each shard holds at most Config.MaxPending requests (its
//     mailbox plus what it holds behind scopes busy with a write or a load);
//     past it a request is answered ErrOverloaded at once: not applied,
//     safe to retry later.
//   - Deadlines. The context's deadline (or Config.RequestTimeout without
//     one) bounds the wait. ErrTimeout on a mutation means the outcome is
//     unknown: resend it with the same request id.
//   - Shared stores. With Config.Owner set, a server that another took a
//     scope from answers that scope's next write ErrScopeMoved (nothing
//     applied); the Client resends it with the same request id a few
//     times. Until that write, the deposed server's reads of the scope
//     may be stale (fence.go).
//   - Stop waits for the writes in flight and the background snapshots;
//     close the store only after it.
//   - Remoting admits anyone unless given a Security (WithSecurity,
//     ClusterConfig.Security); then every node, a remote Client too, needs
//     a certificate: replies come back on a connection the server dials.
//     An admitted caller may use every scope.
//
// What it must never do: decide a rule itself (rules live in frames; the
// shell translates), apply or answer anything before its events are
// durable, block a shard's goroutine on the disk (appends, cold loads and
// the reads that rebuild a repeated request's reply run off it), let a
// panic reach a caller, or queue without bound.
package actors
