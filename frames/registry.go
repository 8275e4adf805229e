package frames

import "github.com/stateindex/stateindex/budget"

// The registry (issue 13, DESIGN §11): what an index across scopes
// records about each frame, folded from the frames' events in log order.
// This file is the rule; the index that stores rows and the follower
// that reads the log are in package actors.
//
// Removal: rows of a scope leave the index when the history that made
// them is removed — retention (scope.retention_applied) removes the rows
// of the frames whose records all lie at or before its Through (pushed
// and ended there: the runs it removed; a frame still live then stays, as
// it stays in the scope's projection, and so does one that ended after
// Through), destroy (scope.destroyed) every row of the scope pushed
// before it. Nothing is kept "archived": the index never lists a frame
// whose records are gone, and a chain link that pointed at one keeps only
// the id (GetChain answers its tombstone).
//
// A reader that starts after retention removed a live frame's push (an
// old file, a reader far behind) never sees the push: a frame.popped
// carries the frame's record (Final), from which the row is made; a frame
// still live is taken from the scope's projection (RowOfFrame) when the
// reader meets the retention's record.

// RegistryRow is what the registry records about one frame.
type RegistryRow struct {
	Scope         string `msgpack:"sc"`
	FrameID       string `msgpack:"f"`
	ParentID      string `msgpack:"pa,omitempty"`
	Goal          string `msgpack:"g"`
	Status        Status `msgpack:"st"`
	Depth         int64  `msgpack:"d,omitempty"`
	ChainRoot     string `msgpack:"cr,omitempty"`
	ContinuedFrom string `msgpack:"cf,omitempty"`
	ContinuedTo   string `msgpack:"cto,omitempty"`
	CreatedAt     int64  `msgpack:"at"`
	FinishedAt    int64  `msgpack:"fi,omitempty"`
	// PushVersion is the scope version of the frame's frame.pushed,
	// EndVersion of its frame.popped (0 while it is live).
	PushVersion int64 `msgpack:"pv"`
	EndVersion  int64 `msgpack:"ev,omitempty"`
	// TokensUsed and Cost are what the frame used, recorded when it ends
	// (from its frame.popped; 0 while it is live).
	TokensUsed int64       `msgpack:"tu,omitempty"`
	Cost       budget.Cost `msgpack:"co,omitempty"`
	// SuspendReason is why a suspended frame is suspended ("" otherwise).
	SuspendReason SuspendReason `msgpack:"sr,omitempty"`
	// LiveKids counts the frame's live children, so that its status goes
	// from waiting back to active when the last one ends (as Apply does).
	LiveKids int64 `msgpack:"lk,omitempty"`
}

// RegistryDrop says which rows of a scope leave the registry: those
// pushed and ended at or before Through (All: pushed at or before it,
// live or not).
type RegistryDrop struct {
	Scope   string
	Through int64
	All     bool
}

// Removes reports whether the drop removes row r.
func (d RegistryDrop) Removes(r RegistryRow) bool {
	return r.Scope == d.Scope && r.PushVersion <= d.Through && (d.All || (r.EndVersion != 0 && r.EndVersion <= d.Through))
}

// RegistryChange is what one event changes in the registry: rows written
// whole (Put, in order: a later one of the same frame wins) and, for a
// removal, the rows that leave (Drop).
type RegistryChange struct {
	Put  []RegistryRow
	Drop *RegistryDrop
}

// RegistryEvent reports whether events of this type change the registry
// (a reader may skip decoding the others).
func RegistryEvent(eventType string) bool {
	switch eventType {
	case TypeFramePushed, TypeFrameUpdated, TypeFramePopped, TypeFrameSuspended, TypeFrameResumed,
		TypeRetention, TypeScopeDestroyed:
		return true
	}
	return false
}

// FoldRegistry returns what ev, the record at version of its scope,
// changes in the registry. get returns a frame's row as the registry has
// it (with the changes of the events before ev applied). A row that ev
// names and the registry does not have (its push was before what the
// registry read, or removed) is left alone: the fold never invents a row
// from an event that is not its push.
func FoldRegistry(ev Event, version int64, get func(scope, frame string) (RegistryRow, bool)) RegistryChange {
	m := ev.EventMeta()
	var ch RegistryChange
	switch e := ev.(type) {
	case *FramePushed:
		row := RegistryRow{Scope: m.Scope, FrameID: e.Frame, ParentID: e.ParentID, Goal: e.Goal, Status: StatusActive,
			Depth: e.Depth, ChainRoot: e.ChainRoot, ContinuedFrom: e.ContinuedFrom, CreatedAt: e.At, PushVersion: version}
		if e.ParentID != "" {
			if p, ok := get(m.Scope, e.ParentID); ok {
				p.LiveKids++
				if p.Status == StatusActive {
					p.Status = StatusWaiting
				}
				ch.Put = append(ch.Put, p)
			}
		}
		if e.ContinuedFrom != "" {
			// The link it continues: continued (its pop came first, in the
			// same append) or finished and resumed (ResumeChain).
			if prev, ok := get(m.Scope, e.ContinuedFrom); ok {
				prev.ContinuedTo = e.Frame
				if e.ChainRoot != "" {
					prev.ChainRoot = e.ChainRoot
				}
				ch.Put = append(ch.Put, prev)
			}
		}
		ch.Put = append(ch.Put, row)
	case *FrameUpdated:
		if row, ok := get(m.Scope, m.Frame); ok && e.Goal != nil {
			row.Goal = *e.Goal
			ch.Put = append(ch.Put, row)
		}
	case *FramePopped:
		row, ok := get(m.Scope, m.Frame)
		if !ok && e.Final == nil {
			break
		}
		if !ok { // its push is gone (retention): its record stands for it
			f := e.Final
			row = RegistryRow{Scope: m.Scope, FrameID: f.ID, ParentID: f.ParentID, Goal: f.Goal, Depth: f.Depth,
				ChainRoot: f.ChainRoot, ContinuedFrom: f.ContinuedFrom, CreatedAt: f.CreatedAt, PushVersion: f.PushSeq}
		}
		row.Status, row.FinishedAt, row.SuspendReason, row.EndVersion = e.Status, e.At, "", version
		if e.Status == StatusContinued {
			row.ContinuedTo = e.ContinuedTo
			if row.ChainRoot == "" {
				row.ChainRoot = row.FrameID
			}
		}
		switch {
		case e.Final != nil:
			row.TokensUsed, row.Cost = e.Final.Budget.Used, e.Final.Cost
		case e.Status != StatusContinued:
			row.TokensUsed, row.Cost = e.ChargedTokens, e.ChargedCost
		}
		ch.Put = append(ch.Put, row)
		if row.ParentID != "" && ok {
			if p, ok := get(m.Scope, row.ParentID); ok {
				if p.LiveKids > 0 {
					p.LiveKids--
				}
				if p.Status == StatusWaiting && p.LiveKids == 0 {
					p.Status = StatusActive
				}
				ch.Put = append(ch.Put, p)
			}
		}
	case *FrameSuspended:
		if row, ok := get(m.Scope, m.Frame); ok {
			row.Status, row.SuspendReason = StatusSuspended, e.Suspension.Reason
			ch.Put = append(ch.Put, row)
		}
	case *FrameResumed:
		if row, ok := get(m.Scope, m.Frame); ok {
			row.Status, row.SuspendReason = StatusActive, ""
			if row.LiveKids > 0 {
				row.Status = StatusWaiting
			}
			ch.Put = append(ch.Put, row)
		}
	case *RetentionApplied:
		ch.Drop = &RegistryDrop{Scope: m.Scope, Through: e.Through}
	case *ScopeDestroyed:
		ch.Drop = &RegistryDrop{Scope: m.Scope, Through: version - 1, All: true}
	}
	return ch
}

// RowOfFrame is the row of a live frame as a scope's projection holds it
// (for a reader that never saw its push). LiveKids is left 0: the caller
// counts the children it has rows of.
func RowOfFrame(scope string, f *Frame) RegistryRow {
	r := RegistryRow{Scope: scope, FrameID: f.ID, ParentID: f.ParentID, Goal: f.Goal, Status: f.Status, Depth: f.Depth,
		ChainRoot: f.ChainRoot, ContinuedFrom: f.ContinuedFrom, ContinuedTo: f.ContinuedTo, CreatedAt: f.CreatedAt,
		PushVersion: f.PushSeq}
	if f.Suspension != nil {
		r.SuspendReason = f.Suspension.Reason
	}
	return r
}
