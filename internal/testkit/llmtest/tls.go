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
	Cert   tls.Certificate // for the names, its chain ending with the CA
	CA     tls.Certificate // the CA, with its key
	CAPEM  []byte
	CAFile string // CAPEM written to a file, readable by everyone
}

// NewTLSIdentity makes a CA in dir and a certificate for names (host names or IP addresses).
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
		SubjectKeyId: []byte{1, 2, 3, 4},
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	id := &TLSIdentity{
		CA:     tls.Certificate{Certificate: [][]byte{caDER}, PrivateKey: caKey},
		CAPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		CAFile: filepath.Join(dir, "llmtest-ca.pem"),
	}
	if id.Cert, err = Issue(id.CA, names...); err != nil {
		return nil, err
	}
	if err := os.WriteFile(id.CAFile, id.CAPEM, 0o644); err != nil {
		return nil, err
	}
	return id, nil
}

// Issue signs a server certificate for names (host names or IP addresses) with ca, a CA
// certificate and its ECDSA key: a test's own, or the host's (<data>/egress-ca), which jails
// trust.
func Issue(ca tls.Certificate, names ...string) (tls.Certificate, error) {
	caCert, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		return tls.Certificate{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano()), Subject: pkix.Name{CommonName: names[0]},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, ca.PrivateKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der, caCert.Raw}, PrivateKey: key}, nil
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
