package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// JobDir is where Spec.WorkDir appears inside the jail.
	JobDir = "/job"
	// Hostname is the jail's fixed host name: the host's name says where a
	// job runs, which is none of the job's business.
	Hostname = "job"
	// JailPath is the PATH a jailed command gets when Spec.Env has none.
	JailPath = "/usr/local/bin:/usr/bin:/bin"
	// DefaultUID and DefaultGID (nobody/nogroup) are the host ids the jail
	// runs as when the host runs as root.
	DefaultUID = 65534
	DefaultGID = 65534
)

// rootLinks are the top-level system paths that merged-/usr hosts make
// symlinks into /usr and older hosts keep as directories.
var rootLinks = []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// etcFiles is the curated, read-only /etc: what common programs need to
// resolve names, load libraries, verify TLS and tell the time, and nothing
// that can hold secrets (no shadow, gshadow, ssl/private, pip.conf, npmrc,
// gitconfig, machine-id...). Missing entries are skipped.
var etcFiles = []string{
	"passwd", "group", // names for ls/id; the hashes live in shadow
	"hosts", "host.conf", "resolv.conf", "nsswitch.conf", "gai.conf",
	"services", "protocols", "networks", "rpc",
	"ld.so.cache", "ld.so.conf", "ld.so.conf.d",
	"localtime", "timezone",
	"ssl/certs", "ssl/openssl.cnf", "ca-certificates", "ca-certificates.conf",
	"pki/tls/certs", "pki/ca-trust/extracted",
	"alternatives",
	"mime.types", "magic", "magic.mime", "fonts",
	"os-release", "debian_version", "lsb-release",
	"locale.alias",
}

// loaderVars are read by the dynamic loader and libc of bwrap itself, which
// runs on the host, outside any namespace, before it sets up the jail. A job
// declaring LD_PRELOAD=<host path of a file in its /job> would otherwise run
// its own code on the host. They are glibc's "unsecure" variables (the ones
// it drops for setuid programs) plus every LD_*; they reach the jail through
// --setenv instead, so they do show on bwrap's command line.
var loaderVars = map[string]bool{
	"GCONV_PATH": true, "GETCONF_DIR": true, "GLIBC_TUNABLES": true,
	"HOSTALIASES": true, "LOCALDOMAIN": true, "LOCPATH": true,
	"MALLOC_TRACE": true, "NIS_PATH": true, "NLSPATH": true,
	"RESOLV_HOST_CONF": true, "RES_OPTIONS": true, "TMPDIR": true, "TZDIR": true,
}

func isLoaderVar(k string) bool { return strings.HasPrefix(k, "LD_") || loaderVars[k] }

// Bwrap is a Jail backed by bubblewrap. It is safe for concurrent use.
type Bwrap struct {
	path     string
	uid, gid int  // host ids the jail runs as (also its ids inside)
	dropRoot bool // the host is root: start bwrap as uid/gid
}

var _ Jail = (*Bwrap)(nil)

// Option configures NewBwrap.
type Option func(*Bwrap)

// WithPath sets the bwrap binary; the default is "bwrap" on the PATH.
func WithPath(bwrapPath string) Option { return func(b *Bwrap) { b.path = bwrapPath } }

// WithUser sets the host uid/gid the jail runs as when the host runs as root
// (default 65534/65534). It has no effect when the host is not root: an
// unprivileged host runs jails as itself.
func WithUser(uid, gid int) Option { return func(b *Bwrap) { b.uid, b.gid = uid, gid } }

// NewBwrap finds bubblewrap and checks that it can build a jail on this host
// (user namespaces may be disabled). A missing bwrap is ErrNoJail.
func NewBwrap(opts ...Option) (*Bwrap, error) {
	b := &Bwrap{uid: DefaultUID, gid: DefaultGID}
	for _, o := range opts {
		o(b)
	}
	if b.path == "" {
		p, err := exec.LookPath("bwrap")
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrNoJail, err)
		}
		b.path = p
	}
	if p, err := exec.LookPath(b.path); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoJail, err)
	} else if b.path, err = filepath.Abs(p); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoJail, err)
	}

	if os.Geteuid() == 0 {
		// bwrap started by root maps the jail's uid to host root, so even
		// "nobody" inside could read root's 0600 files through any bind.
		// Starting bwrap as an unprivileged host uid maps the jail's uid
		// to that uid instead.
		if b.uid <= 0 || b.gid <= 0 {
			return nil, fmt.Errorf("sandbox: refusing to run jails as uid %d gid %d: pick an unprivileged host user", b.uid, b.gid)
		}
		b.dropRoot = true
	} else {
		b.uid, b.gid = os.Geteuid(), os.Getegid()
	}

	if err := b.probe(); err != nil {
		return nil, err
	}
	return b, nil
}

// probe runs `true` in a jail built like a job's, so that a host where
// bwrap cannot work (no user namespaces, seccomp or AppArmor policy) is
// reported once, clearly, instead of as every job's stderr.
func (b *Bwrap) probe() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := b.jailArgs(NetworkNone)
	args = append(args, "--remount-ro", "/", "--chdir", "/", "--", "true")
	cmd := exec.CommandContext(ctx, b.path, args...)
	cmd.Env = []string{"PATH=" + JailPath}
	cmd.Dir = "/"
	cmd.SysProcAttr = b.sysProcAttr()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("sandbox: %s cannot build a jail on this host (a sandbox function never runs unjailed): %v: %s",
			b.path, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Name implements Jail.
func (b *Bwrap) Name() string { return "bwrap" }

// Owner returns the host uid/gid the jailed command runs as. It must be able
// to write WorkDir and Writable mounts, and to traverse to every mount Source
// and to WorkDir: when the host is root, the caller chowns what it creates
// (and keeps the parents at least 0711).
func (b *Bwrap) Owner() (uid, gid int) { return b.uid, b.gid }

// Path returns the bwrap binary in use.
func (b *Bwrap) Path() string { return b.path }

// Args returns the bwrap arguments (without the binary) that jail spec;
// spec.WorkDir must be absolute (Run makes it so). Run adds only
// "--info-fd 3" in front, to track the jail's init. The
// environment is not among them (it would show in the host's
// /proc/PID/cmdline): Run hands it to bwrap as bwrap's own environment,
// which bwrap passes on to the command. Only loader variables (see
// loaderVars) appear, as --setenv.
func (b *Bwrap) Args(spec *Spec) []string {
	a := b.jailArgs(spec.Network)
	// bwrap creates missing mount points, so /job needs no --dir.
	a = append(a, "--bind", spec.WorkDir, JobDir)
	for _, m := range spec.Mounts {
		op := "--ro-bind"
		if m.Writable {
			op = "--bind"
		}
		a = append(a, op, m.Source, m.Target)
	}
	// Last, once every mount point has been created: the root tmpfs bwrap
	// builds on is otherwise writable, and "system directories read-only"
	// includes /etc and the top level.
	a = append(a, "--remount-ro", "/", "--chdir", JobDir)
	env := jailEnv(spec.Env)
	for _, k := range env.keys {
		if isLoaderVar(k) {
			a = append(a, "--setenv", k, env.vals[k])
		}
	}
	a = append(a, "--")
	return append(a, spec.Argv...)
}

// jailArgs is everything but the job-specific part: namespaces, identity,
// and the read-only system.
func (b *Bwrap) jailArgs(network Network) []string {
	a := []string{
		"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
	}
	if network != NetworkHost {
		a = append(a, "--unshare-net")
	}
	a = append(a,
		// Nested user namespaces are kernel attack surface a job has no use for.
		"--disable-userns",
		"--uid", strconv.Itoa(b.uid), "--gid", strconv.Itoa(b.gid),
		"--hostname", Hostname,
		// The jail goes when bwrap goes, and bwrap when the host does.
		// (The kernel ties this to the forking thread; Go only ends a
		// thread when a goroutine exits while locked to it, so Run must
		// not be called from a goroutine that does that.)
		"--die-with-parent",
		// A new session keeps the job from pushing input into a terminal
		// it inherited (TIOCSTI).
		"--new-session",
		"--cap-drop", "ALL",
		"--ro-bind", "/usr", "/usr",
	)
	for _, p := range rootLinks {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(p); err == nil {
				a = append(a, "--symlink", target, p)
			}
		case fi.IsDir():
			a = append(a, "--ro-bind", p, p)
		}
	}
	a = append(a, "--perms", "0755", "--dir", "/etc")
	for _, name := range etcFiles {
		p := "/etc/" + name
		// Keep a symlink into /usr a symlink (programs read the zone name
		// from /etc/localtime's target); bind the content of any other
		// (resolv.conf -> /run/...), whose target is not in the jail.
		if target, ok := usrSymlink(p); ok {
			a = append(a, "--symlink", target, p)
			continue
		}
		a = append(a, "--ro-bind-try", p, p)
	}
	return append(a,
		"--proc", "/proc",
		"--dev", "/dev",
		"--tmpfs", "/tmp",
	)
}

// usrSymlink reports whether p is a symlink that resolves into /usr, and
// its link text.
func usrSymlink(p string) (string, bool) {
	target, err := os.Readlink(p)
	if err != nil {
		return "", false
	}
	resolved, err := filepath.EvalSymlinks(p)
	if err != nil || !strings.HasPrefix(resolved, "/usr/") {
		return "", false
	}
	return target, true
}

// jailEnv is spec's environment with the jail's defaults.
func jailEnv(env []string) *envMap {
	m := newEnvMap(env)
	m.setDefault("HOME", JobDir)
	m.setDefault("PATH", JailPath)
	return m
}

func (b *Bwrap) sysProcAttr() *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{}
	if b.dropRoot {
		// An empty Groups clears root's supplementary groups too.
		attr.Credential = &syscall.Credential{Uid: uint32(b.uid), Gid: uint32(b.gid), Groups: []uint32{}}
	}
	return attr
}

// Run implements Jail. A command that bwrap cannot find or exec inside the
// jail is reported by bwrap on Stderr with exit code 1, not as an error:
// the jail's PATH is only known inside it.
func (b *Bwrap) Run(ctx context.Context, spec *Spec) (*Result, error) {
	t0 := time.Now()
	dir, err := validate(ctx, spec)
	if err != nil {
		return nil, err
	}
	if err := validateMounts(spec.Mounts); err != nil {
		return nil, err
	}
	switch spec.Network {
	case NetworkNone, NetworkHost:
	default:
		return nil, fmt.Errorf("sandbox: unsupported network mode %v", spec.Network)
	}
	s := *spec
	s.WorkDir = dir

	// bwrap reports the host pid of the jail's init on an info fd. The init
	// runs in its own session, outside our process group; knowing it lets
	// Run kill it directly and wait until the pid namespace is torn down.
	infoR, infoW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	args := append([]string{"--info-fd", "3"}, b.Args(&s)...)

	procEnv := []string{}
	env := jailEnv(spec.Env)
	for _, k := range env.keys {
		if !isLoaderVar(k) {
			procEnv = append(procEnv, k+"="+env.vals[k])
		}
	}
	cmd := &exec.Cmd{
		Path:        b.path,
		Args:        append([]string{b.path}, args...),
		Env:         procEnv,
		Dir:         "/", // the host's cwd may be closed to the jail's uid
		Stdin:       spec.Stdin,
		Stdout:      spec.Stdout,
		Stderr:      spec.Stderr,
		ExtraFiles:  []*os.File{infoW},
		SysProcAttr: b.sysProcAttr(),
	}
	hook := &bwrapTree{init: newJailInit(infoR), infoW: infoW}
	res, err := supervise(ctx, cmd, spec.Timeout, t0, hook)
	hook.closeW() // when bwrap did not start
	hook.init.release()
	return res, err
}

// bwrapTree is the tree of a bwrap job outside bwrap's process group: the
// jail's init and everything in its pid namespace.
type bwrapTree struct {
	init  *jailInit
	infoW *os.File
	once  sync.Once
}

// closeW drops Run's copy of the info fd's write end, so that the reader
// sees EOF if bwrap dies before writing.
func (h *bwrapTree) closeW() { h.once.Do(func() { h.infoW.Close() }) }

func (h *bwrapTree) started()                 { h.closeW(); go h.init.watch() }
func (h *bwrapTree) kill()                    { h.init.kill() }
func (h *bwrapTree) wait(bound time.Duration) { h.init.wait(bound) }

// jailInit tracks the jail's init process through a pidfd, which, unlike a
// pid, cannot come to name another process.
type jailInit struct {
	info  io.ReadCloser
	known chan struct{} // closed once fd is set or known to be unavailable

	mu     sync.Mutex
	fd     int // pidfd, -1 if none
	closed bool
}

func newJailInit(info io.ReadCloser) *jailInit {
	return &jailInit{info: info, known: make(chan struct{}), fd: -1}
}

// watch reads the init's pid from bwrap's info fd and opens a pidfd for it.
func (j *jailInit) watch() {
	defer close(j.known)
	var info struct {
		ChildPid int `json:"child-pid"`
	}
	if err := json.NewDecoder(j.info).Decode(&info); err != nil || info.ChildPid <= 0 {
		return // bwrap died before building the jail: nothing inside to wait for
	}
	// The init cannot have been reaped and its pid reused yet in any
	// realistic schedule: bwrap writes the info right after creating it.
	fd, err := unix.PidfdOpen(info.ChildPid, 0)
	if err != nil {
		return // already gone
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		unix.Close(fd)
		return
	}
	j.fd = fd
}

func (j *jailInit) kill() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.fd >= 0 {
		_ = unix.PidfdSendSignal(j.fd, unix.SIGKILL, nil, 0)
	}
}

// wait blocks until the init has exited. The kernel reaps every other
// process of a pid namespace before its init finishes exiting, so then the
// whole jail is gone.
func (j *jailInit) wait(bound time.Duration) {
	deadline := time.Now().Add(bound)
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case <-j.known:
	case <-timer.C:
		return
	}
	j.mu.Lock()
	fd := j.fd
	j.mu.Unlock()
	if fd < 0 {
		return
	}
	for {
		ms := int(time.Until(deadline) / time.Millisecond)
		if ms <= 0 {
			return
		}
		// A pidfd polls readable once its process has exited.
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, ms)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n > 0 {
			return
		}
	}
}

// release closes the pidfd and unblocks a watch still reading the info fd.
func (j *jailInit) release() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.closed = true
	if j.fd >= 0 {
		unix.Close(j.fd)
		j.fd = -1
	}
	j.info.Close()
}

// validateMounts rejects mounts bwrap would misread or that would cover the
// whole jail. Sources must exist: bwrap's own error would be less clear.
func validateMounts(mounts []Mount) error {
	for _, m := range mounts {
		if !filepath.IsAbs(m.Source) || !filepath.IsAbs(m.Target) {
			return fmt.Errorf("sandbox: mount %s -> %s: paths must be absolute", m.Source, m.Target)
		}
		if filepath.Clean(m.Target) != m.Target || m.Target == "/" {
			return fmt.Errorf("sandbox: mount %s -> %s: target must be a clean path below /", m.Source, m.Target)
		}
		if _, err := os.Stat(m.Source); err != nil {
			return fmt.Errorf("sandbox: mount %s -> %s: %w", m.Source, m.Target, err)
		}
	}
	return nil
}
