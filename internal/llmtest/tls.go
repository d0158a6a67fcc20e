package llmtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"time"
)

// TLSIdentity is a throwaway CA and a certificate it signed for some names, so that a fake API
// can be served under a real API's name (api.anthropic.com) to a client that trusts the CA,
// such as the host's egress proxy given CAFile with --egress-ca-file.
type TLSIdentity struct {
	Cert   tls.Certificate
	CAPEM  []byte
	CAFile string // CAPEM written to a file, readable by everyone
}

// NewTLSIdentity makes a CA in dir and a certificate for names.
func NewTLSIdentity(dir string, names ...string) (*TLSIdentity, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "llmtest CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: names,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	id := &TLSIdentity{
		Cert:   tls.Certificate{Certificate: [][]byte{der, caDER}, PrivateKey: key},
		CAPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		CAFile: filepath.Join(dir, "llmtest-ca.pem"),
	}
	if err := os.WriteFile(id.CAFile, id.CAPEM, 0o644); err != nil {
		return nil, err
	}
	return id, nil
}

// ServeTLS serves the same API over TLS with cert on another free loopback port, HTTP/1.1 and
// HTTP/2, and returns that port's address, to pin the API's name to (--egress-resolve).
func (s *Server[R]) ServeTLS(cert tls.Certificate) (netip.AddrPort, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("listen for the fake API over TLS: %w", err)
	}
	s.tls = &http.Server{Handler: s.srv.Handler, ReadHeaderTimeout: s.srv.ReadHeaderTimeout,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}}
	go s.tls.ServeTLS(l, "", "")
	return netip.MustParseAddrPort(l.Addr().String()), nil
}
