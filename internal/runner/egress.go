package runner

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"

	"github.com/agenthost/host/internal/egress"
	"github.com/agenthost/host/internal/jailinit"
	"github.com/agenthost/host/internal/sandbox"
)

// Where the egress proxy appears in the jail.
const (
	jailEgressDir = "/host/egress"
	jailInitPath  = "/host/bin/jailinit"
)

// wireEgress gives a `network: proxy` job its way out: a Unix socket served by the host's proxy
// under this function's allowlist, bound read-only into the jail, and the jail init (package
// jailinit) as the job's first process, which forwards the job's proxy connections (HTTPS_PROXY)
// to that socket. The job's network namespace has no other route out.
func (r *Runner) wireEgress(ctx context.Context, job *Job, p *prepared) error {
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
		return &UnavailableError{Err: err}
	}
	return nil
}

// egressDir creates the directory that holds a job's egress socket, in the job's directory
// when the socket's path fits in a sockaddr.
func (r *Runner) egressDir(p *prepared) (string, error) {
	dir := filepath.Join(p.dir, "egress")
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

// listenEgress serves the job's proxy socket at path, until the job's cleanup.
func (r *Runner) listenEgress(ctx context.Context, job *Job, p *prepared, path string) error {
	uid, gid := r.cfg.Jail.Owner()
	if os.Geteuid() != 0 {
		uid, gid = os.Getuid(), os.Getgid()
	}
	l, err := r.cfg.Egress.Listen(ctx, path, uid, gid, egress.Policy{
		Allow: job.Fn.Spec.Network.Hosts, Job: job.ID, Function: job.Fn.Name, Denied: job.egressDenied(),
	})
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
}

// maxEgressLines bounds the denial lines one job's log gets: these lines are the host's and
// not under the job's --max-output-bytes, and a job retrying in a loop could otherwise fill
// its log with them.
const maxEgressLines = 100

// egressDenied puts each egress refusal in the job's own log, where its author looks first:
// the job's HTTP client only says that the proxy refused.
func (j *Job) egressDenied() func(host string, port uint16, reason string) {
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

// removeDir is an io.Closer that removes a directory tree.
type removeDir string

func (d removeDir) Close() error { return os.RemoveAll(string(d)) }
