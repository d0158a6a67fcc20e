package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

const otherName = "other.egress.test"

// seen is what an upstream received, for the tests to inspect.
type seen struct {
	mu   sync.Mutex
	reqs []seenReq
}

type seenReq struct {
	method, path, query, body, proto string
	header                           http.Header
}

func (s *seen) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.reqs = append(s.reqs, seenReq{r.Method, r.URL.Path, r.URL.RawQuery, string(b), r.Proto, r.Header.Clone()})
		s.mu.Unlock()
		// An upstream that echoes what it was sent, as a careless error page would.
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		fmt.Fprintf(w, "auth=%s key=%s", r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"))
	})
}

func (s *seen) all() []seenReq {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seenReq(nil), s.reqs...)
}

// sealedFixture is a proxy with a CA, its roots the test CA, target.egress.test and
// other.egress.test pinned to two local TLS servers.
type sealedFixture struct {
	*proxyFixture
	ca             *CA
	target, other  *testServer
	tseen, oseen   *seen
	refusedMu      sync.Mutex
	refused        []string
	placeholder    string
	clientRoots    *x509.CertPool
	targetURL, oth string
}

const realKey = "sk-real-0123456789abcdef"

func startSealed(t *testing.T, pol Policy) *sealedFixture {
	t.Helper()
	f := &sealedFixture{tseen: &seen{}, oseen: &seen{}}
	f.target = startServer(t, true, f.tseen.handler())
	f.other = startServer(t, true, f.oseen.handler())
	var err error
	if f.ca, err = LoadCA(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if f.placeholder, err = NewPlaceholder(); err != nil {
		t.Fatal(err)
	}
	for i := range pol.Sealed {
		if pol.Sealed[i].Placeholder == "" {
			pol.Sealed[i].Placeholder = f.placeholder
		}
	}
	pol.Refused = func(method, host, path, reason string) {
		f.refusedMu.Lock()
		defer f.refusedMu.Unlock()
		f.refused = append(f.refused, fmt.Sprintf("%s %s%s: %s", method, host, path, reason))
	}
	f.proxyFixture = startProxy(t, staticDNS(nil), nil, pol, func(o *Options) {
		o.CA = f.ca
		o.RootCAs = getCA(t).pool
		o.Resolve = map[string]netip.AddrPort{
			targetName: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), f.target.port),
			otherName:  netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), f.other.port),
		}
	})
	f.clientRoots = x509.NewCertPool()
	f.clientRoots.AppendCertsFromPEM(f.ca.CertPEM())
	f.clientRoots.AppendCertsFromPEM(getCA(t).pem)
	return f
}

// client reaches everything through the proxy and trusts the host's CA and the test CA, as
// a jail's clients do with the bundle.
func (f *sealedFixture) client(h2 bool) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "proxy.invalid"}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", f.sock)
		},
		TLSClientConfig:   &tls.Config{RootCAs: f.clientRoots},
		ForceAttemptHTTP2: h2,
	}}
}

func (f *sealedFixture) do(t *testing.T, c *http.Client, method, u string, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func issuer(resp *http.Response) string {
	if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
		return "(no TLS)"
	}
	return resp.TLS.PeerCertificates[0].Issuer.CommonName
}

// TestSealedSecretSubstitutedOnlyInItsHostsHeaders is the heart of sealing: the real value
// goes to the named host in every header form, and nowhere else in any form.
func TestSealedSecretSubstitutedOnlyInItsHostsHeaders(t *testing.T) {
	f := startSealed(t, Policy{
		Allow:  []string{targetName, otherName},
		Sealed: []Sealed{{Name: "API_KEY", Value: realKey, Hosts: []string{targetName}}},
	})
	ph := f.placeholder
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			c := f.client(h2)
			before := len(f.tseen.all())
			resp, body := f.do(t, c, "POST", "https://"+targetName+"/v1/messages?key="+ph, `{"key":"`+ph+`"}`, map[string]string{
				"Authorization": "Bearer " + ph,
				"X-Api-Key":     ph,
				"X-Other":       "prefix-" + ph + "-suffix",
			})
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if !strings.HasPrefix(issuer(resp), "agenthost egress CA") {
				t.Errorf("the client saw a certificate issued by %q; want the host's CA (TLS terminated)", issuer(resp))
			}
			if h2 && resp.Proto != "HTTP/2.0" {
				t.Errorf("client spoke %s to the proxy; want HTTP/2.0", resp.Proto)
			}
			got := f.tseen.all()[before]
			if got.header.Get("Authorization") != "Bearer "+realKey || got.header.Get("X-Api-Key") != realKey ||
				got.header.Get("X-Other") != "prefix-"+realKey+"-suffix" {
				t.Errorf("upstream headers: %v; want the real key in each", got.header)
			}
			if !strings.Contains(got.body, ph) || strings.Contains(got.body, realKey) {
				t.Errorf("upstream body %q: want the placeholder untouched", got.body)
			}
			if !strings.Contains(got.query, ph) || strings.Contains(got.query, realKey) {
				t.Errorf("upstream query %q: want the placeholder untouched", got.query)
			}
			// The upstream echoed the key; the job must see only its placeholder.
			if strings.Contains(body, realKey) || strings.Contains(resp.Header.Get("X-Echo"), realKey) {
				t.Errorf("the echoed key reached the client: body %q, X-Echo %q", body, resp.Header.Get("X-Echo"))
			}
			if !strings.Contains(body, ph) {
				t.Errorf("body %q: want the placeholder in place of the echoed key", body)
			}
		})
	}

	t.Run("basic auth", func(t *testing.T) {
		resp, body := f.do(t, f.client(false), "GET", "https://x-access-token:"+ph+"@"+targetName+"/repo.git", "", nil)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		got := f.tseen.all()
		auth := got[len(got)-1].header.Get("Authorization")
		raw, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(auth, "Basic "))
		if string(raw) != "x-access-token:"+realKey {
			t.Errorf("upstream basic credential %q; want the real key inside", raw)
		}
	})

	t.Run("another allowed host gets the placeholder through a tunnel", func(t *testing.T) {
		resp, body := f.do(t, f.client(false), "GET", "https://"+otherName+"/gist", "", map[string]string{"Authorization": "Bearer " + ph})
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		if issuer(resp) != "llmtest CA" {
			t.Errorf("the client saw a certificate issued by %q; want the upstream's own (a plain tunnel)", issuer(resp))
		}
		got := f.oseen.all()
		if len(got) != 1 || got[0].header.Get("Authorization") != "Bearer "+ph {
			t.Fatalf("other host got %+v; want only the placeholder", got)
		}
	})

	t.Run("a placeholder that is not this job's is refused", func(t *testing.T) {
		stale, _ := NewPlaceholder()
		before := len(f.tseen.all())
		resp, body := f.do(t, f.client(false), "GET", "https://"+targetName+"/v1/models", "", map[string]string{"X-Api-Key": stale})
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "not this job's") {
			t.Fatalf("status %d %q; want 403 naming the foreign placeholder", resp.StatusCode, body)
		}
		if n := len(f.tseen.all()); n != before {
			t.Errorf("the upstream got the refused request")
		}
	})
}

// TestEgressRules: a rule's host is reached only by the requests its rules allow, each
// refusal a 403 with one line and a report to the policy, and other hosts only if listed.
func TestEgressRules(t *testing.T) {
	f := startSealed(t, Policy{Rules: []Rule{
		{Method: "GET", Host: targetName, Path: "/repos/acme/**"},
		{Method: "POST", Host: targetName, Path: "/v1/messages"},
	}})
	c := f.client(false)
	cases := []struct {
		method, path string
		status       int
		reason       string
	}{
		{"GET", "/repos/acme", 200, ""},
		{"GET", "/repos/acme/widget/issues", 200, ""},
		{"POST", "/v1/messages", 200, ""},
		{"POST", "/repos/acme/widget", 403, "no egress: rule allows it"},
		{"GET", "/repos/other/x", 403, "no egress: rule allows it"},
		{"GET", "/v1/messages", 403, "no egress: rule allows it"},
		{"GET", "/repos/acme/%2e%2e/other", 400, ". or .. segment"},
		{"GET", "/repos/acme/a%2Fb", 400, "escaped /"},
	}
	for _, tc := range cases {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			before := len(f.tseen.all())
			req, _ := http.NewRequest(tc.method, "https://"+targetName+"/", nil)
			req.URL.Opaque = "//" + targetName + tc.path // sent as written, escapes included
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status || !strings.Contains(string(b), tc.reason) {
				t.Fatalf("status %d %q; want %d %q", resp.StatusCode, b, tc.status, tc.reason)
			}
			reached := len(f.tseen.all()) > before
			if reached != (tc.status == 200) {
				t.Errorf("upstream reached = %v", reached)
			}
		})
	}
	f.refusedMu.Lock()
	refused := strings.Join(f.refused, "\n")
	f.refusedMu.Unlock()
	if !strings.Contains(refused, "POST "+targetName+"/repos/acme/widget: no egress: rule allows it") {
		t.Errorf("the policy heard:\n%s\nwant the refused POST with its method, host and path", refused)
	}

	// With rules and no allowlist, a host no rule names is not reachable at all.
	resp, _ := f.raw(t, "CONNECT "+otherName+":443 HTTP/1.1\r\nHost: "+otherName+":443\r\n\r\n")
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(resp.Status, "egress: rules") {
		t.Errorf("CONNECT to a host no rule names: %s; want 403 naming the rules", resp.Status)
	}
	// A rule's host over plain HTTP through a tunnel to port 80 would skip the rules.
	resp, _ = f.raw(t, "CONNECT "+targetName+":80 HTTP/1.1\r\nHost: "+targetName+":80\r\n\r\n")
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("CONNECT to port 80 of a rule's host: %s; want 403", resp.Status)
	}
}

// TestTerminatedRequestForAnotherHost: a request on a terminated connection must name the
// host its CONNECT was checked for.
func TestTerminatedRequestForAnotherHost(t *testing.T) {
	f := startSealed(t, Policy{Allow: []string{targetName}, Sealed: []Sealed{{Name: "K", Value: realKey, Hosts: []string{targetName}}}})
	conn, err := net.Dial("unix", f.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	if resp, _ := roundTrip(t, conn, br, "CONNECT "+targetName+":443 HTTP/1.1\r\nHost: "+targetName+"\r\n\r\n"); resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	tc := tls.Client(&readerConn{Conn: conn, r: br}, &tls.Config{ServerName: targetName, RootCAs: f.clientRoots})
	resp, body := roundTrip(t, tc, bufio.NewReader(tc), "GET / HTTP/1.1\r\nHost: "+otherName+"\r\nX-Api-Key: "+f.placeholder+"\r\n\r\n")
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("got %d %q; want 421", resp.StatusCode, body)
	}
	if len(f.tseen.all())+len(f.oseen.all()) != 0 {
		t.Error("an upstream got the misdirected request")
	}
}

type readerConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *readerConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// TestTerminatedUpstreamWithBadCertificate: an upstream whose certificate the proxy cannot
// verify gets nothing, and the job's request fails with the reason.
func TestTerminatedUpstreamWithBadCertificate(t *testing.T) {
	var got int
	bad := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { got++ }))
	defer bad.Close()
	port := netip.MustParseAddrPort(bad.Listener.Addr().String()).Port()
	ca, err := LoadCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ph, _ := NewPlaceholder()
	f := startProxy(t, staticDNS(nil), nil, Policy{Sealed: []Sealed{{Name: "K", Placeholder: ph, Value: realKey, Hosts: []string{targetName}}}},
		func(o *Options) {
			o.CA = ca
			o.RootCAs = getCA(t).pool // not the httptest server's
			o.Resolve = map[string]netip.AddrPort{targetName: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)}
		})
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	c := &http.Client{Transport: &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "proxy.invalid"}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", f.sock)
		},
		TLSClientConfig: &tls.Config{RootCAs: roots},
	}}
	req, _ := http.NewRequest("GET", "https://"+targetName+"/", nil)
	req.Header.Set("X-Api-Key", ph)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), "certificate") {
		t.Fatalf("got %d %q; want 502 naming the certificate", resp.StatusCode, b)
	}
	if got != 0 {
		t.Errorf("the upstream with the bad certificate got %d requests", got)
	}
}

// TestTerminatedResponsesStream: a server-sent event reaches the client before the server
// sends the next one, so nothing buffers a streamed answer.
func TestTerminatedResponsesStream(t *testing.T) {
	next := make(chan struct{})
	srv := startServer(t, true, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: event %d\n\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-next: // the client read this event: only then the next one
			case <-r.Context().Done():
				return
			}
		}
	}))
	f := startSealed(t, Policy{Sealed: []Sealed{{Name: "K", Value: realKey, Hosts: []string{targetName}}}})
	f.proxyFixture = startProxy(t, staticDNS(nil), nil, Policy{Sealed: []Sealed{{Name: "K", Placeholder: f.placeholder, Value: realKey, Hosts: []string{targetName}}}},
		func(o *Options) {
			o.CA, o.RootCAs = f.ca, getCA(t).pool
			o.Resolve = map[string]netip.AddrPort{targetName: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), srv.port)}
		})
	for _, h2 := range []bool{false, true} {
		req, _ := http.NewRequest("GET", "https://"+targetName+"/stream", nil)
		req.Header.Set("X-Api-Key", f.placeholder)
		resp, err := f.client(h2).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		for i := range 3 {
			line, err := br.ReadString('\n')
			if err != nil || line != fmt.Sprintf("data: event %d\n", i) {
				t.Fatalf("h2=%v: event %d: %q, %v", h2, i, line, err)
			}
			br.ReadString('\n')
			next <- struct{}{}
		}
		resp.Body.Close()
	}
}

func TestPolicyWithSealingNeedsACA(t *testing.T) {
	ph, _ := NewPlaceholder()
	p := New(Options{})
	cases := map[string]Policy{
		"sealed without CA": {Sealed: []Sealed{{Name: "K", Placeholder: ph, Value: "v", Hosts: []string{"api.example.com"}}}},
		"rule without CA":   {Rules: []Rule{{Method: "GET", Host: "api.example.com"}}},
	}
	for name, pol := range cases {
		if _, err := p.Listen(context.Background(), socketPath(t), -1, -1, pol); err == nil || !strings.Contains(err.Error(), "no CA") {
			t.Errorf("%s: err = %v; want the missing CA named", name, err)
		}
	}
	ca, err := LoadCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p = New(Options{CA: ca})
	bad := map[string]Policy{
		"bad placeholder": {Sealed: []Sealed{{Name: "K", Placeholder: "sk-123", Value: "v", Hosts: []string{"a.example.com"}}}},
		"no host":         {Sealed: []Sealed{{Name: "K", Placeholder: ph, Value: "v"}}},
		"value with CRLF": {Sealed: []Sealed{{Name: "K", Placeholder: ph, Value: "v\r\nX: y", Hosts: []string{"a.example.com"}}}},
		"rule method":     {Rules: []Rule{{Method: "get", Host: "a.example.com"}}},
		"rule port":       {Rules: []Rule{{Method: "GET", Host: "a.example.com:8443"}}},
		"rule path":       {Rules: []Rule{{Method: "GET", Host: "a.example.com", Path: "repos"}}},
	}
	for name, pol := range bad {
		if _, err := p.Listen(context.Background(), socketPath(t), -1, -1, pol); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestLoadCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "egress-ca")
	a, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if string(a.CertPEM()) != string(b.CertPEM()) {
		t.Error("a second start made a new CA; want the one in the data dir")
	}
	fi, err := os.Stat(filepath.Join(dir, caKeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	entries, err := os.ReadDir(a.JailDir())
	if err != nil || len(entries) != 1 || entries[0].Name() != BundleName {
		t.Fatalf("jail dir holds %v (%v); want only %s", entries, err, BundleName)
	}
	bundle, err := os.ReadFile(filepath.Join(a.JailDir(), BundleName))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(bundle), string(a.CertPEM())) || strings.Contains(string(bundle), "PRIVATE KEY") {
		t.Error("the bundle must end with the CA's certificate and hold no key")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		t.Error("the bundle does not parse")
	}
	if n := strings.Count(string(bundle), "BEGIN CERTIFICATE"); n < 2 {
		t.Errorf("the bundle holds %d certificates; want the system's roots as well", n)
	}
	// A leaf verifies against the CA for its host.
	l, err := a.leaf("api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(a.CertPEM())
	if _, err := l.Leaf.Verify(x509.VerifyOptions{DNSName: "api.example.com", Roots: roots}); err != nil {
		t.Errorf("leaf: %v", err)
	}
	if l2, _ := a.leaf("api.example.com"); l2 != l {
		t.Error("the leaf was minted again; want it cached")
	}
	os.WriteFile(filepath.Join(dir, caKeyFile), []byte("garbage"), 0o600)
	if _, err := LoadCA(dir); err == nil || !strings.Contains(err.Error(), "delete") {
		t.Errorf("a broken key: %v; want an error that says what to do", err)
	}
}
