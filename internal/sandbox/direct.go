package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Direct runs commands unjailed, as the host user, for functions without
// sandbox: only the working directory, a cleared environment and a process
// group of their own set them apart. Spec.Mounts and Spec.Network are
// ignored; callers pass host paths. Spec.Limits are refused.
//
// The process group is killed at the timeout, on cancel, and once the
// command exits, so background children go with it; but a child that moved
// to a new session or group (setsid) escapes, as nothing like a pid
// namespace holds it. That containment is what Bwrap is for.
type Direct struct{}

var _ Jail = (*Direct)(nil)

// NewDirect returns the unjailed runner.
func NewDirect() *Direct { return &Direct{} }

// Name implements Jail.
func (d *Direct) Name() string { return "direct" }

// Start implements Jail. HOME defaults to WorkDir and PATH to the host's PATH
// (direct jobs may need tools such as pyenv's python found there); Argv[0]
// is looked up on the resulting PATH, relative entries against WorkDir.
// Spec.Limits must be zero: Direct enforces none (but the timeout), and a
// limit is never dropped silently.
func (d *Direct) Start(ctx context.Context, spec *Spec) (Handle, error) {
	t0 := time.Now()
	dir, err := validate(ctx, spec)
	if err != nil {
		return nil, err
	}
	if spec.Limits != (Limits{}) {
		return nil, errors.New("sandbox: resource limits need a jail: run the function sandboxed, or drop its limits")
	}
	env := newEnvMap(spec.Env)
	env.setDefault("HOME", dir)
	hostPath := os.Getenv("PATH")
	if hostPath == "" {
		hostPath = JailPath
	}
	env.setDefault("PATH", hostPath)

	path, err := lookPath(spec.Argv[0], env.vals["PATH"], dir)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	cmd := &exec.Cmd{
		Path:   path,
		Args:   spec.Argv,
		Env:    env.list(),
		Dir:    dir,
		Stdin:  spec.Stdin,
		Stdout: spec.Stdout,
		Stderr: spec.Stderr,
	}
	return startProcess(ctx, cmd, spec.Timeout, t0, noTree{}, true)
}

// lookPath finds file the way execvp would with the given PATH, as
// exec.LookPath only knows the host process's PATH and cwd.
func lookPath(file, path, dir string) (string, error) {
	if strings.Contains(file, "/") {
		p := file
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := checkExecutable(p); err != nil {
			return "", fmt.Errorf("%s: %w", file, err)
		}
		return p, nil
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "." // an empty PATH entry means the cwd
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		p := filepath.Join(d, file)
		if checkExecutable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w (PATH=%s)", file, exec.ErrNotFound, path)
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s: not an executable file", p)
	}
	return nil
}
