package config

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
)

// retention.hold_for_subscribers reaches actors.Config.SubscriptionHold;
// it is off by default and may not be negative.
func TestHoldForSubscribers(t *testing.T) {
	assert.Zero(t, Default().ActorsConfig(actors.DefaultConfig()).SubscriptionHold, "retention does not wait by default")
	dir := write(t, map[string]string{"a.yaml": "retention:\n  hold_for_subscribers: 10m\n", "bad.yaml": "retention:\n  hold_for_subscribers: -1m\n"})
	f, err := Load(filepath.Join(dir, "a.yaml"))
	require.NoError(t, err)
	assert.Equal(t, 10*time.Minute, f.ActorsConfig(actors.DefaultConfig()).SubscriptionHold)
	_, err = Load(filepath.Join(dir, "bad.yaml"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "retention.hold_for_subscribers")
}
