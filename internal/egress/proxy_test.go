package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"
)

// proxyFixture is a Proxy serving one policy on a Unix socket.
type proxyFixture struct {
	sock string
	dns  *fakeDNS
	logs *observer.ObservedLogs
	reg  *prometheus.Registry
}

func startProxy(t *testing.T, dns *fakeDNS, permit []string, pol Policy, tweak ...func(*Options)) *proxyFixture {
	t.Helper()
	getCA(t)
	log, logs := observed()
	f := &proxyFixture{sock: socketPath(t), dns: dns, logs: logs, reg: prometheus.NewRegistry()}
	o := Options{Log: log, Registerer: f.reg, LookupIP: dns.lookup}
	for _, p := range permit {
		o.Permit = append(o.Permit, netip.MustParsePrefix(p))
	}
	for _, fn := range tweak {
		fn(&o)
	}
	c, err := New(o).Listen(context.Background(), f.sock, -1, -1, pol)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return f
}

// client is an HTTP client that reaches everything through the proxy;
// proxyUser, if set, makes Go send Proxy-Authorization.
func (f *proxyFixture) client(proxyUser string) *http.Client {
	pu := &url.URL{Scheme: "http", Host: "proxy.invalid"}
	if proxyUser != "" {
		pu.User = url.UserPassword(proxyUser, "secret")
	}
	return &http.Client{Transport: &http.Transport{
		Proxy: http.ProxyURL(pu),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", f.sock)
		},
		TLSClientConfig:   &tls.Config{RootCAs: ca.pool},
		DisableKeepAlives: true,
	}}
}

// raw sends one request on a new connection and returns the response with
// its body read.
func (f *proxyFixture) raw(t *testing.T, req string) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("unix", f.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return roundTrip(t, c, bufio.NewReader(c), req)
}

func roundTrip(t *testing.T, c net.Conn, br *bufio.Reader, req string) (*http.Response, string) {
	t.Helper()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	method, _, _ := strings.Cut(req, " ")
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading the answer to %q: %v", req, err)
	}
	if method == http.MethodConnect && resp.StatusCode == 200 {
		return resp, "" // the tunnel follows; br holds whatever came early
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp, string(body)
}

func (f *proxyFixture) counter(t *testing.T, decision, reason string) float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "host_egress_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label(m, "decision") == decision && label(m, "reason") == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// lastDecision returns the fields of the last "egress decision" log entry.
func (f *proxyFixture) lastDecision(t *testing.T) map[string]any {
	t.Helper()
	entries := f.logs.FilterMessage("egress decision").All()
	if len(entries) == 0 {
		t.Fatal("no decision was logged")
	}
	return entries[len(entries)-1].ContextMap()
}

func helloHandler(msg string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", msg, r.URL.Path)
	})
}

// syncServer makes a direct request to s. The server counts connections in
// its accept loop, in order, so once this answer is in, every connection
// that reached s before it has been counted.
func syncServer(t *testing.T, s *testServer) {
	t.Helper()
	c := s.Client()
	resp, err := c.Get(s.URL + "/sync")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestConnectTunnelToPermittedTLSServer(t *testing.T) {
	srv := startServer(t, true, helloHandler("hello from target"))
	dns := staticDNS(map[string][]string{targetName: {"127.0.0.1"}})
	f := startProxy(t, dns, []string{"127.0.0.1/32"}, Policy{
		Allow: []string{fmt.Sprintf("%s:%d", targetName, srv.port)},
		Job:   "job-1", Function: "agent",
	})
	code, body := get(t, f.client(""), fmt.Sprintf("https://%s:%d/hello", targetName, srv.port))
	if code != 200 || body != "hello from target /hello" {
		t.Fatalf("got %d %q", code, body)
	}
	d := f.lastDecision(t)
	want := map[string]any{"job": "job-1", "function": "agent", "method": "CONNECT", "host": targetName,
		"port": srv.port, "decision": "allowed", "reason": "permitted"}
	for k, v := range want {
		if d[k] != v {
			t.Errorf("log field %s = %v (%T), want %v", k, d[k], d[k], v)
		}
	}
	if got := fmt.Sprint(d["addresses"]); got != "[127.0.0.1]" {
		t.Errorf("log field addresses = %s", got)
	}
	if n := f.counter(t, "allowed", "permitted"); n != 1 {
		t.Errorf("allowed/permitted counter = %v, want 1", n)
	}
}

// TestDNSRebinding: the name resolves to a permitted address when checked
// and to loopback on any later lookup. The proxy must dial the address it
// checked, never look the name up again, and refuse the loopback answer
// when it is the one checked.
func TestDNSRebinding(t *testing.T) {
	good, internal := listenPair(t)
	port := netip.MustParseAddrPort(good.Addr().String()).Port()
	srv := httptest.NewUnstartedServer(helloHandler("checked address"))
	srv.Listener.Close()
	srv.Listener = good
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{getCA(t).leaf}}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	dns := &fakeDNS{answer: func(_ string, n int) ([]netip.Addr, error) {
		if n == 1 {
			return []netip.Addr{netip.MustParseAddr("127.0.0.2")}, nil
		}
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}}
	// A short idle timeout only bounds how long a broken proxy, stuck on
	// the rebound address that accepts nothing, takes to fail this test.
	f := startProxy(t, dns, []string{"127.0.0.2/32"}, Policy{Allow: []string{fmt.Sprintf("%s:%d", targetName, port)}},
		func(o *Options) { o.IdleTimeout = 5 * time.Second })
	u := fmt.Sprintf("https://%s:%d/x", targetName, port)

	resp, err := f.client("").Get(u)
	if n := pendingConns(t, internal); n != 0 {
		t.Fatalf("%d connection(s) reached 127.0.0.1:%d, the rebound address", n, port)
	}
	if n := dns.count(targetName); n != 1 {
		t.Errorf("the name was looked up %d times for one connection; want 1", n)
	}
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || string(body) != "checked address /x" {
		t.Fatalf("got %d %q, %v", resp.StatusCode, body, err)
	}

	// The next lookup answers loopback: refused, and still nothing dialed.
	resp, msg := f.raw(t, fmt.Sprintf("CONNECT %s:%d HTTP/1.1\r\nHost: %[1]s:%[2]d\r\n\r\n", targetName, port))
	if resp.StatusCode != 403 {
		t.Fatalf("rebound to loopback: status %d, want 403", resp.StatusCode)
	}
	wantMsg := fmt.Sprintf("egress denied: %s resolves to 127.0.0.1, a loopback address; ask the operator to permit it", targetName)
	if strings.TrimSpace(msg) != wantMsg || !strings.Contains(resp.Status, wantMsg) {
		t.Errorf("status %q, body %q; want both to say %q", resp.Status, msg, wantMsg)
	}
	if n := pendingConns(t, internal); n != 0 {
		t.Fatalf("%d connection(s) reached the rebound address", n)
	}
}

// listenPair listens on 127.0.0.2:P and 127.0.0.1:P (the same port), the
// checked and the rebound address of TestDNSRebinding.
func listenPair(t *testing.T) (good net.Listener, internal *net.TCPListener) {
	t.Helper()
	for range 20 {
		g, err := net.Listen("tcp", "127.0.0.2:0")
		if err != nil {
			t.Skipf("cannot listen on 127.0.0.2: %v", err)
		}
		port := netip.MustParseAddrPort(g.Addr().String()).Port()
		in, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)))
		if err != nil {
			g.Close() // that port is taken on 127.0.0.1; try another
			continue
		}
		t.Cleanup(func() { in.Close() })
		return g, in
	}
	t.Fatal("no port free on both 127.0.0.1 and 127.0.0.2")
	return nil, nil
}

// pendingConns accepts, without blocking, whatever connections l's kernel
// queue holds. A connect() that succeeded has put its connection there, so
// zero means nothing connected.
func pendingConns(t *testing.T, l *net.TCPListener) int {
	t.Helper()
	rc, err := l.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	var aerr error
	err = rc.Control(func(fd uintptr) {
		for {
			nfd, _, err := unix.Accept4(int(fd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
			if err != nil {
				if !errors.Is(err, unix.EAGAIN) {
					aerr = err
				}
				return
			}
			unix.Close(nfd)
			n++
		}
	})
	if err != nil || aerr != nil {
		t.Fatal(err, aerr)
	}
	return n
}

func TestDeniedAddresses(t *testing.T) {
	dns := staticDNS(map[string][]string{
		// A permitted first address does not excuse a private second one.
		"mixed.test":  {"127.0.0.2", "10.0.0.5"},
		"ula.test":    {"fd12:3456::1"},
		"mapped.test": {"::ffff:192.168.1.1"},
		"loop.test":   {"127.0.0.1"},
		"meta.test":   {"169.254.169.254"},
		"ec2v6.test":  {"fd00:ec2::254"},
		"cgnat.test":  {"100.64.0.1"},
		"mcast.test":  {"2001:4860::1", "ff02::1"},
	})
	f := startProxy(t, dns, []string{"127.0.0.2/32"}, Policy{})
	cases := []struct {
		authority, reason, msg string
	}{
		{"mixed.test:443", "private", "egress denied: mixed.test resolves to 10.0.0.5, a private address; ask the operator to permit it"},
		{"ula.test:443", "private", "egress denied: ula.test resolves to fd12:3456::1, a private address; ask the operator to permit it"},
		{"mapped.test:443", "private", "egress denied: mapped.test resolves to ::ffff:192.168.1.1, a private address; ask the operator to permit it"},
		{"loop.test:443", "loopback", "egress denied: loop.test resolves to 127.0.0.1, a loopback address; ask the operator to permit it"},
		{"meta.test:80", "metadata", "egress denied: meta.test resolves to 169.254.169.254, a cloud metadata address; jobs may not reach it"},
		{"ec2v6.test:80", "metadata", "egress denied: ec2v6.test resolves to fd00:ec2::254, a cloud metadata address; jobs may not reach it"},
		{"cgnat.test:443", "cgnat", "egress denied: cgnat.test resolves to 100.64.0.1, a carrier-grade NAT (100.64.0.0/10) address; ask the operator to permit it"},
		{"mcast.test:443", "multicast", "egress denied: mcast.test resolves to ff02::1, a multicast address; ask the operator to permit it"},
		{"169.254.169.254:80", "metadata", "egress denied: 169.254.169.254 is a cloud metadata address; jobs may not reach it"},
		{"10.1.2.3:443", "private", "egress denied: 10.1.2.3 is a private address; ask the operator to permit it"},
		{"[::1]:443", "loopback", "egress denied: ::1 is a loopback address; ask the operator to permit it"},
		{"[::ffff:127.0.0.1]:443", "loopback", "egress denied: ::ffff:127.0.0.1 is a loopback address; ask the operator to permit it"},
		{"metadata.google.internal:80", "metadata", "egress denied: metadata.google.internal is a cloud metadata service; jobs may not reach it"},
		{"METADATA.google.internal.:80", "metadata", "egress denied: metadata.google.internal is a cloud metadata service; jobs may not reach it"},
	}
	for _, tc := range cases {
		t.Run(tc.authority, func(t *testing.T) {
			before := f.counter(t, "denied", tc.reason)
			resp, body := f.raw(t, fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %[1]s\r\n\r\n", tc.authority))
			if resp.StatusCode != 403 || strings.TrimSpace(body) != tc.msg {
				t.Fatalf("got %d %q; want 403 %q", resp.StatusCode, body, tc.msg)
			}
			if ps := resp.Header.Get("Proxy-Status"); !strings.Contains(ps, "error=destination_ip_prohibited") {
				t.Errorf("Proxy-Status = %q", ps)
			}
			if n := f.counter(t, "denied", tc.reason); n != before+1 {
				t.Errorf("denied/%s counter went from %v to %v", tc.reason, before, n)
			}
			if d := f.lastDecision(t); d["decision"] != "denied" || d["reason"] != tc.reason {
				t.Errorf("logged %v", d)
			}
		})
	}
	if n := dns.count("metadata.google.internal"); n != 0 {
		t.Errorf("metadata.google.internal was looked up %d times; it must be refused by name", n)
	}
}

func TestAllowlist(t *testing.T) {
	srv := startServer(t, true, helloHandler("allowed"))
	dns := staticDNS(map[string][]string{
		targetName:   {"127.0.0.1"},
		"a.svc.test": {"10.9.9.9"},
	})
	f := startProxy(t, dns, []string{"127.0.0.1/32"}, Policy{Allow: []string{
		fmt.Sprintf("%s:%d", strings.ToUpper(targetName), srv.port),
		"*.svc.test:8443",
	}})
	code, body := get(t, f.client(""), fmt.Sprintf("https://%s:%d/", targetName, srv.port))
	if code != 200 || body != "allowed /" {
		t.Fatalf("allowlisted target: %d %q", code, body)
	}
	cases := []struct {
		authority string
		status    int
		reason    string
		msg       string
	}{
		{"other.test:443", 403, "not_allowlisted",
			"egress denied: other.test is not in this function's allowlist (network: proxy " + targetName + ":" + strconv.Itoa(int(srv.port)) + " *.svc.test:8443); add it to the function's network: proxy line"},
		{targetName + ":443", 403, "port",
			"egress denied: port 443 of " + targetName + " is not allowed; only 80 and 443 unless the allowlist names the port (network: proxy " + targetName + ":443)"},
		// The wildcard covers names below svc.test only, and the allowlist
		// does not waive the address check.
		{"svc.test:8443", 403, "not_allowlisted", ""},
		{"a.svc.test:8443", 403, "private", "egress denied: a.svc.test resolves to 10.9.9.9, a private address; ask the operator to permit it"},
		{"b.svc.test:8443", 502, "resolve_failed", "egress: cannot resolve b.svc.test: lookup b.svc.test: no such host"},
	}
	for _, tc := range cases {
		t.Run(tc.authority, func(t *testing.T) {
			resp, body := f.raw(t, fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %[1]s\r\n\r\n", tc.authority))
			if resp.StatusCode != tc.status || tc.msg != "" && strings.TrimSpace(body) != tc.msg {
				t.Fatalf("got %d %q; want %d %q", resp.StatusCode, body, tc.status, tc.msg)
			}
			if d := f.lastDecision(t); d["reason"] != tc.reason {
				t.Errorf("reason %v, want %s", d["reason"], tc.reason)
			}
		})
	}
	for _, name := range []string{"other.test", "svc.test"} {
		if n := dns.count(name); n != 0 {
			t.Errorf("%s was looked up although the allowlist refuses it", name)
		}
	}
}

func TestDefaultPortsWithoutAllowlist(t *testing.T) {
	dns := staticDNS(map[string][]string{"public.test": {"127.0.0.3"}})
	f := startProxy(t, dns, []string{"127.0.0.3/32"}, Policy{})
	resp, body := f.raw(t, "CONNECT public.test:22 HTTP/1.1\r\nHost: public.test:22\r\n\r\n")
	if resp.StatusCode != 403 || !strings.Contains(body, "port 22 of public.test is not allowed") {
		t.Fatalf("port 22 without allowlist: %d %q", resp.StatusCode, body)
	}
	// 443 passes the policy; nothing listens there, which is a 502, not a 403.
	resp, body = f.raw(t, "CONNECT public.test:443 HTTP/1.1\r\nHost: public.test:443\r\n\r\n")
	if resp.StatusCode == 403 {
		t.Fatalf("port 443 refused: %q", body)
	}
}

func TestPlainHTTPForward(t *testing.T) {
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var hs []string
		for k := range r.Header {
			hs = append(hs, strings.ToLower(k))
		}
		slices.Sort(hs)
		fmt.Fprintf(w, "%s %s host=%s body=%s headers=%s", r.Method, r.RequestURI, r.Host, b, strings.Join(hs, ","))
	})
	srv := startServer(t, false, echo)
	dns := staticDNS(map[string][]string{"plain.test": {"127.0.0.1"}})
	f := startProxy(t, dns, []string{"127.0.0.1/32"}, Policy{Allow: []string{fmt.Sprintf("plain.test:%d", srv.port)}})
	hostport := fmt.Sprintf("plain.test:%d", srv.port)

	// Go's client sends Proxy-Authorization for a proxy URL with a user.
	resp, err := f.client("agent").Post("http://"+hostport+"/echo?q=1", "text/plain", strings.NewReader("payload"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := "POST /echo?q=1 host=" + hostport + " body=payload headers=accept-encoding,connection,content-length,content-type,user-agent"
	if resp.StatusCode != 200 || string(b) != want {
		t.Fatalf("got %d %q\nwant %q", resp.StatusCode, b, want)
	}

	// Hop-by-hop headers, named or listed in Connection, stay at the proxy
	// (the Connection header that arrives is the proxy's own "close");
	// and every request on a kept-alive connection is judged on its own.
	c, err := net.Dial("unix", f.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	r1, body := roundTrip(t, c, br, "GET http://"+hostport+"/a HTTP/1.1\r\nHost: "+hostport+
		"\r\nProxy-Authorization: Basic eDp5\r\nProxy-Connection: keep-alive\r\nConnection: X-Hop\r\nX-Hop: 1\r\nX-Keep: 2\r\n\r\n")
	if r1.StatusCode != 200 || body != "GET /a host="+hostport+" body= headers=connection,x-keep" {
		t.Fatalf("got %d %q", r1.StatusCode, body)
	}
	r2, body := roundTrip(t, c, br, "GET http://elsewhere.test/ HTTP/1.1\r\nHost: elsewhere.test\r\n\r\n")
	if r2.StatusCode != 403 || !strings.Contains(body, "elsewhere.test is not in this function's allowlist") {
		t.Fatalf("second request on the connection: %d %q", r2.StatusCode, body)
	}
	if d := f.lastDecision(t); d["method"] != "GET" || d["host"] != "elsewhere.test" || d["port"] != uint16(80) {
		t.Errorf("logged %v", d)
	}
}

func TestBadRequests(t *testing.T) {
	f := startProxy(t, staticDNS(nil), nil, Policy{})
	cases := []struct {
		req    string
		status int
		msg    string
	}{
		{"GET /relative HTTP/1.1\r\nHost: x.test\r\n\r\n", 400, "this is a proxy"},
		{"CONNECT x.test HTTP/1.1\r\nHost: x.test\r\n\r\n", 400, "CONNECT needs host:port"},
		{"CONNECT x.test:0 HTTP/1.1\r\nHost: x.test:0\r\n\r\n", 400, "port \"0\""},
		{"CONNECT x.test:70000 HTTP/1.1\r\nHost: x.test:70000\r\n\r\n", 400, "port \"70000\""},
		{"CONNECT a..b:443 HTTP/1.1\r\nHost: a..b:443\r\n\r\n", 400, "\"a..b\" is not a host name"},
		{"CONNECT -a.test:443 HTTP/1.1\r\nHost: -a.test:443\r\n\r\n", 400, "is not a host name"},
		{"CONNECT 127.1:443 HTTP/1.1\r\nHost: 127.1:443\r\n\r\n", 400, "neither an IP address nor a host name"},
		{"CONNECT 0x7f000001:443 HTTP/1.1\r\nHost: 0x7f000001:443\r\n\r\n", 400, "neither an IP address nor a host name"},
		{"CONNECT [fe80::1%25eth0]:443 HTTP/1.1\r\nHost: [fe80::1%25eth0]:443\r\n\r\n", 400, "zone"},
		{"GET https://x.test/ HTTP/1.1\r\nHost: x.test\r\n\r\n", 400, "https URLs go through CONNECT"},
		{"GET ftp://x.test/f HTTP/1.1\r\nHost: x.test\r\n\r\n", 400, "scheme \"ftp\" is not proxied"},
		{"GET http://x.test:99999/ HTTP/1.1\r\nHost: x.test:99999\r\n\r\n", 400, "port \"99999\""},
		{"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 80<<10) + "\r\n\r\n", 431, ""},
	}
	for _, tc := range cases {
		name, _, _ := strings.Cut(tc.req, "\r\n")
		if len(name) > 60 {
			name = name[:60]
		}
		t.Run(name, func(t *testing.T) {
			resp, body := f.raw(t, tc.req)
			if resp.StatusCode != tc.status || !strings.Contains(body, tc.msg) {
				t.Fatalf("got %d %q; want %d containing %q", resp.StatusCode, body, tc.status, tc.msg)
			}
		})
	}
	if n := f.counter(t, "denied", "bad_request"); n != float64(len(cases)-1) {
		t.Errorf("denied/bad_request counter = %v, want %d", n, len(cases)-1)
	}
}

// TestTunnelHalfClose: the client sends its data and shuts down its write
// side; the server answers only after that EOF. Both directions must carry
// through the tunnel, and the answer must arrive after the half-close.
func TestTunnelHalfClose(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		n, _ := io.Copy(io.Discard, c) // until the client's FIN
		fmt.Fprintf(c, "got %d bytes", n)
	}()
	port := netip.MustParseAddrPort(l.Addr().String()).Port()
	f := startProxy(t, staticDNS(nil), []string{"127.0.0.1/32"}, Policy{Allow: []string{fmt.Sprintf("127.0.0.1:%d", port)}})

	c, err := net.Dial("unix", f.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	resp, _ := roundTrip(t, c, br, fmt.Sprintf("CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%[1]d\r\n\r\n", port))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	payload := strings.Repeat("x", 100_000)
	if _, err := io.WriteString(c, payload); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.UnixConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "got 100000 bytes" {
		t.Fatalf("answer %q", got)
	}
}

// TestIdleTunnelClosed: a tunnel where nothing moves is closed by the proxy.
func TestIdleTunnelClosed(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	serverSaw := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			serverSaw <- err
			return
		}
		defer c.Close()
		_, err = c.Read(make([]byte, 1))
		serverSaw <- err
	}()
	port := netip.MustParseAddrPort(l.Addr().String()).Port()
	f := startProxy(t, staticDNS(nil), []string{"127.0.0.1/32"}, Policy{Allow: []string{fmt.Sprintf("127.0.0.1:%d", port)}},
		func(o *Options) { o.IdleTimeout = 50 * time.Millisecond })
	c, err := net.Dial("unix", f.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	resp, _ := roundTrip(t, c, br, fmt.Sprintf("CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%[1]d\r\n\r\n", port))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	if n, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("client read on an idle tunnel = %d, %v; want EOF", n, err)
	}
	if err := <-serverSaw; err != io.EOF {
		t.Fatalf("server read on an idle tunnel: %v; want EOF", err)
	}
}

func TestServeStopsOnCancel(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err == nil {
			defer c.Close()
			io.Copy(io.Discard, c)
		}
	}()
	port := netip.MustParseAddrPort(l.Addr().String()).Port()
	p := New(Options{Permit: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	ul, err := net.Listen("unix", socketPath(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- p.Serve(ctx, ul, Policy{Allow: []string{fmt.Sprintf("127.0.0.1:%d", port)}}) }()

	c, err := net.Dial("unix", ul.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	resp, _ := roundTrip(t, c, br, fmt.Sprintf("CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%[1]d\r\n\r\n", port))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("Serve after cancel: %v", err)
	}
	// Serve has returned, so the tunnel is already closed.
	if _, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("tunnel read after Serve returned: %v; want EOF", err)
	}
}

func TestServeRejectsBadPolicy(t *testing.T) {
	p := New(Options{})
	ul, err := net.Listen("unix", socketPath(t))
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	err = p.Serve(context.Background(), ul, Policy{Allow: []string{"bad host"}})
	if err == nil || !strings.Contains(err.Error(), `allowlist entry "bad host"`) {
		t.Fatalf("Serve with a bad allowlist: %v", err)
	}
	if _, err := p.Listen(context.Background(), socketPath(t), -1, -1, Policy{Allow: []string{"x.test:0"}}); err == nil {
		t.Fatal("Listen with a bad allowlist succeeded")
	}
}

func TestListenSocket(t *testing.T) {
	p := New(Options{})
	dir := shortTempDir(t)
	path := dir + "/egress.sock"

	// A stale socket from a crashed host is replaced.
	stale, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()

	c, err := p.Listen(context.Background(), path, -1, -1, Policy{})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o666 {
		t.Errorf("socket mode %v, want a socket with 0666", fi.Mode())
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left after Close: %v", err)
	}

	if os.Geteuid() == 0 {
		c, err := p.Listen(context.Background(), path, 65534, 65534, Policy{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != 65534 || st.Gid != 65534 || fi.Mode().Perm() != 0o600 {
			t.Errorf("socket %d:%d %v, want 65534:65534 0600", st.Uid, st.Gid, fi.Mode().Perm())
		}
	}

	file := dir + "/not-a-socket"
	writeFile(t, file, []byte("x"), 0o644)
	if _, err := p.Listen(context.Background(), file, -1, -1, Policy{}); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("Listen over a regular file: %v", err)
	}
	if _, err := p.Listen(context.Background(), "/tmp/"+strings.Repeat("s", 120), -1, -1, Policy{}); err == nil {
		t.Fatal("Listen with an over-long path succeeded")
	}
}

// TestHostOwnAddressDenied: a public address of the proxy's own machine is
// refused, since the host's services may listen there.
func TestHostOwnAddressDenied(t *testing.T) {
	var self netip.Addr
	for a := range ownAddrs() {
		if _, refused := classify(a); !refused {
			self = a
			break
		}
	}
	if !self.IsValid() {
		t.Skip("this machine has no address outside the refused ranges")
	}
	f := startProxy(t, staticDNS(map[string][]string{"self.test": {self.String()}}), nil, Policy{})
	resp, body := f.raw(t, "CONNECT self.test:443 HTTP/1.1\r\nHost: self.test:443\r\n\r\n")
	want := "egress denied: self.test resolves to " + self.String() + ", an address of the host itself; ask the operator to permit it"
	if resp.StatusCode != 403 || strings.TrimSpace(body) != want {
		t.Fatalf("got %d %q; want 403 %q", resp.StatusCode, body, want)
	}
	if n := f.counter(t, "denied", "host_address"); n != 1 {
		t.Errorf("denied/host_address counter = %v", n)
	}
}

// TestDeniedTellsThePolicy: every refused request reaches Policy.Denied with its host, port
// and the proxy's reason (the host writes it into the job's own log); an allowed one does not.
func TestDeniedTellsThePolicy(t *testing.T) {
	srv := startServer(t, true, helloHandler("allowed"))
	dns := staticDNS(map[string][]string{targetName: {"127.0.0.1"}, "private.test": {"10.1.2.3"}})
	denials := make(chan string, 16)
	f := startProxy(t, dns, []string{"127.0.0.1/32"}, Policy{
		Allow: []string{fmt.Sprintf("%s:%d", targetName, srv.port), "private.test"},
		Denied: func(host string, port uint16, reason string) {
			denials <- fmt.Sprintf("%s:%d: %s", host, port, reason)
		},
	})
	cases := []struct {
		name    string
		request string
		want    string // "" for an allowed request
	}{
		{"tunnel outside the allowlist", "CONNECT other.test:443 HTTP/1.1\r\nHost: other.test:443\r\n\r\n",
			"other.test:443: other.test is not in this function's allowlist"},
		{"plain request outside the allowlist", "GET http://other.test/x HTTP/1.1\r\nHost: other.test\r\n\r\n",
			"other.test:80: other.test is not in this function's allowlist"},
		{"a private address", "CONNECT private.test:443 HTTP/1.1\r\nHost: private.test:443\r\n\r\n",
			"private.test:443: private.test resolves to 10.1.2.3, a private address"},
		{"allowed", fmt.Sprintf("CONNECT %s:%d HTTP/1.1\r\nHost: %[1]s:%[2]d\r\n\r\n", targetName, srv.port), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, _ := f.raw(t, c.request)
			if c.want == "" {
				if resp.StatusCode != 200 {
					t.Fatalf("allowed request answered %d", resp.StatusCode)
				}
				select {
				case d := <-denials:
					t.Fatalf("an allowed request was reported denied: %q", d)
				default:
				}
				return
			}
			// Denied runs before the answer is written, so it has been called by now.
			select {
			case d := <-denials:
				if !strings.HasPrefix(d, c.want) {
					t.Fatalf("denial %q, want it to start %q", d, c.want)
				}
			default:
				t.Fatalf("refused with %d but Denied was not called", resp.StatusCode)
			}
		})
	}
}
