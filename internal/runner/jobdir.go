package runner

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/agenthost/host/internal/functions"
	"github.com/agenthost/host/internal/jailfs"
	"github.com/agenthost/host/internal/sandbox"
)

// DefaultJobDisk bounds a jailed job's /job, volumes included, when neither its `disk:`
// annotation nor the host's Config.JobDisk says otherwise.
const DefaultJobDisk = 2 << 30

// jobDir is one job's directory under the run directory: job/ (bound at /job) and io/ (bound
// at the io directory), both writable by the jail, and the host's own entries beside them (the
// egress socket's directory). The jail cannot write dir itself. Everything the host does
// below job/ and io/ goes through root and io, never by path (package jailfs): the jail may
// have put a link anywhere there.
type jobDir struct {
	dir     string
	workDir string // dir/job
	ioDir   string // dir/io
	root    *jailfs.Dir
	io      *jailfs.Dir
	// tree, when not nil, is the bounded file system job/ is on (see Config.JobDisk).
	tree *jailfs.Tree

	removeOnce sync.Once
}

// makeJobDir lays out a job directory for a run of fn under the run directory (prefix names
// it). A jailed run's job/ and io/ belong to the jail user, and job/ is a tree of the run's
// disk size when this host can mount one.
func (r *Runner) makeJobDir(fn *functions.Function, prefix string) (*jobDir, error) {
	dir, err := os.MkdirTemp(r.cfg.RunDir, prefix)
	if err != nil {
		return nil, hostTrouble("create job directory", err)
	}
	d := &jobDir{dir: dir, workDir: filepath.Join(dir, "job"), ioDir: filepath.Join(dir, "io")}
	if err := d.lay(r, fn); err != nil {
		d.remove()
		return nil, err
	}
	return d, nil
}

func (d *jobDir) lay(r *Runner, fn *functions.Function) error {
	if err := os.Chmod(d.dir, 0o711); err != nil { // the jail user only passes through
		return hostTrouble("create job directory", err)
	}
	for _, p := range []string{d.workDir, d.ioDir} {
		if err := os.Mkdir(p, 0o700); err != nil {
			return hostTrouble("create job directory", err)
		}
	}
	if fn.Spec.Sandbox && r.cfg.Jail != nil {
		if err := chownForJail(r.cfg.Jail, d.workDir, d.ioDir); err != nil {
			return err
		}
		switch size := r.diskOf(fn); {
		case size <= 0:
		case r.unbounded != nil && fn.Spec.Disk == 0:
			// The host's default on a host that cannot mount (New said so once): unbounded.
		case r.unbounded != nil:
			return terminal("disk: %s asks for `disk: %s`, but this host cannot bound a job's directory (%w); run the host as root with CAP_SYS_ADMIN, or drop the annotation", fn.Name, sandbox.FormatBytes(size), r.unbounded)
		default:
			uid, gid := r.cfg.Jail.Owner()
			if os.Geteuid() != 0 {
				uid, gid = os.Getuid(), os.Getgid()
			}
			tree, err := jailfs.MountTree(d.workDir, size, uid, gid)
			if err != nil {
				return hostTrouble("mount the job's directory", err)
			}
			d.tree = tree
		}
	}
	var err error
	if d.root, err = jailfs.Open(d.workDir); err != nil {
		return hostTrouble("open the job's directory", err)
	}
	if d.io, err = jailfs.Open(d.ioDir); err != nil {
		return hostTrouble("open the job's io directory", err)
	}
	return nil
}

// diskOf is the size of fn's job tree: its `disk:`, else the host's; 0 for none.
func (r *Runner) diskOf(fn *functions.Function) int64 {
	if fn.Spec.Disk > 0 {
		return fn.Spec.Disk
	}
	return max(r.cfg.JobDisk, 0)
}

// remove ends the job directory: its tree is unmounted (which frees everything in it at once)
// and what is left is removed without following any link. Safe to call more than once.
func (d *jobDir) remove() {
	if d == nil {
		return
	}
	d.removeOnce.Do(func() {
		d.root.Close()
		d.io.Close()
		_ = d.tree.Close()
		_ = os.RemoveAll(d.dir) // os.RemoveAll works through fds and removes links, never follows them
	})
}

// clearRunDir removes what jobs of a host that was killed left in the run directory: their
// trees first (and a mount probe's), which RemoveAll cannot remove while they are mounted.
func clearRunDir(runDir string) error {
	if err := jailfs.UnmountBeneath(runDir); err != nil {
		return fmt.Errorf("clear what killed jobs left in %s: %w", runDir, err)
	}
	leftovers, err := os.ReadDir(runDir)
	if err != nil {
		return fmt.Errorf("read run directory %s: %w", runDir, err)
	}
	for _, e := range leftovers {
		p := filepath.Join(runDir, e.Name())
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("clear what killed jobs left in %s: %w", runDir, err)
		}
	}
	return nil
}

// diskErr is the error of a run that filled its job tree, or that failed on a write refused
// for want of space; nil otherwise.
func (d *jobDir) diskErr(failed bool, stderrTail string, tmpSize int64) error {
	if d == nil || d.tree == nil {
		return nil
	}
	full := d.tree.Full()
	if !full && !(failed && strings.Contains(stderrTail, "No space left on device")) {
		return nil
	}
	if tmpSize <= 0 {
		tmpSize = sandbox.DefaultTmpSize
	}
	what := "the job's directory /job is full"
	if !full {
		what = "a write failed for want of space (No space left on device)"
	}
	return terminal("disk: %s: /job holds at most %s, volumes included, and /tmp %s (raise /job's with a `disk:` annotation, e.g. `disk: 8Gi`; the host's --job-disk sets the default, --job-tmp-size /tmp's)",
		what, sandbox.FormatBytes(d.tree.Size()), sandbox.FormatBytes(tmpSize))
}
