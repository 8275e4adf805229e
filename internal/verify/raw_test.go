package verify_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/internal/verify"
)

// The page check reads files of any page size bbolt writes, empty or
// full, and finds nothing wrong with a sound one. (The crash test runs it
// on a file after every kill.)
func TestPageCheckOnSoundFiles(t *testing.T) {
	for _, ps := range []int{0, 16384} {
		for _, events := range []int{0, 1, 800} {
			t.Run(fmt.Sprintf("page=%d/events=%d", ps, events), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "stateindex.db")
				st, err := eventstore.Open(path, &eventstore.Options{NoSync: true, PageSize: ps})
				require.NoError(t, err)
				for i := range events {
					_, err := st.Append(context.Background(), fmt.Sprintf("s%d", i%7), eventstore.Any,
						[]eventstore.Event{{Type: "t", Data: make([]byte, i%900)}})
					require.NoError(t, err)
				}
				require.NoError(t, st.Close())
				problems, live, err := verify.CheckPages(path)
				require.NoError(t, err)
				assert.Empty(t, problems)
				assert.NotEmpty(t, live)
			})
		}
	}
}
