package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const childEnv = "STATEINDEX_MINIMAL_DATA"

// TestMain lets the test binary run the program itself, as a child process
// whose standard error the test can read.
func TestMain(m *testing.M) {
	if dir, ok := os.LookupEnv(childEnv); ok {
		os.Args = []string{"minimal", "--data", dir}
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// readmeBlock is the Go code of README.md between the minimal markers.
func readmeBlock(t *testing.T) string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)<!-- minimal:begin -->\n```go\n(.*?)```\n<!-- minimal:end -->").FindSubmatch(readme)
	require.NotNil(t, m, "README.md has the minimal example between its markers")
	return string(m[1])
}

func TestReadmeShowsThisProgramsLines(t *testing.T) {
	block := readmeBlock(t)
	require.Contains(t, block, "actors.Start(", "the block is the example, not an empty fence")
	src, err := os.ReadFile("main.go")
	require.NoError(t, err)
	// In main.go the lines sit inside run: one tab deeper.
	var indented strings.Builder
	for _, line := range strings.SplitAfter(block, "\n") {
		if strings.TrimSpace(line) != "" {
			indented.WriteString("\t")
		}
		indented.WriteString(line)
	}
	assert.Contains(t, string(src), indented.String(), "README.md's block is main.go's lines, verbatim")
}

var output = regexp.MustCompile(`^frame [0-9a-f]{32}: pack of [1-9][0-9]* tokens \(budget 4000\)\n(?s:.*)Goal: write the report\n$`)

func TestRunCreatesItsDirectoryAndCanRunAgain(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "not", "yet")
	var ids []string
	for i := 0; i < 2; i++ {
		var out bytes.Buffer
		require.NoError(t, run(context.Background(), dir, &out), "run %d", i+1)
		require.Regexp(t, output, out.String())
		ids = append(ids, strings.Fields(out.String())[1])
	}
	assert.NotEqual(t, ids[0], ids[1], "each run pushes (and ends) a frame of its own")
	_, err := os.Stat(filepath.Join(dir, "stateindex.db"))
	assert.NoError(t, err)
}

func TestTheProgramIsQuiet(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+filepath.Join(t.TempDir(), "data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stderr: %s", stderr.String())
	assert.Regexp(t, output, stdout.String())
	assert.Empty(t, stderr.String(), "no logs on standard error")
}

func TestRunReportsAnUnusableDirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	var out bytes.Buffer
	err := run(context.Background(), filepath.Join(file, "data"), &out)
	require.Error(t, err)
	assert.Empty(t, out.String())
}
