package jailfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// layout builds, under a fresh directory, a tree as a hostile jail would leave it: real
// directories and files beside links that point out of the tree, at a host directory whose
// files must stay untouched.
func layout(t *testing.T) (root *Dir, host string) {
	t.Helper()
	base := t.TempDir()
	host = filepath.Join(base, "host")
	tree := filepath.Join(base, "tree")
	for _, d := range []string{host, tree, filepath.Join(tree, "real", "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(host, "secret.json"), []byte(`{"password":"hunter2"}`), 0o600))
	must(os.WriteFile(filepath.Join(tree, "real", "ok.json"), []byte(`{"ok":true}`), 0o644))
	must(os.Symlink(host, filepath.Join(tree, "out")))                                       // absolute, out of the tree
	must(os.Symlink("real", filepath.Join(tree, "in")))                                      // relative, within the tree
	must(os.Symlink(filepath.Join(host, "secret.json"), filepath.Join(tree, "result.json"))) // a file link
	must(syscall.Mkfifo(filepath.Join(tree, "fifo"), 0o644))
	must(os.Symlink("/dev/zero", filepath.Join(tree, "zero")))
	must(os.WriteFile(filepath.Join(tree, "big"), make([]byte, 4096), 0o644))
	d, err := Open(tree)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, host
}

// both runs a test with openat2 and with the component walk used where openat2 is missing.
func both(t *testing.T, f func(t *testing.T)) {
	t.Run("openat2", f)
	t.Run("walk", func(t *testing.T) {
		noOpenat2.Store(true)
		defer noOpenat2.Store(false)
		f(t)
	})
}

func TestReadRegularRefuses(t *testing.T) {
	both(t, func(t *testing.T) {
		root, _ := layout(t)
		cases := []struct {
			rel  string
			want error
		}{
			{"real/ok.json", nil},
			{"result.json", ErrNotRegular}, // a link to a host file
			{"fifo", ErrNotRegular},        // would block open() without O_NONBLOCK
			{"zero", ErrNotRegular},        // a link to a device
			{"out/secret.json", ErrLink},   // crosses a link to a host directory
			{"in/ok.json", ErrLink},        // crosses a link even within the tree
			{"../host/secret.json", ErrLink},
			{"/etc/passwd", ErrLink},
			{"real", ErrNotRegular},
			{"big", ErrTooLarge},
			{"missing.json", fs.ErrNotExist},
		}
		for _, c := range cases {
			t.Run(strings.ReplaceAll(c.rel, "/", "_"), func(t *testing.T) {
				done := make(chan error, 1)
				go func() {
					_, err := root.ReadRegular(c.rel, 100)
					done <- err
				}()
				select {
				case err := <-done:
					if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
						t.Fatalf("ReadRegular(%q) = %v, want %v", c.rel, err, c.want)
					}
					if err != nil && strings.Contains(err.Error(), "hunter2") {
						t.Fatalf("the error carries the host file's content: %v", err)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("ReadRegular(%q) blocked", c.rel)
				}
			})
		}
	})
}

func TestOperationsNeverLeaveTheTree(t *testing.T) {
	both(t, func(t *testing.T) {
		root, host := layout(t)
		ops := map[string]func() error{
			"mkdir":     func() error { return root.Mkdir("out/new", 0o755) },
			"mkdirall":  func() error { return root.MkdirAll("out/a/b", 0o755, nil) },
			"mkdirall2": func() error { return root.MkdirAll("in/a/b", 0o755, nil) },
			"create":    func() error { return root.WriteFile("out/planted", []byte("x"), 0o644) },
			"open":      func() error { _, err := root.OpenFile("out/secret.json", os.O_RDONLY, 0); return err },
			"chmod":     func() error { return root.Chmod("out/secret.json", 0o644) },
			"chmodlink": func() error { return root.Chmod("result.json", 0o644) },
			"chown":     func() error { return root.Lchown("out/secret.json", 65534, 65534) },
			"remove":    func() error { return root.Remove("out/secret.json") },
			"removeall": func() error { return root.RemoveAll("out/secret.json") },
			"rename":    func() error { return root.Rename("out/secret.json", root, "stolen") },
			"renameto":  func() error { return root.Rename("real/ok.json", root, "out/ok.json") },
			"symlink":   func() error { return root.Symlink("/", "out/l") },
			"walk":      func() error { return root.Walk("out", func(string, fs.FileInfo) error { return nil }) },
			"lstat":     func() error { _, err := root.Lstat("out/secret.json"); return err },
		}
		for name, op := range ops {
			if err := op(); !errors.Is(err, ErrLink) && !errors.Is(err, ErrNotRegular) {
				t.Errorf("%s: got %v, want a refusal", name, err)
			}
		}
		entries, err := os.ReadDir(host)
		if err != nil || len(entries) != 1 {
			t.Fatalf("the host directory changed: %v %v", entries, err)
		}
		info, err := os.Stat(filepath.Join(host, "secret.json"))
		if err != nil || info.Mode().Perm() != 0o600 {
			t.Fatalf("the host file changed: %v %v", info, err)
		}
		if st := info.Sys().(*syscall.Stat_t); os.Geteuid() == 0 && st.Uid != 0 {
			t.Fatalf("the host file's owner changed to %d", st.Uid)
		}
	})
}

func TestWalkAndRemoveAll(t *testing.T) {
	root, host := layout(t)
	var seen []string
	err := root.Walk(".", func(rel string, info fs.FileInfo) error {
		seen = append(seen, rel+":"+describeMode(info.Mode()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "big:a regular file fifo:a fifo in:a symbolic link out:a symbolic link real:a directory real/ok.json:a regular file real/sub:a directory result.json:a symbolic link zero:a symbolic link"
	if got := strings.Join(seen, " "); got != want {
		t.Fatalf("walk saw\n%s\nwant\n%s", got, want)
	}
	for _, rel := range []string{"out", "in", "real", "fifo", "result.json"} {
		if err := root.RemoveAll(rel); err != nil {
			t.Fatalf("RemoveAll(%s): %v", rel, err)
		}
	}
	if _, err := os.Stat(filepath.Join(host, "secret.json")); err != nil {
		t.Fatalf("RemoveAll followed a link: %v", err)
	}
}

func TestChmodRefusesASharedInode(t *testing.T) {
	root, host := layout(t)
	other := filepath.Join(host, "other")
	if err := os.WriteFile(other, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(other, filepath.Join(root.Name(), "hard")); err != nil {
		t.Fatal(err)
	}
	if err := root.Chmod("hard", 0o644); err == nil {
		t.Fatal("chmod of a file with two links succeeded")
	}
	if info, _ := os.Stat(other); info.Mode().Perm() != 0o600 {
		t.Fatalf("the other name's mode changed to %v", info.Mode())
	}
	if err := root.Chmod("real/ok.json", 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestUnmountBeneath(t *testing.T) {
	base := t.TempDir()
	if err := CanMount(base); err != nil {
		t.Skipf("SKIPPED: this host cannot mount a tree (%v); CI runs as root and can", err)
	}
	// Nested, and with a space in a name (mountinfo writes it as \040).
	outer := filepath.Join(base, "run", "job one")
	inner := filepath.Join(outer, "vol")
	beside := filepath.Join(base, "beside")
	for _, d := range []string{outer, beside} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if _, err := MountTree(d, 1<<20, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(inner, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := MountTree(inner, 1<<20, 0, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { UnmountBeneath(base) })
	if err := UnmountBeneath(filepath.Join(base, "run")); err != nil {
		t.Fatal(err)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), filepath.Join(base, "run")) {
		t.Fatalf("still mounted under %s", filepath.Join(base, "run"))
	}
	if !strings.Contains(string(mounts), beside) {
		t.Fatal("a mount beside the directory was unmounted too")
	}
}
