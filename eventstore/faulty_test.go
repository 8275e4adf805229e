package eventstore_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/eventstore/storetest"
)

// Without planned faults the fault-injecting store is the store it wraps.
func TestFaultyConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) eventstore.Store { return storetest.NewFaulty(eventstore.NewMemory()) })
}

func TestFaultyKinds(t *testing.T) {
	ev := []eventstore.Event{{Type: "t", Data: []byte("x")}}
	for _, tc := range []struct {
		kind      storetest.FaultKind
		transient bool // retryable, store stays writable
		visible   bool // the events reached the store
	}{
		{storetest.WriteError, true, false},
		{storetest.DiskFull, true, false},
		{storetest.SyncError, false, false},
		{storetest.SyncErrorAfterWrite, false, true},
	} {
		t.Run(tc.kind.String(), func(t *testing.T) {
			f := storetest.NewFaulty(eventstore.NewMemory())
			f.Inject(storetest.Fault{Kind: tc.kind, Stream: "victim"})
			_, err := f.Append(t.Context(), "bystander", eventstore.NoStream, ev)
			require.NoError(t, err, "a fault for one stream leaves the others alone")
			_, err = f.Append(t.Context(), "victim", eventstore.NoStream, ev)
			require.Error(t, err)
			assert.Equal(t, tc.transient, eventstore.Retryable(err), "%v", err)
			assert.Equal(t, !tc.transient, errors.Is(err, eventstore.ErrCommitFailed), "%v", err)
			info, err := f.Stream(t.Context(), "victim")
			require.NoError(t, err, "reads keep working")
			assert.Equal(t, tc.visible, info.Version == 1)
			_, err = f.Append(t.Context(), "bystander", 1, ev)
			if tc.transient {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, eventstore.ErrWritesDisabled)
				assert.NotErrorIs(t, err, eventstore.ErrCommitFailed, "a later write was refused, not part of the failed commit")
				require.ErrorIs(t, f.SaveSnapshot(t.Context(), "bystander", eventstore.Snapshot{Version: 1, Format: 1}), eventstore.ErrWritesDisabled)
				f.Reopen()
				_, err = f.Append(t.Context(), "bystander", 1, ev)
				require.NoError(t, err)
			}
		})
	}
}
