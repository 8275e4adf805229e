package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/eventstore"
)

func TestServeRefusesIncompleteClusterFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cluster", "c"}, "--cluster needs --listen and --peers"},
		{[]string{"--cluster", "c", "--listen", "127.0.0.1:7500"}, "--cluster needs --listen and --peers"},
		{[]string{"--peers", "127.0.0.1:7500"}, "--peers needs --cluster"},
		{[]string{"--listen", "127.0.0.1:7500", "--max-message-bytes", "0"}, "--max-message-bytes must be positive"},
	} {
		var out, errb bytes.Buffer
		code := run(append([]string{"serve", "--data", t.TempDir()}, tc.args...), &out, &errb)
		assert.Equal(t, 1, code, "%v", tc.args)
		assert.Contains(t, errb.String(), tc.want, "%v", tc.args)
	}
}

func TestServeRefusesAClusterMembersFileStandalone(t *testing.T) {
	dir := t.TempDir()
	st, err := openStore(dir, true, time.Second, false)
	require.NoError(t, err)
	require.NoError(t, st.ClaimIdentity(context.Background(), eventstore.Identity{Cluster: "c", Member: "127.0.0.1:7500",
		Members: []string{"127.0.0.1:7500", "127.0.0.1:7510"}, Shards: 16}))
	require.NoError(t, st.Close())

	var out, errb bytes.Buffer
	code := run([]string{"serve", "--data", dir}, &out, &errb)
	assert.Equal(t, 1, code)
	assert.Contains(t, errb.String(), filepath.Join(dir, dbFile)+` belongs to member "127.0.0.1:7500" of cluster "c"`)
	assert.Contains(t, errb.String(), "--cluster c --listen 127.0.0.1:7500 --peers 127.0.0.1:7500,127.0.0.1:7510")
}

func TestParsePeersAddsSelf(t *testing.T) {
	assert.Equal(t, []string{"a:1", "b:2", "c:3"}, parsePeers("c:3, a:1,,c:3", "b:2"))
	assert.Equal(t, []string{"a:1", "b:2"}, parsePeers("a:1,b:2", "b:2"))
}
