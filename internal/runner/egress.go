package runner

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/egress"
	"github.com/agenthost/host/internal/jailinit"
	"github.com/agenthost/host/internal/jobtype"
	"github.com/agenthost/host/internal/sandbox"
)

// Where the egress proxy appears in the jail.
const (
	jailEgressDir = "/host/egress"
	jailInitPath  = "/host/bin/jailinit"
)

// egressAddr is where a `network: proxy` job finds its proxy in its jail (HTTPS_PROXY).
var egressAddr = netip.MustParseAddrPort(egress.DefaultListen)

// listensIn is a Jail that can hold a socket in a jail's network namespace for the host
// (sandbox.Listen). *sandbox.Bwrap is one, hardened on a host with CAP_SYS_ADMIN.
type listensIn interface{ ListensIn() bool }

// egressFromHost reports whether `network: proxy` jobs reach their proxy straight from their
// jail: the host makes the proxy's listening socket in the jail's network namespace before the
// job starts and serves it from outside, so no process of the jail's own sits in between. The
// other way, for hosts that may not enter a jail's namespace, is the jail init (wireEgress).
func (r *Runner) egressFromHost() bool {
	j, ok := r.cfg.Jail.(listensIn)
	return ok && j.ListensIn() && !r.cfg.ForwardInJail
}

// egressPolicy is what the job's proxy lets through: its function's allowlist.
func (j *task) egressPolicy() egress.Policy {
	p := egress.Policy{Allow: j.Fn.Spec.Network.Hosts, Job: j.ID, Function: j.Fn.Name, Denied: j.egressDenied(),
		Sealed: j.sealed, Refused: j.egressRefused()}
	for _, r := range j.Fn.Spec.Egress {
		p.Rules = append(p.Rules, egress.Rule{Method: r.Method, Host: r.Host, Path: r.Path})
	}
	if j.tools != nil {
		p.Local = map[string]http.Handler{ToolsHost: j.tools}
	}
	return p
}

// ToolsHost is the name a job with tools: reaches its MCP endpoint by, through its proxy.
const ToolsHost = "host.mcp"

// openTools mints the job's MCP endpoint when its function declares tools:, and returns the
// environment that tells the job where it is (HOST_MCP_URL) and its token (HOST_MCP_TOKEN).
// The endpoint ends at the job's release.
func (r *Runner) openTools(job *task, p *prepared) []string {
	fn := job.Fn
	if len(fn.Spec.Tools) == 0 {
		return nil
	}
	switch {
	case r.cfg.Tools == nil:
		job.say("tools: %s: this host serves no MCP tools to jobs; the job runs without HOST_MCP_URL", strings.Join(fn.Spec.Tools, " "))
		return nil
	case !fn.Spec.Sandbox || fn.Spec.Network.Mode != annot.NetworkProxy || r.cfg.Egress == nil:
		job.say("tools: the MCP endpoint is served through the jail's egress proxy, so it needs `sandbox` and `network: proxy` (the default); the job runs without HOST_MCP_URL")
		return nil
	}
	h, token, closeTools := r.cfg.Tools.Open(jobtype.ToolsJob{ID: job.ID, FlowID: job.FlowID, Function: fn.Name, Hop: job.Hop, Starter: job.Starter,
		ToolDepth: job.ToolDepth, Trace: job.Trace, Declares: fn.Spec.DeclaresSecret}, fn.Spec.Tools)
	job.tools = h
	p.closers = append(p.closers, closerFunc(closeTools))
	return []string{"HOST_MCP_URL=http://" + ToolsHost + "/mcp", "HOST_MCP_TOKEN=" + token}
}

// closerFunc is an io.Closer that calls a function.
type closerFunc func()

func (f closerFunc) Close() error { f(); return nil }

// wireEgress gives a `network: proxy` job its way out. The job's network namespace has no
// other route out than its proxy, served by the host under the function's allowlist:
//   - from the host, the proxy's address is a socket the host holds in the jail (see
//     egressFromHost);
//   - otherwise a Unix socket, bound read-only into the jail, and the jail init (package
//     jailinit) as the job's first process, which forwards the job's proxy connections to it.
func (r *Runner) wireEgress(ctx context.Context, job *task, p *prepared) error {
	if r.egressFromHost() {
		p.spec.Listen = &sandbox.Listen{Addr: egressAddr, Ready: func(l net.Listener) {
			// Called by the jail before the job starts, and before Start returns: the
			// job's release closes what p holds.
			c, err := r.cfg.Egress.Start(ctx, l, job.egressPolicy())
			if err != nil {
				// The allowlist was checked when the function loaded; should it fail here all
				// the same, the job's proxy connections are refused (Start closed l).
				r.cfg.Log.Error("cannot serve the job's egress proxy; its connections are refused", zap.String("job", job.ID), zap.Error(err))
				return
			}
			p.closers = append(p.closers, c)
		}}
		p.spec.Env = append(p.spec.Env, egress.Env("")...)
		r.trustHostCA(p.spec)
		return nil
	}
	if err := r.jailInitReady(); err != nil {
		return err
	}
	dir, err := r.egressDir(p)
	if err != nil {
		return err
	}
	if err := r.listenEgress(ctx, job, p, filepath.Join(dir, "egress.sock")); err != nil {
		return err
	}
	r.bindEgress(p.spec, dir)
	return nil
}

// jailInitReady says whether this host's jail init can be bound into a jail now.
func (r *Runner) jailInitReady() error {
	if r.cfg.JailInit == nil {
		return terminal("this host has no jail init to run a `network: proxy` job with; give the function `network: none` or run it on a host that has one")
	}
	if err := r.cfg.JailInit.Check(); err != nil {
		// The host's own file, not the job's doing: hand the job back.
		return &jobtype.UnavailableError{Err: err}
	}
	return nil
}

// egressDir creates the directory that holds a job's egress socket, in the job's directory
// when the socket's path fits in a sockaddr.
func (r *Runner) egressDir(p *prepared) (string, error) {
	dir := filepath.Join(p.jd.dir, "egress")
	if len(dir)+len("/egress.sock") > 100 { // a Unix socket path holds 107 bytes
		var err error
		if dir, err = os.MkdirTemp("", "egress-"); err != nil {
			return "", fmt.Errorf("create the egress socket directory: %w", err)
		}
		p.closers = append(p.closers, removeDir(dir))
	} else if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("create the egress socket directory: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", fmt.Errorf("create the egress socket directory: %w", err)
	}
	return dir, nil
}

// listenEgress serves the job's proxy socket at path, until the job's release.
func (r *Runner) listenEgress(ctx context.Context, job *task, p *prepared, path string) error {
	uid, gid := r.cfg.Jail.Owner()
	if os.Geteuid() != 0 {
		uid, gid = os.Getuid(), os.Getgid()
	}
	l, err := r.cfg.Egress.Listen(ctx, path, uid, gid, job.egressPolicy())
	if err != nil {
		return fmt.Errorf("serve the job's egress proxy: %w", err)
	}
	p.closers = append(p.closers, l)
	return nil
}

// bindEgress binds the socket's directory and the init into spec's jail, and puts the init in
// front of its command.
func (r *Runner) bindEgress(spec *sandbox.Spec, dir string) {
	spec.Mounts = append(spec.Mounts,
		sandbox.Mount{Source: dir, Target: jailEgressDir},
		sandbox.Mount{Source: r.cfg.JailInit.Path, Target: jailInitPath})
	spec.Argv = jailinit.Argv(jailInitPath, jailEgressDir+"/egress.sock", "", spec.Argv)
	spec.Env = append(spec.Env, egress.Env("")...)
	r.trustHostCA(spec)
}

// maxEgressLines bounds the denial lines one job's log gets: these lines are the host's and
// not under the job's --max-output-bytes, and a job retrying in a loop could otherwise fill
// its log with them.
const maxEgressLines = 100

// egressDenied puts each egress refusal in the job's own log, where its author looks first:
// the job's HTTP client only says that the proxy refused.
func (j *task) egressDenied() func(host string, port uint16, reason string) {
	var n atomic.Int64
	return func(host string, port uint16, reason string) {
		switch seen := n.Add(1); {
		case seen <= maxEgressLines:
			j.say("egress refused %s: %s", net.JoinHostPort(host, strconv.Itoa(int(port))), reason)
		case seen == maxEgressLines+1:
			j.say("egress refused more than %d times; further refusals are in the host's log only", maxEgressLines)
		}
	}
}

// egressRefused is egressDenied for requests the proxy read (those to hosts with a sealed
// secret or an egress: rule), whose method and path the line then names.
func (j *task) egressRefused() func(method, host, path, reason string) {
	var n atomic.Int64
	return func(method, host, path, reason string) {
		switch seen := n.Add(1); {
		case seen <= maxEgressLines:
			j.say("egress refused %s %s%s: %s", method, host, path, reason)
		case seen == maxEgressLines+1:
			j.say("egress refused more than %d requests; further refusals are in the host's log only", maxEgressLines)
		}
	}
}

// Where a jail finds the host CA's bundle: the system's roots and the CA the proxy signs the
// certificates of terminated hosts with.
const (
	jailCADir  = "/host/ca"
	jailBundle = jailCADir + "/" + egress.BundleName
)

// caEnv points the TLS clients of a jail at the bundle: OpenSSL (Python's ssl, Ruby), Go and
// Bun read SSL_CERT_FILE; Node adds NODE_EXTRA_CA_CERTS to its own roots; requests, curl and
// git each have a variable of their own.
var caEnv = []string{
	"SSL_CERT_FILE=" + jailBundle,
	"NODE_EXTRA_CA_CERTS=" + jailBundle,
	"REQUESTS_CA_BUNDLE=" + jailBundle,
	"CURL_CA_BUNDLE=" + jailBundle,
	"GIT_SSL_CAINFO=" + jailBundle,
}

// trustHostCA makes a `network: proxy` jail trust the host's CA, if its proxy has one: every
// such jail, not only those with sealed secrets, so that a function's clients see one and the
// same set of roots whatever its annotations.
func (r *Runner) trustHostCA(spec *sandbox.Spec) {
	ca := r.cfg.Egress.CA()
	if ca == nil {
		return
	}
	spec.Mounts = append(spec.Mounts, sandbox.Mount{Source: ca.JailDir(), Target: jailCADir})
	spec.Env = append(spec.Env, caEnv...)
}

// egressGate holds a warm jail's proxy address (sandbox.Listen) until a job is handed over, and
// refuses every connection meanwhile: the top-level code that runs ahead of any job gets no way
// out, as with the forwarder's placeholder socket.
type egressGate struct {
	made    chan struct{} // closed by hold, once l is there
	l       net.Listener
	refused chan struct{} // closed once refuse returned
}

func newEgressGate() *egressGate { return &egressGate{made: make(chan struct{})} }

// hold is the jail's sandbox.Listen.Ready.
func (g *egressGate) hold(l net.Listener) {
	g.l, g.refused = l, make(chan struct{})
	go g.refuse()
	close(g.made)
}

// refuseAnswer is what a connection made before the hand-over reads: the HTTP client that made
// it (through HTTPS_PROXY) can show it.
var refuseAnswer = func() []byte {
	const body = "egress: no network before the job: the top-level code runs ahead of it\n"
	return fmt.Appendf(nil, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}()

func (g *egressGate) refuse() {
	defer close(g.refused)
	for {
		c, err := g.l.Accept()
		if err != nil {
			// The hand-over (open's deadline), or the jail's end (Close). Any other failure
			// leaves later connections waiting in the backlog for the job's proxy.
			return
		}
		c.SetWriteDeadline(time.Now().Add(time.Second))
		c.Write(refuseAnswer)
		c.Close()
	}
}

// open stops refusing and returns the listener for the job's proxy. It waits for the jail to
// have made it, and fails with errWarmGone when the jail ended first.
func (g *egressGate) open(ctx context.Context, gone <-chan struct{}) (net.Listener, error) {
	select {
	case <-g.made:
	case <-gone:
		return nil, errWarmGone
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	d, ok := g.l.(interface{ SetDeadline(time.Time) error })
	if !ok {
		return nil, fmt.Errorf("serve the job's egress proxy: a %T cannot stop accepting", g.l)
	}
	if err := d.SetDeadline(time.Unix(1, 0)); err != nil { // in the past: Accept returns at once
		return nil, fmt.Errorf("serve the job's egress proxy: %w", err)
	}
	<-g.refused
	if err := d.SetDeadline(time.Time{}); err != nil {
		return nil, fmt.Errorf("serve the job's egress proxy: %w", err)
	}
	return g.l, nil
}

// Close closes the listener, when the jail made one: the job's proxy closes it too, and a
// second close is harmless.
func (g *egressGate) Close() error {
	select {
	case <-g.made:
		g.l.Close()
	default:
	}
	return nil
}

// removeDir is an io.Closer that removes a directory tree.
type removeDir string

func (d removeDir) Close() error { return os.RemoveAll(string(d)) }
