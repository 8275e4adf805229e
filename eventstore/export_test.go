package eventstore

// SetCommitHook installs f to run inside every later commit's transaction,
// after its writes; an error from f fails the commit. nil removes it.
func SetCommitHook(s *BoltStore, f func() error) {
	if f == nil {
		s.commitHook.Store(nil)
		return
	}
	s.commitHook.Store(&f)
}

// QueueLen is the number of requests waiting for the committer.
func QueueLen(s *BoltStore) int { return len(s.queue) }

// Bucket names, for tests that damage a file on purpose.
var (
	BucketMeta      = bucketMeta
	BucketStreams   = bucketStreams
	BucketHeads     = bucketHeads
	BucketSeq       = bucketSeq
	BucketSnapshots = bucketSnapshots
	KeyFormat       = keyFormat
)

// Record envelope offsets.
const (
	RecOffVersionField = 3 // the envelope version's value byte
	RecOffPrev         = recOffPrev
)
