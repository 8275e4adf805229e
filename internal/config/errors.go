package config

import (
	"errors"
	"fmt"
)

// ErrInvalid is wrapped by every *Error: the configuration was refused.
var ErrInvalid = errors.New("config: invalid configuration")

// Error is a refused configuration value. It names where the value came
// from: a file and line, or a flag.
type Error struct {
	File string // the file that holds the value; "" for a flag or a default
	Line int
	Key  string // the key path, e.g. "cache.scopes"; "" when the error is about the file
	Flag string // the flag's name without dashes, when a flag gave the value
	Msg  string // what is wrong, phrased to follow the key: "must be at least 1, got 0"
}

func (e *Error) Error() string {
	switch {
	case e.Flag != "":
		return fmt.Sprintf("--%s %s", e.Flag, e.Msg)
	case e.File == "":
		return fmt.Sprintf("%s %s", e.Key, e.Msg)
	case e.Line == 0:
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	case e.Key == "":
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	default:
		return fmt.Sprintf("%s:%d: %s %s", e.File, e.Line, e.Key, e.Msg)
	}
}

func (e *Error) Unwrap() error { return ErrInvalid }

// errAt builds an *Error for a value of the given origin.
func errAt(o Origin, key, format string, args ...any) *Error {
	return &Error{File: o.File, Line: o.Line, Key: key, Flag: o.Flag, Msg: fmt.Sprintf(format, args...)}
}
