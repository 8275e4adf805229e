package failovertest

import (
	"flag"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/internal/proctest"
)

// throughput is how long each configuration of TestSharedClusterThroughput
// runs (0: the test is skipped).
var throughput = flag.Duration("throughput", 0, "run TestSharedClusterThroughput, each configuration for this long (e.g. 10s)")

// TestSharedClusterThroughput measures what a shared-store cluster
// acknowledges per second: 1 and 3 `stateindex serve --store … --cluster`
// members on one PostgreSQL schema, the driver keeping 16 and 64 scopes
// busy (one request at a time each: a root push, then AddContextHandle
// calls of ~20 bytes, each durable before its reply). It reports, per
// configuration, acknowledged requests per second and their latency; it
// asserts nothing about the figures (the members, the driver and the
// database share this machine's cores).
//
//	STATEINDEX_CLUSTER_TEST=1 STATEINDEX_PG_URL=postgres://… go test -run TestSharedClusterThroughput -v ./internal/failovertest -args -throughput 10s
func TestSharedClusterThroughput(t *testing.T) {
	if *throughput <= 0 {
		t.Skip("a measurement, not a check: run it with -args -throughput 10s")
	}
	base := skipUnlessReady(t)
	c, schema := newCluster(t, base, false)
	t.Logf("schema %s; each configuration runs %s", schema, *throughput)
	for _, members := range []int{1, 3} {
		ports := proctest.FreePorts(t, members, true)
		var list []string
		for _, p := range ports {
			list = append(list, fmt.Sprintf("127.0.0.1:%d", p))
		}
		var procs []*proctest.Proc
		for i, m := range list {
			procs = append(procs, c.member(fmt.Sprintf("member %d", i), m, list))
		}
		for _, scopes := range []int{16, 64} {
			drv := c.start(list, members, scopes, 0, fmt.Sprintf("m%d-s%d", members, scopes))
			rep := &report{}
			warm := time.Now().Add(time.Second)
			end := warm.Add(*throughput)
			drv.WaitFor("the measured window", *throughput+time.Minute, func(l []string) bool {
				rep.feed(l)
				return len(rep.ops) > 0 && rep.ops[len(rep.ops)-1].T0 > end.UnixNano()
			})
			stopDriver(t, drv, rep)
			var lat []time.Duration
			acked, failed := 0, 0
			for _, o := range rep.ops {
				if o.T1 < warm.UnixNano() || o.T1 > end.UnixNano() {
					continue
				}
				if o.Res != "ok" {
					failed++
					continue
				}
				acked++
				lat = append(lat, time.Duration(o.T1-o.T0))
			}
			slices.Sort(lat)
			require.Positive(t, acked)
			t.Logf("members %d, scopes %2d: %6.0f acknowledged requests/s (%d in %s, %d failed attempts), latency p50 %s p99 %s",
				members, scopes, float64(acked)/end.Sub(warm).Seconds(), acked, *throughput, failed,
				percentile(lat, 0.5).Round(10*time.Microsecond), percentile(lat, 0.99).Round(10*time.Microsecond))
		}
		for _, p := range procs {
			p.Interrupt()
		}
		for _, p := range procs {
			require.NoError(t, p.Wait(30*time.Second))
		}
	}
}
