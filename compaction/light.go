package compaction

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Light compaction: whitespace normalised, very long contents abbreviated.
// Normalising returns its input, or a substring of it when only the ends
// change, without copying; abbreviating looks at the head and the tail
// only. Neither recounts what it did not change.

// isSpace marks ASCII whitespace. Non-ASCII spaces (NBSP, U+3000) are left
// alone: they are rare and decoding runes would slow the common path.
var isSpace = [256]bool{'\t': true, '\n': true, '\v': true, '\f': true, '\r': true, ' ': true}

// LightTokens returns the size of content under c once Light has
// normalised its whitespace (each run of ASCII whitespace replaced by one
// newline if it holds one, else by one space; both ends trimmed), before any
// abbreviation: the value for Item.LightTokens. A nil c means
// EstimateCounter. It is deterministic, and it allocates only when content
// has whitespace inside to rewrite. The value holds for the counter it was
// computed with: a handle's LightTokens must be recomputed when the counter
// changes (Fit would notice the disagreement on the contents it emits and
// fall back to counting everything, which is correct but slow).
func LightTokens(content string, c Counter) int64 {
	if c == nil {
		c = EstimateCounter{}
	}
	n, _ := normalizeSpace(content)
	return c.Count(n)
}

// LightText is content after whitespace normalization: the text whose
// count LightTokens is.
func LightText(content string) string {
	n, _ := normalizeSpace(content)
	return n
}

// normalizeSpace replaces each run of ASCII whitespace by a single newline
// if the run holds one, else by a single space, and trims both ends. It
// reports whether anything changed; if not it returns s itself. When only
// the ends change (content stored with a trailing newline, say), the result
// is a substring of s: nothing is copied.
func normalizeSpace(s string) (string, bool) {
	t := trimSpace(s)
	if !irregularSpace(t, true) {
		return t, len(t) != len(s)
	}
	var b strings.Builder
	b.Grow(len(t))
	start := 0 // t[start:j] is pending, already normalised
	j := 0
	for j < len(t) { // t has no whitespace at either end
		if !isSpace[t[j]] {
			j++
			continue
		}
		k, nl := j, false
		for k < len(t) && isSpace[t[k]] {
			nl = nl || t[k] == '\n'
			k++
		}
		sep := byte(' ')
		if nl {
			sep = '\n'
		}
		if k != j+1 || t[j] != sep { // else already a single separator: keep
			b.WriteString(t[start:j])
			b.WriteByte(sep)
			start = k
		}
		j = k
	}
	if start == 0 { // irregularSpace flagged a control byte, not whitespace
		return t, len(t) != len(s)
	}
	b.WriteString(t[start:])
	return b.String(), true
}

// trimSpace trims ASCII whitespace from both ends of s.
func trimSpace(s string) string {
	i, j := 0, len(s)
	for i < j && isSpace[s[i]] {
		i++
	}
	for j > i && isSpace[s[j-1]] {
		j--
	}
	return s[i:j]
}

// abbreviate shortens the Light form of s to about limit tokens: the head
// and the tail of s, each whitespace-normalised, around a marker saying how
// many tokens were elided. raw is Count(s) and light the count of s's Light
// form (see LightTokens). The cuts are placed by s's bytes per token, so the
// work is bounded by limit, not by len(s); they fall on rune boundaries and,
// where one is near, on whitespace. It reports false (and returns nothing)
// when light is within limit or the result would not be smaller.
func abbreviate(s string, raw, light, limit int64, c Counter) (string, int64, bool) {
	if light <= limit || light <= 0 || len(s) < 2 {
		return "", 0, false
	}
	keep := limit - limit/8 - 8 // room for the marker
	if keep < 2 {
		keep = 2
	}
	headTok := keep / 2
	tailTok := keep - headTok
	whole := raw
	if whole <= 0 {
		whole = light
	}
	n := int64(len(s))
	headEnd := cutBack(s, int(scale(n, headTok, whole)))
	tailStart := cutForward(s, int(n-scale(n, tailTok, whole)))
	if headEnd >= tailStart {
		return "", 0, false
	}
	head, _ := normalizeSpace(s[:headEnd])
	tail, _ := normalizeSpace(s[tailStart:])
	elided := light - c.Count(head) - c.Count(tail)
	if elided <= 0 {
		return "", 0, false
	}
	var num [20]byte
	digits := strconv.AppendInt(num[:0], elided, 10)
	var b strings.Builder
	b.Grow(len(head) + len(tail) + len(digits) + 32)
	b.WriteString(head)
	b.WriteString(" …[")
	b.Write(digits)
	b.WriteString(" tokens elided]… ")
	b.WriteString(tail)
	out := b.String()
	if t := c.Count(out); t >= 0 && t < light {
		return out, t, true
	}
	return "", 0, false
}

// scale returns n*part/whole without overflow for the sizes in play
// (part < whole).
func scale(n, part, whole int64) int64 {
	if part <= 0 || whole <= 0 {
		return 0
	}
	if n <= (1<<62)/part {
		return n * part / whole
	}
	return int64(float64(n) * (float64(part) / float64(whole)))
}

// cutWindow is how far a cut moves to land on whitespace.
const cutWindow = 24

// cutBack moves i back to a rune start, and to just after whitespace if
// some lies within cutWindow bytes before it.
func cutBack(s string, i int) int {
	i = min(max(i, 0), len(s))
	for i > 0 && i < len(s) && !utf8.RuneStart(s[i]) {
		i--
	}
	for k := i; k > 0 && k > i-cutWindow; k-- {
		if isSpace[s[k-1]] {
			return k
		}
	}
	return i
}

// cutForward moves i forward to a rune start, and to a whitespace byte if
// one lies within cutWindow bytes after it.
func cutForward(s string, i int) int {
	i = min(max(i, 0), len(s))
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	for k := i; k < len(s) && k < i+cutWindow; k++ {
		if isSpace[s[k]] {
			return k
		}
	}
	return i
}
