package manifest

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/agenthost/host/internal/runtimes"
)

// hostDir is a directory outside the function folder, standing for any host directory, with
// a file only its owner may read.
func hostDir(t *testing.T) (dir, secret string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "host")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	secret = filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("host-secret-content-7f3a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, secret
}

func TestCheckPackageJSON(t *testing.T) {
	host, secret := hostDir(t)
	vendor := map[string]string{
		"vendor/pkg/package.json": `{"name":"pkg","version":"1.0.0"}`,
		"vendor/pkg/index.js":     "module.exports = 42;\n",
		"vendor/x.tgz":            "not really a tarball",
		"patches/a.patch":         "",
	}
	cases := []struct {
		name   string
		pj     string
		files  map[string]string
		links  map[string]string // link -> target, inside the function folder
		want   []string          // substrings of the error, in order; none: accepted
		locals []string
	}{
		{name: "registry, tags, aliases, URLs", pj: `{"dependencies": {"a": "^1.2.3", "b": "latest", "c": "npm:d@1.0.0", "e": "npm:@s/e@^2",
			"f": "github:user/repo", "g": "user/repo", "h": "https://example.com/h.tgz", "i": "git+https://example.com/i.git", "j": "workspace:*", "k": "catalog:"},
			"devDependencies": {"l": "1"}, "overrides": {"a": {"b": "2.0.0"}}}`},
		{name: "local folder and tarball", pj: "{\n\"dependencies\": {\n\"pkg\": \"file:./vendor/pkg\",\n\"x\": \"./vendor/x.tgz\"\n},\n\"patchedDependencies\": {\"pkg@1.0.0\": \"patches/a.patch\"}\n}",
			locals: []string{"patches/a.patch", "vendor/pkg", "vendor/x.tgz"}},
		{name: "file: absolute", pj: "{\n  \"dependencies\": {\n    \"x\": \"file:" + host + "\"\n  }\n}",
			want: []string{"package.json:3: dependencies \"x\": \"file:" + host + "\"", "absolute path on the host", `"file:./vendor/name"`}},
		{name: "bare absolute path", pj: `{"dependencies": {"x": "` + host + `"}}`, want: []string{"package.json:1:", "absolute path"}},
		{name: "file: climbing out", pj: `{"dependencies": {"x": "file:../host"}}`, want: []string{"package.json:1:", "climbs out of the function folder"}},
		{name: "bare relative climbing out", pj: `{"dependencies": {"x": "../../host"}}`, want: []string{"climbs out"}},
		{name: "file: URL", pj: `{"dependencies": {"x": "file://` + host + `"}}`, want: []string{"file URL"}},
		{name: "home directory", pj: `{"dependencies": {"x": "file:~/secrets"}}`, want: []string{"home directory"}},
		{name: "link:", pj: `{"dependencies": {"x": "link:./vendor/pkg"}}`, want: []string{"link: or portal:", "symbolic link"}},
		{name: "portal:", pj: `{"dependencies": {"x": "portal:` + host + `"}}`, want: []string{"link: or portal:"}},
		{name: "git+file:", pj: `{"dependencies": {"x": "git+file://` + host + `/repo.git"}}`, want: []string{"git+file:", "host's disk"}},
		{name: "devDependencies", pj: `{"devDependencies": {"x": "file:` + host + `"}}`, want: []string{`devDependencies "x"`}},
		{name: "optionalDependencies", pj: `{"optionalDependencies": {"x": "file:` + host + `"}}`, want: []string{`optionalDependencies "x"`}},
		{name: "peerDependencies", pj: `{"peerDependencies": {"x": "file:` + host + `"}}`, want: []string{`peerDependencies "x"`}},
		{name: "nested override", pj: "{\"overrides\": {\n\"a\": {\n\"b\": \"file:" + host + "\"}}}", want: []string{"package.json:3: overrides \"a > b\""}},
		{name: "resolutions", pj: `{"resolutions": {"**/b": "file:` + host + `"}}`, want: []string{`resolutions "**/b"`}},
		{name: "catalog", pj: `{"workspaces": {"packages": [], "catalog": {"b": "file:` + host + `"}}}`, want: []string{`workspaces catalog "b"`}},
		{name: "alias of a path", pj: `{"dependencies": {"x": "npm:y@file:` + host + `"}}`, want: []string{"absolute path"}},
		{name: "workspace path", pj: `{"dependencies": {"x": "workspace:../host"}}`, want: []string{"climbs out"}},
		{name: "workspaces outside", pj: `{"workspaces": ["packages/*", "../*"]}`, want: []string{`workspaces "../*"`, "climbs out"}},
		{name: "patch file outside", pj: `{"patchedDependencies": {"a@1.0.0": "` + secret + `"}}`, want: []string{`patchedDependencies "a@1.0.0"`, "absolute path"}},
		{name: "missing local folder", pj: `{"dependencies": {"x": "file:./nope"}}`, want: []string{"does not exist in the function folder"}},
		{name: "the folder itself", pj: `{"dependencies": {"x": "file:."}}`, want: []string{"the function folder itself"}},
		{name: "link in the folder leading out", pj: `{"dependencies": {"x": "file:./vendor/out"}}`, links: map[string]string{"vendor/out": host},
			want: []string{"symbolic link leading out of the function folder"}},
		{name: "local folder holding a link out", pj: `{"dependencies": {"x": "file:./vendor/pkg"}}`, links: map[string]string{"vendor/pkg/leak": secret},
			want: []string{"holds vendor/pkg/leak, a symbolic link leading out"}},
		{name: "local folder depending on a host path", pj: `{"dependencies": {"x": "file:./vendor/dep"}}`,
			files: map[string]string{"vendor/dep/package.json": "{\"name\": \"dep\",\n\"dependencies\": {\"y\": \"file:../../../host\"}}"},
			want:  []string{"vendor/dep/package.json:2: dependencies \"y\"", "climbs out"}},
		{name: "every refusal is reported", pj: "{\"dependencies\": {\n\"x\": \"file:" + host + "\",\n\"y\": \"link:./vendor/pkg\"}}",
			want: []string{"package.json:2:", "package.json:3:"}},
		{name: "bun.lock resolving to a host path", pj: `{"dependencies": {"x": "1.0.0"}}`,
			files: map[string]string{"bun.lock": "{\n  \"lockfileVersion\": 1,\n  // a comment\n  \"packages\": {\n    \"x\": [\"x@file:" + host + "\", {}],\n  },\n}\n"},
			want:  []string{"bun.lock:5: package \"x\"", "absolute path"}},
		{name: "bun.lock with a scoped name and an @ in the path", pj: `{"dependencies": {"@s/x": "1.0.0"}}`,
			files: map[string]string{"bun.lock": `{"packages": {"@s/x": ["@s/x@file:` + host + `/@s/x", {}]}}`},
			want:  []string{"bun.lock:1:", "absolute path"}},
		{name: "bun.lock workspace outside", pj: `{"dependencies": {"x": "1.0.0"}}`,
			files: map[string]string{"bun.lock": `{"workspaces": {"": {}, "../host": {"name": "h"}}}`},
			want:  []string{`workspace "../host"`}},
		{name: "bun.lock as bun writes it", pj: `{"dependencies": {"pkg": "file:./vendor/pkg", "is-number": "7.0.0"}}`,
			files: map[string]string{"bun.lock": `{
  "lockfileVersion": 1,
  "workspaces": {
    "": {
      "dependencies": {
        "is-number": "7.0.0",
        "pkg": "file:./vendor/pkg",
      },
    },
  },
  "packages": {
    "is-number": ["is-number@7.0.0", "", {}, "sha512-41Cifkg6e8TylSpdtTpeLVMqvSBEVzTttHvERD741+pnZ8ANv0004MRL43QKPDlK9cGvNp6NZWZUBlbGXYxxng=="],

    "pkg": ["pkg@file:vendor/pkg", {}],
  }
}`}, locals: []string{"vendor/pkg"}},
		{name: "not JSON", pj: `{"dependencies": `, want: []string{"package.json is not valid JSON"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "fn")
			files := map[string]string{"main.ts": "export function main() {}\n", "package.json": c.pj}
			for k, v := range vendor {
				files[k] = v
			}
			for k, v := range c.files {
				files[k] = v
			}
			writeFiles(t, dir, files)
			for link, target := range c.links {
				if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
					t.Fatal(err)
				}
			}
			_, _, locals, err := Bun(dir)
			checkErr := Check(dir, "main.ts")
			if (err == nil) != (checkErr == nil) {
				t.Fatalf("Bun: %v, but Check: %v", err, checkErr)
			}
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if !slices.Equal(locals, c.locals) {
					t.Errorf("locals = %q, want %q", locals, c.locals)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted, want an error with %q", c.want)
			}
			var def *runtimes.DefinitionError
			if !errors.As(err, &def) {
				t.Errorf("%T is no *runtimes.DefinitionError: a run would be retried", err)
			}
			msg := err.Error()
			t.Logf("error: %s", msg)
			rest := msg
			for _, w := range c.want {
				k := strings.Index(rest, w)
				if k < 0 {
					t.Fatalf("error lacks %q (in order):\n%s", w, msg)
				}
				rest = rest[k+len(w):]
			}
			if !strings.HasPrefix(msg, dir+string(filepath.Separator)) {
				t.Errorf("error does not start with the file it is about: %s", msg)
			}
			if strings.Contains(msg, "host-secret-content") {
				t.Errorf("the host file's content is in the error: %s", msg)
			}
		})
	}
}

func TestCheckRequirements(t *testing.T) {
	_, secret := hostDir(t)
	const operator = "the host operator's choice (host serve --pip-index-url, --pip-find-links)"
	cases := []struct {
		name   string
		req    string
		want   []string // in order; none: accepted
		locals []string
	}{
		{name: "index requirements", req: "# pinned\nrequests==2.31.0  # comment\nfoo[bar]>=1; python_version > \"3.8\"\nzz==1.0 --hash=sha256:abcd\n--pre\n--prefer-binary\n--no-index\n"},
		{name: "URLs", req: "name @ https://example.com/name-1.0-py3-none-any.whl\nhttps://example.com/x-1.0-py3-none-any.whl\n"},
		{name: "a wheel inside", req: "./wheels/zz-1.0-py3-none-any.whl\nwheels/zz-1.0-py3-none-any.whl\n", locals: []string{"wheels/zz-1.0-py3-none-any.whl"}},
		{name: "-r", req: "requests\n-r " + secret + "\n", want: []string{"requirements.txt:2: \"-r " + secret + "\": -r is not allowed", "reads another requirements file", "list the requirements in this requirements.txt itself"}},
		{name: "-r attached", req: "-r" + secret, want: []string{"requirements.txt:1:", "-r is not allowed"}},
		{name: "--requirement=", req: "--requirement=" + secret, want: []string{"--requirement is not allowed"}},
		{name: "-c", req: "\n\n-c " + secret + "\n", want: []string{"requirements.txt:3:", "-c is not allowed", "constraints file", "name==1.2.3"}},
		{name: "--constraint", req: "--constraint " + secret, want: []string{"--constraint is not allowed"}},
		{name: "continued line", req: "requests\n-r \\\n  " + secret + "\n", want: []string{"requirements.txt:2:", "-r is not allowed"}},
		{name: "-e", req: "-e .", want: []string{"-e is not allowed", "builds a source tree"}},
		{name: "--editable", req: "--editable=git+https://example.com/x.git#egg=x", want: []string{"--editable is not allowed"}},
		{name: "--find-links", req: "--find-links /srv/wheels", want: []string{"--find-links is not allowed", operator}},
		{name: "-f", req: "-f https://example.com/wheels", want: []string{"-f is not allowed", operator}},
		{name: "--index-url", req: "--index-url=https://example.com/simple", want: []string{"--index-url is not allowed", operator}},
		{name: "-i", req: "-i https://example.com/simple", want: []string{"-i is not allowed"}},
		{name: "--extra-index-url", req: "--extra-index-url https://example.com/simple", want: []string{"--extra-index-url is not allowed"}},
		{name: "abbreviated option", req: "--req " + secret, want: []string{"--req is not allowed", "written out in full"}},
		{name: "sdists", req: "--no-binary :all:\n--only-binary :none:", want: []string{"requirements.txt:1:", "wheels only", "requirements.txt:2:", "wheels only"}},
		{name: "per-requirement build options", req: "zz==1.0 --config-settings=x=y", want: []string{"--config-settings is not allowed"}},
		{name: "absolute path", req: secret + ".whl", want: []string{"requirements.txt:1:", "absolute path on the host", "./wheels/name-1.2.3-py3-none-any.whl"}},
		{name: "file: URL", req: "file://" + secret, want: []string{"file: URL"}},
		{name: "direct reference to a file: URL", req: "zz @ file://" + secret, want: []string{"file: URL"}},
		{name: "VCS over file:", req: "git+file://" + filepath.Dir(secret) + "#egg=x", want: []string{"file: URL"}},
		{name: "climbing out", req: "../../x-1.0-py3-none-any.whl", want: []string{"climbs out of the function folder"}},
		{name: "home", req: "~/x-1.0-py3-none-any.whl", want: []string{"home directory"}},
		{name: "a folder inside is built", req: "./wheels", want: []string{"not a wheel file"}},
		{name: "environment variables", req: "${HOME}/x.whl", want: []string{"${...}", "write the value itself"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "fn")
			writeFiles(t, dir, map[string]string{"main.py": "def main(): pass\n", "requirements.txt": c.req,
				"wheels/zz-1.0-py3-none-any.whl": "a wheel"})
			b, locals, err := Pip(dir)
			if checkErr := Check(dir, "main.py"); (err == nil) != (checkErr == nil) {
				t.Fatalf("Pip: %v, but Check: %v", err, checkErr)
			}
			if len(c.want) == 0 {
				if err != nil || string(b) != c.req {
					t.Fatalf("refused: %v", err)
				}
				if !slices.Equal(locals, c.locals) {
					t.Errorf("locals = %q, want %q", locals, c.locals)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted, want an error with %q", c.want)
			}
			var def *runtimes.DefinitionError
			if !errors.As(err, &def) {
				t.Errorf("%T is no *runtimes.DefinitionError: a run would be retried", err)
			}
			msg := err.Error()
			t.Logf("error: %s", msg)
			rest := msg
			for _, w := range c.want {
				k := strings.Index(rest, w)
				if k < 0 {
					t.Fatalf("error lacks %q (in order):\n%s", w, msg)
				}
				rest = rest[k+len(w):]
			}
			if !strings.HasPrefix(msg, filepath.Join(dir, "requirements.txt")+":") {
				t.Errorf("error does not start with file:line: %s", msg)
			}
			if strings.Contains(msg, "host-secret-content") {
				t.Errorf("the host file's content is in the error: %s", msg)
			}
		})
	}
}

// TestCheckByRuntime: only the manifest the entry's runtime installs is checked.
func TestCheckByRuntime(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"package.json": `{"dependencies": {"x": "file:/etc"}}`, "requirements.txt": "-r /etc/passwd\n"})
	for entry, refused := range map[string]bool{"main.ts": true, "main.mjs": true, "main.py": true, "main.sh": false} {
		if err := Check(dir, entry); (err != nil) != refused {
			t.Errorf("%s: %v, want refused %v", entry, err, refused)
		}
	}
	if err := Check(t.TempDir(), "main.ts"); err != nil {
		t.Errorf("no manifests: %v", err)
	}
}

// TestManifestMustBeAFile: a manifest that is a link (to a host file the host could read and
// quote) or a fifo (which would hang the load) is refused without being read.
func TestManifestMustBeAFile(t *testing.T) {
	_, secret := hostDir(t)
	cases := []struct {
		name, entry, manifest string
		make                  func(p string) error
		want                  string
	}{
		{"requirements.txt linked to a host file", "main.py", "requirements.txt", func(p string) error { return os.Symlink(secret, p) }, "is a symbolic link"},
		{"package.json linked to a host file", "main.ts", "package.json", func(p string) error { return os.Symlink(secret, p) }, "is a symbolic link"},
		{"bun.lock linked to a host file", "main.ts", "bun.lock", func(p string) error { return os.Symlink(secret, p) }, "is a symbolic link"},
		{"requirements.txt a fifo", "main.py", "requirements.txt", func(p string) error { return syscall.Mkfifo(p, 0o644) }, "is not a regular file"},
		{"package.json a fifo", "main.ts", "package.json", func(p string) error { return syscall.Mkfifo(p, 0o644) }, "is not a regular file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, map[string]string{c.entry: ""})
			if c.manifest == "bun.lock" {
				writeFiles(t, dir, map[string]string{"package.json": `{"dependencies": {"a": "1"}}`})
			}
			if err := c.make(filepath.Join(dir, c.manifest)); err != nil {
				t.Fatal(err)
			}
			err := Check(dir, c.entry)
			var def *runtimes.DefinitionError
			if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, c.manifest)+" "+c.want) || !errors.As(err, &def) {
				t.Fatalf("Check = %v, want a definition error with %q", err, c.want)
			}
			if strings.Contains(err.Error(), "host-secret-content") {
				t.Errorf("the host file's content is in the error: %v", err)
			}
		})
	}
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
