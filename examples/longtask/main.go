// Command longtask is a long task that outgrows its context window.
//
// A migration runs step after step — a user's instruction, a tool call
// and its result, the assistant's answer — in a frame with a small
// context window (1,200 tokens), and every reply that changes the context
// reports the frame's pressure (its live context ÷ its window). Past 50%
// the agent continues the frame itself (ContinueFrame): a new link takes
// over with the critical handles, the recent turns and a summary, and the
// old one refuses writes with frame_continued naming the new head. Later
// a write crosses the server's threshold (90%) and the server continues
// the frame on its own (the reply's Continued). The task finishes; then a
// user resumes it with a message (ResumeChain), and the agent reads the
// chain root → head (GetChain) and finds a fact from the first link, long
// out of its context, with SearchChain.
//
// Frame ids are random; the output names links by their place in the
// chain, so that it is the same on every run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

const (
	scope         = "agent:migration"
	window        = 1_200 // tokens: small, so that the task fills it in a few steps
	continueAt    = 900   // permille: the server continues a frame at 90%
	resumeCeiling = 300   // tokens of recent turns a new link carries
	steps         = 14
	// The agent continues the frame itself the first time it passes this.
	explicitAt = 500
	// A fact of the first steps the user asks about after the task ended.
	checksum = "9f2c41d7"
)

func main() {
	dir := flag.String("data", "", "data directory (default: a new temporary directory)")
	flag.Parse()
	if err := run(*dir, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "longtask:", err)
		os.Exit(1)
	}
}

func run(dir string, out io.Writer) error {
	if dir == "" {
		d, err := os.MkdirTemp("", "longtask-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	store, err := eventstore.Open(filepath.Join(dir, "stateindex.db"), nil)
	if err != nil {
		return err
	}
	defer store.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	defer sys.Shutdown()
	cfg := actors.DefaultConfig()
	cfg.TokenKey = []byte("example key: not a secret, 32+ bytes long")
	cfg.Logger = quiet
	// Automatic continuation (YAML: continuation: {auto: true, threshold: 0.9, resume_ceiling: 300}).
	cfg.Frames.ContinueAt = continueAt
	cfg.Frames.ResumeCeiling = resumeCeiling
	srv, err := actors.Start(sys, store, cfg)
	if err != nil {
		return err
	}
	defer srv.Stop()
	t := &task{c: srv.Client(), out: out, names: map[string]string{}}
	return t.run(context.Background())
}

type task struct {
	c     *actors.Client
	out   io.Writer
	names map[string]string // frame id → "link N"
	frame string            // the chain's head: where the work goes on
}

func (t *task) printf(format string, args ...any) { fmt.Fprintf(t.out, format, args...) }

// link names a frame by its place in the chain.
func (t *task) link(id string) string {
	if n, ok := t.names[id]; ok {
		return n
	}
	n := fmt.Sprintf("link %d", len(t.names)+1)
	t.names[id] = n
	return n
}

func pressure(p *messages.Pressure) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%d.%d%% (%d/%d tokens)", p.Permille/10, p.Permille%10, p.Tokens, p.Window)
}

func (t *task) run(ctx context.Context) error {
	h := messages.Header{Scope: scope}
	t.printf("longtask: window %d tokens, automatic continuation at %d.%d%%, resume ceiling %d tokens\n",
		window, continueAt/10, continueAt%10, resumeCeiling)
	session, err := t.c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "operations session",
		Budget: budget.TokenBudget{Total: 200_000}, ContextWindow: window})
	if err != nil {
		return err
	}
	task, err := t.c.PushFrame(ctx, &messages.PushFrame{Header: h, ParentID: session.FrameID, Goal: "migrate billing to /srv/billing-v2",
		Budget: budget.TokenBudget{Total: 50_000}}) // the window is the session's
	if err != nil {
		return err
	}
	t.frame = task.FrameID
	t.link(task.FrameID)
	if _, err := t.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, FrameID: t.frame, Role: "system", Priority: compaction.Critical,
		Content: "You migrate the billing service from /srv/billing-v1 to /srv/billing-v2 (ticket OPS-4711). Verify every shard's checksum."}); err != nil {
		return err
	}

	explicit := false
	for i := 1; i <= steps; i++ {
		last, err := t.step(ctx, i)
		if err != nil {
			return err
		}
		if !explicit && last.Permille >= explicitAt {
			// The agent sees the pressure and hands over before it is forced to.
			explicit = true
			from := t.frame
			r, err := t.c.ContinueFrame(ctx, &messages.ContinueFrame{Header: h, FrameID: from})
			if err != nil {
				return err
			}
			t.frame = r.FrameID
			t.printf("ContinueFrame (explicit): %s → %s, %d → %d tokens, carried %d handle(s) and a summary; pressure %s\n",
				t.link(from), t.link(r.FrameID), r.TokensBefore, r.TokensAfter, r.Carried, pressure(r.Pressure))
			_, err = t.c.AddResult(ctx, &messages.AddResult{Header: h, FrameID: from, Kind: "file", Ref: "/tmp/late.txt"})
			var me *messages.Error
			if errors.As(err, &me) && me.Code == messages.CodeFrameContinued {
				t.printf("  a late write to %s: %s, head %s\n", t.link(from), me.Code, t.link(me.Head))
			} else {
				return fmt.Errorf("a write to the continued link: want frame_continued, got %v", err)
			}
		}
	}
	if _, err := t.c.PopFrame(ctx, &messages.PopFrame{Header: h, FrameID: t.frame, Status: frames.StatusCompleted}); err != nil {
		return err
	}
	t.printf("finished: %s completed\n", t.link(t.frame))

	// A user comes back to the finished task.
	msg := "Shard 3 looked wrong in the dashboard. Recheck its checksum against the copy."
	res, err := t.c.ResumeChain(ctx, &messages.ResumeChain{Header: messages.Header{Scope: scope, RequestID: "user-resume-1"}, ChainID: task.FrameID, Message: msg})
	if err != nil {
		return err
	}
	where := "a new root"
	if res.ParentID == session.FrameID {
		where = "a sibling under the session"
	}
	t.frame = res.FrameID
	t.printf("ResumeChain (user): %q\n  %s resumed as %s (%s), carried %d handle(s) then the message; pressure %s\n",
		msg, t.link(res.From), t.link(res.FrameID), where, res.Carried, pressure(res.Pressure))

	chain, err := t.c.GetChain(ctx, &messages.GetChain{Header: h, FrameID: t.frame})
	if err != nil {
		return err
	}
	t.printf("GetChain: root %s → head %s, %d links\n", t.link(chain.Root), t.link(chain.Head), len(chain.Links))
	for _, l := range chain.Links {
		tokens := ""
		if l.Tokens > 0 {
			tokens = fmt.Sprintf(" at %d tokens", l.Tokens)
		}
		t.printf("  %s: %s%s\n", t.link(l.FrameID), l.Status, tokens)
	}

	// The fact the user asks about left the context two links ago.
	found, err := t.c.SearchChain(ctx, &messages.SearchChain{Header: h, FrameID: t.frame, Query: "shard 3 checksum " + checksum})
	if err != nil {
		return err
	}
	t.printf("SearchChain %q: %d hit(s)\n", "shard 3 checksum "+checksum, len(found.Hits))
	for _, hit := range found.Hits {
		t.printf("  %s %s: %q\n", t.link(hit.FrameID), hit.Kind, strings.TrimSpace(hit.Snippet))
	}
	return nil
}

// step is one turn of the task on the chain's head: the user's
// instruction, a tool call and its result, the assistant's answer. It
// prints the pressure the last reply reported, and any automatic
// continuation a reply reported (the head moves on).
func (t *task) step(ctx context.Context, i int) (*messages.Pressure, error) {
	h := messages.Header{Scope: scope}
	var last *messages.Pressure
	note := func(what string, c messages.ContextChange) {
		last = c.Pressure
		if c.Continued != nil {
			t.frame = c.Continued.To
			t.printf("automatic continuation on step %d's %s: %s → %s; pressure %s\n",
				i, what, t.link(c.Continued.From), t.link(c.Continued.To), pressure(c.Pressure))
		}
	}
	u, err := t.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, FrameID: t.frame, Role: "user", Priority: compaction.Medium,
		Content: fmt.Sprintf("Step %d: copy shard %d from /srv/billing-v1 to /srv/billing-v2 and compare its checksum with the source. "+
			"Report any difference before you go on to the next shard.", i, i)})
	if err != nil {
		return nil, err
	}
	note("user message", u.ContextChange)
	call, err := t.c.StartToolCall(ctx, &messages.StartToolCall{Header: h, FrameID: t.frame, Name: "copy_shard", Input: []byte(fmt.Sprintf(`{"shard":%d}`, i))})
	if err != nil {
		return nil, err
	}
	sum := fmt.Sprintf("%08x", uint32(i)*2654435761)
	if i == 3 {
		sum = checksum
	}
	r, err := t.c.FinishToolCall(ctx, &messages.FinishToolCall{Header: h, FrameID: t.frame, CallID: call.CallID,
		Output: fmt.Sprintf("copied shard %d: 48,213 rows, 12.4 MiB in 3.1 s; shard %d checksum %s (source and copy agree); "+
			"indexes rebuilt: invoices_by_customer, invoices_by_date, payments_by_invoice.", i, i, sum)})
	if err != nil {
		return nil, err
	}
	note("tool result", r.ContextChange)
	a, err := t.c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, FrameID: t.frame, Role: "assistant", Priority: compaction.Medium,
		Content: fmt.Sprintf("Shard %d is copied and verified (checksum %s). Moving on.", i, sum)})
	if err != nil {
		return nil, err
	}
	note("assistant message", a.ContextChange)
	t.printf("step %2d on %s: pressure %s\n", i, t.link(t.frame), pressure(last))
	return last, nil
}
