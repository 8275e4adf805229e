package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConfigCommand(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(good, []byte("shards: 4\n"), 0o600))
	require.NoError(t, os.WriteFile(bad, []byte("shards: 4\nlog_level: loud\n"), 0o600))
	for _, tc := range []struct {
		name      string
		args      []string
		code      int
		out, errs string
		notOut    string
	}{
		{"explain names origins", []string{"--explain", "--config", good, "--cache-mib", "9"}, 0, "shards: 4", "", ""},
		{"explain without a file shows the defaults", []string{"--explain"}, 0, "shards: 16", "", "files read"},
		{"check a good file", []string{"--check", "--config", good}, 0, good + ": ok", "", ""},
		{"check a bad file", []string{"--check", "--config", bad}, 1, "", bad + ":2: log_level must be debug, info, warn or error", ""},
		{"check a bad flag", []string{"--check", "--config", good, "--shards", "-2"}, 1, "", "--shards must be positive, got -2", ""},
		{"check needs a file", []string{"--check"}, 1, "", "--check needs --config FILE", ""},
		{"one of explain and check", []string{"--config", good}, 2, "", "Usage: stateindex config", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(append([]string{"config"}, tc.args...), &out, &errb)
			assert.Equal(t, tc.code, code, errb.String())
			assert.Contains(t, out.String(), tc.out)
			assert.Contains(t, errb.String(), tc.errs)
			if tc.notOut != "" {
				assert.NotContains(t, out.String(), tc.notOut)
			}
		})
	}
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"config", "--explain", "--config", good, "--cache-mib", "9"}, &out, &errb))
	assert.Regexp(t, `(?m)^shards: 4 +# `+regexp.QuoteMeta(good)+`:1$`, out.String())
	assert.Regexp(t, `(?m)^  mib: 9 +# flag --cache-mib$`, out.String())
	assert.Regexp(t, `(?m)^  scopes: 4096 +# default$`, out.String())
}
