package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/stateindex/stateindex/internal/config"
)

func init() {
	register(command{name: "config", summary: "--explain|--check [--config FILE] [serve's flags]   print or check serve's configuration", run: configCmd})
}

func configCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("config")
	fs.SetOutput(stderr)
	explain := fs.Bool("explain", false, "print every setting, merged from --config, the files it extends and the flags given, with where each value came from")
	check := fs.Bool("check", false, "check the configuration; exit non-zero naming the file, key and line of the first problem")
	flags := config.RegisterFlags(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: stateindex config --explain [--config FILE] [serve's flags]
       stateindex config --check --config FILE [serve's flags]

--explain prints the configuration serve would run with: every key, defaults
included, as YAML, each with its origin ("default", "file.yaml:12", "flag
--shards"). --check only checks it. serve's flags (--shards, --data, ...)
override the file here as they do for serve.

`)
		fs.PrintDefaults()
	}
	if err := parseArgs(fs, args, stdout, stderr); err != nil {
		return err
	}
	if *explain == *check || fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	if *check && flags.Config == "" {
		return errors.New("--check needs --config FILE")
	}
	file, err := flags.Resolve()
	if err != nil {
		return err
	}
	if *explain {
		return file.Explain(stdout)
	}
	_, err = fmt.Fprintf(stdout, "%s: ok\n", flags.Config)
	return err
}
