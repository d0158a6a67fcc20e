package initbin

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/host/internal/jailinit"
	"github.com/agenthost/host/internal/jailinit/sources"
)

// TestEmbeddedInitIsFresh fails when the init's sources (or its x/sys) have
// changed since the embedded binaries were generated.
func TestEmbeddedInitIsFresh(t *testing.T) {
	got, err := sources.Manifest(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("sources.txt")
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("the embedded jail init is stale: run `go generate ./internal/jailinit/...` and commit the result\nsources now:\n%s\nwhen generated:\n%s", got, want)
	}
}

func TestBinaryArchitectures(t *testing.T) {
	for _, arch := range []string{"amd64", "arm64"} {
		b, err := Binary(arch)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte("\x7fELF")) {
			t.Errorf("%s: not an ELF binary", arch)
		}
	}
	if _, err := Binary("mips"); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Binary(mips) = %v, want ErrUnsupported", err)
	}
}

func TestInstall(t *testing.T) {
	bin, err := Binary("")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		before  func(t *testing.T, path string) // lays out what a previous host left
		keepsIt bool                            // the file there is kept, not replaced
	}{
		{"fresh", func(*testing.T, string) {}, false},
		{"same content", func(t *testing.T, p string) { write(t, p, bin, 0o755) }, true},
		{"stale content", func(t *testing.T, p string) { write(t, p, []byte("#!/bin/sh\nexit 0\n"), 0o755) }, false},
		{"writable by others", func(t *testing.T, p string) { write(t, p, bin, 0o777) }, false},
		{"symlink", func(t *testing.T, p string) {
			other := filepath.Join(filepath.Dir(p), "other")
			write(t, other, bin, 0o755)
			if err := os.Symlink(other, p); err != nil {
				t.Fatal(err)
			}
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "bin")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			want := filepath.Join(dir, Name)
			tc.before(t, want)
			before, _ := os.Lstat(want)
			in, err := Install(dir)
			if err != nil {
				t.Fatal(err)
			}
			path := in.Path
			if path != want {
				t.Fatalf("installed at %s, want %s", path, want)
			}
			if err := Verify(path, in.SHA256); err != nil {
				t.Fatal(err)
			}
			if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o755 {
				t.Fatalf("dir: %v, %v; want mode 0755", fi.Mode(), err)
			}
			after, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			kept := before != nil && os.SameFile(before, after)
			if kept != tc.keepsIt {
				t.Fatalf("file kept: %v, want %v", kept, tc.keepsIt)
			}
			leftovers, _ := filepath.Glob(filepath.Join(dir, ".*"))
			if len(leftovers) > 0 {
				t.Fatalf("temporary files left: %q", leftovers)
			}
		})
	}
}

// TestCheckNoticesTampering: a file rewritten in place, or replaced, after
// Install is refused before the next jail would bind it.
func TestCheckNoticesTampering(t *testing.T) {
	cases := []struct {
		name   string
		tamper func(t *testing.T, path string)
		want   string
	}{
		{"untouched", func(*testing.T, string) {}, ""},
		{"rewritten in place", func(t *testing.T, p string) {
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte("tampered"), 100); err != nil {
				t.Fatal(err)
			}
			// A write in the same clock tick as the install keeps the
			// mtime; any later one moves it, as here.
			later := time.Now().Add(time.Second)
			if err := os.Chtimes(p, later, later); err != nil {
				t.Fatal(err)
			}
		}, "has sha256"},
		{"replaced", func(t *testing.T, p string) { write(t, p+".new", []byte("tampered"), 0o755); rename(t, p+".new", p) }, "has sha256"},
		{"removed", func(t *testing.T, p string) { os.Remove(p) }, "no such file"},
		{"made writable", func(t *testing.T, p string) { os.Chmod(p, 0o777) }, "mode"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in, err := Install(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			tc.tamper(t, in.Path)
			err = in.Check()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Check = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func rename(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}

// TestInstalledInitRuns: what is installed is this architecture's init, and
// it runs: a bad command line is its own failure, 125.
func TestInstalledInitRuns(t *testing.T) {
	in, err := Install(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	path := in.Path
	var stderr bytes.Buffer
	cmd := exec.Command(path, "--", "true")
	cmd.Stderr = &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).ExitStatus() != jailinit.ExitInitFailed || !strings.Contains(stderr.String(), "usage: jailinit") {
		t.Fatalf("run %s: %v, stderr %q; want exit %d with its usage", path, err, stderr.String(), jailinit.ExitInitFailed)
	}
}

func write(t *testing.T, path string, data []byte, perm os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil {
		t.Fatal(err)
	}
}
