package compaction

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEstimateCounter(t *testing.T) {
	tests := []struct {
		s    string
		want int64
	}{
		{"", 0},
		{"a", 1},
		{"abcd", 1},
		{"abcde", 2},
		{"hello world!", 3},
		{"你好世界", 3}, // 12 bytes: counted by bytes, not runes
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, EstimateCounter{}.Count(tc.s), "%q", tc.s)
	}
	words := CounterFunc(func(s string) int64 { return int64(len(strings.Fields(s))) })
	assert.Equal(t, int64(3), words.Count(" a b  c "))
}

func TestNormalizeSpace(t *testing.T) {
	tests := []struct {
		in, want string
		changed  bool
	}{
		{"", "", false},
		{"plain text", "plain text", false},
		{"line one\nline two", "line one\nline two", false},
		{"  lead", "lead", true},
		{"trail \n", "trail", true},
		{"a  b", "a b", true},
		{"a\tb", "a b", true},
		{"a \n\n  b", "a\nb", true},
		{"a\r\nb", "a\nb", true},
		{" \t\n ", "", true},
		{"x", "x", false},
		{" ", "", true},
		{"a b\tc  d\n\ne", "a b c d\ne", true},
	}
	for _, tc := range tests {
		got, changed := normalizeSpace(tc.in)
		assert.Equal(t, tc.want, got, "%q", tc.in)
		assert.Equal(t, tc.changed, changed, "%q", tc.in)
	}
}

func TestAbbreviate(t *testing.T) {
	c := EstimateCounter{}
	abbrev := func(s string, limit int64) (string, int64) {
		if out, n, ok := abbreviate(s, c.Count(s), LightTokens(s, c), limit, c); ok {
			return out, n
		}
		n, _ := normalizeSpace(s)
		return n, c.Count(n)
	}
	t.Run("short content is left alone", func(t *testing.T) {
		s := text(400)
		got, n := abbrev(s, 512)
		assert.Equal(t, s, got)
		assert.Equal(t, c.Count(s), n)
	})
	t.Run("head and tail kept around a marker", func(t *testing.T) {
		s := "BEGIN " + text(20000) + " END"
		got, n := abbrev(s, 512)
		require.Less(t, n, c.Count(s))
		assert.Equal(t, c.Count(got), n)
		assert.LessOrEqual(t, n, int64(512))
		assert.True(t, strings.HasPrefix(got, "BEGIN "))
		assert.True(t, strings.HasSuffix(got, " END"))
		assert.Regexp(t, `^BEGIN .* …\[\d+ tokens elided\]… .* END$`, got)
	})
	t.Run("head and tail normalised, the middle never looked at", func(t *testing.T) {
		s := "  BEGIN  \t here " + text(20000) + "\n\n END  "
		got, n := abbrev(s, 512)
		assert.Equal(t, c.Count(got), n)
		assert.True(t, strings.HasPrefix(got, "BEGIN here "), got[:20])
		assert.True(t, strings.HasSuffix(got, "\nEND"))
		elided := LightTokens(s, c) - c.Count(got[:strings.Index(got, " …[")]) - c.Count(got[strings.Index(got, "]… ")+len("]… "):])
		assert.Contains(t, got, fmt.Sprintf("…[%d tokens elided]…", elided))
	})
	t.Run("cuts on rune boundaries", func(t *testing.T) {
		s := strings.Repeat("日本語のテキスト", 2000)
		got, n := abbrev(s, 100)
		assert.True(t, utf8.ValidString(got))
		assert.Less(t, n, c.Count(s))
	})
	t.Run("tiny limits still shrink", func(t *testing.T) {
		s := text(4000)
		got, n := abbrev(s, 1)
		assert.Less(t, n, c.Count(s))
		assert.Contains(t, got, "tokens elided")
	})
}
