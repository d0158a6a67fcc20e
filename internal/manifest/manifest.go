// Package manifest checks the package manifests of a function folder (package.json and
// bun.lock for a TS/JS entry, requirements.txt for a Python one) for dependency sources
// outside the folder, and reads them for the installer (package packages). It imports
// nothing that jails or installs, so that loading a function checks its manifests without
// compiling the installer.
package manifest

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/agenthost/host/internal/runtimes"
)

// The manifests a function's author writes decide what the installer reads: a package.json
// dependency "file:/root/secrets" or a requirements.txt line "-r /etc/shadow" would have it
// read host files, and hand them to the jail (copied into the install) or to every caller (in
// the error event). So the only sources a manifest may name are package indexes and paths
// inside the function's own folder; everything else is refused when the function is loaded,
// with the file and line, before any installer runs. Install time checks again, on the
// snapshot, in case the folder changed in between.

// Check refuses a function folder whose package manifests name a dependency source
// outside it: package.json (and bun.lock) for a TS/JS entry, requirements.txt for a Python
// one. The error is a *runtimes.DefinitionError (no retry can fix it) naming each refused
// line as file:line, the dependency and what is allowed instead. A folder without manifests,
// or an entry of another runtime, passes.
func Check(dir, entry string) error {
	switch {
	case strings.EqualFold(filepath.Ext(entry), ".py"):
		_, _, err := Pip(dir)
		return err
	case IsJS(entry):
		_, _, _, err := Bun(dir)
		return err
	}
	return nil
}

// JSExts are the files Bun runs, whose folders' manifests are package.json and bun.lock.
var JSExts = []string{".ts", ".tsx", ".mts", ".cts", ".js", ".jsx", ".mjs", ".cjs"}

// IsJS reports whether path is a file Bun runs (JSExts).
func IsJS(path string) bool { return slices.Contains(JSExts, strings.ToLower(filepath.Ext(path))) }

// refusals collects the refused lines of a folder's manifests.
type refusals []string

func (r *refusals) add(file string, line int, what, why string) {
	*r = append(*r, fmt.Sprintf("%s:%d: %s: %s", file, line, what, why))
}

// err reports every refused line, so that one `host check` shows all there is to fix.
func (r refusals) err() error {
	if len(r) == 0 {
		return nil
	}
	return &runtimes.DefinitionError{Message: strings.Join(r, "\n  ")}
}

// maxManifest bounds a manifest read into memory (bun.lock files of large trees run to MBs).
const maxManifest = 16 << 20

// readManifest reads a manifest of the function folder, which must be a regular file there:
// the host reads it with its own rights, so a link (requirements.txt -> /etc/shadow) would
// have it read, and quote in errors, any host file; and a fifo would hang the load. A missing
// file is an error wrapping fs.ErrNotExist.
func readManifest(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, &runtimes.DefinitionError{Message: fmt.Sprintf("%s is a symbolic link: the host reads manifests with its own rights, so it must be a file in the function folder; replace the link with the file itself", path)}
	}
	if err != nil {
		return nil, fmt.Errorf("manifest: read %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("manifest: read %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, &runtimes.DefinitionError{Message: fmt.Sprintf("%s is not a regular file (%v): replace it with the file itself", path, st.Mode().Type())}
	}
	b, err := io.ReadAll(io.LimitReader(f, maxManifest+1))
	if err != nil {
		return nil, fmt.Errorf("manifest: read %s: %w", path, err)
	}
	if len(b) > maxManifest {
		return nil, &runtimes.DefinitionError{Message: fmt.Sprintf("%s is larger than %d MiB: a manifest that size is not one the host reads", path, maxManifest>>20)}
	}
	return b, nil
}

// fileTransport reports a URL scheme that fetches over file: ("git+file").
func fileTransport(scheme string) bool {
	return strings.HasSuffix(scheme, "+file") || strings.HasPrefix(scheme, "file+")
}

// looksLikePath is how npm tells a path from a version or a GitHub "user/repo".
func looksLikePath(s string) bool {
	return s == "." || s == ".." || s == "~" || strings.HasPrefix(s, "./") || strings.HasPrefix(s, "../") ||
		strings.HasPrefix(s, "/") || strings.HasPrefix(s, "~/")
}

// insideFolder resolves p, relative to the folder base inside dir, and returns it relative to
// dir; why is non-empty when p is absolute, in a home directory, climbs out of dir, is dir
// itself, does not exist (when mustExist), or is (or passes through) a symbolic link leading
// out of dir. A local folder's own links are checked too: the installer copies the folder.
func insideFolder(dir, base, p string, mustExist bool) (rel, why string) {
	switch {
	case strings.HasPrefix(p, "//"):
		return "", fmt.Sprintf("file:%s is a file URL naming a path on the host", p)
	case strings.HasPrefix(p, "~"):
		return "", fmt.Sprintf("%s is in a home directory on the host, outside the function folder", p)
	case filepath.IsAbs(p):
		return "", fmt.Sprintf("%s is an absolute path on the host, outside the function folder", p)
	}
	rel = filepath.Clean(filepath.Join(base, p))
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Sprintf("%s climbs out of the function folder", p)
	}
	if rel == "." {
		return "", fmt.Sprintf("%s is the function folder itself", p)
	}
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Sprintf("the function folder cannot be resolved (%v)", err)
	}
	full := filepath.Join(root, rel)
	real, err := filepath.EvalSymlinks(full)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if !mustExist {
				return rel, ""
			}
			return "", fmt.Sprintf("%s does not exist in the function folder", p)
		}
		return "", fmt.Sprintf("%s cannot be resolved (%v)", p, err)
	}
	if !Within(root, real) {
		return "", fmt.Sprintf("%s is a symbolic link leading out of the function folder", p)
	}
	if why := linksStayInside(root, real, p); why != "" {
		return "", why
	}
	return rel, ""
}

// linksStayInside walks a local folder and refuses a symbolic link in it that leads out of
// root: copied into the install, it would make the installer read what it points to.
func linksStayInside(root, top, name string) string {
	var why string
	filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
		if err != nil || why != "" {
			return filepath.SkipAll
		}
		if d.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		if real, err := filepath.EvalSymlinks(p); err == nil && !Within(root, real) {
			rel, _ := filepath.Rel(root, p)
			why = fmt.Sprintf("%s holds %s, a symbolic link leading out of the function folder", name, rel)
			return filepath.SkipAll
		}
		return nil
	})
	return why
}

// Within reports whether the resolved path p is root or beneath it.
func Within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// globInside refuses a workspace glob that leaves the folder; its matches are not resolved.
func globInside(g string) string {
	switch {
	case strings.HasPrefix(g, "~"):
		return g + " is in a home directory on the host"
	case filepath.IsAbs(g):
		return g + " is an absolute path on the host"
	}
	for _, seg := range strings.Split(filepath.ToSlash(g), "/") {
		if seg == ".." {
			return g + " climbs out of the function folder"
		}
	}
	return ""
}
