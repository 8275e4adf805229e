package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stateindex/stateindex/internal/devcerts"
)

func init() {
	register(command{name: "certs", summary: "--dir DIR --name NAME --hosts H,... [--days N] [--secret]   issue a development CA (once) and a node certificate for TLS and mutual TLS", run: certsCmd})
}

// certsCmd issues development certificates: a CA in DIR (created on first
// use, reused after) and a certificate for one node, valid as a TLS server
// and client certificate for the hosts given.
func certsCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("certs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "where the CA (ca.pem, ca.key) is kept or created, and the node's NAME.pem and NAME.key written")
	name := fs.String("name", "", "the node's name: the certificate's common name and its files' name")
	hosts := fs.String("hosts", "", "comma-separated IP addresses and DNS names the node is reached at (its --listen host; add a shared name for tls.server_name)")
	days := fs.Int("days", 365, "the node certificate's validity in days (the CA's: ten years)")
	secret := fs.Bool("secret", false, "also write DIR/secret, a random shared secret for auth.secret_file (if it does not exist)")
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: stateindex certs --dir DIR --name NAME --hosts H,... [--days N] [--secret]\n\n"+
			"Issues a development certificate authority (DIR/ca.pem, DIR/ca.key; created once,\n"+
			"reused after) and a certificate for one node (DIR/NAME.pem, DIR/NAME.key), ECDSA\n"+
			"P-256, usable as a TLS server and client certificate: what every node, a remote\n"+
			"client too, needs for tls.cert_file and tls.key_file. Keys are written 0600 and\n"+
			"never overwritten. For development: a production CA's key stays offline.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	var hostList []string
	for _, h := range strings.Split(*hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hostList = append(hostList, h)
		}
	}
	if *dir == "" || *name == "" || len(hostList) == 0 || *days < 1 || fs.NArg() > 0 || strings.ContainsAny(*name, `/\`) {
		fmt.Fprintln(stderr, "stateindex certs: give --dir, --name (a plain name) and --hosts")
		return errUsage
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		return err
	}
	caCert, caKey := filepath.Join(*dir, "ca.pem"), filepath.Join(*dir, "ca.key")
	ca, err := devcerts.LoadCA(caCert, caKey)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if ca, err = devcerts.NewCA("stateindex development CA", 10*365*24*time.Hour); err != nil {
			return err
		}
		if err := ca.WriteCA(caCert, caKey); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s and %s (a new CA)\n", caCert, caKey)
	case err != nil:
		return fmt.Errorf("the CA in %s: %w", *dir, err)
	}
	pair, err := ca.Issue(*name, hostList, time.Duration(*days)*24*time.Hour)
	if err != nil {
		return err
	}
	certFile, keyFile := filepath.Join(*dir, *name+".pem"), filepath.Join(*dir, *name+".key")
	if err := pair.Write(certFile, keyFile); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s and %s for %s\n", certFile, keyFile, strings.Join(hostList, ", "))
	secretFile := filepath.Join(*dir, "secret")
	if *secret {
		if _, err := os.Stat(secretFile); errors.Is(err, os.ErrNotExist) {
			b := make([]byte, 32)
			if _, err := rand.Read(b); err != nil {
				return err
			}
			if err := os.WriteFile(secretFile, []byte(hex.EncodeToString(b)+"\n"), 0o600); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "wrote %s (a shared secret)\n", secretFile)
		}
	}
	fmt.Fprintf(stdout, "\nin this node's configuration:\n\ntls:\n  cert_file: %s\n  key_file: %s\n  ca_file: %s\n  client_auth: require   # mutual TLS; none: server certificates only\n",
		certFile, keyFile, caCert)
	if *secret {
		fmt.Fprintf(stdout, "auth:\n  secret_file: %s\n", secretFile)
	}
	return nil
}
