package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"sort"
	"strings"

	"github.com/stateindex/stateindex/eventstore"
)

// errHelp: the command printed its help on request; exit 0.
var errHelp = errors.New("help")

func init() {
	register(command{name: "version", summary: "   print the build's version, commit and data format",
		description: "Prints the module version and VCS commit this binary was built from, the Go version,\n" +
			"and the data file format it reads and writes.", run: version})
}

// newFlagSet is a command's flag set: its usage (printed on -h, and on a
// flag error) is the command's synopsis, description and flags, unless the
// command sets fs.Usage to a text of its own (writing to fs.Output()).
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() { commandHelp(fs, fs.Output()) }
	return fs
}

// parseArgs parses a command's flags. -h, -help and --help print the
// command's description and flags to stdout (errHelp: exit 0); a flag
// error prints the flags to stderr (errUsage: exit 2); so does an argument
// that is not a flag — no command takes positional arguments — with a
// suggestion of what was meant.
func parseArgs(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" {
			fs.SetOutput(stdout)
			fs.Usage()
			return errHelp
		}
	}
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() > 0 {
		arg := fs.Arg(0)
		fmt.Fprintf(stderr, "stateindex %s: unexpected argument %q: %s\n", fs.Name(), arg, suggestArg(fs, arg))
		return errUsage
	}
	return nil
}

// commandHelp prints a command's usage line, description and flags.
func commandHelp(fs *flag.FlagSet, w io.Writer) {
	c := commands[fs.Name()]
	fmt.Fprintf(w, "Usage: stateindex %s %s\n", c.name, strings.TrimSpace(usageLine(c.summary)))
	if d := describe(c); d != "" {
		fmt.Fprintf(w, "\n%s\n", d)
	}
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprintf(w, "\nFlags:\n")
		out := fs.Output()
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(out)
	}
}

// usageLine is the synopsis part of a summary (before the three spaces
// that start its description).
func usageLine(summary string) string {
	if i := strings.Index(summary, "   "); i >= 0 {
		return summary[:i]
	}
	return summary
}

// descriptions of the commands whose files set none.
var descriptions = map[string]string{
	"serve": `Runs the StateIndex on the embedded bbolt store DIR/stateindex.db (created if absent),
until SIGINT or SIGTERM, which stops it cleanly: queued requests are answered and every
acknowledged write is on disk. Without --listen it serves this process's actors only
(and the admin socket DIR/stateindex.sock, which backup and the CLI use); with --listen
HOST:PORT remote actors reach it through Proto.Actor remoting; with --cluster NAME and
--peers it is a storage member of a cluster. Every flag has a YAML key (--config FILE;
"stateindex config --explain" prints the result with each value's origin).`,
}

// describe is a command's description: its own, else the summary's text
// after the synopsis.
func describe(c command) string {
	if c.description != "" {
		return c.description
	}
	if d := descriptions[c.name]; d != "" {
		return d
	}
	if i := strings.Index(c.summary, "   "); i >= 0 {
		s := strings.TrimSpace(c.summary[i:])
		return strings.ToUpper(s[:1]) + s[1:] + "."
	}
	return ""
}

// suggestArg says what an unexpected positional argument was probably
// meant to be.
func suggestArg(fs *flag.FlagSet, arg string) string {
	name, value, hasValue := strings.Cut(strings.TrimLeft(arg, "-"), "=")
	if f := fs.Lookup(name); f != nil {
		if hasValue {
			return fmt.Sprintf("did you mean --%s=%s?", name, value)
		}
		return fmt.Sprintf("did you mean --%s?", name)
	}
	if _, ok := commands[arg]; ok {
		return fmt.Sprintf("%q is a command of its own (stateindex %s); commands do not nest", arg, arg)
	}
	if best := closest(name, flagNames(fs)); best != "" {
		return fmt.Sprintf("flags start with --; did you mean --%s? (stateindex %s -h lists them)", best, fs.Name())
	}
	return fmt.Sprintf("this command takes only flags (stateindex %s -h lists them)", fs.Name())
}

func flagNames(fs *flag.FlagSet) []string {
	var out []string
	fs.VisitAll(func(f *flag.Flag) { out = append(out, f.Name) })
	return out
}

// suggestCommand is the hint for an unknown command name.
func suggestCommand(name string) string {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	if best := closest(strings.TrimLeft(name, "-"), names); best != "" {
		return fmt.Sprintf("did you mean %q?", best)
	}
	return "run \"stateindex -h\" for the list"
}

// closest returns the candidate nearest to s: one it starts or that starts
// it, else within an edit distance of a third of its length (at least 1,
// at most 3); "" when none is near.
func closest(s string, candidates []string) string {
	if s == "" {
		return ""
	}
	sort.Strings(candidates)
	for _, c := range candidates {
		if len(s) >= 3 && (strings.HasPrefix(c, s) || strings.HasPrefix(s, c)) {
			return c
		}
	}
	best, bestD := "", min(max(len(s)/3, 1), 3)+1
	for _, c := range candidates {
		if d := editDistance(s, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// buildVersion describes the binary: module version, commit, Go version.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "stateindex (no build information)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, at, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = ", modified"
			}
		}
	}
	out := "stateindex " + v
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		out += fmt.Sprintf(" (commit %s, %s%s)", rev, at, dirty)
	}
	return out + " " + bi.GoVersion
}

func version(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version")
	if err := parseArgs(fs, args, stdout, stderr); err != nil {
		return err
	}
	fmt.Fprintln(stdout, buildVersion())
	fmt.Fprintf(stdout, "data file format %d\n", eventstore.FormatVersion)
	return nil
}
