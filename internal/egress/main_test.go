package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agenthost/host/internal/testkit/llmtest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" { // the jail tests' jail init
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// targetName is the name tests give their local TLS server. It must not be
// in NO_PROXY (clients would then connect directly), and .test never
// resolves in real DNS.
const targetName = "target.egress.test"

// testCA is a CA and a leaf certificate for targetName and 127.0.0.1.
type testCA struct {
	pool *x509.CertPool
	pem  []byte // the CA certificate, for curl, Python and Bun
	leaf tls.Certificate
}

var (
	caOnce sync.Once
	ca     *testCA
	caErr  error
)

func getCA(t testing.TB) *testCA {
	t.Helper()
	caOnce.Do(func() { ca, caErr = newTestCA() })
	if caErr != nil {
		t.Fatal(caErr)
	}
	return ca
}

func newTestCA() (*testCA, error) {
	dir, err := os.MkdirTemp("", "egress-ca-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	id, err := llmtest.NewTLSIdentity(dir, targetName, otherName, "127.0.0.1")
	if err != nil {
		return nil, err
	}
	c := &testCA{pool: x509.NewCertPool(), pem: id.CAPEM, leaf: id.Cert}
	c.pool.AppendCertsFromPEM(id.CAPEM)
	return c, nil
}

// target is a local HTTPS (or HTTP) server that counts the connections it
// accepts, so a test can show that nothing reached it.
type testServer struct {
	*httptest.Server
	conns atomic.Int64
	port  uint16
}

func startServer(t testing.TB, tlsOn bool, h http.Handler) *testServer {
	t.Helper()
	s := &testServer{Server: httptest.NewUnstartedServer(h)}
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	if tlsOn {
		s.TLS = &tls.Config{Certificates: []tls.Certificate{getCA(t).leaf}}
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	s.port = netip.MustParseAddrPort(s.Listener.Addr().String()).Port()
	return s
}

// fakeDNS is a scripted LookupIP that counts its calls.
type fakeDNS struct {
	mu    sync.Mutex
	calls map[string]int
	// answer returns the addresses for host on its n-th lookup (from 1).
	answer func(host string, n int) ([]netip.Addr, error)
}

func (d *fakeDNS) lookup(_ context.Context, host string) ([]netip.Addr, error) {
	d.mu.Lock()
	if d.calls == nil {
		d.calls = map[string]int{}
	}
	d.calls[host]++
	n := d.calls[host]
	d.mu.Unlock()
	return d.answer(host, n)
}

func (d *fakeDNS) count(host string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[host]
}

// staticDNS answers every lookup from a fixed table.
func staticDNS(table map[string][]string) *fakeDNS {
	return &fakeDNS{answer: func(host string, _ int) ([]netip.Addr, error) {
		as, ok := table[host]
		if !ok {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		out := make([]netip.Addr, len(as))
		for i, a := range as {
			out[i] = netip.MustParseAddr(a)
		}
		return out, nil
	}}
}

// observed returns a logger whose entries the test can read.
func observed() (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zap.DebugLevel)
	return zap.New(core), logs
}

// shortTempDir is a 0755 directory with a short path (Unix socket paths are
// limited to 107 bytes; t.TempDir's can be longer) that the jail user can
// traverse.
func shortTempDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "egr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

func writeFile(t testing.TB, path string, data []byte, perm os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil {
		t.Fatal(err)
	}
}

// socketPath is a fresh socket path in a short directory.
func socketPath(t testing.TB) string {
	return filepath.Join(shortTempDir(t), "egress.sock")
}
