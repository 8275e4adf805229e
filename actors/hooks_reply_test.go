package actors_test

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/actors/wire"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// A target that answers with an error reply (a node that could not read
// the notification answers a wire Failure; a StateIndex gateway answers a
// bad_request) has not taken it: the hook sends it again, it is not lost.
func TestHookErrorReplyIsNoAcknowledgement(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply any
	}{
		{"wire failure", &wire.Failure{Result: messages.Result{Err: messages.Errorf(messages.CodeBadRequest, "unknown message type")}}},
		{"wire message carrying a failure", mustEncode(t, &wire.Failure{Result: messages.Result{Err: messages.Errorf(messages.CodeBadRequest, "corrupt")}})},
		{"an error reply", &messages.PushFrameReply{Result: messages.Result{Err: messages.Errorf(messages.CodeInvalidArgument, "not a request")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			got := make(chan *messages.HookNotification, 10)
			n := 0
			_, err := e.sys.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
				note, ok := c.Message().(*messages.HookNotification)
				if !ok {
					return
				}
				got <- note
				if n++; n == 1 {
					c.Respond(tc.reply)
					return
				}
				c.Respond(&messages.HookAck{})
			}), "picky")
			require.NoError(t, err)
			_, err = e.srv.StartHooks([]actors.Hook{{Name: "picky", On: []frames.Notice{frames.NoticeFailed}, Actor: "picky", Timeout: 5 * time.Second}},
				actors.HookOptions{})
			require.NoError(t, err)
			waitSubscribed(t, e, "hook.picky")

			f := push(t, e.c, "s", "", 100)
			_, err = e.c.PopFrame(ctx, &messages.PopFrame{Header: mut("s"), FrameID: f, Status: frames.StatusFailed})
			require.NoError(t, err)
			var notes []*messages.HookNotification
			for range 2 {
				select {
				case note := <-got:
					notes = append(notes, note)
				case <-time.After(10 * time.Second):
					require.FailNow(t, "the notification answered with an error was not sent again")
				}
			}
			assert.Equal(t, notes[0], notes[1], "the same notification, again")
			assert.Equal(t, f, notes[0].FrameID)
		})
	}
}

func mustEncode(t *testing.T, v any) *wire.Message {
	t.Helper()
	m, err := wire.Encode(v, 0)
	require.NoError(t, err)
	return m
}
