package functions

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

// hostState is what loading must leave as it was: each entry's mode, owner, links, content.
func hostState(t *testing.T, root string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		b, _ := os.ReadFile(p)
		m[p] = fmt.Sprintf("%v uid %d gid %d links %d %q", info.Mode(), st.Uid, st.Gid, st.Nlink, b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestLoadRefusesDependenciesBeyondTheFunction: a folder function whose package.json or
// requirements.txt names a host path is refused at load (so `host check` and `host serve`
// both report it), with the file, the line, the dependency and what to write instead; and
// loading it reads nothing of the host path and changes nothing there.
func TestLoadRefusesDependenciesBeyondTheFunction(t *testing.T) {
	// A directory the function's author does not own (root's, when the test runs as root),
	// with a file only its owner reads.
	host := filepath.Join(t.TempDir(), "host")
	if err := os.Mkdir(host, 0o700); err != nil {
		t.Fatal(err)
	}
	write(t, host, "package.json", `{"name":"x","version":"1.0.0"}`, 0o644)
	secret := filepath.Join(host, "secret")
	write(t, host, "secret", "host-secret-content-7f3a\n", 0o600)

	const ts = "export function main() { return 1 }\n"
	const py = "def main():\n    return 1\n"
	cases := []struct {
		name  string
		files map[string]string
		links map[string]string // name -> target
		want  []string          // substrings of the error; none: loads
	}{
		{"file: a host folder", map[string]string{"main.ts": ts, "package.json": "{\n  \"dependencies\": {\n    \"x\": \"file:" + host + "\"\n  }\n}\n"},
			nil, []string{"fn/package.json:3: dependencies \"x\": \"file:" + host + "\"", "outside the function folder", `"file:./vendor/name"`}},
		{"link: a host folder", map[string]string{"main.ts": ts, "package.json": `{"dependencies": {"x": "link:` + host + `"}}`},
			nil, []string{"fn/package.json:1: dependencies \"x\"", "symbolic link"}},
		{"git+file:", map[string]string{"main.ts": ts, "package.json": `{"optionalDependencies": {"x": "git+file://` + host + `"}}`},
			nil, []string{"fn/package.json:1: optionalDependencies \"x\""}},
		{"-r a host file", map[string]string{"main.py": py, "requirements.txt": "requests==2.31.0\n-r " + secret + "\n"},
			nil, []string{"fn/requirements.txt:2:", "-r is not allowed", "list the requirements in this requirements.txt itself"}},
		{"-c a host file", map[string]string{"main.py": py, "requirements.txt": "-c " + secret + "\nrequests\n"},
			nil, []string{"fn/requirements.txt:1:", "-c is not allowed", "name==1.2.3"}},
		{"--index-url", map[string]string{"main.py": py, "requirements.txt": "--index-url https://example.com/simple\nrequests\n"},
			nil, []string{"fn/requirements.txt:1:", "host serve --pip-index-url"}},
		{"requirements.txt a link to a host file", map[string]string{"main.py": py}, map[string]string{"requirements.txt": secret},
			[]string{"fn/requirements.txt is a symbolic link", "replace the link with the file itself"}},
		{"a vendored package", map[string]string{"main.ts": ts, "package.json": `{"dependencies": {"pkg": "file:./vendor/pkg"}}`,
			"vendor/pkg/package.json": `{"name":"pkg","version":"1.0.0"}`}, nil, nil},
		{"a bash function's manifests are not installed", map[string]string{"main.sh": "echo 1\n", "requirements.txt": "-r " + secret + "\n"}, nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range c.files {
				write(t, filepath.Join(dir, "fn"), name, content, 0o644)
			}
			for name, target := range c.links {
				if err := os.Symlink(target, filepath.Join(dir, "fn", name)); err != nil {
					t.Fatal(err)
				}
			}
			before := hostState(t, host)
			f, err := LoadPath(filepath.Join(dir, "fn"))
			if after := hostState(t, host); !reflect.DeepEqual(after, before) {
				t.Errorf("loading changed the host folder:\nbefore %q\nafter  %q", before, after)
			}
			if c.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("loaded %+v; want it refused", f)
			}
			msg := err.Error()
			t.Logf("refused: %s", msg)
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q", w)
				}
			}
			if strings.Contains(msg, "host-secret-content") {
				t.Errorf("the host file's content is in the error")
			}
			// Load (what serve and check call) reports it the same way, and serves the rest.
			write(t, dir, "ok.py", py, 0o644)
			fns, errs := Load(dir)
			if fns["ok"] == nil || fns["fn"] != nil || len(errs) != 1 || errs[0].Error() != msg {
				t.Errorf("Load = %v, %v", fns, errs)
			}
		})
	}
}
