package jailfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

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
