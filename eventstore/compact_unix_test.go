//go:build unix

package eventstore_test

import (
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/eventstore"
)

// The compacted file keeps the data file's owner and group (which only
// root can give another user's file).
func TestCompactKeepsOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the file another owner")
	}
	path := tempPath(t)
	s := openAt(t, path, fast)
	fragment(t, s, 1)
	require.NoError(t, s.Close())
	const uid, gid = 4242, 4343
	require.NoError(t, os.Chown(path, uid, gid))

	_, err := eventstore.Compact(t.Context(), path, eventstore.CompactOptions{})
	require.NoError(t, err)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	st := fi.Sys().(*syscall.Stat_t)
	assert.Equal(t, uint32(uid), st.Uid)
	assert.Equal(t, uint32(gid), st.Gid)
}
