package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// SetOutboxHook sets the outbox worker's test hook: fn is called at
// "settle" (before a delivery's SettleSpend) and at "ack" (after its reply,
// before the AckSettlement) with the work's scope; true stops the delivery
// there, as a crash would.
func SetOutboxHook(s *Server, fn func(stage, scope string) bool) {
	if fn == nil {
		s.outbox.hook.Store(nil)
		return
	}
	s.outbox.hook.Store(&fn)
}

// Pending is what the server's shards hold: requests waiting for their
// scope plus busy scopes, as each shard last saw it.
func Pending(s *Server) int64 {
	var n int64
	for _, g := range s.gates {
		n += g.pending.Load()
	}
	return n
}

// SetStateExpiryHook sets the state expirer's test hook: fn gets the
// report of every background pass (nil: none).
func SetStateExpiryHook(s *Server, fn func(StateExpiryReport)) {
	if fn == nil {
		s.expiry.hook.Store(nil)
		return
	}
	s.expiry.hook.Store(&fn)
}

// StateExpiryTable is the state expirer's table; ParseExpiryRow reads one
// of its keys.
const StateExpiryTable = stateExpiryTable

func ParseExpiryRow(k []byte) (at int64, scope string, ok bool) { return parseExpiryRow(k) }

// StateExpiryBatch is how many scopes one pass of the state expirer takes.
const StateExpiryBatch = stateExpiryBatch

// NewRoutedClient returns a Client that sends each request to the PID
// route returns for its scope at that moment: a test's placement, which
// may move a scope between servers of one actor system.
func NewRoutedClient(root *actor.RootContext, route func(scope string) *actor.PID, timeout time.Duration) *Client {
	return &Client{root: root, timeout: timeout, newID: NewRequestID, route: route, positions: newWritePositions()}
}

// MoveRetries is how many times a Client resends a request answered
// scope_moved.
const MoveRetries = moveRetries

// SetPlacement gives the server a share of the scopes, as a member of a
// shared-store cluster gets from its view of the live members.
func SetPlacement(s *Server, owns func(scope string) bool) { s.replacePlacement(owns, nil) }
