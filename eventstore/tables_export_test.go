package eventstore

// SetTableHook installs f to run inside every later TableWrite's
// transaction, after its writes; an error from f fails the write. nil
// removes it.
func SetTableHook(s *BoltStore, f func() error) {
	if f == nil {
		s.tableHook.Store(nil)
		return
	}
	s.tableHook.Store(&f)
}
