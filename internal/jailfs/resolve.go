package jailfs

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// maxRetries bounds the retries of an openat2 interrupted or raced by a rename.
const maxRetries = 64

// noOpenat2 is set once the kernel said it has no openat2 (ENOSYS): from then on paths are
// walked one component at a time. Tests set it to exercise the walk.
var noOpenat2 atomic.Bool

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
