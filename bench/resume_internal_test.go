package bench

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestResumeTail: the snapshot of every history length falls at the same
// point of the workload's cycle (so snapshots of two lengths hold the same
// live work), at most half the interval before the head, and before the
// middle of the history (one snapshot only).
func TestResumeTail(t *testing.T) {
	for _, tc := range []struct{ events, tail int64 }{
		{20, 9}, {200, 50}, {1000, 450}, {10000, 500}, {100000, 500}, {100001, 451},
	} {
		t.Run("", func(t *testing.T) {
			tail := resumeTail(tc.events)
			assert.Equal(t, tc.tail, tail, "events=%d", tc.events)
			assert.LessOrEqual(t, tail, int64(resumeSnapshotEvery/2))
			assert.Greater(t, 2*(tc.events-tail), tc.events, "a second snapshot would land on or before the head")
			if tc.events >= 200 {
				assert.Zero(t, (tc.events-tail)%resumeCycle, "the snapshot's version a multiple of the cycle")
			}
		})
	}
}
