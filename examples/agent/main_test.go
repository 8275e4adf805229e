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
// finishes once approved; its working state survives every kill.
func TestAgentResumesAfterCrash(t *testing.T) {
	dir := t.TempDir()
	out, code := runAgent(t, "--data "+dir+" --crash-after 9")
	assert.Equal(t, 137, code, out)
	assert.Contains(t, out, "resume: fresh scope")
	assert.Contains(t, out, "state: run 1; topics done 0/3 []; waiting for nothing")
	assert.Contains(t, out, "simulated crash")
	assert.NotContains(t, out, "state: durability done", "killed after the topic's frame steps, before its state")

	// The state step of a topic whose frame steps are done is done now.
	out, code = runAgent(t, "--data "+dir+" --crash-after 1")
	assert.Equal(t, 137, code, out)
	assert.Contains(t, out, "resume: scope at version 11")
	assert.Contains(t, out, "state: run 2; topics done 0/3 []")
	assert.Contains(t, out, "already done: finding added to the report frame")
	assert.Contains(t, out, "ok: state: durability done")
	assert.NotContains(t, out, "ok: subframe durability", "nothing done twice")

	out, code = runAgent(t, "--data "+dir)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "state: run 3; topics done 1/3 [durability]; waiting for nothing\n  log: researched durability\n")
	assert.Contains(t, out, "already done: subframe durability completed")
	assert.Contains(t, out, "already done: state: durability done")
	assert.Contains(t, out, "ok: subframe latency")
	assert.NotContains(t, out, "ok: subframe durability", "nothing done twice")
	assert.Contains(t, out, "ok: state: waiting for approval")
	assert.Contains(t, out, "waiting for approval")

	out, code = runAgent(t, "--data "+dir+" --approve")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "pending: suspended")
	assert.Contains(t, out, "state: run 4; topics done 3/3 [compaction durability latency]; waiting for approval\n"+
		"  log: researched durability\n  log: researched latency\n  log: researched compaction\n  log: asked for approval\n",
		"the log once per step, replays included")
	assert.Contains(t, out, "already done: suspended for approval")
	assert.Contains(t, out, "ok: approved and resumed")
	assert.Contains(t, out, "ok: state: approved")
	assert.Contains(t, out, "done: the report is finished")
}
