package frames

import (
	"fmt"
	"unicode/utf8"
)

// Config bounds what a command may carry (DESIGN §6). The zero value is not
// usable; start from DefaultConfig.
type Config struct {
	MaxScopeBytes      int
	MaxIDBytes         int
	MaxGoalBytes       int
	MaxInputsBytes     int
	MaxContentBytes    int
	MaxNameBytes       int // kinds, tool names, notes, refs
	MaxDepth           int64
	MaxHandlesPerFrame int
	// ContentRefBytes is the size from which a handle's content is stored
	// once, by reference (ContentStored); 0 keeps every content inline.
	ContentRefBytes int
	// DefaultContextWindow is the context window, in tokens, of a frame
	// that has none of its own (0: DefaultContextWindow).
	DefaultContextWindow int64
	// ContinueAt is the pressure, in permille of the window, at which a
	// context-changing mutation continues its frame in the same append
	// (automatic continuation); 0 is off.
	ContinueAt int64
	// ResumeCeiling is the default of ContinueFrame.ResumeCeiling: the
	// tokens of trailing context a continuation carries (0:
	// DefaultResumeCeiling).
	ResumeCeiling int64
	// CalibrationSamples is how many calibration samples a scope keeps
	// (0: DefaultCalibrationSamples; at most MaxCalibrationSamples);
	// CalibrationMargin is the margin taken off a calibrated pack budget,
	// in permille (0..999; DefaultConfig: DefaultCalibrationMargin).
	CalibrationSamples int
	CalibrationMargin  int
	// Unestimated is what a spend reservation without an estimate gets
	// ("": EstimateDeny), and UnestimatedCap what EstimateCap reserves
	// (micro-units, positive with that policy).
	Unestimated    EstimatePolicy
	UnestimatedCap int64
	// MaxStateBytes bounds one scope's key-value state (both levels, as
	// KVSize counts it), MaxStateValueBytes one key's value (a list: all
	// its items) and MaxStateKeyBytes a key (kv.go).
	MaxStateBytes      int
	MaxStateValueBytes int
	MaxStateKeyBytes   int
}

// DefaultConfig returns the limits of DESIGN §6.
func DefaultConfig() Config {
	return Config{
		MaxScopeBytes:      128,
		MaxIDBytes:         64,
		MaxGoalBytes:       4 << 10,
		MaxInputsBytes:     64 << 10,
		MaxContentBytes:    256 << 10,
		MaxNameBytes:       4 << 10,
		MaxDepth:           64,
		MaxHandlesPerFrame: 100_000,
		ContentRefBytes:    DefaultContentRefBytes,

		DefaultContextWindow: DefaultContextWindow,
		ResumeCeiling:        DefaultResumeCeiling,
		CalibrationSamples:   DefaultCalibrationSamples,
		CalibrationMargin:    DefaultCalibrationMargin,

		MaxStateBytes:      DefaultMaxStateBytes,
		MaxStateValueBytes: DefaultMaxStateValueBytes,
		MaxStateKeyBytes:   DefaultMaxStateKeyBytes,
	}
}

// Validate checks that every bound is positive.
func (c Config) Validate() error {
	for _, v := range []int64{int64(c.MaxScopeBytes), int64(c.MaxIDBytes), int64(c.MaxGoalBytes), int64(c.MaxInputsBytes),
		int64(c.MaxContentBytes), int64(c.MaxNameBytes), c.MaxDepth, int64(c.MaxHandlesPerFrame),
		int64(c.MaxStateBytes), int64(c.MaxStateValueBytes), int64(c.MaxStateKeyBytes)} {
		if v <= 0 {
			return invalid("config bounds must be positive: %+v", c)
		}
	}
	if c.DefaultContextWindow < 0 || c.ResumeCeiling < 0 || c.ContinueAt < 0 || c.ContinueAt > 1000 {
		return invalid("context window %d, resume ceiling %d and continue_at %d permille must be non-negative (continue_at at most 1000)",
			c.DefaultContextWindow, c.ResumeCeiling, c.ContinueAt)
	}
	if !c.Unestimated.Valid() || c.UnestimatedCap < 0 || (c.Unestimated == EstimateCap) != (c.UnestimatedCap > 0) {
		return invalid("unestimated spend policy %q with cap %d: deny, allow, or cap with a positive cap (and a cap only with it)",
			c.Unestimated, c.UnestimatedCap)
	}
	if c.ContentRefBytes < 0 {
		return invalid("content_ref_bytes %d is negative", c.ContentRefBytes)
	}
	return c.validateCalibration()
}

// ValidateScope checks a scope name against ^[A-Za-z0-9._:-]{1,max}$.
func ValidateScope(scope string, max int) error {
	if len(scope) == 0 || len(scope) > max {
		return fmt.Errorf("%w: length %d not in 1..%d", ErrInvalidScope, len(scope), max)
	}
	for i := 0; i < len(scope); i++ {
		c := scope[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return fmt.Errorf("%w: byte 0x%02x at %d (allowed: A-Z a-z 0-9 . _ : -)", ErrInvalidScope, c, i)
		}
	}
	return nil
}

// ValidateID checks an id: 1..max bytes of printable ASCII, no spaces.
func ValidateID(what, id string, max int) error {
	if len(id) == 0 || len(id) > max {
		return fmt.Errorf("%w: %s length %d not in 1..%d", ErrInvalidID, what, len(id), max)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("%w: %s has byte 0x%02x at %d (printable ASCII only)", ErrInvalidID, what, c, i)
		}
	}
	return nil
}

func checkText(what, s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("%w: %s is %d bytes, limit %d", ErrTooLarge, what, len(s), max)
	}
	if !utf8.ValidString(s) {
		return invalid("%s is not valid UTF-8", what)
	}
	if containsNUL(s) {
		return invalid("%s contains a NUL byte", what)
	}
	return nil
}

func checkBytes(what string, b []byte, max int) error {
	if len(b) > max {
		return fmt.Errorf("%w: %s is %d bytes, limit %d", ErrTooLarge, what, len(b), max)
	}
	return nil
}

func containsNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}
