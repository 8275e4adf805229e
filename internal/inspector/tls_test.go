package inspector

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/internal/devcerts"
)

// With remoting's TLS the inspector speaks HTTPS with the node's
// certificate and its client-certificate rule: a browser trusting the CA
// and holding a certificate reads the pages; plain HTTP and a caller
// without a certificate are refused.
func TestInspectorOverMutualTLS(t *testing.T) {
	fx := newFixture(t)
	in, err := New(fx.c, Options{})
	require.NoError(t, err)
	ca, err := devcerts.NewCA("test CA", time.Hour)
	require.NoError(t, err)
	node, err := ca.Issue("node", []string{"127.0.0.1"}, time.Hour)
	require.NoError(t, err)
	browser, err := ca.Issue("browser", []string{"127.0.0.1"}, time.Hour)
	require.NoError(t, err)
	nodeCert, err := tls.X509KeyPair(node.CertPEM, node.KeyPEM)
	require.NoError(t, err)
	browserCert, err := tls.X509KeyPair(browser.CertPEM, browser.KeyPEM)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	serverTLS := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{nodeCert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}

	srv, err := ListenTLS("127.0.0.1:0", in, true, serverTLS)
	require.NoError(t, err)
	defer func() { _ = srv.Close(context.Background()) }()
	assert.Regexp(t, `^https://127\.0\.0\.1:\d+/$`, srv.URL())

	get := func(c *http.Client, url string) (int, error) {
		resp, err := c.Get(url)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		return resp.StatusCode, nil
	}
	with := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{browserCert}}}}
	code, err := get(with, srv.URL()+"scope?s="+q(fx.scope))
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, code)

	without := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	_, err = get(without, srv.URL())
	assert.Error(t, err, "no client certificate: the handshake fails")

	plain := &http.Client{Timeout: 10 * time.Second}
	code, err = get(plain, "http://"+srv.Addr().String()+"/")
	assert.True(t, err != nil || code == http.StatusBadRequest, "plain HTTP to the TLS port is refused (err %v, status %d)", err, code)
}
