package config

import (
	"flag"
	"strings"
)

// Flags are serve's command-line settings plus --config. RegisterFlags
// adds them to a flag set; Resolve then builds the File.
type Flags struct {
	// Config is --config: the YAML file to read ("" reads none).
	Config string
	given  [][2]string // flags given on the command line, in order
}

// RegisterFlags adds --config and a flag for each setting that has one
// (--data, --shards, --journal…) to fs. A flag's default is the built-in
// default; a flag given overrides the file.
func RegisterFlags(fs *flag.FlagSet) *Flags {
	fl := &Flags{}
	fs.StringVar(&fl.Config, "config", "", "read settings from this YAML file (flags given override it; see stateindex config --explain)")
	d := Default()
	for _, s := range settings {
		if s.flag != "" {
			fs.Var(&settingFlag{fl: fl, name: s.flag, def: flagText(s.field(d))}, s.flag, s.usage)
		}
	}
	return fl
}

// flagText writes a default the way the command line gives it.
func flagText(ptr any) string {
	switch p := ptr.(type) {
	case *string:
		return *p
	case *[]string:
		return strings.Join(*p, ",")
	}
	return format(ptr)
}

// Resolve reads --config (if given) and applies the flags given over it.
func (fl *Flags) Resolve() (*File, error) { return resolve(fl.Config, fl.given) }

// settingFlag records a flag's text; Resolve checks it after the file is
// read, with the rules a file's value obeys.
type settingFlag struct {
	fl        *Flags
	name, def string
}

func (s *settingFlag) String() string {
	if s == nil {
		return ""
	}
	return s.def
}

func (s *settingFlag) Set(v string) error {
	s.fl.given = append(s.fl.given, [2]string{s.name, v})
	return nil
}
