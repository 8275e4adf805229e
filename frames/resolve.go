package frames

import (
	"errors"
	"fmt"

	"github.com/stateindex/stateindex/compaction"
)

// Request defaults: what the core assumes when a request leaves a value out.
const (
	// DefaultHandleKind is a context handle's kind when the request names none.
	DefaultHandleKind = "text"
	// DefaultToolPriority is a finished tool call's priority when unset.
	DefaultToolPriority = compaction.Medium
	// DefaultRole is the role a pack's brief names when the query names none.
	DefaultRole = "agent"
	// Kinds of the handles the core makes itself.
	ToolCallKind   = "tool_call"
	ToolResultKind = "tool_result"
	SummaryKind    = "summary"
)

// Role is who a context handle's content comes from. The zero value is
// RoleUnknown: a handle added without one, or before roles existed.
type Role string

// The roles of the chat APIs, as their messages name them.
const (
	RoleUnknown   Role = ""
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Roles of the handles the core makes itself: a finished tool call's call
// is the assistant's, its output the tool's.
const (
	ToolCallRole   = RoleAssistant
	ToolResultRole = RoleTool
)

// Valid reports whether r is a known role or unknown ("").
func (r Role) Valid() bool {
	switch r {
	case RoleUnknown, RoleSystem, RoleUser, RoleAssistant, RoleTool:
		return true
	}
	return false
}

// ResolveFrame returns id, or the id of the top of the stack (the most
// recently pushed active frame) when id is empty. Reads and commands alike
// resolve a frame id through it.
func ResolveFrame(s *State, id string) (string, error) {
	if id != "" {
		return id, nil
	}
	top := s.TopOfStack()
	if top == nil {
		return "", fmt.Errorf("%w: %q", ErrNoActiveFrame, s.Scope)
	}
	return top.ID, nil
}

// LookupFrame resolves id (see ResolveFrame), validates it and returns the
// frame; a frame of another scope is simply not found.
func LookupFrame(cfg Config, s *State, id string) (*Frame, error) {
	id, err := ResolveFrame(s, id)
	if err != nil {
		return nil, err
	}
	if err := ValidateID("frame id", id, cfg.MaxIDBytes); err != nil {
		return nil, err
	}
	f := s.Frame(id)
	if f == nil {
		status, ok, err := s.finished(id)
		if err != nil {
			return nil, err
		}
		if ok {
			return nil, &FinishedError{ID: id, Status: status}
		}
		return nil, fmt.Errorf("%w: %q", ErrFrameNotFound, id)
	}
	return f, nil
}

// FinishedError is LookupFrame's answer for a frame that finished and left
// the projection: a read that answers for finished frames fetches it from
// the log (the shell: its record is its frame.popped event, its handles
// its own events — see RebuildFinished); anything that needs a live frame
// refuses it as ErrFrameNotLive.
type FinishedError struct {
	ID     string
	Status Status
}

func (e *FinishedError) Error() string {
	return fmt.Sprintf("%v: %q is %s", ErrFrameNotLive, e.ID, e.Status)
}

// Unwrap makes a FinishedError match ErrFrameNotLive.
func (e *FinishedError) Unwrap() error { return ErrFrameNotLive }

// lookupLive is LookupFrame for a frame that must still be live.
func lookupLive(cfg Config, s *State, id string) (*Frame, error) {
	f, err := LookupFrame(cfg, s, id)
	var fin *FinishedError
	if errors.As(err, &fin) && fin.Status == StatusContinued {
		return nil, s.continued(fin.ID)
	}
	if err != nil {
		return nil, err
	}
	if !f.Status.Live() {
		return nil, fmt.Errorf("%w: %q is %s", ErrFrameNotLive, f.ID, f.Status)
	}
	return f, nil
}

// MintIfEmpty returns id, or a fresh id from mint when id is empty: the
// request's own ids win, the shell mints the rest.
func MintIfEmpty(id string, mint func() string) string {
	if id == "" {
		return mint()
	}
	return id
}

// HandleKind returns kind, or DefaultHandleKind when it is empty.
func HandleKind(kind string) string {
	if kind == "" {
		return DefaultHandleKind
	}
	return kind
}

// ToolPriority returns p, or DefaultToolPriority when it is unset.
func ToolPriority(p compaction.Priority) compaction.Priority {
	if p == 0 {
		return DefaultToolPriority
	}
	return p
}

// ToolCallText is a finished tool call's context text: text when given,
// else "name(input)" of the call journalled in the frame (empty if there is
// no such call: Decide refuses it then).
func ToolCallText(s *State, frameID, callID, text string) string {
	if text != "" {
		return text
	}
	if f := s.Frame(frameID); f != nil {
		if tc := f.ToolCall(callID); tc != nil {
			return tc.Name + "(" + string(tc.Input) + ")"
		}
	}
	return ""
}

// TokenTTL is how long a suspension token lives, in nanoseconds: requested
// when positive, else def; never more than max.
func TokenTTL(requested, def, max int64) int64 {
	if requested <= 0 {
		requested = def
	}
	return min(requested, max)
}

// SuspendTTL is TokenTTL for a request that asks in milliseconds; a
// negative TTL is refused, and a huge one capped before it is converted, so
// that it cannot overflow.
func SuspendTTL(millis, def, max int64) (int64, error) {
	if millis < 0 {
		return 0, invalid("negative TTL")
	}
	const ms = 1_000_000
	return TokenTTL(min(millis, max/ms)*ms, def, max), nil
}

// NewMint is the Mint of a token id minted at now that lives ttl nanoseconds.
func NewMint(tokenID string, now, ttl int64) Mint {
	return Mint{TokenID: tokenID, ExpiresAt: now + ttl}
}

// CountContent measures content under counter — as is and after
// whitespace normalization (compaction's Light level), so that packs need
// not rescan it — refusing content over the content limit before a
// tokenizer ever sees it.
func CountContent(cfg Config, counter compaction.Counter, what, content string) (tokens, light int64, err error) {
	if len(content) > cfg.MaxContentBytes {
		return 0, 0, fmt.Errorf("%w: %s is %d bytes, limit %d", ErrTooLarge, what, len(content), cfg.MaxContentBytes)
	}
	if counter == nil {
		counter = compaction.EstimateCounter{}
	}
	return counter.Count(content), compaction.LightTokens(content, counter), nil
}
