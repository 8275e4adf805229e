package config

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/actors/wire"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// The state section: defaults, good values (and what actors.Config gets
// from them), and every bad value refused naming the key and the values.
func TestStateSection(t *testing.T) {
	d, err := Load("")
	require.NoError(t, err)
	c := d.ActorsConfig(actors.DefaultConfig())
	assert.Equal(t, frames.DefaultMaxStateBytes, c.Frames.MaxStateBytes)
	assert.Equal(t, frames.DefaultMaxStateValueBytes, c.Frames.MaxStateValueBytes)
	assert.Equal(t, frames.DefaultMaxStateKeyBytes, c.Frames.MaxStateKeyBytes)

	good := []struct {
		name, yaml        string
		state, value, key int
	}{
		{"smaller", "state:\n  max_bytes: 65536\n  max_value_bytes: 4096\n  max_key_bytes: 64\n", 65536, 4096, 64},
		{"a value as large as the state", "state:\n  max_bytes: 100000\n  max_value_bytes: 100000\n", 100000, 100000, 512},
		{"a larger state, the default value", "state:\n  max_bytes: 16777216\n", 16 << 20, 512 << 10, 512},
		{"the largest value a 1 MiB message carries", "state:\n  max_value_bytes: 1046272\n", 1 << 20, 1046272, 512},
		{"a larger message for a larger value", "state:\n  max_bytes: 4194304\n  max_value_bytes: 2097152\nremoting:\n  max_message_bytes: 4194304\n", 4 << 20, 2 << 20, 512},
	}
	for _, tc := range good {
		t.Run(tc.name, func(t *testing.T) {
			dir := write(t, map[string]string{"si.yaml": tc.yaml})
			f, err := Load(filepath.Join(dir, "si.yaml"))
			require.NoError(t, err)
			c := f.ActorsConfig(actors.DefaultConfig())
			assert.Equal(t, tc.state, c.Frames.MaxStateBytes)
			assert.Equal(t, tc.value, c.Frames.MaxStateValueBytes)
			assert.Equal(t, tc.key, c.Frames.MaxStateKeyBytes)
			require.NoError(t, c.Frames.Validate())

			// A value at the limit, in a request and in a reply, with a
			// key, scope and ids at theirs, fits in a remote message.
			l := c.Frames
			v, key := make([]byte, l.MaxStateValueBytes), strings.Repeat("k", l.MaxStateKeyBytes)
			id := strings.Repeat("i", l.MaxIDBytes)
			req := &messages.ChangeState{Header: messages.Header{Scope: strings.Repeat("s", l.MaxScopeBytes), RequestID: id},
				Ops: []messages.StateOp{{Kind: "set", FrameID: id, Key: key, Value: v, TTLMillis: 1 << 40, Sliding: true}}}
			_, err = wire.Encode(req, f.Remoting.MaxMessageBytes)
			require.NoError(t, err)
			page := &messages.RangeStateReply{Result: messages.Result{Version: 1 << 62},
				Entries: []frames.StateEntry{{Key: key, Value: v, Version: 1 << 62, ExpiresAt: 1 << 62, Sliding: true}},
				Next:    key, Size: frames.StateSize{Keys: 1 << 62, Bytes: 1 << 62, Total: 1 << 62, Limit: 1 << 62}, Now: 1 << 62}
			_, err = wire.Encode(page, f.Remoting.MaxMessageBytes)
			require.NoError(t, err)

			// Explain prints the section, and what it prints loads back the same.
			var b bytes.Buffer
			require.NoError(t, f.Explain(&b))
			assert.Contains(t, b.String(), "state:\n  max_bytes: ")
			again := filepath.Join(dir, "explained.yaml")
			require.NoError(t, os.WriteFile(again, b.Bytes(), 0o600))
			g, err := Load(again)
			require.NoError(t, err)
			assert.Equal(t, f.Limits, g.Limits)
		})
	}

	bad := []struct{ name, yaml, want string }{
		{"zero state", "state:\n  max_bytes: 0\n", "state.max_bytes must be positive, got 0"},
		{"negative value", "state:\n  max_value_bytes: -1\n", "state.max_value_bytes must be positive, got -1"},
		{"key not a number", "state:\n  max_key_bytes: long\n", `state.max_key_bytes must be an integer, got str "long"`},
		{"unknown key", "state:\n  ttl: 1h\n", "state.ttl is not a known key (known here: max_bytes, max_value_bytes, max_key_bytes)"},
		{"a value above the state", "state:\n  max_bytes: 65536\n  max_value_bytes: 65537\n",
			"si.yaml:3: state.max_value_bytes (65537) must not exceed state.max_bytes (65536): a value counts against its scope's state"},
		{"a state below the default value", "state:\n  max_bytes: 4096\n",
			"si.yaml:2: state.max_bytes (4096) must be at least state.max_value_bytes (524288): a value counts against its scope's state"},
		{"a value no message carries", "state:\n  max_bytes: 4194304\n  max_value_bytes: 1048576\n",
			"si.yaml:3: state.max_value_bytes (1048576) must fit in one message with its key, scope and ids (2304 bytes more: two keys of state.max_key_bytes, the scope, two ids and 1024 of framing): at most 1046272 under remoting.max_message_bytes (1048576)"},
		{"one byte too many", "state:\n  max_value_bytes: 1046273\n", "state.max_value_bytes (1046273) must fit in one message"},
		{"a message too small for the default value", "remoting:\n  max_message_bytes: 262144\n",
			"si.yaml:2: remoting.max_message_bytes (262144) must carry a state value of state.max_value_bytes (524288) with its key, scope and ids (2304 bytes more: two keys of state.max_key_bytes, the scope, two ids and 1024 of framing): at least 526592"},
		{"keys that leave no room", "state:\n  max_key_bytes: 300000\n",
			"si.yaml:2: state.max_key_bytes leaves no room for a state value of state.max_value_bytes (524288) in one message of remoting.max_message_bytes (1048576)"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			dir := write(t, map[string]string{"si.yaml": tc.yaml})
			_, err := Load(filepath.Join(dir, "si.yaml"))
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrInvalid), "%v", err)
			assert.Contains(t, err.Error(), filepath.Join(dir, "si.yaml")+":", "names the file")
			assert.Contains(t, err.Error(), tc.want)
		})
	}

	// The flag that lowers the message cap is named as the flag.
	_, err = resolveArgs(t, "--max-message-bytes", "262144")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--max-message-bytes (262144) must carry a state value of state.max_value_bytes (524288)")
}
