package actors_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster/clusterproviders/automanaged"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/internal/proctest"
	"github.com/stateindex/stateindex/messages"
)

// security builds a Security from files (the child's secSpec), logging to
// log.
func (s secSpec) security(t testing.TB, log *slog.Logger) *actors.Security {
	t.Helper()
	sc := actors.SecurityConfig{Logger: log}
	if s.Cert != "" {
		var err error
		sc.ServerTLS, sc.ClientTLS, err = actors.LoadTLS(actors.TLSFiles{CertFile: s.Cert, KeyFile: s.Key, CAFile: s.CA, ClientCAFile: s.ClientCA,
			ClientAuth: actors.ClientAuth(s.ClientAuth), ServerName: s.ServerName, AllowedNames: s.Allowed})
		require.NoError(t, err)
	}
	if s.Secret != "" {
		var err error
		sc.Secret, err = actors.LoadSecret(s.Secret)
		require.NoError(t, err)
	}
	sec, err := actors.NewSecurity(sc)
	require.NoError(t, err)
	return sec
}

// Two members over mutual TLS with one server name and a shared secret:
// the cluster forms, a Client on one member reaches the scopes homed on
// the other, and each member's health endpoint listens on its own host
// only, speaks TLS and wants the secret. A node without the secret never
// sees the members.
func TestClusterOverMutualTLSWithASecret(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two cluster members (about five seconds)")
	}
	if raceEnabled {
		t.Skip("two cluster members in one process race inside Proto.Actor's cluster (see raceEnabled)")
	}
	p := newPKI(t)
	spec := p.spec(p.server)
	spec.ClientAuth, spec.ServerName, spec.Secret = "require", p.serverName, p.secret
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ports := proctest.FreePorts(t, 3, true)
	members := []string{fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])}
	cc := actors.ClusterConfig{Name: "tls", Members: members, Shards: 2, HealthInterval: 200 * time.Millisecond, Logger: quiet,
		Security: spec.security(t, quiet)}
	var nodes []*actors.ClusterNode
	for _, m := range members {
		node, err := actors.StartMember(quietSystem(), eventstore.NewMemory(), testConfig(newFakeClock()), cc, m)
		require.NoError(t, err)
		t.Cleanup(node.Stop)
		nodes = append(nodes, node)
	}
	require.Eventually(t, func() bool { return len(nodes[0].Live()) == 2 && len(nodes[1].Live()) == 2 }, 30*time.Second, 20*time.Millisecond,
		"both members see both over TLS")

	// Requests cross members: A's Client sends B's scopes to B.
	c := nodes[0].Client()
	served := map[string]bool{}
	for i := 0; len(served) < 2; i++ {
		scope := fmt.Sprintf("tls-%d", i)
		f, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(scope), Goal: "g", Budget: budget.TokenBudget{Total: 10}})
		require.NoError(t, err)
		st, err := c.GetStack(ctx, &messages.GetStack{Header: messages.Header{Scope: scope}})
		require.NoError(t, err)
		require.Equal(t, f.FrameID, st.Frames[len(st.Frames)-1].ID)
		served[nodes[0].Home(scope)] = true
	}

	// The health endpoint: the member's own host, not every interface.
	host, port, err := net.SplitHostPort(nodes[0].HealthAddr())
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1", host)
	assert.Equal(t, fmt.Sprint(ports[0]+1), port)
	_, err = net.DialTimeout("tcp", net.JoinHostPort("127.0.0.2", port), time.Second)
	assert.Error(t, err, "another local address does not reach it (a 0.0.0.0 listener would answer)")

	// It speaks TLS, asks for a client certificate and wants the secret.
	url := "https://" + nodes[0].HealthAddr() + "/_health"
	resp, err := http.Get("http" + strings.TrimPrefix(url, "https"))
	if err == nil {
		resp.Body.Close()
		assert.NotEqual(t, http.StatusOK, resp.StatusCode, "plaintext HTTP is not answered")
	}
	_, client, err := actors.LoadTLS(actors.TLSFiles{CertFile: p.client[0], KeyFile: p.client[1], CAFile: p.ca, ServerName: p.serverName})
	require.NoError(t, err)
	get := func(cfgCert bool, authorization string) (*http.Response, error) {
		tc := client.Clone()
		if !cfgCert {
			tc.GetClientCertificate = nil
		}
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
		return (&http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 5 * time.Second}).Do(req)
	}
	resp, err = get(false, "")
	if err == nil {
		resp.Body.Close()
		assert.Fail(t, "answered a caller without a certificate", resp.Status)
	}
	resp, err = get(true, "")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "no secret")
	resp, err = get(true, "Bearer "+base64.RawURLEncoding.EncodeToString([]byte("a wrong secret of more than 32 bytes!")))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a wrong secret")
	secret, err := os.ReadFile(p.secret)
	require.NoError(t, err)
	resp, err = get(true, "Bearer "+base64.RawURLEncoding.EncodeToString([]byte(strings.TrimSpace(string(secret)))))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var n automanaged.NodeModel // automanaged's format: a member of an older build reads it
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&n))
	assert.Equal(t, automanaged.NodeModel{ID: n.ID, Address: "127.0.0.1", Port: ports[0], AutoManagePort: ports[0] + 1,
		Kinds: n.Kinds, ClusterName: "tls"}, n)
	assert.Contains(t, n.Kinds, actors.KindOf(members[0]))

	// A node with another secret polls, is refused, and sees nobody.
	wrong := spec
	wrong.Secret = p.wrongSecret
	cw := cc
	cw.Security = wrong.security(t, quiet)
	outsider, err := actors.JoinCluster(quietSystem(), cw, fmt.Sprintf("127.0.0.1:%d", ports[2]))
	require.NoError(t, err)
	defer outsider.Stop()
	assert.Empty(t, outsider.Live(), "no member answers a node without the secret")
	_, err = outsider.Client().GetStack(ctx, &messages.GetStack{Header: messages.Header{Scope: "tls-0"}})
	assert.ErrorIs(t, err, actors.ErrUnavailable)
}
