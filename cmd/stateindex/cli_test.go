package main

import (
	"bytes"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every command's -h exits 0 and prints, on stdout, its synopsis, a
// description and its flags; nothing goes to stderr.
func TestEveryCommandHelpExitsZeroWithADescription(t *testing.T) {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, h := range []string{"-h", "--help", "-help"} {
			var out, errb bytes.Buffer
			code := run([]string{n, h}, &out, &errb)
			require.Equal(t, 0, code, "%s %s: stderr %s", n, h, errb.String())
			assert.Empty(t, errb.String(), "%s %s", n, h)
			text := out.String()
			assert.True(t, strings.HasPrefix(text, "Usage: stateindex "+n), "%s %s starts with its synopsis: %q", n, h, firstLine(text))
			body := strings.TrimSpace(strings.TrimPrefix(text, firstLine(text)))
			assert.GreaterOrEqual(t, len(strings.Fields(body)), 8, "%s %s describes the command: %q", n, h, body)
		}
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

func TestUnknownCommandSuggests(t *testing.T) {
	for _, c := range []struct{ arg, want string }{
		{"inpsect", `did you mean "inspect"?`},
		{"serv", `did you mean "serve"?`},
		{"verfiy", `did you mean "verify"?`},
		{"--data", `did you mean "`}, // nothing near: the list
	} {
		var out, errb bytes.Buffer
		assert.Equal(t, 2, run([]string{c.arg}, &out, &errb), c.arg)
		assert.Contains(t, errb.String(), `unknown command "`+c.arg+`"`)
		if c.arg == "--data" {
			assert.Contains(t, errb.String(), `stateindex -h`)
		} else {
			assert.Contains(t, errb.String(), c.want)
		}
		assert.Empty(t, out.String())
	}
}

// A positional argument is an error (exit 2, nothing done) with a hint of
// what was meant.
func TestUnexpectedArgumentsAreErrorsWithASuggestion(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"inspect", "data"}, "did you mean --data?"},
		{[]string{"inspect", "--data", dir, "scope=s1"}, "did you mean --scope=s1?"},
		{[]string{"verify", "--data", dir, "extra"}, "this command takes only flags"},
		{[]string{"serve", "--data", dir, "inspect"}, `"inspect" is a command of its own`},
		{[]string{"threads", "--data", dir, "stauts"}, "did you mean --status?"},
		{[]string{"version", "now"}, "this command takes only flags"},
	} {
		var out, errb bytes.Buffer
		assert.Equal(t, 2, run(c.args, &out, &errb), "%v", c.args)
		assert.Contains(t, errb.String(), "unexpected argument", "%v", c.args)
		assert.Contains(t, errb.String(), c.want, "%v", c.args)
	}
	assert.NoFileExists(t, dir+"/"+dbFile, "nothing was opened")
}

func TestVersion(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"version"}, &out, &errb), errb.String())
	assert.Regexp(t, `^stateindex \S+.* go1\.\d+`, firstLine(out.String()))
	assert.Contains(t, out.String(), "data file format 1")
}

func TestClosest(t *testing.T) {
	cands := []string{"backup", "bench", "compact", "inspect", "serve", "state", "threads", "verify"}
	assert.Equal(t, "inspect", closest("insp", cands))
	assert.Equal(t, "state", closest("stat", cands))
	assert.Equal(t, "verify", closest("verfy", cands))
	assert.Equal(t, "", closest("zzzzzz", cands))
	assert.Equal(t, "", closest("", cands))
	assert.Equal(t, 3, editDistance("kitten", "sitting"))
}
