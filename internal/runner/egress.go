package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agenthost/host/internal/egress"
	"github.com/agenthost/host/internal/sandbox"
)

// Where the egress proxy appears in the jail.
const (
	jailEgressDir  = "/host/egress"
	jailHostBinary = "/host/bin/host"
)

// wireEgress gives a `network: proxy` job its way out: a Unix socket served by the host's proxy
// under this function's allowlist, bound read-only into the jail, and the host binary as the
// job's init, which forwards the job's proxy connections (HTTPS_PROXY) to that socket. The job's
// network namespace has no other route out.
func (r *Runner) wireEgress(ctx context.Context, job *Job, p *prepared) error {
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
		Allow: job.Fn.Spec.Network.Hosts, Job: job.ID, Function: job.Fn.Name,
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
		sandbox.Mount{Source: r.cfg.HostBinary, Target: jailHostBinary})
	spec.Argv = egress.InitArgv(jailHostBinary, jailEgressDir+"/egress.sock", "", spec.Argv)
	spec.Env = append(spec.Env, egress.Env("")...)
}

// removeDir is an io.Closer that removes a directory tree.
type removeDir string

func (d removeDir) Close() error { return os.RemoveAll(string(d)) }
