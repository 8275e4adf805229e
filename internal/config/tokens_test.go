package config

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
)

func TestTokenCountersLoadAndWire(t *testing.T) {
	dir := write(t, map[string]string{"si.yaml": `tokens:
  counter: o200k_base
  scopes:
    - prefix: agents/
      counter: cl100k_base
    - prefix: agents/cheap/
      counter: estimate
`})
	f, err := Load(filepath.Join(dir, "si.yaml"))
	require.NoError(t, err)
	assert.Equal(t, "o200k_base", f.Tokens.Counter)
	assert.Equal(t, []TokenScope{{"agents/", "cl100k_base"}, {"agents/cheap/", "estimate_bytes_div_4"}}, f.Tokens.Scopes,
		"names are kept canonical: the alias reads as the estimate's name")
	assert.Equal(t, Origin{File: filepath.Join(dir, "si.yaml"), Line: 5}, f.Origin("tokens.scopes[0].counter"))

	var c actors.Config
	require.NoError(t, f.Counters(&c))
	assert.Equal(t, "o200k_base", c.CounterName)
	require.Len(t, c.Counters, 2)
	assert.Equal(t, "cl100k_base", c.Counters[0].Name)
	ct, ok := c.CounterByName("cl100k_base")
	require.True(t, ok)
	assert.Equal(t, c.Counters[0].Counter.Count("x y z"), ct.Count("x y z"))

	var out bytes.Buffer
	require.NoError(t, f.Explain(&out))
	assert.Contains(t, out.String(), "counter: o200k_base")
	assert.Contains(t, out.String(), "- prefix: agents/")
	assert.Contains(t, out.String(), "counter: cl100k_base")
}

func TestTokenCountersDefaultIsTheEstimate(t *testing.T) {
	f, err := Load("")
	require.NoError(t, err)
	assert.Equal(t, "estimate_bytes_div_4", f.Tokens.Counter)
	assert.Empty(t, f.Tokens.Scopes)
	var out bytes.Buffer
	require.NoError(t, f.Explain(&out))
	assert.Contains(t, out.String(), "scopes: []")
}

func TestTokenCountersRefuseBadConfiguration(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown server counter", "tokens:\n  counter: p50k_base\n",
			`tokens.counter must be a known token counter (cl100k_base, estimate_bytes_div_4, o200k_base), got "p50k_base"`},
		{"unknown scope counter", "tokens:\n  scopes:\n    - prefix: a/\n      counter: gpt2\n",
			`tokens.scopes[0].counter must be a known token counter (cl100k_base, estimate_bytes_div_4, o200k_base), got "gpt2"`},
		{"no prefix", "tokens:\n  scopes:\n    - counter: o200k_base\n", "tokens.scopes[0] needs a prefix"},
		{"empty prefix", "tokens:\n  scopes:\n    - prefix: \"\"\n      counter: o200k_base\n", "tokens.scopes[0].prefix must not be empty"},
		{"no counter", "tokens:\n  scopes:\n    - prefix: a/\n", "tokens.scopes[0] needs a counter"},
		{"unknown key", "tokens:\n  scopes:\n    - prefix: a/\n      counter: o200k_base\n      model: x\n",
			"tokens.scopes[0].model is not a known key (known here: prefix, counter)"},
		{"prefix twice", "tokens:\n  scopes:\n    - {prefix: a/, counter: o200k_base}\n    - {prefix: a/, counter: cl100k_base}\n",
			`tokens.scopes[1].prefix "a/" is given twice`},
		{"not a list", "tokens:\n  scopes: o200k_base\n", "tokens.scopes must be a list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := write(t, map[string]string{"si.yaml": tc.yaml})
			_, err := Load(filepath.Join(dir, "si.yaml"))
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrInvalid))
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
