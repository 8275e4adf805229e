package crashtest_test

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/internal/crashtest"
	"github.com/stateindex/stateindex/messages"
)

// The checker catches a broken promise: a lost acknowledged write, a reply
// that named the wrong version, a write nobody sent, a dropped tail.
func TestCheckCatchesBrokenPromises(t *testing.T) {
	base := t.TempDir()
	require.NoError(t, crashtest.Populate(base, 40, 3))
	side, err := os.ReadFile(filepath.Join(base, crashtest.SideFile))
	require.NoError(t, err)
	db, err := os.ReadFile(filepath.Join(base, crashtest.DataFile))
	require.NoError(t, err)
	copyOf := func(t *testing.T, side []byte) string {
		d := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(d, crashtest.SideFile), side, 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(d, crashtest.DataFile), db, 0o600))
		return d
	}
	// An acknowledged write to take apart: the last push of scope crash-03.
	var ack, id string
	for _, l := range strings.Split(string(side), "\n") {
		if strings.HasPrefix(l, "A crash-03 ") && strings.Contains(l, " PushFrame ") {
			ack = l
		}
	}
	require.NotEmpty(t, ack)
	id = strings.Fields(ack)[2]

	t.Run("intact", func(t *testing.T) {
		st, err := crashtest.Check(t.Context(), copyOf(t, side), 1)
		require.NoError(t, err)
		assert.Zero(t, st.Lost)
		assert.Positive(t, st.Acked)
	})
	t.Run("lost acknowledged write", func(t *testing.T) {
		fake := append([]byte(nil), side...)
		fake = append(fake, "A crash-03 never-written PushFrame 7 1\n"...)
		_, err := crashtest.Check(t.Context(), copyOf(t, fake), 1)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "LOST: acknowledged PushFrame never-written")
	})
	t.Run("reply named another version", func(t *testing.T) {
		f := strings.Fields(ack)
		f[4] = "999"
		fake := append(append([]byte(nil), side...), strings.Join(f, " ")+"\n"...)
		_, err := crashtest.Check(t.Context(), copyOf(t, fake), 1)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "replied version 999")
	})
	t.Run("write nobody sent", func(t *testing.T) {
		var kept []string
		for _, l := range strings.Split(string(side), "\n") {
			if !strings.Contains(l, " "+id+" ") {
				kept = append(kept, l)
			}
		}
		_, err := crashtest.Check(t.Context(), copyOf(t, []byte(strings.Join(kept, "\n"))), 1)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "PHANTOM")
	})
	t.Run("dropped tail", func(t *testing.T) {
		d := copyOf(t, side)
		b, err := bolt.Open(filepath.Join(d, crashtest.DataFile), 0o600, &bolt.Options{Timeout: time.Second})
		require.NoError(t, err)
		require.NoError(t, b.Update(func(tx *bolt.Tx) error {
			s := tx.Bucket([]byte("streams")).Bucket([]byte("crash-03"))
			k, _ := s.Cursor().Last()
			require.Len(t, k, 8)
			return s.Delete(binary.BigEndian.AppendUint64(nil, binary.BigEndian.Uint64(k)))
		}))
		require.NoError(t, b.Close())
		_, err = crashtest.Check(t.Context(), d, 1)
		require.Error(t, err)
		assert.Contains(t, err.Error(), `stream "crash-03"`)
	})
}

// retained populates a directory and runs one retention pass on it with a
// server clock an hour ahead (every run past the idempotency horizon):
// the storm's history, most of it removed to archives.
func retained(t *testing.T) string {
	d := t.TempDir()
	require.NoError(t, crashtest.Populate(d, 60, 5))
	store, err := eventstore.Open(filepath.Join(d, crashtest.DataFile), crashtest.StoreOptions())
	require.NoError(t, err)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	cfg := crashtest.RetentionServerConfig(quiet)
	cfg.Clock = func() time.Time { return time.Now().Add(time.Hour) }
	srv, err := actors.Start(sys, store, cfg)
	require.NoError(t, err)
	require.NoError(t, crashtest.StartRetention(srv, d))
	rep, err := srv.RunRetention(t.Context())
	require.NoError(t, err)
	require.Empty(t, rep.Errors)
	removed := 0
	for _, s := range rep.Scopes {
		if s.Through > 0 {
			removed++
		}
	}
	require.Positive(t, removed, "the pass removed nothing")
	srv.Stop()
	sys.Shutdown()
	require.NoError(t, store.Close())
	return d
}

// Under retention the checker finds every acknowledged write in the
// archives and the store together, answers GetFrame as removed for exactly
// the frames removed, and catches an archive lost or altered.
func TestCheckUnderRetention(t *testing.T) {
	d := retained(t)
	st, err := crashtest.Check(t.Context(), d, 1)
	require.NoError(t, err)
	assert.Zero(t, st.Lost)
	assert.Positive(t, st.Removals)
	assert.Positive(t, st.AckedArchived)
	assert.Positive(t, st.FramesRemoved)
	assert.Equal(t, st.Removals, st.Archives, "one archive per removal, none orphaned")
	assert.Empty(t, st.Unfinished)

	archives, err := filepath.Glob(filepath.Join(d, crashtest.ArchiveDir, "*", "*.jsonl"))
	require.NoError(t, err)
	require.NotEmpty(t, archives)
	copyDir := func(t *testing.T) string {
		c := filepath.Join(t.TempDir(), "crash")
		require.NoError(t, os.CopyFS(c, os.DirFS(d)))
		return c
	}
	rel, err := filepath.Rel(d, archives[0])
	require.NoError(t, err)
	t.Run("moved directory", func(t *testing.T) {
		_, err := crashtest.Check(t.Context(), copyDir(t), 1)
		require.NoError(t, err)
	})
	t.Run("archive lost", func(t *testing.T) {
		c := copyDir(t)
		require.NoError(t, os.Remove(filepath.Join(c, rel)))
		_, err := crashtest.Check(t.Context(), c, 1)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "LOST: version")
	})
	t.Run("archive altered", func(t *testing.T) {
		c := copyDir(t)
		p := filepath.Join(c, rel)
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		i := strings.Index(string(b), `"raw":"`) + len(`"raw":"`) + 20
		if b[i] == 'A' { // another base64 digit: the record's bytes change, not the line's form
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		require.NoError(t, os.WriteFile(p, b, 0o600))
		_, err = crashtest.Check(t.Context(), c, 1)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "archive")
	})
	t.Run("half-written archive", func(t *testing.T) {
		// What a kill inside WriteArchive leaves: counted, not an error.
		c := copyDir(t)
		b, err := os.ReadFile(filepath.Join(c, rel))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(c, rel)+".tmp", b, 0o600))
		st, err := crashtest.Check(t.Context(), c, 1)
		require.NoError(t, err)
		assert.Equal(t, 1, st.PartialArchives)
	})
}

// The subscription checker catches a broken promise: a skipped event, one
// delivered out of order or twice in one run, a wrong or phantom event, an
// ack or a stored position past what was delivered, a lost ack, a restart
// that did not resume at the stored position.
func TestCheckSubscriptionLogCatchesBrokenPromises(t *testing.T) {
	// The log: seqs 1..6 and 8 match (7 is another stream's, say).
	ref := map[uint64]crashtest.SubRef{}
	for q := uint64(1); q <= 8; q++ {
		if q != 7 {
			ref[q] = crashtest.SubRef{Scope: "crash-01", Version: int64(q)}
		}
	}
	ref[3] = crashtest.SubRef{Scope: "crash-01", Version: 3, Removed: true}
	d := func(qs ...int) string {
		var b strings.Builder
		for _, q := range qs {
			fmt.Fprintf(&b, "D %d crash-01 %d\n", q, q)
		}
		return b.String()
	}
	for _, tc := range []struct {
		name     string
		log      string
		stored   uint64
		storedOK bool
		want     string // "" for a clean log
	}{
		{name: "clean, redelivered after a kill", log: "S 1 1\n" + d(1, 2, 3) + "K 3 3\n" + d(4) + "C 1 3\nS 2 3\n" + d(3, 4, 5, 6, 8) + "K 9 9\n", stored: 9, storedOK: true},
		{name: "kill between the ack and its line", log: "S 1 1\n" + d(1, 2, 3, 4) + "K 3 3\n", stored: 5, storedOK: true},
		{name: "a line cut by the kill", log: "S 1 1\n" + d(1, 2) + "K 3 3\nD 3 cr", stored: 3, storedOK: true},
		{name: "skipped within a run", log: "S 1 1\n" + d(1, 2, 4), stored: 1, storedOK: true, want: "SKIPPED: seq 4 delivered, but event 3"},
		{name: "run starts past its position", log: "S 1 1\n" + d(2, 3), stored: 1, storedOK: true, want: "SKIPPED: seq 2 delivered, but event 1"},
		{name: "out of order", log: "S 1 1\n" + d(1, 2, 2), stored: 1, storedOK: true, want: "ORDER: seq 2"},
		{name: "wrong event", log: "S 1 1\nD 1 crash-02 1\n", stored: 1, storedOK: true, want: "WRONG EVENT: seq 1"},
		{name: "phantom event", log: "S 1 1\n" + d(1, 2, 3, 4, 5, 6, 7), stored: 1, storedOK: true, want: "PHANTOM: seq 7"},
		{name: "ack past the deliveries", log: "S 1 1\n" + d(1, 2) + "K 4 4\n", stored: 4, storedOK: true, want: "ACK: position 4 acknowledged, but event 3"},
		{name: "ack goes back", log: "S 1 1\n" + d(1, 2, 3) + "K 4 4\nK 2 2\n", stored: 4, storedOK: true, want: "ACK: stored position 2 after asking 2, the ack before stored 4"},
		{name: "stored past the deliveries", log: "S 1 1\n" + d(1, 2) + "K 3 3\n", stored: 5, storedOK: true, want: "ACK: the stored position is 5, but event 3"},
		{name: "lost ack", log: "S 1 1\n" + d(1, 2, 3) + "K 4 4\n", stored: 2, storedOK: true, want: "LOST ACK: the stored position 2 is below the last recorded ack 4"},
		{name: "acks, nothing stored", log: "S 1 1\n" + d(1) + "K 2 2\n", want: "is not stored, yet acks were recorded"},
		{name: "restart not at the stored position", log: "S 1 1\n" + d(1, 2, 3) + "K 4 4\nC 1 4\nS 2 2\n" + d(2, 3), stored: 4, storedOK: true, want: "RESUME: the subscription opened at 2, the stored position after the last kill was 4"},
		{name: "restart below the recorded ack", log: "S 1 1\n" + d(1, 2, 3) + "K 4 4\nS 2 2\n" + d(2, 3), stored: 4, storedOK: true, want: "RESUME: the subscription opened at 2, below the ack of 4"},
		{name: "restart past an undelivered event", log: "S 1 1\n" + d(1, 2) + "S 2 4\n" + d(4), stored: 1, storedOK: true, want: "SKIPPED: the subscription opened at 4, but event 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := crashtest.CheckSubscriptionLog([]byte(tc.log), ref, tc.stored, tc.storedOK)
			if tc.want == "" {
				require.NoError(t, err)
				assert.Positive(t, st.Delivered)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	t.Run("figures", func(t *testing.T) {
		st, err := crashtest.CheckSubscriptionLog([]byte("S 1 1\n"+d(1, 2, 3)+"K 3 3\n"+d(4)+"C 1 3\nS 2 3\n"+d(3, 4, 5, 6, 8)+"K 9 9\n"), ref, 9, true)
		require.NoError(t, err)
		assert.Equal(t, crashtest.SubStats{Runs: 2, Delivered: 9, Unique: 7, Redelivered: 2, Acks: 2, LastAck: 9, Stored: 9, Covered: 9, Last: 8,
			Matching: 7, RemovedDelivered: 1, Resumes: 1}, st)
	})
}

// The partial-output check catches an acknowledged chunk missing from its
// frame's output (acknowledged, and never written) and a chunk recorded
// with another delta than it was sent with.
func TestCheckCatchesBrokenPartialOutput(t *testing.T) {
	base := t.TempDir()
	// A storm that leaves a live frame with an output.
	var scope, frame string
	for seed := uint64(1); scope == "" && seed < 20; seed++ {
		base = t.TempDir()
		require.NoError(t, crashtest.Populate(base, 80, seed))
		store, err := eventstore.Open(filepath.Join(base, crashtest.DataFile), nil)
		require.NoError(t, err)
		require.NoError(t, store.Streams(t.Context(), func(i eventstore.StreamInfo) error {
			st, _, err := eventstore.LoadState(t.Context(), store, i.Stream, 0, 0, nil)
			if err != nil {
				return err
			}
			for _, f := range st.LiveFrames() {
				if f.Partial != nil && f.Partial.Chunks > 1 && scope == "" {
					scope, frame = i.Stream, f.ID
				}
			}
			return nil
		}))
		require.NoError(t, store.Close())
	}
	require.NotEmpty(t, scope, "no storm left a live output")
	side, err := os.ReadFile(filepath.Join(base, crashtest.SideFile))
	require.NoError(t, err)
	db, err := os.ReadFile(filepath.Join(base, crashtest.DataFile))
	require.NoError(t, err)
	copyOf := func(t *testing.T, side []byte) string {
		d := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(d, crashtest.SideFile), side, 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(d, crashtest.DataFile), db, 0o600))
		return d
	}
	encode := func(r *messages.RecordPartialOutput) string {
		b, err := eventstore.Marshal(r)
		require.NoError(t, err)
		return base64.StdEncoding.EncodeToString(b)
	}
	// The last chunk sent to the frame: it is in the output.
	var lastChunk string
	for _, l := range strings.Split(string(side), "\n") {
		f := strings.Fields(l)
		if len(f) == 5 && f[0] == "I" && f[1] == scope && f[3] == "RecordPartialOutput" {
			raw, err := base64.StdEncoding.DecodeString(f[4])
			require.NoError(t, err)
			var r messages.RecordPartialOutput
			require.NoError(t, eventstore.Unmarshal(raw, &r))
			if r.FrameID == frame {
				lastChunk = l
			}
		}
	}
	require.NotEmpty(t, lastChunk)

	t.Run("intact", func(t *testing.T) {
		st, err := crashtest.Check(t.Context(), copyOf(t, side), 1)
		require.NoError(t, err)
		assert.Positive(t, st.Partial.Outputs)
		assert.Positive(t, st.Partial.Chunks)
	})
	t.Run("an acknowledged chunk never written", func(t *testing.T) {
		req := &messages.RecordPartialOutput{Header: messages.Header{Scope: scope, RequestID: "never-written"}, FrameID: frame, Delta: "lost words"}
		fake := append([]byte(nil), side...)
		fake = append(fake, fmt.Sprintf("I %s never-written RecordPartialOutput %s\nA %s never-written RecordPartialOutput 7 0\n", scope, encode(req), scope)...)
		_, err := crashtest.Check(t.Context(), copyOf(t, fake), 1)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "LOST: scope "+fmt.Sprintf("%q", scope)+": acknowledged chunk never-written")
	})
	t.Run("a chunk recorded with another delta", func(t *testing.T) {
		f := strings.Fields(lastChunk)
		raw, err := base64.StdEncoding.DecodeString(f[4])
		require.NoError(t, err)
		var r messages.RecordPartialOutput
		require.NoError(t, eventstore.Unmarshal(raw, &r))
		r.Delta += "(more than was recorded)"
		f[4] = encode(&r)
		fake := strings.Replace(string(side), lastChunk, strings.Join(f, " "), 1)
		_, err = crashtest.Check(t.Context(), copyOf(t, []byte(fake)), 1)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "PARTIAL: RecordPartialOutput "+f[2])
		assert.Contains(t, err.Error(), "its chunks were sent with")
	})
}

// A kill before any matching event was written: the subscriber opened (and
// maybe stored its position) but nothing matched yet. The checker found a
// panic here (index -1) in a storm whose first kill came at once.
func TestCheckSubscriptionLogBeforeAnyMatchingEvent(t *testing.T) {
	st, err := crashtest.CheckSubscriptionLog([]byte("S 1 0\n"), map[uint64]crashtest.SubRef{}, 0, false)
	require.NoError(t, err)
	assert.Equal(t, uint64(0), st.Covered)
	assert.Equal(t, 1, st.Runs)
	st, err = crashtest.CheckSubscriptionLog(nil, nil, 0, true)
	require.NoError(t, err)
	assert.Equal(t, uint64(0), st.Covered)
}
