package crashtest_test

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/internal/crashtest"
	"github.com/stateindex/stateindex/messages"
)

// The scope-state check catches a broken promise: a change whose event
// lacks an operation of its request or differs from it (a partial change),
// a conditional write applied against its condition, a lost one; and it
// counts a change a kill left unanswered, found whole in the log.
func TestCheckStateCatchesBrokenPromises(t *testing.T) {
	base := t.TempDir()
	require.NoError(t, crashtest.Populate(base, 60, 5))
	side, err := os.ReadFile(filepath.Join(base, crashtest.SideFile))
	require.NoError(t, err)
	db, err := os.ReadFile(filepath.Join(base, crashtest.DataFile))
	require.NoError(t, err)
	copyOf := func(t *testing.T, side string) string {
		d := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(d, crashtest.SideFile), []byte(side), 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(d, crashtest.DataFile), db, 0o600))
		return d
	}
	lines := strings.Split(strings.TrimSuffix(string(side), "\n"), "\n")
	// The acknowledged ChangeStates, by the index of their I line: one
	// with a set first, one conditional.
	acked := map[string]bool{}
	for _, l := range lines {
		if f := strings.Fields(l); f[0] == "A" && f[3] == "ChangeState" {
			acked[f[2]] = true
		}
	}
	request := func(l string) *messages.ChangeState {
		raw, err := base64.StdEncoding.DecodeString(strings.Fields(l)[4])
		require.NoError(t, err)
		var r messages.ChangeState
		require.NoError(t, eventstore.Unmarshal(raw, &r))
		return &r
	}
	find := func(ok func(*messages.ChangeState) bool) int {
		for i, l := range lines {
			if f := strings.Fields(l); f[0] == "I" && f[3] == "ChangeState" && acked[f[2]] && ok(request(l)) {
				return i
			}
		}
		t.Fatal("no such ChangeState in the storm")
		return -1
	}
	// edit returns the side file with line i's request rewritten by fn.
	edit := func(i int, fn func(*messages.ChangeState)) string {
		r := request(lines[i])
		fn(r)
		enc, err := eventstore.Marshal(r)
		require.NoError(t, err)
		f := strings.Fields(lines[i])
		f[4] = base64.StdEncoding.EncodeToString(enc)
		out := append([]string(nil), lines...)
		out[i] = strings.Join(f, " ")
		return strings.Join(out, "\n") + "\n"
	}

	t.Run("intact", func(t *testing.T) {
		st, err := crashtest.Check(t.Context(), copyOf(t, string(side)), 1)
		require.NoError(t, err)
		s := st.State
		t.Log(s)
		assert.Positive(t, s.Requests)
		assert.Equal(t, s.Requests, s.Acked, "every change acknowledged")
		assert.Positive(t, s.Ops)
		assert.Positive(t, s.Conditional)
		assert.Positive(t, s.FrameLevel)
		assert.Positive(t, s.Keys)
		assert.Zero(t, s.Lost)
		assert.Zero(t, s.Partial)
	})
	t.Run("an operation the event lacks", func(t *testing.T) {
		i := find(func(r *messages.ChangeState) bool { return len(r.Ops) < 4 })
		_, err := crashtest.Check(t.Context(), copyOf(t, edit(i, func(r *messages.ChangeState) {
			r.Ops = append(r.Ops, messages.StateOp{Kind: "set", Key: "plan", Value: []byte("never")})
		})), 1)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "PARTIAL")
	})
	t.Run("an operation the event differs from", func(t *testing.T) {
		i := find(func(r *messages.ChangeState) bool { return r.Ops[0].Kind == "set" })
		_, err := crashtest.Check(t.Context(), copyOf(t, edit(i, func(r *messages.ChangeState) { r.Ops[0].Value = []byte("other") })), 1)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "PARTIAL")
	})
	t.Run("a write against its condition", func(t *testing.T) {
		i := find(func(r *messages.ChangeState) bool { return r.Ops[0].IfVersion != nil })
		_, err := crashtest.Check(t.Context(), copyOf(t, edit(i, func(r *messages.ChangeState) {
			v := *r.Ops[0].IfVersion + 1_000
			r.Ops[0].IfVersion = &v
		})), 1)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "CONDITION")
	})
	t.Run("a lost change", func(t *testing.T) {
		_, err := crashtest.Check(t.Context(), copyOf(t, string(side)+"A crash-03 never-written ChangeState 7 1\n"), 1)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "LOST: acknowledged ChangeState never-written")
	})
	t.Run("a change in flight at the kill, found whole", func(t *testing.T) {
		var kept []string
		dropped := ""
		for i := len(lines) - 1; i >= 0; i-- {
			if f := strings.Fields(lines[i]); dropped == "" && f[0] == "A" && f[3] == "ChangeState" {
				dropped = f[2]
				continue
			}
			kept = append([]string{lines[i]}, kept...)
		}
		require.NotEmpty(t, dropped)
		st, err := crashtest.Check(t.Context(), copyOf(t, strings.Join(kept, "\n")+"\n"), 1)
		require.NoError(t, err)
		assert.Equal(t, 1, st.State.InFlight)
		assert.Equal(t, st.State.Requests-1, st.State.Acked)
	})
}

// stateTally adds up the scope-state checks of TestCrash's kills.
type stateTally struct {
	inFlight, absent int // ChangeStates a kill left unanswered: found whole, or absent
}

// add counts one kill's check (Check fails on a lost or partial change).
func (st *stateTally) add(s crashtest.StateStats) {
	st.inFlight += s.InFlight
	st.absent += s.Absent
}

func (st stateTally) String(last crashtest.StateStats) string {
	return fmt.Sprintf("%d ChangeStates in flight at the kills: %d committed whole, %d absent, 0 partial; after the last kill: %s",
		st.inFlight+st.absent, st.inFlight, st.absent, last)
}
