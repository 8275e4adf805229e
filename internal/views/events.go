package views

import (
	"fmt"
	"strings"

	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// TimelineEvent is one event of a scope's timeline: where it is, when,
// why it was committed (its checkpoint reason) and what it did, in words.
type TimelineEvent struct {
	Version   int64
	Seq       uint64
	At        int64
	Type      string
	Frame     string
	Reason    string // the checkpoint reason's name; "implied" for none
	RequestID string
	What      string
}

// ReasonName is a checkpoint reason's name: "implied" for the zero value.
func ReasonName(r frames.Reason) string {
	if r == frames.ReasonImplied {
		return "implied"
	}
	return r.String()
}

// ParseReason is the inverse of ReasonName.
func ParseReason(s string) (frames.Reason, bool) {
	for r := frames.ReasonImplied; r <= frames.ReasonRunFinished; r++ {
		if ReasonName(r) == s {
			return r, true
		}
	}
	return 0, false
}

// Reasons lists every checkpoint reason's name, in order.
func Reasons() []string {
	var out []string
	for r := frames.ReasonImplied; r <= frames.ReasonRunFinished; r++ {
		out = append(out, ReasonName(r))
	}
	return out
}

// Timeline decodes a ReadScope page; an event that does not decode is
// shown with its type and the error.
func Timeline(evs []messages.SubscribedEvent) []TimelineEvent {
	out := make([]TimelineEvent, 0, len(evs))
	for i := range evs {
		e := &evs[i]
		te := TimelineEvent{Version: e.Version, Seq: e.Seq, At: e.At, Type: e.Type, Frame: e.Frame}
		ev, err := e.Decode()
		if err != nil {
			te.What = "(does not decode: " + err.Error() + ")"
		} else {
			m := ev.EventMeta()
			te.Reason, te.RequestID, te.What = ReasonName(m.Reason), m.RequestID, Describe(ev)
		}
		out = append(out, te)
	}
	return out
}

// Describe says what an event did, in one line (user text clipped).
func Describe(ev frames.Event) string {
	switch e := ev.(type) {
	case *frames.FramePushed:
		s := fmt.Sprintf("pushed %q, budget %d tokens", Clip(e.Goal, 80), e.Budget.Total)
		if e.ParentID != "" {
			s += ", child of " + Short(e.ParentID)
		}
		if e.ContinuedFrom != "" {
			s += ", continuing " + Short(e.ContinuedFrom)
		}
		return s
	case *frames.FramePopped:
		s := fmt.Sprintf("ended %s, charged %d tokens, released %d", e.Status, e.ChargedTokens, e.Released)
		if len(e.Abandoned) > 0 {
			s += fmt.Sprintf(", %d tool call(s) abandoned", len(e.Abandoned))
		}
		if e.ContinuedTo != "" {
			s += ", continued as " + Short(e.ContinuedTo)
		}
		return s
	case *frames.FrameUpdated:
		return "updated"
	case *frames.FrameSuspended:
		s := "suspended: " + string(e.Suspension.Reason)
		if l := e.Suspension.Limit; l != nil {
			s += fmt.Sprintf(" (%s %d/%d)", l.Code, l.Current, l.Max)
		}
		if e.Suspension.Note != "" {
			s += " — " + Clip(e.Suspension.Note, 80)
		}
		return s
	case *frames.FrameResumed:
		return "resumed (token " + Short(e.TokenID) + ")"
	case *frames.HandleAdded:
		return fmt.Sprintf("context %s [%s%s] %d tokens: %s", Short(e.Handle.ID), e.Handle.Priority, roleOf(string(e.Handle.Role)), e.Handle.Tokens, Clip(e.Handle.Content, 80))
	case *frames.ResultAdded:
		return fmt.Sprintf("result %s %s: %s", e.Result.Kind, Clip(e.Result.Ref, 60), Clip(e.Result.Summary, 60))
	case *frames.FrameCompacted:
		d, s := e.Counts()
		return fmt.Sprintf("compacted (%s, %s): %d → %d tokens, %d dropped, %d summarized", e.Strategy, e.Level, e.OriginalTokens, e.FinalTokens, d, s)
	case *frames.ActorResumed:
		return fmt.Sprintf("actor resumed: %d live frame(s), %d pending", e.FramesRecovered, e.PendingItems)
	case *frames.UsageRecorded:
		c := e.Cost
		return fmt.Sprintf("usage: %d in / %d out tokens, %d turn(s), spend %s", c.InputTokens, c.OutputTokens, c.Turns, Dollars(c.SpendMicros))
	case *frames.ToolStarted:
		return fmt.Sprintf("tool call %s started: %s", Clip(e.CallID, 40), Clip(e.Name, 60))
	case *frames.ToolFinished:
		s := fmt.Sprintf("tool call %s finished: %s", Clip(e.CallID, 40), Clip(e.ResultHandle.Content, 80))
		if e.IsError {
			s += " (error)"
		}
		return s
	case *frames.RetentionApplied:
		return fmt.Sprintf("retention removed history through version %d (%d run(s)): %s", e.Through, e.Runs, Clip(e.Why, 60))
	case *frames.ScopeDestroyed:
		return fmt.Sprintf("scope destroyed through version %d, %d frame(s) cancelled", e.Through, len(e.Cancelled))
	case *frames.StateChanged:
		keys := make([]string, 0, len(e.Changes))
		for _, c := range e.Changes {
			keys = append(keys, c.Kind+" "+Clip(c.Key+c.Prefix, 30))
		}
		return "state: " + Clip(strings.Join(keys, ", "), 100)
	case *frames.StateExpired:
		return fmt.Sprintf("state: %d key(s) expired", len(e.Keys))
	case *frames.SpendReserved:
		return fmt.Sprintf("reserved %s for %s (reservation %s)", Dollars(e.Reservation.Amount), e.Reservation.For, Short(e.Reservation.ID))
	case *frames.SpendReturned:
		return fmt.Sprintf("returned %s (%s)", Dollars(e.Returned), e.Why)
	case *frames.SpendRenewed:
		return "reservation " + Short(e.ID) + " renewed"
	case *frames.SpendSettled:
		return fmt.Sprintf("settled %s from %s, charged %s", Dollars(e.Spent), e.From, Dollars(e.Charged))
	case *frames.SpendDelivered:
		return "settlement of " + Short(e.ID) + " acknowledged"
	case *frames.PartialOutputRecorded:
		s := fmt.Sprintf("output chunk %d (%d%%): %s", e.Chunk, e.Percent, Clip(e.Delta, 60))
		if e.Final {
			s += " (final)"
		}
		return s
	case *frames.ContentStored:
		return "content stored by reference"
	case *frames.CounterChanged:
		return fmt.Sprintf("token counter %s → %s", orEstimate(e.From), orEstimate(e.To))
	}
	return ev.EventType()
}

func orEstimate(s string) string {
	if s == "" {
		return "estimate"
	}
	return s
}

func roleOf(r string) string {
	if r == "" {
		return ""
	}
	return ", " + r
}

// Short is an id's first 12 characters.
func Short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// Clip shortens s to at most n bytes on a rune boundary, its whitespace
// runs made one space, marking a cut with "…".
func Clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	i := n - len("…")
	for i > 0 && s[i]&0xC0 == 0x80 { // back off to a rune boundary
		i--
	}
	return s[:i] + "…"
}
