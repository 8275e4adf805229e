package actors

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/automanaged"
)

// healthProvider is the cluster's membership provider: Proto.Actor's
// automanaged protocol — every node polls GET /_health on every configured
// member's health address each interval, a member answers with its
// automanaged.NodeModel as JSON, and the members that answered become the
// topology — written anew because automanaged cannot be configured to do
// what a member must:
//
//   - its health endpoint listens on the member's own host (automanaged
//     binds 0.0.0.0, every interface, hard-coded), on a listener bound
//     before the member joins, so that a port in use is an error rather
//     than a log line;
//   - with TLS configured, the endpoint serves TLS with the member's
//     certificate (and asks callers for theirs under mutual TLS) and the
//     polls verify it (automanaged's client and its http:// URL are
//     unexported); with a shared secret, each poll presents it and the
//     endpoint refuses a poll without it;
//   - its state belongs to the instance (automanaged's locks are package
//     globals shared by every provider in the process), and Shutdown
//     interrupts the poll loop's sleep.
//
// The path and the JSON are automanaged's, and its rule for a round is
// kept (when no member answers, the last topology stays), so a plaintext
// member of this build and one of an older build see each other.
type healthProvider struct {
	interval time.Duration
	hosts    []string     // the members' health addresses
	ln       net.Listener // a member's endpoint (nil on a client)
	sec      *Security
	log      *slog.Logger
	client   *http.Client
	scheme   string

	cl   *cluster.Cluster
	node automanaged.NodeModel
	srv  *http.Server

	stopOnce sync.Once
	stop     chan struct{}
	// failing holds each member's last poll failure, so that a failure
	// is logged when it starts or changes, not every round.
	failing map[string]string
}

// healthRequestTimeout bounds one poll of one member (automanaged's).
const healthRequestTimeout = 2 * time.Second

func newHealthProvider(interval time.Duration, hosts []string, ln net.Listener, sec *Security, logger *slog.Logger) *healthProvider {
	tr := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 5 * time.Second}).DialContext,
		MaxIdleConns:          10,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		MaxConnsPerHost:       10,
	}
	scheme := "http"
	if sec.TLS() {
		tr.TLSClientConfig = sec.client.Clone()
		scheme = "https"
	}
	return &healthProvider{interval: interval, hosts: hosts, ln: ln, sec: sec, log: logger, scheme: scheme,
		client: &http.Client{Transport: tr, Timeout: healthRequestTimeout}, stop: make(chan struct{}), failing: map[string]string{}}
}

func (p *healthProvider) init(c *cluster.Cluster) error {
	host, port, err := c.ActorSystem.GetHostPort()
	if err != nil {
		return err
	}
	p.cl = c
	p.node = automanaged.NodeModel{ID: c.ActorSystem.ID, ClusterName: c.Config.Name, Address: host, Port: port, Kinds: c.GetClusterKinds()}
	return nil
}

// StartMember serves the health endpoint and starts polling.
func (p *healthProvider) StartMember(c *cluster.Cluster) error {
	if p.ln == nil {
		return errors.New("actors: a member needs its health endpoint's listener")
	}
	if err := p.init(c); err != nil {
		return err
	}
	p.node.AutoManagePort = p.ln.Addr().(*net.TCPAddr).Port
	mux := http.NewServeMux()
	mux.HandleFunc("/_health", p.serveHealth)
	p.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: log.New(handshakeLog{p.sec}, "", 0)}
	ln := p.ln
	if p.sec.TLS() {
		ln = newTLSListener(ln, p.sec)
	}
	go func() { _ = p.srv.Serve(ln) }()
	go p.monitor()
	return nil
}

// StartClient starts polling.
func (p *healthProvider) StartClient(c *cluster.Cluster) error {
	if err := p.init(c); err != nil {
		return err
	}
	go p.monitor()
	return nil
}

// DeregisterMember stops polling (a client node's leave).
func (p *healthProvider) DeregisterMember() error {
	p.stopOnce.Do(func() { close(p.stop) })
	return nil
}

// Shutdown stops polling and closes the health endpoint.
func (p *healthProvider) Shutdown(bool) error {
	_ = p.DeregisterMember()
	p.close()
	return nil
}

// close closes the endpoint (or, before StartMember, its listener).
func (p *healthProvider) close() {
	switch {
	case p.srv != nil:
		_ = p.srv.Close()
	case p.ln != nil:
		_ = p.ln.Close()
	}
}

// Addr is the health endpoint's address (nil on a client).
func (p *healthProvider) Addr() net.Addr {
	if p.ln == nil {
		return nil
	}
	return p.ln.Addr()
}

func (p *healthProvider) serveHealth(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		http.Error(w, "GET only", http.StatusMethodNotAllowed)
		return
	}
	if why := p.sec.checkHealthAuthorization(r.Header.Get("Authorization")); why != "" {
		name := ""
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			name = strings.Join(certNames(r.TLS.PeerCertificates[0]), ",")
		}
		p.sec.refused(r.RemoteAddr, name, "health endpoint: unauthenticated: the caller "+why)
		http.Error(w, "unauthenticated: this member requires the shared secret", http.StatusUnauthorized)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&p.node)
}

// monitor polls every member each interval until stopped.
func (p *healthProvider) monitor() {
	for {
		nodes, err := p.check()
		// automanaged's rule: a round in which no member answered leaves
		// the topology as it was.
		if err == nil || len(nodes) > 0 {
			var members []*cluster.Member
			for _, n := range nodes {
				if n.ClusterName == p.node.ClusterName {
					members = append(members, &cluster.Member{Id: n.ID, Host: n.Address, Port: int32(n.Port), Kinds: n.Kinds})
				}
			}
			select {
			case <-p.stop:
				return
			default:
			}
			p.cl.MemberList.UpdateClusterTopology(members)
		}
		select {
		case <-p.stop:
			return
		case <-time.After(p.interval):
		}
	}
}

// check polls every member at once and returns the nodes that answered,
// and an error if any did not.
func (p *healthProvider) check() ([]*automanaged.NodeModel, error) {
	nodes := make([]*automanaged.NodeModel, len(p.hosts))
	errs := make([]error, len(p.hosts))
	var wg sync.WaitGroup
	for i, h := range p.hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nodes[i], errs[i] = p.poll(h)
		}()
	}
	wg.Wait()
	var out []*automanaged.NodeModel
	for i, h := range p.hosts {
		p.noteFailure(h, errs[i])
		if nodes[i] != nil {
			out = append(out, nodes[i])
		}
	}
	return out, errors.Join(errs...)
}

func (p *healthProvider) poll(host string) (*automanaged.NodeModel, error) {
	ctx, cancel := context.WithTimeout(context.Background(), healthRequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.scheme+"://"+host+"/_health", nil)
	if err != nil {
		return nil, err
	}
	if p.sec.HasSecret() {
		req.Header.Set("Authorization", p.sec.healthAuthorization())
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", host, resp.Status)
	}
	var n automanaged.NodeModel
	if err := json.NewDecoder(resp.Body).Decode(&n); err != nil {
		return nil, fmt.Errorf("%s answered something that is not a node: %w", host, err)
	}
	return &n, nil
}

// noteFailure logs a member's poll failure when it starts or changes: at
// warn when the member refused this node (TLS, the secret), at debug
// otherwise (the cluster Client logs a storage member that goes down).
func (p *healthProvider) noteFailure(host string, err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if p.failing[host] == msg {
		return
	}
	p.failing[host] = msg
	switch {
	case err == nil:
		p.log.Debug("stateindex: health endpoint answers again", "endpoint", host)
	case strings.Contains(msg, "tls: ") || strings.Contains(msg, "x509: ") || strings.Contains(msg, "401") ||
		strings.Contains(msg, "server gave HTTP response to HTTPS client") || strings.Contains(msg, "malformed HTTP response"):
		p.log.Warn("stateindex: a member's health endpoint refused this node (or speaks another protocol)", "endpoint", host, "error", msg)
	default:
		p.log.Debug("stateindex: a member's health endpoint does not answer", "endpoint", host, "error", msg)
	}
}

// newTLSListener serves TLS on ln with the member's server configuration,
// HTTP/1.1 only.
func newTLSListener(ln net.Listener, sec *Security) net.Listener {
	cfg := sec.server.Clone()
	cfg.NextProtos = []string{"http/1.1"}
	return tls.NewListener(ln, cfg)
}

// handshakeLog receives net/http's server log: its "TLS handshake error"
// lines become refused callers (rate-limited with the rest); the others
// are dropped.
type handshakeLog struct{ sec *Security }

func (h handshakeLog) Write(b []byte) (int, error) {
	line := strings.TrimSpace(string(b))
	if rest, ok := strings.CutPrefix(line, "http: TLS handshake error from "); ok {
		who, why, _ := strings.Cut(rest, ": ")
		if why != "EOF" {
			h.sec.refused(who, "", "health endpoint: TLS handshake failed: "+why)
		}
	}
	return len(b), nil
}
