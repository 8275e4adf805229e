package bench

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Goal is one of the issues' goals (4, 10, 11) evaluated against a run. Goals report;
// nothing fails on them.
type Goal struct {
	Name     string  `json:"name"`
	Target   string  `json:"target"`
	Measured string  `json:"measured"`
	Value    float64 `json:"value"`
	Limit    float64 `json:"limit"`
	Met      bool    `json:"met"`
	// Note says by how much a missed goal was missed.
	Note string `json:"note,omitempty"`
}

// AtMost is a goal met when value <= limit; unit formats both.
func AtMost(name string, value, limit float64, unit string) Goal {
	g := Goal{Name: name, Value: value, Limit: limit, Met: value <= limit,
		Target: "≤ " + fmt.Sprintf(unit, limit), Measured: fmt.Sprintf(unit, value)}
	if !g.Met {
		g.Note = fmt.Sprintf("missed: %.2f× the limit", Ratio(value, limit))
	}
	return g
}

// AtLeast is a goal met when value >= limit; unit formats both.
func AtLeast(name string, value, limit float64, unit string) Goal {
	g := Goal{Name: name, Value: value, Limit: limit, Met: value >= limit,
		Target: "≥ " + fmt.Sprintf(unit, limit), Measured: fmt.Sprintf(unit, value)}
	if !g.Met {
		g.Note = fmt.Sprintf("missed: reached %.0f%% of the target", 100*Ratio(value, limit))
	}
	return g
}

// goals evaluates the goals that need only this report (the SQLite goal
// needs the peers' run: see bench/peers).
func (r *Report) goals() []Goal {
	var out []Goal
	for _, d := range r.Durable {
		switch d.Scopes {
		case 64:
			out = append(out,
				AtLeast("64 scopes: actor ÷ raw journal group commit (ops/s)", d.ActorOverGroupCommit, 0.85, "%.2f"),
				AtLeast("64 scopes: actor, journal ÷ journal=off (ops/s)", d.JournalOverOff, 1.5, "%.2f"),
				AtLeast("64 scopes: actor, journal (stretch, ops/s)", d.Actor.OpsPerSec, 25000, "%.0f"))
		case 1:
			out = append(out, AtMost("1 scope: actor p50 ÷ raw bbolt one-transaction p50", d.ActorP50OverOneTxnP50, 1.3, "%.2f"))
			if d.Fsync != nil {
				out = append(out, AtMost("1 scope: actor p50 − overwrite-fdatasync p50 (same rounds)", d.Actor.P50us-d.Fsync.Overwrite.P50us, 60, "%.0f µs"))
			}
		}
		if d.Journal.MaxBytes > 0 && d.Scopes == r.Durable[len(r.Durable)-1].Scopes {
			out = append(out, AtMost(fmt.Sprintf("%d scopes: journal on disk after the run ≤ its bound", d.Scopes), mb(d.Journal.Bytes), mb(d.Journal.MaxBytes), "%.0f MiB"))
		}
	}
	for _, a := range r.Assemble {
		if a.Handles == 1000 {
			out = append(out, AtMost("AssembleContextPack, 1,000 handles, budget 8,000: p50", a.Pack.P50us, 100, "%.0f µs"))
		}
	}
	for _, h := range []History{Bounded, Growing} {
		var first, last *ResumeResult
		for i := range r.Resume {
			if rr := &r.Resume[i]; rr.History == h {
				if first == nil {
					first = rr
				}
				last = rr
			}
		}
		if first == nil || first == last {
			continue
		}
		if last.Events >= resumeGoalEvents {
			out = append(out,
				AtMost(fmt.Sprintf("cold ResumeActor, %d-event scope, %s history: p50", last.Events, h), last.Snapshot.Call.P50us/1000, 25, "%.1f ms"),
				AtMost(fmt.Sprintf("cold ResumeActor, %s history: p50 at %d ÷ p50 at %d events", h, last.Events, first.Events),
					Ratio(last.Snapshot.Call.P50us, first.Snapshot.Call.P50us), 1.5, "%.2f"))
		}
		if h == Growing { // issue 11: the projection holds what is live
			out = append(out, AtMost(fmt.Sprintf("%s history: snapshot at %d ÷ snapshot at %d events", h, last.Events, first.Events),
				Ratio(float64(last.SnapshotBytes), float64(first.SnapshotBytes)), 2, "%.2f"))
		}
	}
	for _, s := range r.Storage {
		if s.PageSize == 0 { // issue 11: everything counted, the journal too
			out = append(out, AtMost("storage: data directory (file + journal) ÷ encoded event payload (default page size)", s.Ratio, 1.4, "%.2f"))
			if s.Events >= DefaultStorageEvents {
				out = append(out, AtMost("storage: the journal's share of that directory (the run is large enough)", 100*s.JournalShare, 5, "%.1f%%"))
			}
		}
	}
	if l := r.LongLived; l != nil {
		out = append(out,
			AtMost(fmt.Sprintf("long-lived agents, retention keep_last_n %d: data directory at the end ÷ at a quarter (median of %d pairs)", l.KeepLastN, len(l.Runs)/2), l.Growth, 1.2, "%.2f"),
			AtLeast("long-lived agents: throughput with retention ÷ without (median of the pairs)", l.ThroughputRatio, 0.9, "%.2f"))
	}
	for _, x := range r.Ledger {
		diff := x.ActualMicros - x.ChildrenMicros
		out = append(out,
			AtMost(fmt.Sprintf("ledger, %d spawners: the parent's peak actual + outstanding (µ$, %d events checked)", x.Spawners, x.EventsChecked), float64(x.PeakMicros), float64(x.MaxMicros), "%.0f"),
			AtMost(fmt.Sprintf("ledger, %d spawners: |parent's actual − what the children spent| (µ$)", x.Spawners), float64(max(diff, -diff)), 0, "%.0f"))
	}
	for _, x := range r.Remote {
		out = append(out, AtLeast(fmt.Sprintf("remote GetStack ÷ trivial remote echo, %d callers (ops/s)", x.Callers), x.GetStackOverEcho, 0.5, "%.2f"))
	}
	for _, x := range r.Partial { // issue 15: the streams keep their pace
		out = append(out, AtLeast(fmt.Sprintf("partial output, %d streams over %d scopes: chunks/s achieved ÷ offered (alone)", x.Streams, x.Scopes),
			Ratio(x.Alone.OpsPerSec, x.OfferedRate), 0.95, "%.2f"))
	}
	return out
}

// resumeGoalEvents is the scope size issue 10's cold-resume goals are
// stated for.
const resumeGoalEvents = 100000

// Unjudged is a goal a run cannot judge, and why: its scenario did not
// run, or ran too small (--scale, --storage-events) for the goal's
// figure to mean what the goal says.
type Unjudged struct {
	Goal string `json:"goal"`
	Why  string `json:"why"`
}

// unjudged lists the goals this run cannot judge (every goal family that
// goals() leaves out, with the reason).
func (r *Report) unjudged(o *Options) []Unjudged {
	var out []Unjudged
	add := func(goal, why string) { out = append(out, Unjudged{Goal: goal, Why: why}) }
	notRun := func(scenario string) bool { return !o.runs(scenario) }
	only := "not run (--only " + strings.Join(o.Only, ",") + ")"
	if notRun(ScenarioDurable) {
		add("durable: actor ÷ group commit, journal ÷ journal=off, 25,000 ops/s at 64 scopes; 1-scope p50", only)
	}
	switch {
	case notRun(ScenarioAssemble):
		add("AssembleContextPack, 1,000 handles: p50 ≤ 100 µs", only)
	case !slices.ContainsFunc(r.Assemble, func(a AssembleResult) bool { return a.Handles == 1000 }):
		add("AssembleContextPack, 1,000 handles: p50 ≤ 100 µs", fmt.Sprintf("this run assembled from %s handles (--scale %g): the goal is stated for 1,000",
			joinInts(r.Assemble, func(a AssembleResult) int { return a.Handles }), r.Scale))
	}
	largest := 0
	for _, x := range r.Resume {
		largest = max(largest, int(x.Events))
	}
	switch {
	case notRun(ScenarioResume):
		add("cold ResumeActor at 100,000 events: p50 ≤ 25 ms, growth ≤ 1.5×; snapshot growth ≤ 2×", only)
	case largest < resumeGoalEvents:
		add("cold ResumeActor at 100,000 events: p50 ≤ 25 ms, p50 growth ≤ 1.5×",
			fmt.Sprintf("this run's largest scope has %d events (--scale %g): the goals are stated for 100,000", largest, r.Scale))
	}
	switch {
	case notRun(ScenarioStorage):
		add("storage: directory ÷ payload ≤ 1.4; the journal's share ≤ 5%", only)
	default:
		for _, s := range r.Storage {
			if s.PageSize == 0 && s.Events < DefaultStorageEvents {
				add("storage: the journal's share of the data directory ≤ 5%",
					fmt.Sprintf("this run wrote %d events (--scale %g, --storage-events): the journal's fixed bound dominates a small directory; the goal needs %d",
						s.Events, r.Scale, DefaultStorageEvents))
			}
		}
	}
	for _, sc := range []struct{ scenario, goal string }{
		{ScenarioRemote, "remote GetStack ÷ trivial remote echo ≥ 0.5"},
		{ScenarioLongLived, "long-lived agents: growth ≤ 1.2×, throughput with retention ≥ 0.9×"},
		{ScenarioLedger, "ledger: the parent never past its max; actual = what the children spent"},
		{ScenarioPartial, "partial output: chunks/s achieved ÷ offered ≥ 0.95"},
	} {
		if notRun(sc.scenario) {
			add(sc.goal, only)
		}
	}
	return out
}

func joinInts[T any](xs []T, f func(T) int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(f(x))
	}
	return strings.Join(parts, ", ")
}
