package compaction

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestUnits(t *testing.T) {
	items := []Item{
		{ID: "a", Priority: Low, Seq: 3},
		{ID: "call", Priority: Medium, Seq: 1, Group: "t1"},
		{ID: "b", Priority: High, Seq: 2, Mandatory: true},
		{ID: "result", Priority: High, Seq: 5, Group: "t1"},
		{ID: "other-call", Priority: Background, Seq: 4, Group: "t2", Mandatory: true},
	}
	us := Units(items)
	assert.Len(t, us, 4)
	assert.Equal(t, []string{"a"}, ids(us[0].Items))
	assert.Equal(t, []string{"call", "result"}, ids(us[1].Items))
	assert.Equal(t, High, us[1].Priority, "a unit takes its most important priority")
	assert.Equal(t, int64(5), us[1].Seq, "and its newest Seq")
	assert.False(t, us[1].Mandatory)
	assert.Equal(t, []string{"b"}, ids(us[2].Items))
	assert.True(t, us[2].Mandatory)
	assert.Equal(t, []string{"other-call"}, ids(us[3].Items))
	assert.True(t, us[3].Mandatory)
	assert.Empty(t, Units(nil))
}

func TestValidateItems(t *testing.T) {
	assert.NoError(t, ValidateItems(nil))
	assert.NoError(t, ValidateItems([]Item{{ID: "a", Priority: Critical}, {ID: "b", Priority: Background}}))
	assert.ErrorIs(t, ValidateItems([]Item{{ID: "", Priority: High}}), ErrEmptyID)
	assert.ErrorIs(t, ValidateItems([]Item{{ID: "a", Priority: High}, {ID: "a", Priority: Low}}), ErrDuplicateID)
	assert.ErrorIs(t, ValidateItems([]Item{{ID: "a"}}), ErrInvalidPriority)
	assert.ErrorIs(t, ValidateItems([]Item{{ID: "a", Priority: High, Tokens: -5}}), ErrNegativeTokens)
}

func TestPriorityAndLevelNames(t *testing.T) {
	for p := Critical; p <= Background; p++ {
		got, err := ParsePriority(p.String())
		assert.NoError(t, err)
		assert.Equal(t, p, got)
	}
	_, err := ParsePriority("urgent")
	assert.ErrorIs(t, err, ErrInvalidPriority)
	assert.Equal(t, "moderate", LevelModerate.String())
	assert.False(t, Level(9).Valid())
}
