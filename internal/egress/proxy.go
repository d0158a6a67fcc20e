package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// session serves one job's listener.
type session struct {
	p      *Proxy
	allow  allowlist
	rules  ruleSet
	sealed sealedSet
	log    *zap.Logger // with the job and function
	// denied and refused are Policy.Denied and Policy.Refused.
	denied  func(host string, port uint16, reason string)
	refused func(method, host, path, reason string)
	local   map[string]http.Handler // Policy.Local

	mu     sync.Mutex
	closed bool
	tracks map[net.Conn]struct{} // hijacked client connections
	term   *terminator           // serves terminated tunnels; started by the first
	wg     sync.WaitGroup        // running handlers
}

// terminator returns the session's server of terminated tunnels, starting it at first use;
// nil once the session is shutting down.
func (s *session) terminator() *terminator {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	if s.term == nil {
		s.term = s.startTerminator()
	}
	return s.term
}

// enter registers a handler; it fails once the session is shutting down, so
// that Serve's final Wait cannot race with a late Add.
func (s *session) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

// track registers a hijacked connection, which http.Server no longer
// closes; it fails (and the caller must close c) after shutdown.
func (s *session) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.tracks[c] = struct{}{}
	return true
}

func (s *session) untrack(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.tracks, c)
}

func (s *session) shutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for c := range s.tracks {
		c.Close()
	}
	if s.term != nil {
		s.term.shutdown()
	}
}

func (s *session) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.enter() {
		http.Error(w, "egress: the proxy is shutting down", http.StatusServiceUnavailable)
		return
	}
	defer s.wg.Done()
	w, r, ended := traced(r.Context(), w, r, r.URL.Hostname())
	defer ended()
	if h := s.localHandler(r); h != nil {
		h.ServeHTTP(w, r)
		return
	}
	if r.Method == http.MethodConnect {
		s.connect(w, r)
		return
	}
	s.forward(w, r)
}

// localHandler is the host's own service a request names (Policy.Local), served as plain HTTP
// on port 80 only: a tunnel (CONNECT) to it, or another port, is refused as a name the proxy
// does not resolve.
func (s *session) localHandler(r *http.Request) http.Handler {
	if len(s.local) == 0 {
		return nil
	}
	host, port := r.URL.Hostname(), r.URL.Port()
	if r.Method == http.MethodConnect {
		host, port, _ = net.SplitHostPort(r.Host)
	}
	h := s.local[strings.ToLower(host)]
	if h == nil {
		return nil
	}
	if r.Method == http.MethodConnect || (port != "" && port != "80") {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.log.Info("egress decision", zap.String("method", r.Method), zap.String("host", host), zap.String("port", port),
				zap.String("decision", "denied"), zap.String("reason", "local_not_plain_http"))
			http.Error(w, fmt.Sprintf("egress: %s is served by the host itself, as plain HTTP on port 80: use http://%s/", host, host), http.StatusBadRequest)
		})
	}
	s.log.Debug("egress decision", zap.String("method", r.Method), zap.String("host", host), zap.String("decision", "local"))
	return h
}

// verdict is one decision about one request.
type verdict struct {
	t      target
	addrs  []netip.Addr
	port   uint16 // to dial, when a pin says other than t.port
	status int    // 0 when allowed
	reason string // metric label
	msg    string // one line for the client
	// proxyError is the RFC 9209 Proxy-Status error type.
	proxyError string
}

func (v *verdict) allowed() bool { return v.status == 0 }

// dialPort is the port to dial the checked addresses on.
func (v *verdict) dialPort() uint16 {
	if v.port != 0 {
		return v.port
	}
	return v.t.port
}

// reach applies the policy's hosts to t: "" when it may be reached, else the refusal's
// reason label (allowlist.check's). With request rules, the hosts they name are reachable (on
// the default ports: their requests are read and checked one by one) and the allowlist names
// the others, so an empty one then allows none.
func (s *session) reach(t target) string {
	if len(s.rules) == 0 {
		return s.allow.check(t)
	}
	if s.rules.covers(t.host) {
		if slices.Contains(defaultPorts, t.port) {
			return ""
		}
		return "port"
	}
	if len(s.allow) == 0 {
		return "not_allowlisted"
	}
	return s.allow.check(t)
}

func (v *verdict) deny(status int, reason, proxyError, format string, args ...any) {
	v.status, v.reason, v.proxyError, v.msg = status, reason, proxyError, fmt.Sprintf(format, args...)
}

// decide applies the policy to a parsed request target (or its parse
// error), then logs and counts the outcome.
func (s *session) decide(ctx context.Context, method string, t target, perr error) *verdict {
	v := &verdict{t: t}
	s.judge(ctx, v, perr)
	allowed := v.allowed()
	noteDecision(ctx, t.host, !allowed, v.reason)
	s.p.metrics.decision(allowed, v.reason)
	addrs := make([]string, len(v.addrs))
	for i, a := range v.addrs {
		addrs[i] = a.String()
	}
	fields := []zap.Field{
		zap.String("method", method),
		zap.String("host", t.host),
		zap.Uint16("port", t.port),
		zap.Strings("addresses", addrs),
		zap.String("decision", decisionLabel(allowed)),
		zap.String("reason", v.reason),
	}
	if !allowed {
		fields = append(fields, zap.String("message", v.msg))
	}
	s.log.Info("egress decision", fields...)
	if !allowed {
		s.tellDenied(v)
	}
	return v
}

// tellDenied tells the policy's Denied, if any, that v was refused.
func (s *session) tellDenied(v *verdict) {
	if s.denied == nil {
		return
	}
	reason := v.msg
	for _, prefix := range []string{"egress denied: ", "egress: "} {
		reason = strings.TrimPrefix(reason, prefix)
	}
	s.denied(v.t.host, v.t.port, reason)
}

func (s *session) judge(ctx context.Context, v *verdict, perr error) {
	t := v.t
	if perr != nil {
		v.deny(http.StatusBadRequest, "bad_request", "http_request_error", "egress: %v", perr)
		return
	}
	if !t.ip.IsValid() && isMetadataName(t.host) {
		v.deny(http.StatusForbidden, classMetadata.reason, "destination_ip_prohibited",
			"egress denied: %s is a cloud metadata service; jobs may not reach it", t.host)
		return
	}
	switch s.reach(t) {
	case "not_allowlisted":
		if len(s.rules) > 0 {
			v.deny(http.StatusForbidden, "not_allowlisted", "http_request_denied",
				"egress denied: %s is named by none of this function's egress: rules nor its network: proxy line; add a rule or name it there",
				t.host)
			return
		}
		v.deny(http.StatusForbidden, "not_allowlisted", "http_request_denied",
			"egress denied: %s is not in this function's allowlist (network: proxy %s); add it to the function's network: proxy line",
			t.host, s.allow)
		return
	case "port":
		v.deny(http.StatusForbidden, "port", "http_request_denied",
			"egress denied: port %d of %s is not allowed; only 80 and 443 unless the allowlist names the port (network: proxy %s:%d)",
			t.port, t.host, t.host, t.port)
		return
	}
	if pin, ok := s.p.pins[t.host]; ok {
		// The operator's own choice of address: no address rule applies to it.
		v.addrs, v.port, v.reason = []netip.Addr{pin.Addr()}, pin.Port(), "pinned"
		return
	}
	if t.ip.IsValid() {
		v.addrs = []netip.Addr{t.ip}
	} else {
		lctx, cancel := context.WithTimeout(ctx, s.p.dialer.Timeout)
		addrs, err := s.p.lookup(lctx, t.host)
		cancel()
		if err == nil && len(addrs) == 0 {
			err = errors.New("no addresses")
		}
		if err != nil {
			v.deny(http.StatusBadGateway, "resolve_failed", "dns_error", "egress: cannot resolve %s: %v", t.host, err)
			return
		}
		v.addrs = addrs
	}
	av := checkAddrs(s.p.permit, s.p.ownAddrs(), v.addrs)
	if av.refused {
		what := fmt.Sprintf("%s resolves to %s, %s", t.host, av.addr, av.class.what)
		if t.ip.IsValid() {
			what = fmt.Sprintf("%s is %s", t.host, av.class.what)
		}
		advice := "ask the operator to permit it"
		if av.class == classMetadata {
			advice = "jobs may not reach it"
		}
		v.deny(http.StatusForbidden, av.class.reason, "destination_ip_prohibited", "egress denied: %s; %s", what, advice)
		return
	}
	v.reason = "public"
	if av.permitted {
		v.reason = "permitted"
	}
}

// dial connects to one of the checked addresses, in the resolver's order,
// never to anything looked up again. The time is shared between addresses
// the way net.Dialer shares it, so a dead first address leaves time for the
// others.
func (p *Proxy) dial(ctx context.Context, addrs []netip.Addr, port uint16) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, p.dialer.Timeout)
	defer cancel()
	var errs []error
	for i, a := range addrs {
		dl, _ := ctx.Deadline()
		share := time.Until(dl) / time.Duration(len(addrs)-i)
		if share < 2*time.Second {
			share = time.Until(dl)
		}
		actx, acancel := context.WithTimeout(ctx, share)
		c, err := p.dialer.DialContext(actx, "tcp", netip.AddrPortFrom(a.Unmap().WithZone(""), port).String())
		acancel()
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

func (s *session) upstreamFailed(v *verdict, err error) {
	s.p.metrics.upstreamErrors.Inc()
	s.log.Warn("egress upstream failed", zap.String("host", v.t.host), zap.Uint16("port", v.t.port), zap.Error(err))
}

// connect answers a CONNECT request: a tunnel on success, otherwise an
// error whose status line carries the reason, because that line is what
// clients print ("Tunnel connection failed: 403 ...") while they drop the
// body of a failed CONNECT.
func (s *session) connect(w http.ResponseWriter, r *http.Request) {
	// r.URL.Host, not r.Host: Go fills r.Host from the Host header when the
	// request target is not an authority ("CONNECT /path"), a form no proxy
	// client sends.
	t, perr := parseAuthority(r.URL.Host)
	v := s.decide(r.Context(), r.Method, t, perr)
	terminated := v.allowed() && s.terminates(t.host)
	if terminated && t.port == 80 {
		// A tunnel to port 80 would carry plain HTTP past the rules and the sealing.
		v.deny(http.StatusForbidden, "port", "http_request_denied",
			"egress denied: %s is reached over HTTPS only (it has a sealed secret or an egress: rule); use https://%s/", t.host, t.host)
		s.tellDenied(v)
		terminated = false
	}
	var up net.Conn
	if v.allowed() && !terminated {
		var err error
		if up, err = s.p.dial(r.Context(), v.addrs, v.dialPort()); err != nil {
			s.upstreamFailed(v, err)
			v.deny(http.StatusBadGateway, "", "destination_unavailable", "egress: cannot connect to %s: %v", t, err)
			s.tellDenied(v)
		}
	}
	hj, ok := w.(http.Hijacker)
	if !ok { // only HTTP/1 reaches here; this is a programming error
		if up != nil {
			up.Close()
		}
		http.Error(w, "egress: cannot tunnel on this connection", http.StatusInternalServerError)
		return
	}
	c, brw, err := hj.Hijack()
	if err != nil {
		if up != nil {
			up.Close()
		}
		return
	}
	defer c.Close()
	// The server's header deadline may still be set on c.
	_ = c.SetDeadline(time.Time{})
	if !v.allowed() {
		_ = c.SetWriteDeadline(time.Now().Add(headerTimeout))
		_, _ = c.Write(rawErrorResponse(v))
		return
	}
	if !s.track(c) {
		if up != nil {
			up.Close()
		}
		return
	}
	defer s.untrack(c)
	if terminated {
		_ = c.SetWriteDeadline(time.Now().Add(headerTimeout))
		if _, err := c.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
			return
		}
		_ = c.SetWriteDeadline(time.Time{})
		var early []byte
		if n := brw.Reader.Buffered(); n > 0 {
			early, _ = brw.Reader.Peek(n)
			early = append([]byte(nil), early...)
		}
		s.terminate(r.Context(), c, early, t, v)
		return
	}
	defer up.Close()

	act := newActivity(s.p.idle)
	_ = c.SetWriteDeadline(act.deadline())
	if _, err := c.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		return
	}
	// A client may send its first bytes (a TLS ClientHello) without waiting
	// for the 200; the server may already have read them.
	if n := brw.Reader.Buffered(); n > 0 {
		early, _ := brw.Reader.Peek(n)
		_ = up.SetWriteDeadline(act.deadline())
		if _, err := up.Write(early); err != nil {
			return
		}
	}
	start := time.Now()
	sent, received := join(c, up, act)
	s.log.Debug("egress tunnel closed", zap.String("host", t.host), zap.Uint16("port", t.port),
		zap.Int64("bytes_sent", sent), zap.Int64("bytes_received", received), zap.Duration("duration", time.Since(start)))
}

// rawErrorResponse is a complete HTTP/1.1 error response whose reason
// phrase is the verdict's message.
func rawErrorResponse(v *verdict) []byte {
	body := v.msg + "\n"
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", v.status, reasonPhrase(v.msg))
	b.WriteString("Content-Type: text/plain; charset=utf-8\r\n")
	fmt.Fprintf(&b, "Proxy-Status: %s\r\n", proxyStatus(v))
	b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n")
	b.WriteString("Connection: close\r\n\r\n")
	b.WriteString(body)
	return []byte(b.String())
}

// reasonPhrase keeps only what RFC 9112 allows in a reason phrase.
func reasonPhrase(msg string) string {
	return strings.Map(func(r rune) rune {
		if r == '\t' || r >= ' ' && r < 0x7f {
			return r
		}
		return ' '
	}, msg)
}

func proxyStatus(v *verdict) string {
	return "agenthost-egress; error=" + v.proxyError + "; details=" + strconv.Quote(reasonPhrase(v.msg))
}

type planKey struct{}

// plan is what forward hands to the transport's dialer: the addresses that
// were checked for this request.
type plan struct {
	addrs []netip.Addr
	port  uint16
}

// dialChecked is the plain-HTTP transport's dialer. It ignores the address
// the transport asks for and dials the request's checked addresses; a
// request without a plan is a bug, and is not dialed at all.
func (p *Proxy) dialChecked(ctx context.Context, _, _ string) (net.Conn, error) {
	pl, ok := ctx.Value(planKey{}).(*plan)
	if !ok {
		return nil, errors.New("egress: no checked address for this request")
	}
	c, err := p.dial(ctx, pl.addrs, pl.port)
	if err != nil {
		return nil, err
	}
	return &idleConn{Conn: c, idle: p.idle}, nil
}

// forward proxies one absolute-form plain-HTTP request.
func (s *session) forward(w http.ResponseWriter, r *http.Request) {
	t, perr := parseForwardURL(r.URL)
	v := s.decide(r.Context(), r.Method, t, perr)
	if !v.allowed() {
		w.Header().Set("Proxy-Status", proxyStatus(v))
		http.Error(w, v.msg, v.status)
		return
	}
	if s.rules.covers(t.host) {
		path, err := requestPath(r)
		if err != nil {
			s.refuse(w, r, t.host, r.URL.EscapedPath(), http.StatusBadRequest, "bad_path", err.Error())
			return
		}
		if reason := s.rules.allows(r.Method, t.host, path); reason != "" {
			s.refuse(w, r, t.host, path, http.StatusForbidden, "rule", reason)
			return
		}
	}
	rp := &httputil.ReverseProxy{
		// The outbound request is the inbound one: its URL is already
		// absolute, and ReverseProxy drops hop-by-hop headers, including
		// Proxy-Authorization and Proxy-Connection. Rewrite (unlike
		// Director) adds no X-Forwarded-For.
		Rewrite:       func(*httputil.ProxyRequest) {},
		Transport:     s.p.transport,
		FlushInterval: -1, // stream server-sent events as they come
		ErrorLog:      warnLog(s.log),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client went away
			}
			s.upstreamFailed(v, err)
			v.deny(http.StatusBadGateway, "", "destination_unavailable", "egress: %s failed: %v", t, err)
			s.tellDenied(v)
			w.Header().Set("Proxy-Status", proxyStatus(v))
			http.Error(w, v.msg, v.status)
		},
	}
	ctx := context.WithValue(r.Context(), planKey{}, &plan{addrs: v.addrs, port: v.dialPort()})
	rp.ServeHTTP(w, r.WithContext(ctx))
}
