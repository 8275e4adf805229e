package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const childArgs = "STATEINDEX_AGENT_ARGS"

// TestMain lets the test binary run the example itself, as a child process
// that can die midway.
func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(childArgs); ok {
		os.Args = append([]string{"agent"}, strings.Fields(args)...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func runAgent(t *testing.T, args string) (string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childArgs+"="+args)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return string(out), code
}

// The example dies midway, runs again and continues where it stopped, then
// finishes once approved.
func TestAgentResumesAfterCrash(t *testing.T) {
	dir := t.TempDir()
	out, code := runAgent(t, "--data "+dir+" --crash-after 9")
	assert.Equal(t, 137, code, out)
	assert.Contains(t, out, "resume: fresh scope")
	assert.Contains(t, out, "simulated crash")

	out, code = runAgent(t, "--data "+dir)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "resume: scope at version 10")
	assert.Contains(t, out, "already done: subframe durability completed")
	assert.Contains(t, out, "ok: subframe latency")
	assert.NotContains(t, out, "ok: subframe durability", "nothing done twice")
	assert.Contains(t, out, "waiting for approval")

	out, code = runAgent(t, "--data "+dir+" --approve")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "pending: suspended")
	assert.Contains(t, out, "already done: suspended for approval")
	assert.Contains(t, out, "ok: approved and resumed")
	assert.Contains(t, out, "done: the report is finished")
}
