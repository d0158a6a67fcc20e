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
// The copy is world-readable because the jail runs as an unprivileged user.
func (f *Function) Snapshot(root string) (string, error) {
	dst := filepath.Join(root, f.Name+"-"+f.Hash)
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("snapshot %s: %w", f.Name, err)
	}
	tmp, err := os.MkdirTemp(root, ".tmp-"+f.Name+"-")
	if err != nil {
		return "", fmt.Errorf("snapshot %s: %w", f.Name, err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("snapshot %s: %w", f.Name, err)
	}
	if f.Folder {
		err = copyTree(f.Root, tmp)
	} else {
		err = copyFile(f.Root, filepath.Join(tmp, f.Entry))
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

func copyTree(src, dst string) error {
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
			return os.Mkdir(target, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case d.Type().IsRegular():
			return copyFile(p, target)
		}
		return nil // sockets, devices and the like have no place in a function
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	mode := os.FileMode(0o644)
	if st.Mode().Perm()&0o111 != 0 {
		mode = 0o755
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
	return os.Chmod(dst, mode) // the umask must not take the jail's read access away
}
