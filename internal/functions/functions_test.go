package functions

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
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

// A snapshot is a frozen, world-readable copy: editing the source afterwards changes the hash,
// not the snapshot.
func TestSnapshotIsImmutable(t *testing.T) {
	src, snaps := t.TempDir(), t.TempDir()
	write(t, src, "f/main.py", "def main():\n    return 'v1'\n", 0o600)
	write(t, src, "f/lib/util.py", "X = 1\n", 0o600)
	f, err := LoadPath(filepath.Join(src, "f"))
	if err != nil {
		t.Fatal(err)
	}
	dir, err := f.Snapshot(snaps)
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
	st, err := os.Stat(filepath.Join(dir, "lib", "util.py"))
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("snapshot file mode: %v %v", st, err)
	}
	if again, err := f.Snapshot(snaps); err != nil || again != dir {
		t.Fatalf("second snapshot of the same version: %s %v", again, err)
	}
}
