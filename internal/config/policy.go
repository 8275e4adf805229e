package config

import (
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// What retention does with a finished run it removes (the seed's
// on_completion).
const (
	Keep    = "keep"    // remove nothing
	Archive = "archive" // write the run to an archive file, then remove it
	Delete  = "delete"  // remove it
)

// RetentionPolicy is the retention that applies to one scope: keep the
// last KeepLastN finished runs, and remove (per OnCompletion) the others
// once finished more than DeleteOlderThan ago.
type RetentionPolicy struct {
	KeepLastN       int
	DeleteOlderThan time.Duration
	OnCompletion    string // Keep, Archive or Delete
	ArchiveDir      string // relative to the data directory unless absolute
}

// ArchivePath returns the archive directory, resolved against dataDir.
func (p RetentionPolicy) ArchivePath(dataDir string) string {
	if filepath.IsAbs(p.ArchiveDir) {
		return p.ArchiveDir
	}
	return filepath.Join(dataDir, p.ArchiveDir)
}

// RetentionOverride changes the keys it sets for scopes whose name starts
// with ScopePrefix; nil fields leave the key to a shorter prefix or the
// server's default.
type RetentionOverride struct {
	ScopePrefix     string
	KeepLastN       *int
	DeleteOlderThan *time.Duration
	OnCompletion    *string
	ArchiveDir      *string
}

// Retention is the server's retention: defaults plus per-prefix overrides,
// applied by a background pass every Interval.
type Retention struct {
	Default   RetentionPolicy
	Overrides []RetentionOverride
	Interval  time.Duration
	// HoldForSubscribers (retention.hold_for_subscribers) makes a cut wait
	// for the durable subscriptions of its scope that acknowledged within
	// it (actors.Config.SubscriptionHold); 0 waits for none.
	HoldForSubscribers time.Duration
}

// For returns the policy of scope: the server's default, changed key by
// key by the overrides whose prefix the scope starts with, the longest
// prefix last (so it wins each key it sets).
func (r Retention) For(scope string) RetentionPolicy {
	p := r.Default
	for _, o := range matching(r.Overrides, scope, func(o RetentionOverride) string { return o.ScopePrefix }) {
		if o.KeepLastN != nil {
			p.KeepLastN = *o.KeepLastN
		}
		if o.DeleteOlderThan != nil {
			p.DeleteOlderThan = *o.DeleteOlderThan
		}
		if o.OnCompletion != nil {
			p.OnCompletion = *o.OnCompletion
		}
		if o.ArchiveDir != nil {
			p.ArchiveDir = *o.ArchiveDir
		}
	}
	return p
}

// Enabled reports whether any scope's policy removes runs.
func (r Retention) Enabled() bool {
	if r.Default.OnCompletion != Keep {
		return true
	}
	for _, o := range r.Overrides {
		if o.OnCompletion != nil && *o.OnCompletion != Keep {
			return true
		}
	}
	return false
}

// ExpiryPolicy is the inactivity expiry of one scope: a scope with no
// request for InactiveAfter is destroyed; 0 never expires it.
type ExpiryPolicy struct {
	InactiveAfter time.Duration
}

// ExpiryOverride sets the expiry of scopes whose name starts with
// ScopePrefix; a nil InactiveAfter leaves it to a shorter prefix or the
// server's default.
type ExpiryOverride struct {
	ScopePrefix   string
	InactiveAfter *time.Duration
}

// Expiry is the server's inactivity expiry: a default plus per-prefix
// overrides.
type Expiry struct {
	Default   ExpiryPolicy
	Overrides []ExpiryOverride
}

// For returns the expiry of scope, resolved as Retention.For does.
func (e Expiry) For(scope string) ExpiryPolicy {
	p := e.Default
	for _, o := range matching(e.Overrides, scope, func(o ExpiryOverride) string { return o.ScopePrefix }) {
		if o.InactiveAfter != nil {
			p.InactiveAfter = *o.InactiveAfter
		}
	}
	return p
}

// Enabled reports whether any scope can expire.
func (e Expiry) Enabled() bool {
	if e.Default.InactiveAfter > 0 {
		return true
	}
	for _, o := range e.Overrides {
		if o.InactiveAfter != nil && *o.InactiveAfter > 0 {
			return true
		}
	}
	return false
}

// matching returns the overrides whose prefix scope starts with, shortest
// prefix first.
func matching[T any](all []T, scope string, prefix func(T) string) []T {
	var out []T
	for _, o := range all {
		if strings.HasPrefix(scope, prefix(o)) {
			out = append(out, o)
		}
	}
	slices.SortStableFunc(out, func(a, b T) int { return len(prefix(a)) - len(prefix(b)) })
	return out
}
