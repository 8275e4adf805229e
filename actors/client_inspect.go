package actors

import (
	"context"

	"github.com/stateindex/stateindex/messages"
)

// GetScope reads what a scope holds now — its live frames (a page), the
// top of its stack, its pending work, in-doubt and abandoned tool calls —
// without recording anything (ResumeActor reports the same and appends
// actor.resumed).
func (c *Client) GetScope(ctx context.Context, req *messages.GetScope) (*messages.GetScopeReply, error) {
	return call[*messages.GetScopeReply](ctx, c, req)
}

// ReadScope reads a page of a scope's events, newest first, from its own
// log (messages.ReadScope).
func (c *Client) ReadScope(ctx context.Context, req *messages.ReadScope) (*messages.ReadScopeReply, error) {
	return call[*messages.ReadScopeReply](ctx, c, req)
}
