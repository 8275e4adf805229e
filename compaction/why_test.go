package compaction

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What Fit leaves out at each level is explained by the rule that did it.
func TestLeftOutReasonNamesTheRule(t *testing.T) {
	items := []Item{
		{ID: "sys", Priority: Critical, Content: "system prompt", Seq: 1},
		{ID: "bg", Priority: Background, Content: strings.Repeat("background words ", 20), Seq: 2},
		{ID: "mid", Priority: Medium, Content: strings.Repeat("medium words ", 40), Seq: 3},
		{ID: "new", Priority: High, Content: strings.Repeat("new ", 10), Seq: 4},
	}
	prio := map[string]Priority{}
	for _, it := range items {
		prio[it.ID] = it.Priority
	}
	for _, tc := range []struct {
		min  Level
		want map[string]string // id -> a word of its reason
	}{
		{LevelAggressive, map[string]string{"bg": "low and background"}},
		{LevelCritical, map[string]string{"bg": "only critical", "mid": "only critical", "new": "only critical"}},
	} {
		t.Run(tc.min.String(), func(t *testing.T) {
			res, err := Fit(items, 60, FitOptions{MinLevel: tc.min})
			require.NoError(t, err)
			require.Equal(t, tc.min, res.Level)
			got := map[string]string{}
			for _, id := range res.Dropped {
				got[id] = LeftOutReason(res.Level, prio[id], false)
			}
			for id, word := range tc.want {
				assert.Contains(t, got[id], word, fmt.Sprintf("%s at %s", id, res.Level))
			}
		})
	}
	assert.Contains(t, LeftOutReason(LevelModerate, Medium, true), "summarized")
	assert.Contains(t, LeftOutReason(LevelAggressive, High, false), "did not fit")
	assert.Contains(t, LeftOutReason(LevelNone, High, false), "none level")
}
