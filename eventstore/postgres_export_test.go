package eventstore

// SetPostgresHook installs fn to be called at named stages of each group
// commit that writes ("before-commit": round trip 2 is about to be sent;
// "after-commit": it returned; "resolve": the outcome of a lost commit is
// about to be read back). An error from fn acts as a connection lost at
// that stage. nil removes it.
func SetPostgresHook(s *PostgresStore, fn func(stage string) error) { s.setHook(fn) }

// PostgresQueueLen is the number of appends waiting for the committer.
func PostgresQueueLen(s *PostgresStore) int { return len(s.queue) }

// PostgresSchemaV1 is the frozen first schema's DDL.
const PostgresSchemaV1 = pgSchemaV1
