// Package egress is the network path of jailed functions: an HTTP proxy on
// the host that decides, per connection, whether a job may reach a host, and
// a tiny init (package jailinit) that runs inside the jail and carries the
// job's TCP connections to that proxy.
//
// A jail with the proxy network has its own network namespace holding only
// lo, so the job cannot reach anything by itself. The host gives each job its
// own Unix socket (Proxy.Listen) and binds the socket's directory into the
// jail; the job's command is wrapped by the init (package jailinit), which
// listens on 127.0.0.1:3128 inside the jail and copies every connection to
// the socket. The job's environment (Env) points HTTPS_PROXY and friends at
// that listener. Because the socket belongs to one job, every connection on
// it carries that job's Policy without any authentication.
//
// The proxy answers HTTP CONNECT (for https and anything tunnelled) and
// absolute-form plain-HTTP requests. For each it validates the host, applies
// the function's allowlist, resolves the name itself, refuses loopback,
// private, link-local, multicast, CGNAT, benchmarking, reserved and
// cloud-metadata addresses, and the machine's own addresses, unless an
// operator Permit prefix covers them, and dials exactly the address it
// checked, so a DNS answer that changes between the check and the dial (DNS
// rebinding) gains nothing. Every decision is logged and counted. Refusals
// are one line of text that agents can act on, and for CONNECT the same
// line is the status line's reason phrase, which is what curl -v, Python
// ("Tunnel connection failed: 403 egress denied: ...") and Bun
// (ERR_PROXY_TUNNEL) show.
//
// Sealed secrets and request rules (intercept.go): for the hosts a job's policy names in a
// sealed secret or a rule, and those only, the proxy terminates TLS with the host's CA (CA),
// reads each request, applies the rules, puts the job's sealed values in its headers in place
// of their placeholders, and forwards it over TLS of its own to the address it checked. Every
// other CONNECT is a tunnel whose bytes it never reads.
//
// Ports: a host may be reached on 80 and 443. An allowlist entry with a port
// ("git.example.com:8443") allows that host on that port only; list the host
// a second time without a port to keep 80 and 443 as well. With no allowlist,
// any public host is allowed on 80 and 443 and nothing else: agents need
// HTTPS APIs, and other ports are where internal services and abuse live.
//
// Wiring a job (the jail builder's part):
//
//   - Per job, create a directory outside the job's writable tree, mode 0755,
//     and call Proxy.Listen(ctx, dir+"/egress.sock", uid, gid, policy) with
//     the jail user's host uid/gid; Close it when the job ends.
//   - Bind that directory read-only at /host/egress, and the jail init
//     (initbin.Install) read-only at /host/bin/jailinit; unshare the
//     network (no --share-net).
//   - Run jailinit.Argv("/host/bin/jailinit", "/host/egress/egress.sock",
//     "", argv) instead of argv, and add Env("") to the job's environment.
package egress

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Defaults for the zero values of Options.
const (
	DefaultDialTimeout = 10 * time.Second
	// DefaultIdleTimeout is long because a model may think for minutes
	// before its streamed answer moves again.
	DefaultIdleTimeout = 5 * time.Minute
	// DefaultMaxConns bounds one job's simultaneous connections, which are
	// host file descriptors and goroutines.
	DefaultMaxConns = 256
)

const (
	// headerTimeout bounds how long a client may take to send a request
	// header, so a job cannot pin connections by trickling bytes.
	headerTimeout = 30 * time.Second
	// maxHeaderBytes bounds a request header; agents' headers are a few KiB.
	maxHeaderBytes = 64 << 10
	// maxResponseHeaderBytes bounds what a plain-HTTP upstream may send as
	// its header before the proxy gives up on it.
	maxResponseHeaderBytes = 1 << 20
	// copyBufSize is the buffer of each direction of a tunnel.
	copyBufSize = 32 << 10
)

// Options configures a Proxy. The zero value is usable.
type Options struct {
	Log *zap.Logger // nil logs nothing
	// Registerer receives host_egress_decisions_total{decision,reason} and
	// host_egress_upstream_errors_total; nil registers nothing. Labels never
	// carry job ids or host names: both are unbounded.
	Registerer prometheus.Registerer
	// Resolver looks names up when LookupIP is nil; nil is net.DefaultResolver.
	Resolver *net.Resolver
	// LookupIP, if set, replaces Resolver: it returns every address of host.
	// Tests use it to script DNS answers.
	LookupIP    func(ctx context.Context, host string) ([]netip.Addr, error)
	DialTimeout time.Duration // default DefaultDialTimeout
	// IdleTimeout closes a tunnel or forwarded request when no byte has moved
	// in either direction for this long, and a client connection idle between
	// requests. Default DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxConns bounds the connections served at once on one listener.
	// Default DefaultMaxConns.
	MaxConns int
	// Permit lists address prefixes that are allowed even though they are
	// private, loopback, metadata and so on. It is an operator setting (a
	// corporate API gateway on 10.x), and what tests use to allow a local
	// target explicitly. It overrides every address rule, the metadata
	// addresses included, so keep prefixes narrow.
	Permit []netip.Prefix
	// CA signs the certificates the proxy shows a job's client for the hosts it terminates
	// TLS for: those of the job's sealed secrets and request rules. Without one, a policy
	// with either is refused.
	CA *CA
	// RootCAs verify the upstreams of terminated hosts; nil is the system's roots.
	RootCAs *x509.CertPool
	// Resolve pins names to addresses, as curl's --resolve does (serve --egress-resolve): a
	// connection to a pinned name, on any port its policy allows, goes to that address and
	// port, which no address rule refuses. It is how an operator reaches a private or
	// loopback upstream by its public name, and how tests reach a local server.
	Resolve map[string]netip.AddrPort
}

// Policy is one job's egress policy.
type Policy struct {
	// Allow are the host patterns of `network: proxy ...`: "api.example.com",
	// "*.example.com" (any name below example.com, not example.com itself),
	// either with an optional ":port". Empty allows any host whose addresses
	// are all allowed.
	Allow         []string
	Job, Function string // for log lines only
	// Denied, when set, hears every request the proxy answers with an error instead of a
	// connection: a refusal by this policy or the address rules, or a destination that could
	// not be reached. The host puts it in the job's own log, because the job's HTTP client
	// reports only its own view ("proxy refused the tunnel"). reason is the proxy's one-line
	// message without its "egress denied:" prefix. It is called on the request's goroutine:
	// a slow Denied slows only that job's requests.
	Denied func(host string, port uint16, reason string)
	// Local are services of the host's own that the job reaches by name through its proxy, as
	// plain HTTP on port 80 (http://<name>/): the proxy serves each itself, in-process, never
	// dialing anything, whatever the allowlist and the address rules say. The MCP endpoint of
	// a function's tools: is one (host.mcp).
	Local map[string]http.Handler
	// Sealed are the job's sealed secrets: their placeholders are replaced by their values in
	// the headers of requests to their hosts, whose TLS the proxy then terminates.
	Sealed []Sealed
	// Rules, when any, narrow what the job may send: a host they name is reached only by the
	// requests they allow (its TLS terminated to read them), and with rules the allowlist
	// (Allow) names the other hosts the job may reach, as tunnels; an empty Allow then
	// allows no other host.
	Rules []Rule
	// Refused, when set, hears every request on a terminated connection the proxy refused or
	// could not forward, with the request's method and path: as Denied, for the job's log.
	Refused func(method, host, path, reason string)
}

var errNoCA = errors.New("egress: this proxy has no CA, so it cannot terminate TLS for sealed secrets or egress: rules")

// check compiles what the proxy needs from a policy, so that a bad one is refused before any
// connection is served.
func (p *Proxy) check(policy Policy) (allowlist, ruleSet, sealedSet, error) {
	allow, err := parseAllowlist(policy.Allow)
	if err != nil {
		return nil, nil, sealedSet{}, err
	}
	rules, err := compileRules(policy.Rules)
	if err != nil {
		return nil, nil, sealedSet{}, err
	}
	sealed, err := compileSealed(policy.Sealed)
	if err != nil {
		return nil, nil, sealedSet{}, err
	}
	if (len(rules) > 0 || len(sealed.secrets) > 0) && p.ca == nil {
		return nil, nil, sealedSet{}, errNoCA
	}
	return allow, rules, sealed, nil
}

// Proxy is the host side of the egress path. It is safe for concurrent use;
// one Proxy serves every job, each on its own listener.
type Proxy struct {
	log      *zap.Logger
	lookup   func(ctx context.Context, host string) ([]netip.Addr, error)
	dialer   net.Dialer
	idle     time.Duration
	maxConns int
	permit   []netip.Prefix
	metrics  *proxyMetrics
	ownAddrs func() map[netip.Addr]bool
	ca       *CA
	roots    *x509.CertPool // nil: the system's
	pins     map[string]netip.AddrPort
	// transport forwards plain-HTTP requests. Keep-alives are off: a pooled
	// connection would be reused for a later request without dialing, and
	// every dial must go to an address checked for that request.
	transport *http.Transport
}

// New returns a Proxy configured by o.
func New(o Options) *Proxy {
	p := &Proxy{
		log:      o.Log,
		lookup:   o.LookupIP,
		idle:     o.IdleTimeout,
		maxConns: o.MaxConns,
		permit:   append([]netip.Prefix(nil), o.Permit...),
		ownAddrs: ownAddrs,
		ca:       o.CA,
		roots:    o.RootCAs,
		pins:     map[string]netip.AddrPort{},
	}
	for name, ap := range o.Resolve {
		p.pins[strings.ToLower(strings.TrimSuffix(name, "."))] = ap
	}
	if p.log == nil {
		p.log = zap.NewNop()
	}
	p.metrics = newMetrics(o.Registerer)
	if p.lookup == nil {
		r := o.Resolver
		if r == nil {
			r = net.DefaultResolver
		}
		p.lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return r.LookupNetIP(ctx, "ip", host)
		}
	}
	p.dialer.Timeout = o.DialTimeout
	if p.dialer.Timeout <= 0 {
		p.dialer.Timeout = DefaultDialTimeout
	}
	if p.idle <= 0 {
		p.idle = DefaultIdleTimeout
	}
	if p.maxConns <= 0 {
		p.maxConns = DefaultMaxConns
	}
	for i, pfx := range p.permit {
		p.permit[i] = pfx.Masked()
	}
	p.transport = &http.Transport{
		Proxy:                  nil, // never the host's own HTTP_PROXY
		DialContext:            p.dialChecked,
		DisableKeepAlives:      true,
		DisableCompression:     true, // pass the client's Accept-Encoding through untouched
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
		ExpectContinueTimeout:  time.Second,
	}
	return p
}

// CA is the CA the proxy terminates TLS with; nil when it has none (Options.CA).
func (p *Proxy) CA() *CA { return p.ca }

// Serve answers proxy requests on l under policy until l is closed or ctx
// ends; then it closes l and every connection it accepted, tunnels included,
// and returns once they are all gone. It returns an error at once if policy
// is invalid, and nil when it stopped because ctx ended.
func (p *Proxy) Serve(ctx context.Context, l net.Listener, policy Policy) error {
	allow, rules, sealed, err := p.check(policy)
	if err != nil {
		return err
	}
	s := &session{
		p:       p,
		allow:   allow,
		rules:   rules,
		sealed:  sealed,
		log:     p.log.With(zap.String("job", policy.Job), zap.String("function", policy.Function)),
		denied:  policy.Denied,
		refused: policy.Refused,
		local:   policy.Local,
		tracks:  make(map[net.Conn]struct{}),
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       p.idle,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          warnLog(s.log),
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	stopped := make(chan struct{})
	halted := make(chan struct{})
	go func() {
		defer close(halted)
		select {
		case <-ctx.Done():
		case <-stopped:
		}
		srv.Close() // closes l and every connection not hijacked
		s.shutdown()
	}()
	err = srv.Serve(newLimitListener(l, p.maxConns))
	close(stopped)
	<-halted
	s.wg.Wait()
	// Both ends are normal: ctx ending closes the server, and the caller
	// closing l is the other documented way to stop.
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return fmt.Errorf("egress: serve: %w", err)
}

// Listen creates the job's Unix socket at path and serves policy on it in a
// goroutine. A stale socket at path is replaced. When uid >= 0 the socket
// is chowned to uid:gid (gid -1 keeps the group) with mode 0600, so that
// only the jail's user can connect; with uid < 0 it is mode 0666. The
// returned Closer stops serving, waits for the job's connections to end and
// removes the socket. It is safe to call Close more than once.
func (p *Proxy) Listen(ctx context.Context, path string, uid, gid int, policy Policy) (io.Closer, error) {
	if _, _, _, err := p.check(policy); err != nil {
		return nil, err
	}
	// sun_path is 108 bytes including the terminating NUL.
	if len(path) > 107 {
		return nil, fmt.Errorf("egress: socket path %q is %d bytes; Unix sockets allow at most 107", path, len(path))
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("egress: %s exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("egress: remove stale socket: %w", err)
		}
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("egress: listen: %w", err)
	}
	// Chmod and chown go through the path: a socket's mode is that of its
	// inode, and the jail reaches the inode through a bind mount.
	mode := os.FileMode(0o666)
	if uid >= 0 {
		mode = 0o600
		if err := os.Lchown(path, uid, gid); err != nil {
			l.Close()
			return nil, fmt.Errorf("egress: hand the socket to uid %d: %w", uid, err)
		}
	}
	if err := os.Chmod(path, mode); err != nil {
		l.Close()
		return nil, fmt.Errorf("egress: chmod socket: %w", err)
	}
	c := p.start(ctx, l, policy)
	c.path = path
	return c, nil
}

// Start serves policy on l in a goroutine, as Listen does on its socket: for a listener the
// caller made, such as one in the jail's own network namespace (sandbox.Listen). The returned
// Closer stops serving, closes l and waits for the job's connections to end. It is safe to
// call Close more than once.
func (p *Proxy) Start(ctx context.Context, l net.Listener, policy Policy) (io.Closer, error) {
	if _, _, _, err := p.check(policy); err != nil {
		l.Close()
		return nil, err
	}
	return p.start(ctx, l, policy), nil
}

func (p *Proxy) start(ctx context.Context, l net.Listener, policy Policy) *listenCloser {
	ctx, cancel := context.WithCancel(ctx)
	c := &listenCloser{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		if err := p.Serve(ctx, l, policy); err != nil {
			p.log.Error("egress proxy stopped", zap.String("job", policy.Job), zap.Stringer("listener", l.Addr()), zap.Error(err))
		}
	}()
	return c
}

type listenCloser struct {
	cancel context.CancelFunc
	done   chan struct{}
	path   string // the Unix socket Listen made; "" for Start
	once   sync.Once
	err    error
}

func (c *listenCloser) Close() error {
	c.once.Do(func() {
		c.cancel()
		<-c.done
		// The listener unlinks its socket on close; this catches a Serve that
		// never got to own it.
		if c.path == "" {
			return
		}
		if err := os.Remove(c.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			c.err = fmt.Errorf("egress: remove socket: %w", err)
		}
	})
	return c.err
}

// warnLog adapts l for net/http's ErrorLog, whose messages (panics in a
// handler, malformed traffic) are worth a warning.
func warnLog(l *zap.Logger) *log.Logger {
	std, err := zap.NewStdLogAt(l, zap.WarnLevel)
	if err != nil { // only for an invalid level
		return zap.NewStdLog(l)
	}
	return std
}
