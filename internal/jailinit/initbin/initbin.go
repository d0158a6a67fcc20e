// Package initbin carries the jail init (package jailinit) prebuilt for
// each architecture the host ships for, so that the one host binary, and
// `go run ./cmd/host serve`, can put it where jails run it from.
package initbin

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
)

//go:embed jailinit-linux-*
var binaries embed.FS

// Name is the installed init's file name.
const Name = "jailinit"

// ErrUnsupported is returned (wrapped) for an architecture with no
// prebuilt init.
var ErrUnsupported = errors.New("no jail init is built for this architecture")

// Binary returns the init built for goarch (runtime.GOARCH when empty).
func Binary(goarch string) ([]byte, error) {
	if goarch == "" {
		goarch = runtime.GOARCH
	}
	b, err := binaries.ReadFile("jailinit-linux-" + goarch)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: linux/%s (add it to internal/jailinit/gen and run go generate ./internal/jailinit/...)", ErrUnsupported, goarch)
	}
	return b, err
}

// Installed is an init that Install wrote and checked.
type Installed struct {
	Path   string // on the host
	SHA256 string // hex

	mu      sync.Mutex
	checked os.FileInfo // what the file was when its hash was last checked
}

// Check verifies, before a jail binds the init, that the file is still the
// one installed. It hashes the file again only when its inode, size, mode or
// modification time changed since the last check: a per-job hash of a few
// megabytes would cost a default-network job more than the init's start.
func (in *Installed) Check() error {
	fi, err := os.Lstat(in.Path)
	if err != nil {
		return fmt.Errorf("check the jail init: %w", err)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.checked != nil && os.SameFile(fi, in.checked) && fi.Size() == in.checked.Size() &&
		fi.Mode() == in.checked.Mode() && fi.ModTime().Equal(in.checked.ModTime()) {
		return nil
	}
	if err := Verify(in.Path, in.SHA256); err != nil {
		return err
	}
	in.checked = fi
	return nil
}

// Install writes the init for this architecture to dir/Name, mode 0755, and
// returns it. A file already there with the same content is
// kept; any other is replaced by a rename, so that a jail starting meanwhile
// binds either the old init or the new one, never half of one. The file is
// read back and checked against the embedded hash before Install returns.
//
// The file belongs to the host's user and is not writable by anyone else:
// the jail's user needs only to execute it, and a jail user able to rewrite
// it would own every later job's init. dir is created 0755 if missing.
func Install(dir string) (*Installed, error) {
	bin, err := Binary("")
	if err != nil {
		return nil, err
	}
	want := sha256.Sum256(bin)
	in := &Installed{Path: filepath.Join(dir, Name), SHA256: hex.EncodeToString(want[:])}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("install the jail init: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // the jail's user passes through to bind it
		return nil, fmt.Errorf("install the jail init: %w", err)
	}
	if Verify(in.Path, in.SHA256) != nil {
		if err := replace(in.Path, bin); err != nil {
			return nil, fmt.Errorf("install the jail init at %s: %w", in.Path, err)
		}
	}
	if err := in.Check(); err != nil {
		return nil, err
	}
	return in, nil
}

// Verify checks that the file at path is an executable, not group- or
// world-writable regular file with the given sha256.
func Verify(path, sum string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("check the jail init: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o755 {
		return fmt.Errorf("check the jail init: %s has mode %s, want a regular file of mode 0755 (remove it; the host writes it again at start)", path, fi.Mode())
	}
	got, err := fileSum(path)
	if err != nil {
		return fmt.Errorf("check the jail init: %w", err)
	}
	if got != sum {
		return fmt.Errorf("check the jail init: %s has sha256 %s, want %s (something else rewrote it; remove it and restart the host)", path, got, sum)
	}
	return nil
}

// replace writes data to a temporary file beside path and renames it over
// path.
func replace(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+Name+"-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	// CreateTemp's 0600 under the umask: set the mode itself.
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func fileSum(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
