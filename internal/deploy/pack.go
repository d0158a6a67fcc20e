package deploy

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/agenthost/host/internal/functions"
)

// Pack writes a function's code as a gzipped tar: a single-file function as its one file
// ("hello.py"), a folder function as "<name>/..." with its files, executable bits and the links
// that stay inside it. Installed packages and caches are left out, as the content hash leaves
// them out (node_modules, __pycache__, dot files): they are installed, not authored.
func Pack(f *functions.Function) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	var err error
	if f.Folder {
		err = packTree(tw, f.Root, f.Name)
	} else {
		err = packFile(tw, f.Root, filepath.Base(f.Root))
	}
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("pack %s: %w", f.Name, err)
	}
	return buf.Bytes(), nil
}

func packTree(tw *tar.Writer, root, name string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() && p != root && (d.Name() == "node_modules" || d.Name() == "__pycache__" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		target := path.Join(name, filepath.ToSlash(rel))
		switch {
		case d.IsDir():
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: target + "/", Mode: 0o755})
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := linkInside(target, link, name); err != nil {
				return err
			}
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: target, Linkname: link, Mode: 0o777})
		case d.Type().IsRegular():
			return packFile(tw, p, target)
		}
		return nil
	})
}

func packFile(tw *tar.Writer, src, name string) error {
	fh, err := os.Open(src)
	if err != nil {
		return err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return err
	}
	mode := int64(0o644)
	if st.Mode().Perm()&0o111 != 0 {
		mode = 0o755
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: st.Size()}); err != nil {
		return err
	}
	_, err = io.Copy(tw, fh)
	return err
}

// linkInside refuses a link that leads out of its function's folder: the host reads the code
// with its own rights.
func linkInside(at, link, top string) error {
	if path.IsAbs(link) {
		return fmt.Errorf("%s is a link to the absolute path %s: a deployed function's links must stay inside its folder", at, link)
	}
	resolved := path.Join(path.Dir(at), link)
	if resolved != top && !strings.HasPrefix(resolved, top+"/") {
		return fmt.Errorf("%s is a link to %s, outside its folder %s: a deployed function's links must stay inside it", at, link, top)
	}
	return nil
}

// Unpack writes a packed function into dir, refusing any entry that would land outside the
// function's own file or folder (a crafted object must not write elsewhere on a host).
func Unpack(data []byte, dir, name string) error {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("unpack %s: %w", name, err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("unpack %s: %w", name, err)
		}
		clean := path.Clean(strings.TrimSuffix(h.Name, "/"))
		top, _, _ := strings.Cut(clean, "/")
		if path.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") || strings.TrimSuffix(top, path.Ext(top)) != name {
			return fmt.Errorf("unpack %s: entry %q lies outside the function", name, h.Name)
		}
		target := filepath.Join(dir, filepath.FromSlash(clean))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(target, 0o755)
		case tar.TypeSymlink:
			if err = linkInside(clean, h.Linkname, top); err == nil {
				err = os.Symlink(h.Linkname, target)
			}
		case tar.TypeReg:
			err = writeFile(target, tr, os.FileMode(h.Mode).Perm())
		default:
			err = fmt.Errorf("entry %q has an unexpected type %q", h.Name, h.Typeflag)
		}
		if err != nil {
			return fmt.Errorf("unpack %s: %w", name, err)
		}
	}
}

func writeFile(target string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, r); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
