package packages

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agenthost/host/internal/manifest"
)

// installer is who the package managers run as, and the directory that is theirs.
type installer struct {
	uid, gid int
	// root: the host is root, and the package managers run as uid/gid, not as it.
	root bool
	// cred makes a command run as uid/gid; nil runs it as the host.
	cred *syscall.Credential
	// dir is <CacheDir>/.installer-<uid>: its HOME, download caches and temporary files,
	// which it alone writes (the host never reads them back).
	dir string
	// bwrap, when set, runs each command in a mount namespace of its own (see wrap); ""
	// runs it in the host's, where it may read what any user may.
	bwrap string
	// readOnly are host directories every command sees besides the system (find-links).
	readOnly []string
}

// newInstallerUser resolves the installer's user and makes its directory.
func newInstallerUser(cacheDir string, uid, gid int) (installer, error) {
	a := installer{root: os.Geteuid() == 0}
	if a.root {
		if uid == 0 && gid == 0 {
			uid, gid = DefaultUID, DefaultGID
		}
		// As the jail: a package manager run as root would read any file a manifest names.
		if uid <= 0 || gid <= 0 {
			return a, fmt.Errorf("packages: refusing to run package managers as uid %d gid %d: pick an unprivileged host user (Options.UID, GID)", uid, gid)
		}
		a.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	} else {
		uid, gid = os.Geteuid(), os.Getegid()
	}
	a.uid, a.gid = uid, gid
	a.dir = filepath.Join(cacheDir, ".installer-"+strconv.Itoa(uid))
	if err := a.mkdir(a.dir, true); err != nil {
		return a, err
	}
	for _, sub := range []string{"home", "tmp", "bun-cache", "pip-cache"} {
		if err := a.mkdir(filepath.Join(a.dir, sub), false); err != nil {
			return a, err
		}
	}
	return a, nil
}

// mkdir makes a directory of the installer's, 0700, unless it exists. Only the top one is
// checked when it exists: its parent is the host's, while what is inside it is the
// installer's own business, and is never followed (Mkdir does not follow a final link).
func (a installer) mkdir(p string, top bool) error {
	err := os.Mkdir(p, 0o700)
	switch {
	case err == nil:
		if a.root {
			if err := os.Lchown(p, a.uid, a.gid); err != nil {
				return fmt.Errorf("packages: hand %s to the installer's %s: %w", p, a, err)
			}
		}
		return nil
	case !errors.Is(err, fs.ErrExist):
		return fmt.Errorf("packages: create the installer's directory %s: %w", p, err)
	case !top:
		return nil
	}
	st, err := os.Lstat(p)
	if err != nil {
		return fmt.Errorf("packages: the installer's directory %s: %w", p, err)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !st.IsDir() || !ok || int(sys.Uid) != a.uid {
		return fmt.Errorf("packages: %s should be a directory of the installer's %s, and is not (%v): remove it, and the host makes it again", p, a, st.Mode())
	}
	return nil
}

func (a installer) String() string {
	if a.root {
		return fmt.Sprintf("uid %d gid %d", a.uid, a.gid)
	}
	return fmt.Sprintf("the host's own uid %d", a.uid)
}

// hint says what an installer that cannot start or read needs, on a root host.
func (a installer) hint() string {
	if !a.root {
		return ""
	}
	return fmt.Sprintf(" (package managers run as uid %d, not root: that user must be able to run the tool, so install it where everyone can, such as under /usr, and reach the package cache, so every parent of it needs o+x)", a.uid)
}

// deniedHint is hint for a tool's error output that says it was denied something.
func (a installer) deniedHint(msg string) string {
	low := strings.ToLower(msg)
	if strings.Contains(low, "permission denied") || strings.Contains(low, "eacces") || strings.Contains(low, "access denied") {
		return a.hint()
	}
	return ""
}

func (a installer) home() string                { return filepath.Join(a.dir, "home") }
func (a installer) tmp() string                 { return filepath.Join(a.dir, "tmp") }
func (a installer) cacheDir(tool string) string { return filepath.Join(a.dir, tool+"-cache") }

// command is a package manager's probe (--version and the like), run as installs run.
func (i *Installer) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	argv := i.as.wrap(append([]string{name}, args...), i.as.dir)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = i.as.dir
	cmd.Env = i.toolEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: i.as.cred}
	return cmd
}

// systemDirs are what every package manager sees of the host, read-only: the system, and
// /etc for names, certificates and the resolver (read as the installer's user, so what only
// root may read there stays hidden). The top-level links of merged-/usr hosts are kept links.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"}

// useBwrap sets up the mount namespace of the package managers if bubblewrap is at path and
// works for the installer's user here (it needs unprivileged user namespaces); otherwise the
// reason it is not used.
func (a *installer) useBwrap(path string, readOnly []string) error {
	p, err := exec.LookPath(path)
	if err != nil {
		return err
	}
	a.bwrap, a.readOnly = p, readOnly
	cmd := exec.Command(p, a.bwrapArgs([]string{"true"}, a.dir)[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: a.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		a.bwrap = ""
		return fmt.Errorf("%s as %s: %v: %s", p, a, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// wrap returns argv as it must be run with dir its working (and writable) directory: in a
// bubblewrap namespace that holds only the system, the installer's directory, dir, the
// find-links directories and the installation of the tool, all at their host paths (so that
// no argument needs rewriting); or argv itself without bubblewrap.
func (a installer) wrap(argv []string, dir string) []string {
	if a.bwrap == "" {
		return argv
	}
	return a.bwrapArgs(argv, dir)
}

func (a installer) bwrapArgs(argv []string, dir string) []string {
	args := []string{a.bwrap,
		// A namespace of each kind but the network's: the registry is out there.
		"--unshare-all", "--share-net",
		"--die-with-parent", "--new-session", "--cap-drop", "ALL",
	}
	for _, d := range systemDirs {
		st, err := os.Lstat(d)
		switch {
		case err != nil:
		case st.Mode()&fs.ModeSymlink != 0:
			if target, err := os.Readlink(d); err == nil {
				args = append(args, "--symlink", target, d)
			}
		case st.IsDir():
			args = append(args, "--ro-bind", d, d)
		}
	}
	// A resolver configuration linked out of /etc (systemd-resolved's /run/...) is bound too.
	if real, err := filepath.EvalSymlinks("/etc/resolv.conf"); err == nil && !underAny(real, systemDirs) {
		args = append(args, "--ro-bind", real, real)
	}
	args = append(args, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp")
	ro := append([]string(nil), a.readOnly...)
	// The tools' own installations (a pyenv or venv python, a bun under /opt): the parent of
	// their bin directory, for the binary and pip's --python interpreter.
	for k, arg := range argv {
		if k == 0 || k > 0 && argv[k-1] == "--python" {
			ro = append(ro, toolRoots(arg)...)
		}
	}
	for _, d := range ro {
		if !underAny(d, systemDirs) {
			args = append(args, "--ro-bind-try", d, d)
		}
	}
	args = append(args, "--bind", a.dir, a.dir)
	if dir != a.dir {
		args = append(args, "--bind", dir, dir)
	}
	args = append(args, "--chdir", dir, "--")
	return append(args, argv...)
}

// toolRoots are the installations a tool's path lies in: the parent of its bin directory,
// for the path as given and with its links resolved (a venv's python links to its base). A
// parent that is / or a top-level directory (/srv/bin/bun) would show far more than the tool:
// then only the file itself is bound.
func toolRoots(p string) []string {
	if !filepath.IsAbs(p) {
		return nil
	}
	var roots []string
	for _, q := range []string{p, resolved(p)} {
		root := filepath.Dir(filepath.Dir(q))
		if strings.Count(root, "/") < 2 {
			root = q
		}
		roots = append(roots, root)
	}
	return roots
}

func resolved(p string) string {
	if real, err := filepath.EvalSymlinks(p); err == nil {
		return real
	}
	return p
}

// underAny reports whether p is one of dirs or beneath one.
func underAny(p string, dirs []string) bool {
	for _, d := range dirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// handOver gives the staging directory dir to the installer: the only place it may write
// besides its own directory. What the host wrote into it stays the host's, readable.
func (a installer) handOver(dir string) error {
	if !a.root {
		return nil
	}
	if err := os.Lchown(dir, a.uid, a.gid); err != nil {
		return fmt.Errorf("hand the install directory %s to the installer's %s: %w", dir, a, err)
	}
	return nil
}

// seal takes the finished install in dir back from the installer: every file and folder
// becomes the host's (on a root host), readable by all and writable by the host alone, so
// that the installer's user cannot change an install after the fact. It works through file
// descriptors and never follows a link, since the installer made the tree; and it refuses,
// before changing anything of it, a regular file with another hard link (its mode is that of
// a file elsewhere too), and a fifo, socket or device.
func (a installer) seal(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	return a.sealDir(fd, dir)
}

func (a installer) sealDir(fd int, path string) error {
	defer unix.Close(fd)
	if err := a.take(fd, path); err != nil {
		return err
	}
	names, err := readNames(fd)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	for _, name := range names {
		p := filepath.Join(path, name)
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("stat %s: %w", p, err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			// Left pointing where it points: inside the jail it resolves in the jail's view.
			if a.root {
				if err := unix.Fchownat(fd, name, os.Getuid(), os.Getgid(), unix.AT_SYMLINK_NOFOLLOW); err != nil {
					return fmt.Errorf("chown the link %s: %w", p, err)
				}
			}
		case unix.S_IFDIR:
			sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("open %s: %w", p, err)
			}
			if err := a.sealDir(sub, p); err != nil {
				return err
			}
		case unix.S_IFREG:
			// O_NONBLOCK: should it have become a fifo since, the open must not hang.
			f, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("open %s: %w", p, err)
			}
			err = a.take(f, p)
			unix.Close(f)
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s is a %s: an install holds only files, folders and links", p, fileType(st.Mode))
		}
	}
	return nil
}

// take makes the open file or folder fd the host's and readable by all, after checking
// through fd itself that it is one, and that a file has no other hard link.
func (a installer) take(fd int, path string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	typ := st.Mode & unix.S_IFMT
	if typ != unix.S_IFREG && typ != unix.S_IFDIR {
		return fmt.Errorf("%s is a %s: an install holds only files, folders and links", path, fileType(st.Mode))
	}
	if typ == unix.S_IFREG && st.Nlink != 1 {
		return fmt.Errorf("%s has %d hard links: it shares its inode with a file outside the install, whose mode and owner must not change; "+
			"the install is dropped (an install's files are copies: check the function's manifests for a dependency that is not its own)", path, st.Nlink)
	}
	if a.root {
		if err := unix.Fchown(fd, os.Getuid(), os.Getgid()); err != nil {
			return fmt.Errorf("chown %s: %w", path, err)
		}
	}
	// The jail runs as another uid, and package managers create files through the umask
	// (a strict one, 077, would hide them). Only permission bits: setuid, setgid and sticky go.
	perm := st.Mode & 0o777
	want := perm&^0o022 | 0o444
	if typ == unix.S_IFDIR || perm&0o100 != 0 {
		want |= 0o111
	}
	if want != st.Mode&0o7777 {
		if err := unix.Fchmod(fd, want); err != nil {
			return fmt.Errorf("chmod %s: %w", path, err)
		}
	}
	return nil
}

// readNames lists the directory open as fd, leaving fd open.
func readNames(fd int) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	unix.CloseOnExec(dup)
	f := os.NewFile(uintptr(dup), "")
	defer f.Close()
	return f.Readdirnames(-1)
}

func fileType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	}
	return fmt.Sprintf("file of type %o", mode&unix.S_IFMT)
}

// copyLocal copies the local source rel (a folder or a file the manifests name, checked to be
// inside codeDir) from codeDir to the same place under dst, where the package manager finds
// it as the manifest says. Links are copied as links (they were checked to stay inside);
// fifos and devices are left out.
func copyLocal(codeDir, rel, dst string) error {
	src, err := resolveLocalSource(codeDir, rel)
	if err != nil {
		return err
	}
	target := filepath.Join(dst, rel)
	if _, err := os.Lstat(target); err == nil {
		return nil // inside a local folder copied already
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		r, _ := filepath.Rel(src, p)
		to := filepath.Join(target, r)
		switch {
		case d.IsDir():
			return os.Mkdir(to, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(link, to)
		case d.Type().IsRegular():
			return copyRegular(p, to)
		}
		return nil
	})
}

// resolveLocalSource is rel inside codeDir with links resolved, refused if that leaves it.
func resolveLocalSource(codeDir, rel string) (string, error) {
	root, err := filepath.EvalSymlinks(codeDir)
	if err != nil {
		return "", err
	}
	src, err := filepath.EvalSymlinks(filepath.Join(root, rel))
	if err != nil {
		return "", err
	}
	if !manifest.Within(root, src) || src == root {
		return "", fmt.Errorf("%s leads out of the function folder", rel)
	}
	return src, nil
}

func copyRegular(from, to string) error {
	in, err := os.OpenFile(from, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", from)
	}
	mode := os.FileMode(0o644)
	if st.Mode().Perm()&0o100 != 0 {
		mode = 0o755
	}
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// hashLocal hashes a local source as copyLocal copies it: paths, kinds, execute bits,
// contents and link targets, so that editing a vendored package makes a new install.
func hashLocal(codeDir, rel string) (string, error) {
	src, err := resolveLocalSource(codeDir, rel)
	if err != nil {
		return "", fmt.Errorf("local dependency %s: %w", rel, err)
	}
	h := sha256.New()
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		r, _ := filepath.Rel(src, p)
		switch {
		case d.IsDir():
			fmt.Fprintf(h, "d\x00%s\x00", r)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "l\x00%s\x00%s\x00", r, link)
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "f\x00%s\x00%o\x00%d\x00", r, info.Mode().Perm()&0o100, info.Size())
			f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := io.Copy(h, f); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hash local dependency %s: %w", rel, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
