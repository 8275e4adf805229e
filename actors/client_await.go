package actors

import (
	"context"
	"time"

	"github.com/stateindex/stateindex/messages"
)

// AwaitFrame waits until frame req.FrameID — resolved to the head of its
// continuation chain — has ended, or until req.Wait has passed
// (messages.AwaitFrame): the reply says which (Terminal, TimedOut).
//
// The reply must leave the server before the caller gives up on it, so the
// wait ends a margin before the context's deadline (the Client's timeout
// when the context has none): a tenth of the time left, at most a second.
// A Wait of 0 waits until then; a longer Wait is cut to it. A context that
// leaves no time beyond the margin sends Wait 0: the current state, at
// once. req itself is not changed (a resend computes its wait again).
func (c *Client) AwaitFrame(ctx context.Context, req *messages.AwaitFrame) (*messages.AwaitFrameReply, error) {
	if req == nil {
		return call[*messages.AwaitFrameReply](ctx, c, nil)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	r := *req
	if r.Wait >= 0 {
		dl, _ := ctx.Deadline()
		left := time.Until(dl)
		wait := left - min(left/10, time.Second)
		if wait < 0 {
			wait = 0
		}
		if r.Wait == 0 || r.Wait > wait {
			r.Wait = wait
		}
	}
	return call[*messages.AwaitFrameReply](ctx, c, &r)
}
