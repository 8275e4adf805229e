package frames

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNoticesOf(t *testing.T) {
	cases := []struct {
		name string
		ev   Event
		want []Noted
	}{
		{"pushed", &FramePushed{Meta: Meta{Frame: "f"}, Goal: "g"}, []Noted{{Notice: NoticeStarted, Frame: "f", Status: StatusActive, Goal: "g"}}},
		{"limit", &FrameSuspended{Meta: Meta{Frame: "f"}, Suspension: Suspension{Reason: SuspendLimit}},
			[]Noted{{Notice: NoticeLimitReached, Frame: "f", Status: StatusSuspended, Reason: SuspendLimit}, {Notice: NoticeSuspended, Frame: "f", Status: StatusSuspended, Reason: SuspendLimit}}},
		{"budget", &FrameSuspended{Meta: Meta{Frame: "f"}, Suspension: Suspension{Reason: SuspendBudget}},
			[]Noted{{Notice: NoticeLimitReached, Frame: "f", Status: StatusSuspended, Reason: SuspendBudget}, {Notice: NoticeSuspended, Frame: "f", Status: StatusSuspended, Reason: SuspendBudget}}},
		{"approval", &FrameSuspended{Meta: Meta{Frame: "f"}, Suspension: Suspension{Reason: SuspendApproval}},
			[]Noted{{Notice: NoticeSuspended, Frame: "f", Status: StatusSuspended, Reason: SuspendApproval}}},
		{"resumed", &FrameResumed{Meta: Meta{Frame: "f"}}, []Noted{{Notice: NoticeResumed, Frame: "f", Status: StatusActive}}},
		{"finished", &FramePopped{Meta: Meta{Frame: "f"}, Status: StatusCompleted, Final: &FrameRecord{Goal: "g"}}, []Noted{{Notice: NoticeFinished, Frame: "f", Status: StatusCompleted, Goal: "g"}}},
		{"failed", &FramePopped{Meta: Meta{Frame: "f"}, Status: StatusFailed}, []Noted{{Notice: NoticeFailed, Frame: "f", Status: StatusFailed}}},
		{"cancelled", &FramePopped{Meta: Meta{Frame: "f"}, Status: StatusCancelled}, []Noted{{Notice: NoticeCancelled, Frame: "f", Status: StatusCancelled}}},
		{"continued", &FramePopped{Meta: Meta{Frame: "f"}, Status: StatusContinued, ContinuedTo: "g"}, []Noted{{Notice: NoticeContinued, Frame: "f", Status: StatusContinued}}},
		{"destroyed", &ScopeDestroyed{Cancelled: []string{"a", "b"}}, []Noted{
			{Notice: NoticeCancelled, Frame: "a", Status: StatusCancelled}, {Notice: NoticeCancelled, Frame: "b", Status: StatusCancelled}, {Notice: NoticeDestroyed}}},
		{"usage", &UsageRecorded{}, nil},
		{"handle", &HandleAdded{}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, NoticesOf(c.ev))
		})
	}
}

func TestNoticeEventTypesCoverNoticesOf(t *testing.T) {
	// Every event that gives a notice has its type among the notice's event
	// types, so a subscriber filtering by them misses none.
	evs := []Event{&FramePushed{}, &FrameSuspended{Suspension: Suspension{Reason: SuspendLimit}}, &FrameResumed{},
		&FramePopped{Status: StatusCompleted}, &FramePopped{Status: StatusFailed}, &FramePopped{Status: StatusCancelled},
		&FramePopped{Status: StatusContinued}, &ScopeDestroyed{Cancelled: []string{"x"}}}
	for _, ev := range evs {
		for _, n := range NoticesOf(ev) {
			assert.Contains(t, NoticeEventTypes([]Notice{n.Notice}), ev.EventType(), "%s of %s", n.Notice, ev.EventType())
		}
	}
	assert.Equal(t, []string{TypeFramePopped, TypeScopeDestroyed}, NoticeEventTypes([]Notice{NoticeCancelled, NoticeFinished}))
}

func TestParseNotice(t *testing.T) {
	for _, n := range Notices() {
		got, err := ParseNotice(string(n))
		require.NoError(t, err)
		assert.Equal(t, n, got)
	}
	_, err := ParseNotice("limit")
	require.ErrorContains(t, err, `unknown notice "limit"`)
	require.ErrorContains(t, err, "limit_reached")
}
