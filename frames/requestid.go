package frames

// Request ids that carry their first-send time.
//
// The Go Client mints request ids as UUIDv7 (RFC 9562): the first 48 bits
// are the Unix time in milliseconds at which the id was made — the first
// time the request was sent; a resend keeps its id and so its time. The
// core reads that time to refuse a resend whose outcome may have been
// forgotten (ExpiredRequest). Parsing is pure: the caller supplies "now".

// RequestIDTime returns the first-send time (unix ns) stamped in id when id
// is a UUIDv7 in canonical form (8-4-4-4-12 hex digits, version 7, variant
// 10); ok is false for any other id, which carries no time.
func RequestIDTime(id string) (ns int64, ok bool) {
	if len(id) != 36 || id[8] != '-' || id[13] != '-' || id[18] != '-' || id[23] != '-' {
		return 0, false
	}
	var ms int64
	n := 0
	for i := 0; i < 36; i++ {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			continue
		}
		v, good := hexVal(id[i])
		if !good {
			return 0, false
		}
		if n < 12 {
			ms = ms<<4 | int64(v)
		}
		n++
	}
	if id[14] != '7' {
		return 0, false
	}
	if v, _ := hexVal(id[19]); v&0xC != 0x8 {
		return 0, false
	}
	return ms * 1e6, true
}

func hexVal(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
