package frames

import (
	"fmt"
	"slices"
	"strings"
)

// Notice is what happened to a frame, as someone outside its scope is told
// of it (hooks, DESIGN §11): a name for a kind of event, not an event type.
// One event may be several notices (a limit suspension is both
// limit_reached and suspended).
type Notice string

// Notices.
const (
	NoticeStarted      Notice = "started"       // frame.pushed (a continuation link too)
	NoticeLimitReached Notice = "limit_reached" // suspended for a limit or its token budget
	NoticeSuspended    Notice = "suspended"     // suspended, for any reason
	NoticeResumed      Notice = "resumed"       // resumed with its token
	NoticeFinished     Notice = "finished"      // popped completed
	NoticeFailed       Notice = "failed"        // popped failed
	NoticeCancelled    Notice = "cancelled"     // popped cancelled, or cancelled by a forced destroy
	NoticeContinued    Notice = "continued"     // handed off to a continuation frame
	NoticeDestroyed    Notice = "destroyed"     // the scope was destroyed
)

// Notices lists every notice, in a stable order.
func Notices() []Notice {
	return []Notice{NoticeStarted, NoticeLimitReached, NoticeSuspended, NoticeResumed,
		NoticeFinished, NoticeFailed, NoticeCancelled, NoticeContinued, NoticeDestroyed}
}

// ParseNotice returns the notice named s, or an error listing the names.
func ParseNotice(s string) (Notice, error) {
	n := Notice(s)
	if slices.Contains(Notices(), n) {
		return n, nil
	}
	names := make([]string, 0, 9)
	for _, k := range Notices() {
		names = append(names, string(k))
	}
	return "", fmt.Errorf("unknown notice %q (known: %s)", s, strings.Join(names, ", "))
}

// NoticeEventTypes returns the event types that can carry the given
// notices (what a subscriber needs to read to see them), sorted.
func NoticeEventTypes(ns []Notice) []string {
	set := map[string]bool{}
	for _, n := range ns {
		switch n {
		case NoticeStarted:
			set[TypeFramePushed] = true
		case NoticeLimitReached, NoticeSuspended:
			set[TypeFrameSuspended] = true
		case NoticeResumed:
			set[TypeFrameResumed] = true
		case NoticeFinished, NoticeFailed, NoticeContinued:
			set[TypeFramePopped] = true
		case NoticeCancelled:
			set[TypeFramePopped] = true
			set[TypeScopeDestroyed] = true
		case NoticeDestroyed:
			set[TypeScopeDestroyed] = true
		}
	}
	out := make([]string, 0, len(set))
	for t := range set {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// Noted is one notice about one frame ("" for the scope itself).
type Noted struct {
	Notice Notice
	Frame  string
	// Status is the frame's status after the event (0 when the event does
	// not say).
	Status Status
	// Reason is a suspension's reason.
	Reason SuspendReason
	// Goal is the frame's goal when the event carries it (frame.pushed,
	// and frame.popped with its final record).
	Goal string
}

// NoticesOf returns the notices an event gives, in order; none for events
// no notice describes.
func NoticesOf(e Event) []Noted {
	switch ev := e.(type) {
	case *FramePushed:
		return []Noted{{Notice: NoticeStarted, Frame: ev.Frame, Status: StatusActive, Goal: ev.Goal}}
	case *FrameSuspended:
		out := make([]Noted, 0, 2)
		s := Noted{Notice: NoticeSuspended, Frame: ev.Frame, Status: StatusSuspended, Reason: ev.Suspension.Reason}
		if r := ev.Suspension.Reason; r == SuspendLimit || r == SuspendBudget {
			l := s
			l.Notice = NoticeLimitReached
			out = append(out, l)
		}
		return append(out, s)
	case *FrameResumed:
		return []Noted{{Notice: NoticeResumed, Frame: ev.Frame, Status: StatusActive}}
	case *FramePopped:
		n := Noted{Frame: ev.Frame, Status: ev.Status}
		if ev.Final != nil {
			n.Goal = ev.Final.Goal
		}
		switch ev.Status {
		case StatusCompleted:
			n.Notice = NoticeFinished
		case StatusFailed:
			n.Notice = NoticeFailed
		case StatusCancelled:
			n.Notice = NoticeCancelled
		case StatusContinued:
			n.Notice = NoticeContinued
		default:
			return nil
		}
		return []Noted{n}
	case *ScopeDestroyed:
		out := make([]Noted, 0, len(ev.Cancelled)+1)
		for _, id := range ev.Cancelled {
			out = append(out, Noted{Notice: NoticeCancelled, Frame: id, Status: StatusCancelled})
		}
		return append(out, Noted{Notice: NoticeDestroyed})
	}
	return nil
}
