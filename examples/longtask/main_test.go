package main

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The long task fills its window, is continued once by the agent and once
// by the server, finishes, is resumed by a user, and finds a fact of its
// first link by searching the chain; the output is the same on every run.
func TestLongTaskContinuesTwiceAndResumes(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.TempDir(), &out))
	got := out.String()
	t.Log("\n" + got)

	assert.Regexp(t, `(?m)^step  1 on link 1: pressure \d+\.\d% \(\d+/1200 tokens\)$`, got, "every step reports the pressure")
	assert.Regexp(t, `(?m)^ContinueFrame \(explicit\): link 1 → link 2, (\d+) → (\d+) tokens, carried \d+ handle\(s\) and a summary; pressure \d+\.\d%`, got)
	assert.Contains(t, got, "  a late write to link 1: frame_continued, head link 2\n")
	assert.Regexp(t, `(?m)^automatic continuation on step \d+'s [a-z ]+: link 2 → link 3; pressure \d+\.\d%`, got)
	assert.Contains(t, got, "finished: link 3 completed\n")
	assert.Contains(t, got, "  link 3 resumed as link 4 (a sibling under the session)")
	assert.Contains(t, got, "GetChain: root link 1 → head link 4, 4 links\n")
	assert.Regexp(t, `(?m)^  link 1: continued at \d+ tokens\n  link 2: continued at \d+ tokens\n  link 3: completed at \d+ tokens\n  link 4: active$`, got)
	assert.Regexp(t, `(?m)^  link 1 tool_result: ".*shard 3 checksum 9f2c41d7`, got, "the fact is found in the first link")

	// The explicit continuation frees context; the automatic one comes at
	// the threshold and leaves the new link under it.
	m := regexp.MustCompile(`link 1 → link 2, (\d+) → (\d+) tokens`).FindStringSubmatch(got)
	require.Len(t, m, 3)
	assert.Less(t, atoi(t, m[2]), atoi(t, m[1]))
	auto := regexp.MustCompile(`link 2 → link 3; pressure (\d+)\.\d%`).FindStringSubmatch(got)
	require.Len(t, auto, 2)
	assert.Less(t, atoi(t, auto[1]), 90)
	before := got[:strings.Index(got, "automatic continuation on step")]
	assert.Regexp(t, `pressure [6-9]\d\.\d% \(\d+/1200 tokens\)\n$`, before, "the step before was near the threshold")

	// The same on every run.
	var again bytes.Buffer
	require.NoError(t, run(t.TempDir(), &again))
	assert.Equal(t, got, again.String())
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}
