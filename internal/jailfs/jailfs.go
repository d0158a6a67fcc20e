// Package jailfs is how the host touches a tree that a jail can write: a job's directory (its
// /job, the volumes checked out in it) and its io directory.
//
// The rule: the host opens nothing under a jail-writable tree by path. The host runs as root
// and outside the jail; the jail runs as another user but can put a symbolic link, a fifo or a
// device node anywhere in its tree, at any moment, and a path that the host resolves would
// follow it out of the tree (to the host's own files) or block on it. So every operation here
// starts from a directory the host opened itself (Dir) and resolves what is beneath it with
// openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS), or, on kernels without
// openat2, one component at a time with O_NOFOLLOW. A path that crosses a link fails with an
// error wrapping ErrLink and naming the path; nothing outside the tree is read, written, moved
// or changed. The last component of an operation is never followed either: Lstat, Lchown,
// Chmod and Open all act on the entry itself, and Open adds O_NOFOLLOW.
//
// Files the host reads from a jail (result.json, error.json) go through ReadRegular: opened
// without following a link and without blocking, accepted only if fstat says it is a regular
// file, and read up to a bound.
//
// Tree (tree.go) bounds how much a job's tree may hold: a size-limited tmpfs that the host
// mounts before the jail starts, so a job that fills it gets ENOSPC inside the jail and the
// host's disk is untouched.
package jailfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrLink is wrapped by every error of a path that crosses a symbolic link (or a magic link)
// or climbs out of its Dir.
var ErrLink = errors.New("the path crosses a symbolic link or leaves its directory; the host never follows links in a job's tree")

// ErrNotRegular is wrapped by ReadRegular's error for an entry that is not a regular file (a
// link, a fifo, a device, a directory, a socket).
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is wrapped by ReadRegular's error for a file over its bound.
var ErrTooLarge = errors.New("file too large")

// maxRetries bounds the retries of an openat2 interrupted or raced by a rename.
const maxRetries = 64

// noOpenat2 is set once the kernel said it has no openat2 (ENOSYS): from then on paths are
// walked one component at a time. Tests set it to exercise the walk.
var noOpenat2 atomic.Bool

// Dir is an open directory: the root of what its methods may reach.
type Dir struct {
	f    *os.File
	name string // the host path it was opened as, for messages only: never resolved again
}

// Open opens dir, a directory whose path the host controls end to end (its run directory, a
// cache directory), as a Dir. The last component must not be a link.
func Open(dir string) (*Dir, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open directory", Path: dir, Err: linkErr(err)}
	}
	return &Dir{f: os.NewFile(uintptr(fd), dir), name: dir}, nil
}

// Name returns the host path the Dir was opened as, for messages.
func (d *Dir) Name() string { return d.name }

// Close closes the directory.
func (d *Dir) Close() error {
	if d == nil || d.f == nil {
		return nil
	}
	return d.f.Close()
}

func (d *Dir) fd() int { return int(d.f.Fd()) }

// display is rel as a message shows it: under the Dir's host path.
func (d *Dir) display(rel string) string {
	if rel == "" || rel == "." {
		return d.name
	}
	return d.name + "/" + rel
}

// clean checks that rel is a relative path that stays beneath its Dir as written. "" and "."
// are the Dir itself.
func clean(rel string) (string, error) {
	if rel == "" {
		return ".", nil
	}
	if strings.HasPrefix(rel, "/") || strings.IndexByte(rel, 0) >= 0 {
		return "", fmt.Errorf("%q is not a relative path: %w", rel, ErrLink)
	}
	c := path.Clean(rel)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%q climbs out of its directory: %w", rel, ErrLink)
	}
	return c, nil
}

// linkErr turns the errors with which resolution refuses a link into ErrLink.
func linkErr(err error) error {
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		return fmt.Errorf("%w (%w)", ErrLink, err)
	}
	return err
}

// openat opens rel beneath d with flags (O_NOFOLLOW and O_CLOEXEC added) and returns the fd.
func (d *Dir) openat(rel string, flags int, mode uint32) (int, error) {
	rel, err := clean(rel)
	if err != nil {
		return -1, err
	}
	flags |= unix.O_NOFOLLOW | unix.O_CLOEXEC
	if !noOpenat2.Load() {
		how := &unix.OpenHow{Flags: uint64(flags), Mode: uint64(mode),
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
		for tries := 0; ; tries++ {
			fd, err := unix.Openat2(d.fd(), rel, how)
			switch {
			case err == nil:
				return fd, nil
			case (errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN)) && tries < maxRetries:
				// EAGAIN: a rename raced the lookup and the kernel asks to retry; a jail that
				// renames in a loop must not keep the host here, so only so often.
				continue
			case errors.Is(err, unix.ENOSYS):
				noOpenat2.Store(true)
			case errors.Is(err, unix.ENOTDIR) && d.crossesLink(rel):
				return -1, linkErr(unix.ELOOP)
			default:
				return -1, linkErr(err)
			}
			break
		}
	}
	return d.walkOpen(rel, flags, mode)
}

// walkOpen is openat2 for kernels without it: every directory on the way is opened with
// O_NOFOLLOW, so a link anywhere fails with ELOOP (or ENOTDIR), as RESOLVE_NO_SYMLINKS does.
func (d *Dir) walkOpen(rel string, flags int, mode uint32) (int, error) {
	if rel == "." {
		return unix.Openat(d.fd(), ".", flags, mode)
	}
	parts := strings.Split(rel, "/")
	at, owned := d.fd(), false
	defer func() {
		if owned {
			unix.Close(at)
		}
	}()
	for _, p := range parts[:len(parts)-1] {
		if p == "." {
			continue
		}
		fd, err := unix.Openat(at, p, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, unix.ENOTDIR) && d.isLink(at, p) {
				err = unix.ELOOP
			}
			return -1, linkErr(err)
		}
		if owned {
			unix.Close(at)
		}
		at, owned = fd, true
	}
	last := parts[len(parts)-1]
	fd, err := unix.Openat(at, last, flags, mode)
	if errors.Is(err, unix.ENOTDIR) && d.isLink(at, last) {
		err = unix.ELOOP
	}
	return fd, linkErr(err)
}

// crossesLink reports whether a component of rel is a symbolic link: O_DIRECTORY|O_NOFOLLOW
// on a link says ENOTDIR, not ELOOP, and the caller should hear which. Only an error path
// asks, so it may walk.
func (d *Dir) crossesLink(rel string) bool {
	at, owned := d.fd(), false
	defer func() {
		if owned {
			unix.Close(at)
		}
	}()
	for _, p := range strings.Split(rel, "/") {
		if p == "." {
			continue
		}
		if d.isLink(at, p) {
			return true
		}
		fd, err := unix.Openat(at, p, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return false
		}
		if owned {
			unix.Close(at)
		}
		at, owned = fd, true
	}
	return false
}

// lastIsLink reports whether rel's own last component is a link (and not one on the way).
func (d *Dir) lastIsLink(rel string) bool {
	p, base, err := d.parent(rel)
	if err != nil {
		return false
	}
	defer p.Close()
	return p.isLink(p.fd(), base)
}

// isLink reports whether name in the directory at is a symbolic link.
func (d *Dir) isLink(at int, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(at, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
}

// parent opens the directory holding rel's last component and returns it with that name.
// The caller closes the Dir.
func (d *Dir) parent(rel string) (*Dir, string, error) {
	rel, err := clean(rel)
	if err != nil {
		return nil, "", err
	}
	if rel == "." {
		return nil, "", fmt.Errorf("%s: the directory itself has no name in it", d.name)
	}
	dir, base := path.Split(rel)
	p, err := d.OpenDir(strings.TrimSuffix(dir, "/"))
	if err != nil {
		return nil, "", err
	}
	return p, base, nil
}

func (d *Dir) pathErr(op, rel string, err error) error {
	if err == nil {
		return nil
	}
	return &fs.PathError{Op: op, Path: d.display(rel), Err: err}
}

// OpenDir opens the directory rel beneath d.
func (d *Dir) OpenDir(rel string) (*Dir, error) {
	fd, err := d.openat(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, d.pathErr("open directory", rel, err)
	}
	name := d.display(rel)
	return &Dir{f: os.NewFile(uintptr(fd), name), name: name}, nil
}

// OpenFile opens the file rel beneath d, never through a link. O_NONBLOCK is added to read-only
// opens so that a fifo cannot block the host; it is cleared again for a regular file.
func (d *Dir) OpenFile(rel string, flag int, perm fs.FileMode) (*os.File, error) {
	nonblock := flag&(unix.O_WRONLY|unix.O_RDWR) == 0
	if nonblock {
		flag |= unix.O_NONBLOCK
	}
	fd, err := d.openat(rel, flag, uint32(perm.Perm()))
	if err != nil {
		return nil, d.pathErr("open", rel, err)
	}
	if nonblock {
		// A regular file reads the same blocking or not; keeping O_NONBLOCK would only make
		// os.File poll it.
		if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err == nil {
			_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_NONBLOCK)
		}
	}
	return os.NewFile(uintptr(fd), d.display(rel)), nil
}

// OpenRegular opens rel read-only and returns it only if it is a regular file.
func (d *Dir) OpenRegular(rel string) (*os.File, fs.FileInfo, error) {
	f, err := d.OpenFile(rel, os.O_RDONLY, 0)
	if err != nil {
		return nil, nil, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, d.pathErr("stat", rel, err)
	}
	if !info.Mode().IsRegular() {
		f.Close()
		return nil, nil, d.pathErr("open", rel, fmt.Errorf("%w (it is %s)", ErrNotRegular, describeMode(info.Mode())))
	}
	return f, info, nil
}

// ReadRegular reads the regular file rel, of at most max bytes. A link, a fifo, a device or
// any other kind of entry fails with ErrNotRegular, a file over max with ErrTooLarge; an
// absent one with fs.ErrNotExist. A link is refused without being followed (O_NOFOLLOW gives
// ELOOP on it, reported as ErrNotRegular), a fifo without waiting for a writer.
func (d *Dir) ReadRegular(rel string, max int64) ([]byte, error) {
	f, info, err := d.OpenRegular(rel)
	if errors.Is(err, ErrLink) && d.lastIsLink(rel) {
		return nil, d.pathErr("open", rel, fmt.Errorf("%w (it is a symbolic link)", ErrNotRegular))
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if info.Size() > max {
		return nil, d.pathErr("read", rel, fmt.Errorf("%w: %d bytes, over the limit of %d", ErrTooLarge, info.Size(), max))
	}
	// One byte past the bound: a file that grows while it is read is still caught.
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, d.pathErr("read", rel, err)
	}
	if int64(len(data)) > max {
		return nil, d.pathErr("read", rel, fmt.Errorf("%w: over the limit of %d bytes", ErrTooLarge, max))
	}
	return data, nil
}

// WriteFile creates rel (it must not exist) with data and mode perm.
func (d *Dir) WriteFile(rel string, data []byte, perm fs.FileMode) error {
	f, err := d.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return d.pathErr("write", rel, err)
}

// Lstat describes the entry rel itself, a link included.
func (d *Dir) Lstat(rel string) (fs.FileInfo, error) {
	p, base, err := d.parent(rel)
	if err != nil {
		if rel, cerr := clean(rel); cerr == nil && rel == "." {
			info, err := d.f.Stat()
			return info, d.pathErr("stat", rel, err)
		}
		return nil, err
	}
	defer p.Close()
	return p.lstatName(base)
}

// lstatName describes the entry name directly in d.
func (d *Dir) lstatName(name string) (fs.FileInfo, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(d.fd(), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, d.pathErr("stat", name, err)
	}
	return fileInfo(name, &st), nil
}

// Mkdir creates the directory rel; its parent must exist.
func (d *Dir) Mkdir(rel string, perm fs.FileMode) error {
	p, base, err := d.parent(rel)
	if err != nil {
		return err
	}
	defer p.Close()
	return d.pathErr("mkdir", rel, unix.Mkdirat(p.fd(), base, uint32(perm.Perm())))
}

// MkdirAll creates rel and every directory above it that is missing, calling made (if not nil)
// on each directory it created, in order. An entry on the way that is not a directory, a link
// among them, fails.
func (d *Dir) MkdirAll(rel string, perm fs.FileMode, made func(rel string) error) error {
	rel, err := clean(rel)
	if err != nil || rel == "." {
		return err
	}
	at := ""
	for _, part := range strings.Split(rel, "/") {
		at = path.Join(at, part)
		err := d.Mkdir(at, perm)
		if errors.Is(err, fs.ErrExist) {
			info, serr := d.Lstat(at)
			if serr != nil {
				return serr
			}
			if !info.IsDir() {
				return d.pathErr("mkdir", at, fmt.Errorf("exists and is %s, not a directory: %w", describeMode(info.Mode()), ErrLink))
			}
			continue
		}
		if err != nil {
			return err
		}
		if made != nil {
			if err := made(at); err != nil {
				return err
			}
		}
	}
	return nil
}

// Symlink creates the link rel pointing at target (which is stored, never resolved here).
func (d *Dir) Symlink(target, rel string) error {
	p, base, err := d.parent(rel)
	if err != nil {
		return err
	}
	defer p.Close()
	return d.pathErr("symlink", rel, unix.Symlinkat(target, p.fd(), base))
}

// Readlink returns the target of the link rel.
func (d *Dir) Readlink(rel string) (string, error) {
	p, base, err := d.parent(rel)
	if err != nil {
		return "", err
	}
	defer p.Close()
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(p.fd(), base, buf)
	if err != nil {
		return "", d.pathErr("readlink", rel, err)
	}
	return string(buf[:n]), nil
}

// Lchown gives the entry rel itself (never a link's target) to uid and gid.
func (d *Dir) Lchown(rel string, uid, gid int) error {
	rel, err := clean(rel)
	if err != nil {
		return err
	}
	if rel == "." {
		return d.pathErr("chown", rel, d.f.Chown(uid, gid))
	}
	p, base, err := d.parent(rel)
	if err != nil {
		return err
	}
	defer p.Close()
	return d.pathErr("chown", rel, unix.Fchownat(p.fd(), base, uid, gid, unix.AT_SYMLINK_NOFOLLOW))
}

// Chmod sets the mode of the directory or regular file rel. A link, or any other kind of
// entry, is refused: chmod has no way not to follow one. A regular file with more than one
// link is refused too: its mode is also another name's, possibly outside the tree.
func (d *Dir) Chmod(rel string, mode fs.FileMode) error {
	fd, err := d.openat(rel, unix.O_PATH, 0)
	if err != nil {
		return d.pathErr("chmod", rel, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return d.pathErr("chmod", rel, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
	case unix.S_IFREG:
		if st.Nlink > 1 {
			return d.pathErr("chmod", rel, fmt.Errorf("the file has %d links; the host changes the mode of no inode that another name shares", st.Nlink))
		}
	default:
		return d.pathErr("chmod", rel, fmt.Errorf("%w (it is %s)", ErrNotRegular, describeMode(fileInfo(rel, &st).Mode())))
	}
	// An O_PATH fd cannot be fchmod'ed; reopening it through /proc/self/fd reaches exactly the
	// inode it holds, which is already known to be no link.
	return d.pathErr("chmod", rel, unix.Fchmodat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), uint32(mode.Perm()), 0))
}

// Remove removes the file, link or empty directory rel.
func (d *Dir) Remove(rel string) error {
	p, base, err := d.parent(rel)
	if err != nil {
		return err
	}
	defer p.Close()
	err = unix.Unlinkat(p.fd(), base, 0)
	if errors.Is(err, unix.EISDIR) {
		err = unix.Unlinkat(p.fd(), base, unix.AT_REMOVEDIR)
	}
	return d.pathErr("remove", rel, err)
}

// RemoveAll removes rel and everything under it; an absent rel is no error. Links are removed,
// never followed.
func (d *Dir) RemoveAll(rel string) error {
	p, base, err := d.parent(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer p.Close()
	return p.removeAllName(base)
}

func (d *Dir) removeAllName(name string) error {
	err := unix.Unlinkat(d.fd(), name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return d.pathErr("remove", name, err)
	}
	sub, err := d.OpenDir(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	names, err := sub.f.Readdirnames(-1)
	if err == nil {
		for _, n := range names {
			if err = sub.removeAllName(n); err != nil {
				break
			}
		}
	}
	sub.Close()
	if err != nil {
		return err
	}
	err = unix.Unlinkat(d.fd(), name, unix.AT_REMOVEDIR)
	if errors.Is(err, unix.ENOENT) {
		err = nil
	}
	return d.pathErr("remove", name, err)
}

// Rename moves rel beneath d to newRel beneath to, replacing what newRel names if the kernel
// allows (an empty directory, or a file over a file). Neither path may cross a link; the
// entry moved is moved as it is, a link as a link. A move to another file system fails with
// an error wrapping syscall.EXDEV.
func (d *Dir) Rename(rel string, to *Dir, newRel string) error {
	op, ob, err := d.parent(rel)
	if err != nil {
		return err
	}
	defer op.Close()
	np, nb, err := to.parent(newRel)
	if err != nil {
		return err
	}
	defer np.Close()
	if err := unix.Renameat(op.fd(), ob, np.fd(), nb); err != nil {
		return &os.LinkError{Op: "rename", Old: d.display(rel), New: to.display(newRel), Err: err}
	}
	return nil
}

// fileInfo is an fs.FileInfo from a stat buffer.
type statInfo struct {
	name string
	st   unix.Stat_t
}

func fileInfo(name string, st *unix.Stat_t) fs.FileInfo {
	return &statInfo{name: path.Base(name), st: *st}
}

func (s *statInfo) Name() string { return s.name }
func (s *statInfo) Size() int64  { return s.st.Size }
func (s *statInfo) Mode() fs.FileMode {
	m := fs.FileMode(s.st.Mode & 0o777)
	switch s.st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	}
	if s.st.Mode&unix.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if s.st.Mode&unix.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if s.st.Mode&unix.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}
func (s *statInfo) ModTime() time.Time { return time.Unix(s.st.Mtim.Unix()) }
func (s *statInfo) IsDir() bool        { return s.Mode().IsDir() }

// Sys returns a *syscall.Stat_t, as os.Lstat's FileInfo does, so callers read inode numbers
// and change times the same way from both.
func (s *statInfo) Sys() any {
	return &syscall.Stat_t{Dev: s.st.Dev, Ino: s.st.Ino, Nlink: s.st.Nlink, Mode: s.st.Mode, Uid: s.st.Uid, Gid: s.st.Gid,
		Rdev: s.st.Rdev, Size: s.st.Size, Blksize: s.st.Blksize, Blocks: s.st.Blocks,
		Atim: syscall.Timespec(s.st.Atim), Mtim: syscall.Timespec(s.st.Mtim), Ctim: syscall.Timespec(s.st.Ctim)}
}

// describeMode names a kind of entry for messages.
func describeMode(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "a fifo"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m.IsDir():
		return "a directory"
	case m.IsRegular():
		return "a regular file"
	}
	return "a special file"
}

// Readdirnames returns up to n names in the directory itself (all for n <= 0).
func (d *Dir) Readdirnames(n int) ([]string, error) { return d.f.Readdirnames(n) }
