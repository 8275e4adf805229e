package actors

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
