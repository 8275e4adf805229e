package frames

import "github.com/stateindex/stateindex/compaction"

// Strategy kinds a compaction request may name.
const (
	StrategyPriorityBased   = "priority_based"
	StrategySummarizeOldest = "summarize_oldest"
	StrategyTruncateAt      = "truncate_at"
	StrategyCustom          = "custom"
)

// StrategySpec names a compaction strategy as a request does.
type StrategySpec struct {
	Kind         string // one of the Strategy kinds; "" is priority_based
	KeepRecent   int    // summarize_oldest
	MessageCount int    // truncate_at
	Custom       string // custom: a name in the registry passed to PlanCompaction
}

// CompactionQuery asks for a frame's live context to be compacted toward
// Target tokens.
type CompactionQuery struct {
	FrameID  string // "" is the top of the stack
	Target   int64
	Strategy StrategySpec
	// Custom holds the strategies StrategySpec.Custom may name.
	Custom map[string]compaction.Custom
	// SummaryID is the id a summary handle gets, minted by the shell.
	SummaryID  string
	Counter    compaction.Counter
	Summarizer compaction.Summarizer
}

// LookupStrategy returns the strategy spec names; custom ones come from custom.
func LookupStrategy(spec StrategySpec, custom map[string]compaction.Custom) (compaction.Strategy, error) {
	switch spec.Kind {
	case StrategyPriorityBased, "":
		return compaction.PriorityBased{}, nil
	case StrategySummarizeOldest:
		return compaction.SummarizeOldest{KeepRecent: spec.KeepRecent}, nil
	case StrategyTruncateAt:
		return compaction.TruncateAt{MessageCount: spec.MessageCount}, nil
	case StrategyCustom:
		if fn, ok := custom[spec.Custom]; ok && fn != nil {
			return fn, nil
		}
		return nil, invalid("no custom strategy %q is registered", spec.Custom)
	}
	return nil, invalid("unknown strategy %q", spec.Kind)
}

// PlanCompaction plans a compaction of a live frame's handles with package
// compaction and returns the command that carries it out (hdr is its
// header). A plan that removes nothing is still a command: its event
// records the request, so that a resend answers the original reply.
// PlanCompaction never changes s.
func PlanCompaction(cfg Config, s *State, hdr Header, q CompactionQuery) (*CompactContext, error) {
	f, err := lookupLive(cfg, s, q.FrameID)
	if err != nil {
		return nil, err
	}
	if q.Target < 0 {
		return nil, invalid("negative target")
	}
	strat, err := LookupStrategy(q.Strategy, q.Custom)
	if err != nil {
		return nil, err
	}
	res, err := compaction.Compact(handleItems(nil, f.Handles, hints{}), q.Target, strat, compaction.Options{
		SummaryID: q.SummaryID, Counter: q.Counter, Summarizer: q.Summarizer})
	if err != nil {
		return nil, err
	}
	cmd := &CompactContext{Header: hdr, FrameID: f.ID, Strategy: strat.Name(), Removed: res.Removed,
		OriginalTokens: res.OriginalTokens, FinalTokens: res.FinalTokens, Level: res.Level}
	if sum := res.Summary; sum != nil {
		prio := sum.Priority
		if !prio.Valid() {
			prio = compaction.Low
		}
		cmd.Summary = &ContextHandle{ID: sum.ID, Kind: SummaryKind, Priority: prio, Content: sum.Content, Tokens: sum.Tokens,
			LightTokens: compaction.LightTokens(sum.Content, q.Counter), Covers: sum.Covers}
	}
	return cmd, nil
}
