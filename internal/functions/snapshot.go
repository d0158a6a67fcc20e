package functions

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Snapshot copies the function's code into root/<name>-<hash>/ (once per version) and returns
// that directory. Jobs run from the snapshot, so editing or deleting the source never changes
// the code under a running job, and the jail can bind it read-only.
//
// The jail runs as an unprivileged user, so the copy must be readable by it, and by nobody
// else: files are 0640 (0750 when executable) and directories 0750, in group gid, the jail's.
// gid < 0 keeps the host's own group (a host that is not root runs its jails as itself).
func (f *Function) Snapshot(root string, gid int) (string, error) {
	// root itself is closed to others, which also covers snapshots made before these modes.
	if err := os.MkdirAll(root, 0o750); err != nil {
		return "", fmt.Errorf("snapshot %s: %w", f.Name, err)
	}
	if err := own(root, 0o750, gid); err != nil {
		return "", fmt.Errorf("snapshot %s: %w", f.Name, err)
	}
	dst := filepath.Join(root, f.Name+"-"+f.Hash)
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	tmp, err := os.MkdirTemp(root, ".tmp-"+f.Name+"-")
	if err != nil {
		return "", fmt.Errorf("snapshot %s: %w", f.Name, err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	if err := own(tmp, 0o750, gid); err != nil {
		return "", fmt.Errorf("snapshot %s: %w", f.Name, err)
	}
	if f.Folder {
		err = copyTree(f.Root, tmp, gid)
	} else {
		err = copyFile(f.Root, filepath.Join(tmp, f.Entry), gid)
	}
	if err != nil {
		return "", fmt.Errorf("snapshot %s: %w", f.Name, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		if _, statErr := os.Stat(dst); statErr == nil {
			return dst, nil // another goroutine made the same snapshot first
		}
		return "", fmt.Errorf("snapshot %s: %w", f.Name, err)
	}
	return dst, nil
}

// own gives p its mode and, with gid >= 0, the group gid.
func own(p string, mode os.FileMode, gid int) error {
	if gid >= 0 {
		if err := os.Lchown(p, -1, gid); err != nil {
			return err
		}
	}
	return os.Chmod(p, mode) // after chown, which may clear bits; and the umask must not take the jail's read access away
}

func copyTree(src, dst string, gid int) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if rel == "." {
			return nil
		}
		if d.IsDir() && (d.Name() == "__pycache__" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			if err := os.Mkdir(target, 0o750); err != nil {
				return err
			}
			return own(target, 0o750, gid)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			// Kept as a link, never followed: inside the jail it resolves in the jail's view.
			if err := os.Symlink(link, target); err != nil {
				return err
			}
			if gid >= 0 {
				return os.Lchown(target, -1, gid)
			}
			return nil
		case d.Type().IsRegular():
			return copyFile(p, target, gid)
		}
		return nil // sockets, devices and the like have no place in a function
	})
}

func copyFile(src, dst string, gid int) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	mode := os.FileMode(0o640)
	if st.Mode().Perm()&0o111 != 0 {
		mode = 0o750
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return own(dst, mode, gid)
}
