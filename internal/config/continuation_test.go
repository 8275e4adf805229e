package config

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/frames"
)

// continuation: {auto, threshold, resume_ceiling} reach frames.Config:
// off unless auto, 0.9 (900 permille) when enabled without a threshold.
func TestContinuationKeys(t *testing.T) {
	for _, c := range []struct {
		name, yaml          string
		at, ceiling, window int64
		err                 string
	}{
		{"default", "shards: 2\n", 0, frames.DefaultResumeCeiling, frames.DefaultContextWindow, ""},
		{"auto", "continuation:\n  auto: true\n", 900, frames.DefaultResumeCeiling, frames.DefaultContextWindow, ""},
		{"all", "continuation: {auto: true, threshold: 0.85, resume_ceiling: 8000}\nlimits:\n  context_window: 128000\n", 850, 8000, 128_000, ""},
		{"threshold without auto", "continuation: {threshold: 0.5}\n", 0, frames.DefaultResumeCeiling, frames.DefaultContextWindow, ""},
		{"threshold over 1", "continuation: {auto: true, threshold: 1.5}\n", 0, 0, 0, "continuation.threshold"},
		{"threshold a string", "continuation: {threshold: high}\n", 0, 0, 0, "must be a number"},
		{"ceiling zero", "continuation: {resume_ceiling: 0}\n", 0, 0, 0, "continuation.resume_ceiling"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := write(t, map[string]string{"main.yaml": c.yaml})
			f, err := Load(filepath.Join(dir, "main.yaml"))
			if c.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), c.err)
				return
			}
			require.NoError(t, err)
			cfg := f.ActorsConfig(actors.DefaultConfig())
			assert.Equal(t, c.at, cfg.Frames.ContinueAt)
			assert.Equal(t, c.ceiling, cfg.Frames.ResumeCeiling)
			assert.Equal(t, c.window, cfg.Frames.DefaultContextWindow)
			require.NoError(t, cfg.Frames.Validate())
		})
	}
}
