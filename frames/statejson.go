package frames

import (
	"time"

	"github.com/stateindex/stateindex/budget"
)

// The seed's state schema (state-persistence-checkpoints.md, state.json):
// one frame as a thread, for tools built for that format. The mapping is
// here, once; the caller encodes the document (cmd/stateindex's export
// writes it as JSON). The JSON tags are the seed's field names; the schema
// allows more properties, and the document adds the seed registry's chain
// fields (continuation_thread_id, continuation_of, chain_root_id) where a
// frame is a chain link.

// StateJSONVersion is the state format version a document carries (the
// seed's default).
const StateJSONVersion = "1.0.0"

// The seed's statuses (its enum).
const (
	StateRunning   = "running"
	StateSuspended = "suspended"
	StateCompleted = "completed"
	StateError     = "error"
	StateCancelled = "cancelled"
)

// SeedStatus maps a frame's status onto the seed's enum: active and
// waiting (a frame whose subcalls run is running too) are running; failed
// is error; continued is completed — the link's own run is over for good
// (its continuation goes on: the document names it in
// continuation_thread_id), and the enum has no value of its own for a
// handed-off thread.
func SeedStatus(s Status) string {
	switch s {
	case StatusActive, StatusWaiting:
		return StateRunning
	case StatusSuspended:
		return StateSuspended
	case StatusCompleted, StatusContinued:
		return StateCompleted
	case StatusFailed:
		return StateError
	case StatusCancelled:
		return StateCancelled
	}
	return StateError
}

// StateDocument is a frame in the seed's state schema.
type StateDocument struct {
	ThreadID         string            `json:"thread_id"`
	Directive        string            `json:"directive"`
	ParentThreadID   *string           `json:"parent_thread_id"`
	Version          string            `json:"version"`
	SavedAt          string            `json:"saved_at"`
	Inputs           any               `json:"inputs"`
	TurnNumber       int64             `json:"turn_number"`
	Cost             StateCost         `json:"cost"`
	Limits           StateLimits       `json:"limits"`
	Status           string            `json:"status"`
	SuspendReason    *string           `json:"suspend_reason"`
	SuspendMetadata  *SuspendMetadata  `json:"suspend_metadata"`
	Hooks            []StateHook       `json:"hooks"`
	RequiredCaps     []string          `json:"required_caps"`
	Messages         []StateMessage    `json:"messages"`
	PartialCognition *PartialCognition `json:"partial_cognition"`
	// The seed registry's chain fields, set on a chain's links only.
	ContinuationThreadID string `json:"continuation_thread_id,omitempty"`
	ContinuationOf       string `json:"continuation_of,omitempty"`
	ChainRootID          string `json:"chain_root_id,omitempty"`
}

// StateCost is the seed's cost: spend in dollars, duration in seconds.
type StateCost struct {
	Turns           int64       `json:"turns"`
	Tokens          StateTokens `json:"tokens"`
	Spend           float64     `json:"spend"`
	DurationSeconds float64     `json:"duration_seconds"`
}

// StateTokens is the seed's token counts.
type StateTokens struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// StateLimits is the seed's limits, null where unlimited (0 here). Spend
// is in dollars; DurationSeconds (not in the seed's schema, which allows
// it) is the duration limit.
type StateLimits struct {
	Spend           *float64 `json:"spend"`
	Turns           *int64   `json:"turns"`
	Tokens          *int64   `json:"tokens"`
	Spawns          *int64   `json:"spawns"`
	DurationSeconds *float64 `json:"duration_seconds"`
}

// SuspendMetadata is the seed's suspend_metadata: the limit crossed, in
// the seed's units (dollars for spend, seconds for duration), or the note
// a suspension for another reason carries.
type SuspendMetadata struct {
	LimitCode    budget.LimitCode `json:"limit_code,omitempty"`
	CurrentValue *float64         `json:"current_value,omitempty"`
	CurrentMax   *float64         `json:"current_max,omitempty"`
	Note         string           `json:"note,omitempty"`
}

// StateHook is one of the seed's hooks (a document carries none: see
// StateJSON).
type StateHook struct {
	Event     string         `json:"event"`
	Directive string         `json:"directive"`
	Inputs    map[string]any `json:"inputs"`
}

// StateMessage is one of the seed's messages. OriginalRole, when set, is
// the handle's own role where the seed's three differ from it.
type StateMessage struct {
	Role         string `json:"role"`
	Content      string `json:"content"`
	OriginalRole string `json:"original_role,omitempty"`
}

// PartialCognition is the seed's partial_cognition.
type PartialCognition struct {
	Text                 string  `json:"text"`
	IsPartial            bool    `json:"is_partial"`
	CompletionPercentage float64 `json:"completion_percentage"`
}

// SeedRole maps a handle's role onto the seed's three: system, user and
// assistant are themselves; a tool's output is user (the input the model
// received — the Anthropic Messages API carries tool results in the user's
// turn); a handle without a role (context added without one, or before
// roles existed) is user too: whatever the system or the assistant did not
// say was input to the model. original is the handle's own role when the
// seed's differs ("unknown" for none).
func SeedRole(r Role) (role, original string) {
	switch r {
	case RoleSystem, RoleUser, RoleAssistant:
		return string(r), ""
	case RoleTool:
		return string(RoleUser), string(RoleTool)
	}
	return string(RoleUser), "unknown"
}

// StateJSON maps frame f onto the seed's state schema: savedAt (unix ns)
// is when the state it reflects last changed, inputs the frame's inputs
// decoded by the caller (nil: none, an empty object). Messages are f's
// live context handles in order, by SeedRole; hooks and required_caps are
// empty (StateIndex keeps hooks per server, by scope prefix, not per
// thread, and has no capabilities); partial_cognition is the frame's
// output in progress (RecordPartialOutput), null when it has none.
func StateJSON(f *Frame, savedAt int64, inputs any) StateDocument {
	if inputs == nil {
		inputs = map[string]any{}
	}
	d := StateDocument{
		ThreadID: f.ID, Directive: f.Goal, Version: StateJSONVersion,
		SavedAt: time.Unix(0, savedAt).UTC().Format(time.RFC3339Nano), Inputs: inputs, TurnNumber: f.Cost.Turns,
		Cost: StateCost{Turns: f.Cost.Turns, Tokens: StateTokens{InputTokens: f.Cost.InputTokens, OutputTokens: f.Cost.OutputTokens},
			Spend: budget.SpendToFloat(f.Cost.SpendMicros), DurationSeconds: seconds(f.Cost.DurationMillis)},
		Limits: StateLimits{Spend: limitF(f.Limits.SpendMicros, budget.SpendToFloat), Turns: limitI(f.Limits.Turns), Tokens: limitI(f.Limits.Tokens),
			Spawns: limitI(f.Limits.Spawns), DurationSeconds: limitF(f.Limits.DurationMillis, seconds)},
		Status: SeedStatus(f.Status), Hooks: []StateHook{}, RequiredCaps: []string{}, Messages: []StateMessage{},
		ContinuationThreadID: f.ContinuedTo, ContinuationOf: f.ContinuedFrom, ChainRootID: f.ChainRoot,
	}
	if f.ParentID != "" {
		p := f.ParentID
		d.ParentThreadID = &p
	}
	if sp := f.Suspension; sp != nil && f.Status == StatusSuspended {
		reason := string(sp.Reason)
		d.SuspendReason = &reason
		switch {
		case sp.Limit != nil:
			unit := func(v int64) *float64 { x := float64(v); return &x }
			switch sp.Limit.Code {
			case budget.SpendExceeded:
				unit = func(v int64) *float64 { x := budget.SpendToFloat(v); return &x }
			case budget.DurationExceeded:
				unit = func(v int64) *float64 { x := seconds(v); return &x }
			}
			d.SuspendMetadata = &SuspendMetadata{LimitCode: sp.Limit.Code, CurrentValue: unit(sp.Limit.Current), CurrentMax: unit(sp.Limit.Max)}
		case sp.Note != "":
			d.SuspendMetadata = &SuspendMetadata{Note: sp.Note}
		}
	}
	for i := range f.Handles {
		h := &f.Handles[i]
		role, original := SeedRole(h.Role)
		d.Messages = append(d.Messages, StateMessage{Role: role, Content: h.Content, OriginalRole: original})
	}
	if p := f.Partial; p != nil {
		d.PartialCognition = &PartialCognition{Text: p.Text, IsPartial: p.IsPartial, CompletionPercentage: float64(p.Percent)}
	}
	return d
}

func seconds(millis int64) float64 { return float64(millis) / 1000 }

func limitI(v int64) *int64 {
	if v <= 0 {
		return nil
	}
	return &v
}

func limitF(v int64, unit func(int64) float64) *float64 {
	if v <= 0 {
		return nil
	}
	x := unit(v)
	return &x
}
