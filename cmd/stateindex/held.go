package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stateindex/stateindex/eventstore"
)

// heldHint turns the error of opening a data file a running server holds
// into one that says so and how to read it instead — through the server
// (--server, when it serves remote actors) or its web inspector (when it
// serves one) — asking the server where it serves over its admin socket.
// Other errors are returned as they are.
func heldHint(dir, command string, err error) error {
	if !errors.Is(err, eventstore.ErrLocked) {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rep, aerr := adminCall(ctx, dir, adminRequest{Op: "info"})
	switch {
	case aerr != nil || !rep.OK:
		return fmt.Errorf("%w\n(a running server holds it: read it through that server with `stateindex %s --server HOST:PORT` (its --listen address) or its web inspector (serve --http))", err, command)
	case rep.Listen == "" && rep.HTTP == "":
		return fmt.Errorf("%w\n(a running server holds it, serving in-process only: restart it with --listen HOST:PORT to use `stateindex %s --server`, or with --http HOST:PORT for the web inspector)", err, command)
	}
	hint := "a running server holds it: "
	if rep.Listen != "" {
		hint += fmt.Sprintf("use `stateindex %s --server %s`", command, rep.Listen)
	}
	if rep.HTTP != "" {
		if rep.Listen != "" {
			hint += ", or "
		}
		hint += "open the inspector at " + rep.HTTP
	}
	return fmt.Errorf("%w\n(%s)", err, hint)
}
