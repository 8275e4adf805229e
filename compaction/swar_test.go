package compaction

import (
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// nextSentenceRef is the byte-at-a-time reference for nextSentence. It scans s from i. The sentence is s[a:b] (trimmed; a == b when
// blank), next is where the following one starts, and fact reports whether
// it holds a number, id, path or URL. A sentence ends at a newline or after
// '.', '!' or '?' followed by whitespace, so "v1.2", "main.go" and URLs stay
// whole.
func nextSentenceRef(s string, i int) (a, b, next int, fact bool) {
	for i < len(s) && isSpace[s[i]] && s[i] != '\n' {
		i++
	}
	a = i
	prevAlnum := false
	hexRun, wordHex := 0, true
	for ; i < len(s); i++ {
		ch := s[i]
		k := class[ch]
		if k&(clDigit|clLetter) != 0 {
			if !fact {
				if k&clDigit != 0 {
					fact = true
				} else if k&clHexLetter != 0 {
					hexRun++
				} else {
					wordHex = false
				}
			}
			prevAlnum = true
			continue
		}
		if !fact && wordHex && hexRun >= minHexRun {
			fact = true
		}
		hexRun, wordHex = 0, true
		nextAlnum := i+1 < len(s) && class[s[i+1]]&(clDigit|clLetter) != 0
		switch {
		case ch == '\n':
			return a, trimEnd(s, a, i), i + 1, fact
		case k&(clDot|clEnd) != 0 && (i+1 == len(s) || isSpace[s[i+1]]):
			return a, i + 1, i + 1, fact
		case k&clJoin != 0 && (prevAlnum || nextAlnum):
			fact = true
		case k&clDot != 0 && prevAlnum && nextAlnum:
			fact = true
		}
		prevAlnum = false
	}
	if !fact && wordHex && hexRun >= minHexRun {
		fact = true
	}
	return a, trimEnd(s, a, len(s)), len(s), fact
}

func TestSWARMatchesReference(t *testing.T) {
	alphabet := []string{"a", "f", "F", "g", "Z", "0", "9", " ", "  ", "\t", "\n", "\r", ".", ". ", "!", "?", "/", "\\", "_", "@", "-", ":", "\x00", "\x1f", "\x80", "é", "日", "deadbeef", "cafebabe12", "abcdefab"}
	rapid.Check(t, func(t *rapid.T) {
		parts := rapid.SliceOfN(rapid.SampledFrom(alphabet), 0, 40).Draw(t, "parts")
		s := ""
		for _, p := range parts {
			s += p
		}
		for i := 0; i < len(s); {
			a, b, next, fact := nextSentence(s, i)
			ra, rb, rnext, rfact := nextSentenceRef(s, i)
			require.Equal(t, []int{ra, rb, rnext}, []int{a, b, next}, "%q from %d", s, i)
			require.Equal(t, rfact, fact, "%q", s[a:b])
			i = next
		}
		for i := 0; i < len(s); {
			a, b, next, irr := scanSentence(s, i)
			if !irr {
				require.Equal(t, collapseRef(s[a:b]), s[a:b], "%q: irregular whitespace missed", s[a:b])
			}
			i = next
		}
		n, changed := normalizeSpace(s)
		rn, rchanged := normalizeSpaceRef(s)
		require.Equal(t, rn, n, "%q", s)
		require.Equal(t, rchanged, changed, "%q", s)
		buf := appendCollapsed(nil, s, irregularSpace(s, false))
		require.Equal(t, collapseRef(s), string(buf), "%q", s)
	})
}

// normalizeSpaceRef is normalizeSpace written plainly.
func normalizeSpaceRef(s string) (string, bool) {
	var out []byte
	i := 0
	for i < len(s) {
		if !isSpace[s[i]] {
			out = append(out, s[i])
			i++
			continue
		}
		j, nl := i, false
		for j < len(s) && isSpace[s[j]] {
			nl = nl || s[j] == '\n'
			j++
		}
		if i > 0 && j < len(s) {
			if nl {
				out = append(out, '\n')
			} else {
				out = append(out, ' ')
			}
		}
		i = j
	}
	return string(out), string(out) != s
}

// collapseRef is appendCollapsed written plainly.
func collapseRef(s string) string {
	var out []byte
	for i := 0; i < len(s); {
		if !isSpace[s[i]] {
			out = append(out, s[i])
			i++
			continue
		}
		for i < len(s) && isSpace[s[i]] {
			i++
		}
		out = append(out, ' ')
	}
	return string(out)
}
