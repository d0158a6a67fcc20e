package app

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// The red team's row 11: --data inside a 0700 directory let the host start, and then every
// jailed job failed with bwrap's "Can't find source path". Now start refuses it, naming the
// directory and the fix.
func TestCheckJailReach(t *testing.T) {
	const uid, gid = 65534, 65534 // the default jail user; the test's directories are not its
	mk := func(t *testing.T, mode os.FileMode) (closed, data string) {
		t.Helper()
		closed = filepath.Join(t.TempDir(), "home")
		data = filepath.Join(closed, "project", "data")
		if err := os.MkdirAll(data, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(closed, mode); err != nil {
			t.Fatal(err)
		}
		// t.TempDir's own parent is 0700 on some systems: open it, it is not what is tested.
		for p := filepath.Dir(closed); p != "/"; p = filepath.Dir(p) {
			if st, err := os.Stat(p); err == nil && st.Mode().Perm()&0o001 == 0 {
				os.Chmod(p, st.Mode().Perm()|0o001)
			}
		}
		return closed, data
	}
	for _, c := range []struct {
		name string
		mode os.FileMode
		ok   bool
	}{
		{"private parent (as /root or mktemp -d)", 0o700, false},
		{"readable but not searchable by others", 0o744, false},
		{"searchable only (chmod o+x)", 0o711, true},
		{"open", 0o755, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			closed, data := mk(t, c.mode)
			err := checkJailReach(data, uid, gid)
			if c.ok {
				if err != nil {
					t.Fatalf("refused a reachable data directory: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("a data directory the jail cannot reach was accepted")
			}
			for _, want := range []string{data, "chmod o+x " + closed, "--data"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}

// TestInstallJailInit: the init lands in the data directory ready for the jail, and the copy of
// the whole host binary that earlier versions used as the init goes.
func TestInstallJailInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	legacy := filepath.Join(dir, "host")
	if err := os.WriteFile(legacy, []byte("an old host binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	in, err := installJailInit(dir, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Check(); err != nil || filepath.Dir(in.Path) != dir {
		t.Fatalf("init at %s: %v", in.Path, err)
	}
	if _, err := os.Stat(legacy); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the old host binary copy is still there: %v", err)
	}
}
