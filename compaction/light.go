package compaction

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Light compaction: whitespace normalised, very long contents abbreviated.
// Both return their input unchanged (no copy, no recount) when there is
// nothing to do, which is the common case for content stored already
// trimmed.

// isSpace marks ASCII whitespace. Non-ASCII spaces (NBSP, U+3000) are left
// alone: they are rare and decoding runes would slow the common path.
var isSpace = [256]bool{'\t': true, '\n': true, '\v': true, '\f': true, '\r': true, ' ': true}

// normalizeSpace replaces each run of ASCII whitespace by a single newline
// if the run holds one, else by a single space, and trims both ends. It
// reports whether anything changed; if not it returns s itself.
func normalizeSpace(s string) (string, bool) {
	if len(s) == 0 || (!isSpace[s[0]] && !isSpace[s[len(s)-1]] && !irregularSpace(s, true)) {
		return s, false
	}
	var b strings.Builder
	b.Grow(len(s))
	start := 0 // s[start:j] is pending, already normalised
	j := 0
	for j < len(s) {
		if !isSpace[s[j]] {
			j++
			continue
		}
		k, nl := j, false
		for k < len(s) && isSpace[s[k]] {
			nl = nl || s[k] == '\n'
			k++
		}
		sep := byte(' ')
		if nl {
			sep = '\n'
		}
		switch {
		case j == 0 || k == len(s): // leading or trailing: drop
			b.WriteString(s[start:j])
			start = k
		case k == j+1 && s[j] == sep: // already a single separator: keep
		default:
			b.WriteString(s[start:j])
			b.WriteByte(sep)
			start = k
		}
		j = k
	}
	b.WriteString(s[start:])
	if out := b.String(); out != s {
		return out, true
	}
	return s, false // irregularSpace flagged a control byte, not whitespace
}

// abbreviate shortens s, of tokens tokens, to about limit tokens: its head
// and tail around a marker saying how many tokens were elided. Cuts fall on
// rune boundaries and, where one is near, on whitespace. It returns s
// unchanged when the result would not be smaller.
func abbreviate(s string, tokens, limit int64, c Counter) (string, int64) {
	if tokens <= limit || tokens <= 0 || len(s) < 2 {
		return s, tokens
	}
	keep := limit - limit/8 - 8 // room for the marker
	if keep < 2 {
		keep = 2
	}
	headTok := keep / 2
	tailTok := keep - headTok
	n := int64(len(s))
	headEnd := int(scale(n, headTok, tokens))
	tailStart := int(n - scale(n, tailTok, tokens))
	headEnd = cutBack(s, headEnd)
	tailStart = cutForward(s, tailStart)
	if headEnd >= tailStart {
		return s, tokens
	}
	head := strings.TrimRight(s[:headEnd], " \t\n\v\f\r")
	tail := strings.TrimLeft(s[tailStart:], " \t\n\v\f\r")
	elided := tokens - c.Count(head) - c.Count(tail)
	if elided <= 0 {
		return s, tokens
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
	if t := c.Count(out); t >= 0 && t < tokens {
		return out, t
	}
	return s, tokens
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
