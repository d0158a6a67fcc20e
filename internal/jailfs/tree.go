package jailfs

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ErrUnbounded is wrapped by MountTree's error when this host cannot mount a bounded tree
// (it does not run as root, or the kernel refused the mount).
var ErrUnbounded = errors.New("cannot bound the job's directory")

// Tree is a job directory on a tmpfs of its own: whatever the job writes there, and whatever
// the host checks out there for it (its volumes), counts against the tree's size, and a write
// past it fails with ENOSPC inside the jail instead of filling the host's disk. Its pages are
// memory: the kernel charges them to the cgroup of whoever wrote them, the job's for its own
// writes.
type Tree struct {
	dir  string
	size int64
}

// MountTree mounts a tmpfs of size bytes on dir, which must be an empty directory whose path
// the host controls, with its root owned by uid:gid and mode 0700. The inode count is bounded
// with the size, so a job cannot spend kernel memory on millions of empty files instead.
func MountTree(dir string, size int64, uid, gid int) (*Tree, error) {
	if size <= 0 {
		return nil, fmt.Errorf("mount the job's directory %s: size %d must be positive", dir, size)
	}
	inodes := min(max(size/4096, 4096), 1<<22)
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0700,uid=%d,gid=%d", size, inodes, uid, gid)
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		if os.Geteuid() != 0 {
			return nil, fmt.Errorf("mount a %d-byte tmpfs on the job's directory %s: %w: %w (the host does not run as root)", size, dir, ErrUnbounded, err)
		}
		return nil, fmt.Errorf("mount a %d-byte tmpfs on the job's directory %s: %w: %w", size, dir, ErrUnbounded, err)
	}
	return &Tree{dir: dir, size: size}, nil
}

// CanMount reports whether this host can mount a Tree, by mounting (and unmounting) one on a
// fresh directory under dir; the error says why not.
func CanMount(dir string) error {
	probe, err := os.MkdirTemp(dir, "probe-")
	if err != nil {
		return err
	}
	defer os.Remove(probe)
	t, err := MountTree(probe, 1<<20, os.Getuid(), os.Getgid())
	if err != nil {
		return err
	}
	return t.Close()
}

// Size is the most the tree holds, in bytes.
func (t *Tree) Size() int64 { return t.size }

// Full reports whether the tree has no room left for another page.
func (t *Tree) Full() bool {
	var st unix.Statfs_t
	if err := unix.Statfs(t.dir, &st); err != nil {
		return false
	}
	return st.Bavail == 0 || (st.Files > 0 && st.Ffree == 0)
}

// Close unmounts the tree, and with it everything in it at once: no file is unlinked one by one.
// The unmount is lazy so that a process still holding a file open cannot keep the host from
// going on; the memory goes when that process does.
func (t *Tree) Close() error {
	if t == nil {
		return nil
	}
	if err := unix.Unmount(t.dir, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("unmount the job's directory %s: %w", t.dir, err)
	}
	return nil
}

// Unmount unmounts whatever tree is mounted on dir, if any: for the directories that a host
// killed before its jobs ended left behind.
func Unmount(dir string) error {
	if err := unix.Unmount(dir, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", dir, err)
	}
	return nil
}
