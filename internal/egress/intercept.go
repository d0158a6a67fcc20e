package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// TLS termination. For the hosts a job has a sealed secret or a request rule for (and only
// those: every other CONNECT stays a tunnel whose bytes the proxy never reads), the proxy
// answers the CONNECT, then speaks TLS to the job's client itself with a leaf its CA (CA)
// minted for the host, reads each request, checks it against the rules, puts the sealed
// values in its headers and sends it on over a TLS connection of its own to the address it
// checked for the CONNECT, verifying the upstream against the system's roots (or
// Options.RootCAs).
//
// It is built on the standard library rather than an interception library such as
// elazarl/goproxy: net/http already serves HTTP/1.1 and HTTP/2 on a TLS connection it is
// handed, httputil.ReverseProxy streams responses (FlushInterval -1) and drops hop-by-hop
// headers, and the proxy's own decisions (address checks, pinned names, one checked address
// per tunnel) are what a library would have to be bent around.

// tunnel is one terminated CONNECT: where it goes, and the upstream transport that only
// dials the addresses checked for it (shared with the session's other tunnels to them).
type tunnel struct {
	t         target
	transport *http.Transport
	ctx       context.Context // the CONNECT's: its requests' spans go under its span
}

type tunnelKey struct{}

// terminator serves the terminated tunnels of one session: one http.Server fed the
// TLS connections, which it handshakes and serves as HTTP/1.1 or HTTP/2 (ALPN).
type terminator struct {
	srv     *http.Server
	conns   chan net.Conn
	closed  chan struct{}
	once    sync.Once
	tunnels sync.Map // *tls.Conn -> *tunnel, until the server takes it

	mu         sync.Mutex
	transports map[string]*http.Transport // by host and checked addresses
}

func (s *session) startTerminator() *terminator {
	tm := &terminator{conns: make(chan net.Conn), closed: make(chan struct{}), transports: map[string]*http.Transport{}}
	tm.srv = &http.Server{
		Handler:           http.HandlerFunc(s.serveTerminated),
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       s.p.idle,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          warnLog(s.log),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if tun, ok := tm.tunnels.LoadAndDelete(c); ok {
				return context.WithValue(ctx, tunnelKey{}, tun)
			}
			return ctx
		},
	}
	// TLSConfig is nil and the connections are *tls.Conn, so net/http configures HTTP/2 and
	// serves a connection that negotiated "h2" with it.
	go func() { _ = tm.srv.Serve(tm) }()
	return tm
}

// Accept, Close and Addr make the terminator the server's listener.
func (tm *terminator) Accept() (net.Conn, error) {
	select {
	case c := <-tm.conns:
		return c, nil
	case <-tm.closed:
		return nil, net.ErrClosed
	}
}

func (tm *terminator) Close() error {
	tm.once.Do(func() { close(tm.closed) })
	return nil
}

func (tm *terminator) Addr() net.Addr { return &net.UnixAddr{Name: "terminator", Net: "unix"} }

func (tm *terminator) shutdown() {
	tm.Close()
	tm.srv.Close()
	tm.mu.Lock()
	defer tm.mu.Unlock()
	for _, tr := range tm.transports {
		tr.CloseIdleConnections()
	}
}

// transport returns the upstream transport for v's host and checked addresses, shared by the
// session's tunnels to them: a client that opens a connection per request (curl in a loop)
// then pays for one handshake, its own, not two.
func (tm *terminator) transport(s *session, v *verdict) *http.Transport {
	key := v.t.String() + "|" + fmt.Sprint(v.addrs, v.dialPort())
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if tr, ok := tm.transports[key]; ok {
		return tr
	}
	tr := s.upstream(v)
	tm.transports[key] = tr
	return tr
}

// offer hands c to the server; false once it is shutting down.
func (tm *terminator) offer(c *tls.Conn, tun *tunnel) bool {
	tm.tunnels.Store(c, tun)
	select {
	case tm.conns <- c:
		return true
	case <-tm.closed:
		tm.tunnels.Delete(c)
		return false
	}
}

// terminates reports whether the proxy speaks TLS itself to the job's client for host.
func (s *session) terminates(host string) bool {
	return s.sealed.covers(host) || s.rules.covers(host)
}

// terminate serves an allowed CONNECT to a host the proxy terminates TLS for, on c, the
// client's connection after the 200, with the bytes the client sent early. It returns when
// the client's connection has closed.
func (s *session) terminate(ctx context.Context, c net.Conn, early []byte, t target, v *verdict) {
	leaf, err := s.p.ca.leaf(t.host)
	if err != nil {
		s.log.Error("egress: cannot mint a certificate; the tunnel is closed", zap.String("host", t.host), zap.Error(err))
		return
	}
	term := s.terminator()
	if term == nil {
		return
	}
	raw := &heldConn{Conn: c, early: early, done: make(chan struct{})}
	tc := tls.Server(raw, &tls.Config{
		Certificates: []tls.Certificate{*leaf},
		NextProtos:   []string{"h2", "http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	tun := &tunnel{t: t, transport: term.transport(s, v), ctx: ctx}
	if !term.offer(tc, tun) {
		return
	}
	<-raw.done
}

// upstream is the transport of one terminated tunnel: it dials only the addresses checked for
// the CONNECT, speaks TLS verified against the proxy's roots for the tunnel's host, and keeps
// its connections for the tunnel's next requests.
func (s *session) upstream(v *verdict) *http.Transport {
	return &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := s.p.dial(ctx, v.addrs, v.dialPort())
			if err != nil {
				return nil, err
			}
			return &idleConn{Conn: c, idle: s.p.idle}, nil
		},
		TLSClientConfig:        &tls.Config{RootCAs: s.p.roots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    s.p.dialer.Timeout,
		ForceAttemptHTTP2:      true,
		DisableCompression:     true,
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
		ExpectContinueTimeout:  time.Second,
		IdleConnTimeout:        s.p.idle,
	}
}

// serveTerminated checks and forwards one request read from a terminated tunnel.
func (s *session) serveTerminated(w http.ResponseWriter, r *http.Request) {
	tun, ok := r.Context().Value(tunnelKey{}).(*tunnel)
	if !ok { // only connections from terminate reach this server
		http.Error(w, "egress: no tunnel for this connection", http.StatusInternalServerError)
		return
	}
	t := tun.t
	w, r, ended := traced(tun.ctx, w, r, t.host)
	defer ended()
	host := strings.ToLower(strings.TrimSuffix(hostOnly(r.Host), "."))
	if host != t.host {
		// The upstream connection goes where the CONNECT was checked for; a request naming
		// another host on it would reach that host's virtual server unchecked.
		s.refuse(w, r, t.host, r.URL.Path, http.StatusMisdirectedRequest, "host_mismatch",
			fmt.Sprintf("this connection is to %s; a request for %s must open its own", t.host, r.Host))
		return
	}
	path, err := requestPath(r)
	if err != nil {
		s.refuse(w, r, t.host, r.URL.EscapedPath(), http.StatusBadRequest, "bad_path", err.Error())
		return
	}
	if s.rules.covers(t.host) {
		if reason := s.rules.allows(r.Method, t.host, path); reason != "" {
			s.refuse(w, r, t.host, path, http.StatusForbidden, "rule", reason)
			return
		}
	}
	used, creds, err := s.sealed.substitute(r.Header, t.host)
	if err != nil {
		s.refuse(w, r, t.host, path, http.StatusForbidden, "foreign_placeholder", err.Error())
		return
	}
	// Every response of a host a secret is sealed for is scrubbed, whether or not this request
	// carried a placeholder (scrub.go says why and how).
	sealedHost := s.sealed.covers(t.host)
	noteSealed(r.Context(), len(used) > 0)
	noteDecision(r.Context(), t.host, false, "terminated")
	if sealedHost {
		s.sealed.scrub.record(creds)
	}
	s.p.metrics.decision(true, "terminated")
	s.log.Debug("egress request", zap.String("method", r.Method), zap.String("host", t.host), zap.String("path", path),
		zap.Strings("sealed", used))
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "https"
			pr.Out.URL.Host = t.String()
			pr.Out.Host = r.Host
			if sealedHost {
				// Explicitly: no Accept-Encoding at all would allow any coding (RFC 9110).
				pr.Out.Header.Set("Accept-Encoding", "identity")
			}
		},
		Transport:     tun.transport,
		FlushInterval: -1,
		ErrorLog:      warnLog(s.log),
		ModifyResponse: func(resp *http.Response) error {
			if !sealedHost {
				return nil
			}
			return s.sealed.scrub.scrubResponse(resp)
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client went away
			}
			v := &verdict{t: t}
			if ue := (*errUnscrubbable)(nil); errors.As(err, &ue) {
				s.p.metrics.decision(false, "unscrubbable")
				s.log.Warn("egress response refused", zap.String("host", t.host), zap.String("path", path),
					zap.String("content_encoding", ue.coding), zap.Error(err))
				v.deny(http.StatusBadGateway, "", ue.proxyError, "egress: https://%s%s: %v", t.host, path, err)
			} else {
				s.upstreamFailed(v, err)
				v.deny(http.StatusBadGateway, "", "destination_unavailable", "egress: https://%s%s failed: %v", t.host, path, err)
			}
			s.tellRefused(r.Method, t.host, path, strings.TrimPrefix(v.msg, "egress: "))
			w.Header().Set("Proxy-Status", proxyStatus(v))
			http.Error(w, v.msg, v.status)
		},
	}
	rp.ServeHTTP(w, r)
}

// refuse answers a terminated request with an error, logs and counts it, and tells the policy.
func (s *session) refuse(w http.ResponseWriter, r *http.Request, host, path string, status int, reason, msg string) {
	s.p.metrics.decision(false, reason)
	noteDecision(r.Context(), host, true, reason)
	s.log.Info("egress decision", zap.String("method", r.Method), zap.String("host", host), zap.String("path", path),
		zap.String("decision", "denied"), zap.String("reason", reason), zap.String("message", msg))
	s.tellRefused(r.Method, host, path, msg)
	v := &verdict{status: status, proxyError: "http_request_denied", msg: "egress denied: " + msg}
	w.Header().Set("Proxy-Status", proxyStatus(v))
	http.Error(w, v.msg, status)
}

func (s *session) tellRefused(method, host, path, reason string) {
	if s.refused != nil {
		s.refused(method, host, path, reason)
	}
}

func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.Trim(hostport, "[]")
}

// heldConn is a client connection handed to TLS: it first yields the bytes the proxy read
// ahead, and closes done when closed, which is how terminate knows the tunnel ended.
type heldConn struct {
	net.Conn
	early []byte
	once  sync.Once
	done  chan struct{}
}

func (c *heldConn) Read(b []byte) (int, error) {
	if len(c.early) > 0 {
		n := copy(b, c.early)
		c.early = c.early[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

func (c *heldConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { close(c.done) })
	return err
}
