package compaction

import (
	"math/bits"
	"unicode/utf8"
)

// Byte scanning eight bytes at a time ("SIMD within a register"). Context
// contents are scanned on every pack that must shrink, so whitespace checks
// and sentence splitting are kept to a fraction of a nanosecond per byte.
// Every mask below is exact per byte: high bit set where the byte matches.

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// load8 returns s[i:i+8] as a little-endian word; the compiler merges the
// loads.
func load8(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// loadTail returns s[i:] (fewer than 8 bytes) as a word padded with zeros.
func loadTail(s string, i int) uint64 {
	var x uint64
	for k := len(s) - 1; k >= i; k-- {
		x = x<<8 | uint64(s[k])
	}
	return x
}

// zeroBytes marks the bytes of v that are 0.
func zeroBytes(v uint64) uint64 { return ^(((v &^ msb) + (msb - lsb)) | v) & msb }

// eqBytes marks the bytes of x equal to c.
func eqBytes(x uint64, c byte) uint64 { return zeroBytes(x ^ (lsb * uint64(c))) }

// ltBytes marks the bytes of x below n (n <= 0x80).
func ltBytes(x uint64, n byte) uint64 { return ^(((x &^ msb) + lsb*uint64(0x80-n)) | x) & msb }

// rangeBytes marks the bytes of x in [lo, hi] (hi < 0x80).
func rangeBytes(x uint64, lo, hi byte) uint64 { return ltBytes(x, hi+1) &^ ltBytes(x, lo) }

// compress gathers the high bits of m into the low 8 bits, byte k to bit k.
func compress(m uint64) uint64 { return ((m >> 7) * 0x0102040810204080) >> 56 }

// irregularSpace reports whether s has a whitespace byte other than a lone
// ' ' (or a lone '\n' when newlines are allowed) between other bytes: a run,
// a tab, a carriage return. Control bytes below 0x21 are reported too (a
// false alarm the callers tolerate). Leading and trailing bytes are not
// checked. One branch per eight bytes.
func irregularSpace(s string, allowNL bool) bool {
	var nlOK uint64 // msb in each byte where '\n' is allowed
	if allowNL {
		nlOK = msb
	}
	var carry uint64 // msb of byte 0: the previous word's last byte was small
	i := 0
	for ; i+8 <= len(s); i += 8 {
		x := load8(s, i)
		small := ltBytes(x, 0x21)
		if sp := eqBytes(x, ' '); small != sp && small&^(sp|eqBytes(x, '\n')&nlOK) != 0 {
			return true // a small byte that is neither ' ' nor an allowed '\n'
		}
		if small&(small<<8|carry) != 0 {
			return true // two in a row
		}
		carry = small >> 56
	}
	if i < len(s) {
		x := loadTail(s, i) | ^uint64(0)<<(8*uint(len(s)-i))&msb // padding is not small
		small := ltBytes(x, 0x21)
		ok := eqBytes(x, ' ') | eqBytes(x, '\n')&nlOK
		return small&^ok|small&(small<<8|carry) != 0
	}
	return false
}

// scanSentence finds the sentence starting at i, blanks skipped: s[a:b],
// trimmed (a == b when blank). It ends at a newline (excluded) or just after
// '.', '!' or '?' followed by whitespace or the end, so "v1.2", "main.go"
// and URLs stay whole; next is where the following one starts. irregular
// reports whitespace inside that appendCollapsed would rewrite (or, rarely,
// a control byte: a false alarm that only costs a slower path).
func scanSentence(s string, i int) (a, b, next int, irregular bool) {
	a, b, next, _ = scanSentenceUpTo(s, i, len(s))
	return a, b, next, irregularSpace(s[a:b], false)
}

// scanSentenceUpTo is scanSentence looking no further than lim (<= len(s)),
// without the whitespace check (the caller makes it on the sentences it
// takes). If the sentence does not end before lim, it is clipped: s[a:b] is
// its part before lim, cut back to the last whitespace if it has one (so
// that it ends with a whole word), and next is lim. One pass, eight bytes at
// a time.
func scanSentenceUpTo(s string, i, lim int) (a, b, next int, clipped bool) {
	for i < lim && isSpace[s[i]] && s[i] != '\n' {
		i++
	}
	a = i
	for ; i < lim; i += 8 {
		var x uint64
		if i+8 <= len(s) {
			x = load8(s, i)
		} else {
			x = loadTail(s, i) // padding is 0: not a stop
		}
		for stop := eqBytes(x, '\n') | eqBytes(x, '.') | eqBytes(x, '!') | eqBytes(x, '?'); stop != 0; stop &= stop - 1 {
			k := i + bits.TrailingZeros64(stop)>>3
			if k >= lim {
				break
			}
			if s[k] == '\n' {
				return a, trimEnd(s, a, k), k + 1, false
			}
			if k+1 == len(s) || isSpace[s[k+1]] {
				return a, trimEnd(s, a, k+1), k + 1, false
			}
		}
	}
	if lim >= len(s) {
		return a, trimEnd(s, a, len(s)), len(s), false
	}
	b = lim
	for k := lim; k > a; k-- {
		if isSpace[s[k-1]] {
			b = k
			break
		}
	}
	if b == lim { // one word up to lim: cut on a rune boundary
		for b > a && !utf8.RuneStart(s[b]) {
			b--
		}
	}
	return a, trimEnd(s, a, b), lim, true
}

// hasFact reports whether a sentence holds an exact fact: a digit; one of
// '/', '\\', '_', '@' next to a letter or digit (paths, URLs, snake_case,
// e-mail); a '.' between two (main.go, example.com); or a word of at least
// minHexRun hex letters (deadbeef). Bytes are screened eight at a time; the
// rare candidates are confirmed one by one.
func hasFact(s string) bool {
	var prevHex uint64 // hex-letter bits of the previous word
	hexChecked := false
	for i := 0; i < len(s); i += 8 {
		var x uint64
		if i+8 <= len(s) {
			x = load8(s, i)
		} else {
			x = loadTail(s, i)
		}
		if rangeBytes(x, '0', '9') != 0 {
			return true
		}
		if m := eqBytes(x, '/') | eqBytes(x, '\\') | eqBytes(x, '_') | eqBytes(x, '@') | eqBytes(x, '.'); m != 0 {
			for ; m != 0; m &= m - 1 {
				k := i + bits.TrailingZeros64(m)>>3
				before := k > 0 && isAlnum(s[k-1])
				after := k+1 < len(s) && isAlnum(s[k+1])
				if (s[k] != '.' && (before || after)) || (before && after) {
					return true
				}
			}
		}
		if hexChecked {
			continue
		}
		h := compress(rangeBytes(x|lsb*0x20, 'a', 'f'))
		w := h<<8 | prevHex // 16 consecutive bytes, oldest first
		if w&(w>>1)&(w>>2)&(w>>3)&(w>>4)&(w>>5)&(w>>6)&(w>>7) != 0 {
			if hexWord(s) {
				return true
			}
			hexChecked = true // the whole sentence has no hex word
		}
		prevHex = h
	}
	return false
}

func isAlnum(c byte) bool { return class[c]&(clDigit|clLetter) != 0 }

// hexWord reports whether s has a word (a maximal run of letters and
// digits) of at least minHexRun bytes, all hex letters.
func hexWord(s string) bool {
	run, allHex := 0, true
	for i := 0; i <= len(s); i++ {
		if i < len(s) && isAlnum(s[i]) {
			run++
			allHex = allHex && class[s[i]]&clHexLetter != 0
			continue
		}
		if allHex && run >= minHexRun {
			return true
		}
		run, allHex = 0, true
	}
	return false
}
