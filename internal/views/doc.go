// Package views builds what the operator tools show — a scope's frame
// tree with budgets, tool calls in doubt and chains (ScopeTree), the spend
// ledger across scopes (LedgerTree), a level of key-value state
// (StateListing), an event timeline by checkpoint reason (Timeline) — once,
// for both the terminal (cmd/stateindex: inspect, ledger, state) and the
// web inspector (internal/inspector), from a data file's folded state or
// from a running server through an actors.Client.
//
// It must never write: it reads through requests that record nothing
// (GetScope, ReadScope, GetStack, the registry, GetLedger, RangeState) or
// from a state already folded, and it decides no rule of the domain — the
// numbers it shows are the ones frames computed; it only arranges them.
package views
