package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// stateSchema compiles testdata/state_schema.json, the seed's state schema
// translated to JSON Schema, asserting formats (saved_at is a date-time).
func stateSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "state_schema.json"))
	require.NoError(t, err)
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	require.NoError(t, c.AddResource("state_schema.json", doc))
	s, err := c.Compile("state_schema.json")
	require.NoError(t, err)
	return s
}

func validate(t *testing.T, s *jsonschema.Schema, doc string) error {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(doc))
	require.NoError(t, err)
	return s.Validate(v)
}

// The schema is the seed's: its example state.json is valid, and the
// schema holds documents to its enums, types and required fields.
func TestStateSchemaIsTheSeeds(t *testing.T) {
	s := stateSchema(t)
	example, err := os.ReadFile(filepath.Join("testdata", "seed_state_example.json"))
	require.NoError(t, err)
	require.NoError(t, validate(t, s, string(example)), "the seed's own example")
	for name, edit := range map[string][2]string{
		"a status outside the enum":  {`"status": "suspended"`, `"status": "waiting"`},
		"a string turn number":       {`"turn_number": 3`, `"turn_number": "3"`},
		"saved_at not a date-time":   {`"saved_at": "2026-02-12T15:30:00Z"`, `"saved_at": "yesterday"`},
		"an unknown suspend reason":  {`"suspend_reason": "limit"`, `"suspend_reason": "boredom"`},
		"an unknown limit code":      {`"limit_code": "spend_exceeded"`, `"limit_code": "money_gone"`},
		"a role outside the enum":    {`"role": "system"`, `"role": "tool"`},
		"spend as a string":          {`"spend": 0.045`, `"spend": "0.045"`},
		"no thread_id (required)":    {`"thread_id": "planner-1739012630",`, ``},
		"partial text not a string":  {`"text": "Let me analyze the requirements..."`, `"text": 42`},
		"a limit that is not number": {`"spawns": 5`, `"spawns": "five"`},
	} {
		t.Run(name, func(t *testing.T) {
			doc := strings.Replace(string(example), edit[0], edit[1], 1)
			require.NotEqual(t, string(example), doc, "the edit applies")
			assert.Error(t, validate(t, s, doc))
		})
	}
}

// stateDir is a data directory a server wrote the runs of the export
// tests into (and stopped): see TestExportStateJSON.
type stateDir struct {
	dir                                           string
	root, child, done, failed, suspended, oldLink string
	newLink                                       string
}

func writeStateDir(t *testing.T) stateDir {
	t.Helper()
	d := stateDir{dir: t.TempDir()}
	store, err := openStore(d.dir, true, time.Second, false)
	require.NoError(t, err)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	cfg := actors.DefaultConfig()
	cfg.TokenKey, cfg.Logger = bytes.Repeat([]byte{7}, 32), quiet
	srv, err := actors.Start(sys, store, cfg)
	require.NoError(t, err)
	c := srv.Client()
	ctx := t.Context()
	h := messages.Header{Scope: "run"}

	// A running root (its child runs: waiting) with the seed example's
	// inputs, limits and cost, and context of every role.
	inputs, err := eventstore.Marshal(map[string]any{"app_name": "Task Manager", "features": []string{"crud", "auth"}})
	require.NoError(t, err)
	p, err := c.PushFrame(ctx, &messages.PushFrame{Header: h, Goal: "apps/task-manager/build_crud_app", Inputs: inputs,
		Budget: budget.TokenBudget{Total: 1_000_000}, Limits: budget.Limits{SpendMicros: 1_000_000, Turns: 10, Tokens: 100_000, Spawns: 5}})
	require.NoError(t, err)
	d.root = p.FrameID
	for _, m := range []struct{ role, content string }{
		{"system", "You are building an app..."}, {"user", "Build a CRUD app with auth."}, {"assistant", "I'll help you build..."}, {"", "a file the agent read"},
	} {
		_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, FrameID: d.root, Role: m.role, Priority: compaction.Medium, Content: m.content})
		require.NoError(t, err)
	}
	call, err := c.StartToolCall(ctx, &messages.StartToolCall{Header: h, FrameID: d.root, Name: "list_files"})
	require.NoError(t, err)
	_, err = c.FinishToolCall(ctx, &messages.FinishToolCall{Header: h, FrameID: d.root, CallID: call.CallID, Call: "list_files .", Output: "main.go"})
	require.NoError(t, err)
	_, err = c.RecordUsage(ctx, &messages.RecordUsage{Header: h, FrameID: d.root, Cost: budget.Cost{InputTokens: 4500, OutputTokens: 3200, Turns: 3,
		SpendMicros: 45_000, DurationMillis: 45_500}})
	require.NoError(t, err)
	// A finished child and a failed one, then one interrupted mid-stream.
	for _, st := range []frames.Status{frames.StatusCompleted, frames.StatusFailed} {
		k, err := c.PushFrame(ctx, &messages.PushFrame{Header: h, ParentID: d.root, Goal: "subtask " + st.String(), Budget: budget.TokenBudget{Total: 1000}})
		require.NoError(t, err)
		_, err = c.AddContextHandle(ctx, &messages.AddContextHandle{Header: h, FrameID: k.FrameID, Role: "assistant", Priority: compaction.Medium, Content: "did " + st.String()})
		require.NoError(t, err)
		_, err = c.RecordPartialOutput(ctx, &messages.RecordPartialOutput{Header: h, FrameID: k.FrameID, Delta: "ended with the frame", Percent: 10})
		require.NoError(t, err)
		_, err = c.PopFrame(ctx, &messages.PopFrame{Header: h, FrameID: k.FrameID, Status: st})
		require.NoError(t, err)
		if st == frames.StatusCompleted {
			d.done = k.FrameID
		} else {
			d.failed = k.FrameID
		}
	}
	k, err := c.PushFrame(ctx, &messages.PushFrame{Header: h, ParentID: d.root, Goal: "write the models", Budget: budget.TokenBudget{Total: 1000}})
	require.NoError(t, err)
	d.child = k.FrameID
	for _, delta := range []string{"Let me ", "analyze the ", "requirements..."} {
		_, err = c.RecordPartialOutput(ctx, &messages.RecordPartialOutput{Header: h, FrameID: d.child, Delta: delta, Percent: 35})
		require.NoError(t, err)
	}

	// Suspended for a limit: spend past its max.
	hl := messages.Header{Scope: "limited"}
	p, err = c.PushFrame(ctx, &messages.PushFrame{Header: hl, Goal: "spend it all", Budget: budget.TokenBudget{Total: 1000},
		Limits: budget.Limits{SpendMicros: 1_000_000}})
	require.NoError(t, err)
	d.suspended = p.FrameID
	u, err := c.RecordUsage(ctx, &messages.RecordUsage{Header: hl, FrameID: d.suspended, Cost: budget.Cost{Turns: 1, SpendMicros: 1_050_000}})
	require.NoError(t, err)
	require.NotNil(t, u.Suspension)
	// A complete output whose turn was not recorded yet.
	_, err = c.RecordPartialOutput(ctx, &messages.RecordPartialOutput{Header: hl, FrameID: d.suspended, Delta: "the whole answer", Percent: 100, Final: true})
	require.NoError(t, err)

	// Continued: a root whose context filled, continued to a new link.
	hc := messages.Header{Scope: "chain"}
	p, err = c.PushFrame(ctx, &messages.PushFrame{Header: hc, Goal: "port the parser", Budget: budget.TokenBudget{Total: 1_000_000}, ContextWindow: 4000})
	require.NoError(t, err)
	d.oldLink = p.FrameID
	for i := range 10 {
		role := []string{"user", "assistant"}[i%2]
		_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: hc, FrameID: d.oldLink, Role: role, Priority: compaction.Medium,
			Content: strings.Repeat("words ", 100)})
		require.NoError(t, err)
	}
	_, err = c.RecordPartialOutput(ctx, &messages.RecordPartialOutput{Header: hc, FrameID: d.oldLink, Delta: "mid-sentence when continued", Percent: 50})
	require.NoError(t, err)
	cont, err := c.ContinueFrame(ctx, &messages.ContinueFrame{Header: hc, FrameID: d.oldLink, ResumeCeiling: 300})
	require.NoError(t, err)
	d.newLink = cont.FrameID

	// A scope whose only frame finished.
	p, err = c.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: "over"}, Goal: "g", Budget: budget.TokenBudget{Total: 10}})
	require.NoError(t, err)
	_, err = c.PopFrame(ctx, &messages.PopFrame{Header: messages.Header{Scope: "over"}, FrameID: p.FrameID, Status: frames.StatusCompleted})
	require.NoError(t, err)

	srv.Stop()
	sys.Shutdown()
	require.NoError(t, store.Close())
	return d
}

// exportState runs export --format state.json and decodes the document,
// after checking it against the seed's schema.
func exportState(t *testing.T, s *jsonschema.Schema, dir string, args ...string) (frames.StateDocument, map[string]any) {
	t.Helper()
	out, _ := runOK(t, append([]string{"export", "--data", dir, "--format", "state.json"}, args...)...)
	require.NoError(t, validate(t, s, out), "the export validates against the seed's schema:\n%s", out)
	var doc frames.StateDocument
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &raw))
	return doc, raw
}

func TestExportStateJSON(t *testing.T) {
	s := stateSchema(t)
	d := writeStateDir(t)

	t.Run("running: the current root by default", func(t *testing.T) {
		doc, raw := exportState(t, s, d.dir, "--scope", "run")
		assert.Equal(t, d.root, doc.ThreadID, "the root of the top of the stack")
		assert.Equal(t, "apps/task-manager/build_crud_app", doc.Directive)
		assert.Nil(t, doc.ParentThreadID)
		assert.Nil(t, raw["parent_thread_id"], "null, not absent")
		assert.Contains(t, raw, "parent_thread_id")
		assert.Equal(t, "1.0.0", doc.Version)
		_, err := time.Parse(time.RFC3339Nano, doc.SavedAt)
		require.NoError(t, err)
		assert.Equal(t, map[string]any{"app_name": "Task Manager", "features": []any{"crud", "auth"}}, doc.Inputs)
		assert.Equal(t, "running", doc.Status, "waiting on its subcall is running")
		assert.Equal(t, int64(3), doc.TurnNumber)
		assert.Equal(t, frames.StateCost{Turns: 3, Tokens: frames.StateTokens{InputTokens: 4500, OutputTokens: 3200}, Spend: 0.045, DurationSeconds: 45.5}, doc.Cost)
		require.NotNil(t, doc.Limits.Spend)
		assert.Equal(t, 1.0, *doc.Limits.Spend)
		assert.Equal(t, int64(10), *doc.Limits.Turns)
		assert.Equal(t, int64(100_000), *doc.Limits.Tokens)
		assert.Equal(t, int64(5), *doc.Limits.Spawns)
		assert.Nil(t, doc.Limits.DurationSeconds, "unlimited is null")
		assert.Nil(t, doc.SuspendReason)
		assert.Nil(t, doc.SuspendMetadata)
		assert.Equal(t, []frames.StateHook{}, doc.Hooks)
		assert.Equal(t, []string{}, doc.RequiredCaps)
		assert.Equal(t, []frames.StateMessage{
			{Role: "system", Content: "You are building an app..."},
			{Role: "user", Content: "Build a CRUD app with auth."},
			{Role: "assistant", Content: "I'll help you build..."},
			{Role: "user", Content: "a file the agent read", OriginalRole: "unknown"},
			{Role: "assistant", Content: "list_files ."},
			{Role: "user", Content: "main.go", OriginalRole: "tool"},
		}, doc.Messages)
		assert.Nil(t, doc.PartialCognition)
		assert.Contains(t, raw, "partial_cognition")
	})
	t.Run("interrupted with partial output", func(t *testing.T) {
		doc, _ := exportState(t, s, d.dir, "--scope", "run", "--frame", d.child)
		assert.Equal(t, d.child, doc.ThreadID)
		require.NotNil(t, doc.ParentThreadID)
		assert.Equal(t, d.root, *doc.ParentThreadID)
		assert.Equal(t, "running", doc.Status)
		assert.Equal(t, &frames.PartialCognition{Text: "Let me analyze the requirements...", IsPartial: true, CompletionPercentage: 35}, doc.PartialCognition)
		assert.Equal(t, map[string]any{}, doc.Inputs, "no inputs: an empty object")
	})
	t.Run("suspended for a limit", func(t *testing.T) {
		doc, _ := exportState(t, s, d.dir, "--scope", "limited") // its only frame: suspended, not the top of the stack
		assert.Equal(t, d.suspended, doc.ThreadID)
		assert.Equal(t, "suspended", doc.Status)
		require.NotNil(t, doc.SuspendReason)
		assert.Equal(t, "limit", *doc.SuspendReason)
		require.NotNil(t, doc.SuspendMetadata)
		assert.Equal(t, budget.SpendExceeded, doc.SuspendMetadata.LimitCode)
		assert.Equal(t, 1.05, *doc.SuspendMetadata.CurrentValue, "dollars")
		assert.Equal(t, 1.0, *doc.SuspendMetadata.CurrentMax)
		assert.Equal(t, &frames.PartialCognition{Text: "the whole answer", IsPartial: false, CompletionPercentage: 100}, doc.PartialCognition,
			"a complete output not yet recorded as a turn")
	})
	t.Run("finished: read from the log", func(t *testing.T) {
		doc, _ := exportState(t, s, d.dir, "--scope", "run", "--frame", d.done)
		assert.Equal(t, "completed", doc.Status)
		assert.Equal(t, []frames.StateMessage{{Role: "assistant", Content: "did completed"}}, doc.Messages)
		assert.Nil(t, doc.PartialCognition, "the frame's end ended its output")
		doc, _ = exportState(t, s, d.dir, "--scope", "run", "--frame", d.failed)
		assert.Equal(t, "error", doc.Status)
	})
	t.Run("continued", func(t *testing.T) {
		doc, raw := exportState(t, s, d.dir, "--scope", "chain", "--frame", d.oldLink)
		assert.Equal(t, "completed", doc.Status, "its own run is over: the continuation goes on")
		assert.Equal(t, d.newLink, doc.ContinuationThreadID)
		assert.Equal(t, d.oldLink, doc.ChainRootID)
		assert.Nil(t, doc.PartialCognition, "the continuation took it along")
		assert.Len(t, doc.Messages, 10)
		assert.NotContains(t, raw, "continuation_of")

		head, _ := exportState(t, s, d.dir, "--scope", "chain") // the current root: the new link
		assert.Equal(t, d.newLink, head.ThreadID)
		assert.Equal(t, "running", head.Status)
		assert.Equal(t, d.oldLink, head.ContinuationOf)
		require.NotNil(t, head.PartialCognition)
		assert.Equal(t, "mid-sentence when continued", head.PartialCognition.Text)
		assert.Equal(t, "system", head.Messages[0].Role, "the continuation segment")
	})
}

func TestExportStateJSONRefusesBadInput(t *testing.T) {
	d := writeStateDir(t)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown scope", []string{"--scope", "nope", "--format", "state.json"}, 1, `no scope "nope"`},
		{"unknown frame", []string{"--scope", "run", "--frame", "nope", "--format", "state.json"}, 1, `no frame "nope" in scope "run"`},
		{"a frame of another scope", []string{"--scope", "limited", "--frame", d.root, "--format", "state.json"}, 1, `no frame "` + d.root + `" in scope "limited"`},
		{"a bad frame id", []string{"--scope", "run", "--frame", "has spaces", "--format", "state.json"}, 1, "invalid id"},
		{"no live frame to default to", []string{"--scope", "over", "--format", "state.json"}, 1, "no live frame"},
		{"a bad --format", []string{"--scope", "run", "--format", "state.yaml"}, 2, `unknown --format "state.yaml"`},
		{"--frame without --scope", []string{"--frame", d.root, "--format", "state.json"}, 2, "needs --scope"},
		{"state.json without --scope", []string{"--format", "state.json"}, 2, "needs --scope"},
		{"--frame with another format", []string{"--scope", "run", "--frame", d.root}, 2, "--frame needs --scope and --format state.json"},
		{"state.json with --chain", []string{"--scope", "run", "--chain", d.root, "--format", "state.json"}, 2, "takes neither --chain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(append([]string{"export", "--data", d.dir}, tc.args...), &out, &errb)
			assert.Equal(t, tc.code, code, "stderr: %s", errb.String())
			assert.Contains(t, errb.String(), tc.want)
			assert.Empty(t, out.String(), "nothing written")
		})
	}
}
