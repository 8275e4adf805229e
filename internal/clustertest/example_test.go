package clustertest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/internal/proctest"
)

// TestRemoteExampleFromTwoTerminals runs what the README shows: `stateindex
// serve --listen` in one process, examples/remote in another — against a
// single server, then as a client of a two-member cluster.
func TestRemoteExampleFromTwoTerminals(t *testing.T) {
	if os.Getenv("STATEINDEX_CLUSTER_TEST") == "" {
		t.Skip("multi-process test: run `make cluster-test` (STATEINDEX_CLUSTER_TEST=1)")
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	server := proctest.Build(t, root, "./cmd/stateindex")
	example := proctest.Build(t, root, "./examples/remote")
	serving := regexp.MustCompile(`stateindex serving`)
	done := regexp.MustCompile(`^task \d+ done`)

	t.Run("server", func(t *testing.T) {
		addr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePorts(t, 1, false)[0])
		srv := proctest.Start(t, "terminal 1: stateindex serve", server, []string{"serve", "--data", t.TempDir(), "--listen", addr})
		srv.WaitLine(0, serving, 30*time.Second)

		first := proctest.Start(t, "terminal 2: examples/remote", example, []string{"--server", addr})
		first.WaitLine(0, done, 30*time.Second)
		require.NoError(t, first.Wait(30*time.Second))
		out := first.Output()
		assert.Contains(t, out, "resume: fresh scope")
		assert.Contains(t, out, "StateIndex at "+addr)

		again := proctest.Start(t, "terminal 2 again", example, []string{"--server", addr})
		again.WaitLine(0, done, 30*time.Second)
		require.NoError(t, again.Wait(30*time.Second))
		assert.Contains(t, again.Output(), "resume: scope at version 9", "the first run's nine writes are there")
		firstRoot := regexp.MustCompile(`pushed root frame (\w+)`).FindStringSubmatch(out)
		require.Len(t, firstRoot, 2)
		assert.Contains(t, again.Output(), "pushed root frame "+firstRoot[1], "the same run replays its replies")

		require.NoError(t, srv.Stop(30*time.Second))
		assert.Contains(t, srv.Output(), "stopped cleanly")
	})

	t.Run("cluster", func(t *testing.T) {
		ports := proctest.FreePorts(t, 2, true)
		members := []string{fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])}
		peers := strings.Join(members, ",")
		var procs []*proctest.Proc
		for i, m := range members {
			p := proctest.Start(t, fmt.Sprintf("member %d", i), server, []string{"serve", "--data", t.TempDir(), "--listen", m,
				"--cluster", "example", "--peers", peers, "--health-interval", "300ms"})
			procs = append(procs, p)
		}
		for _, p := range procs {
			p.WaitLine(0, serving, 30*time.Second)
		}
		for i, scope := range []string{"agent-a", "agent-b", "agent-c"} {
			ex := proctest.Start(t, "examples/remote --cluster", example, []string{"--cluster", "example", "--peers", peers,
				"--scope", scope, "--run", fmt.Sprint(i + 1)})
			ex.WaitLine(0, done, 60*time.Second)
			require.NoError(t, ex.Wait(30*time.Second))
			assert.Regexp(t, `scope agent-\w lives on 127\.0\.0\.1:\d+`, ex.Output())
		}
		for _, p := range procs {
			p.Interrupt()
		}
		for _, p := range procs {
			require.NoError(t, p.Wait(30*time.Second), "%s stops cleanly", p.Name)
		}
	})
}
