package actors_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/messages"
)

// The idempotency promise: a request id is remembered for the horizon
// (Config.RequestHorizon) however busy the scope — the count-bounded window
// it replaces forgot ids after 1,024–2,048 later requests and counted a
// resent RecordUsage twice. Past the horizon (plus the clock-skew
// allowance) a resend is refused with request_expired, never re-applied.
func TestIdempotencyHorizon(t *testing.T) {
	e := newEnv(t, func(c *actors.Config) { c.RequestHorizon, c.ClockSkew = 24*time.Hour, time.Minute })
	push, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: "busy"}, Goal: "g",
		Budget: budget.TokenBudget{Total: 100_000}})
	require.NoError(t, err)
	usage := &messages.RecordUsage{Header: messages.Header{Scope: "busy"}, FrameID: push.FrameID,
		Cost: budget.Cost{InputTokens: 1_000_000}}
	first, err := e.c.RecordUsage(ctx, usage)
	require.NoError(t, err)
	id := usage.RequestID
	require.NotEmpty(t, id, "the Client fills the request id")
	for i := 0; i < 10_000; i++ {
		_, err := e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: messages.Header{Scope: "busy"},
			FrameID: push.FrameID, Priority: compaction.Low, Content: fmt.Sprint("note ", i)})
		require.NoError(t, err)
		if i == 5_000 {
			e.clock.Advance(12 * time.Hour) // half the horizon passes meanwhile
		}
	}
	tokens := func() int64 {
		f, err := e.c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: "busy"}, FrameID: push.FrameID})
		require.NoError(t, err)
		return f.Frame.Cost.InputTokens
	}
	require.Equal(t, int64(1_000_000), tokens())

	resend := func() (*messages.RecordUsageReply, error) {
		return e.c.RecordUsage(ctx, &messages.RecordUsage{Header: messages.Header{Scope: "busy", RequestID: id},
			FrameID: push.FrameID, Cost: budget.Cost{InputTokens: 1_000_000}})
	}
	v := e.version("busy")
	again, err := resend()
	require.NoError(t, err)
	assert.Equal(t, first, again, "the original reply, after 10,000 later requests")
	assert.Equal(t, v, e.version("busy"), "nothing appended")

	e.restart()
	again, err = resend()
	require.NoError(t, err)
	assert.Equal(t, first, again, "the original reply, after a restart")
	assert.Equal(t, int64(1_000_000), tokens(), "applied once")

	// Within horizon + skew of its first send the id is still answered.
	e.clock.Advance(12*time.Hour + 30*time.Second)
	again, err = resend()
	require.NoError(t, err)
	assert.Equal(t, first, again)

	// Past horizon + skew: refused, never applied again, also after the
	// record itself has been dropped (horizon + 2·skew after its commit).
	e.clock.Advance(time.Minute)
	_, err = resend()
	require.ErrorIs(t, err, actors.ErrRequestExpired)
	e.clock.Advance(time.Hour)
	_, err = e.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: messages.Header{Scope: "busy"},
		FrameID: push.FrameID, Priority: compaction.Low, Content: "later"}) // an event prunes old records
	require.NoError(t, err)
	e.restart()
	_, err = resend()
	require.ErrorIs(t, err, actors.ErrRequestExpired)
	assert.Equal(t, int64(1_000_000), tokens(), "never counted twice")
}

// A ResumeActor resent with its request id (the Client fills one in)
// appends actor.resumed once.
func TestResumeActorIsIdempotent(t *testing.T) {
	e := newEnv(t)
	_, err := e.c.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: "r"}, Goal: "g",
		Budget: budget.TokenBudget{Total: 1000}})
	require.NoError(t, err)
	req := &messages.ResumeActor{Header: messages.Header{Scope: "r"}}
	_, err = e.c.ResumeActor(ctx, req)
	require.NoError(t, err)
	require.NotEmpty(t, req.RequestID, "the Client fills the request id")
	v := e.version("r")
	_, err = e.c.ResumeActor(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, v, e.version("r"), "a resend appends nothing")

	_, err = e.c.ResumeActor(ctx, &messages.ResumeActor{Header: messages.Header{Scope: "r"}})
	require.NoError(t, err)
	assert.Equal(t, v+1, e.version("r"), "a new request id appends actor.resumed")
}

// Reads share the request header but change nothing: a request id, version
// guard or checkpoint reason on one is refused, not silently ignored.
func TestReadsTakeNoMutationFields(t *testing.T) {
	e := newEnv(t)
	root := push(t, e.c, "s", "", 1000)
	v := int64(1)
	for name, hd := range map[string]messages.Header{
		"request id": {Scope: "s", RequestID: actors.NewRequestID()},
		"if version": {Scope: "s", IfVersion: &v},
		"reason":     {Scope: "s", Reason: 2},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := e.c.GetFrame(ctx, &messages.GetFrame{Header: hd, FrameID: root})
			assert.ErrorIs(t, err, actors.ErrInvalidArgument)
			_, err = e.c.GetStack(ctx, &messages.GetStack{Header: hd, FrameID: root})
			assert.ErrorIs(t, err, actors.ErrInvalidArgument)
		})
	}
}
