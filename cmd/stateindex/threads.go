package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/internal/config"
	"github.com/stateindex/stateindex/messages"
)

func init() {
	register(command{name: "threads", summary: "(--data DIR | --server HOST:PORT [--config FILE]) [--status S,..] [--goal P] [--scope P] [--in-scope S [--parent F | --chain F]] [--since T] [--until T] [--limit N] [--cursor C] [--json]   list frames across scopes (the registry)", run: threads})
}

// threads lists frames across scopes from the registry: on a data file
// (it brings the file's registry index up to date first, then queries it;
// a file a server holds is refused, as inspect does) or from a running
// server (--server, over remoting).
func threads(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("threads", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("data", "", "data directory (read the file; no server may hold it)")
	conn := addConnectFlags(fs)
	status := fs.String("status", "", "statuses, comma-separated: active, waiting, suspended, completed, failed, cancelled, continued")
	goal := fs.String("goal", "", "goal prefix")
	scopePrefix := fs.String("scope", "", "scope prefix")
	inScope := fs.String("in-scope", "", "exactly this scope (needed by --parent and --chain)")
	parent := fs.String("parent", "", "children of this frame")
	chain := fs.String("chain", "", "links of the chain with this root")
	since := fs.String("since", "", "created at or after: RFC 3339 time, or a duration ago (2h)")
	until := fs.String("until", "", "created before: RFC 3339 time, or a duration ago")
	finishedSince := fs.String("finished-since", "", "finished at or after (as --since)")
	finishedUntil := fs.String("finished-until", "", "finished before (as --until)")
	limit := fs.Int("limit", 0, "entries per page (default 100, at most 1000)")
	cursor := fs.String("cursor", "", "the next page: a previous answer's cursor")
	minPos := fs.Uint64("min-position", 0, "answer once the registry reflects at least this global position (--server; a write's Position), waiting up to --timeout")
	asJSON := fs.Bool("json", false, "print the reply as JSON")
	timeout := fs.Duration("timeout", 10*time.Second, "the request's deadline (--server)")
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: stateindex threads (--data DIR | --server HOST:PORT [--config FILE]) [filters]\n\n"+
			"Lists frames across scopes, newest first, from the registry: the index the\n"+
			"server keeps from the log. On a data file it first brings the index up to\n"+
			"the end of the log (stored in the file: a server resumes from there).\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if (*dir == "") == (*conn.server == "") {
		fmt.Fprintln(stderr, "stateindex threads: give one of --data and --server")
		return errUsage
	}
	now := time.Now()
	req := &messages.ListFrames{GoalPrefix: *goal, ScopePrefix: *scopePrefix, InScope: *inScope, ParentID: *parent,
		ChainRoot: *chain, Limit: *limit, Cursor: *cursor, MinPosition: *minPos}
	if *status != "" {
		for _, s := range strings.Split(*status, ",") {
			req.Statuses = append(req.Statuses, strings.TrimSpace(s))
		}
	}
	for _, t := range []struct {
		flag, v string
		to      *int64
	}{{"--since", *since, &req.CreatedAfter}, {"--until", *until, &req.CreatedBefore},
		{"--finished-since", *finishedSince, &req.FinishedAfter}, {"--finished-until", *finishedUntil, &req.FinishedBefore}} {
		if t.v == "" {
			continue
		}
		ns, err := parseWhen(t.v, now)
		if err != nil {
			return fmt.Errorf("%s %q: %w", t.flag, t.v, err)
		}
		*t.to = ns
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var reply *messages.ListFramesReply
	var err error
	if *dir != "" {
		reply, err = threadsOnFile(ctx, *dir, req)
	} else {
		reply, err = threadsOnServer(ctx, conn, req, *timeout, stderr)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(reply)
	}
	printThreads(stdout, reply)
	return nil
}

// parseWhen reads an RFC 3339 time or a duration before now.
func parseWhen(s string, now time.Time) (int64, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UnixNano(), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("not an RFC 3339 time nor a positive duration")
	}
	return now.Add(-d).UnixNano(), nil
}

func threadsOnFile(ctx context.Context, dir string, req *messages.ListFrames) (*messages.ListFramesReply, error) {
	store, err := openStore(dir, false, time.Second, true)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	if _, err := actors.CatchUpRegistry(ctx, store); err != nil {
		return nil, fmt.Errorf("bringing the registry up to date: %w", err)
	}
	return actors.QueryRegistry(ctx, store, req)
}

// remoting is the process's one remoting actor system for --server
// (started once: gRPC's logger is process-wide, and a second start while
// the first one's server goroutines run races on it).
var remoting struct {
	once   sync.Once
	config string // the --config it was started with
	sys    *actor.ActorSystem
	err    error
}

func threadsOnServer(ctx context.Context, conn connectFlags, req *messages.ListFrames, timeout time.Duration, stderr io.Writer) (*messages.ListFramesReply, error) {
	c, err := conn.client(timeout, stderr)
	if err != nil {
		return nil, err
	}
	return c.ListFrames(ctx, req)
}

// connectFlags are the flags of a command that reaches a running server.
type connectFlags struct{ server, config *string }

func addConnectFlags(fs *flag.FlagSet) connectFlags {
	return connectFlags{
		server: fs.String("server", "", "a running server's remoting address host:port (`stateindex serve --listen`)"),
		config: fs.String("config", "", "with --server: connect with the TLS (tls.*) and shared secret (auth.secret_file) of this configuration file, the server's or one like it"),
	}
}

// client returns a Client of the server at --server, over the process's
// remoting system.
func (cf connectFlags) client(timeout time.Duration, stderr io.Writer) (*actors.Client, error) {
	addr := *cf.server
	if _, _, err := splitHostPort(addr); err != nil {
		return nil, fmt.Errorf("--server %q: want host:port", addr)
	}
	sys, err := remoteSystem(*cf.config, stderr)
	if err != nil {
		return nil, err
	}
	return actors.NewClient(sys.Root, actors.RemotePID(addr), timeout), nil
}

// remoteSystem returns the process's remoting actor system, started on
// first use with the TLS and secret of the configuration file at
// configPath ("" for none); its replies arrive on 127.0.0.1. Refused
// callers (a server whose certificate this side refuses as it dials back)
// are logged on stderr.
func remoteSystem(configPath string, stderr io.Writer) (*actor.ActorSystem, error) {
	remoting.once.Do(func() {
		remoting.config = configPath
		var sec *actors.Security
		if configPath != "" {
			var err error
			if sec, err = config.LoadSecurity(configPath, slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))); err != nil {
				remoting.err = err
				return
			}
		}
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		remoting.sys = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
		_, remoting.err = actors.StartRemote(remoting.sys, actors.RemoteConfig("127.0.0.1", 0, actors.WithSecurity(sec)))
	})
	if remoting.err == nil && configPath != remoting.config {
		return nil, fmt.Errorf("remoting was started with --config %q: this process cannot connect with %q too", remoting.config, configPath)
	}
	return remoting.sys, remoting.err
}

func printThreads(w io.Writer, r *messages.ListFramesReply) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CREATED\tSTATUS\tSCOPE\tFRAME\tPARENT\tCHAIN\tTOKENS\tGOAL")
	for _, f := range r.Frames {
		chain := ""
		if f.ChainRoot != "" {
			chain = f.ChainRoot
			if f.ContinuedTo != "" {
				chain += " → " + f.ContinuedTo
			}
		}
		goal := f.Goal
		if len(goal) > 60 {
			goal = goal[:57] + "..."
		}
		tokens := "-" // recorded when the frame ends
		if f.FinishedAt != 0 {
			tokens = fmt.Sprint(f.TokensUsed)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%q\n", time.Unix(0, f.CreatedAt).UTC().Format(time.RFC3339),
			f.Status, f.Scope, f.FrameID, dash(f.ParentID), dash(chain), tokens, goal)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "%d frame(s), registry position %d\n", len(r.Frames), r.Position)
	if r.NextCursor != "" {
		fmt.Fprintf(w, "next page: --cursor %s\n", r.NextCursor)
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
