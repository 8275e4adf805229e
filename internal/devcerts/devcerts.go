// Package devcerts issues certificates for development and tests: a
// certificate authority and node certificates signed by it (ECDSA P-256),
// each valid both as a TLS server and as a TLS client certificate, for the
// hosts given (an IP address becomes an IP SAN, a name a DNS SAN).
//
// A StateIndex node needs both usages: Proto.Actor remoting is two one-way
// connections, so every node (a remote Client too) serves the connection
// its peers dial to it and presents its certificate when it dials them.
//
// It is for `stateindex certs` and tests, not for production: keep a real
// CA's key offline.
package devcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority: its certificate and key.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// CertPEM and KeyPEM are the certificate and the key (PKCS #8) as PEM.
	CertPEM, KeyPEM []byte
}

// Pair is an issued certificate and its key, as PEM.
type Pair struct {
	CertPEM, KeyPEM []byte
}

// NewCA creates a self-signed CA named name, valid for validFor.
func NewCA(name string, validFor time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(validFor),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyPEM, err := keyToPEM(key)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: certToPEM(der), KeyPEM: keyPEM}, nil
}

// LoadCA reads a CA written by WriteCA (or any PEM CA certificate with its
// ECDSA key).
func LoadCA(certFile, keyFile string) (*CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s: no PEM certificate", certFile)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", certFile, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("%s: not a CA certificate", certFile)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, fmt.Errorf("%s: no PEM key", keyFile)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keyFile, err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("%s: not the ECDSA key of %s", keyFile, certFile)
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// Issue signs a certificate for name (its common name) valid for the
// hosts (IP addresses, DNS names, or URIs such as spiffe://…) for
// validFor, usable as a server and as a client certificate.
func (ca *CA) Issue(name string, hosts []string, validFor time.Duration) (*Pair, error) {
	return ca.IssueWith(name, hosts, Options{NotAfter: time.Now().Add(validFor)})
}

// Options shape a certificate IssueWith signs.
type Options struct {
	// NotBefore and NotAfter bound its validity (zero NotBefore: a minute
	// ago; zero NotAfter: a year from now).
	NotBefore, NotAfter time.Time
	// Usages are its extended key usages (nil: server and client).
	Usages []x509.ExtKeyUsage
}

// IssueWith is Issue with the validity and usages of o.
func (ca *CA) IssueWith(name string, hosts []string, o Options) (*Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if o.NotBefore.IsZero() {
		o.NotBefore = now.Add(-time.Minute)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = now.Add(365 * 24 * time.Hour)
	}
	if o.Usages == nil {
		o.Usages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    o.NotBefore,
		NotAfter:     o.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  o.Usages,
	}
	for _, h := range hosts {
		switch ip := net.ParseIP(h); {
		case ip != nil:
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		case isURI(h):
			u, _ := url.Parse(h)
			tmpl.URIs = append(tmpl.URIs, u)
		case h != "":
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, err
	}
	keyPEM, err := keyToPEM(key)
	if err != nil {
		return nil, err
	}
	return &Pair{CertPEM: certToPEM(der), KeyPEM: keyPEM}, nil
}

func isURI(s string) bool {
	u, err := url.Parse(s)
	return err == nil && u.Scheme != "" && u.Host != ""
}

// WriteCA writes the CA's certificate to certFile and its key to keyFile
// (mode 0600); it refuses to overwrite either.
func (ca *CA) WriteCA(certFile, keyFile string) error {
	return writeNew(certFile, ca.CertPEM, 0o644, keyFile, ca.KeyPEM)
}

// Write writes the certificate to certFile and its key to keyFile (mode
// 0600); it refuses to overwrite either.
func (p *Pair) Write(certFile, keyFile string) error {
	return writeNew(certFile, p.CertPEM, 0o644, keyFile, p.KeyPEM)
}

func writeNew(certFile string, certPEM []byte, mode os.FileMode, keyFile string, keyPEM []byte) error {
	for _, f := range []string{certFile, keyFile} {
		if _, err := os.Stat(f); err == nil {
			return fmt.Errorf("%s exists: not overwritten", f)
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Dir(keyFile), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return err
	}
	return os.WriteFile(certFile, certPEM, mode)
}

func serialNumber() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func certToPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func keyToPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
