package views

import (
	"context"
	"time"
	"unicode/utf8"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// StateListing is one level of a scope's key-value state as `stateindex state` prints it.
type StateListing struct {
	Scope   string `json:"scope"`
	Frame   string `json:"frame,omitempty"`
	Prefix  string `json:"prefix,omitempty"`
	Version int64  `json:"version"`
	// Size is the level's (its live keys and bytes) with the scope's total
	// and limit, as the server counts them.
	Size frames.StateSize `json:"size"`
	Keys []StateKey       `json:"keys"`
}

// StateKey is one key: a value (Value or ValueBase64) or a list (Items,
// oldest first).
type StateKey struct {
	Key         string     `json:"key"`
	Version     int64      `json:"version"`
	ExpiresAt   *time.Time `json:"expires_at,omitempty"`
	Sliding     bool       `json:"sliding,omitempty"`
	Bytes       int        `json:"bytes"`
	List        bool       `json:"list,omitempty"`
	Value       *string    `json:"value,omitempty"`
	ValueBase64 []byte     `json:"value_base64,omitempty"`
	Items       []any      `json:"items,omitempty"` // each a string, or its bytes (base64)
}

// ReadState reads the level through a StateHandle (its pages at one
// version), then its size.
func ReadState(ctx context.Context, c *actors.Client, scope, frame, prefix string) (*StateListing, error) {
	h := c.FrameState(scope, frame)
	entries, err := h.Entries(ctx, prefix)
	if err != nil {
		return nil, err
	}
	out := &StateListing{Scope: scope, Frame: frame, Prefix: prefix, Version: h.Version(), Keys: []StateKey{}}
	r, err := c.RangeState(ctx, &messages.RangeState{Header: messages.Header{Scope: scope}, FrameID: frame, Limit: 1})
	if err != nil {
		return nil, err
	}
	out.Size = r.Size
	for _, e := range entries {
		out.Keys = append(out.Keys, StateKeyOf(e))
	}
	return out, nil
}

// StateKeyOf is an entry as a StateKey: text values as text, others as
// bytes.
func StateKeyOf(e frames.StateEntry) StateKey {
	k := StateKey{Key: e.Key, Version: e.Version, Sliding: e.Sliding, List: e.List}
	if e.ExpiresAt != 0 {
		at := time.Unix(0, e.ExpiresAt).UTC()
		k.ExpiresAt = &at
	}
	if e.List {
		for _, it := range e.Items {
			k.Bytes += len(it)
			if utf8.Valid(it) {
				k.Items = append(k.Items, string(it))
			} else {
				k.Items = append(k.Items, it)
			}
		}
	} else {
		k.Bytes = len(e.Value)
		if utf8.Valid(e.Value) {
			v := string(e.Value)
			k.Value = &v
		} else {
			k.ValueBase64 = e.Value
		}
	}
	return k
}
