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
	"io/fs"
	"os"

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

// Readdirnames returns up to n names in the directory itself (all for n <= 0).
func (d *Dir) Readdirnames(n int) ([]string, error) { return d.f.Readdirnames(n) }
