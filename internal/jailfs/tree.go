package jailfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

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

// UnmountBeneath unmounts every mount on dir or below it, the deepest first: the trees that a
// host killed before its jobs ended left mounted in its run directory. It reads the mount table
// of this process's mount namespace, where the host mounts them.
func UnmountBeneath(dir string) error {
	dir = filepath.Clean(dir)
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("read the mount table to clear %s: %w", dir, err)
	}
	var points []string
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		p := UnescapeMountinfo(f[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	// Deepest first, so that no mount is detached from under another that is still listed.
	slices.SortFunc(points, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmount %s: %w", p, err)
		}
	}
	return nil
}

// UnescapeMountinfo undoes the octal escapes of a path in /proc/self/mountinfo (\040 for a
// space, and so on).
func UnescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
