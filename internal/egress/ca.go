package egress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// The host's CA lives in one directory of the data dir. The key never leaves it; the jail gets
// only JailBundle, a copy of the system's roots with the CA's certificate added, from a
// subdirectory of its own so that binding it can never expose the key.
const (
	caCertFile = "ca.pem"
	caKeyFile  = "ca-key.pem"
	jailSubdir = "jail"
	// BundleName is the CA bundle's file name in CA.JailDir.
	BundleName = "ca-bundle.pem"
)

const (
	caValidity = 10 * 365 * 24 * time.Hour
	// leafValidity is short: a leaf is minted again whenever the cache finds it old, and a
	// stolen one (it never leaves the host, but still) is soon worthless.
	leafValidity = 7 * 24 * time.Hour
	leafRenew    = 24 * time.Hour // re-mint a cached leaf this long before it expires
	clockSkew    = time.Hour      // leaves are valid from an hour ago, for jails whose clocks lag
	maxLeaves    = 4096
)

// systemBundles are where Linux distributions keep their roots, as Go's crypto/x509 looks for
// them. The jail's bundle starts with the first one found.
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",                // Debian, Ubuntu, Arch, Alpine
	"/etc/pki/tls/certs/ca-bundle.crt",                  // Fedora, RHEL
	"/etc/ssl/ca-bundle.pem",                            // openSUSE
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // CentOS, RHEL 7
	"/etc/ssl/cert.pem",                                 // Alpine, macOS
}

// CA is the host's own certificate authority: it signs the certificates the proxy shows a
// job's client for the hosts it terminates TLS for (those with a sealed secret or a request
// rule). Jails trust it through JailBundle; nothing else does.
type CA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	dir     string

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// LoadCA opens the CA in dir, making it at first use, and writes the jail's bundle beside it.
// The key is mode 0600 and must stay on the host; dir is 0711, so that a jail's user can
// reach the bundle's directory (bound into the jail) without listing dir.
func LoadCA(dir string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, fmt.Errorf("egress CA: create %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	certPath, keyPath := filepath.Join(dir, caCertFile), filepath.Join(dir, caKeyFile)
	certPEM, err := os.ReadFile(certPath)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if certPEM, err = createCA(certPath, keyPath); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, fmt.Errorf("egress CA: read %s: %w", certPath, err)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("egress CA: read its key %s: %w (delete %s to make a new CA)", keyPath, err, dir)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("egress CA in %s: %w (delete the directory to make a new CA)", dir, err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("egress CA in %s: the key is not ECDSA (delete the directory to make a new CA)", dir)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("egress CA in %s: %w", dir, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("egress CA in %s: %s is not a CA certificate", dir, certPath)
	}
	if time.Until(cert.NotAfter) < leafValidity {
		return nil, fmt.Errorf("egress CA in %s expires %s: delete the directory to make a new CA", dir, cert.NotAfter.Format(time.RFC3339))
	}
	ca := &CA{cert: cert, key: key, certPEM: certPEM, dir: dir, leaves: map[string]*tls.Certificate{}}
	if err := ca.writeBundle(); err != nil {
		return nil, err
	}
	return ca, nil
}

func createCA(certPath, keyPath string) ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("egress CA: generate key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"agenthost"}, CommonName: "agenthost egress CA " + host},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(caValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true, // it signs leaves only
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("egress CA: sign: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("egress CA: encode key: %w", err)
	}
	// The key first: a certificate without its key would be a CA nobody can use.
	if err := writeFileAtomic(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := writeFileAtomic(certPath, certPEM, 0o644); err != nil {
		return nil, err
	}
	return certPEM, nil
}

func randomSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("egress CA: serial: %w", err)
	}
	return n, nil
}

// writeFileAtomic writes through a temporary file and a rename, so that a crash leaves the old
// file or the new one, never half of one.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-")
	if err != nil {
		return fmt.Errorf("egress CA: write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(perm); err == nil {
		_, err = tmp.Write(data)
		if err == nil {
			err = tmp.Sync()
		}
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), path)
		}
		if err == nil {
			return nil
		}
	}
	tmp.Close()
	return fmt.Errorf("egress CA: write %s: %w", path, err)
}

// CertPEM is the CA's certificate.
func (c *CA) CertPEM() []byte { return c.certPEM }

// JailDir is the directory to bind read-only into a jail: it holds BundleName and nothing else.
func (c *CA) JailDir() string { return filepath.Join(c.dir, jailSubdir) }

// writeBundle writes the system's roots plus the CA into JailDir, readable by every user (the
// jail's user is not the host's). It is written at every start, so a system whose roots were
// updated hands its jails the new ones after a restart.
func (c *CA) writeBundle() error {
	dir := c.JailDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("egress CA: create %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("egress CA: %w", err)
	}
	var bundle []byte
	for _, p := range systemBundles {
		if b, err := os.ReadFile(p); err == nil {
			bundle = append(b, '\n')
			break
		}
	}
	bundle = append(bundle, c.certPEM...)
	return writeFileAtomic(filepath.Join(dir, BundleName), bundle, 0o644)
}

// leaf returns a certificate for host signed by the CA, minted at first use and cached until
// it nears its end.
func (c *CA) leaf(host string) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.leaves[host]; ok && time.Until(l.Leaf.NotAfter) > leafRenew {
		return l, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("egress CA: leaf key for %s: %w", host, err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(leafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, fmt.Errorf("egress CA: sign a leaf for %s: %w", host, err)
	}
	parsed, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("egress CA: leaf for %s: %w", host, err)
	}
	l := &tls.Certificate{Certificate: [][]byte{der, c.cert.Raw}, PrivateKey: key, Leaf: parsed}
	if len(c.leaves) >= maxLeaves {
		// A rule for *.example.com lets a job name any number of hosts; the cache must not
		// grow with them. Starting over costs a signature per host.
		clear(c.leaves)
	}
	c.leaves[host] = l
	return l, nil
}
