package config

import (
	"bytes"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
)

func TestHooksLoadAndExplain(t *testing.T) {
	dir := write(t, map[string]string{"si.yaml": `hooks:
  - name: limits
    on: [limit_reached, failed]
    scope_prefix: agents/
    goal_prefix: research
    actor: supervisor
  - name: remote-done
    on: [finished]
    actor: 10.0.0.5:8090/watcher
    timeout: 3s
  - name: grains
    on: [continued]
    kind: overseer
cluster:
  name: c
  peers: [127.0.0.1:7500]
remoting:
  listen: 127.0.0.1:7500
`})
	f, err := Load(filepath.Join(dir, "si.yaml"))
	require.NoError(t, err)
	require.Len(t, f.Hooks, 3)
	assert.Equal(t, Hook{Name: "limits", On: []string{"limit_reached", "failed"}, ScopePrefix: "agents/", GoalPrefix: "research",
		Actor: "supervisor", Timeout: DefaultHookTimeout}, f.Hooks[0])
	assert.Equal(t, 3*time.Second, f.Hooks[1].Timeout)
	assert.Equal(t, "overseer", f.Hooks[2].Kind)
	assert.Equal(t, Origin{File: filepath.Join(dir, "si.yaml"), Line: 6}, f.Origin("hooks[0].actor"))

	var out bytes.Buffer
	require.NoError(t, f.Explain(&out))
	assert.Contains(t, out.String(), "- name: limits")
	assert.Contains(t, out.String(), "on: [limit_reached, failed]")
	assert.Contains(t, out.String(), `actor: "10.0.0.5:8090/watcher"`)

	d, err := Load("")
	require.NoError(t, err)
	assert.Empty(t, d.Hooks)
}

func TestHooksRefuseBadConfiguration(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"not a list", "hooks: {name: x}\n", "hooks must be a list"},
		{"no name", "hooks:\n  - on: [failed]\n    actor: a\n", "hooks[0] needs a name"},
		{"bad name", "hooks:\n  - name: Big Name\n    on: [failed]\n    actor: a\n", "hooks[0].name must be 1..64 characters"},
		{"unknown notice", "hooks:\n  - name: x\n    on: [limit]\n    actor: a\n", `unknown notice "limit"`},
		{"no notice", "hooks:\n  - name: x\n    on: []\n    actor: a\n", "names no notice"},
		{"no target", "hooks:\n  - name: x\n    on: [failed]\n", "needs exactly one target"},
		{"two targets", "hooks:\n  - name: x\n    on: [failed]\n    actor: a\n    kind: k\n", "needs exactly one target"},
		{"identity without kind", "hooks:\n  - name: x\n    on: [failed]\n    actor: a\n    identity: i\n", "needs kind"},
		{"bad remote actor", "hooks:\n  - name: x\n    on: [failed]\n    actor: host/name\n", "NAME or HOST:PORT/NAME"},
		{"unknown key", "hooks:\n  - name: x\n    on: [failed]\n    actor: a\n    target: b\n", "hooks[0].target is not a known key"},
		{"zero timeout", "hooks:\n  - name: x\n    on: [failed]\n    actor: a\n    timeout: 0s\n", "hooks[0].timeout"},
		{"duplicate", "hooks:\n  - name: x\n    on: [failed]\n    actor: a\n  - name: x\n    on: [finished]\n    actor: b\n", `"x" is given twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := write(t, map[string]string{"si.yaml": tc.yaml})
			_, err := Load(filepath.Join(dir, "si.yaml"))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestRegistryConfiguration(t *testing.T) {
	d, err := Load("")
	require.NoError(t, err)
	c := d.ActorsConfig(actors.DefaultConfig())
	assert.False(t, c.RegistryOff)
	assert.Equal(t, 25*time.Millisecond, c.RegistryInterval)

	dir := write(t, map[string]string{"si.yaml": "registry:\n  enabled: off\n  interval: 250ms\n"})
	f, err := Load(filepath.Join(dir, "si.yaml"))
	require.NoError(t, err)
	c = f.ActorsConfig(actors.DefaultConfig())
	assert.True(t, c.RegistryOff)
	assert.Equal(t, 250*time.Millisecond, c.RegistryInterval)

	dir = write(t, map[string]string{"si.yaml": "registry:\n  interval: 0s\n"})
	_, err = Load(filepath.Join(dir, "si.yaml"))
	require.ErrorContains(t, err, "registry.interval must be positive")
}
