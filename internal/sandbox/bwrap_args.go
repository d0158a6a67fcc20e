package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

// args returns the bwrap arguments (without the binary) that jail spec,
// and the host files that Start must open, in order, from etcFirstFD on;
// spec.WorkDir must be absolute (Start makes it so). Start adds only
// "--info-fd 3" in front, to track the jail's init, when hardened
// "--block-fd 4 --seccomp 5" (see Bwrap), and "--args N" for the
// environment, which is never among the arguments (see envArgs). The
// curated /etc files are copied in from descriptors that Start opens and
// passes from etcFirstFD on (see jailArgs).
func (b *Bwrap) args(spec *Spec) (a, copied []string) {
	a, copied = b.jailArgs(spec.Network, spec.Limits.withDefaults())
	// bwrap creates missing mount points, so /job needs no --dir.
	a = append(a, "--bind", spec.WorkDir, JobDir)
	for _, m := range spec.Mounts {
		op := "--ro-bind"
		if m.Writable {
			op = "--bind"
		}
		a = append(a, op, m.Source, m.Target)
	}
	a = append(a, b.roArgs()...)
	a = append(a, "--chdir", JobDir)
	a = append(a, "--")
	return append(a, spec.Argv...), copied
}

// roArgs come last, once every mount point has been created: the root
// tmpfs bwrap builds on is otherwise writable, and "system directories
// read-only" includes /etc and the top level. Hardened, /dev goes
// read-only too: its tmpfs has no size limit (device nodes stay usable).
func (b *Bwrap) roArgs() []string {
	if b.hardened {
		return []string{"--remount-ro", "/dev", "--remount-ro", "/"}
	}
	return []string{"--remount-ro", "/"}
}

// etcFirstFD is the descriptor of the first /etc file Start passes to
// bwrap: after --info-fd 3, when hardened --block-fd 4 and --seccomp 5, and
// the --args pipe.
func (b *Bwrap) etcFirstFD() int {
	if b.hardened {
		return 7
	}
	return 5
}

// jailArgs is everything but the job-specific part: namespaces, identity,
// and the read-only system. lim has its defaults filled in. copied are the
// /etc files that bwrap copies from descriptors (see etcFirstFD).
func (b *Bwrap) jailArgs(network Network, lim Limits) (a, copied []string) {
	a = []string{
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
		// (The kernel ties this to the thread that forked bwrap. Go only
		// ends a thread when a goroutine exits while locked to it, which
		// is why the threads this package locks are unlocked again; and
		// Start must not be called from a goroutine that exits locked.)
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
		// A file anyone may read is copied into the jail's root (read-only
		// once / is remounted) rather than bound: each bind costs bwrap a
		// mount and a reread of the growing mount table, ~0.1 ms apiece,
		// 2-3 ms a job for the two dozen files here. Directories, and files
		// the jail's user may not read, are still bound: a copy made by a
		// root host would hand their content over.
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o004 != 0 {
			a = append(a, "--file", strconv.Itoa(b.etcFirstFD()+len(copied)), p)
			copied = append(copied, p)
			continue
		}
		a = append(a, "--ro-bind-try", p, p)
	}
	// A new procfs for the jail's pid namespace: only the job's processes.
	a = append(a, "--proc", "/proc", "--dev", "/dev")
	if !b.hardened {
		return append(a, "--tmpfs", "/tmp"), copied
	}
	size := strconv.FormatInt(lim.TmpSize, 10)
	return append(a,
		"--size", size, "--tmpfs", "/tmp",
		// Over --dev's own /dev/shm directory, which is on /dev's tmpfs.
		"--size", size, "--tmpfs", "/dev/shm",
	), copied
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
