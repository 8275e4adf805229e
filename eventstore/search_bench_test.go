package eventstore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/internal/chaintest"
)

// buildBenchChain writes a chain of links links holding about events
// events in all (handles of ~200 bytes, a tool call every 10th, one handle
// in 100 holding "needle-N") to a durable bolt file, and returns it
// reopened, with the chain's links.
func buildBenchChain(tb testing.TB, dir string, links, events int) (*eventstore.BoltStore, eventstore.Chain) {
	path := filepath.Join(dir, "chain.db")
	st, err := eventstore.Open(path, &eventstore.Options{NoSync: true})
	require.NoError(tb, err)
	b := chaintest.New(st, "bench")
	b.Batch = 1000
	per := events / links
	prev := ""
	n := 0
	for l := 0; l < links; l++ {
		id := fmt.Sprintf("L%d", l)
		if prev != "" {
			require.NoError(tb, b.Continue(prev, id))
		}
		require.NoError(tb, b.Start(id, prev, "L0", fmt.Sprintf("link %d of the long task", l), 1<<50))
		for i := 0; i < per-2; i++ {
			n++
			text := fmt.Sprintf("step %d: read the file internal/pkg%d/file%d.go, found %d matches of the pattern in %d lines; the build passed and the tests ran in %d ms without failure, moving on to the next part of the plan.", n, n%97, n%13, n%7, n%1000, n%5000)
			if n%100 == 0 {
				text += fmt.Sprintf(" needle-%d", n)
			}
			if i%10 == 9 {
				require.NoError(tb, b.Tool(id, fmt.Sprintf("c%d", n), "grep", "grep -rn pattern internal/", text))
				i++ // two events
				continue
			}
			require.NoError(tb, b.Add(id, fmt.Sprintf("h%d", n), frames.RoleAssistant, text))
		}
		prev = id
	}
	require.NoError(tb, b.Flush())
	require.NoError(tb, st.Close())
	st, err = eventstore.Open(path, nil) // durable, as a server opens it
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = st.Close() })
	c, err := eventstore.ResolveChain(context.Background(), prev, eventstore.StoreLinks(st, "bench", nil))
	require.NoError(tb, err)
	return st, c
}

// BenchmarkSearchChain: SearchChain's search over a 100k-event chain of
// four links in a durable file; "page" is the first page of 50 hits,
// "all" a query with no hit (every record of the chain read).
func BenchmarkSearchChain(b *testing.B) {
	st, c := buildBenchChain(b, b.TempDir(), 4, 100_000)
	info, err := st.Stream(context.Background(), "bench")
	require.NoError(b, err)
	b.Logf("chain %v: %d events", c.IDs(), info.Version)
	for _, tc := range []struct {
		name  string
		text  string
		regex bool
	}{
		{"substring/page", "needle-", false},
		{"substring/all", "zebra-no-hit", false},
		{"regex/page", `needle-\d+`, true},
		{"regex/all", `zebra-\d+`, true},
		{"regex-no-literal/all", `[zq]ebra-\d+`, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			hits := 0
			for i := 0; i < b.N; i++ {
				res, err := eventstore.Search(context.Background(), st, eventstore.SearchQuery{Scope: "bench", Links: c.Links, Text: tc.text, Regex: tc.regex})
				if err != nil {
					b.Fatal(err)
				}
				hits = len(res.Hits)
			}
			b.ReportMetric(float64(hits), "hits")
		})
	}
}
