package messages

import (
	"time"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/frames"
)

// AwaitFrame waits until frame FrameID of the scope — resolved to the head
// of its continuation chain, followed through every link a continuation
// adds meanwhile — has ended (completed, failed or cancelled), or until
// Wait has passed. It is a read: it changes nothing, takes no request id,
// and while it waits the scope serves its other requests as usual (the
// waiter is parked, holding no goroutine and no place in the scope's
// queue). A frame that has ended is answered at once; so is Wait 0 (the
// current state, TimedOut when the head is live). Wait is capped at
// frames.MaxAwaitWait (10 minutes): await again past it; a negative Wait
// is invalid_argument. FrameID is required (the top of the stack moves);
// a frame the scope does not have is frame_not_found at once, and so is a
// frame whose scope is destroyed while the wait is parked. A server that
// stops answers its parked waits unavailable: resending the same await to
// the restarted server gives the answer it would have given.
//
// The Client sets Wait from the context's deadline when it is 0 (see
// Client.AwaitFrame): a reply must leave the server before the caller gives
// up on it.
type AwaitFrame struct {
	Header  `msgpack:",inline"`
	FrameID string        `msgpack:"f"`
	Wait    time.Duration `msgpack:"w,omitempty"`
}

// AwaitFrameReply is where a wait ended. Head is the chain head FrameID
// resolved to (FrameID itself in no chain); Status its status, Terminal
// whether it ended; TimedOut says the wait ended with the head still live.
// For an ended head: its results, cost and used tokens, when it finished
// (FinishedAt, server time, unix ns) and a summary (its goal, status,
// tokens and results, at most frames.MaxLinkSummaryBytes).
type AwaitFrameReply struct {
	Result     `msgpack:",inline"`
	FrameID    string             `msgpack:"f"`
	Head       string             `msgpack:"h"`
	Status     frames.Status      `msgpack:"st"`
	Terminal   bool               `msgpack:"tm,omitempty"`
	TimedOut   bool               `msgpack:"to,omitempty"`
	Results    []frames.ResultRef `msgpack:"rs,omitempty"`
	Cost       budget.Cost        `msgpack:"c"`
	UsedTokens int64              `msgpack:"ut,omitempty"`
	Summary    string             `msgpack:"sm,omitempty"`
	FinishedAt int64              `msgpack:"fa,omitempty"`
}

// Op returns OpAwaitFrame.
func (*AwaitFrame) Op() Op { return OpAwaitFrame }
