package actors

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A member's health endpoint is its port + 1: a member listed on that
// address would collide with it, and is refused saying why.
func TestClusterConfigRefusesAMemberOnAnotherMembersHealthPort(t *testing.T) {
	_, err := ClusterConfig{Name: "c", Members: []string{"127.0.0.1:7400", "127.0.0.1:7401"}}.withDefaults()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "member 127.0.0.1:7400 serves its health endpoint on its port + 1, 127.0.0.1:7401, which is member 127.0.0.1:7401's address")
	assert.Contains(t, err.Error(), "at least 2 apart")

	_, err = ClusterConfig{Name: "c", Members: []string{"127.0.0.1:7400", "127.0.0.1:7402", "10.0.0.1:7401"}}.withDefaults()
	assert.NoError(t, err, "port + 1 on another host is no collision")
}
