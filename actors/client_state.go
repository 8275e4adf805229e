package actors

import (
	"context"

	"github.com/stateindex/stateindex/messages"
)

// ChangeState applies key-value changes to a scope's state, all or none.
func (c *Client) ChangeState(ctx context.Context, req *messages.ChangeState) (*messages.ChangeStateReply, error) {
	return call[*messages.ChangeStateReply](ctx, c, req)
}

// GetState reads keys of a scope's (or a frame's) state.
func (c *Client) GetState(ctx context.Context, req *messages.GetState) (*messages.GetStateReply, error) {
	return call[*messages.GetStateReply](ctx, c, req)
}

// RangeState lists a level's keys by prefix, a page at a time.
func (c *Client) RangeState(ctx context.Context, req *messages.RangeState) (*messages.RangeStateReply, error) {
	return call[*messages.RangeStateReply](ctx, c, req)
}

// StateHistory reads a key's past values, newest first.
func (c *Client) StateHistory(ctx context.Context, req *messages.StateHistory) (*messages.StateHistoryReply, error) {
	return call[*messages.StateHistoryReply](ctx, c, req)
}

// ExpireState removes a scope's expired keys from its state now (the
// server's background pass does it by itself).
func (c *Client) ExpireState(ctx context.Context, req *messages.ExpireState) (*messages.ExpireStateReply, error) {
	return call[*messages.ExpireStateReply](ctx, c, req)
}
