package functions

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func write(t *testing.T, dir, name, content string, mode os.FileMode) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "hello.py", "# sandbox\n# on: greet.*\ndef main():\n    return 1\n", 0o644)
	write(t, dir, "agent/main.ts", "// sandbox\nexport function main() { return 1 }\n", 0o644)
	write(t, dir, "agent/prompt.txt", "be nice", 0o644)
	write(t, dir, "tool", "#!/bin/sh\necho 1\n", 0o755)
	write(t, dir, "README.md", "# docs", 0o644)
	write(t, dir, ".hidden.py", "def main(): pass\n", 0o644)
	write(t, dir, "data.json", "{}", 0o644)
	write(t, dir, "Bad_Name.py", "def main(): pass\n", 0o644)
	write(t, dir, "typo.sh", "# sandbox\n# timout: 1s\necho\n", 0o644)
	write(t, dir, "empty/notes.txt", "no main here", 0o644)
	write(t, dir, "two/main.py", "def main(): pass\n", 0o644)
	write(t, dir, "two/main.sh", "echo\n", 0o644)
	write(t, dir, "noexec", "#!/bin/sh\necho\n", 0o644)
	write(t, dir, "dup.py", "def main(): pass\n", 0o644)
	write(t, dir, "dup.sh", "echo\n", 0o644)

	fns, errs := Load(dir)
	for _, name := range []string{"hello", "agent", "tool"} {
		if fns[name] == nil {
			t.Errorf("%s not loaded", name)
		}
	}
	if !fns["agent"].Folder || fns["agent"].Entry != "main.ts" || fns["hello"].Folder {
		t.Errorf("folder detection: %+v %+v", fns["agent"], fns["hello"])
	}
	if got := strings.Join(fns["hello"].Subjects(), ","); got != "agent.run.hello,greet.*" {
		t.Errorf("subjects: %s", got)
	}
	wantRefused := map[string]string{
		"Bad_Name.py": "must match",
		"typo.sh":     "typo.sh:2",
		"empty":       "needs a main file",
		"two":         "exactly one main file",
		"noexec":      "noexec",
		"dup":         "already defined",
	}
	for file, want := range wantRefused {
		found := false
		for _, err := range errs {
			var fe *Error
			if errors.As(err, &fe) && strings.Contains(err.Error(), file) && strings.Contains(err.Error(), want) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no error mentioning %q in %v", file, want, errs)
		}
	}
	if len(fns)+len(errs) != 3+len(wantRefused)+1 { // dup: one of the two loads
		t.Errorf("loaded %d, refused %d: %v", len(fns), len(errs), errs)
	}
}

// A snapshot is a frozen copy, readable by the jail's group and nobody else: editing the source
// afterwards changes the hash, not the snapshot.
func TestSnapshotIsImmutable(t *testing.T) {
	src, snaps := t.TempDir(), t.TempDir()
	write(t, src, "f/main.py", "def main():\n    return 'v1'\n", 0o600)
	write(t, src, "f/lib/util.py", "X = 1\n", 0o600)
	f, err := LoadPath(filepath.Join(src, "f"))
	if err != nil {
		t.Fatal(err)
	}
	dir, err := f.Snapshot(snaps, testGroup)
	if err != nil {
		t.Fatal(err)
	}
	write(t, src, "f/main.py", "def main():\n    return 'v2'\n", 0o600)
	g, err := LoadPath(filepath.Join(src, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if g.Hash == f.Hash {
		t.Fatal("an edit kept the same version hash")
	}
	b, err := os.ReadFile(filepath.Join(dir, "main.py"))
	if err != nil || !strings.Contains(string(b), "v1") {
		t.Fatalf("snapshot changed: %q %v", b, err)
	}
	for p, want := range map[string]os.FileMode{snaps: 0o750, dir: 0o750, filepath.Join(dir, "lib"): 0o750, filepath.Join(dir, "lib", "util.py"): 0o640} {
		st, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s: mode %o, want %o (never readable by others)", p, st.Mode().Perm(), want)
		}
		if gid := int(st.Sys().(*syscall.Stat_t).Gid); testGroup >= 0 && gid != testGroup {
			t.Errorf("%s: group %d, want the jail's %d", p, gid, testGroup)
		}
	}
	if again, err := f.Snapshot(snaps, testGroup); err != nil || again != dir {
		t.Fatalf("second snapshot of the same version: %s %v", again, err)
	}
}

// testGroup is the jail's group when the tests run as root (as CI does), else the user's own.
var testGroup = func() int {
	if os.Geteuid() == 0 {
		return 65534
	}
	return -1
}()

// The attack (red team row 7): `ln -s /etc/shadow functions/shadowfn.sh` was loaded, and the
// host, as root, copied /etc/shadow to a world-readable snapshot. A link leading out of the
// functions directory is refused at load; links inside it are fine.
func TestSymlinksOutOfTheFunctionsDirAreRefused(t *testing.T) {
	outside := t.TempDir()
	write(t, outside, "secret.sh", "echo '\"host secret\"'\n", 0o600)
	write(t, outside, "dir/main.sh", "echo '\"host secret\"'\n", 0o600)
	dir := t.TempDir()
	write(t, dir, "hello.sh", "echo '\"hi\"'\n", 0o644)
	write(t, dir, "folder/helper.sh", "echo '\"hi\"'\n", 0o644)
	links := map[string]string{
		"shadowfn.sh":    "/etc/shadow",
		"outside.sh":     filepath.Join(outside, "secret.sh"),
		"outdir":         filepath.Join(outside, "dir"),
		"dangling.sh":    filepath.Join(outside, "missing.sh"),
		"alias.sh":       filepath.Join(dir, "hello.sh"), // inside: allowed
		"folder/main.sh": filepath.Join(outside, "secret.sh"),
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	fns, errs := Load(dir)
	if _, ok := fns["alias"]; !ok || fns["hello"] == nil {
		t.Errorf("a link inside the functions directory must load: %v %v", fns, errs)
	}
	for _, name := range []string{"shadowfn", "outside", "outdir", "dangling", "folder"} {
		if fns[name] != nil {
			t.Errorf("%s loaded through a link out of the functions directory", name)
		}
	}
	refused := ""
	for _, err := range errs {
		refused += err.Error() + "\n"
	}
	for _, want := range []string{"shadowfn.sh is a symbolic link to /etc/shadow, outside", "outside.sh is a symbolic link", "outdir is a symbolic link", "dangling.sh is a symbolic link that does not resolve", "main.sh is a symbolic link"} {
		if !strings.Contains(refused, want) {
			t.Errorf("no refusal saying %q in:\n%s", want, refused)
		}
	}
	if strings.Contains(refused, "root:") {
		t.Errorf("a refusal shows the target's content:\n%s", refused)
	}
}
