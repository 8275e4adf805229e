// Command stateindex runs and operates a StateIndex: the durable memory of
// agent runtimes built on Proto.Actor.
//
// Each subcommand lives in its own file and registers itself in init.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/stateindex/stateindex/bench"
)

// command is one subcommand: it parses its own flags from args.
type command struct {
	name    string
	summary string // one line for the usage text: the synopsis, three spaces, what it does
	// description is what "stateindex NAME -h" says above the flags when
	// the command has no usage text of its own (default: the summary's).
	description string
	run         func(args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{}

func register(c command) { commands[c.name] = c }

// errUsage: the command printed its usage; exit 2.
var errUsage = errors.New("usage")

// exitError carries a specific exit code (for example verify's findings).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func usage() string {
	var b strings.Builder
	b.WriteString("stateindex — durable memory for Proto.Actor agent runtimes\n\nUsage:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "  stateindex %-8s %s\n", n, commands[n].summary)
	}
	b.WriteString("\nRun \"stateindex COMMAND -h\" for a command's flags.\n")
	return b.String()
}

func main() {
	if bench.IsRemoteChild() { // the server process of `stateindex bench`'s remote scenario
		os.Exit(bench.ServeRemoteChild(os.Stdin, os.Stdout))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches a command line and returns the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage())
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "stateindex: unknown command %q: %s\n", args[0], suggestCommand(args[0]))
		return 2
	}
	err := c.run(args[1:], stdout, stderr)
	var ee *exitError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	case errors.As(err, &ee):
		fmt.Fprintf(stderr, "stateindex %s: %v\n", c.name, ee.err)
		return ee.code
	default:
		fmt.Fprintf(stderr, "stateindex %s: %v\n", c.name, err)
		return 1
	}
}
