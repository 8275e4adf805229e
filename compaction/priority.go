package compaction

import "fmt"

// Priority tags a piece of context with how much it matters when the pack
// must shrink. The zero value is invalid so that a forgotten field is caught.
type Priority uint8

// Priorities, from "always include" to "summarize or omit" (addendum §2).
const (
	Critical   Priority = iota + 1 // system prompts, active tool calls: always included
	High                           // included unless severely constrained
	Medium                         // included if space permits
	Low                            // included only if space is abundant
	Background                     // summarized or omitted
)

var priorityNames = [...]string{"", "critical", "high", "medium", "low", "background"}

// Score is the addendum's inclusion score: Critical 100 … Background 10.
func (p Priority) Score() int {
	switch p {
	case Critical:
		return 100
	case High:
		return 75
	case Medium:
		return 50
	case Low:
		return 25
	case Background:
		return 10
	}
	return 0
}

// Valid reports whether p is one of the five priorities.
func (p Priority) Valid() bool { return p >= Critical && p <= Background }

// String returns the snake_case name used on the wire and in logs.
func (p Priority) String() string {
	if p.Valid() {
		return priorityNames[p]
	}
	return fmt.Sprintf("priority(%d)", uint8(p))
}

// ParsePriority is the inverse of String.
func ParsePriority(s string) (Priority, error) {
	for i := Critical; i <= Background; i++ {
		if priorityNames[i] == s {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%w: %q", ErrInvalidPriority, s)
}

// Level is how hard a pack or a frame's context was squeezed to fit.
type Level uint8

// Levels, tried in order until the content fits (addendum §2, Compaction Flow).
const (
	LevelNone       Level = iota // full content
	LevelLight                   // whitespace trimmed, long strings abbreviated
	LevelModerate                // older content summarized
	LevelAggressive              // Low and Background dropped, the rest filled by priority
	LevelCritical                // only Critical content
)

var levelNames = [...]string{"none", "light", "moderate", "aggressive", "critical"}

// String returns the snake_case name.
func (l Level) String() string {
	if int(l) < len(levelNames) {
		return levelNames[l]
	}
	return fmt.Sprintf("level(%d)", uint8(l))
}

// Valid reports whether l is one of the five levels.
func (l Level) Valid() bool { return l <= LevelCritical }
