package compaction

// LeftOutReason says why Fit, having settled at level, left out an item of
// priority p: summarized (one of FitResult.Summarized) or dropped (one of
// FitResult.Dropped). It names the rule of that level that did it (see
// Fit), so that what a pack leaves out can be explained where it is shown
// (the inspector's pack preview) by the rules themselves.
func LeftOutReason(level Level, p Priority, summarized bool) string {
	switch {
	case summarized:
		return "summarized: the moderate level keeps critical, requested and the newest content, and replaces older content with one summary"
	case level == LevelCritical:
		return "dropped: only critical content is kept at the critical level"
	case level == LevelAggressive && (p == Low || p == Background):
		return "dropped: low and background content is dropped at the aggressive level"
	case level == LevelAggressive:
		return "dropped: did not fit — the aggressive level keeps critical and requested content, then fills by priority, newest first"
	}
	return "dropped: did not fit the budget at the " + level.String() + " level"
}
