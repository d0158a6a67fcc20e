package jailfs

import (
	"io/fs"
	"path"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

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
