package actors

import (
	"context"

	"github.com/stateindex/stateindex/messages"
)

// RecordPartialOutput appends a chunk of a frame's model output as it
// streams (see messages.RecordPartialOutput): call it per chunk; the reply
// leaves once the chunk (or a later one of the same scope) is durable.
func (c *Client) RecordPartialOutput(ctx context.Context, req *messages.RecordPartialOutput) (*messages.RecordPartialOutputReply, error) {
	return call[*messages.RecordPartialOutputReply](ctx, c, req)
}
