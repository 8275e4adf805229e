package bench

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The scenario runs: with retention records are removed and the directory
// is measured at a quarter and at the end; without, nothing is removed.
func TestLongLivedRuns(t *testing.T) {
	o := &Options{Dir: t.TempDir()}
	res, err := longLived(context.Background(), o, 2, 2*longLivedEventsPerRun*40, 1)
	require.NoError(t, err)
	require.Len(t, res.Runs, 2)
	for _, r := range res.Runs {
		assert.Equal(t, int64(2*longLivedEventsPerRun*40), r.Events)
		assert.Positive(t, r.DirQuarterBytes)
		assert.GreaterOrEqual(t, r.DirEndBytes, r.DirQuarterBytes)
		assert.Positive(t, r.OpsPerSec)
		if !r.Retention {
			assert.Zero(t, r.RecordsRemoved)
		}
	}
	assert.Positive(t, res.ThroughputRatio)
}
