package eventstore

// SetCompactWritten sets a function Compact runs on its copy before
// checking it (nil removes it).
func SetCompactWritten(f func(tmp string) error) { compactWritten = f }
