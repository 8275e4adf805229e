package actors_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// storeState is what must not change when a request is refused: the
// global sequence and every stream's version.
func storeState(t *testing.T, st eventstore.Store) (uint64, map[string]int64) {
	t.Helper()
	seq, err := st.LastSeq(context.Background())
	require.NoError(t, err)
	versions := map[string]int64{}
	require.NoError(t, st.Streams(context.Background(), func(i eventstore.StreamInfo) error {
		versions[i.Stream] = i.Version
		return nil
	}))
	return seq, versions
}

// hugeMap is msgpack of a map with n entries: inputs are opaque bytes, so
// a huge map is judged by its encoded size.
func hugeMap(t *testing.T, n int) []byte {
	m := make(map[string]int, n)
	for i := range n {
		m[fmt.Sprintf("key-%06d", i)] = i
	}
	b, err := eventstore.Marshal(m)
	require.NoError(t, err)
	return b
}

// sameAsUnknown checks that a frame id of another scope is answered
// exactly as an id that exists nowhere: same code, same message once the
// ids are blanked, nothing else set.
func sameAsUnknown(t *testing.T, foreign string, op func(id string) error) error {
	t.Helper()
	ghost := actors.NewID() // same shape as a real id, exists nowhere
	errForeign, errGhost := op(foreign), op(ghost)
	var a, b *messages.Error
	require.ErrorAs(t, errForeign, &a)
	require.ErrorAs(t, errGhost, &b)
	a2, b2 := *a, *b
	a2.Message = strings.ReplaceAll(a2.Message, foreign, "<id>")
	b2.Message = strings.ReplaceAll(b2.Message, ghost, "<id>")
	assert.Equal(t, b2, a2, "a frame of another scope is answered exactly as an unknown id")
	return errForeign
}

// The hostile input catalogue: every bad input of DESIGN §6 and then some,
// through the Client. Each gets its specific error, and the store is
// unchanged: the global sequence and every stream's version are equal
// before and after.
func TestHostileInputCatalogue(t *testing.T) {
	const maxContent = 8 << 10 // the configured limit under test
	e := newEnv(t, func(c *actors.Config) {
		c.Frames.MaxDepth = 3
		c.Frames.MaxContentBytes = maxContent
	})
	c := e.c
	const s = "bad"
	root := push(t, c, s, "", 1000)
	addHandle(t, c, s, root, compaction.Critical, strings.Repeat("critical! ", 300)) // ~750 tokens
	child := push(t, c, s, root, 100)
	d2 := push(t, c, s, child, 10)
	d3 := push(t, c, s, d2, 1)
	d3b := push(t, c, s, d2, 0)
	shallow, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(s), Goal: "shallow", Budget: budget.TokenBudget{Total: 100, MaxSubframeDepth: 1}})
	require.NoError(t, err)
	shallowChild := push(t, c, s, shallow.FrameID, 10)
	call, err := c.StartToolCall(ctx, &messages.StartToolCall{Header: mut(s), FrameID: root, Name: "search"})
	require.NoError(t, err)
	done, err := c.StartToolCall(ctx, &messages.StartToolCall{Header: mut(s), FrameID: root, Name: "search"})
	require.NoError(t, err)
	_, err = c.FinishToolCall(ctx, &messages.FinishToolCall{Header: mut(s), FrameID: root, CallID: done.CallID, Output: "ok"})
	require.NoError(t, err)
	otherRoot := push(t, c, "other-scope", "", 10)

	// Tokens: one used, one live, one of another scope, one of a frame
	// since popped, one signed by another server for a frame of this scope.
	tok, err := c.SuspendFrame(ctx, &messages.SuspendFrame{Header: mut(s), FrameID: d3, Reason: frames.SuspendApproval, TTLMillis: 60_000})
	require.NoError(t, err)
	_, err = c.ResumeFrame(ctx, &messages.ResumeFrame{Header: mut(s), Token: tok.Token})
	require.NoError(t, err)
	live, err := c.SuspendFrame(ctx, &messages.SuspendFrame{Header: mut(s), FrameID: d3, Reason: frames.SuspendApproval, TTLMillis: 60_000})
	require.NoError(t, err)
	otherTok, err := c.SuspendFrame(ctx, &messages.SuspendFrame{Header: mut("other-scope"), FrameID: otherRoot, Reason: frames.SuspendApproval})
	require.NoError(t, err)
	gone := push(t, c, s, "", 10)
	goneTok, err := c.SuspendFrame(ctx, &messages.SuspendFrame{Header: mut(s), FrameID: gone, Reason: frames.SuspendApproval})
	require.NoError(t, err)
	_, err = c.PopFrame(ctx, &messages.PopFrame{Header: mut(s), FrameID: gone, Status: frames.StatusCancelled})
	require.NoError(t, err)

	e2 := newEnv(t, func(c *actors.Config) {
		c.TokenKey = []byte("another server's key, 32+ bytes!!")
		c.LedgerKey = []byte("another server's ledger key, 32+ bytes")
	})
	var foreign string
	{
		r := push(t, e2.c, s, "", 1)
		ft, err := e2.c.SuspendFrame(ctx, &messages.SuspendFrame{Header: mut(s), FrameID: r, Reason: frames.SuspendApproval})
		require.NoError(t, err)
		foreign = ft.Token
	}
	payload, mac, _ := strings.Cut(live.Token, ".")
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	require.NoError(t, err)
	tampered := bytes.Clone(raw)
	tampered[len(tampered)-1] ^= 1 // expiry pushed by a nanosecond, signature kept
	_, usedMAC, _ := strings.Cut(tok.Token, ".")

	// The spend ledger: a frame with a spend max that spent and holds
	// something, one without a max that holds something, a reservation for
	// a root of another scope (bound there, live), one of another scope,
	// and one signed by another server's ledger key.
	const kid = "ledger-kid"
	lp := pushLimited(t, c, s, "", 1000, "")
	_, err = c.RecordUsage(ctx, &messages.RecordUsage{Header: mut(s), FrameID: lp, Cost: budget.Cost{SpendMicros: 10}})
	require.NoError(t, err)
	held, err := c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut(s), FrameID: lp, Estimate: spend(100)})
	require.NoError(t, err)
	unlimited := pushLimited(t, c, s, "", 0, "")
	_, err = c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut(s), FrameID: unlimited, Estimate: spend(100)})
	require.NoError(t, err)
	crossRes, err := c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut(s), FrameID: lp, For: kid, Estimate: spend(200)})
	require.NoError(t, err)
	kidRoot := pushLimited(t, c, kid, "", 0, crossRes.Token)
	boundRes, err := c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut(s), FrameID: lp, For: kid, Estimate: spend(200)})
	require.NoError(t, err)
	boundRoot := pushLimited(t, c, kid, "", 0, boundRes.Token)
	_, err = c.SettleSpend(ctx, signedSettle(&messages.SettleSpend{Header: mut(s), Token: boundRes.Token, From: kid, FrameID: boundRoot, Spent: 5}))
	require.NoError(t, err, "a settlement so far: the reserving scope knows the root bound")
	otherRes, err := c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut("other-scope"), FrameID: pushLimited(t, c, "other-scope", "", 0, ""), Estimate: spend(10)})
	require.NoError(t, err)
	var foreignRes string
	{
		r := pushLimited(t, e2.c, s, "", 1000, "")
		fr, err := e2.c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut(s), FrameID: r, For: kid, Estimate: spend(100)})
		require.NoError(t, err)
		foreignRes = fr.Token
	}
	resPayload, resMAC, _ := strings.Cut(held.Token, ".")
	macRaw, err := base64.RawURLEncoding.DecodeString(resMAC)
	require.NoError(t, err)
	macRaw[0] ^= 1
	flipped := resPayload + "." + base64.RawURLEncoding.EncodeToString(macRaw)
	settle := func(token string, spent, previous int64) error {
		_, err := c.SettleSpend(ctx, signedSettle(&messages.SettleSpend{Header: mut(s), Token: token, From: kid, FrameID: kidRoot, Spent: spent, Previous: previous, Final: true}))
		return err
	}
	pushWith := func(scope, parent, token string) error {
		_, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(scope), ParentID: parent, Goal: "g", Budget: budget.TokenBudget{Total: 1}, Reservation: token})
		return err
	}
	reserve := func(frame string, est *int64, lease int64) error {
		_, err := c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut(s), FrameID: frame, Estimate: est, LeaseMillis: lease})
		return err
	}

	// A scope whose log is damaged on disk, in a store of its own.
	ed := newEnv(t)
	push(t, ed.c, "victim", "", 10)
	push(t, ed.c, "victim", "", 10)
	push(t, ed.c, "healthy", "", 10)
	ed.stop()
	db, err := bolt.Open(ed.path, 0o600, &bolt.Options{Timeout: time.Second})
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("streams")).Bucket([]byte("victim"))
		k := binary.BigEndian.AppendUint64(nil, 1)
		v := bytes.Clone(b.Get(k))
		v[len(v)-1] ^= 0x20
		return b.Put(k, v)
	}))
	require.NoError(t, db.Close())
	ed.start()
	// A truncated copy of a data file: a closed one whose pages run past
	// the cut (a live file's copy may hold only the pages its background
	// apply reached, all before the cut, and open fine).
	wholeFile := filepath.Join(t.TempDir(), "whole.db")
	fs, err := eventstore.Open(wholeFile, &eventstore.Options{NoSync: true})
	require.NoError(t, err)
	for i := range 300 {
		_, err := fs.Append(ctx, fmt.Sprintf("stream-%03d", i), 0, []eventstore.Event{{Type: "x", Data: bytes.Repeat([]byte("d"), 200)}})
		require.NoError(t, err)
	}
	require.NoError(t, fs.Close())
	clean, err := os.ReadFile(wholeFile)
	require.NoError(t, err)
	truncated := filepath.Join(t.TempDir(), "truncated.db")
	require.NoError(t, os.WriteFile(truncated, clean[:len(clean)/3], 0o600))

	_, err = c.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: s, RequestID: "reused"}, Goal: "a"})
	require.NoError(t, err)
	stale := int64(1)
	negative := int64(-1)
	huge := int64(1) << 62
	longID := strings.Repeat("i", 65)
	bigName := strings.Repeat("n", 4<<10+1)
	hash := strings.Repeat("h", 129)
	unknownIDs := make([]string, 100_000)
	for i := range unknownIDs {
		unknownIDs[i] = fmt.Sprintf("handle-%d", i)
	}
	goalOK := "fine"
	badGoal := "\xff\xfe"

	// Chains: a running one (its first link continued), a finished one,
	// a frame whose context would free nothing, one whose window no
	// continuation can free 5% of, and a chain of another scope.
	_, contOld := conversation(t, e, s, 2_000, 10)
	cont, err := c.ContinueFrame(ctx, &messages.ContinueFrame{Header: mut(s), FrameID: contOld, ResumeCeiling: 200})
	require.NoError(t, err)
	_, finOld := conversation(t, e, s, 2_000, 10)
	fin, err := c.ContinueFrame(ctx, &messages.ContinueFrame{Header: mut(s), FrameID: finOld, ResumeCeiling: 200})
	require.NoError(t, err)
	_, err = c.PopFrame(ctx, &messages.PopFrame{Header: mut(s), FrameID: fin.FrameID, Status: frames.StatusCompleted})
	require.NoError(t, err)
	_, full := conversation(t, e, s, 2_000, 10)
	_, vast := conversation(t, e, s, 1<<62, 10)
	_, foreignOld := conversation(t, e, "other-scope", 2_000, 10)
	foreignChain, err := c.ContinueFrame(ctx, &messages.ContinueFrame{Header: mut("other-scope"), FrameID: foreignOld, ResumeCeiling: 200})
	require.NoError(t, err)
	headIs := func(want string) func(error) error { // frame_continued names the chain's head
		return func(err error) error {
			var me *messages.Error
			if errorsAs(err, &me) {
				assert.Equal(t, want, me.Head, "frame_continued names the head")
			}
			return err
		}
	}
	resume := func(id, msg string, ceiling int64) error {
		_, err := c.ResumeChain(ctx, &messages.ResumeChain{Header: mut(s), ChainID: id, Message: msg, ResumeCeiling: ceiling})
		return err
	}
	search := func(r messages.SearchChain) error {
		r.Header = messages.Header{Scope: s}
		if r.FrameID == "" {
			r.FrameID = contOld
		}
		_, err := c.SearchChain(ctx, &r)
		return err
	}

	// Scope state: a value, a list holding a 300 KiB item and a key of
	// root's level here; a scope of its own filled close to its 1 MiB
	// limit (two 500 KiB values: 24,504 bytes left), with a live frame.
	const fullScope = "bad-state-full"
	kv, err := c.ChangeState(ctx, &messages.ChangeState{Header: mut(s), Ops: []messages.StateOp{
		{Kind: "set", Key: "plan", Value: []byte("v1")},
		{Kind: "push", Key: "log", Value: bytes.Repeat([]byte("l"), 300<<10)},
		{Kind: "set", FrameID: root, Key: "req", Value: []byte("r")},
	}})
	require.NoError(t, err)
	for _, k := range []string{"big1", "big2"} {
		_, err := c.ChangeState(ctx, &messages.ChangeState{Header: mut(fullScope), Ops: []messages.StateOp{{Kind: "set", Key: k, Value: make([]byte, 500<<10)}}})
		require.NoError(t, err)
	}
	fullFrame := push(t, c, fullScope, "", 10)
	change := func(scope string, ops ...messages.StateOp) error {
		_, err := c.ChangeState(ctx, &messages.ChangeState{Header: mut(scope), Ops: ops})
		return err
	}
	getState := func(frame string, keys ...string) error {
		_, err := c.GetState(ctx, &messages.GetState{Header: messages.Header{Scope: s}, FrameID: frame, Keys: keys})
		return err
	}
	rangeState := func(r messages.RangeState) error {
		r.Header = messages.Header{Scope: s}
		_, err := c.RangeState(ctx, &r)
		return err
	}
	history := func(r messages.StateHistory) error {
		r.Header = messages.Header{Scope: s}
		_, err := c.StateHistory(ctx, &r)
		return err
	}
	// says checks that a refusal's message names each of parts.
	says := func(err error, parts ...string) error {
		var me *messages.Error
		if errorsAs(err, &me) {
			for _, p := range parts {
				assert.Contains(t, me.Message, p)
			}
		}
		return err
	}
	manyOps := make([]messages.StateOp, frames.MaxStateOps+1)
	for i := range manyOps {
		manyOps[i] = messages.StateOp{Kind: "set", Key: fmt.Sprintf("k%d", i), Value: []byte("v")}
	}
	manyKeys := make([]string, frames.MaxStateOps+1)
	for i := range manyKeys {
		manyKeys[i] = fmt.Sprintf("k%d", i)
	}
	longKey := strings.Repeat("k", frames.DefaultMaxStateKeyBytes+1)
	// Partial output: a frame streaming an output 10 bytes under the
	// content limit (the bound of a whole output), and one suspended.
	streaming := push(t, c, s, "", 10)
	_, err = c.RecordPartialOutput(ctx, &messages.RecordPartialOutput{Header: mut(s), FrameID: streaming, Delta: strings.Repeat("o", maxContent-10), Percent: 50})
	require.NoError(t, err)
	partial := func(frame, delta string, percent int64) error {
		_, err := c.RecordPartialOutput(ctx, &messages.RecordPartialOutput{Header: mut(s), FrameID: frame, Delta: delta, Percent: percent})
		return err
	}
	namesAll := func(parts ...string) func(error) error { // the error names what is wrong
		return func(err error) error {
			for _, p := range parts {
				assert.Contains(t, fmt.Sprint(err), p)
			}
			return err
		}
	}

	type tc struct {
		name string
		call func() error
		want error
		env  *env // default e
	}
	m := func(id string) messages.Header { return messages.Header{Scope: s, RequestID: id} }
	cases := []tc{
		// Scopes: the rule ^[A-Za-z0-9._:-]{1,128}$, NUL and invalid UTF-8.
		{"scope with a space", func() error {
			_, err := c.GetStack(ctx, &messages.GetStack{Header: messages.Header{Scope: "no spaces"}})
			return err
		}, actors.ErrInvalidScope, nil},
		{"empty scope", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(""), Goal: "g"})
			return err
		}, actors.ErrInvalidScope, nil},
		{"scope with NUL", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut("a\x00b"), Goal: "g"})
			return err
		}, actors.ErrInvalidScope, nil},
		{"scope of invalid UTF-8", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut("a\xff\xfe"), Goal: "g"})
			return err
		}, actors.ErrInvalidScope, nil},
		{"scope with a path", func() error {
			_, err := c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: "../other-scope"}, FrameID: otherRoot})
			return err
		}, actors.ErrInvalidScope, nil},
		{"scope too long", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(strings.Repeat("s", 129)), Goal: "g"})
			return err
		}, actors.ErrInvalidScope, nil},
		{"resume actor on a NUL scope", func() error {
			_, err := c.ResumeActor(ctx, &messages.ResumeActor{Header: messages.Header{Scope: "\x00"}})
			return err
		}, actors.ErrInvalidScope, nil},

		// Ids: printable ASCII, at most 64 bytes; NUL, invalid UTF-8.
		{"frame id with NUL", func() error {
			_, err := c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: s}, FrameID: root + "\x00"})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"frame id of invalid UTF-8", func() error {
			_, err := c.AddResult(ctx, &messages.AddResult{Header: mut(s), FrameID: "\xc3\x28", Kind: "k", Ref: "r"})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"frame id too long", func() error {
			_, err := c.GetStack(ctx, &messages.GetStack{Header: messages.Header{Scope: s}, FrameID: longID})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"parent id with NUL", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(s), ParentID: "p\x00", Goal: "g"})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"handle id with NUL", func() error {
			_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut(s), FrameID: root, HandleID: "h\x00", Priority: compaction.Low})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"handle id of invalid UTF-8", func() error {
			_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut(s), FrameID: root, HandleID: "\xff", Priority: compaction.Low})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"tool call id with NUL", func() error {
			_, err := c.StartToolCall(ctx, &messages.StartToolCall{Header: mut(s), FrameID: root, CallID: "c\x00", Name: "t"})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"result id too long", func() error {
			_, err := c.AddResult(ctx, &messages.AddResult{Header: mut(s), FrameID: root, ResultID: longID, Kind: "k", Ref: "r"})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"request id with NUL", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Header: m("a\x00"), Goal: "g"})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"request id of invalid UTF-8", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Header: m("\xe2\x28\xa1"), Goal: "g"})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"request id too long", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Header: m(longID), Goal: "g"})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"resume actor with a NUL request id", func() error {
			_, err := c.ResumeActor(ctx, &messages.ResumeActor{Header: messages.Header{Scope: s, RequestID: "\x00"}})
			return err
		}, actors.ErrInvalidArgument, nil},

		// Text fields: NUL, invalid UTF-8, over their limits.
		{"content with NUL", func() error {
			_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut(s), FrameID: root, Priority: compaction.Low, Content: "a\x00b"})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"content of invalid UTF-8", func() error {
			_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut(s), FrameID: root, Priority: compaction.Low, Content: "\xc3\x28"})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"goal of invalid UTF-8", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(s), Goal: "\xff"})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"updated goal of invalid UTF-8", func() error {
			_, err := c.UpdateFrame(ctx, &messages.UpdateFrame{Header: mut(s), FrameID: root, Goal: &badGoal})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"handle kind with NUL", func() error {
			_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut(s), FrameID: root, Kind: "k\x00", Priority: compaction.Low})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"tool name of invalid UTF-8", func() error {
			_, err := c.StartToolCall(ctx, &messages.StartToolCall{Header: mut(s), FrameID: root, Name: "\xff"})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"empty tool name", func() error {
			_, err := c.StartToolCall(ctx, &messages.StartToolCall{Header: mut(s), FrameID: root})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"result ref with NUL", func() error {
			_, err := c.AddResult(ctx, &messages.AddResult{Header: mut(s), FrameID: root, Kind: "k", Ref: "/etc/\x00"})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"suspension note of invalid UTF-8", func() error {
			_, err := c.SuspendFrame(ctx, &messages.SuspendFrame{Header: mut(s), FrameID: root, Reason: frames.SuspendApproval, Note: "\xff"})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"oversized goal", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(s), Goal: strings.Repeat("g", 5000)})
			return err
		}, actors.ErrTooLarge, nil},
		{"content one byte over the configured limit", func() error {
			_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut(s), FrameID: root, Priority: compaction.Low, Content: strings.Repeat("x", maxContent+1)})
			return err
		}, actors.ErrTooLarge, nil},
		{"content over the default limit", func() error {
			_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut(s), FrameID: root, Priority: compaction.Low, Content: strings.Repeat("x", 257<<10)})
			return err
		}, actors.ErrTooLarge, nil},
		{"tool output over the configured limit", func() error {
			_, err := c.FinishToolCall(ctx, &messages.FinishToolCall{Header: mut(s), FrameID: root, CallID: call.CallID, Output: strings.Repeat("o", maxContent+1)})
			return err
		}, actors.ErrTooLarge, nil},
		{"tool call text over the configured limit", func() error {
			_, err := c.FinishToolCall(ctx, &messages.FinishToolCall{Header: mut(s), FrameID: root, CallID: call.CallID, Call: strings.Repeat("c", maxContent+1)})
			return err
		}, actors.ErrTooLarge, nil},
		{"result summary over the configured limit", func() error {
			_, err := c.AddResult(ctx, &messages.AddResult{Header: mut(s), FrameID: root, Kind: "k", Ref: "r", Summary: strings.Repeat("s", maxContent+1)})
			return err
		}, actors.ErrTooLarge, nil},
		{"oversized handle kind", func() error {
			_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut(s), FrameID: root, Kind: bigName, Priority: compaction.Low})
			return err
		}, actors.ErrTooLarge, nil},
		{"oversized tool name", func() error {
			_, err := c.StartToolCall(ctx, &messages.StartToolCall{Header: mut(s), FrameID: root, Name: bigName})
			return err
		}, actors.ErrTooLarge, nil},
		{"oversized suspension note", func() error {
			_, err := c.SuspendFrame(ctx, &messages.SuspendFrame{Header: mut(s), FrameID: root, Reason: frames.SuspendApproval, Note: bigName})
			return err
		}, actors.ErrTooLarge, nil},
		{"oversized pack role", func() error {
			_, err := c.AssembleContextPack(ctx, &messages.AssembleContextPack{Header: messages.Header{Scope: s}, FrameID: root, BudgetTokens: 5000, Role: bigName})
			return err
		}, actors.ErrTooLarge, nil},
		{"oversized context hash", func() error {
			_, err := c.UpdateFrame(ctx, &messages.UpdateFrame{Header: mut(s), FrameID: root, ContextHash: &hash})
			return err
		}, actors.ErrTooLarge, nil},

		// Opaque inputs: huge maps, oversized bytes.
		{"huge map in push inputs", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(s), Goal: "g", Inputs: hugeMap(t, 10_000)})
			return err
		}, actors.ErrTooLarge, nil},
		{"huge map in updated inputs", func() error {
			_, err := c.UpdateFrame(ctx, &messages.UpdateFrame{Header: mut(s), FrameID: root, SetInputs: true, Inputs: hugeMap(t, 10_000)})
			return err
		}, actors.ErrTooLarge, nil},
		{"huge map in tool input", func() error {
			_, err := c.StartToolCall(ctx, &messages.StartToolCall{Header: mut(s), FrameID: root, Name: "t", Input: hugeMap(t, 10_000)})
			return err
		}, actors.ErrTooLarge, nil},
		{"oversized inputs", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(s), Goal: "g", Inputs: make([]byte, 65<<10)})
			return err
		}, actors.ErrTooLarge, nil},
		{"inputs without SetInputs", func() error {
			_, err := c.UpdateFrame(ctx, &messages.UpdateFrame{Header: mut(s), FrameID: root, Inputs: []byte{0x80}})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"100,000 unknown handles to include", func() error {
			_, err := c.AssembleContextPack(ctx, &messages.AssembleContextPack{Header: messages.Header{Scope: s}, FrameID: root, BudgetTokens: 5000, IncludeHandles: unknownIDs})
			return err
		}, actors.ErrHandleNotFound, nil},

		// Unknown frames, and frames of another scope: answered exactly as
		// unknown, for every operation that names a frame.
		{"unknown frame", func() error {
			_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut(s), FrameID: "ghost", Priority: compaction.Low})
			return err
		}, actors.ErrFrameNotFound, nil},
		{"frame of another scope: GetFrame", func() error {
			return sameAsUnknown(t, otherRoot, func(id string) error {
				_, err := c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: s}, FrameID: id, WithHandles: true})
				return err
			})
		}, actors.ErrFrameNotFound, nil},
		{"frame of another scope: GetStack", func() error {
			return sameAsUnknown(t, otherRoot, func(id string) error {
				_, err := c.GetStack(ctx, &messages.GetStack{Header: messages.Header{Scope: s}, FrameID: id})
				return err
			})
		}, actors.ErrFrameNotFound, nil},
		{"frame of another scope: AssembleContextPack", func() error {
			return sameAsUnknown(t, otherRoot, func(id string) error {
				_, err := c.AssembleContextPack(ctx, &messages.AssembleContextPack{Header: messages.Header{Scope: s}, FrameID: id, BudgetTokens: 1000})
				return err
			})
		}, actors.ErrFrameNotFound, nil},
		{"frame of another scope: PushFrame parent", func() error {
			return sameAsUnknown(t, otherRoot, func(id string) error {
				_, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(s), ParentID: id, Goal: "g"})
				return err
			})
		}, actors.ErrFrameNotFound, nil},
		{"frame of another scope: PopFrame", func() error {
			return sameAsUnknown(t, otherRoot, func(id string) error {
				_, err := c.PopFrame(ctx, &messages.PopFrame{Header: mut(s), FrameID: id, Status: frames.StatusCompleted})
				return err
			})
		}, actors.ErrFrameNotFound, nil},
		{"frame of another scope: UpdateFrame", func() error {
			return sameAsUnknown(t, otherRoot, func(id string) error {
				_, err := c.UpdateFrame(ctx, &messages.UpdateFrame{Header: mut(s), FrameID: id, Goal: &goalOK})
				return err
			})
		}, actors.ErrFrameNotFound, nil},
		{"frame of another scope: AddContextHandle", func() error {
			return sameAsUnknown(t, otherRoot, func(id string) error {
				_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut(s), FrameID: id, Priority: compaction.Low})
				return err
			})
		}, actors.ErrFrameNotFound, nil},
		{"frame of another scope: AddResult", func() error {
			return sameAsUnknown(t, otherRoot, func(id string) error {
				_, err := c.AddResult(ctx, &messages.AddResult{Header: mut(s), FrameID: id, Kind: "k", Ref: "r"})
				return err
			})
		}, actors.ErrFrameNotFound, nil},
		{"frame of another scope: RecordUsage", func() error {
			return sameAsUnknown(t, otherRoot, func(id string) error {
				_, err := c.RecordUsage(ctx, &messages.RecordUsage{Header: mut(s), FrameID: id, Cost: budget.Cost{Turns: 1}})
				return err
			})
		}, actors.ErrFrameNotFound, nil},
		{"frame of another scope: StartToolCall", func() error {
			return sameAsUnknown(t, otherRoot, func(id string) error {
				_, err := c.StartToolCall(ctx, &messages.StartToolCall{Header: mut(s), FrameID: id, Name: "t"})
				return err
			})
		}, actors.ErrFrameNotFound, nil},
		{"frame of another scope: FinishToolCall", func() error {
			return sameAsUnknown(t, otherRoot, func(id string) error {
				_, err := c.FinishToolCall(ctx, &messages.FinishToolCall{Header: mut(s), FrameID: id, CallID: call.CallID, Output: "o"})
				return err
			})
		}, actors.ErrFrameNotFound, nil},
		{"frame of another scope: SuspendFrame", func() error {
			return sameAsUnknown(t, otherRoot, func(id string) error {
				_, err := c.SuspendFrame(ctx, &messages.SuspendFrame{Header: mut(s), FrameID: id, Reason: frames.SuspendApproval})
				return err
			})
		}, actors.ErrFrameNotFound, nil},
		{"frame of another scope: CompactContext", func() error {
			return sameAsUnknown(t, otherRoot, func(id string) error {
				_, err := c.CompactContext(ctx, &messages.CompactContext{Header: mut(s), FrameID: id})
				return err
			})
		}, actors.ErrFrameNotFound, nil},

		// Chains: a chain id of another scope is not found, for every
		// operation that names one (its first link and its head alike).
		{"chain of another scope: ContinueFrame", func() error {
			return sameAsUnknown(t, foreignChain.FrameID, func(id string) error {
				_, err := c.ContinueFrame(ctx, &messages.ContinueFrame{Header: mut(s), FrameID: id})
				return err
			})
		}, actors.ErrFrameNotFound, nil},
		{"chain of another scope: ContinueFrame of its continued link", func() error {
			return sameAsUnknown(t, foreignOld, func(id string) error {
				_, err := c.ContinueFrame(ctx, &messages.ContinueFrame{Header: mut(s), FrameID: id})
				return err
			})
		}, actors.ErrFrameNotFound, nil},
		{"chain of another scope: GetChain", func() error {
			return sameAsUnknown(t, foreignOld, func(id string) error {
				_, err := c.GetChain(ctx, &messages.GetChain{Header: messages.Header{Scope: s}, FrameID: id})
				return err
			})
		}, actors.ErrFrameNotFound, nil},
		{"chain of another scope: GetChain by its head", func() error {
			return sameAsUnknown(t, foreignChain.FrameID, func(id string) error {
				_, err := c.GetChain(ctx, &messages.GetChain{Header: messages.Header{Scope: s}, FrameID: id})
				return err
			})
		}, actors.ErrFrameNotFound, nil},
		{"chain of another scope: ResumeChain", func() error {
			return sameAsUnknown(t, foreignOld, func(id string) error { return resume(id, "go on", 0) })
		}, actors.ErrFrameNotFound, nil},
		{"chain of another scope: SearchChain", func() error {
			return sameAsUnknown(t, foreignOld, func(id string) error { return search(messages.SearchChain{FrameID: id, Query: "turn"}) })
		}, actors.ErrFrameNotFound, nil},

		// Continuing: a continued frame (frame_continued, naming the
		// head), a finished one, a suspended one, one with live children,
		// absurd resume ceilings, and continuations that free nothing.
		{"continue a continued frame", func() error {
			_, err := c.ContinueFrame(ctx, &messages.ContinueFrame{Header: mut(s), FrameID: contOld})
			return headIs(cont.FrameID)(err)
		}, actors.ErrFrameContinued, nil},
		{"continue a link of a finished chain", func() error {
			_, err := c.ContinueFrame(ctx, &messages.ContinueFrame{Header: mut(s), FrameID: finOld})
			return headIs(fin.FrameID)(err)
		}, actors.ErrFrameContinued, nil},
		{"continue a finished head", func() error {
			_, err := c.ContinueFrame(ctx, &messages.ContinueFrame{Header: mut(s), FrameID: fin.FrameID})
			return err
		}, actors.ErrFrameNotLive, nil},
		{"continue a suspended frame", func() error {
			_, err := c.ContinueFrame(ctx, &messages.ContinueFrame{Header: mut(s), FrameID: d3})
			return err
		}, actors.ErrFrameNotLive, nil},
		{"continue a frame with live children", func() error {
			_, err := c.ContinueFrame(ctx, &messages.ContinueFrame{Header: mut(s), FrameID: child})
			return err
		}, actors.ErrLiveChildren, nil},
		{"negative resume ceiling", func() error {
			_, err := c.ContinueFrame(ctx, &messages.ContinueFrame{Header: mut(s), FrameID: full, ResumeCeiling: -1})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"most negative resume ceiling", func() error {
			_, err := c.ContinueFrame(ctx, &messages.ContinueFrame{Header: mut(s), FrameID: full, ResumeCeiling: -1 << 63})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"huge resume ceiling: carrying everything frees nothing", func() error {
			_, err := c.ContinueFrame(ctx, &messages.ContinueFrame{Header: mut(s), FrameID: full, ResumeCeiling: 1<<63 - 1})
			return err
		}, actors.ErrCompactionRefused, nil},
		{"continue a frame whose window is huge: 5% of it is never freed", func() error {
			_, err := c.ContinueFrame(ctx, &messages.ContinueFrame{Header: mut(s), FrameID: vast, ResumeCeiling: 1})
			return err
		}, actors.ErrCompactionRefused, nil},
		{"continuation summary of invalid UTF-8", func() error {
			_, err := c.ContinueFrame(ctx, &messages.ContinueFrame{Header: mut(s), FrameID: full, ResumeCeiling: 200, Summary: "\xff"})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"oversized continuation summary", func() error {
			_, err := c.ContinueFrame(ctx, &messages.ContinueFrame{Header: mut(s), FrameID: full, ResumeCeiling: 200, Summary: strings.Repeat("s", maxContent+1)})
			return err
		}, actors.ErrTooLarge, nil},
		{"continuation frame id with NUL", func() error {
			_, err := c.ContinueFrame(ctx, &messages.ContinueFrame{Header: mut(s), FrameID: full + "\x00"})
			return err
		}, actors.ErrInvalidArgument, nil},

		// Mutations naming a continued link: frame_continued, naming the head.
		{"add a handle to a continued frame", func() error {
			_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut(s), FrameID: contOld, Priority: compaction.Low, Content: "late"})
			return headIs(cont.FrameID)(err)
		}, actors.ErrFrameContinued, nil},
		{"start a tool call in a continued frame", func() error {
			_, err := c.StartToolCall(ctx, &messages.StartToolCall{Header: mut(s), FrameID: contOld, Name: "t"})
			return headIs(cont.FrameID)(err)
		}, actors.ErrFrameContinued, nil},
		{"record usage on a continued frame", func() error {
			_, err := c.RecordUsage(ctx, &messages.RecordUsage{Header: mut(s), FrameID: contOld, Cost: budget.Cost{Turns: 1}})
			return headIs(cont.FrameID)(err)
		}, actors.ErrFrameContinued, nil},
		{"add a result to a continued frame", func() error {
			_, err := c.AddResult(ctx, &messages.AddResult{Header: mut(s), FrameID: contOld, Kind: "k", Ref: "r"})
			return headIs(cont.FrameID)(err)
		}, actors.ErrFrameContinued, nil},
		{"suspend a continued frame", func() error {
			_, err := c.SuspendFrame(ctx, &messages.SuspendFrame{Header: mut(s), FrameID: contOld, Reason: frames.SuspendApproval})
			return headIs(cont.FrameID)(err)
		}, actors.ErrFrameContinued, nil},
		{"update a continued frame", func() error {
			_, err := c.UpdateFrame(ctx, &messages.UpdateFrame{Header: mut(s), FrameID: contOld, Goal: &goalOK})
			return headIs(cont.FrameID)(err)
		}, actors.ErrFrameContinued, nil},

		// Resuming: a running chain, by any link; bad messages; bad ceilings.
		{"resume a running chain by its first link", func() error { return resume(contOld, "go on", 0) }, actors.ErrChainRunning, nil},
		{"resume a running chain by its head", func() error { return resume(cont.FrameID, "go on", 0) }, actors.ErrChainRunning, nil},
		{"resume a frame in no chain that is running", func() error { return resume(full, "go on", 0) }, actors.ErrChainRunning, nil},
		{"resume an unknown chain", func() error { return resume("ghost", "go on", 0) }, actors.ErrFrameNotFound, nil},
		{"resume with a chain id with NUL", func() error { return resume(finOld+"\x00", "go on", 0) }, actors.ErrInvalidArgument, nil},
		{"resume with a chain id too long", func() error { return resume(longID, "go on", 0) }, actors.ErrInvalidArgument, nil},
		{"resume with an empty message", func() error { return resume(finOld, "", 0) }, actors.ErrInvalidArgument, nil},
		{"resume with a message of invalid UTF-8", func() error { return resume(finOld, "go \xc3\x28", 0) }, actors.ErrInvalidArgument, nil},
		{"resume with a message with NUL", func() error { return resume(finOld, "go\x00on", 0) }, actors.ErrInvalidArgument, nil},
		{"resume with a message over the configured limit", func() error {
			return resume(finOld, strings.Repeat("m", maxContent+1), 0)
		}, actors.ErrTooLarge, nil},
		{"resume with a negative resume ceiling", func() error { return resume(finOld, "go on", -1) }, actors.ErrInvalidArgument, nil},
		{"resume with the most negative resume ceiling", func() error { return resume(fin.FrameID, "go on", -1<<63) }, actors.ErrInvalidArgument, nil},
		{"resume with a negative budget", func() error {
			_, err := c.ResumeChain(ctx, &messages.ResumeChain{Header: mut(s), ChainID: finOld, Message: "go on", Budget: budget.TokenBudget{Total: -5}})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"resume with a budget its parent cannot allocate", func() error {
			_, err := c.ResumeChain(ctx, &messages.ResumeChain{Header: mut(s), ChainID: finOld, Message: "go on", Budget: budget.TokenBudget{Total: 1 << 40}})
			return err
		}, actors.ErrInsufficientTokens, nil},
		{"resume with negative limits", func() error {
			_, err := c.ResumeChain(ctx, &messages.ResumeChain{Header: mut(s), ChainID: finOld, Message: "go on", Limits: budget.Limits{Turns: -1}})
			return err
		}, actors.ErrInvalidArgument, nil},

		// Reading chains: bad ids; searching: bad expressions, limits, cursors.
		{"get the chain of an unknown frame", func() error {
			_, err := c.GetChain(ctx, &messages.GetChain{Header: messages.Header{Scope: s}, FrameID: "ghost"})
			return err
		}, actors.ErrFrameNotFound, nil},
		{"get a chain by an id of invalid UTF-8", func() error {
			_, err := c.GetChain(ctx, &messages.GetChain{Header: messages.Header{Scope: s}, FrameID: "\xff"})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"search with a bad regular expression", func() error { return search(messages.SearchChain{Query: "turn (", Regex: true}) }, actors.ErrInvalidArgument, nil},
		{"search with a backreference (not RE2)", func() error { return search(messages.SearchChain{Query: `(a)\1`, Regex: true}) }, actors.ErrInvalidArgument, nil},
		{"search with a huge limit", func() error { return search(messages.SearchChain{Query: "turn", Limit: 1 << 40}) }, actors.ErrInvalidArgument, nil},
		{"search with a negative limit", func() error { return search(messages.SearchChain{Query: "turn", Limit: -1}) }, actors.ErrInvalidArgument, nil},
		{"search with a garbage cursor", func() error { return search(messages.SearchChain{Query: "turn", Cursor: "\x00garbage"}) }, actors.ErrInvalidArgument, nil},
		{"search with a cursor of another search", func() error {
			page, err := c.SearchChain(ctx, &messages.SearchChain{Header: messages.Header{Scope: s}, FrameID: contOld, Query: "turn", Limit: 1})
			require.NoError(t, err)
			require.NotEmpty(t, page.Next)
			return search(messages.SearchChain{Query: "assistant", Cursor: page.Next})
		}, actors.ErrInvalidArgument, nil},
		{"search an unknown chain", func() error { return search(messages.SearchChain{FrameID: "ghost", Query: "turn"}) }, actors.ErrFrameNotFound, nil},
		{"search for an oversized query", func() error { return search(messages.SearchChain{Query: strings.Repeat("q", 1<<20)}) }, actors.ErrInvalidArgument, nil},
		{"search for an empty query", func() error { return search(messages.SearchChain{Query: ""}) }, actors.ErrInvalidArgument, nil},

		// Context windows.
		{"negative context window", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(s), Goal: "g", Budget: budget.TokenBudget{Total: 10}, ContextWindow: -1})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"most negative context window", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(s), ParentID: root, Goal: "g", Budget: budget.TokenBudget{Total: 10}, ContextWindow: -1 << 63})
			return err
		}, actors.ErrInvalidArgument, nil},

		// Depth: the server's limit, and a parent's own.
		{"push beyond max depth", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(s), ParentID: d3b, Goal: "g"})
			return err
		}, actors.ErrMaxDepthExceeded, nil},
		{"push beyond the parent's max subframe depth", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(s), ParentID: shallowChild, Goal: "g"})
			return err
		}, actors.ErrMaxDepthExceeded, nil},
		{"negative max subframe depth", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(s), Goal: "g", Budget: budget.TokenBudget{Total: 1, MaxSubframeDepth: -1}})
			return err
		}, actors.ErrInvalidArgument, nil},

		// Budgets and numbers.
		{"parent cannot allocate", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(s), ParentID: root, Goal: "g", Budget: budget.TokenBudget{Total: 901}})
			return err
		}, actors.ErrInsufficientTokens, nil},
		{"reserve more than available", func() error {
			_, err := c.UpdateFrame(ctx, &messages.UpdateFrame{Header: mut(s), FrameID: root, ReserveDelta: 1 << 40})
			return err
		}, actors.ErrInsufficientTokens, nil},
		{"release more than reserved", func() error {
			_, err := c.UpdateFrame(ctx, &messages.UpdateFrame{Header: mut(s), FrameID: root, ReserveDelta: -5})
			return err
		}, actors.ErrInsufficientTokens, nil},
		{"overflowing reservation", func() error {
			_, err := c.UpdateFrame(ctx, &messages.UpdateFrame{Header: mut(s), FrameID: root, ReserveDelta: -1 << 63})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"negative budget", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(s), Goal: "g", Budget: budget.TokenBudget{Total: -5}})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"budget claiming tokens already used", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(s), Goal: "g", Budget: budget.TokenBudget{Total: 10, Used: 5}})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"negative limits", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(s), Goal: "g", Limits: budget.Limits{Turns: -1}})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"negative usage", func() error {
			_, err := c.RecordUsage(ctx, &messages.RecordUsage{Header: mut(s), FrameID: root, Cost: budget.Cost{Turns: -1}})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"overflowing usage", func() error {
			_, err := c.RecordUsage(ctx, &messages.RecordUsage{Header: mut(s), FrameID: root, Cost: budget.Cost{InputTokens: huge, OutputTokens: huge}})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"usage that records spawns", func() error {
			_, err := c.RecordUsage(ctx, &messages.RecordUsage{Header: mut(s), FrameID: root, Cost: budget.Cost{Spawns: 3}})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"empty usage", func() error {
			_, err := c.RecordUsage(ctx, &messages.RecordUsage{Header: mut(s), FrameID: root})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"negative token TTL", func() error {
			_, err := c.SuspendFrame(ctx, &messages.SuspendFrame{Header: mut(s), FrameID: root, Reason: frames.SuspendApproval, TTLMillis: -1})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"negative compaction target", func() error {
			_, err := c.CompactContext(ctx, &messages.CompactContext{Header: mut(s), FrameID: root, TargetTokens: -1})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"unknown checkpoint reason", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: s, Reason: 99}, Goal: "g"})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"pop to a live status", func() error {
			_, err := c.PopFrame(ctx, &messages.PopFrame{Header: mut(s), FrameID: d3b, Status: frames.StatusActive})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"pop to an unknown status", func() error {
			_, err := c.PopFrame(ctx, &messages.PopFrame{Header: mut(s), FrameID: d3b, Status: 200})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"unknown suspension reason", func() error {
			_, err := c.SuspendFrame(ctx, &messages.SuspendFrame{Header: mut(s), FrameID: root, Reason: "because"})
			return err
		}, actors.ErrInvalidArgument, nil},

		// Packs.
		{"pack budget under 500", func() error {
			_, err := c.AssembleContextPack(ctx, &messages.AssembleContextPack{Header: messages.Header{Scope: s}, FrameID: root, BudgetTokens: 499})
			return err
		}, actors.ErrBudgetTooSmall, nil},
		{"negative pack budget", func() error {
			_, err := c.AssembleContextPack(ctx, &messages.AssembleContextPack{Header: messages.Header{Scope: s}, FrameID: root, BudgetTokens: -1 << 63})
			return err
		}, actors.ErrBudgetTooSmall, nil},
		{"critical content over budget", func() error {
			_, err := c.AssembleContextPack(ctx, &messages.AssembleContextPack{Header: messages.Header{Scope: s}, FrameID: root, BudgetTokens: 600})
			return err
		}, actors.ErrCriticalExceedsBudget, nil},
		{"unknown compaction level", func() error {
			_, err := c.AssembleContextPack(ctx, &messages.AssembleContextPack{Header: messages.Header{Scope: s}, FrameID: root, BudgetTokens: 5000, MinCompaction: 42})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"include unknown handle", func() error {
			_, err := c.AssembleContextPack(ctx, &messages.AssembleContextPack{Header: messages.Header{Scope: s}, FrameID: root, BudgetTokens: 5000, IncludeHandles: []string{"nope"}})
			return err
		}, actors.ErrHandleNotFound, nil},

		// Handles, tools, compaction.
		{"bad priority", func() error {
			_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut(s), FrameID: root, Priority: 9})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"finish an unknown tool call", func() error {
			_, err := c.FinishToolCall(ctx, &messages.FinishToolCall{Header: mut(s), FrameID: root, CallID: "never-started", Output: "o"})
			return err
		}, actors.ErrToolCallNotFound, nil},
		{"finish a tool call twice", func() error {
			_, err := c.FinishToolCall(ctx, &messages.FinishToolCall{Header: mut(s), FrameID: root, CallID: done.CallID, Output: "o"})
			return err
		}, actors.ErrToolCallFinished, nil},
		{"start a tool call with a used id", func() error {
			_, err := c.StartToolCall(ctx, &messages.StartToolCall{Header: mut(s), FrameID: root, CallID: call.CallID, Name: "t"})
			return err
		}, actors.ErrDuplicateID, nil},
		{"unknown strategy", func() error {
			_, err := c.CompactContext(ctx, &messages.CompactContext{Header: mut(s), FrameID: root, Strategy: messages.Strategy{Kind: "magic"}})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"unregistered custom strategy", func() error {
			_, err := c.CompactContext(ctx, &messages.CompactContext{Header: mut(s), FrameID: root, Strategy: messages.Strategy{Kind: messages.StrategyCustom, Custom: "x"}})
			return err
		}, actors.ErrInvalidArgument, nil},

		// Frame lifecycle.
		{"pop with live children", func() error {
			_, err := c.PopFrame(ctx, &messages.PopFrame{Header: mut(s), FrameID: child, Status: frames.StatusCompleted})
			return err
		}, actors.ErrLiveChildren, nil},
		{"write to a popped frame", func() error {
			_, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut(s), FrameID: gone, Priority: compaction.Low})
			return err
		}, actors.ErrFrameNotLive, nil},
		{"suspend a suspended frame", func() error {
			_, err := c.SuspendFrame(ctx, &messages.SuspendFrame{Header: mut(s), FrameID: d3, Reason: frames.SuspendApproval})
			return err
		}, actors.ErrNotSuspendable, nil},

		// Suspension tokens.
		{"forged token", func() error {
			_, err := c.ResumeFrame(ctx, &messages.ResumeFrame{Header: mut(s), Token: payload + ".AAAA"})
			return err
		}, actors.ErrTokenInvalid, nil},
		{"token with a tampered payload", func() error {
			_, err := c.ResumeFrame(ctx, &messages.ResumeFrame{Header: mut(s), Token: base64.RawURLEncoding.EncodeToString(tampered) + "." + mac})
			return err
		}, actors.ErrTokenInvalid, nil},
		{"token with another token's signature", func() error {
			_, err := c.ResumeFrame(ctx, &messages.ResumeFrame{Header: mut(s), Token: payload + "." + usedMAC})
			return err
		}, actors.ErrTokenInvalid, nil},
		{"token of another server", func() error {
			_, err := c.ResumeFrame(ctx, &messages.ResumeFrame{Header: mut(s), Token: foreign})
			return err
		}, actors.ErrTokenInvalid, nil},
		{"token of another scope", func() error {
			_, err := c.ResumeFrame(ctx, &messages.ResumeFrame{Header: mut(s), Token: otherTok.Token})
			return err
		}, actors.ErrTokenInvalid, nil},
		{"truncated token", func() error {
			_, err := c.ResumeFrame(ctx, &messages.ResumeFrame{Header: mut(s), Token: live.Token[:len(live.Token)-3]})
			return err
		}, actors.ErrTokenInvalid, nil},
		{"token cut at the dot", func() error {
			_, err := c.ResumeFrame(ctx, &messages.ResumeFrame{Header: mut(s), Token: payload})
			return err
		}, actors.ErrTokenInvalid, nil},
		{"empty token", func() error { _, err := c.ResumeFrame(ctx, &messages.ResumeFrame{Header: mut(s)}); return err }, actors.ErrTokenInvalid, nil},
		{"garbage token", func() error {
			_, err := c.ResumeFrame(ctx, &messages.ResumeFrame{Header: mut(s), Token: "\x00\xff not a token"})
			return err
		}, actors.ErrTokenInvalid, nil},
		{"oversized token", func() error {
			_, err := c.ResumeFrame(ctx, &messages.ResumeFrame{Header: mut(s), Token: strings.Repeat("A", 1<<20)})
			return err
		}, actors.ErrTokenInvalid, nil},
		{"replayed token", func() error {
			_, err := c.ResumeFrame(ctx, &messages.ResumeFrame{Header: mut(s), Token: tok.Token})
			return err
		}, actors.ErrTokenUsed, nil},
		{"expired token", func() error {
			e.clock.Advance(2 * time.Minute)
			defer e.clock.Advance(-2 * time.Minute)
			_, err := c.ResumeFrame(ctx, &messages.ResumeFrame{Header: mut(s), Token: live.Token})
			return err
		}, actors.ErrTokenExpired, nil},
		{"resume a frame that is no longer suspended", func() error {
			_, err := c.ResumeFrame(ctx, &messages.ResumeFrame{Header: mut(s), Token: goneTok.Token})
			return err
		}, actors.ErrNotSuspended, nil},

		// Requests and versions.
		{"reused request id with a different request", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Header: m("reused"), Goal: "b"})
			return err
		}, actors.ErrRequestIDReused, nil},
		{"reused request id with another operation", func() error {
			_, err := c.AddResult(ctx, &messages.AddResult{Header: m("reused"), FrameID: root, Kind: "k", Ref: "r"})
			return err
		}, actors.ErrRequestIDReused, nil},
		{"version conflict", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: s, IfVersion: &stale}, Goal: "g"})
			return err
		}, actors.ErrVersionConflict, nil},
		{"negative expected version", func() error {
			_, err := c.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: s, IfVersion: &negative}, Goal: "g"})
			return err
		}, actors.ErrVersionConflict, nil},

		// AwaitFrame: its frame is required and valid, its Wait not negative;
		// an unknown scope or a frame of another scope is not found at once.
		{"await with an empty frame id", func() error {
			_, err := c.AwaitFrame(ctx, &messages.AwaitFrame{Header: messages.Header{Scope: s}})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"await of a frame id with NUL", func() error {
			_, err := c.AwaitFrame(ctx, &messages.AwaitFrame{Header: messages.Header{Scope: s}, FrameID: root + "\x00"})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"await with a negative wait", func() error {
			_, err := c.AwaitFrame(ctx, &messages.AwaitFrame{Header: messages.Header{Scope: s}, FrameID: root, Wait: -time.Second})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"await in an unknown scope", func() error {
			_, err := c.AwaitFrame(ctx, &messages.AwaitFrame{Header: messages.Header{Scope: "never-written"}, FrameID: root, Wait: time.Minute})
			return err
		}, actors.ErrFrameNotFound, nil},
		{"await in an invalid scope", func() error {
			_, err := c.AwaitFrame(ctx, &messages.AwaitFrame{Header: messages.Header{Scope: "no spaces"}, FrameID: root})
			return err
		}, actors.ErrInvalidScope, nil},
		{"await of a frame of another scope", func() error {
			return sameAsUnknown(t, otherRoot, func(id string) error {
				_, err := c.AwaitFrame(ctx, &messages.AwaitFrame{Header: messages.Header{Scope: s}, FrameID: id, Wait: time.Minute})
				return err
			})
		}, actors.ErrFrameNotFound, nil},
		{"await with a request id", func() error {
			_, err := c.AwaitFrame(ctx, &messages.AwaitFrame{Header: messages.Header{Scope: s, RequestID: "r-1"}, FrameID: root})
			return err
		}, actors.ErrInvalidArgument, nil},
		// The registry (ListFrames): refused with what is wrong, nothing written.
		{"ListFrames: an unknown status", func() error {
			_, err := c.ListFrames(ctx, &messages.ListFrames{Statuses: []string{"active", "finished"}})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"ListFrames: a time range reversed", func() error {
			_, err := c.ListFrames(ctx, &messages.ListFrames{CreatedAfter: 20, CreatedBefore: 10})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"ListFrames: a limit beyond 1000", func() error {
			_, err := c.ListFrames(ctx, &messages.ListFrames{Limit: 1 << 30})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"ListFrames: a forged cursor", func() error {
			_, err := c.ListFrames(ctx, &messages.ListFrames{Cursor: base64.RawURLEncoding.EncodeToString([]byte{1, 0x80, 0, 0, 0, 0})})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"ListFrames: a huge cursor", func() error {
			_, err := c.ListFrames(ctx, &messages.ListFrames{Cursor: strings.Repeat("A", 1<<20)})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"ListFrames: a parent without its scope", func() error {
			_, err := c.ListFrames(ctx, &messages.ListFrames{ParentID: root})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"ListFrames: a scope in the header", func() error {
			_, err := c.ListFrames(ctx, &messages.ListFrames{Header: mut(s)})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"ListFrames: a position never reached", func() error {
			short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			_, err := c.ListFrames(short, &messages.ListFrames{MinPosition: 1 << 62})
			return err
		}, actors.ErrUnavailable, nil},
		{"ListFrames: a position never reached, no wait", func() error {
			_, err := c.ListFrames(ctx, &messages.ListFrames{MinPosition: 1 << 62, WaitMillis: -1})
			return err
		}, actors.ErrInvalidArgument, nil},

		// The spend ledger: tokens forged, foreign or misused; estimates,
		// leases and settlements out of range; unknown reservations and
		// bindings; a frame of another scope.
		{"reservation token: a flipped signature byte", func() error { return pushWith(s, lp, flipped) }, actors.ErrReservationInvalid, nil},
		{"reservation token: truncated", func() error { return pushWith(s, lp, held.Token[:len(held.Token)-7]) }, actors.ErrReservationInvalid, nil},
		{"reservation token: no signature", func() error { return pushWith(s, lp, resPayload) }, actors.ErrReservationInvalid, nil},
		{"reservation token: garbage base64", func() error { return pushWith(s, lp, "!!not*base64.%%%") }, actors.ErrReservationInvalid, nil},
		{"reservation token: empty, to settle", func() error { return settle("", 10, 0) }, actors.ErrReservationInvalid, nil},
		{"reservation token: a suspension token", func() error { return pushWith(s, lp, live.Token) }, actors.ErrReservationInvalid, nil},
		{"reservation token: signed by another server's ledger key", func() error { return pushWith(kid, "", foreignRes) }, actors.ErrReservationInvalid, nil},
		{"reservation token: another server's, to settle", func() error {
			_, err := c.SettleSpend(ctx, signedSettle(&messages.SettleSpend{Header: mut(s), Token: foreignRes, From: kid, FrameID: kidRoot, Spent: 10, Final: true}))
			return err
		}, actors.ErrReservationInvalid, nil},
		{"reservation token: of another scope, for a child here", func() error { return pushWith(s, lp, otherRes.Token) }, actors.ErrReservationInvalid, nil},
		{"reservation token: of another scope, renewed here", func() error {
			_, err := c.RenewReservation(ctx, &messages.RenewReservation{Header: mut(s), Token: otherRes.Token})
			return err
		}, actors.ErrReservationInvalid, nil},
		{"reservation token: of another scope, settled here", func() error { return settle(otherRes.Token, 10, 0) }, actors.ErrReservationInvalid, nil},
		{"reservation token: for another scope, used for a child here", func() error { return pushWith(s, lp, crossRes.Token) }, actors.ErrReservationInvalid, nil},
		{"reservation token: for another scope, used in a third", func() error { return pushWith("other-scope", "", crossRes.Token) }, actors.ErrReservationInvalid, nil},
		{"reservation token: for a child here, used for a root", func() error { return pushWith(s, "", held.Token) }, actors.ErrReservationInvalid, nil},
		{"reservation token: for a child here, used with the wrong parent", func() error { return pushWith(s, root, held.Token) }, actors.ErrReservationInvalid, nil},
		{"reservation token: already bound", func() error { return pushWith(kid, "", crossRes.Token) }, actors.ErrReservationBound, nil},
		{"reservation token: its id and another's", func() error {
			_, err := c.RenewReservation(ctx, &messages.RenewReservation{Header: mut(s), Token: held.Token, ReservationID: crossRes.ReservationID})
			return err
		}, actors.ErrReservationInvalid, nil},
		{"negative spend estimate", func() error { return reserve(lp, spend(-1), 0) }, actors.ErrInvalidArgument, nil},
		{"spend estimate of 0", func() error { return reserve(lp, spend(0), 0) }, actors.ErrInvalidArgument, nil},
		{"spend estimate of MaxInt64 on a frame with a max", func() error { return reserve(lp, spend(math.MaxInt64), 0) }, actors.ErrSpendUnavailable, nil},
		{"overflowing spend estimate on a frame that holds something", func() error {
			return reserve(unlimited, spend(math.MaxInt64), 0)
		}, actors.ErrInvalidArgument, nil},
		{"spend estimate without one, under the deny policy", func() error { return reserve(lp, nil, 0) }, actors.ErrEstimateRequired, nil},
		{"reserving on a frame of another scope", func() error {
			return sameAsUnknown(t, otherRoot, func(id string) error { return reserve(id, spend(1), 0) })
		}, actors.ErrFrameNotFound, nil},
		{"reserving for an invalid scope", func() error {
			_, err := c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut(s), FrameID: lp, For: "no spaces", Estimate: spend(1)})
			return err
		}, actors.ErrInvalidScope, nil},
		{"negative lease", func() error { return reserve(lp, spend(1), -1) }, actors.ErrInvalidArgument, nil},
		{"most negative lease", func() error { return reserve(lp, spend(1), math.MinInt64) }, actors.ErrInvalidArgument, nil},
		{"negative lease on renewal", func() error {
			_, err := c.RenewReservation(ctx, &messages.RenewReservation{Header: mut(s), ReservationID: held.ReservationID, LeaseMillis: -1})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"renewal naming no reservation", func() error {
			_, err := c.RenewReservation(ctx, &messages.RenewReservation{Header: mut(s)})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"renewal of an unknown reservation", func() error {
			_, err := c.RenewReservation(ctx, &messages.RenewReservation{Header: mut(s), ReservationID: actors.NewID()})
			return err
		}, actors.ErrReservationNotFound, nil},
		{"release of an unknown reservation", func() error {
			_, err := c.ReleaseReservation(ctx, &messages.ReleaseReservation{Header: mut(s), ReservationID: actors.NewID()})
			return err
		}, actors.ErrReservationNotFound, nil},
		{"release of a reservation of another scope", func() error {
			return sameAsUnknown(t, otherRes.ReservationID, func(id string) error {
				_, err := c.ReleaseReservation(ctx, &messages.ReleaseReservation{Header: mut(s), ReservationID: id})
				return err
			})
		}, actors.ErrReservationNotFound, nil},
		{"renewal by id of a reservation of another scope", func() error {
			return sameAsUnknown(t, otherRes.ReservationID, func(id string) error {
				_, err := c.RenewReservation(ctx, &messages.RenewReservation{Header: mut(s), ReservationID: id})
				return err
			})
		}, actors.ErrReservationNotFound, nil},
		{"release of a reservation id with NUL", func() error {
			_, err := c.ReleaseReservation(ctx, &messages.ReleaseReservation{Header: mut(s), ReservationID: "a\x00b"})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"settlement of negative spend", func() error { return settle(crossRes.Token, -1, 0) }, actors.ErrInvalidArgument, nil},
		{"settlement with a negative previous", func() error { return settle(crossRes.Token, 10, -1) }, actors.ErrInvalidArgument, nil},
		{"settlement with previous past spent", func() error { return settle(crossRes.Token, 10, 11) }, actors.ErrInvalidArgument, nil},
		{"settlement whose charge overflows its frame's spend", func() error { return settle(crossRes.Token, math.MaxInt64, 0) }, actors.ErrInvalidArgument, nil},
		{"settlement from a scope the reservation is not for", func() error {
			_, err := c.SettleSpend(ctx, signedSettle(&messages.SettleSpend{Header: mut(s), Token: crossRes.Token, From: "other-scope", FrameID: kidRoot, Spent: 10, Final: true}))
			return err
		}, actors.ErrReservationInvalid, nil},
		{"settlement for a frame the reservation is not bound to", func() error {
			_, err := c.SettleSpend(ctx, signedSettle(&messages.SettleSpend{Header: mut(s), Token: boundRes.Token, From: kid, FrameID: kidRoot, Spent: 10, Final: true}))
			return err
		}, actors.ErrReservationBound, nil},
		{"settlement of a reservation for a child here", func() error { return settle(held.Token, 10, 0) }, actors.ErrReservationInvalid, nil},
		{"settlement by the work itself (no proof)", func() error {
			_, err := c.SettleSpend(ctx, &messages.SettleSpend{Header: mut(s), Token: crossRes.Token, From: kid, FrameID: kidRoot, Spent: 1, Final: true})
			return err
		}, actors.ErrReservationInvalid, nil},
		{"settlement whose proof is for another amount", func() error {
			r := signedSettle(&messages.SettleSpend{Header: mut(s), Token: crossRes.Token, From: kid, FrameID: kidRoot, Spent: 1, Final: true})
			r.Spent = 0
			_, err := c.SettleSpend(ctx, r)
			return err
		}, actors.ErrReservationInvalid, nil},
		{"settlement whose proof is for another frame", func() error {
			r := signedSettle(&messages.SettleSpend{Header: mut(s), Token: crossRes.Token, From: kid, FrameID: otherRoot, Spent: 10, Final: true})
			r.FrameID = kidRoot
			_, err := c.SettleSpend(ctx, r)
			return err
		}, actors.ErrReservationInvalid, nil},
		{"settlement signed with another key", func() error {
			r := &messages.SettleSpend{Header: mut(s), Token: crossRes.Token, From: kid, FrameID: kidRoot, Spent: 10, Final: true}
			actors.SignSettlement([]byte("another-ledger-key-0123456789abcdef"), r)
			_, err := c.SettleSpend(ctx, r)
			return err
		}, actors.ErrReservationInvalid, nil},
		{"acknowledgement by the work itself (no proof)", func() error {
			_, err := c.AckSettlement(ctx, &messages.AckSettlement{Header: mut(kid), ReservationID: crossRes.ReservationID, Through: 0})
			return err
		}, actors.ErrReservationInvalid, nil},
		{"acknowledgement whose proof is for another binding", func() error {
			r := signedAck(&messages.AckSettlement{Header: mut(kid), ReservationID: boundRes.ReservationID, Through: 0})
			r.ReservationID = crossRes.ReservationID
			_, err := c.AckSettlement(ctx, r)
			return err
		}, actors.ErrReservationInvalid, nil},
		{"acknowledgement of an unknown binding", func() error {
			_, err := c.AckSettlement(ctx, signedAck(&messages.AckSettlement{Header: mut(kid), ReservationID: actors.NewID(), Through: 0}))
			return err
		}, actors.ErrReservationNotFound, nil},
		{"acknowledgement through more than was reported", func() error {
			_, err := c.AckSettlement(ctx, signedAck(&messages.AckSettlement{Header: mut(kid), ReservationID: crossRes.ReservationID, Through: 1}))
			return err
		}, actors.ErrInvalidArgument, nil},
		{"acknowledgement through a negative amount", func() error {
			_, err := c.AckSettlement(ctx, signedAck(&messages.AckSettlement{Header: mut(kid), ReservationID: crossRes.ReservationID, Through: -1}))
			return err
		}, actors.ErrInvalidArgument, nil},
		{"final acknowledgement of a live root's binding", func() error {
			_, err := c.AckSettlement(ctx, signedAck(&messages.AckSettlement{Header: mut(kid), ReservationID: crossRes.ReservationID, Final: true}))
			return err
		}, actors.ErrInvalidArgument, nil},
		{"ledger of a frame of another scope", func() error {
			return sameAsUnknown(t, otherRoot, func(id string) error {
				_, err := c.GetLedger(ctx, &messages.GetLedger{Header: messages.Header{Scope: s}, FrameID: id})
				return err
			})
		}, actors.ErrFrameNotFound, nil},
		{"ledger of a frame id with NUL", func() error {
			_, err := c.GetLedger(ctx, &messages.GetLedger{Header: messages.Header{Scope: s}, FrameID: lp + "\x00"})
			return err
		}, actors.ErrInvalidArgument, nil},

		// Scope state: keys, values, the limits, conditions, the
		// operations' fields, levels, and the reads' keys, prefixes,
		// cursors and bounds.
		{"state: an oversized key", func() error {
			return says(change(s, messages.StateOp{Kind: "set", Key: longKey, Value: []byte("v")}), "513 bytes", "the limit is 512")
		}, actors.ErrInvalidArgument, nil},
		{"state: a key of invalid UTF-8", func() error {
			return says(change(s, messages.StateOp{Kind: "set", Key: "a\xffb", Value: []byte("v")}), "not valid UTF-8")
		}, actors.ErrInvalidArgument, nil},
		{"state: a key with NUL", func() error {
			return says(change(s, messages.StateOp{Kind: "push", Key: "a\x00b", Value: []byte("v")}), "contains NUL")
		}, actors.ErrInvalidArgument, nil},
		{"state: an empty key", func() error {
			return says(change(s, messages.StateOp{Kind: "delete"}), "an empty state key")
		}, actors.ErrInvalidArgument, nil},
		{"state: an oversized value", func() error {
			return says(change(s, messages.StateOp{Kind: "set", Key: "huge", Value: make([]byte, frames.DefaultMaxStateValueBytes+1)}),
				`key "huge"`, fmt.Sprint(frames.DefaultMaxStateValueBytes+1), fmt.Sprint(frames.DefaultMaxStateValueBytes))
		}, actors.ErrStateTooLarge, nil},
		{"state: an oversized value at a frame's level", func() error {
			return says(change(s, messages.StateOp{Kind: "set", FrameID: root, Key: "req", Value: make([]byte, frames.DefaultMaxStateValueBytes+1)}),
				`key "req" of frame "`+root+`"`)
		}, actors.ErrStateTooLarge, nil},
		{"state: a list pushed past the value limit", func() error {
			// 300 KiB + 250 KiB, each item counting 4 more: 563,208 bytes.
			return says(change(s, messages.StateOp{Kind: "push", Key: "log", Value: bytes.Repeat([]byte("m"), 250<<10)}),
				`key "log"`, "563208", fmt.Sprint(frames.DefaultMaxStateValueBytes))
		}, actors.ErrStateTooLarge, nil},
		{"state: the scope's total past its limit", func() error {
			// 1,024,072 held + 30 KiB and its key's 4+32.
			return says(change(fullScope, messages.StateOp{Kind: "set", Key: "more", Value: make([]byte, 30<<10)}),
				`key "more"`, "the scope's state would be 1054828", fmt.Sprint(frames.DefaultMaxStateBytes))
		}, actors.ErrStateTooLarge, nil},
		{"state: the scope's total past its limit at a frame's level", func() error {
			return says(change(fullScope, messages.StateOp{Kind: "push", FrameID: fullFrame, Key: "more", Value: make([]byte, 30<<10)}),
				"the scope's state would be")
		}, actors.ErrStateTooLarge, nil},
		{"state: a conditional write's conflict", func() error {
			return says(change(s, messages.StateOp{Kind: "set", Key: "plan", Value: []byte("v2"), IfVersion: ver(kv.Version + 1)}),
				`"plan"`, fmt.Sprintf("version %d", kv.Version+1), fmt.Sprintf("version %d", kv.Version))
		}, actors.ErrStateConflict, nil},
		{"state: a write expecting an absent key", func() error {
			return change(s, messages.StateOp{Kind: "delete", Key: "plan", IfVersion: ver(0)})
		}, actors.ErrStateConflict, nil},
		{"state: a conflict in the last of three operations", func() error {
			return says(change(s, messages.StateOp{Kind: "set", Key: "plan", Value: []byte("v2")}, messages.StateOp{Kind: "clear"},
				messages.StateOp{Kind: "push", Key: "log", Value: []byte("x"), IfVersion: ver(1)}), "operation 3 of 3")
		}, actors.ErrStateConflict, nil},
		{"state: a negative if_version", func() error {
			return change(s, messages.StateOp{Kind: "set", Key: "plan", Value: []byte("v2"), IfVersion: ver(-1)})
		}, actors.ErrInvalidArgument, nil},
		{"state: a TTL below -1", func() error {
			return change(s, messages.StateOp{Kind: "set", Key: "plan", Value: []byte("v2"), TTLMillis: -2})
		}, actors.ErrInvalidArgument, nil},
		{"state: an absurd TTL", func() error {
			return change(s, messages.StateOp{Kind: "set", Key: "plan", Value: []byte("v2"), TTLMillis: math.MaxInt64})
		}, actors.ErrInvalidArgument, nil},
		{"state: a TTL past 2^62 ns", func() error {
			return change(s, messages.StateOp{Kind: "touch", Key: "plan", TTLMillis: math.MaxInt64 / 1_000_000})
		}, actors.ErrInvalidArgument, nil},
		{"state: sliding without a TTL", func() error {
			return change(s, messages.StateOp{Kind: "set", Key: "plan", Value: []byte("v2"), Sliding: true})
		}, actors.ErrInvalidArgument, nil},
		{"state: a negative keep", func() error {
			return change(s, messages.StateOp{Kind: "push", Key: "log", Value: []byte("x"), Keep: -1})
		}, actors.ErrInvalidArgument, nil},
		{"state: a keep over the max", func() error {
			return change(s, messages.StateOp{Kind: "push", Key: "log", Value: []byte("x"), Keep: frames.MaxPushKeep + 1})
		}, actors.ErrInvalidArgument, nil},
		{"state: a push onto a value", func() error {
			return says(change(s, messages.StateOp{Kind: "push", Key: "plan", Value: []byte("x")}), "holds a value")
		}, actors.ErrInvalidArgument, nil},
		{"state: an unknown operation", func() error {
			return says(change(s, messages.StateOp{Kind: "increment", Key: "plan"}), `unknown state operation "increment"`)
		}, actors.ErrInvalidArgument, nil},
		{"state: a clear with a key", func() error {
			return change(s, messages.StateOp{Kind: "clear", Key: "plan"})
		}, actors.ErrInvalidArgument, nil},
		{"state: a clear sliding", func() error {
			return change(s, messages.StateOp{Kind: "clear", Sliding: true})
		}, actors.ErrInvalidArgument, nil},
		{"state: sliding with TTL -1", func() error {
			return change(s, messages.StateOp{Kind: "set", Key: "plan", Value: []byte("v2"), TTLMillis: -1, Sliding: true})
		}, actors.ErrInvalidArgument, nil},
		{"state: a set with a prefix", func() error {
			return change(s, messages.StateOp{Kind: "set", Key: "plan", Prefix: "p"})
		}, actors.ErrInvalidArgument, nil},
		{"state: a touch of an absent key", func() error {
			return change(s, messages.StateOp{Kind: "touch", Key: "ghost"})
		}, actors.ErrStateKeyNotFound, nil},
		{"state: no operations", func() error { return change(s) }, actors.ErrInvalidArgument, nil},
		{"state: 1,001 operations", func() error { return says(change(s, manyOps...), "1001 operations") }, actors.ErrInvalidArgument, nil},
		{"state: a frame id with NUL", func() error {
			return change(s, messages.StateOp{Kind: "set", FrameID: root + "\x00", Key: "k"})
		}, actors.ErrInvalidArgument, nil},
		{"state: a finished frame's level", func() error {
			return change(s, messages.StateOp{Kind: "set", FrameID: gone, Key: "k"})
		}, actors.ErrFrameNotLive, nil},
		{"state: read a finished frame's level", func() error { return getState(gone, "k") }, actors.ErrFrameNotLive, nil},
		{"state: a continued frame's level", func() error {
			return headIs(cont.FrameID)(change(s, messages.StateOp{Kind: "set", FrameID: contOld, Key: "k"}))
		}, actors.ErrFrameContinued, nil},
		{"state: a frame of another scope: ChangeState", func() error {
			return sameAsUnknown(t, otherRoot, func(id string) error {
				return change(s, messages.StateOp{Kind: "set", FrameID: id, Key: "k", Value: []byte("v")})
			})
		}, actors.ErrFrameNotFound, nil},
		{"state: a frame of another scope: GetState", func() error {
			return sameAsUnknown(t, otherRoot, func(id string) error { return getState(id, "k") })
		}, actors.ErrFrameNotFound, nil},
		{"state: a frame of another scope: RangeState", func() error {
			return sameAsUnknown(t, otherRoot, func(id string) error { return rangeState(messages.RangeState{FrameID: id}) })
		}, actors.ErrFrameNotFound, nil},
		{"state: a frame of another scope: StateHistory", func() error {
			return sameAsUnknown(t, otherRoot, func(id string) error { return history(messages.StateHistory{FrameID: id, Key: "k"}) })
		}, actors.ErrFrameNotFound, nil},
		{"state: get an empty key", func() error { return getState("", "plan", "") }, actors.ErrInvalidArgument, nil},
		{"state: get a key with NUL", func() error { return getState("", "a\x00") }, actors.ErrInvalidArgument, nil},
		{"state: get a key of invalid UTF-8", func() error { return getState(root, "\xc3\x28") }, actors.ErrInvalidArgument, nil},
		{"state: get an oversized key", func() error { return getState("", longKey) }, actors.ErrInvalidArgument, nil},
		{"state: get 1,001 keys", func() error { return getState("", manyKeys...) }, actors.ErrInvalidArgument, nil},
		{"state: range with a NUL prefix", func() error { return rangeState(messages.RangeState{Prefix: "p\x00"}) }, actors.ErrInvalidArgument, nil},
		{"state: range with an oversized prefix", func() error { return rangeState(messages.RangeState{Prefix: longKey}) }, actors.ErrInvalidArgument, nil},
		{"state: range after a cursor of invalid UTF-8", func() error { return rangeState(messages.RangeState{After: "\xff"}) }, actors.ErrInvalidArgument, nil},
		{"state: range with a negative limit", func() error { return rangeState(messages.RangeState{Limit: -1}) }, actors.ErrInvalidArgument, nil},
		{"state: range with a limit of 1,001", func() error { return rangeState(messages.RangeState{Limit: frames.MaxStateOps + 1}) }, actors.ErrInvalidArgument, nil},
		{"state: history of an empty key", func() error { return history(messages.StateHistory{}) }, actors.ErrInvalidArgument, nil},
		{"state: history of a key with NUL", func() error { return history(messages.StateHistory{Key: "\x00"}) }, actors.ErrInvalidArgument, nil},
		{"state: history with a negative limit", func() error { return history(messages.StateHistory{Key: "plan", Limit: -1}) }, actors.ErrInvalidArgument, nil},
		{"state: history with a limit of 1,001", func() error {
			return history(messages.StateHistory{Key: "plan", Limit: frames.MaxStateOps + 1})
		}, actors.ErrInvalidArgument, nil},
		{"state: history before a negative version", func() error { return history(messages.StateHistory{Key: "plan", Before: -1}) }, actors.ErrInvalidArgument, nil},
		// Partial output: sizes, text, percentages, and frames that take none.
		{"partial output: a delta over the content limit", func() error {
			return namesAll(streaming, "8193 bytes", "limit 8192")(partial(streaming, strings.Repeat("d", maxContent+1), 1))
		}, actors.ErrTooLarge, nil},
		{"partial output: a delta of 1 MiB", func() error {
			return partial(streaming, strings.Repeat("d", 1<<20), 1)
		}, actors.ErrTooLarge, nil},
		{"partial output: an output past the content limit", func() error {
			return namesAll(streaming, "8193 bytes", "limit 8192", "record the turn")(partial(streaming, strings.Repeat("d", 11), 1))
		}, actors.ErrTooLarge, nil},
		{"partial output: invalid UTF-8", func() error {
			return namesAll(streaming, "UTF-8")(partial(streaming, "cut \xe6\x97", 1))
		}, actors.ErrInvalidArgument, nil},
		{"partial output: a NUL byte", func() error { return partial(streaming, "a\x00b", 1) }, actors.ErrInvalidArgument, nil},
		{"partial output: a percentage of -1", func() error {
			return namesAll(streaming, "-1", "0..100")(partial(streaming, "x", -1))
		}, actors.ErrInvalidArgument, nil},
		{"partial output: a percentage of 101", func() error { return partial(streaming, "x", 101) }, actors.ErrInvalidArgument, nil},
		{"partial output: a percentage of -2^63", func() error { return partial(streaming, "x", math.MinInt64) }, actors.ErrInvalidArgument, nil},
		{"partial output: an unknown frame", func() error { return partial(actors.NewID(), "x", 1) }, actors.ErrFrameNotFound, nil},
		{"partial output: a frame of another scope", func() error {
			return sameAsUnknown(t, otherRoot, func(id string) error { return partial(id, "x", 1) })
		}, actors.ErrFrameNotFound, nil},
		{"partial output: a finished frame", func() error { return namesAll(gone, "cancelled")(partial(gone, "x", 1)) }, actors.ErrFrameNotLive, nil},
		{"partial output: a continued frame", func() error { return headIs(cont.FrameID)(partial(contOld, "x", 1)) }, actors.ErrFrameContinued, nil},
		{"partial output: a frame id with NUL", func() error { return partial(streaming+"\x00", "x", 1) }, actors.ErrInvalidArgument, nil},
		{"partial output: no active frame to default to", func() error {
			_, err := c.RecordPartialOutput(ctx, &messages.RecordPartialOutput{Header: mut("no-frames-here"), Delta: "x"})
			return err
		}, actors.ErrNoActiveFrame, nil},
		{"partial output: a reused request id, another delta", func() error {
			_, err := c.RecordPartialOutput(ctx, &messages.RecordPartialOutput{Header: m("reused"), FrameID: streaming, Delta: "x"})
			return err
		}, actors.ErrRequestIDReused, nil},

		// The data file: a damaged scope, a truncated file, a held file.
		{"a scope whose log is damaged: read", func() error {
			_, err := ed.c.GetStack(ctx, &messages.GetStack{Header: messages.Header{Scope: "victim"}})
			return err
		}, actors.ErrStoreFailed, ed},
		{"a scope whose log is damaged: write", func() error {
			_, err := ed.c.PushFrame(ctx, &messages.PushFrame{Header: mut("victim"), Goal: "g"})
			return err
		}, actors.ErrStoreFailed, ed},
		{"a scope whose log is damaged: resume", func() error {
			_, err := ed.c.ResumeActor(ctx, &messages.ResumeActor{Header: messages.Header{Scope: "victim"}})
			return err
		}, actors.ErrStoreFailed, ed},
		// Subscriptions (global operations): names, filters, bounds.
		{"subscribe with a 129-byte name", func() error {
			_, err := c.SubscribeOn(ctx, "", &messages.Subscribe{Name: strings.Repeat("n", 129)})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"subscribe with a name of invalid UTF-8", func() error {
			_, err := c.SubscribeOn(ctx, "", &messages.Subscribe{Name: "\xff\xfe"})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"subscribe to an unknown event kind", func() error {
			_, err := c.SubscribeOn(ctx, "", &messages.Subscribe{Name: "n", Filter: messages.EventFilter{Kinds: []string{"frame.exploded"}}})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"subscribe with a scope and a prefix", func() error {
			_, err := c.SubscribeOn(ctx, "", &messages.Subscribe{Name: "n", Filter: messages.EventFilter{Scope: "a", Prefix: "b"}})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"subscribe naming a scope in the header", func() error {
			_, err := c.SubscribeOn(ctx, "", &messages.Subscribe{Header: messages.Header{Scope: s}, Name: "n"})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"read events with a thousand kinds", func() error {
			kinds := make([]string, 1000)
			for i := range kinds {
				kinds[i] = frames.TypeFramePopped
			}
			_, err := c.ReadEvents(ctx, "", &messages.ReadEvents{Filter: &messages.EventFilter{Kinds: kinds}})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"read events: max 2^30", func() error {
			_, err := c.ReadEvents(ctx, "", &messages.ReadEvents{Filter: &messages.EventFilter{}, Max: 1 << 30})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"read events: 64 MiB a reply", func() error {
			_, err := c.ReadEvents(ctx, "", &messages.ReadEvents{Filter: &messages.EventFilter{}, MaxBytes: 64 << 20})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"read events: a negative wait", func() error {
			_, err := c.ReadEvents(ctx, "", &messages.ReadEvents{Filter: &messages.EventFilter{}, Wait: -time.Second})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"read events: a day's wait", func() error {
			_, err := c.ReadEvents(ctx, "", &messages.ReadEvents{Filter: &messages.EventFilter{}, Wait: 24 * time.Hour})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"read events by name and filter", func() error {
			_, err := c.ReadEvents(ctx, "", &messages.ReadEvents{Name: "n", Filter: &messages.EventFilter{}})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"read events from a position and from now", func() error {
			_, err := c.ReadEvents(ctx, "", &messages.ReadEvents{Filter: &messages.EventFilter{}, From: 3, FromNow: true})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"ack position 0", func() error {
			_, err := c.AckEvents(ctx, "", &messages.AckEvents{Name: "n"})
			return err
		}, actors.ErrInvalidArgument, nil},
		{"unsubscribe without a name", func() error {
			_, err := c.Unsubscribe(ctx, "")
			return err
		}, actors.ErrInvalidArgument, nil},
		{"a truncated data file", func() error {
			_, err := eventstore.Open(truncated, &eventstore.Options{OpenTimeout: 100 * time.Millisecond})
			return err
		}, eventstore.ErrCorrupt, nil},
		{"a data file held by another process", func() error {
			_, err := eventstore.Open(e.path, &eventstore.Options{OpenTimeout: 100 * time.Millisecond})
			return err
		}, eventstore.ErrLocked, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			target := e
			if tc.env != nil {
				target = tc.env
			}
			seq, versions := storeState(t, target.store)
			err := tc.call()
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.want, "got %v", err)
			assert.NotErrorIs(t, err, actors.ErrInternal)
			seq2, versions2 := storeState(t, target.store)
			assert.Equal(t, seq, seq2, "global sequence unchanged")
			assert.Equal(t, versions, versions2, "every stream's version unchanged")
		})
	}
	t.Logf("hostile input catalogue: %d cases", len(cases))

	// What the catalogue's refusals must not disturb.
	// The streaming frame's output is as it was and goes on; a suspended
	// frame takes output (it may arrive as a frame is suspended).
	sf, err := c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: s}, FrameID: streaming})
	require.NoError(t, err)
	require.NotNil(t, sf.Frame.Partial)
	assert.Equal(t, strings.Repeat("o", maxContent-10), sf.Frame.Partial.Text)
	assert.Equal(t, int64(1), sf.Frame.Partial.Chunks)
	pr, err := c.RecordPartialOutput(ctx, &messages.RecordPartialOutput{Header: mut(s), FrameID: streaming, Delta: "0123456789", Percent: 100, Final: true})
	require.NoError(t, err)
	assert.Equal(t, int64(maxContent), pr.Bytes, "exactly at the limit")
	require.NoError(t, partial(d3, "while suspended", 100))
	sd, err := c.GetFrame(ctx, &messages.GetFrame{Header: messages.Header{Scope: s}, FrameID: d3})
	require.NoError(t, err)
	assert.Equal(t, frames.StatusSuspended, sd.Frame.Status)
	assert.Equal(t, "while suspended", sd.Frame.Partial.Text)
	// The ledger is as it was: lp spent 10 and was settled 5, and holds
	// 100 here, 200 and 195 for the work in kid; that work still settles,
	// once.
	row := ledgerRow(t, c, s, lp)
	assert.Equal(t, int64(15), row.Actual)
	assert.Equal(t, int64(495), row.Outstanding)
	_, err = c.RecordUsage(ctx, &messages.RecordUsage{Header: mut(kid), FrameID: kidRoot, Cost: budget.Cost{SpendMicros: 150}})
	require.NoError(t, err)
	pop(t, c, kid, kidRoot)
	drain(t, e.srv)
	b := binding(t, c, kid, crossRes.ReservationID)
	assert.Equal(t, int64(150), b.Delivered)
	assert.False(t, b.Pending())
	row = ledgerRow(t, c, s, lp)
	assert.Equal(t, int64(165), row.Actual)
	assert.Equal(t, int64(295), row.Outstanding)
	// An absurd lease is not refused but capped: 7 days, without overflow.
	week, err := c.ReserveSpend(ctx, &messages.ReserveSpend{Header: mut(s), FrameID: lp, Estimate: spend(1), LeaseMillis: math.MaxInt64})
	require.NoError(t, err)
	assert.Equal(t, e.clock.Now().UnixNano()+frames.MaxReservationAge, week.ExpiresAt)
	renewed, err := c.RenewReservation(ctx, &messages.RenewReservation{Header: mut(s), Token: held.Token, LeaseMillis: math.MaxInt64})
	require.NoError(t, err)
	assert.Equal(t, week.ExpiresAt, renewed.ExpiresAt, "a renewal too")
	// A huge window is a window: pressure reads 0‰, without overflow.
	w, err := c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut(s), FrameID: vast, Role: "user", Priority: compaction.Low, Content: "more"})
	require.NoError(t, err)
	require.NotNil(t, w.Pressure)
	assert.Equal(t, messages.Pressure{Tokens: w.Pressure.Tokens, Window: 1 << 62, Permille: 0}, *w.Pressure)
	huger, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(s), Goal: "g", Budget: budget.TokenBudget{Total: 10}, ContextWindow: 1<<63 - 1})
	require.NoError(t, err)
	w, err = c.AddContextHandle(ctx, &messages.AddContextHandle{Header: mut(s), FrameID: huger.FrameID, Priority: compaction.Low, Content: strings.Repeat("w", 4000)})
	require.NoError(t, err)
	assert.Equal(t, int64(0), w.Pressure.Permille)
	// The chains the refusals named are as they were: the running one
	// still runs at its head, the finished one resumes once, from its
	// head, and a huge resume ceiling carries what the head had.
	ch, err := c.GetChain(ctx, &messages.GetChain{Header: messages.Header{Scope: s}, FrameID: contOld})
	require.NoError(t, err)
	assert.Equal(t, cont.FrameID, ch.Head)
	require.Len(t, ch.Links, 2)
	ch, err = c.GetChain(ctx, &messages.GetChain{Header: messages.Header{Scope: s}, FrameID: finOld})
	require.NoError(t, err)
	require.Len(t, ch.Links, 2, "no refused resume added a link")
	res, err := c.ResumeChain(ctx, &messages.ResumeChain{Header: mut(s), ChainID: finOld, Message: "go on", ResumeCeiling: 1<<63 - 1})
	require.NoError(t, err)
	assert.Equal(t, fin.FrameID, res.From)
	assert.GreaterOrEqual(t, res.Carried, fin.Carried, "at least what the head was given is carried on")
	ch, err = c.GetChain(ctx, &messages.GetChain{Header: messages.Header{Scope: s}, FrameID: finOld})
	require.NoError(t, err)
	require.Len(t, ch.Links, 3)
	assert.Equal(t, res.FrameID, ch.Head)
	_, err = ed.c.GetStack(ctx, &messages.GetStack{Header: messages.Header{Scope: "healthy"}})
	require.NoError(t, err, "a damaged scope leaves the others readable")
	_, err = ed.c.PushFrame(ctx, &messages.PushFrame{Header: mut("healthy"), Goal: "g"})
	require.NoError(t, err, "and writable")
	// The scope state the refusals named is as it was: the value and the
	// list at their version, root's key, the full scope's two values.
	g, err := c.GetState(ctx, &messages.GetState{Header: messages.Header{Scope: s}, Keys: []string{"plan", "log", "more", "huge"}})
	require.NoError(t, err)
	require.Len(t, g.Entries, 2)
	assert.Equal(t, []byte("v1"), g.Entries[0].Value)
	assert.Equal(t, kv.Version, g.Entries[0].Version)
	assert.Len(t, g.Entries[1].Items, 1)
	assert.Equal(t, kv.Version, g.Entries[1].Version)
	g, err = c.GetState(ctx, &messages.GetState{Header: messages.Header{Scope: s}, FrameID: root, Keys: []string{"req"}})
	require.NoError(t, err)
	require.Len(t, g.Entries, 1)
	assert.Equal(t, []byte("r"), g.Entries[0].Value)
	rg, err := c.RangeState(ctx, &messages.RangeState{Header: messages.Header{Scope: fullScope}})
	require.NoError(t, err)
	require.Len(t, rg.Entries, 2)
	assert.Equal(t, int64(2*(4+500<<10+32)), rg.Size.Total)
	// What was left of the full scope's room still takes a write.
	require.NoError(t, change(fullScope, messages.StateOp{Kind: "set", Key: "more", Value: make([]byte, 20<<10)}))
	// The critical-overflow error names the tokens needed.
	_, err = c.AssembleContextPack(ctx, &messages.AssembleContextPack{Header: messages.Header{Scope: s}, FrameID: root, BudgetTokens: 600})
	var me *messages.Error
	require.ErrorAs(t, err, &me)
	assert.Greater(t, me.Needed, int64(750))
	assert.Contains(t, me.Message, "needs")
	ok, err := c.AssembleContextPack(ctx, &messages.AssembleContextPack{Header: messages.Header{Scope: s}, FrameID: root, BudgetTokens: me.Needed})
	require.NoError(t, err, "the budget it named is enough")
	assert.LessOrEqual(t, ok.TokenSummary.Used, me.Needed)
	// A token of another server tells nothing a forged one does not.
	_, errForeign := c.ResumeFrame(ctx, &messages.ResumeFrame{Header: mut(s), Token: foreign})
	_, errForged := c.ResumeFrame(ctx, &messages.ResumeFrame{Header: mut(s), Token: payload + ".AAAA"})
	assert.Equal(t, errForged, errForeign)
}
