package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/internal/config"
	"github.com/stateindex/stateindex/internal/inspector"
)

// startInspector starts the web inspector the configuration asks for
// (http.listen, --http) over c, or nothing; stop stops it (idempotent).
func startInspector(file *config.File, c *actors.Client, sec *actors.Security, log *slog.Logger) (url string, stop func(), err error) {
	if file.HTTP.Listen == "" {
		return "", func() {}, nil
	}
	secret, err := file.HTTPSecret()
	if err != nil {
		return "", nil, err
	}
	in, err := inspector.New(c, inspector.Options{Secret: secret, Logger: log, Listen: file.Remoting.Listen})
	if err != nil {
		return "", nil, err
	}
	srv, err := inspector.ListenTLS(file.HTTP.Listen, in, len(secret) > 0 || sec.Mutual(), sec.HTTPServerTLS())
	if err != nil {
		return "", nil, fmt.Errorf("--http %s: %w", file.HTTP.Listen, err)
	}
	var auth []string
	switch {
	case file.HTTP.SecretFile != "":
		auth = append(auth, "secret from "+file.HTTP.SecretFile+" (bearer token or basic password)")
	case len(secret) > 0:
		auth = append(auth, "remoting's secret, auth.secret_file (bearer token or basic password)")
	}
	if sec.Mutual() {
		auth = append(auth, "client certificate (mutual TLS, as remoting)")
	}
	if len(auth) == 0 {
		auth = append(auth, "none (loopback)")
	}
	log.Info("stateindex inspector", "url", srv.URL(), "auth", strings.Join(auth, " and "))
	var once bool
	return srv.URL(), func() {
		if once {
			return
		}
		once = true
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Close(ctx)
	}, nil
}

// printConnect tells a person how to reach the server: a Go Client, the
// CLI against it, and the inspector.
func printConnect(w io.Writer, file *config.File, inspectorURL string) {
	listen := file.Remoting.Listen
	var b strings.Builder
	switch {
	case file.Cluster.Name != "":
		fmt.Fprintf(&b, "StateIndex cluster member %s of %q serving\n", listen, file.Cluster.Name)
		fmt.Fprintf(&b, "  Go client: node, err := actors.JoinCluster(sys, actors.ClusterConfig{Name: %q, Members: []string{%q}}, \"HOST:0\"); si := node.Client()\n",
			file.Cluster.Name, strings.Join(parsePeers(strings.Join(file.Cluster.Peers, ","), listen), `", "`))
		fmt.Fprintf(&b, "  CLI:       stateindex inspect --server %s\n", listen)
	case listen != "":
		fmt.Fprintf(&b, "StateIndex serving at %s\n", listen)
		fmt.Fprintf(&b, "  Go client: actors.StartRemote(sys, actors.RemoteConfig(\"127.0.0.1\", 0)); si := actors.NewClient(sys.Root, actors.RemotePID(%q), 5*time.Second)\n", listen)
		fmt.Fprintf(&b, "  CLI:       stateindex inspect --server %s   (threads, ledger and state take --server too)\n", listen)
	default:
		b.WriteString("StateIndex serving in-process only: start it with --listen HOST:PORT to reach it from another process\n")
	}
	if inspectorURL != "" {
		fmt.Fprintf(&b, "  inspector: %s\n", inspectorURL)
	} else {
		b.WriteString("  inspector: off (--http 127.0.0.1:PORT serves it)\n")
	}
	_, _ = io.WriteString(w, b.String())
}
