package eventstore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
)

// KeepRequestsSince keeps the request ids of the removed prefix committed
// at or after its time as tombstones that History answers as gone; older
// ones, and every one without the option, are dropped. Every store.
func TestRemovePrefixKeepsRequestTombstones(t *testing.T) {
	ctx := context.Background()
	stores := map[string]func(t *testing.T) eventstore.Store{
		"memory": func(*testing.T) eventstore.Store { return eventstore.NewMemory() },
		"bolt": func(t *testing.T) eventstore.Store {
			s, err := eventstore.Open(filepath.Join(t.TempDir(), "s.db"), &eventstore.Options{NoSync: true})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
	}
	if os.Getenv("STATEINDEX_PG_URL") != "" {
		stores["postgres"] = func(t *testing.T) eventstore.Store {
			_, u := pgSchema(t)
			return openPG(t, u, nil)
		}
	}
	for name, open := range stores {
		for _, keep := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/keep=%v", name, keep), func(t *testing.T) {
				s := open(t)
				for v := int64(1); v <= 4; v++ {
					ev, err := eventstore.EncodeFrameEvent(&frames.ActorResumed{Meta: frames.Meta{Scope: "sc", At: v * 100, RequestID: fmt.Sprintf("req-%d", v)}})
					require.NoError(t, err)
					_, err = s.Append(ctx, "sc", v-1, []eventstore.Event{ev})
					require.NoError(t, err)
				}
				require.NoError(t, s.SaveSnapshot(ctx, "sc", eventstore.Snapshot{Version: 4, Format: 1, Data: []byte("x")}))
				var opts []eventstore.RemoveOption
				if keep {
					opts = append(opts, eventstore.KeepRequestsSince(200))
				}
				_, err := s.RemovePrefix(ctx, "sc", 3, opts...)
				require.NoError(t, err)
				h := eventstore.History(s, "sc")
				for v, want := range map[int]bool{1: false, 2: keep, 3: keep} {
					rec, ok, err := h.Request(fmt.Sprintf("req-%d", v))
					require.NoError(t, err)
					assert.Equal(t, want, ok, "req-%d", v)
					assert.Equal(t, want, rec.Gone, "req-%d", v)
				}
				rec, ok, err := h.Request("req-4")
				require.NoError(t, err)
				require.True(t, ok)
				assert.False(t, rec.Gone, "a request after the cut is answered from its records")
				require.NoError(t, s.VerifyStream(ctx, "sc"))
				if v, ok := s.(interface {
					Verify(context.Context, func(string, error)) error
				}); ok {
					require.NoError(t, v.Verify(ctx, nil), "tombstones are no index damage")
				}
			})
		}
	}
}
