package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/internal/chaintest"
)

// chainDir writes a data directory holding scope "s": a frame outside the
// chain first, then a real chain: A continued (ContinueFrame) → B
// continued → C completed, then resumed by a user (ResumeChain) → D
// (live), with checkpoints signed at A's first record and at C's pop; it
// returns the directory, the public key's file, a wrong key's file, the
// chain's first and last versions and the live tokens each link had when
// it was continued or ended.
func chainDir(t *testing.T) (dir, goodKey, wrongKey string, first, last int64, tokens map[string]int64) {
	t.Helper()
	dir = t.TempDir()
	st, err := eventstore.Open(filepath.Join(dir, dbFile), &eventstore.Options{NoSync: true})
	require.NoError(t, err)
	b := chaintest.New(st, "s")
	b.Ceiling = 100 // nothing trailing fits: the summary stands for what is left
	require.NoError(t, b.Start("X", "", "", "unrelated work", 1000))
	require.NoError(t, b.Add("X", "x1", frames.RoleUser, "not in the chain"))
	require.NoError(t, b.Start("A", "", "A", "port the parser to Go", 1<<20))
	first = b.St.Version
	require.NoError(t, b.Add("A", "a1", frames.RoleUser, "Port parser.c to Go; keep the tests green."))
	require.NoError(t, b.Tool("A", "t1", "read_file", "read_file parser.c", "int parse(const char *s) {\n  return 0;\n}"))
	require.NoError(t, b.Usage("A", budget.Cost{InputTokens: 900, OutputTokens: 100, Turns: 1}))
	require.NoError(t, b.Add("A", "a2", frames.RoleAssistant, "The port is half done: parse() and lex() are in parser.go. "+strings.Repeat("detail ", 800)))
	require.NoError(t, b.Result("A", "r1", "file://parser.go", "first half of the port"))
	require.NoError(t, b.Continue("A", "B"))
	require.NoError(t, b.Start("B", "A", "A", "port the parser to Go (continued)", 1<<20))
	require.NoError(t, b.Add("B", "b1", frames.RoleUser, "now the lexer"))
	require.NoError(t, b.Add("B", "b2", frames.RoleAssistant, "lexer notes: "+strings.Repeat("token ", 1000)))
	require.NoError(t, b.Continue("B", "C"))
	require.NoError(t, b.Start("C", "B", "A", "port the parser to Go (continued again)", 1<<20))
	require.NoError(t, b.Add("C", "c1", frames.RoleUser, "finish the lexer"))
	require.NoError(t, b.Pop("C", frames.StatusCompleted))
	popC := b.St.Version
	require.NoError(t, b.Resume("B", "D", "m1", "Also port the tests, please.", 1<<20))
	last = b.St.Version
	tokens = map[string]int64{}
	for _, l := range b.St.Chains["A"].Links {
		tokens[l.ID] = l.Tokens
	}

	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	_, err = st.SignCheckpoint(context.Background(), "s", first, eventstore.CheckpointSnapshot, key)
	require.NoError(t, err)
	_, err = st.SignCheckpoint(context.Background(), "s", popC, eventstore.CheckpointRunFinished, key)
	require.NoError(t, err)
	_, err = st.SignCheckpoint(context.Background(), "s", 2, eventstore.CheckpointSnapshot, key) // before the chain
	require.NoError(t, err)
	require.NoError(t, st.Close())

	goodKey = filepath.Join(dir, "good.pub")
	require.NoError(t, os.WriteFile(goodKey, []byte(hex.EncodeToString(key.Public().(ed25519.PublicKey))), 0o600))
	other := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{8}, ed25519.SeedSize))
	wrongKey = filepath.Join(dir, "wrong.pub")
	require.NoError(t, os.WriteFile(wrongKey, []byte(hex.EncodeToString(other.Public().(ed25519.PublicKey))), 0o600))
	return dir, goodKey, wrongKey, first, last, tokens
}

func runOK(t *testing.T, args ...string) (string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	require.Equal(t, 0, code, "stdout: %s\nstderr: %s", out.String(), errb.String())
	return out.String(), errb.String()
}

func TestExportChainTranscriptVerifies(t *testing.T) {
	dir, goodKey, wrongKey, first, last, _ := chainDir(t)
	// Any link names the same chain and range: the resumed link too, and
	// the links before the resume (which the log links to D only on D's
	// side).
	var good string
	for _, link := range []string{"A", "B", "C", "D"} {
		out, _ := runOK(t, "export", "--data", dir, "--scope", "s", "--chain", link)
		if good == "" {
			good = out
		}
		assert.Equal(t, good, out, "from %s", link)
	}
	lines := strings.SplitAfter(strings.TrimSuffix(good, "\n"), "\n")
	var h eventstore.TranscriptHeader
	info, err := eventstore.VerifyTranscript(strings.NewReader(good), nil)
	require.NoError(t, err)
	h = info.Header
	assert.Equal(t, "A", h.Chain)
	assert.Equal(t, []string{"A", "B", "C", "D"}, h.Links)
	assert.Equal(t, "D", h.HeadLink)
	assert.Equal(t, first, h.From, "the range starts at the chain's first record, not the scope's")
	assert.Equal(t, last, h.Through)
	assert.Equal(t, last-first+1, h.Records)
	assert.Equal(t, int64(2), info.Checkpoints, "the checkpoints in range only")
	assert.NotEqual(t, strings.Repeat("0", 64), h.Prev, "the hash before the range")
	require.Len(t, lines, int(h.Records)+3)

	path := filepath.Join(t.TempDir(), "chain.jsonl")
	write := func(s string) string {
		require.NoError(t, os.WriteFile(path, []byte(s), 0o600))
		return path
	}
	tamper := func(line int) string {
		l := lines[line-1]
		i := strings.Index(l, `"raw":"`) + len(`"raw":"`) + 30
		c := byte('A')
		if l[i] == 'A' {
			c = 'B'
		}
		return strings.Join(lines[:line-1], "") + l[:i] + string(c) + l[i+1:] + strings.Join(lines[line:], "")
	}
	for _, tc := range []struct {
		name string
		file string
		key  string
		code int
		want string
	}{
		{"ok without key", good, "", 0, "2 checkpoints, signatures not checked"},
		{"ok with the key", good, goodKey, 0, "2 checkpoints, 2 signatures verified"},
		{"wrong key", good, wrongKey, 1, "checkpoint at version"},
		{"tampered record", tamper(4), goodKey, 1, "line 4:"},
		{"dropped record", strings.Join(lines[:4], "") + strings.Join(lines[5:], ""), "", 1, "line 5: expected version"},
		{"bad header", "{}\n" + strings.Join(lines[1:], ""), "", 1, "line 1:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"verify", "--transcript", write(tc.file)}
			if tc.key != "" {
				args = append(args, "--public-key", tc.key)
			}
			var out, errb bytes.Buffer
			code := run(args, &out, &errb)
			assert.Equal(t, tc.code, code, "stdout: %s\nstderr: %s", out.String(), errb.String())
			assert.Contains(t, out.String()+errb.String(), tc.want)
			if tc.code != 0 {
				assert.NotContains(t, out.String(), "ok:")
			}
		})
	}
}

func TestExportChainMarkdown(t *testing.T) {
	dir, _, _, _, _, tokens := chainDir(t)
	require.Positive(t, tokens["A"])
	require.Positive(t, tokens["B"])
	md, _ := runOK(t, "export", "--data", dir, "--scope", "s", "--chain", "B", "--format", "md")
	for _, want := range []string{
		"# Chain A — scope s",
		"Links (root first): A → B → C → D. Head: D.",
		"## Link 1: A", "- **Goal:** port the parser to Go", "- **Budget:** 1048576 tokens",
		"### a1 (user, text)", "> Port parser.c to Go; keep the tests green.",
		"### Tool call t1: read_file (ok)", "Call:\n\n> read_file parser.c", "Result:\n\n> int parse(const char *s) {\n>   return 0;\n> }",
		"### a2 (assistant, text)", "more bytes cut]",
		"- **Result r1** (file): `file://parser.go` — first half of the port",
		"**Ended (v", "continued.** Cost: 900 input + 100 output tokens, 1 turn(s)",
		fmt.Sprintf("➜ **Handoff:** continued at %d tokens to B.", tokens["A"]),
		"## Link 2: B", "Continues A.",
		fmt.Sprintf("> This task was continued from frame A at %d tokens of context", tokens["A"]),
		"> " + frames.SummaryFraming,
		"### b1 (user, text)",
		fmt.Sprintf("➜ **Handoff:** continued at %d tokens to C.", tokens["B"]),
		"## Link 3: C", "Continues B.", "> finish the lexer", "completed.** Cost: 900 input + 100 output tokens", // the chain's cost goes on
		"## Link 4: D", "Resumes C, which had ended completed, with a user's message",
		"> This task was resumed by the user after frame C ended completed",
		"### m1 (user, text)", "> Also port the tests, please.", "**Live**",
	} {
		assert.Contains(t, md, want)
	}
	assert.NotContains(t, md, "not in the chain", "frames outside the chain are left out")
	// In order: A's handles before the handoff, B after.
	assert.Less(t, strings.Index(md, "### a1"), strings.Index(md, "to B."))
	assert.Less(t, strings.Index(md, "to B."), strings.Index(md, "## Link 2: B"))
	// Each new link's first handles are its continuation segment and its
	// summary; the resume's user message is its last.
	for link, want := range map[string][]string{
		"2: B": {"B-seg (system, continuation)", "B-sum (system, summary)"},
		"3: C": {"C-seg (system, continuation)", "C-sum (system, summary)"},
		"4: D": {"D-seg (system, continuation)", "D-sum (system, summary)"},
	} {
		assert.Equal(t, want, headings(md, link)[:2], link)
	}
	d := headings(md, "4: D")
	assert.Equal(t, "m1 (user, text)", d[len(d)-1])
}

// headings returns the handle headings ("### ID (role, kind)", without
// their version) of the Markdown's link section named link ("N: ID").
func headings(md, link string) []string {
	sec := md[strings.Index(md, "## Link "+link):]
	if i := strings.Index(sec[1:], "\n## Link "); i >= 0 {
		sec = sec[:i+1]
	}
	var out []string
	for _, l := range strings.Split(sec, "\n") {
		if h, ok := strings.CutPrefix(l, "### "); ok {
			h, _, _ = strings.Cut(h, " — v")
			out = append(out, h)
		}
	}
	return out
}

func TestExportChainRefusesBadInput(t *testing.T) {
	dir, _, _, _, _, _ := chainDir(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown frame", []string{"--scope", "s", "--chain", "nope"}, "not found"},
		{"unknown scope", []string{"--scope", "t", "--chain", "A"}, `no scope "t"`},
		{"chain without scope", []string{"--chain", "A"}, "need --scope"},
		{"md without chain", []string{"--scope", "s", "--format", "md"}, "unknown --format"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(append([]string{"export", "--data", dir}, tc.args...), &out, &errb)
			assert.NotEqual(t, 0, code)
			assert.Contains(t, out.String()+errb.String(), tc.want)
		})
	}
}
